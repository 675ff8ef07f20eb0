"""UPDATE as merge-on-read: position deletes for the old rows, data files for the new, one snapshot.

``SET`` values and the condition are SQL (:mod:`icemor.expr`). On the local engine DuckDB runs
``SELECT _file, _pos, <new row> FROM <scan> WHERE <condition>`` over the streamed merge-on-read
scan; the conjuncts of the condition that translate to pyiceberg prune data files first. The
rest is :mod:`icemor.ops.rowlevel`. On Spark the same statement is Spark SQL over the scan read
on the executors, and executor tasks write its deletes and new rows
(:func:`icemor.ops.rowlevel.write_and_commit_on_spark`): no changed row comes to the driver.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icemor.exceptions import InvalidArgumentError
from icemor.expr.condition import parse_condition
from icemor.expr.sql import parse_sql
from icemor.ops import rowlevel
from icemor.ops.inputs import check_distinct_names
from icemor.ops.units import Positions, check_writable, write_job
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P
from icemor.spec.metadata_columns import ROW_ID

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.types import PrimitiveType
    from pyspark.sql import SparkSession

    from icemor.engines import Runner
    from icemor.expr.sql import SqlExpression
    from icemor.planning.scan_job import ScanJob

__all__ = ["UpdateMetrics", "UpdatePlan", "plan_update", "update_rows"]


@dataclass(frozen=True)
class UpdatePlan:
    """An UPDATE checked against the table: the scan of its targets and its SQL."""

    job: ScanJob
    condition: SqlExpression | None
    values: dict[str, SqlExpression]
    """Table column -> its new value (unassigned columns keep theirs)."""
    types: dict[str, PrimitiveType]

    def select_sql(self, dialect: rowlevel.Dialect, target: str = "__target") -> str:
        """``SELECT _file, _pos, <every column, new or kept> FROM target WHERE …``."""
        q = dialect.quote
        row = ", ".join(
            f"{dialect.cast(self.values[f.name].text, self.types[f.name])} AS {q(f.name)}"
            if f.name in self.values
            else q(f.name)
            for f in self.job.metadata.schema().fields
        )
        where = f" WHERE ({self.condition.text}\n)" if self.condition is not None else ""
        # v3: an updated row keeps its row id (spec, "Row Lineage")
        lineage = f"{q(ROW_ID.name)}, " if self.job.options.row_id_column else ""
        return f"SELECT _file, _pos, {lineage}{row} FROM {target}{where}"


@dataclass(frozen=True)
class UpdateMetrics:
    """What an UPDATE did."""

    rows_updated: int
    data_files_added: int
    delete_files_added: int
    data_files_removed: int
    snapshot_id: int | None
    """The new snapshot; None when no row matched (nothing was committed)."""
    seconds: float


def plan_update(
    table: PyIcebergTable,
    set: Mapping[str, str],
    where: str | None,
) -> UpdatePlan:
    """Check the UPDATE and build the scan and SQL that find its rows.

    DuckDB binds the SQL (types, columns, functions) on both engines: the documented subset
    is the same on both, so a bad value or condition is refused before anything runs.

    Raises:
        InvalidArgumentError: No assignment, unknown column, a value that cannot be stored in
            its column, a condition that is not boolean or does not parse, table columns whose
            names differ only in case.
    """
    metadata = table.metadata
    schema = metadata.schema()
    if not set:
        msg = "UPDATE needs at least one SET column = value"
        raise InvalidArgumentError(msg)
    # Iceberg allows id and ID side by side; SQL (DuckDB, Spark by default) cannot tell them apart
    check_distinct_names((f.name for f in schema.fields), what=f"table {'.'.join(table.name())}")
    # parsed and bound once: its pruning part filters the scan, its SQL runs whole
    condition = parse_condition(where, schema, sql_only=True, what="condition") if where is not None else None
    where_sql = condition.sql if condition is not None else None
    values: dict[str, SqlExpression] = {}
    for name, text in set.items():
        column = rowlevel.resolve_column(schema, name)
        if column in values:
            msg = f"column {column!r} is SET twice"
            raise InvalidArgumentError(msg)
        values[column] = parse_sql(text, what=f"SET value of {column}")
    # the rows it rewrites come from the table's files, never the local verdict store
    job = write_job(
        prepare_scan(
            metadata,
            table.io,
            row_filter=condition.pruning() if condition is not None else None,
            metadata_columns=True,
            selected_fields=("*", ROW_ID.name) if metadata.format_version >= 3 else ("*",),
        )
    )
    types: dict[str, PrimitiveType] = {}
    for column, value in values.items():
        value_type = rowlevel.typed(job, f"SELECT ({value.text}\n) FROM __target", f"SET {column}")[0][1]
        types[column] = rowlevel.check_assignment(schema, column, value_type, f"SET {column}")
    if where_sql is not None:
        sql = f"SELECT ({where_sql.text}\n) FROM __target"
        rowlevel.check_condition(rowlevel.typed(job, sql, "condition")[0][1], "condition", where_sql.text)
    plan = UpdatePlan(job, where_sql, values, types)
    rowlevel.typed(
        job, plan.select_sql(rowlevel.DUCKDB), "UPDATE"
    )  # the whole statement: any other error, now
    return plan


def update_rows(
    table: PyIcebergTable,
    set: Mapping[str, str],
    where: str | None = None,
    *,
    run: Runner,
    spark: SparkSession | None = None,
) -> UpdateMetrics:
    """Update the rows matching ``where`` (every row when None) as one merge-on-read snapshot.

    Args:
        table: The pyiceberg table (refreshed here).
        set: Column -> SQL value, e.g. ``{"qty": "qty + 1"}``.
        where: SQL condition; None updates every row.
        run: Scheduler of the per-file delete work.
        spark: Run the SQL as Spark SQL on this session (the scan read on its executors)
            instead of DuckDB over the local scan.

    Raises:
        InvalidArgumentError: See :func:`plan_update`; a NULL for a required column.
        CommitConflictError: A concurrent commit conflicts; nothing is committed.
    """
    started = time.monotonic()
    table = table.refresh()
    check_writable(table, mode_property=P.UPDATE_MODE)
    plan = plan_update(table, set, where)
    if plan.job.snapshot is None:
        return UpdateMetrics(0, 0, 0, 0, None, time.monotonic() - started)
    if spark is not None:
        return _update_on_spark(table, plan, spark, started)
    positions = Positions()
    new_rows = rowlevel.NewRows(table, lineage=plan.job.options.row_id_column)
    try:
        # closed on error too: an open DuckDB result would refuse this thread's next query
        with closing(rowlevel.scan_rows(plan.job, plan.select_sql(rowlevel.DUCKDB))) as batches:
            for batch in batches:
                positions.add(batch.column("_file"), batch.column("_pos"))
                new_rows.add(batch)
        found = positions.finish()
    except BaseException:
        new_rows.abort()
        raise
    if not found:
        return UpdateMetrics(0, 0, 0, 0, None, time.monotonic() - started)
    result = rowlevel.commit_row_changes(
        table, plan.job, found, new_rows, run=run, isolation_property=P.UPDATE_ISOLATION_LEVEL
    )
    return UpdateMetrics(rows_updated=positions.rows, **rowlevel.commit_figures(result, started))


def _update_on_spark(
    table: PyIcebergTable, plan: UpdatePlan, spark: SparkSession, started: float
) -> UpdateMetrics:
    """Spark SQL finds the changed rows; executor tasks write the deletes and new rows."""
    from icemor.engines.spark.sql import sql_dataframe  # noqa: PLC0415 - optional: pyspark

    plan.job.whole_files = True  # the write runs in the scan's tasks (clustered=True below)
    with sql_dataframe(
        spark, lambda v: plan.select_sql(rowlevel.SPARK, target=v["target"]), scans={"target": plan.job}
    ) as changes:
        done = rowlevel.write_and_commit_on_spark(
            table, plan.job, changes, isolation_property=P.UPDATE_ISOLATION_LEVEL, clustered=True
        )
    updated = done.updated if done.result.snapshot is not None else 0
    return UpdateMetrics(rows_updated=updated, **rowlevel.commit_figures(done.result, started))
