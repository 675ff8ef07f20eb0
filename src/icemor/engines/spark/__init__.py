"""The Spark engine: merge-on-read scans as PySpark DataFrames whose reading runs on executors.

Planning happens once on the driver (the same planner as the local engine). Each combined
task is pickled into one row of a DataFrame with one row per partition; ``mapInArrow`` runs
:func:`icemor.io.reader.read_task` on the executors, so the delete semantics live only in
the shared core. Python workers are reused, so the process-wide delete cache decodes each
delete file once per executor process.

Classic sessions and Spark Connect sessions both work: every path is built on public DataFrame
APIs, and where a classic session has a faster way, :mod:`.session_kind` (the one switch)
chooses it.

This is the only package that imports pyspark.
"""

from __future__ import annotations

import os
import pickle
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pyarrow as pa

# first, before pyspark's imports: without PySpark (an optional extra) this raises the one-line
# UnsupportedFeatureError
from icemor.engines.spark import _compat

# isort: split
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, BooleanType, StructField, StructType

from icemor.engines.spark.errors import spark_errors
from icemor.engines.spark.session_kind import analyzed, is_connect, map_tasks, parallelism
from icemor.engines.spark.ship import ship as ship_environment
from icemor.engines.spark.types import spark_schema
from icemor.engines.spark.worker import (
    ROWS_COLUMN,
    io_spec,
    item_blob,
    read_partition,
    run_blobs,
    run_items,
    task_blob,
)
from icemor.exceptions import InvalidArgumentError, UnsupportedFeatureError
from icemor.io.uuids import is_uuid, uuid_from_strings
from icemor.spec.files import FileContent
from icemor.spec.tasks import CombinedScanTask

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import Any

    from pyiceberg.io import FileIO
    from pyspark.sql import DataFrame

    from icemor.engines import Runner
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "collect_arrow",
    "conform_batch",
    "default_driver_memory",
    "iter_arrow",
    "runner",
    "scan_to_dataframe",
    "session",
]


