"""``icemor.spark.session()``: the active SparkSession, or a new one set up for icemor; and
``icemor.spark.cdc_sink()``: exactly-once change ingestion from Structured Streaming.

A thin, lazy front for :mod:`icemor.engines.spark`; importing this module does not import
pyspark, calling :func:`session` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyspark.sql import DataFrame, SparkSession

    from icemor.ops.apply_changes import ChangeMetrics

__all__ = ["cdc_sink", "session"]


def session(
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "icemor",
    quiet: bool = True,
    driver_memory: str | None = None,
) -> SparkSession:
    """Return the active SparkSession, or build one (master ``local[*]`` or ``$ICEMOR_SPARK_MASTER``).

    ``quiet`` (default) logs errors only; False keeps Spark's WARN lines. ``driver_memory``
    (e.g. ``"8g"``) defaults to a quarter of the machine's memory, 1-8 GiB (docs/spark.md).
    """
    from icemor.engines.spark import session as _session

    return _session(master=master, conf=conf, app_name=app_name, quiet=quiet, driver_memory=driver_memory)


def cdc_sink(
    table: Any,
    *,
    key: Sequence[str],
    app_id: str,
    op_column: str = "op",
    order_by: str | None = None,
    allow_nullable_key: bool = False,
    partitions: int | None = None,
    progress: Callable[[int, ChangeMetrics], None] | None = None,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function applying each micro-batch of changes to ``table`` exactly once.

    Each batch is applied as :meth:`icemor.table.Table.apply_changes` does, on the executors, in
    one commit whose snapshot summary records ``icemor.cdc.app-id`` = ``app_id`` and
    ``icemor.cdc.batch-id`` = the batch id. A batch that ``app_id`` already committed (the
    stream failed after the commit, before its checkpoint, and Spark runs the batch again on
    restart) is skipped: a restarted stream never applies a batch twice. As Delta's
    ``txnAppId``/``txnVersion``: keep ``app_id`` stable across restarts of one stream, and give
    each stream (each checkpoint location) its own.

    On Spark Connect the server runs ``foreachBatch`` functions in a Python process of its own:
    the sink travels there pickled, as the table's catalog (class, name, properties: credentials
    in them travel too) and identifier, and loads the table there; ``progress`` runs there too.

    Example::

        changes.writeStream.foreachBatch(
            icemor.spark.cdc_sink(table, key=["id"], app_id="orders-cdc")
        ).option("checkpointLocation", "/chk/orders").start()

    Args:
        table: An :class:`icemor.table.Table` (or a pyiceberg table).
        key: The key columns.
        app_id: The stream's stable identity.
        op_column: The column holding each row's op.
        order_by: A column ordering the changes of one key (e.g. a log sequence number).
        allow_nullable_key: Accept optional and float/double key columns, and NULL keys.
        partitions: Spark tasks per batch (default: the session's default parallelism).
        progress: Called with the batch id and the batch's metrics (``skipped`` when it was
            already committed).
    """
    from icemor.ops.apply_changes import ChangeSink

    return ChangeSink(
        table,
        key=key,
        app_id=app_id,
        op_column=op_column,
        order_by=order_by,
        allow_nullable_key=allow_nullable_key,
        partitions=partitions,
        progress=progress,
    )
