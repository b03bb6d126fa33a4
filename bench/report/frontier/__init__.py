"""The ``frontier`` task kind (OWT: Gen. PPL against unigram entropy): ``section`` (its report
section and tables), ``data`` (its cells, Pareto sets, degenerate cells and the scalar), ``draw``
(its figures), ``paper`` (the paper's frontier figures by label)."""
