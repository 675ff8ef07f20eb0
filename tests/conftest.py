"""Shared fixtures: an icemor home with its pyiceberg catalog, and Iceberg Java (the oracle) on it."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from oracle import CATALOG_NAME, IcebergJava, OracleUnavailableError, load_oracle_env

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyspark.sql import SparkSession

_namespace_counter = itertools.count(1)

# Fixtures that start a JVM (Spark with Iceberg Java): a test using one is an `oracle` test, so
# that `make test-fast` (-m "not oracle") never starts Spark.
_JVM_FIXTURES = frozenset({"oracle", "spark"})


# The slowest tests without a JVM (each 5-65 s under load; together about half of the no-JVM
# tests' time): left out of `make test-fast` (-m "not slow"), run by `make test`. A node id, or
# a prefix of one (a module, a parametrized test).
_SLOW = (
    "tests/maintenance/test_compaction_concurrency.py::",
    "tests/ops/test_delete_concurrency.py::",
    "tests/ops/test_apply_changes_model.py::test_local_engine_matches_the_model[",
    "tests/ops/test_write_failures.py::test_disk_full_in_the_middle_of_every_file_leaves_nothing[",
    "tests/ops/test_write_failures.py::test_sigterm_removes_what_was_written[",
    "tests/ops/test_delete_crash.py::test_delete_killed_before_the_swap_leaves_the_old_snapshot[",
    "tests/faults/test_write_fault_suite.py::test_concurrent_writers_replay_on_a_model",
    "tests/maintenance/test_optimize.py::test_watch_against_delete_and_cdc_writers",
    "tests/maintenance/test_optimize.py::test_watch_keeps_up_with_three_writers[",
    # subprocesses and whole-CLI runs of 4-8 s each: kept out of the fast tier's 3 minutes
    "tests/test_s3.py::test_every_maintenance_action",
    "tests/test_s3.py::test_the_cli_on_an_s3_warehouse",
    "tests/test_import.py::test_local_engine_and_cli_work_without_pyspark",
    "tests/test_import.py::test_spark_engine_without_pyspark_is_one_line_naming_the_extra",
    "tests/test_cli.py::test_named_catalog_from_pyiceberg_env_config",
)


_CHECK_EVERY_TABLE = "tests/maintenance/test_check_every_table.py::"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``oracle`` every test that starts a JVM: through a fixture, or an ``engine`` parameter
    naming Spark (such tests take the ``spark`` fixture with ``request.getfixturevalue``). Mark
    ``slow`` the tests of ``_SLOW``."""
    for item in items:
        if item.nodeid.startswith(_SLOW):
            item.add_marker(pytest.mark.slow)
        fixtures = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("engine") if callspec is not None else None
        if fixtures & _JVM_FIXTURES or (isinstance(engine, str) and engine.startswith("spark")):
            item.add_marker(pytest.mark.oracle)
    # `check` over every table the session built: last, and only when others use the shared catalog
    last = [i for i in items if i.nodeid.startswith(_CHECK_EVERY_TABLE)]
    if last:
        items[:] = [i for i in items if i not in last]
        if any("catalog" in getattr(i, "fixturenames", ()) or "oracle" in getattr(i, "fixturenames", ())
               for i in items):  # fmt: skip
            items.extend(last)


@pytest.fixture(scope="session")
def icemor_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An icemor home (``catalog.db`` and ``warehouse/``) for the session, exported as ``ICEMOR_HOME``."""
    home = tmp_path_factory.mktemp("icemor_home")
    (home / "warehouse").mkdir()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("ICEMOR_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def catalog(icemor_home: Path) -> SqlCatalog:
    """The pyiceberg SqlCatalog of the icemor home, configured as icemor's embedded catalog.

    It creates the catalog tables, which must exist before Iceberg Java starts (see
    ``oracle.ensure_catalog_tables``).
    """
    return SqlCatalog(
        CATALOG_NAME,
        uri=f"sqlite:///{icemor_home}/catalog.db",
        warehouse=f"file://{icemor_home}/warehouse",
    )


@pytest.fixture(scope="session")
def oracle(icemor_home: Path, catalog: SqlCatalog) -> Iterator[IcebergJava]:
    """Iceberg Java 1.10.2 on Spark 3.5 over the same catalog and warehouse; started once per session.

    Fails (never skips) when the oracle has not been prepared with ``make oracle``.
    """
    try:
        load_oracle_env()
    except OracleUnavailableError as exc:
        problem: str | None = str(exc)
    else:
        problem = None
    if problem is not None:
        # Outside the except block, so the report is the one line saying what to run.
        pytest.fail(problem, pytrace=False)
    java = IcebergJava(icemor_home, catalog_name=catalog.name)
    yield java
    java.stop()


@pytest.fixture(scope="session")
def spark(oracle: IcebergJava) -> SparkSession:
    """The oracle's SparkSession: a process has one SparkContext, so Spark tests share it."""
    return oracle.spark


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh icemor home for one test, exported as ``ICEMOR_HOME`` (the embedded catalog's)."""
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    """A four-row Parquet file (id, cat with a NULL, ts) that CLI tests create tables from."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1, 2, 3, 4], pa.int64()),
                "cat": ["a", "b", None, "a"],
                "ts": pa.array([0, 86_400_000_000, 2 * 86_400_000_000, 3], pa.timestamp("us")),
            }
        ),
        path,
    )
    return path


@pytest.fixture
def ns(request: pytest.FixtureRequest, catalog: SqlCatalog) -> str:
    """A namespace of its own for the test, created in the catalog; named after the test."""
    base = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower()).strip("_")[:48]
    name = f"{base}_{next(_namespace_counter)}"
    catalog.create_namespace(name)
    return name
