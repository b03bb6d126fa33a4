"""The OpenWebText task family (paper, "Language Modeling on OpenWebText"):
:mod:`~bench.data.owt.task` (the task: options, data, Gen. PPL evaluation) and
:mod:`~bench.data.owt.blocks` (its corpus and the memory-mapped block cache)."""
