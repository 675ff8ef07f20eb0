"""MERGE as merge-on-read: matched rows updated or deleted, unmatched source rows inserted, one snapshot.

Semantics are Spark SQL's ``MERGE INTO``: clauses are tried in order and the first whose
condition holds acts; a target row matched by more than one source row is an error, never a
silent duplicate, unless the matched clauses are exactly one unconditional ``DELETE`` (Spark's
cardinality rule, :attr:`MergePlan.checks_cardinality`); a source row matched by no target row
goes to the ``WHEN NOT MATCHED`` clauses.

Locally, one DuckDB hash join of the source against the streamed merge-on-read scan of the
target gives every matched pair with its clause and new row. The target is pruned first by the
``ON`` condition: its target-only conjuncts, and the source's key range for each ``t.k = s.k``.

On Spark, one plan joins the source (a Spark DataFrame as it is, never collected; an Arrow or
pandas source made a DataFrame) with the target scan, LEFT OUTER when a NOT MATCHED clause
exists, the acting clause chosen by CASE (:meth:`MergePlan.changes_sql`); executor tasks write
the deletes and new rows and find a target row matched twice (adjacent after sorting by
``_file, _pos``). A DataFrame source's key range is not computed: the target is pruned by ON's
target-only conjuncts alone.
"""

from __future__ import annotations

import re
import time
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyiceberg.expressions as _expressions
from pyiceberg.expressions import AlwaysTrue, And
from pyiceberg.table.snapshots import Operation

from icemor.dependencies import is_spark_dataframe
from icemor.exceptions import InvalidArgumentError
from icemor.expr.condition import parse_condition
from icemor.expr.duck import empty_table, query_batches
from icemor.expr.sql import parse_sql
from icemor.ops import rowlevel
from icemor.ops.inputs import check_distinct_names, read_arrow
from icemor.ops.units import CHANGE_NEW, CHANGE_OLD, Positions, check_writable, write_job
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P
from icemor.spec.metadata_columns import ROW_ID

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.types import PrimitiveType
    from pyspark.sql import DataFrame, SparkSession

    from icemor.engines import Runner
    from icemor.expr.sql import SqlExpression
    from icemor.planning.scan_job import ScanJob

__all__ = ["MergeClause", "MergeMetrics", "MergePlan", "merge_rows", "plan_merge"]

