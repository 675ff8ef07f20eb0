"""The Spark engine: merge-on-read scans as PySpark DataFrames whose reading runs on executors.

Planning happens once on the driver (the same planner as the local engine). Each combined
task is pickled into one row of a DataFrame with one row per partition; ``mapInArrow`` runs
:func:`icemor.io.reader.read_task` on the executors, so the delete semantics live only in
the shared core. Python workers are reused, so the process-wide delete cache decodes each
delete file once per executor process.

This is the only package that imports pyspark.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from icemor.engines.spark.types import spark_schema

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from pyiceberg.io import FileIO
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from icemor.planning.planner import PlannedFile
    from icemor.table import Scan

__all__ = ["collect_arrow", "scan_to_dataframe", "session"]

_IO_CACHE: dict[tuple[tuple[tuple[str, str], ...], str], FileIO] = {}


def session(
    *, master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "icemor"
) -> SparkSession:
    """Return the active SparkSession, or build one whose Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # PySpark 3.5 picks the worker interpreter from PYSPARK_PYTHON when the context starts
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or os.environ.get("ICEMOR_SPARK_MASTER", "local[*]"))
        .appName(app_name)
        # workers must find pyarrow and icemor: run them with this interpreter
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _file_io(properties: tuple[tuple[str, str], ...], location: str) -> FileIO:
    key = (properties, location)
    io = _IO_CACHE.get(key)
    if io is None:
        from pyiceberg.io import load_file_io

        io = _IO_CACHE[key] = load_file_io(dict(properties), location)
    return io


def _read_partition(batches: Iterator[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Executor side: unpickle each task row and stream its batches in the Spark Arrow schema."""
    from icemor.io.reader import read_task

    for batch in batches:
        for blob in batch.column(0).to_pylist():
            io_props, location, combined, opts = pickle.loads(blob)
            io = _file_io(io_props, location)
            for task in combined.tasks:
                for out in read_task(io, task, opts):
                    yield out.cast(target)


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects back from mapInArrow (timestamps are UTC instants)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # PySpark 4
        return to_arrow_schema(schema, timezone="UTC")  # type: ignore[call-arg]
    return to_arrow_schema(schema)


STRATEGIES = ("auto", "native", "python")


def scan_to_dataframe(scan: Scan, spark: SparkSession, *, strategy: str = "auto") -> DataFrame:
    """Plan ``scan`` on the driver and return a DataFrame that reads it on the executors.

    Args:
        scan: The merge-on-read scan.
        spark: The session to build the DataFrame in.
        strategy: ``auto`` (default): data files without deletes are read by Spark's own
            Parquet reader, data files with deletes by icemor's reader in Python workers,
            and the two are unioned (Python workers for all when the native reader could
            not be exact). ``python``: every file through Python workers. ``native``: every
            file as Spark plans, deletes as anti-joins (exact, but slower than the Python
            workers when deletes are many; see :mod:`icemor.engines.spark.native`).

    Raises:
        InvalidArgumentError: Unknown strategy, or ``native`` for a scan it cannot read exactly.
    """
    from icemor.engines.spark.native import native_dataframe, native_ineligibility
    from icemor.exceptions import InvalidArgumentError

    if strategy not in STRATEGIES:
        msg = f"unknown Spark strategy {strategy!r}: use one of {', '.join(STRATEGIES)}"
        raise InvalidArgumentError(msg)
    planned = scan.live_files()
    if strategy == "native":
        native = native_dataframe(scan, spark, planned)
        if native is None:
            why = native_ineligibility(scan, planned)
            msg = f"the native Spark strategy cannot read this scan exactly: {why}"
            raise InvalidArgumentError(msg)
        return native
    if strategy == "auto":
        clean = [p for p in planned if not p.delete_files]
        dirty = [p for p in planned if p.delete_files]
        native = native_dataframe(scan, spark, clean) if clean else None
        if native is not None:
            if not dirty:
                return native
            return native.unionByName(_python_dataframe(scan, spark, dirty))
    return _python_dataframe(scan, spark, planned)


def _python_dataframe(scan: Scan, spark: SparkSession, planned: list[PlannedFile]) -> DataFrame:
    """One Spark partition per combined task; icemor's reader runs in the Python workers."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from icemor.planning.tasks import SplitOptions, plan_tasks

    schema = spark_schema(scan.options.projected_schema, scan.arrow_schema)
    target = _arrow_schema(schema)
    combined = plan_tasks(planned, SplitOptions.from_properties(scan.table.properties))
    io = scan.io
    io_props = tuple(sorted((str(k), str(v)) for k, v in io.properties.items()))
    location = scan.table.metadata.location
    rows = [(pickle.dumps((io_props, location, ct, scan.options)),) for ct in combined]
    task_schema = StructType([StructField("task", BinaryType(), nullable=False)])
    if not rows:
        return spark.createDataFrame([], schema)
    tasks_df = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), task_schema)

    def read(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return _read_partition(iter(batches), target)

    return tasks_df.mapInArrow(read, schema)


def collect_arrow(df: DataFrame) -> pa.Table:
    """Collect a DataFrame as Arrow (``toArrow`` on Spark 4, its 3.5 equivalent otherwise)."""
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is not None:
        return cast("pa.Table", to_arrow())
    batches = df._collect_as_arrow()
    if not batches:
        return _arrow_schema(df.schema).empty_table()
    return pa.Table.from_batches(batches)
