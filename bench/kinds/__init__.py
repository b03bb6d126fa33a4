"""The kinds of cells the harness ships (the job layer; :mod:`bench.kind` is their protocol), one
module each, registered in :data:`bench.registry.KINDS`:

- :mod:`bench.kinds.train`: a model trained here (a train cell);
- :mod:`bench.kinds.imported`: a model converted from a checkpoint (an import cell);
- :mod:`bench.kinds.sample`: a model's samples, scored (a sample cell; its predicted cost:
  :mod:`bench.kinds.sample_cost`);
- :mod:`bench.kinds.likelihood`: a model's likelihood on one dataset (a likelihood cell).

Nothing imports these modules but the registry (and tests): the planner, the jobs, the cost
model, the views and the rehearsal reach a kind as ``registry.KINDS[cell.kind]``.
"""