_E: Any = _expressions  # pydantic predicates: mypy cannot see their (term, value) constructors
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DUPLICATE_MATCH = (
    "MERGE matched a target row with more than one source row: a target row can be updated or "
    "deleted once only (make the ON condition match at most one source row per target row)"
)


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN [NOT] MATCHED [AND condition] THEN …`` clause."""

    kind: Literal["update", "delete", "insert"]
    condition: str | None = None
    values: Mapping[str, str] | None = None
    """Column -> SQL value; None: every column from the source column of the same name (``*``)."""


@dataclass(frozen=True)
class MergeMetrics:
    """What a MERGE did."""

    rows_updated: int
    rows_deleted: int
    rows_inserted: int
    data_files_added: int
    delete_files_added: int
    data_files_removed: int
    snapshot_id: int | None
    """The new snapshot; None when nothing changed (nothing was committed)."""
    seconds: float


@dataclass(frozen=True)
class _Clause:
    kind: str
    condition: SqlExpression | None
    values: dict[str, SqlExpression]
    types: dict[str, PrimitiveType] = field(default_factory=dict)
    star: dict[str, str] = field(default_factory=dict)
    """``*`` clauses: table column -> the source column it takes (quoted per dialect)."""

    def value_sql(self, column: str, dialect: rowlevel.Dialect, source_alias: str) -> str:
        if column in self.star:
            ref = f"{dialect.quote(source_alias)}.{dialect.quote(self.star[column])}"
            return dialect.cast(ref, self.types[column])
        return dialect.cast(self.values[column].text, self.types[column])


@dataclass(frozen=True)
class MergePlan:
    """A MERGE checked against the table and source, with the SQL that runs it."""

    job: ScanJob
    source: pa.Table
    """The source rows plus ``__src_row`` (their index)."""
    on: SqlExpression
    target_alias: str
    source_alias: str
    matched: list[_Clause]
    not_matched: list[_Clause]

    @property
    def operation(self) -> Operation | None:
        """An append when the MERGE only inserts (no MATCHED clause): Spark plans that MERGE as
        an append (``RewriteMergeIntoTable``), which incremental readers take; else RowDelta's."""
        return None if self.matched else Operation.APPEND

    @property
    def checks_cardinality(self) -> bool:
        """Whether a target row matched by two source rows is an error: Spark 3.5's rule
        (``RewriteMergeIntoTable.shouldCheckCardinality``), on the MATCHED clauses alone.

        Not when there is no MATCHED clause, nor when the MATCHED clauses are exactly one
        ``DELETE`` without a condition (deleting a row twice deletes it once); in every other
        case, even for pairs no clause acts on. A condition that is always true (``TRUE``,
        ``1 = 1``) is still a condition, as Spark's analyzer sees it.
        """
        if not self.matched:
            return False
        return not (
            len(self.matched) == 1 and self.matched[0].kind == "delete" and self.matched[0].condition is None
        )

    def matched_sql(
        self, dialect: rowlevel.Dialect, target: str = "__target", source: str = "__source"
    ) -> str:
        """Every matched pair: ``__file, __pos, __src, __clause`` (-1: no clause acts) and new row."""
        q = dialect.quote
        t, s = self.target_alias, self.source_alias
        whens = " ".join(
            f"WHEN ({c.condition.text}\n) THEN {i}" if c.condition is not None else f"WHEN TRUE THEN {i}"
            for i, c in enumerate(self.matched)
        )
        clause = f"CASE {whens} ELSE -1 END" if self.matched else "-1"
        columns = []
        for f in self.job.metadata.schema().fields:
            arms = []
            for c in self.matched:
                if c.kind != "update":
                    value = "NULL"
                elif f.name in c.values:
                    value = c.value_sql(f.name, dialect, s)
                else:
                    value = f"{q(t)}.{q(f.name)}"
                cond = f"({c.condition.text}\n)" if c.condition is not None else "TRUE"
                arms.append(f"WHEN {cond} THEN {value}")
            expr = f"CASE {' '.join(arms)} ELSE NULL END" if arms else "NULL"
            columns.append(f"{expr} AS {q(f.name)}")
        return (
            f"SELECT {q(t)}._file AS __file, {q(t)}._pos AS __pos, {q(s)}.__src_row AS __src, "
            f"{self._row_id(dialect)}{clause} AS __clause, {', '.join(columns)} "
            f"FROM {target} AS {q(t)} JOIN {source} AS {q(s)} ON ({self.on.text}\n)"
        )

    def _row_id(self, dialect: rowlevel.Dialect) -> str:
        """v3: the target row's ``_row_id``, which an updated row keeps (spec, "Row Lineage")."""
        if not self.job.options.row_id_column:
            return ""
        q = dialect.quote
        return f"{q(self.target_alias)}.{q(ROW_ID.name)} AS {q(ROW_ID.name)}, "

    def insert_sql(self, dialect: rowlevel.Dialect, source: str = "__unmatched") -> str:
        """The inserted rows of unmatched source rows: ``__clause`` (>= 0) and the new row."""
        q = dialect.quote
        s = self.source_alias
        whens = " ".join(
            f"WHEN ({c.condition.text}\n) THEN {i}" if c.condition is not None else f"WHEN TRUE THEN {i}"
            for i, c in enumerate(self.not_matched)
        )
        columns = []
        for f in self.job.metadata.schema().fields:
            arms = []
            for c in self.not_matched:
                cond = f"({c.condition.text}\n)" if c.condition is not None else "TRUE"
                value = c.value_sql(f.name, dialect, s) if f.name in c.values else "NULL"
                arms.append(f"WHEN {cond} THEN {value}")
            columns.append(f"CASE {' '.join(arms)} ELSE NULL END AS {q(f.name)}")
        inner = f"SELECT CASE {whens} ELSE -1 END AS __clause, {', '.join(columns)} FROM {source} AS {q(s)}"
        return f"SELECT * FROM ({inner}) AS __inserts WHERE __clause >= 0"

    def changes_sql(self, dialect: rowlevel.Dialect, target: str, source: str) -> str:
        """Every change in one statement: the source joined with the target (LEFT OUTER when a
        NOT MATCHED clause exists), the acting clause chosen by CASE as in Iceberg's Spark MERGE.

        Columns: ``_file``, ``_pos`` (the target row, NULL for an unmatched source row),
        :data:`~icemor.ops.units.CHANGE_OLD` (the target row goes), :data:`~icemor.ops.units.CHANGE_NEW`
        (the row's columns are written) and the table's columns. With a matched clause, every
        matched pair is kept, even when no clause acts: a target row matched twice is an error.
        """
        q = dialect.quote
        t, s = self.target_alias, self.source_alias
        schema = self.job.metadata.schema()

        def choose(clauses: list[_Clause]) -> str:
            whens = " ".join(
                f"WHEN ({c.condition.text}\n) THEN {i}" if c.condition is not None else f"WHEN TRUE THEN {i}"
                for i, c in enumerate(clauses)
            )
            return f"CASE {whens} ELSE -1 END" if clauses else "-1"

        def arms(clauses: list[_Clause], column: str) -> str:
            out = []
            for c in clauses:
                if c.kind == "delete":
                    value = "NULL"
                elif column in c.values:
                    value = c.value_sql(column, dialect, s)
                elif c.kind == "update":
                    value = f"{q(t)}.{q(column)}"
                else:
                    value = "NULL"
                cond = f"({c.condition.text}\n)" if c.condition is not None else "TRUE"
                out.append(f"WHEN {cond} THEN {value}")
            return f"CASE {' '.join(out)} ELSE NULL END" if out else "NULL"

        unmatched = f"{q(t)}._file IS NULL"
        columns = [
            f"CASE WHEN {unmatched} THEN {arms(self.not_matched, f.name)} "
            f"ELSE {arms(self.matched, f.name)} END AS {q(f.name)}"
            for f in schema.fields
        ]
        join = "LEFT OUTER JOIN" if self.not_matched else "JOIN"
        inner = (
            f"SELECT {q(t)}._file AS _file, {q(t)}._pos AS _pos, {self._row_id(dialect)}"
            f"CASE WHEN {unmatched} THEN {choose(self.not_matched)} "
            f"ELSE {choose(self.matched)} END AS __clause, "
            f"{', '.join(columns)} "
            f"FROM {source} AS {q(s)} {join} {target} AS {q(t)} ON ({self.on.text}\n)"
        )
        updates = [str(i) for i, c in enumerate(self.matched) if c.kind == "update"]
        updated = f"__clause IN ({', '.join(updates)})" if updates else "FALSE"
        keep = "__clause >= 0 OR _file IS NOT NULL" if self.matched else "__clause >= 0"
        names = ", ".join(q(f.name) for f in schema.fields)
        if self.job.options.row_id_column:
            names = f"{q(ROW_ID.name)}, {names}"
        return (
            f"SELECT _file, _pos, (_file IS NOT NULL AND __clause >= 0) AS {CHANGE_OLD}, "
            f"((_file IS NULL AND __clause >= 0) OR (_file IS NOT NULL AND {updated})) AS {CHANGE_NEW}, "
            f"{names} FROM ({inner}) AS __changes WHERE {keep}"
        )


