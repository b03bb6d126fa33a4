"""Where the likelihood kind lived before the kinds had a folder of their own: a job pickled then
(a queued SLURM array, a local job's ``job.pkl``) names its cells' class by this path. The kind is
:mod:`bench.kinds.likelihood`."""

from bench.kinds.likelihood import KIND, LikelihoodCell

__all__ = ["KIND", "LikelihoodCell"]
