"""Classic session or Spark Connect: the one switch between a classic session's faster paths and
the public DataFrame API that every session has.

Every Spark path of icemor is built on public DataFrame APIs (tasks as a DataFrame whose
partitions are the tasks, results collected as a small DataFrame of file metadata, Spark's
Parquet reader, deletes as anti-joins), which a Spark Connect client has too. A classic session (with its
SparkContext and py4j JVM in this process) keeps what is faster there; the choice is made here
and only here, by :func:`is_connect`:

- tasks, one per partition: classic ``SparkContext.parallelize``; Connect a Python data source
  whose partitions are the tasks (:mod:`.task_source`); both sized as unknown by Spark's planner;
- default parallelism: classic ``SparkContext.defaultParallelism``; Connect the session's
  ``spark.default.parallelism`` if set, else the server's own (one ``range`` query a session);
- deleted positions in the native strategy: classic (PySpark 3.5) JVM-built bitmap literals;
  Connect an anti-join on positions decoded on the executors;
- data files linked by ordinal: classic on a local master (the driver's disk is the executors');
  never on Connect (the client's disk is not the server's);
- job progress: classic the status tracker, polled; Connect the client's progress handler;
- caches of built DataFrames: classic per application id; Connect per session id.

Nothing here reads a private PySpark name (those live in :mod:`icemor.engines.spark._compat`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from icemor.dependencies import is_spark_connect_session
from icemor.engines.spark import _compat
from icemor.engines.spark.worker import freeze_survivors

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "analyzed",
    "cache_scope",
    "driver_disk_is_executors",
    "is_connect",
    "jvm_handles",
    "map_tasks",
    "parallelism",
    "spare_then",
    "status_tracker",
]

TASK_COLUMN = "task"

_PROBED: dict[str, int] = {}  # Connect session id -> its server's default parallelism
_REGISTERED: set[str] = set()  # Connect session ids the task source is registered in
_LOCK = threading.Lock()
# rows of the probe: enough that every partition Spark makes of them holds at least one
_PROBE_ROWS = 1 << 20


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``): an
    instance of the Connect client's session class (:func:`icemor.dependencies.is_spark_connect_session`)."""
    return is_spark_connect_session(spark)


def parallelism(spark: SparkSession) -> int:
    """The number of tasks icemor's Spark stages aim at: Spark's default parallelism.

    Classic: ``SparkContext.defaultParallelism``. Connect has no SparkContext: the session's
    ``spark.default.parallelism`` when set (the explicit way: the server's configuration, or
    ``spark.conf.set`` in the session), else the partitions the server gives a ``spark.range``
    without a count (Spark's leaf-node default parallelism, which is ``defaultParallelism`` unless
    ``spark.sql.leafNodeDefaultParallelism`` says otherwise), asked once per session.
    """
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            pass
    key = str(spark.session_id)  # type: ignore[attr-defined,unused-ignore]
    with _LOCK:
        known = _PROBED.get(key)
    if known is not None:
        return known
    # Range rows lie in order across its partitions: the last row is in the last partition
    last = spark.range(_PROBE_ROWS).where(F.col("id") == _PROBE_ROWS - 1).select(F.spark_partition_id())
    found = max(1, int(last.first()[0]) + 1)  # type: ignore[index]
    with _LOCK:
        _PROBED[key] = found
    return found


