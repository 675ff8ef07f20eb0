"""``icemor.spark.session()``: the active SparkSession, or a new one set up for icemor;
``icemor.spark.cdc_sink()``: exactly-once change ingestion from Structured Streaming; and
``icemor.spark.sql()``: Spark SQL's ``MERGE INTO``, ``UPDATE`` and ``DELETE FROM`` on icemor tables;
``icemor.spark.write()``: a DataFrame appended or overwritten on the executors.

A thin, lazy front for :mod:`icemor.engines.spark`; importing this module does not import
pyspark, calling :func:`session` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

    from icemor.ops.apply_changes import ChangeMetrics
    from icemor.ops.delete import DeleteMetrics
    from icemor.ops.merge import MergeMetrics
    from icemor.ops.overwrite import OverwriteMetrics
    from icemor.ops.update import UpdateMetrics

__all__ = ["cdc_sink", "session", "sql", "write"]


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
    deletes: str | None = None,
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
        deletes: ``equality`` or ``position`` (default: the table's, see
            :meth:`icemor.table.Table.apply_changes`).
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
            deletes=deletes,
        )
        if hasattr(table, "refresh"):
            table.refresh()
        if progress is not None:
            progress(batch_id, metrics)

    return process


def sql(
    spark: SparkSession, text: str, *, catalog: Catalog | str | None = None
) -> MergeMetrics | UpdateMetrics | DeleteMetrics:
    """Run one Spark SQL ``MERGE INTO``, ``UPDATE`` or ``DELETE FROM`` statement on an icemor table.

    The statement is parsed in Spark's dialect (sqlglot) and run by the builders, on ``spark``'s
    executors: ``MERGE`` by :meth:`icemor.table.Table.merge` (each ``WHEN`` clause in the order
    written), ``UPDATE`` by :meth:`~icemor.table.Table.update`, ``DELETE`` by
    :meth:`~icemor.table.Table.delete`; conditions and values go to them as written (the subset
    of docs/sql.md, Spark SQL's meaning). The
    target is a table of icemor's catalog (``catalog``: a name or catalog, default the embedded
    one); a MERGE source is a table or view Spark knows (``spark.table``) or a ``(query)`` run
    by Spark, never collected.

    Example::

        icemor.spark.sql(spark, "MERGE INTO shop.orders t USING updates s ON t.id = s.id "
                                "WHEN MATCHED AND s.op = 'D' THEN DELETE "
                                "WHEN MATCHED THEN UPDATE SET * "
                                "WHEN NOT MATCHED THEN INSERT *")

    Returns:
        The builder's metrics: :class:`~icemor.ops.merge.MergeMetrics`,
        :class:`~icemor.ops.update.UpdateMetrics` or :class:`~icemor.ops.delete.DeleteMetrics`.

    Raises:
        InvalidArgumentError: Not one MERGE INTO, UPDATE or DELETE FROM statement; a form Spark
            refuses (with Spark's reason) or icemor does not run (``WHEN NOT MATCHED BY SOURCE``,
            a CTE, ``DELETE … USING``, …, named); an unknown source; whatever the builder refuses.
        NoSuchTableError: The target is not in the catalog.
        CommitConflictError: A concurrent commit conflicts; nothing is committed.
    """
    from icemor.expr.dml import Delete, Update, parse_statement
    from icemor.table import Table

    statement = parse_statement(text)
    table = Table.load(statement.target, catalog=catalog)
    plan = statement.translate([f.name for f in table.schema().fields])
    if isinstance(plan, Delete):
        return table.delete(plan.where, spark=spark)
    if isinstance(plan, Update):
        return table.update(plan.set, plan.where, spark=spark)
    source = _source(spark, plan.source_table, plan.source_query)
    builder = table.merge(
        source, plan.on, source_alias=plan.source_alias, target_alias=plan.target_alias, spark=spark
    )
    for clause in plan.clauses:
        if clause.kind == "delete":
            builder.when_matched_delete(clause.condition)
        elif clause.kind == "update":
            if clause.values is None:
                builder.when_matched_update_all(clause.condition)
            else:
                builder.when_matched_update(clause.values, clause.condition)
        elif clause.values is None:
            builder.when_not_matched_insert_all(clause.condition)
        else:
            builder.when_not_matched_insert(clause.values, clause.condition)
    return builder.execute()


def _source(spark: SparkSession, table: str | None, query: str | None) -> DataFrame:
    """The MERGE source as a DataFrame; Spark's refusal of it (an unknown view, a query that does
    not parse or resolve) as one line. Its schema is resolved here, on Connect sessions too."""
    from icemor.exceptions import InvalidArgumentError

    what = f"the MERGE source {table}" if table is not None else "the MERGE source query"
    try:
        df = spark.table(table) if table is not None else spark.sql(query or "")
        df.columns  # noqa: B018  (analysis: a Connect session resolves names lazily)
    except Exception as e:
        if not {"AnalysisException", "ParseException"} & {c.__name__ for c in type(e).__mro__}:
            raise
        lines = str(e).strip().splitlines()
        msg = f"{what}: {lines[0] if lines else type(e).__name__}"
        raise InvalidArgumentError(msg) from e
    return df


def write(df: DataFrame, table: str, *, mode: str = "append", **options: Any) -> int | OverwriteMetrics:
    """Write ``df`` to the table ``table`` on its session's executors (PySpark 3.5 and 4.x).

    The function form of ``df.write.format("icemor").mode(mode).options(**options).save(table)``
    (PySpark 4.x, :class:`icemor.engines.spark.table_writes.IcemorBatchWriter`), with the same
    meaning: ``append`` adds the rows as one snapshot; ``overwrite`` replaces the rows matching
    the condition (merge-on-read: their deletes and the new data files, one snapshot), every row
    without one. Columns are matched by name and converted by the rules of ``table.append``.
    Only the written files' metadata comes to the driver (docs/spark.md, "Writing DataFrames").

    Example::

        icemor.spark.write(updates, "shop.orders", mode="overwrite", where="day = '2024-05-01'")

    Args:
        df: The rows.
        table: ``namespace.table``.
        mode: ``append`` or ``overwrite``.
        **options: ``where`` (or ``overwrite-where``): the overwrite's condition, SQL in the
            scan's language (docs/sql.md); ``catalog``: a catalog name (default: icemor's
            embedded catalog). Names are case-insensitive, ``_`` or ``-``.

    Returns:
        The rows appended (``append``, as ``table.append``), or the overwrite's metrics (as
        ``table.overwrite``).

    Raises:
        InvalidArgumentError: An unknown mode or option, a bad condition, rows that do not fit
            the table (named); nothing is committed and no file is left.
        NoSuchTableError: No such table.
    """
    import logging

    from icemor.engines.spark.table_writes import (
        MODES,
        dataframe_rows,
        load_table,
        removal_runner,
        write_options,
    )
    from icemor.exceptions import InvalidArgumentError
    from icemor.ops.append import append_data
    from icemor.ops.overwrite import overwrite_rows

    chosen = str(mode).strip().lower()
    if chosen not in MODES:
        msg = f"unknown write mode {mode!r}: use {' or '.join(repr(m) for m in MODES)}"
        raise InvalidArgumentError(msg)
    where, catalog = write_options(options, overwrite=chosen == "overwrite")
    target = load_table(table, catalog)
    note = logging.getLogger("icemor").warning
    if chosen == "append":
        return append_data(target, dataframe_rows(df), note=note)
    return overwrite_rows(target, dataframe_rows(df), where, run=removal_runner(df, target), note=note)