def _key_on(keys: Sequence[str], schema: Schema, source: pa.Schema, t: str, s: str) -> str:
    parts = []
    by_lower = {n.lower(): n for n in source.names}  # names are distinct ignoring case by now
    for key in keys:
        column = rowlevel.resolve_column(schema, key)
        if key.lower() not in by_lower:
            msg = f"the MERGE source has no key column {key!r} (source columns: {', '.join(source.names)})"
            raise InvalidArgumentError(msg)
        parts.append(f"{_name(t)}.{_name(column)} = {_name(s)}.{_name(by_lower[key.lower()])}")
    if not parts:
        msg = "MERGE needs at least one key column in on="
        raise InvalidArgumentError(msg)
    return " AND ".join(parts)


def _name(identifier: str) -> str:
    """A plain identifier as is (the same in Spark SQL and DuckDB), any other double-quoted."""
    return identifier if _IDENTIFIER.fullmatch(identifier) else rowlevel.DUCKDB.quote(identifier)


def _equi_keys(on: SqlExpression, t: str, s: str) -> list[tuple[str, str]]:
    """``(target column, source column)`` of each top-level ``t.a = s.b`` conjunct of ON."""
    out = []
    stack = [on.tree]
    while stack:
        node = stack.pop()
        if node.get("type") == "CONJUNCTION_AND":
            stack.extend(node["children"])
        elif node.get("type") == "COMPARE_EQUAL":
            sides = [node["left"], node["right"]]
            if all(n.get("class") == "COLUMN_REF" and len(n["column_names"]) == 2 for n in sides):
                names = {n["column_names"][0].lower(): n["column_names"][1] for n in sides}
                if set(names) == {t.lower(), s.lower()}:
                    out.append((names[t.lower()], names[s.lower()]))
    return out