def map_tasks(
    spark: SparkSession,
    blobs: Sequence[bytes],
    fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    schema: StructType,
    *,
    partitions: int | None = None,
) -> DataFrame:
    """The rows ``fn`` makes of ``blobs``, run on the executors: ``blobs`` spread over
    ``partitions`` Spark tasks (default one each), in order, as equal as can be; each task calls
    ``fn`` with Arrow batches of one binary column ``task`` holding its blobs, and ``fn`` yields
    batches in ``schema`` (as ``mapInArrow`` wants them: timestamps in UTC).

    Classic: an RDD of the blobs (``SparkContext.parallelize``) and ``mapInArrow``. Connect:
    icemor's Python data source (:mod:`.task_source`), whose partitions are the groups and
    whose reader runs ``fn`` (which must pickle: a module-level function, or a
    ``functools.partial`` of one). Either way Spark's planner sizes the result as unknown, so
    as large: a local relation (``createDataFrame``) would be sized by its few rows, and Spark
    would then broadcast whole tables joined with a scan built on it.
    """
    n = max(1, min(partitions or len(blobs), len(blobs)))
    if not is_connect(spark):
        task_schema = StructType([StructField(TASK_COLUMN, BinaryType(), nullable=False)])
        # the blobs become rows in Python workers of their own, which never call file_io: the
        # first task of each spares its later tasks PySpark's archive rescans (with 647 small
        # tasks these workers spent as much CPU as the ones reading the data)
        rdd = spark.sparkContext.parallelize([(b,) for b in blobs], n).mapPartitions(spare_then)

        def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return fn(iter(batches))

        return spark.createDataFrame(rdd, task_schema).mapInArrow(run, schema)
    # PySpark 4's data source API: pyspark.sql.datasource is not in 3.5
    from icemor.engines.spark.task_source import NAME, TASKS_OPTION, encode_tasks  # noqa: PLC0415 - optional: PySpark 4

    _register_task_source(spark)
    groups = [blobs[i * len(blobs) // n : (i + 1) * len(blobs) // n] for i in range(n)]
    option = encode_tasks(groups, fn, _compat.arrow_schema_of(schema))
    return spark.read.format(NAME).schema(schema).option(TASKS_OPTION, option).load()


def spare_then(rows: Iterable[Any]) -> Iterable[Any]:
    """(Executors) spare this Python worker's later tasks PySpark's archive rescans and, as
    :func:`.worker.freeze_survivors` does, the full collection of the modules imported for it
    (PySpark collects after every task: 90% of these workers' time); ``rows`` as they are."""
    _compat.spare_zip_rescans()
    freeze_survivors(collect=False)  # (PySpark collected the previous task's garbage)
    return rows


def _register_task_source(spark: SparkSession) -> None:
    """Register :class:`.task_source.TaskSource` in ``spark`` (a Connect session), once."""
    key = str(spark.session_id)  # type: ignore[attr-defined,unused-ignore]
    with _LOCK:
        if key in _REGISTERED:
            return
    from icemor.engines.spark.task_source import TaskSource  # noqa: PLC0415 - optional: PySpark 4

    spark.dataSource.register(TaskSource)  # type: ignore[attr-defined,unused-ignore]
    with _LOCK:
        _REGISTERED.add(key)


def cache_scope(spark: SparkSession) -> tuple[str, str]:
    """What a DataFrame built for ``spark`` may be reused within: its application (classic) or its
    Connect session (a Connect DataFrame belongs to the session that made it)."""
    if is_connect(spark):
        return "connect", str(spark.session_id)  # type: ignore[attr-defined,unused-ignore]
    return "classic", str(spark.sparkContext.applicationId)


def jvm_handles(spark: SparkSession) -> tuple[Any, Any] | None:
    """The py4j JVM view and gateway of a classic session's context, where icemor may build plan
    literals with them (PySpark 3.5); None on Spark Connect and where the version allows none."""
    if is_connect(spark):
        return None
    handles: tuple[Any, Any] | None = _compat.jvm_and_gateway(spark)
    return handles


def driver_disk_is_executors(spark: SparkSession) -> bool:
    """Whether files this process makes on its own disk are seen by the executors at the same
    paths: a classic session on a local master (its executors are threads of this process's JVM).
    Never on Connect: the server may run anywhere, and only the table's storage is shared."""
    if is_connect(spark):
        return False
    return (spark.sparkContext.master or "").startswith("local")


def status_tracker(spark: SparkSession) -> Any | None:
    """The SparkContext's status tracker of a classic session; None on Spark Connect."""
    if is_connect(spark):
        return None
    return spark.sparkContext.statusTracker()


def analyzed(df: DataFrame) -> DataFrame:
    """``df``, analysed now. A classic DataFrame is analysed when it is made; a Connect one only
    when it runs or is asked for its schema, so it is asked (one round trip): a bad column or
    type then fails where icemor turns Spark's error into its one-line error, not at the write."""
    if is_connect(df.sparkSession):
        _ = df.schema
    return df