def default_driver_memory(total_bytes: int | None = None) -> str:
    """The driver heap :func:`session` asks for: a quarter of the machine's memory, at least
    1 GiB (Spark's own default) and at most 8 GiB, in MiB (``"6144m"`` on a 24 GiB machine).

    Why: Spark's 1 GiB default fails ``toPandas()``/``toArrow()`` of a few million rows with
    OutOfMemory; a quarter leaves the rest to the Python side and the executors.
    """
    if total_bytes is None:
        try:
            total_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # not POSIX: Spark's default
            total_bytes = 0
    mib = min(max(1024, total_bytes // 4 // 2**20), 8192)
    return f"{mib}m"


def session(
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "icemor",
    quiet: bool = True,
    driver_memory: str | None = None,
    ship: bool = False,
) -> SparkSession:
    """Return the active SparkSession, or build one whose Python workers run this interpreter.

    ``conf={"spark.pyspark.python": ...}`` sets the executors' interpreter (a packed
    environment's, docs/spark.md).

    Args:
        master: Spark master URL (default ``$ICEMOR_SPARK_MASTER`` or ``local[*]``).
        conf: Extra Spark configuration; its ``spark.driver.memory`` wins over ``driver_memory``.
        app_name: The application name.
        quiet: Log errors only (no WARN lines about loopback addresses or native Hadoop); False
            keeps Spark's default logging. Applies when this call starts the JVM.
        driver_memory: The driver's heap (``"4g"``); default :func:`default_driver_memory`, a
            quarter of the machine's memory between 1 and 8 GiB. Applies when this call starts
            the JVM (a running JVM's heap cannot change).
        ship: Then :func:`icemor.engines.spark.ship.ship` icemor to the executors (a cluster
            whose executors lack it).
    """
    spark = SparkSession.getActiveSession() or _build_session(master, conf, app_name, quiet, driver_memory)
    if ship:
        ship_environment(spark)
    return spark


def _build_session(
    master: str | None, conf: Mapping[str, str] | None, app_name: str, quiet: bool, memory: str | None
) -> SparkSession:
    conf = dict(conf or {})
    # PySpark picks the worker interpreter from PYSPARK_PYTHON when the context starts, not from
    # spark.pyspark.python: a conf naming one (a packed environment's ./env/bin/python) sets it
    if "spark.pyspark.python" in conf:
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf.setdefault("spark.driver.memory", memory or default_driver_memory())
    if quiet:
        # Local work needs no network: binding to loopback spares the "hostname resolves to a
        # loopback address" warnings; the log4j2 file silences the rest (native Hadoop, etc.).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        log_conf = Path(__file__).with_name("log4j2-quiet.properties").as_uri()
        java_opts = conf.get("spark.driver.extraJavaOptions", "")
        if "log4j2.configurationFile" not in java_opts:
            conf["spark.driver.extraJavaOptions"] = (
                f"{java_opts} -Dlog4j2.configurationFile={log_conf}".strip()
            )
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
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet and not is_connect(spark):  # $SPARK_REMOTE makes the builder a Connect client's
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects back from mapInArrow (timestamps are UTC instants)."""
    return _compat.arrow_schema_of(schema)


STRATEGIES = ("auto", "native", "python")


def scan_to_dataframe(job: ScanJob, spark: SparkSession, *, strategy: str = "auto") -> DataFrame:
    """Plan ``job`` on the driver and return a DataFrame that reads it on the executors.

    Args:
        job: The merge-on-read scan.
        spark: The session to build the DataFrame in.
        strategy: ``auto`` (default): data files without deletes or with position deletes
            only are read by Spark's own Parquet reader (deleted positions as bitmaps),
            data files with equality deletes by icemor's reader in Python workers, and the
            two are unioned (Python workers for whatever the native reader could not read
            exactly). ``python``: every file through Python workers. ``native``: every
            file as Spark plans, deletes as anti-joins (exact, but equality deletes are
            slower than in the Python workers; see :mod:`icemor.engines.spark.native`).

    Raises:
        InvalidArgumentError: Unknown strategy, or ``native`` for a scan it cannot read exactly.
        MissingFileError: A file of the scan is missing (Spark's reader finds it so when the
            DataFrame is made; icemor's, when its tasks run).
    """
    with spark_errors(location=job.metadata.location):
        df = _scan_dataframe(job, spark, strategy)
    if job.residual is None:
        return df
    try:  # the row filter outside pyiceberg's language, as Spark SQL
        return analyzed(df.filter(F.expr(job.residual)).select(*(job.output_names or df.columns)))
    except (AnalysisException, ParseException) as e:
        lines = str(e).strip().splitlines()
        raise InvalidArgumentError(lines[0] if lines else type(e).__name__) from e


def _scan_dataframe(job: ScanJob, spark: SparkSession, strategy: str) -> DataFrame:
    # not at the top: every Python worker that unpickles a function of this package imports it
    # (the task-row workers of map_tasks too, which read nothing): icemor.io's readers cost ~1 s
    from icemor.engines.spark.native import native_dataframe, native_ineligibility  # noqa: PLC0415 - cost: ~1 s a worker

    if strategy not in STRATEGIES:
        msg = f"unknown Spark strategy {strategy!r}: use one of {', '.join(STRATEGIES)}"
        raise InvalidArgumentError(msg)
    planned = job.live_files()
    if strategy == "native":
        native = native_dataframe(job, spark, planned)
        if native is None:
            why = native_ineligibility(job, planned)
            msg = f"the native Spark strategy cannot read this scan exactly: {why}"
            raise InvalidArgumentError(msg)
        return native
    if strategy == "auto":
        # Spark's reader for files without deletes and for files with position deletes only
        # (bitmaps); equality deletes stay in the Python workers, faster there than the keyed
        # broadcast anti-join (see native.py)
        positional: list[PlannedFile] = []
        rest: list[PlannedFile] = []
        for p in planned:
            equality = any(d.content == FileContent.EQUALITY_DELETES for d in p.delete_files)
            (rest if equality else positional).append(p)
        native = native_dataframe(job, spark, positional, bitmaps_only=True) if positional else None
        if native is None:
            positional = [p for p in planned if not p.delete_files]
            rest = [p for p in planned if p.delete_files]
            native = native_dataframe(job, spark, positional) if positional else None
        if native is not None:
            if not rest:
                return native
            return native.unionByName(_python_dataframe(job, spark, rest))
    return _python_dataframe(job, spark, planned)


def _python_dataframe(job: ScanJob, spark: SparkSession, planned: list[PlannedFile]) -> DataFrame:
    """One Spark partition per combined task; icemor's reader runs in the Python workers."""
    schema = spark_schema(job.options.projected_schema, job.read_schema)
    target = _arrow_schema(schema)
    spec = io_spec(job.io, job.metadata.location)
    combined = job.plan_tasks(planned)
    cores = parallelism(spark)
    if len(combined) < 2 * cores:
        # a few combined tasks leave cores idle at the end ([3, 3, 3, 1] files on 2 cores runs
        # 6 file-reads long, not 5): below two tasks a core, each piece is its own partition
        combined = [CombinedScanTask((t,)) for ct in combined for t in ct.tasks]
    if not combined:
        return spark.createDataFrame([], schema)
    blobs = [task_blob(spec, ct, job.options) for ct in combined]
    if not schema.fields:
        # Spark loses the row count of zero-column Arrow batches (a count() of them was 0): the
        # executors carry a null column, dropped here
        padded = StructType([StructField(ROWS_COLUMN, BooleanType())])
        df = map_tasks(spark, blobs, partial(read_partition, target=_arrow_schema(padded)), padded)
        return df.drop(ROWS_COLUMN)
    return map_tasks(spark, blobs, partial(read_partition, target=target), schema)


def collect_arrow(df: DataFrame) -> pa.Table:
    """Collect a DataFrame as Arrow (``toArrow`` on Spark 4, its 3.5 equivalent otherwise)."""
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is not None:
        return cast("pa.Table", to_arrow())
    batches = _compat.collect_arrow_batches(df)
    if not batches:
        return _arrow_schema(df.schema).empty_table()
    return pa.Table.from_batches(batches)


def iter_arrow(df: DataFrame, *, schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """Stream a DataFrame's rows to the driver as Arrow batches, one Spark partition at a time.

    The executors serialise their Arrow batches as IPC blobs, one row each, and
    ``toLocalIterator`` brings them a partition at a time (the next one prefetched), so the
    driver holds about two partitions, not the whole result as :func:`collect_arrow` does.
    Partitions keep their order.

    Args:
        df: Any DataFrame.
        schema: Cast each batch to this Arrow schema (a scan's ``arrow_schema``): Spark marks
            every column nullable and names list/map children its own way; ``uuid`` columns
            come back from Spark as strings and are turned back into 16-byte UUIDs.
    """

    def to_ipc(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, b.schema) as w:
                w.write_batch(b)
            blob = sink.getvalue()
            offsets = pa.array([0, blob.size], pa.int32()).buffers()[1]
            cell = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, blob])
            yield pa.RecordBatch.from_arrays([cell], names=["ipc"])

    for row in df.mapInArrow(to_ipc, "ipc binary").toLocalIterator(prefetchPartitions=True):
        with pa.ipc.open_stream(pa.py_buffer(row[0])) as reader:
            for batch in reader:
                yield batch if schema is None else conform_batch(batch, schema)


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (as Spark returns it) cast to ``schema``, the same columns by position.

    Raises:
        UnsupportedFeatureError: A column Spark cannot give back as the schema's type.
    """
    columns = []
    for column, field in zip(batch.columns, schema, strict=True):
        if column.type == field.type:
            columns.append(column)
            continue
        try:
            if is_uuid(field.type) and pa.types.is_string(column.type):
                columns.append(uuid_from_strings(column, field.type))
            else:
                columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, InvalidArgumentError) as e:
            msg = f"column {field.name!r}: Spark returned {column.type}, not castable to {field.type}: {e}"
            raise UnsupportedFeatureError(msg) from e
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def runner(
    spark: SparkSession,
    io: FileIO,
    location: str,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Runner:
    """Run per-item work ``fn(io, item)`` on the executors, one Spark partition per item.

    ``fn`` and the items are pickled to the executors (``fn`` by reference: a module-level
    function of icemor); each executor builds its FileIO from ``io``'s properties. Only the
    pickled results come back to the driver. A failed Spark job raises here, before anything
    is committed, as icemor's error when a task raised one (:mod:`.errors`). ``progress(done,
    total)`` is told when the job starts and when it ends (the items finish on the executors,
    where the driver cannot count them).
    """
    spec = io_spec(io, location)

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        if not items:
            return []
        if progress is not None:
            progress(0, len(items))
        blobs = [item_blob(spec, fn, item) for item in items]
        with spark_errors():
            if is_connect(spark):
                schema = StructType([StructField("result", BinaryType())])
                results = [r["result"] for r in map_tasks(spark, blobs, run_items, schema).collect()]
            else:
                # an RDD: one Python hop a task; a DataFrame of the blobs (createDataFrame of an
                # RDD, then mapInArrow) costs two, and SQL planning, for results that are collected
                # anyway (an empty job: 0.3 s against 0.9 s on local[2] under load)
                rdd = spark.sparkContext.parallelize(blobs, len(blobs))
                results = rdd.mapPartitions(run_blobs).collect()
        if progress is not None:
            progress(len(items), len(items))
        return [pickle.loads(r) for r in results]

    return run
