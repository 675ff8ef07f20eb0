"""``icemor.spark.session()``: the active SparkSession, or a new one set up for icemor;
``icemor.spark.read()``: an icemor table (or its change feed) as a DataFrame, on every PySpark
version; ``icemor.spark.register()``: the ``icemor`` Spark data source (PySpark 4.2+); and
``icemor.spark.cdc_sink()``: exactly-once change ingestion from Structured Streaming.

A thin, lazy front for :mod:`icemor.engines.spark`; importing this module does not import
pyspark, calling its functions does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import pyarrow as pa
    from pyiceberg.table import Table as PyIcebergTable
    from pyspark.sql import DataFrame, SparkSession

    from icemor.ops.apply_changes import ChangeMetrics

__all__ = ["cdc_sink", "read", "register", "session"]


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
    from icemor.ops.apply_changes import apply_changes_dataframe

    def process(df: DataFrame, batch_id: int) -> None:
        metrics = apply_changes_dataframe(
            getattr(table, "pyiceberg", table),
            df,
            key=key,
            op_column=op_column,
            order_by=order_by,
            allow_nullable_key=allow_nullable_key,
            app_id=app_id,
            batch_id=batch_id,
            partitions=partitions,
        )
        if hasattr(table, "refresh"):
            table.refresh()
        if progress is not None:
            progress(batch_id, metrics)

    return process


def read(spark: SparkSession, table: str | None = None, **options: Any) -> DataFrame:
    """An icemor table as a DataFrame read on the executors, on every PySpark version: the
    function form of ``spark.read.format("icemor")``, with the same options and the same rows.

    Options (as keywords, ``snapshot_id=5``, or as the data source spells them,
    ``**{"snapshot-id": "5"}``: names match ignoring case, ``-`` and ``_``):

    - ``catalog``: a catalog name (default: icemor's embedded catalog);
    - ``snapshot_id``, ``as_of_timestamp`` (ms, ISO-8601 text or a datetime), ``branch``, ``tag``:
      at most one; default the current snapshot;
    - ``columns``: ``"a,b"`` or a list, in the order given (as ``select``); ``filter``: a row
      filter (SQL, docs/sql.md's conditions); ``metadata_columns``: add ``_file`` and ``_pos``;
    - the change feed instead of the table: ``read_change_feed=True`` and/or ``starting_snapshot_id``
      / ``starting_timestamp`` (exclusive) and ``ending_snapshot_id`` / ``ending_timestamp``
      (inclusive), with ``columns``, ``filter`` and ``key``: the rows of ``table.changes(...)``;
    - ``strategy`` (this function only): ``auto`` (default), ``python`` or ``native``, as
      :meth:`icemor.table.Table.to_spark`.

    This is ``table.to_spark(...)`` (``table.changes(...).to_spark(...)``): Spark's own Parquet
    reader for files without equality deletes (docs/spark.md, "Data source").

    Raises:
        InvalidArgumentError: An unknown option, a malformed value, conflicting selectors.
        NoSuchTableError: The table does not exist.
        NoSuchSnapshotError: The snapshot, time, branch or tag does not exist.
    """
    from icemor.engines.spark import scan_to_dataframe
    from icemor.engines.spark.datasource import (
        change_request,
        is_change_feed,
        ordered_names,
        plan_changes_job,
        plan_scan,
        read_request,
    )
    from icemor.engines.spark.feed import changes_to_dataframe
    from icemor.exceptions import InvalidArgumentError
    from icemor.io.changes import CHANGE_COLUMNS
    from icemor.table import Table, to_epoch_ms

    strategy = "auto"
    rest = {}
    for key, value in options.items():
        if key.lower().replace("-", "").replace("_", "") == "strategy":
            strategy = str(value)
        else:
            rest[key] = value
    if is_change_feed(rest):
        if strategy != "auto":
            msg = "strategy is for reads of a table, not of its change feed"
            raise InvalidArgumentError(msg)
        changes = change_request(rest, to_epoch_ms, table=table, stream=False)
        t = Table.load(changes.table, catalog=changes.catalog)
        job = plan_changes_job(t.metadata, t.io, changes)
        df = changes_to_dataframe(job, spark)
        return df.select(*ordered_names(changes.columns, job.output_names), *CHANGE_COLUMNS)
    request = read_request(rest, to_epoch_ms, table=table)
    t = Table.load(request.table, catalog=request.catalog)
    df = scan_to_dataframe(plan_scan(t.metadata, t.io, request), spark, strategy=strategy)
    order = ordered_names(request.columns, df.columns)
    return df if order == df.columns else df.select(*order)


def register(spark: SparkSession, *, fast_reads: bool = True) -> None:
    """Register the ``icemor`` Spark data source on ``spark`` (PySpark 4.2+; classic or Connect).

    Then ``spark.read.format("icemor").load("db.t")`` (the options of :func:`read`),
    ``spark.readStream.format("icemor").option("readChangeFeed", "true").load("db.t")`` (the
    change feed as a stream), ``df.writeStream.format("icemor").option("key", "id")`` (CDC,
    exactly once) and ``df.write.format("icemor")`` work on this session.

    Args:
        spark: The session.
        fast_reads: This Python client's ``spark.read.format("icemor")...load()`` returns
            :func:`read`'s DataFrame (``to_spark``'s plan: Spark's own Parquet reader where no
            equality delete applies; the same rows), not the data source's, which costs several
            times as much (docs/spark.md, "Data source"). SQL, streams and other clients use the
            data source either way. False: the data source serves every read.

    Raises:
        UnsupportedFeatureError: PySpark 3.5 (or 4.0, 4.1): no Python data sources; use
            :func:`read` and :func:`cdc_sink`.
    """
    from icemor.engines.spark.datasource import Services
    from icemor.engines.spark.datasource import register as _register
    from icemor.table import to_epoch_ms

    services = Services(load_table=_load_table, epoch_ms=to_epoch_ms, apply_changes=_apply_changes)
    _register(spark, services, front=_front_read if fast_reads else None)


def _front_read(spark: SparkSession, table: str | None, options: dict[str, Any]) -> DataFrame:
    """``spark.read.format("icemor")...load(table)`` of a registered Python client."""
    return read(spark, table, **options)


def _load_table(identifier: str, catalog: str | None) -> PyIcebergTable:
    """The data source's way to a table (Spark's Python workers call it, by reference)."""
    from icemor.table import Table

    return Table.load(identifier, catalog=catalog).pyiceberg


def _apply_changes(identifier: str, catalog: str | None, rows: pa.Table, **options: Any) -> ChangeMetrics:
    """The streaming sink's commit: one batch as ``Table.apply_changes`` applies it (its input rules)."""
    from icemor.table import Table

    return Table.load(identifier, catalog=catalog).apply_changes(rows, **options)
