"""The GSM8K sandbox: untrusted model-written programs run in fresh, isolated processes.
:mod:`~bench.evaluate.sandbox.runner` (:class:`~bench.evaluate.sandbox.runner.Sandbox`: the
worker slots, the isolation probe, one run), :mod:`~bench.evaluate.sandbox.levels` (the isolation
levels), :mod:`~bench.evaluate.sandbox.proc` (the parent's side of one cold child process),
:mod:`~bench.evaluate.sandbox.warm` and :mod:`~bench.evaluate.sandbox.zygote` (the warm path: a
pre-imported parent inside the sandbox that forks a child per program),
:mod:`~bench.evaluate.sandbox.result` (what a program did, read from the result channel),
:mod:`~bench.evaluate.sandbox.cache` (the verdict cache) and
:mod:`~bench.evaluate.sandbox.child` (the child's side, passed as text);
docs/gsm8k-sandbox.md."""
