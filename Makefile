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
	$(PY) -m benchmarks.results --jobs 2 && $(PY) -m benchmarks.protocol && $(PY) -m benchmarks.pages

bench-study: .venv
	$(PY) -m benchmarks.study --jobs 2 && $(PY) -m benchmarks.pages

# Each measures and writes docs/<page>.json; python -m benchmarks.pages writes the pages from it.
bench-throughput: .venv
	$(PY) -m benchmarks.throughput --repeats 3 --steps 1 --warmup 1 --batch-size 32 --data-images 256 && $(PY) -m benchmarks.pages

bench-compile: .venv
	$(PY) -m benchmarks.throughput --compile --grids 8 --eval-img-sizes 32 48 64 --repeats 3 && $(PY) -m benchmarks.pages

bench-export: .venv
	$(PY) -m benchmarks.export --threads 1 --batch-size 16 --steps 1 --repeats 3 && $(PY) -m benchmarks.pages

bench-data: .venv
	$(PY) -m benchmarks.data_loading --images 400 --repeats 5 && $(PY) -m benchmarks.pages

bench-diagnostics: .venv
	$(PY) -m benchmarks.diagnostics && $(PY) -m benchmarks.pages

.PHONY: train test lint format slow notebooks bench-results bench-study bench-throughput bench-compile \
	bench-export bench-data bench-diagnostics
