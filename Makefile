# The two commands of the README. Both run scripts/setup.sh first (idempotent).
.PHONY: setup quickstart test test-fast lint

setup:
	bash scripts/setup.sh

quickstart: setup
	.venv/bin/python -m bench.sweep sweeps/quickstart.yaml
	.venv/bin/python -m bench.report
	@echo "report page: results/report/index.html (opens offline; python -m bench.report --open)"

test: setup
	.venv/bin/python -m pytest -q

test-fast: setup
	.venv/bin/python -m pytest -q -m "not slow and not slurm"

lint: setup
	.venv/bin/ruff check .
