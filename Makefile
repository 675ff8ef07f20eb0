# Two commands set up a fresh machine: `make demo` and `make test` (see README.md).
#
# One venv per purpose, none installing into another's: `.venv` holds the test pins (PySpark
# 3.5 for the Iceberg Java oracle, polars 1.x, ...) for test, test-fast, lint, oracle and bench;
# `.venv-demo` is a user's environment, `pip install -e '.[spark,report]'` with the newest
# versions pyproject.toml allows (PySpark 4.x), for demo; `.venv-spark4` is the PySpark 4.x suite's.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TEST_STAMP := $(VENV)/.icemor-test-installed
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.icemor-installed
ORACLE_ENV := .cache/oracle/oracle.env.json
# DuckDB 1.5.5 with its iceberg extension, and lakana-server with its migrated database, each
# beside the test environment (tests/realservers)
REALSERVERS_DUCKDB := .cache/realservers/duckdb-1.5.5/.prepared
REALSERVERS_LAKANA := .cache/realservers/lakana-0.20.0/migrated.db
REALSERVERS := $(REALSERVERS_DUCKDB) $(REALSERVERS_LAKANA)

# The coverage floor of `make test`: percent of src/icemor's lines run by tests/ and tests_spark4/,
# in the test processes, their CLI subprocesses and Spark's Python workers (pyproject.toml,
# [tool.coverage.run]); a few points under the figure measured.
COV_FAIL_UNDER := 89

.PHONY: demo test test-fast lint oracle bench bench-doc test-spark4 test-faults-nonroot clean

# Debian's own python3 ships venv separately (python3-venv): install it when it is missing.
$(VENV)/bin/python $(DEMO_VENV)/bin/python:
	$(PYTHON) -m venv $(@D:/bin=) || { rm -rf $(@D:/bin=) && apt-get update -qq && \
		apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(@D:/bin=); }
	$@ -m pip install --quiet --upgrade pip

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	# headless Chromium renders the HTML health report in tests/test_report_html.py
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }
	touch $@

$(DEMO_STAMP): pyproject.toml | $(DEMO_VENV)/bin/python
	$(DEMO_VENV)/bin/python -m pip install --quiet -e '.[spark,report]'
	touch $@

# the whole pipeline on Spark local[*] (DEMO_ENGINE=local: the embedded engine), < 3 min on 2 cores
DEMO_ENGINE ?= spark
demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/icemor demo --engine $(DEMO_ENGINE)

# The reference implementation: Java 17, Iceberg 1.10.2's Spark runtime, relocated Jackson,
# SQLite JDBC. Installs what is missing (apt-get / PyPI) and caches the built jar.
oracle: $(TEST_STAMP)
	$(PY) tools/prepare_oracle.py

$(ORACLE_ENV): $(TEST_STAMP) tools/prepare_oracle.py
	$(PY) tools/prepare_oracle.py

# The real-server tier's DuckDB and lakana-server (from PyPI; its tests would make them too, when
# missing, in the tests' time)
$(REALSERVERS_DUCKDB): $(TEST_STAMP) tools/prepare_realservers.py
	$(PY) tools/prepare_realservers.py duckdb

$(REALSERVERS_LAKANA): $(TEST_STAMP) tools/prepare_realservers.py
	$(PY) tools/prepare_realservers.py lakana

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests tools benchmarks
	$(VENV)/bin/ruff format --check src tests tools benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo --no-cache
	$(PY) tools/check_commit_path.py
	$(PY) tools/check_borrowed.py
	$(PY) tools/check_import_cycles.py

# Everything (what CI runs): lint, then every test, Iceberg Java's and the slow ones too, with
# the coverage of src/icemor.
test: $(TEST_STAMP) $(ORACLE_ENV) $(REALSERVERS) lint
	rm -f .coverage .coverage.*
	$(VENV)/bin/pytest --cov=icemor --cov-report= --durations=30
	$(MAKE) --no-print-directory test-faults-nonroot
	$(MAKE) --no-print-directory test-spark4 SPARK4_COV="--cov=icemor --cov-append --cov-report="
	@# data files of worker processes that ended after a run's own combine (one cut short by a
	@# killed worker is unusable: coverage skips it with a warning, and that must not fail the run)
	-if ls .coverage.* >/dev/null 2>&1; then $(VENV)/bin/coverage combine --append -q; fi
	$(VENV)/bin/coverage report --fail-under=$(COV_FAIL_UNDER)

