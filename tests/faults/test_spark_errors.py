"""Errors raised inside Spark reach the user as icemor's one line (PySpark 3.5, the oracle's session).

An icemor error raised in a Spark task (a file missing, a duplicate MERGE key, rows that do not fit)
or Spark's refusal of a file icemor planned comes back to the driver inside Spark's exception
(``Py4JJavaError``, ``PythonException``, ``AnalysisException``), icemor's line deep in a Python
traceback. Where icemor makes the Spark call (``icemor.spark.read/write/sql``, a table's Spark
work) the user gets that icemor error itself: its class, its one line first, Spark's exception as
``__cause__``; where user code waits on Spark (``df.collect()``), ``icemor.spark.errors()`` does the
same. Errors that are not icemor's pass unchanged. The CLI, on icemor's own quiet session, prints
a duplicate MERGE key as its one line and nothing before it (no task stack trace).

Tables live in a home of each test's own (the ``home`` fixture): their files are deleted on
purpose, and the session's shared catalog must stay clean.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
import icemor.spark
from faults import local_path
from icemor.exceptions import IcemorError, InvalidArgumentError, MissingFileError
from icemor.ops.merge import DUPLICATE_MATCH

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icemor.table import Table

pytestmark = pytest.mark.oracle

FEW_LINES = 2


def _table(name: str, n: int = 20) -> Table:
    return icemor.create_table(
        name, pa.table({"id": pa.array(range(n), pa.int64()), "v": [f"v{i}" for i in range(n)]})
    )


def _lose_data_files(table: Table) -> list[str]:
    """Delete every data file of the table's current snapshot; their URIs as the metadata has them."""
    uris = sorted({task.file.file_path for task in table.pyiceberg.scan().plan_files()})
    for uri in uris:
        os.remove(local_path(uri))
    return uris


def _icemors_line(error: BaseException, cls: type[IcemorError], starts: str) -> str:
    """``error`` is icemor's ``cls`` whose first line starts with ``starts``, in at most a few lines,
    chained from Spark's exception when it came from Spark; its first line."""
    assert isinstance(error, cls), f"{type(error).__module__}.{type(error).__name__}: {str(error)[:2000]}"
    lines = str(error).splitlines()
    assert lines[0].startswith(starts), lines[0]
    assert len(lines) <= FEW_LINES, lines
    return lines[0]


def _from_spark(error: BaseException) -> None:
    cause = error.__cause__
    assert cause is not None
    assert type(cause).__module__.startswith(("pyspark.", "py4j.")), type(cause)


def _snapshot(name: str) -> int | None:
    return icemor.load_table(name).pyiceberg.metadata.current_snapshot_id


