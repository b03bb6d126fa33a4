# The two commands of the README. Both run scripts/setup.sh first (idempotent).
.PHONY: setup quickstart test test-slow test-all test-fast lint

setup:
	bash scripts/setup.sh

quickstart: setup
	.venv/bin/python -m bench.sweep sweeps/quickstart.yaml
	.venv/bin/python -m bench.report
	@echo "report page: results/report/index.html (opens offline; python -m bench.report --open)"

# the suite without the tests marked slow (full-scale learnability runs, crash, ownership and SLURM
# scenarios: `make test-slow`, which CI runs too); then the float numerics tests once more on
# torch's AVX2 paths (summation orders of machines without AVX-512): a tolerance tuned on one CPU
# fails there
test: setup
	.venv/bin/python -m pytest -q -m "not slow"
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
	  .venv/bin/python -m pytest -q -p no:cacheprovider tests/bench/test_reference_numerics.py tests/bench/test_numerics.py

# the slow tests alone (CI runs them after `make test`), and everything at once
test-slow: setup
	.venv/bin/python -m pytest -q -m slow

test-all: setup
	.venv/bin/python -m pytest -q

test-fast: setup
	.venv/bin/python -m pytest -q -m "not slow and not slurm"

lint: setup
	.venv/bin/ruff check .
