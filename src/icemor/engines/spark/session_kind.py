"""Classic session or Spark Connect: the one switch between a classic session's faster paths and
the public DataFrame API that every session has.

Every Spark path of icemor is built on public DataFrame APIs (tasks as a small DataFrame run by
``mapInArrow``, results collected as a small DataFrame of file metadata, Spark's Parquet reader,
deletes as anti-joins), which a Spark Connect client has too. A classic session (with its
SparkContext and py4j JVM in this process) keeps what is faster there; the choice is made here
and only here, by :func:`is_connect`:

- tasks, one per partition: classic ``SparkContext.parallelize`` (one stage); Connect
  ``spark.range(n, numPartitions=n)`` joined with the tasks as a broadcast relation;
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

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "analyzed",
    "cache_scope",
    "driver_disk_is_executors",
    "is_connect",
    "jvm_handles",
    "parallelism",
    "status_tracker",
    "task_frame",
]

TASK_COLUMN = "task"

_PROBED: dict[str, int] = {}  # Connect session id -> its server's default parallelism
_PROBED_LOCK = threading.Lock()
# rows of the probe: enough that every partition Spark makes of them holds at least one
_PROBE_ROWS = 1 << 20


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``).

    Why the class's module: a Connect client session is ``pyspark.sql.connect.session.SparkSession``
    (not a subclass of the classic one), and importing that module needs the Connect client's
    libraries, which a classic installation may lack.
    """
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def parallelism(spark: SparkSession) -> int:
    """The number of tasks icemor's Spark stages aim at: Spark's default parallelism.

    Classic: ``SparkContext.defaultParallelism``. Connect has no SparkContext: the session's
    ``spark.default.parallelism`` when set (the explicit way, e.g. in the server's configuration),
    else the partitions the server gives a ``spark.range`` without a count (Spark's leaf-node
    default parallelism, which is ``defaultParallelism`` unless
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
    with _PROBED_LOCK:
        known = _PROBED.get(key)
    if known is not None:
        return known
    from pyspark.sql import functions as F

    # Range rows lie in order across its partitions: the last row is in the last partition
    last = spark.range(_PROBE_ROWS).where(F.col("id") == _PROBE_ROWS - 1).select(F.spark_partition_id())
    found = max(1, int(last.first()[0]) + 1)  # type: ignore[index]
    with _PROBED_LOCK:
        _PROBED[key] = found
    return found


def task_frame(spark: SparkSession, blobs: Sequence[bytes], partitions: int | None = None) -> DataFrame:
    """A DataFrame of one binary column ``task``, ``blobs`` spread over ``partitions`` partitions
    (default one each), in order, as equal as can be.

    Classic: ``SparkContext.parallelize`` (one stage). Connect: ``spark.range(len, numPartitions)``
    (exactly ``partitions`` partitions, consecutive ids) joined with the blobs as a broadcast
    relation, so each partition holds the blobs of its ids and nothing is shuffled. A round-robin
    ``repartition`` would not do: Spark gives each input partition a random first target, so
    two blobs can meet in one partition while another stays empty.
    """
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    n = max(1, min(partitions or len(blobs), len(blobs)))
    schema = StructType([StructField(TASK_COLUMN, BinaryType(), nullable=False)])
    if not is_connect(spark):
        rows = [(b,) for b in blobs]
        return spark.createDataFrame(spark.sparkContext.parallelize(rows, n), schema)
    from pyspark.sql import functions as F

    indexed = spark.createDataFrame(
        list(enumerate(blobs)),
        StructType([StructField("id", LongType(), False), StructField(TASK_COLUMN, BinaryType(), False)]),
    )
    ids = spark.range(0, len(blobs), 1, n)
    return ids.join(F.broadcast(indexed), "id").select(TASK_COLUMN)


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
    from icemor.engines.spark._compat import jvm_and_gateway

    handles: tuple[Any, Any] | None = jvm_and_gateway(spark)
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