def test_a_write_error_is_icemors_line(spark: SparkSession, home: Path) -> None:
    """``icemor.spark.write``: a schema refused on the driver, rows refused in a task and an
    overwrite whose per-file work meets a missing data file are each icemor's one line."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    table = _table("errs.t")
    wrong = spark.createDataFrame([(1, 2)], "id bigint, w bigint")
    with pytest.raises(IcemorError) as err:
        icemor.spark.write(wrong, "errs.t")
    _icemors_line(err.value, InvalidArgumentError, "the Spark DataFrame does not match the schema of errs.t")

    icemor.create_table("errs.req", Schema(NestedField(1, "id", LongType(), required=True)))
    nulls = spark.createDataFrame([(1,), (None,)], "id bigint")
    with pytest.raises(IcemorError) as err:
        icemor.spark.write(nulls, "errs.req")
    _icemors_line(err.value, InvalidArgumentError, "column 'id' of errs.req is required (NOT NULL)")
    _from_spark(err.value)

    lost = _lose_data_files(table)
    before = _snapshot("errs.t")
    rows = spark.createDataFrame([(1, "new")], "id bigint, v string")
    with pytest.raises(IcemorError) as err:
        icemor.spark.write(rows, "errs.t", mode="overwrite", where="id < 3")
    assert (
        _icemors_line(err.value, MissingFileError, "data file not found: ")
        == f"data file not found: {lost[0]}"
    )
    _from_spark(err.value)
    assert _snapshot("errs.t") == before


def test_a_duplicate_merge_key_is_icemors_line(spark: SparkSession, home: Path) -> None:
    """A MERGE whose source matches a target row twice (Spark's cardinality rule), through
    ``icemor.spark.sql`` and ``table.merge(spark=...)``: icemor's one line; and a MERGE whose
    target lost a data file: the missing file, in icemor's words."""
    table = _table("errs.m")
    before = _snapshot("errs.m")
    spark.range(0, 5).union(spark.range(2, 3)).selectExpr("id", "'x' AS v").createOrReplaceTempView(
        "errs_dup"
    )
    with pytest.raises(IcemorError) as err:
        icemor.spark.sql(
            spark, "MERGE INTO errs.m t USING errs_dup s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *"
        )
    assert _icemors_line(err.value, InvalidArgumentError, DUPLICATE_MATCH) == DUPLICATE_MATCH
    _from_spark(err.value)
    source = spark.table("errs_dup")
    with pytest.raises(IcemorError) as err:
        table.merge(source, "t.id = s.id", spark=spark).when_matched_update_all().execute()
    assert _icemors_line(err.value, InvalidArgumentError, DUPLICATE_MATCH) == DUPLICATE_MATCH
    assert _snapshot("errs.m") == before

    lost = _lose_data_files(table)
    with pytest.raises(IcemorError) as err:
        icemor.spark.sql(
            spark, "MERGE INTO errs.m t USING errs_dup s ON t.id = s.id WHEN MATCHED THEN DELETE"
        )
    assert _icemors_line(err.value, MissingFileError, "file not found: ") == f"file not found: {lost[0]}"
    _from_spark(err.value)
    assert _snapshot("errs.m") == before


def test_a_read_error_is_icemors_line(spark: SparkSession, home: Path) -> None:
    """``icemor.spark.read`` (and ``to_spark``) of a table whose data file is gone: icemor's
    MissingFileError naming the file as the metadata does; a read whose tasks meet it later
    (``collect()``, user code) gives the same error inside ``icemor.spark.errors()``."""
    table = _table("errs.r")
    lost = _lose_data_files(table)
    for read in (lambda: icemor.spark.read(spark, "errs.r"), lambda: table.to_spark(spark)):
        with pytest.raises(IcemorError) as err:
            read()
        assert _icemors_line(err.value, MissingFileError, "file not found: ") == f"file not found: {lost[0]}"
        _from_spark(err.value)

    df = icemor.spark.read(spark, "errs.r", strategy="python")  # planned here, read by the tasks
    with pytest.raises(Exception) as raw:
        df.collect()
    assert not isinstance(raw.value, IcemorError)  # PySpark raises it in the caller's collect()
    with pytest.raises(IcemorError) as err, icemor.spark.errors():
        df.collect()
    assert (
        _icemors_line(err.value, MissingFileError, "data file not found: ")
        == f"data file not found: {lost[0]}"
    )
    _from_spark(err.value)


def test_row_level_work_on_spark_is_icemors_line(spark: SparkSession, home: Path) -> None:
    """DELETE (per-file work on the executors, or a SQL condition read by Spark), UPDATE and a CDC
    batch from a DataFrame on a table whose data file is gone: each icemor's one line."""
    table = _table("errs.w")
    lost = _lose_data_files(table)
    before = _snapshot("errs.w")
    changes = spark.createDataFrame([(1, "u", "U"), (2, None, "D")], "id bigint, v string, op string")
    cases: list[tuple[Any, str]] = [
        (lambda: table.delete("id < 3", spark=spark), "data file not found: "),
        (lambda: table.delete("id + 1 < 3", spark=spark), "file not found: "),
        (lambda: table.update({"v": "'z'"}, "id < 3", spark=spark), "file not found: "),
        (
            lambda: table.apply_changes(changes, key=["id"], allow_nullable_key=True, deletes="position"),
            "data file not found: ",
        ),
    ]
    for run, starts in cases:
        with pytest.raises(IcemorError) as err:
            run()
        assert _icemors_line(err.value, MissingFileError, starts) == f"{starts}{lost[0]}"
        _from_spark(err.value)
    assert _snapshot("errs.w") == before


def test_errors_that_are_not_icemors_pass_unchanged(spark: SparkSession, home: Path) -> None:
    """Spark's own errors (a failing expression in the written rows, an unknown column) stay
    Spark's, inside icemor's calls and inside ``icemor.spark.errors()``."""
    _table("errs.p")
    boom = spark.range(3).selectExpr("CAST(raise_error('boom') AS BIGINT) AS id", "'x' AS v")
    with pytest.raises(Exception) as err:
        icemor.spark.write(boom, "errs.p")
    assert not isinstance(err.value, IcemorError)
    assert "boom" in str(err.value)
    with pytest.raises(Exception) as err, icemor.spark.errors():
        spark.sql("SELECT nope FROM range(1)").collect()
    assert not isinstance(err.value, IcemorError)
    assert type(err.value).__name__ == "AnalysisException" and err.value.__cause__ is None
    assert _snapshot("errs.p") is not None


class _SparkError(Exception):
    """Stands for an exception of PySpark (the unwrapping reads Spark's exceptions only)."""


_SparkError.__module__ = "pyspark.errors.exceptions.captured"

_TRACEBACK = """Job aborted due to stage failure: Task 0 in stage 4.0 failed 1 times
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/icemor/ops/units.py", line 566, in _close
    raise InvalidArgumentError(self.change.unique)
icemor.exceptions.InvalidArgumentError: MERGE matched a target row twice

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
"""


def test_the_unwrapping_reads_icemors_last_line_only() -> None:
    """Which text is icemor's error, without a JVM: the line in a task's traceback and after Spark's
    data source header; not a line another error followed, not an unknown class, not another
    library's exception; Spark's missing file only when it is the table's."""
    from icemor.engines.spark.errors import icemor_error

    found = icemor_error(_SparkError(_TRACEBACK))
    assert type(found) is InvalidArgumentError and str(found) == "MERGE matched a target row twice"
    header = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
        "icemor.exceptions.NoSuchTableError: table 'a.b' does not exist in catalog 'icemor'\n SQLSTATE: 38000"
    )
    found = icemor_error(_SparkError(header))
    assert (
        type(found).__name__ == "NoSuchTableError"
        and str(found) == "table 'a.b' does not exist in catalog 'icemor'"
    )
    later = _TRACEBACK + (
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\nOSError: disk gone\n'
    )
    assert icemor_error(_SparkError(later)) is None
    assert icemor_error(_SparkError("icemor.exceptions.NotAnError: x")) is None
    assert icemor_error(ValueError(_TRACEBACK)) is None  # not Spark's: passes unchanged
    own = InvalidArgumentError("mine")
    assert icemor_error(own) is own
    missing = _SparkError("[PATH_NOT_FOUND] Path does not exist: file:/tmp/w/data/a.parquet.")
    assert icemor_error(missing) is None
    assert icemor_error(missing, location="file:///tmp/other") is None  # not this table's file
    found = icemor_error(missing, location="file:///tmp/w")
    assert type(found) is MissingFileError and str(found) == "file not found: file:///tmp/w/data/a.parquet"


