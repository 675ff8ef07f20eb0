# Two commands set up a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.icemor-installed
TEST_STAMP := $(VENV)/.icemor-test-installed
ORACLE_ENV := .cache/oracle/oracle.env.json

.PHONY: demo test lint typecheck unit oracle bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP) $@

demo: $(STAMP)
	$(VENV)/bin/icemor demo

# The reference implementation: Java 17, Iceberg 1.10.2's Spark runtime, relocated Jackson,
# SQLite JDBC. Installs what is missing (apt-get / PyPI) and caches the built jar.
oracle: $(TEST_STAMP)
	$(PY) tools/prepare_oracle.py

$(ORACLE_ENV): $(TEST_STAMP) tools/prepare_oracle.py
	$(PY) tools/prepare_oracle.py

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests tools benchmarks
	$(VENV)/bin/ruff format --check src tests tools benchmarks
	$(VENV)/bin/mypy

test: $(TEST_STAMP) $(ORACLE_ENV) lint
	$(VENV)/bin/pytest

bench: $(TEST_STAMP) $(ORACLE_ENV)
	$(PY) benchmarks/bench_scan.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
