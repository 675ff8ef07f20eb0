"""The ``icemor`` data source's errors (PySpark 4.x): icemor's line first, not a Python traceback.

Spark wraps an error a data source raises in its own (``[PYTHON_DATA_SOURCE_ERROR] Failed to create
Python data source instance: ...``, ``An exception was thrown from the Python worker:``, a
stream's ``[STREAM_FAILED] ...``); what follows the header is what the Python worker sent, a
traceback of a dozen lines with icemor's line at its end. An icemor error leaves the worker as its
one line (``icemor.exceptions.InvalidArgumentError: ...``), so the user's first line (the
header's line) ends with icemor's, and ``icemor.spark.errors()`` raises it as icemor's error
where the user's code waits (``count()``, ``save()``, ``awaitTermination()``).
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
import icemor.spark
from icemor.exceptions import IcemorError, InvalidArgumentError, MissingFileError, NoSuchTableError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pyspark.sql import SparkSession

NS = "s4err"


def _table(name: str) -> Any:
    if NS in icemor.list_namespaces() and name in icemor.list_tables(NS):
        icemor.drop_table(name, purge=True)
    return icemor.create_table(
        name, pa.table({"id": pa.array(range(10), pa.int64()), "v": list("abcdefghij")})
    )


def _first_line(run: Callable[[], Any]) -> tuple[str, list[str]]:
    """The exception ``run`` raises (Spark's): its first line, and all its lines."""
    with pytest.raises(Exception) as err:
        run()
    assert not isinstance(err.value, IcemorError)  # user code calls Spark: Spark's exception
    lines = str(err.value).splitlines()
    assert "Traceback" not in str(err.value), lines[:20]
    return lines[0], lines


def _as_icemors(run: Callable[[], Any], cls: type[IcemorError], starts: str) -> None:
    with pytest.raises(IcemorError) as err, icemor.spark.errors():
        run()
    assert isinstance(err.value, cls), type(err.value)
    assert str(err.value).startswith(starts) and len(str(err.value).splitlines()) == 1, str(err.value)
    assert type(err.value.__cause__).__module__.startswith("pyspark."), type(err.value.__cause__)


def test_batch_errors_show_icemors_line_after_sparks_header(spark: SparkSession) -> None:
    icemor.spark.register(spark, fast_reads=False)  # the data source itself (as SQL and other clients)
    _table(f"{NS}.t")
    lost = _table(f"{NS}.lost")
    uris = sorted({t.file.file_path for t in lost.pyiceberg.scan().plan_files()})
    for uri in uris:
        os.remove(uri.removeprefix("file://"))

    cases: list[tuple[Callable[[], Any], str, type[IcemorError], str]] = [
        (
            lambda: spark.read.format("icemor").option("colums", "id").load(f"{NS}.t").count(),
            "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: ",
            InvalidArgumentError,
            "unknown option 'colums' for an icemor read",
        ),
        (
            lambda: spark.read.format("icemor").load(f"{NS}.nope").count(),
            "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: ",
            NoSuchTableError,
            f"table '{NS}.nope' does not exist",
        ),
        (
            lambda: (
                spark.range(3)
                .selectExpr("id", "'x' AS v")
                .write.format("icemor")
                .mode("append")
                .option("mergeSchema", "true")
                .save(f"{NS}.t")
            ),
            "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: ",
            InvalidArgumentError,
            "unknown write option 'mergeschema'",
        ),
    ]
    for run, header, cls, message in cases:
        first, lines = _first_line(run)
        assert first.startswith(header), first
        assert first.removeprefix(header).startswith(f"icemor.exceptions.{cls.__name__}: {message}"), first
        assert len(lines) <= 2, lines  # then Spark's " SQLSTATE: 38000"
        _as_icemors(run, cls, message)

    # a task's error (the executors read the data files): Spark's header line, then icemor's
    def read_lost() -> Any:
        return spark.read.format("icemor").load(f"{NS}.lost").collect()

    _, lines = _first_line(read_lost)
    assert lines == [
        "An exception was thrown from the Python worker:",
        f"icemor.exceptions.MissingFileError: data file not found: {uris[0]}",
    ]
    _as_icemors(read_lost, MissingFileError, f"data file not found: {uris[0]}")


@pytest.mark.timeout(600)
def test_stream_errors_show_icemors_line(spark: SparkSession, out_dir: Path) -> None:
    """A stream of a table without the change feed option (refused when the query starts) and a
    sink's commit refusing a batch (an unknown op): the query's exception names icemor's error in
    its first line; ``awaitTermination()`` inside ``icemor.spark.errors()`` raises that error."""
    icemor.spark.register(spark, fast_reads=False)
    _table(f"{NS}.s")
    checkpoints = out_dir / "s4err-checkpoints"
    shutil.rmtree(checkpoints, ignore_errors=True)

    plain = spark.readStream.format("icemor").load(f"{NS}.s").writeStream.format("noop")
    query = plain.option("checkpointLocation", str(checkpoints / "plain")).start()
    with (
        pytest.raises(InvalidArgumentError, match=r"^a stream of an icemor table is its change feed"),
        icemor.spark.errors(),
    ):
        query.awaitTermination(300)
    first = str(query.exception()).splitlines()[0]
    assert "icemor.exceptions.InvalidArgumentError: a stream of an icemor table is its change feed" in first

    changes = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    sink = (
        changes.selectExpr("value AS id", "'x' AS v", "'Q' AS op")
        .writeStream.format("icemor")
        .option("key", "id")
        .option("allow-nullable-key", "true")
        .option("app-id", "s4err")
        .option("checkpointLocation", str(checkpoints / "sink"))
        .start(f"{NS}.s")
    )
    with pytest.raises(InvalidArgumentError, match=r"^unknown op 'Q' in column 'op'"), icemor.spark.errors():
        sink.awaitTermination(300)
    first = str(sink.exception()).splitlines()[0]
    assert "icemor.exceptions.InvalidArgumentError: unknown op 'Q' in column 'op'" in first
