"""``icemor.spark.session()``: the active SparkSession, or a new one set up for icemor;
``icemor.spark.read()``: an icemor table (or its change feed) as a DataFrame, on every PySpark
version; ``icemor.spark.register()``: the ``icemor`` Spark data source (PySpark 4.2+);
``icemor.spark.cdc_sink()``: exactly-once change ingestion from Structured Streaming;
``icemor.spark.sql()``: Spark SQL's ``MERGE INTO``, ``UPDATE`` and ``DELETE FROM`` on icemor tables;
``icemor.spark.write()``: a DataFrame appended or overwritten on the executors;
``icemor.spark.errors()``: icemor's errors out of Spark's exceptions where user code waits; and
``icemor.spark.ship()`` / ``pack()``: icemor for executors that do not have it installed.

A thin, lazy front for :mod:`icemor.engines.spark`; importing this module does not import
pyspark, calling its functions does.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from typing import TYPE_CHECKING, Any

from icemor.exceptions import IcemorError, InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as PyIcebergTable
    from pyspark.sql import DataFrame, SparkSession

    from icemor.engines.spark import session
    from icemor.engines.spark.datasource import Services
    from icemor.engines.spark.ship import build_archive as pack
    from icemor.engines.spark.ship import ship
    from icemor.ops.cdc import ChangeMetrics
    from icemor.ops.delete import DeleteMetrics
    from icemor.ops.merge import MergeMetrics
    from icemor.ops.overwrite import OverwriteMetrics
    from icemor.ops.update import UpdateMetrics

__all__ = [
    "attach",
    "cdc_sink",
    "detach",
    "errors",
    "pack",
    "read",
    "register",
    "session",
    "ship",
    "sql",
    "write",
]


# Three names are the engine's own functions, imported when first used (PEP 562): this module
# must import without pyspark, and a wrapper would restate their signatures.
_LAZY = {
    "session": ("icemor.engines.spark", "session"),
    "ship": ("icemor.engines.spark.ship", "ship"),
    "pack": ("icemor.engines.spark.ship", "build_archive"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg) from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
        deletes: ``equality`` or ``position`` (default: the table's, see
            :meth:`icemor.table.Table.apply_changes`).
    """
    # icemor.ops.cdc loads pyiceberg's pyarrow IO: ~1 s more for `import icemor.spark` (measured)
    from icemor.ops.cdc import ChangeOptions, ChangeSink  # noqa: PLC0415 - cost

    options = ChangeOptions(
        key=tuple(key),
        op_column=op_column,
        order_by=order_by,
        allow_nullable_key=allow_nullable_key,
        partitions=partitions,
        deletes=deletes,
    )
    return ChangeSink(table, options, app_id=app_id, progress=progress, after_commit=_compact_after_batch)


def _compact_after_batch(iceberg: PyIcebergTable, spark: SparkSession) -> None:
    """``cdc_sink``'s compaction between batches (``icemor.cdc.compact.enabled``), on ``spark``'s
    executors (pickled by reference: Spark Connect's server imports it)."""
    from icemor.table import Table  # noqa: PLC0415 - cost: ~0.1 s

    Table(iceberg, iceberg.catalog)._compact_after_committed_batch(spark)


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
    from icemor.engines.spark.errors import spark_errors  # noqa: PLC0415 - optional: pyspark

    with spark_errors():  # a task's icemor error (a duplicate MERGE key...) as its one line
        return _sql(spark, text, catalog)


