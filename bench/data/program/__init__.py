"""Tasks whose answers are executed programs: :mod:`~bench.data.program.task` (their base,
:class:`~bench.data.program.task.ProgramTask`), :mod:`~bench.data.program.gsm8k` (the GSM8K test
set and task), :mod:`~bench.data.program.tinygsm` (TinyGSM training data),
:mod:`~bench.data.program.arith` (the CPU stand-in), and the token-length statistics and figure
of TinyGSM-schema data (:mod:`~bench.data.program.length_stats`,
:mod:`~bench.data.program.length_figure`; ``python -m bench.data tinygsm --stats``)."""