def _source_range_filter(
    on: SqlExpression, source: pa.Table, schema: Schema, t: str, s: str
) -> BooleanExpression:
    """``k >= min(s.k) AND k <= max(s.k)`` for each equi-key whose source values are comparable."""
    terms: list[BooleanExpression] = []
    for target_col, source_col in _equi_keys(on, t, s):
        names = {n.lower(): n for n in source.column_names}
        col = names.get(source_col.lower())
        if col is None or not source.num_rows:
            continue
        values = source.column(col)
        if not (pa.types.is_integer(values.type) or pa.types.is_string(values.type)):
            continue
        try:
            field_type = str(schema.find_type(target_col, case_sensitive=False))
            name = schema.find_column_name(schema.find_field(target_col, case_sensitive=False).field_id)
        except ValueError:
            continue
        if pa.types.is_integer(values.type) != (field_type in ("int", "long")):
            continue
        if pa.types.is_string(values.type) != (field_type == "string"):
            continue
        bounds = pc.min_max(values)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo is None or name is None:
            continue
        terms += [_E.GreaterThanOrEqual(name, lo), _E.LessThanOrEqual(name, hi)]
    if not terms:
        return AlwaysTrue()
    return terms[0] if len(terms) == 1 else And(*terms)


def plan_merge(
    table: PyIcebergTable,
    source: pa.Table,
    on: str | Sequence[str],
    clauses: Sequence[MergeClause],
    *,
    source_alias: str = "s",
    target_alias: str = "t",
) -> MergePlan:
    """Check the MERGE and build the scan and SQL that run it.

    Raises:
        InvalidArgumentError: No clause; unknown column; source without the key columns; a
            value that cannot be stored in its column; a non-boolean condition; ``*`` with a
            source that lacks a table column; source or table columns whose names differ only
            in case.
    """
    metadata = table.metadata
    schema = metadata.schema()
    t, s = target_alias, source_alias
    if t.lower() == s.lower():
        msg = f"the source and target aliases must differ (both are {t!r})"
        raise InvalidArgumentError(msg)
    if not clauses:
        msg = "MERGE needs at least one WHEN clause"
        raise InvalidArgumentError(msg)
    # SQL reads names case-insensitively (as Spark by default): id and ID in the source once
    # made the key range one column's and the join the other's, and a MERGE inserted an
    # existing key. Refused, like a source column that SQL would read as the row index.
    check_distinct_names(source.column_names, what="the MERGE source")
    check_distinct_names((f.name for f in schema.fields), what=f"table {'.'.join(table.name())}")
    if "__src_row" in {n.lower() for n in source.column_names}:
        msg = "the MERGE source must not have a column named __src_row (in any case)"
        raise InvalidArgumentError(msg)
    if isinstance(on, str) and _IDENTIFIER.fullmatch(on.strip()):
        on = [on.strip()]  # one key column, as ["id"]
    on_text = on if isinstance(on, str) else _key_on(list(on), schema, source.schema, t, s)
    # ON is parsed and bound once: its target-only conjuncts prune the scan, its SQL joins
    on_condition = parse_condition(on_text, schema, sql_only=True, what="ON condition", qualifier=t)
    on_sql = on_condition.sql
    assert on_sql is not None  # SQL only
    for parts in on_sql.columns():
        if (
            len(parts) == 2
            and parts[0].lower() == s.lower()
            and parts[1].lower() not in {n.lower() for n in source.column_names}
        ):
            names = ", ".join(source.column_names)
            msg = f"the MERGE source has no column {parts[1]!r} used in ON (source columns: {names})"
            raise InvalidArgumentError(msg)
    key_range = _source_range_filter(on_sql, source, schema, t, s)
    # the target rows come from the table's files, never the local verdict store
    job = write_job(
        prepare_scan(
            metadata,
            table.io,
            row_filter=on_condition.pruning(key_range),
            metadata_columns=True,
            selected_fields=("*", ROW_ID.name) if metadata.format_version >= 3 else ("*",),
        )
    )
    src = source.append_column("__src_row", pa.array(np.arange(source.num_rows, dtype=np.int64)))
    matched: list[_Clause] = []
    not_matched: list[_Clause] = []
    source_names = {n.lower(): n for n in source.column_names}
    empty_source = empty_table(src.schema)
    seen_unconditional = {"matched": False, "not": False}
    star_values: dict[str, SqlExpression] = {}  # the source's columns as `*` takes them, parsed once
    for i, clause in enumerate(clauses):
        what = f"clause {i + 1} ({'WHEN NOT MATCHED' if clause.kind == 'insert' else 'WHEN MATCHED'} "
        what += f"THEN {clause.kind.upper()})"
        group = "not" if clause.kind == "insert" else "matched"
        if seen_unconditional[group]:
            msg = f"{what} can never act: an earlier clause of its kind has no condition"
            raise InvalidArgumentError(msg)
        if clause.condition is None:
            seen_unconditional[group] = True
        if clause.kind not in ("update", "delete", "insert"):
            msg = f"unknown MERGE clause kind {clause.kind!r}"
            raise InvalidArgumentError(msg)
        condition = None
        if clause.condition:  # it chooses among matched pairs: it prunes nothing
            named = f"condition of {what}"
            condition = parse_condition(clause.condition, schema, sql_only=True, what=named, prune=False).sql
        values: dict[str, SqlExpression] = {}
        star: dict[str, str] = {}
        if clause.kind != "delete":
            if clause.values is None:  # * : every table column from the source's same-named column
                missing = [f.name for f in schema.fields if f.name.lower() not in source_names]
                if missing:
                    msg = (
                        f"{what} with * needs every table column in the source; it lacks {', '.join(missing)}"
                    )
                    raise InvalidArgumentError(msg)
                star = {f.name: source_names[f.name.lower()] for f in schema.fields}
                for column, name in star.items():
                    if column not in star_values:
                        star_values[column] = parse_sql(
                            f"{rowlevel.DUCKDB.quote(s)}.{rowlevel.DUCKDB.quote(name)}"
                        )
                values = {column: star_values[column] for column in star}
            else:
                for name, text in clause.values.items():
                    values[rowlevel.resolve_column(schema, name)] = parse_sql(
                        text, what=f"value of {name} in {what}"
                    )
        types: dict[str, PrimitiveType] = {}
        for column, value in values.items():
            value_type = _typed(job, empty_source, value.text, clause.kind, t, s, f"{what}, {column}")
            types[column] = rowlevel.check_assignment(schema, column, value_type, f"{what}, {column}")
        if condition is not None:
            ctype = _typed(job, empty_source, condition.text, clause.kind, t, s, f"condition of {what}")
            rowlevel.check_condition(ctype, f"condition of {what}", condition.text)
        (not_matched if clause.kind == "insert" else matched).append(
            _Clause(clause.kind, condition, values, types, star)
        )
    plan = MergePlan(job, src, on_sql, t, s, matched, not_matched)
    on_type = _typed(job, empty_source, on_sql.text, "update", t, s, "ON condition")
    rowlevel.check_condition(on_type, "ON condition", on_sql.text)
    rowlevel.typed(job, plan.matched_sql(rowlevel.DUCKDB), "MERGE", __source=empty_source)
    return plan