def _sql(
    spark: SparkSession, text: str, catalog: Catalog | str | None
) -> MergeMetrics | UpdateMetrics | DeleteMetrics:
    from icemor.expr.dml import Delete, Update, parse_statement  # noqa: PLC0415 - cost: sqlglot ~0.7 s
    from icemor.table import Table  # noqa: PLC0415 - cost: ~0.1 s

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
            scan's language (docs/sql.md); ``overwrite_mode``: ``static`` (default) or
            ``dynamic`` (Iceberg's: the partitions the rows fall in are replaced whole, as
            Spark's dynamic ``partitionOverwriteMode``); ``catalog``: a catalog name (default:
            icemor's embedded catalog). Names are case-insensitive, ``_`` or ``-``.

    Returns:
        The rows appended (``append``, as ``table.append``), or the overwrite's metrics (as
        ``table.overwrite``).

    Raises:
        InvalidArgumentError: An unknown mode or option, a bad condition, rows that do not fit
            the table (named); nothing is committed and no file is left.
        NoSuchTableError: No such table.
    """
    from icemor.engines.spark.errors import spark_errors  # noqa: PLC0415 - optional: pyspark
    from icemor.engines.spark.table_writes import MODES, dataframe_rows, removal_runner, write_options  # noqa: PLC0415 - optional: pyspark
    from icemor.ops.append import append_data  # noqa: PLC0415 - cost: ~1 s
    from icemor.ops.overwrite import overwrite_rows  # noqa: PLC0415 - cost: ~1 s
    from icemor.ops.replace_partitions import replace_partitions  # noqa: PLC0415 - cost: ~1 s

    chosen = str(mode).strip().lower()
    if chosen not in MODES:
        msg = f"unknown write mode {mode!r}: use {' or '.join(repr(m) for m in MODES)}"
        raise InvalidArgumentError(msg)
    where, catalog, dynamic = write_options(options, overwrite=chosen == "overwrite")
    target = _load_table(table, catalog)
    note = logging.getLogger("icemor").warning
    with spark_errors():
        if chosen == "append":
            return append_data(target, dataframe_rows(df), note=note)
        if dynamic:
            return replace_partitions(target, dataframe_rows(df), note=note)
        return overwrite_rows(target, dataframe_rows(df), where, run=removal_runner(df, target), note=note)


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
    from icemor.engines.spark.errors import spark_errors  # noqa: PLC0415 - optional: pyspark

    with spark_errors():  # a file of the table missing: icemor's error (see scan_to_dataframe)
        return _read(spark, table, options)


def _read(spark: SparkSession, table: str | None, options: dict[str, Any]) -> DataFrame:
    from icemor.engines.spark import scan_to_dataframe  # noqa: PLC0415 - optional: pyspark
    from icemor.engines.spark.datasource import (  # noqa: PLC0415 - optional: pyspark
        change_request,
        is_change_feed,
        ordered_names,
        plan_changes_job,
        plan_scan,
        read_request,
    )
    from icemor.engines.spark.feed import changes_to_dataframe  # noqa: PLC0415 - optional: pyspark
    from icemor.io.changes import CHANGE_COLUMNS  # noqa: PLC0415 - cost: ~1 s
    from icemor.table import Table, to_epoch_ms  # noqa: PLC0415 - cost: ~0.1 s

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


def errors() -> AbstractContextManager[None]:
    """A block whose Spark exception carrying an icemor error is raised as that error: its class,
    its one line, chained from Spark's exception (the whole trace stays in ``__cause__``).

    icemor's own calls (:func:`read`, :func:`write`, :func:`sql`, the Spark work of a table's
    ``delete``, ``update``, ``merge``, ``apply_changes``, ...) already do this. Where your code
    waits on Spark, icemor cannot: an icemor error raised in a stream's sink reaches
    ``query.awaitTermination()`` as a ``StreamingQueryException``, one raised while the tasks of
    a DataFrame icemor returned run reaches ``df.collect()`` as a ``PythonException``, an error
    of the ``icemor`` data source reaches ``spark.read.format("icemor")`` as an
    ``AnalysisException`` whose first line ends with icemor's. Any other error is raised
    unchanged.

    Example::

        with icemor.spark.errors():
            query.awaitTermination()    # e.g. InvalidArgumentError: unknown op 'Q' in column 'op' ...
    """
    from icemor.engines.spark.errors import spark_errors  # noqa: PLC0415 - optional: pyspark

    return spark_errors()


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
    from icemor.engines.spark.datasource import register as _register  # noqa: PLC0415 - optional: pyspark

    _register(spark, _data_source_services(), front=_front_read if fast_reads else None)


def _data_source_services() -> Services:
    """What the data source needs from above the engine: module-level functions and classes of
    the facade and the operations, pickled by reference (Spark's Python workers import them)."""
    from icemor.engines.spark.datasource import Services  # noqa: PLC0415 - optional: pyspark
    from icemor.ops.append import append_data  # noqa: PLC0415 - cost: ~1 s
    from icemor.ops.inputs import TableRows  # noqa: PLC0415 - cost: ~0.7 s
    from icemor.ops.overwrite import check_overwrite, overwrite_rows  # noqa: PLC0415 - cost: ~1 s
    from icemor.table import to_epoch_ms  # noqa: PLC0415 - cost: ~0.1 s

    return Services(
        load_table=_load_table,
        epoch_ms=to_epoch_ms,
        apply_changes=_apply_changes,
        create_mirror=_create_mirror,
        input_rules=TableRows,
        check_overwrite=check_overwrite,
        append=append_data,
        overwrite=overwrite_rows,
    )


def _front_read(spark: SparkSession, table: str | None, options: dict[str, Any]) -> DataFrame:
    """``spark.read.format("icemor")...load(table)`` of a registered Python client."""
    return read(spark, table, **options)


def _create_mirror(
    identifier: str,
    catalog: str | None,
    columns: pa.Schema,
    *,
    key: Sequence[str],
    source: tuple[str, str | None] | None,
    partition_by: Sequence[str] | None = None,
    format_version: int | None = None,
) -> PyIcebergTable:
    """The sink's missing target (Spark's Python workers call it, by reference); made concurrently
    by another writer, that one is taken."""
    from icemor import _catalog  # noqa: PLC0415 - cost: ~25 ms
    from icemor.catalog import table_locations  # noqa: PLC0415 - cost: ~25 ms
    from icemor.ops.cdc.mirror import create_mirror  # noqa: PLC0415 - cost: ~1 s

    cat = _catalog(catalog)
    like = None if source is None else _load_table(*source)
    try:
        return create_mirror(
            cat,
            identifier,
            columns,
            key=key,
            source=like,
            partition_by=partition_by,
            format_version=format_version,
            tables=lambda: table_locations(cat, strict=False),
        )
    except IcemorError:
        with contextlib.suppress(IcemorError):
            return _load_table(identifier, catalog)
        raise


def _load_table(identifier: str, catalog: str | None) -> PyIcebergTable:
    """The data source's way to a table (Spark's Python workers call it, by reference)."""
    from icemor.table import Table  # noqa: PLC0415 - cost: ~0.1 s

    return Table.load(identifier, catalog=catalog).pyiceberg


def _apply_changes(identifier: str, catalog: str | None, rows: pa.Table, **options: Any) -> ChangeMetrics:
    """The streaming sink's commit: one batch as ``Table.apply_changes`` applies it (its input rules;
    it builds the batch's :class:`icemor.ops.cdc.ChangeOptions` from ``options``, its keywords)."""
    from icemor.table import Table  # noqa: PLC0415 - cost: ~0.1 s

    return Table.load(identifier, catalog=catalog).apply_changes(rows, **options)


def attach(spark: SparkSession, *, name: str = "icemor", catalog: str | None = None) -> None:
    """Make ``spark``'s SQL and ``spark.table`` know the tables of icemor's catalog ``catalog``.

    From then on, on this session, ``spark.sql(...)`` and ``spark.table(...)`` /
    ``spark.read.table(...)`` name icemor tables as Iceberg's Spark runtime names its own:
    ``name.shop.orders`` or ``shop.orders`` anywhere a table may stand (FROM, JOIN, subqueries,
    CTEs, a MERGE source, ``INSERT … SELECT``), time travel (``VERSION AS OF``, ``TIMESTAMP AS
    OF``, ``FOR SYSTEM_VERSION AS OF``, ``shop.orders.branch_dev`` / ``.tag_v1``), metadata
    tables (``shop.orders.snapshots``, ``.files``, ... and ``.changes``, the change feed), and
    statements writing them (``INSERT INTO`` / ``INSERT OVERWRITE``, ``MERGE INTO``, ``UPDATE``,
    ``DELETE FROM``, ``CREATE TABLE`` [``AS SELECT``], ``DROP TABLE``). Reads apply deletes as
    :func:`read` does; Spark resolves and plans everything else. docs/spark.md lists, statement
    by statement, what runs and what is refused.

    Spark keeps its catalogs on the JVM, so ``attach`` stands in front of this session's
    ``sql`` and ``table`` (and every ``DataFrameReader.table``) until :func:`detach`; a
    statement naming no icemor table goes to Spark untouched.

    Example::

        icemor.spark.attach(spark)
        spark.sql("INSERT INTO shop.orders SELECT * FROM staging")
        spark.table("shop.orders").where("qty > 1").count()

    Args:
        spark: The session (classic or Connect).
        name: The catalog name statements use (``icemor.shop.orders``).
        catalog: icemor's catalog, by name (as :func:`read`'s; default the embedded one).
    """
    from icemor.engines.spark.front import attach as _attach  # noqa: PLC0415 - optional: pyspark
    from icemor.spark_catalog import services  # noqa: PLC0415 - optional: pyspark

    _attach(spark, name, services(catalog, read_table=read, write_table=write, run_dml=sql))


def detach(spark: SparkSession) -> bool:
    """Undo :func:`attach` on ``spark``: its ``sql`` and ``table`` are Spark's own again.

    Returns:
        True if the session was attached.
    """
    from icemor.engines.spark.front import detach as _detach  # noqa: PLC0415 - optional: pyspark

    return _detach(spark)
