"""The GSM8K sandbox: untrusted model-written programs run in fresh, isolated interpreters.
:mod:`~bench.evaluate.sandbox.runner` (:class:`~bench.evaluate.sandbox.runner.Sandbox`: the
worker slots, the isolation probe, one run), :mod:`~bench.evaluate.sandbox.levels` (the isolation
levels), :mod:`~bench.evaluate.sandbox.proc` (the parent's side of one child process),
:mod:`~bench.evaluate.sandbox.result` (what a program did, read from the result channel) and
:mod:`~bench.evaluate.sandbox.child` (the child's bootstrap, passed as text);
docs/gsm8k-sandbox.md."""