def _typed(job: ScanJob, source: pa.Table, sql: str, kind: str, t: str, s: str, what: str) -> str:
    q = rowlevel.DUCKDB.quote
    if kind == "insert":  # NOT MATCHED clauses see the source row only
        statement = f"SELECT ({sql}\n) FROM __source AS {q(s)}"
    else:
        statement = f"SELECT ({sql}\n) FROM __target AS {q(t)} JOIN __source AS {q(s)} ON TRUE"
    return rowlevel.typed(job, statement, what, __source=source)[0][1]


def merge_rows(
    table: PyIcebergTable,
    source: pa.Table | DataFrame,
    on: str | Sequence[str],
    clauses: Sequence[MergeClause],
    *,
    source_alias: str = "s",
    target_alias: str = "t",
    run: Runner,
    spark: SparkSession | None = None,
) -> MergeMetrics:
    """Run a MERGE as one merge-on-read snapshot (see the module docstring): locally with DuckDB,
    or on ``spark``'s executors when given.

    Raises:
        InvalidArgumentError: See :func:`plan_merge`; a duplicate match; NULL in a required column;
            a Spark DataFrame source without ``spark`` (the local engine never collects one).
        CommitConflictError: A concurrent commit conflicts; nothing is committed.
    """
    started = time.monotonic()
    if spark is None and is_spark_dataframe(source):
        msg = (
            "a Spark DataFrame MERGE source needs spark= (the Spark engine runs the MERGE without "
            "collecting it); for the local engine pass a local frame (Arrow, pandas, polars, Parquet)"
        )
        raise InvalidArgumentError(msg)
    table = table.refresh()  # the only refresh: the commit leaves the table at its snapshot
    check_writable(table, mode_property=P.MERGE_MODE)
    frame: DataFrame | None = None
    if is_spark_dataframe(source):
        from icemor.engines.spark.changes import arrow_schema  # noqa: PLC0415 - optional: pyspark

        # never collected: the SQL is typed against an empty table of its schema
        frame, source = source, arrow_schema(source).empty_table()
    assert isinstance(source, pa.Table)
    plan = plan_merge(table, source, on, clauses, source_alias=source_alias, target_alias=target_alias)
    if spark is not None:
        return _merge_on_spark(table, plan, spark, frame, started)
    positions = Positions()
    pairs = Positions()  # every matched (file, pos), to catch a target row matched twice
    new_rows = rowlevel.NewRows(table, lineage=plan.job.options.row_id_column)
    matched_src = np.zeros(plan.source.num_rows, dtype=bool)
    counts = {"update": 0, "delete": 0, "insert": 0}
    kinds = np.array([c.kind for c in plan.matched] or ["none"])
    try:
        # the batch streams are closed on error too: an open DuckDB result would refuse this
        # thread's next query
        if plan.job.snapshot is not None:
            matched = rowlevel.scan_rows(plan.job, plan.matched_sql(rowlevel.DUCKDB), __source=plan.source)
            with closing(matched) as batches:
                for batch in batches:
                    clause = batch.column("__clause").to_numpy(zero_copy_only=False).astype(np.int64)
                    matched_src[batch.column("__src").to_numpy(zero_copy_only=False)] = True
                    if plan.checks_cardinality:
                        pairs.add(batch.column("__file"), batch.column("__pos"))
                    acting = clause >= 0
                    if not acting.any():
                        continue
                    acted = batch.filter(pa.array(acting))
                    positions.add(acted.column("__file"), acted.column("__pos"))
                    updates = kinds[clause[acting]] == "update"
                    counts["update"] += int(updates.sum())
                    if updates.any():
                        new_rows.add(acted.filter(pa.array(updates)))
            if plan.checks_cardinality:
                pairs.finish(unique=DUPLICATE_MATCH)
        if plan.not_matched and not matched_src.all():
            unmatched = plan.source.filter(pa.array(~matched_src))
            with closing(
                query_batches(plan.insert_sql(rowlevel.DUCKDB), {"__unmatched": unmatched})
            ) as batches:
                for batch in batches:
                    counts["insert"] += batch.num_rows
                    new_rows.add(batch)
        found = positions.finish()
        # each target row once: without the cardinality check one may be deleted by several pairs
        counts["delete"] = sum(len(p) for p in found.values()) - counts["update"]
    except BaseException:
        new_rows.abort()
        raise
    if not found and not new_rows.rows:
        return MergeMetrics(0, 0, 0, 0, 0, 0, None, time.monotonic() - started)
    result = rowlevel.commit_row_changes(
        table,
        plan.job,
        found,
        new_rows,
        run=run,
        isolation_property=P.MERGE_ISOLATION_LEVEL,
        operation=plan.operation,
    )
    return MergeMetrics(
        rows_updated=counts["update"],
        rows_deleted=counts["delete"],
        rows_inserted=counts["insert"],
        **rowlevel.commit_figures(result, started),
    )