# The fault suite again as a user other than root (`nobody`, when run as root): variants that a
# permission stops show only there; each run prints what it did not run (tests/faults/conftest.py).
# The tests that start a JVM (Spark, Iceberg Java) ran as root; permissions do not change them.
test-faults-nonroot: $(TEST_STAMP)
	$(PY) tools/run_as_nonroot.py -- $(abspath $(VENV))/bin/pytest -q -p no:cacheprovider -m "not oracle" tests/faults

# No JVM (no oracle or Spark test) and no slow test: a few minutes, no `make oracle` needed.
test-fast: $(TEST_STAMP)
	$(VENV)/bin/pytest -m "not oracle and not slow"

ORACLE_JAVA_HOME = $$($(PY) -c 'import json;print(json.load(open("$(ORACLE_ENV)"))["java_home"])')

# Each benchmark writes benchmarks/results/<name>.json (benchmarks/_report.py); the last line
# renders them into docs/benchmarks.md (with benchmarks/README.md, the method), as bench-doc does.
bench: $(TEST_STAMP) $(ORACLE_ENV) $(SPARK4_STAMP)
	$(PY) benchmarks/bench_scan.py
	@# the `icemor` data source (PySpark 4.x) against to_spark on bench_scan's 10 M-row tables
	JAVA_HOME=$(ORACLE_JAVA_HOME) $(SPARK4_VENV)/bin/python benchmarks/bench_datasource.py --data-dir bench-data
	$(PY) benchmarks/bench_write.py
	$(PY) benchmarks/bench_maintenance.py
	$(PY) benchmarks/bench_checksum.py
	$(PY) benchmarks/bench_cdc.py
	$(PY) benchmarks/bench_cdc_position.py
	$(PY) benchmarks/bench_changes.py
	$(PY) benchmarks/bench_v3_delete.py
	$(PY) benchmarks/bench_optimize.py
	$(PY) benchmarks/bench_streams.py
	$(PY) benchmarks/bench_cdc_compaction.py
	$(PY) benchmarks/bench_small_files.py
	$(PY) benchmarks/bench_spark_memory.py
	$(PY) benchmarks/bench_spark_append.py
	$(PY) benchmarks/bench_rest_s3.py
	$(PYTHON) tools/render_benchmarks.py

# docs/benchmarks.md again from benchmarks/README.md and benchmarks/results/ (standard library only)
bench-doc:
	$(PYTHON) tools/render_benchmarks.py

# The Spark engine on PySpark 4.x (tests_spark4/, docs/spark.md), in a venv of its own made once
# (again only when pyproject.toml changes): `pip install -e .[spark]` with the newest 4.x (and the
# Spark Connect client's libraries, for tests_spark4/test_connect.py). Iceberg
# Java has no Spark 4 runtime here, so the main venv's oracle (Spark 3.5) first writes the tables
# only Java can (v3 deletion vectors), and last reads every table the suite wrote.
SPARK4_VENV := .venv-spark4
SPARK4_STAMP := $(SPARK4_VENV)/.icemor-installed
SPARK4_OUT := .cache/spark4
SPARK4_PYSPARK := pyspark[connect]==4.3.*
# `make test` measures the coverage of this suite too (added to the main suite's)
SPARK4_COV ?=

$(SPARK4_STAMP): pyproject.toml
	rm -rf $(SPARK4_VENV)
	$(PYTHON) -m venv $(SPARK4_VENV)
	$(SPARK4_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SPARK4_VENV)/bin/python -m pip install --quiet -e '.[spark]' '$(SPARK4_PYSPARK)' \
		'pytest>=8,<10' 'pytest-timeout>=2.3,<3' 'pytest-cov>=5,<8' 'coverage>=7.10,<8'
	touch $@

test-spark4: $(SPARK4_STAMP) $(ORACLE_ENV)
	rm -rf $(SPARK4_OUT)
	$(PY) tools/spark4_check.py prepare $(SPARK4_OUT)
	JAVA_HOME=$(ORACLE_JAVA_HOME) \
		ICEMOR_SPARK4_OUT=$(SPARK4_OUT) $(SPARK4_VENV)/bin/pytest -q -p no:cacheprovider $(SPARK4_COV) tests_spark4
	$(PY) tools/spark4_check.py check $(SPARK4_OUT)

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(SPARK4_VENV) .cache .pytest_cache .mypy_cache .ruff_cache
