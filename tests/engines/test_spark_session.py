"""``icemor.engines.spark.session``'s driver heap: a documented share of the machine.

No JVM here: the value :func:`session` gives Spark is computed, and given only when no
``spark.driver.memory`` is configured (the Spark 4 suite checks it on a started JVM:
``tests_spark4/test_session.py``).
"""

from __future__ import annotations

import os

import pytest

from icemor.engines.spark import default_driver_memory

GIB = 2**30


@pytest.mark.parametrize(
    ("total", "heap"),
    [
        (2 * GIB, "1024m"),  # a quarter is 512 MiB: Spark's own 1 GiB floor
        (24 * GIB, "6144m"),  # a quarter
        (64 * GIB, "8192m"),  # a quarter is 16 GiB: capped at 8
        (0, "1024m"),  # unknown: the floor
    ],
)
def test_default_driver_memory_is_a_quarter_between_1_and_8_gib(total: int, heap: str) -> None:
    assert default_driver_memory(total) == heap


def test_default_driver_memory_reads_this_machine() -> None:
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_driver_memory() == f"{min(max(1024, total // 4 // 2**20), 8192)}m"


class _Builder:
    """Records what :func:`session` configures; builds nothing."""

    def __init__(self) -> None:
        self.conf: dict[str, str] = {}

    def master(self, _: str) -> _Builder:
        return self

    def appName(self, _: str) -> _Builder:
        return self

    def config(self, key: str, value: str) -> _Builder:
        self.conf[key] = value
        return self

    def getOrCreate(self) -> object:
        context = type("SparkContext", (), {"setLogLevel": lambda self, level: None})()
        return type("SparkSession", (), {"sparkContext": context})()


def test_session_runs_workers_with_the_interpreter_conf_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark takes the workers' interpreter from PYSPARK_PYTHON when the context starts, not
    from ``spark.pyspark.python``: a conf naming one (a packed environment's) must set it."""
    import sys

    from pyspark.sql import SparkSession

    from icemor.engines.spark import session

    builder = _Builder()
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.setattr(SparkSession, "builder", builder)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # an earlier session's default
    session(conf={"spark.pyspark.python": "./env/bin/python"})
    assert os.environ["PYSPARK_PYTHON"] == "./env/bin/python"
    assert builder.conf["spark.pyspark.python"] == "./env/bin/python"

    # without one: this interpreter, or what the environment already says (spark-submit's)
    monkeypatch.delenv("PYSPARK_PYTHON")
    session()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    session()
    assert os.environ["PYSPARK_PYTHON"] == "/opt/python/bin/python3"