def _merge_on_spark(
    table: PyIcebergTable, plan: MergePlan, spark: SparkSession, frame: DataFrame | None, started: float
) -> MergeMetrics:
    """One Spark plan joins the source with the target scan read on the executors; executor tasks
    write the position deletes and the new rows (:func:`write_and_commit_on_spark`). ``frame`` is
    the source (None: ``plan.source`` made a DataFrame)."""
    from icemor.engines.spark.sql import arrow_to_dataframe, sql_dataframe  # noqa: PLC0415 - optional: pyspark

    if frame is None:
        frame = arrow_to_dataframe(spark, plan.source.drop_columns(["__src_row"]))
    with sql_dataframe(
        spark,
        lambda v: plan.changes_sql(rowlevel.SPARK, target=v["target"], source=v["source"]),
        scans={"target": plan.job},
        frames={"source": frame},
    ) as changes:
        done = rowlevel.write_and_commit_on_spark(
            table,
            plan.job,
            changes,
            isolation_property=P.MERGE_ISOLATION_LEVEL,
            unique=DUPLICATE_MATCH if plan.checks_cardinality else None,
            operation=plan.operation,
        )
    if done.result.snapshot is None:
        return MergeMetrics(0, 0, 0, 0, 0, 0, None, time.monotonic() - started)
    return MergeMetrics(
        rows_updated=done.updated,
        rows_deleted=done.deleted,
        rows_inserted=done.inserted,
        **rowlevel.commit_figures(done.result, started),
    )


def read_source(source: Any) -> pa.Table | DataFrame:
    """A MERGE source as an Arrow table (see :func:`icemor.ops.inputs.read_arrow`); a Spark
    DataFrame as it is (the Spark engine never collects it; the local engine refuses it)."""
    if is_spark_dataframe(source):
        return source
    return read_arrow(source, what="the MERGE source")
