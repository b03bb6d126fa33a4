"""What work costs: measured per cell (:mod:`bench.cost.measure`), predicted before a sweep runs
(:mod:`bench.cost.model`, calibrated by ``python -m bench.perf calibrate``)."""
