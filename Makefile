# Conveniences over the README's commands. `make test` is what CI runs (.ci/run).
PY := .venv/bin/python

.venv:
	python3 -m venv .venv && .venv/bin/pip install -q torch==2.14.1 torchvision==0.29.1 -e ".[dev]"

train: .venv
	$(PY) train.py --pos rope2d

test:
	bash .ci/run

lint: .venv
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format: .venv
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .

slow: .venv
	$(PY) -m pytest -q -m slow

# Execute the notebooks in place on the results in docs/ (they are stored with their outputs; the tests
# re-execute them and compare the text).
notebooks: .venv
	$(PY) notebooks/execute.py

bench-results: .venv
	$(PY) benchmarks/results.py

bench-resolution: .venv
	$(PY) benchmarks/resolution_transfer.py

bench-throughput: .venv
	$(PY) benchmarks/throughput.py --repeats 8 --write docs/performance.md

.PHONY: train test lint format slow notebooks bench-results bench-resolution bench-throughput
