"""What work costs, predicted before a sweep runs (:mod:`bench.cost.model`, calibrated by
``python -m bench.perf calibrate``); measured per cell by :mod:`bench.measure` (at the bottom of
the house: the jobs and the trainer use it, it imports nothing of bench)."""