def test_the_cli_prints_a_duplicate_merge_key_as_its_one_line(tmp_path: Path) -> None:
    """``icemor --engine spark merge`` (icemor's own quiet Spark session) with a source that matches
    a target row twice: stderr is icemor's one line, with no task stack trace before it."""
    from oracle import load_oracle_env

    env = {
        **os.environ,
        "ICEMOR_HOME": str(tmp_path / "home"),
        "JAVA_HOME": load_oracle_env()["java_home"],
        "ICEMOR_SPARK_MASTER": "local[1]",
    }
    env.pop("SPARK_LOCAL_IP", None)
    source = tmp_path / "source.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 1, 2], pa.int64()), "v": ["a", "b", "c"]}), source)
    setup = "import icemor, pyarrow as pa; icemor.create_table('errs.cli', pa.table({'id': pa.array(range(5), pa.int64()), 'v': list('abcde')}))"
    subprocess.run([sys.executable, "-c", setup], env=env, check=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "icemor",
            "--engine",
            "spark",
            "merge",
            "errs.cli",
            "--source",
            str(source),
            "--on",
            "id",
        ],
        capture_output=True,
        env=env,
        check=False,
        timeout=280,
    )
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2, lines[-40:]
    assert len(lines) == 1, lines[:45]
    assert lines[0].endswith(f"error: {DUPLICATE_MATCH}"), lines
