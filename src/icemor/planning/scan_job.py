"""A merge-on-read scan as a plan: snapshot, read options and (lazily) its files and tasks.

:class:`ScanJob` is what every engine executes and what the write operations scan their
targets with; the public :class:`icemor.scan.Scan` facade wraps one. Building it resolves the
snapshot selectors (Iceberg Java's ``SnapshotUtil.schemaFor``), parses and binds the row
filter, and fixes the projection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, In, Not, Or, Reference
from pyiceberg.expressions.visitors import bind
from pyiceberg.table.refs import SnapshotRefType

from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError, UnsupportedFeatureError
from icemor.expr.sql import to_iceberg
from icemor.io.deletes import fully_deleted
from icemor.io.reader import ReadOptions
from icemor.planning.planner import all_field_parents, all_field_types, plan_files
from icemor.planning.tasks import SplitOptions, plan_tasks
from icemor.spec.describe import iso_time
from icemor.spec.metadata_columns import LINEAGE_COLUMNS, METADATA_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.expr.sql import SqlExpression
    from icemor.spec.tasks import CombinedScanTask, PlannedFile

__all__ = [
    "ScanJob",
    "SnapshotSelection",
    "flatten_filter",
    "parse_filter",
    "prepare_scan",
    "resolve_snapshot",
]


@dataclass
class ScanJob:
    """One snapshot's merge-on-read scan: planned once, on demand, then executed by an engine."""

    metadata: TableMetadata
    io: FileIO
    snapshot: Snapshot | None
    options: ReadOptions
    residual: str | None = None
    """A SQL condition the engine evaluates on every row read (DuckDB locally, Spark SQL on
    Spark): a row filter outside pyiceberg's language. ``options.row_filter`` then holds only
    the part of it that prunes (implied by it)."""
    output_names: tuple[str, ...] | None = None
    """With ``residual``: the columns the scan yields; the others were read for the condition."""
    whole_files: bool = False
    """Tasks read whole data files, never a piece of one: a Spark write that relies on each
    file's rows coming to one task (see :func:`icemor.engines.spark.write.write_changes`)."""

    @cached_property
    def planned(self) -> list[PlannedFile]:
        """Data files the scan reads, each with the delete files that apply to it."""
        return plan_files(
            self.metadata,
            self.io,
            self.snapshot,
            schema=self.options.schema,
            row_filter=self.options.row_filter,
            case_sensitive=self.options.case_sensitive,
        )

    def live_files(self) -> list[PlannedFile]:
        """The planned files minus those whose every row is deleted by position deletes or DVs.

        Those contribute no rows, so no engine opens them (unless ``include_deleted``).
        """
        if self.options.include_deleted:
            return list(self.planned)
        return [
            p
            for p in self.planned
            if not p.delete_files or not fully_deleted(self.io, p.data_file, p.delete_files)
        ]

    def split_options(self, **overrides: int | None) -> SplitOptions:
        """``read.split.*`` table properties, with per-call overrides."""
        return SplitOptions.from_properties(self.metadata.properties, **overrides)

    def plan_tasks(
        self, files: Sequence[PlannedFile] | None = None, **overrides: int | None
    ) -> list[CombinedScanTask]:
        """Split and combine ``files`` (default: the live files) by ``read.split.*``."""
        return plan_tasks(
            self.live_files() if files is None else files,
            self.split_options(**overrides),
            split=not self.whole_files,
        )

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of every batch the scan yields."""
        schema = self.options.arrow_schema
        if self.output_names is None:
            return schema
        return pa.schema([schema.field(n) for n in self.output_names])

    @property
    def read_schema(self) -> pa.Schema:
        """The Arrow schema of the batches read, before ``residual`` drops its own columns."""
        return self.options.arrow_schema


@dataclass(frozen=True)
class SnapshotSelection:
    """Which snapshot a scan reads: the current one, or one of an id, a timestamp or a ref."""

    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    ref: str | None = None

    def resolve(self, metadata: TableMetadata) -> tuple[Snapshot | None, Schema]:
        """The snapshot and the schema to read it with.

        Raises:
            InvalidArgumentError: More than one selector is given.
            NoSuchSnapshotError: The snapshot, timestamp or ref does not exist.
        """
        if sum(x is not None for x in (self.snapshot_id, self.as_of_timestamp, self.ref)) > 1:
            msg = "give at most one of snapshot_id, as_of_timestamp and ref"
            raise InvalidArgumentError(msg)
        return resolve_snapshot(metadata, self.snapshot_id, self.as_of_timestamp, self.ref)


def prepare_scan(
    metadata: TableMetadata,
    io: FileIO,
    *,
    row_filter: str | BooleanExpression | None = None,
    selected_fields: Sequence[str] = ("*",),
    selection: SnapshotSelection | None = None,
    metadata_columns: bool = False,
    include_deleted: bool = False,
    case_sensitive: bool = True,
) -> ScanJob:
    """Resolve the snapshot, parse the filter and fix the projection of a scan.

    Raises:
        InvalidArgumentError: Conflicting snapshot selectors, unknown column, bad filter.
        NoSuchSnapshotError: The snapshot, timestamp or ref does not exist.
    """
    snapshot, schema = (selection or SnapshotSelection()).resolve(metadata)
    residual: str | None = None
    residual_columns: list[str] = []
    if isinstance(row_filter, str):
        from icemor.planning.filter_text import check_filter_size

        check_filter_size(row_filter)  # before either parser: a deep filter once took minutes
        try:
            parse_filter(row_filter, schema, case_sensitive=case_sensitive)
        except InvalidArgumentError as e:
            # pyiceberg's language first (its errors name the problem precisely); SQL when
            # the text is not in that language at all, e.g. arithmetic or functions
            sql = None if _pyiceberg_parses(row_filter) else _as_sql(row_filter)
            if sql is None:
                raise
            try:
                residual_columns = _sql_columns(sql, schema)
            except InvalidArgumentError as sql_error:
                raise _both(e, sql_error) from e
            residual, row_filter = row_filter, to_iceberg(sql, schema)
    fields = [f for f in selected_fields if f not in METADATA_COLUMNS]
    meta = {f for f in selected_fields if f in METADATA_COLUMNS}
    if "_deleted" in meta:
        include_deleted = True
    if meta & LINEAGE_COLUMNS.keys() and metadata.format_version < 3:
        asked = sorted(meta & LINEAGE_COLUMNS.keys())
        version = metadata.format_version
        msg = f"{', '.join(asked)}: row lineage needs a format-version 3 table (this one is v{version})"
        raise UnsupportedFeatureError(msg)
    try:
        projected = schema if "*" in fields else schema.select(*fields, case_sensitive=case_sensitive)
    except ValueError as e:
        msg = f"unknown column in selected fields {list(fields)}: {e}"
        raise InvalidArgumentError(msg) from e
    opts = ReadOptions(
        schema=schema,
        projected_schema=projected,
        row_filter=parse_filter(row_filter, schema, case_sensitive=case_sensitive),
        case_sensitive=case_sensitive,
        specs=metadata.specs(),
        field_types=all_field_types(metadata),
        field_parents=all_field_parents(metadata),
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        file_column=metadata_columns or "_file" in meta,
        pos_column=metadata_columns or "_pos" in meta,
        include_deleted=include_deleted,
        row_id_column="_row_id" in meta,
        last_updated_column="_last_updated_sequence_number" in meta,
    )
    if residual is None:
        return ScanJob(metadata, io, snapshot, opts)
    names = tuple(opts.arrow_schema.names)
    extra = [c for c in residual_columns if c not in {f.name for f in projected.fields}]
    if extra:
        opts = replace(opts, projected_schema=schema.select(*[f.name for f in projected.fields], *extra))
    try:
        _check_condition(residual, opts.arrow_schema)
    except InvalidArgumentError as sql_error:
        try:
            parse_filter(residual, schema, case_sensitive=case_sensitive)
        except InvalidArgumentError as e:
            raise _both(e, sql_error) from sql_error
        raise
    return ScanJob(metadata, io, snapshot, opts, residual=residual, output_names=names)


def _check_condition(text: str, read_schema: pa.Schema) -> None:
    """Bind the SQL row filter now (columns, functions, types), not on the first batch."""
    from icemor.expr.duck import empty_table, is_boolean_type, session

    s = session()
    try:
        with s.inputs({"__batch": empty_table(read_schema)}):
            kind = s.types(f"SELECT ({text}\n) FROM __batch")[0][1].upper()
    except InvalidArgumentError as e:
        raise InvalidArgumentError(str(e)) from e
    if not is_boolean_type(kind):
        msg = f"it is of type {kind}, not a boolean condition"
        raise InvalidArgumentError(msg)


def _pyiceberg_parses(text: str) -> bool:
    from pyiceberg.expressions import parser

    try:
        parser.parse(text)
    except Exception:  # pyparsing's ParseException family, RecursionError
        return False
    return True


def _as_sql(text: str) -> SqlExpression | None:
    """``text`` as a SQL expression, or None when it is not one either."""
    from icemor.expr.sql import parse_sql

    try:
        return parse_sql(text, what="row filter")
    except InvalidArgumentError:
        return None


def _both(error: InvalidArgumentError, sql_error: InvalidArgumentError) -> InvalidArgumentError:
    """Neither language takes the filter: pyiceberg's explanation, then SQL's, in one line."""
    tail = f"; as SQL: {sql_error}"
    head = re.sub(r" \([^()]*\)", "", str(error))  # drop the grammar's long lists of alternatives
    if len(head) + len(tail) > 180:
        tail = tail[: max(40, 180 - len(head))]
        head = head[: 180 - len(tail)]
    return InvalidArgumentError(head + tail)


def _sql_columns(sql: SqlExpression, schema: Schema) -> list[str]:
    """The table's top-level columns ``sql`` reads (SQL names are case-insensitive)."""
    by_lower = {f.name.lower(): f.name for f in schema.fields}
    out = []
    for parts in sorted(sql.columns()):
        name = by_lower.get(parts[0].lower())
        if name is None:
            shown = ".".join(parts)
            msg = f"unknown column {shown!r}"
            raise InvalidArgumentError(msg)
        if name not in out:
            out.append(name)
    return out


def parse_filter(
    row_filter: str | BooleanExpression | None, schema: Schema, *, case_sensitive: bool = True
) -> BooleanExpression:
    """A pyiceberg expression from a SQL-like string (or an expression), checked against ``schema``."""
    if row_filter is None:
        return AlwaysTrue()
    if isinstance(row_filter, str):
        from pyiceberg.expressions import parser

        from icemor.planning.filter_text import check_filter_size, dates_as_midnight, explain_parse_error

        check_filter_size(row_filter)
        try:
            expr = parser.parse(row_filter)
        except RecursionError as e:
            msg = f"row filter {_shown(row_filter)} nests too deeply: simplify its parentheses or NOTs"
            raise InvalidArgumentError(msg) from e
        except Exception as e:  # pyparsing raises its own ParseException family
            raise InvalidArgumentError(explain_parse_error(row_filter)) from e
    else:
        expr = row_filter
    try:
        expr = flatten_filter(expr)
        if isinstance(row_filter, str):  # balanced by now: the rewrite recurses log(n) deep
            expr = dates_as_midnight(expr, schema, case_sensitive=case_sensitive)
        bind(schema, expr, case_sensitive=case_sensitive)
    except RecursionError as e:
        msg = f"row filter {_shown(row_filter)} nests too deeply: simplify its parentheses or NOTs"
        raise InvalidArgumentError(msg) from e
    except ValueError as e:
        msg = f"invalid row filter {_shown(row_filter)}: {_first_line(e)}"
        raise InvalidArgumentError(msg) from e
    return expr


def _shown(row_filter: object) -> str:
    try:
        text = repr(row_filter) if isinstance(row_filter, str) else str(row_filter)
    except RecursionError:  # str() of a too-deep expression recurses as deeply
        text = type(row_filter).__name__
    return text if len(text) <= 200 else f"{text[:200]}… ({len(text)} characters)"


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def flatten_filter(expr: BooleanExpression) -> BooleanExpression:
    """Flatten ``and``/``or`` chains into balanced trees, merging ``col = v or col = w…`` into ``IN``.

    Equalities and ``IN`` on the same column under one ``or`` become one ``IN`` (the same rows,
    NULLs included: neither matches NULL). Chains are collected without recursion and rebuilt
    balanced, so a left-deep tree of any length (``functools.reduce(Or, …)``) binds and
    evaluates at logarithmic depth. A 10,000-term ``or`` of equalities is then one ``IN``,
    which Arrow evaluates as one hash lookup instead of a 10,000-node expression (such a
    tree overflowed Arrow's native stack: a segfault).
    """
    if isinstance(expr, Not):
        return Not(flatten_filter(expr.child))
    if not isinstance(expr, And | Or):
        return expr
    op = type(expr)
    operands: list[BooleanExpression] = []
    stack: list[BooleanExpression] = [expr]
    while stack:  # depth-first, left to right, without recursion along the chain
        node = stack.pop()
        if type(node) is op:
            stack.extend((node.right, node.left))
        else:
            operands.append(flatten_filter(node))
    if op is Or:
        operands = _merge_equalities(operands)
    if len(operands) == 1:
        return operands[0]
    return op(*operands)  # pyiceberg builds three or more operands as a balanced tree


# In's pydantic model hides its (term, literals) constructor from mypy
_in = cast("Callable[[str, set[Any]], BooleanExpression]", In)


def _merge_equalities(operands: list[BooleanExpression]) -> list[BooleanExpression]:
    """``or`` operands with every ``col = v`` / ``col IN (…)`` on one column merged into one ``IN``."""
    literals: dict[str, set[Any]] = {}
    first: dict[str, int] = {}
    out: list[BooleanExpression | None] = []
    for e in operands:
        if isinstance(e, EqualTo | In) and isinstance(e.term, Reference):
            name = e.term.name
            values = {e.literal} if isinstance(e, EqualTo) else set(e.literals)
            if name in literals:
                literals[name] |= values
                continue
            literals[name] = values
            first[name] = len(out)
            out.append(None)  # placeholder, keeps the operands' order
        else:
            out.append(e)
    for name, i in first.items():
        out[i] = _in(name, literals[name])  # one value: pyiceberg makes it EqualTo again
    return [e for e in out if e is not None]


def resolve_snapshot(
    metadata: TableMetadata, snapshot_id: int | None, as_of_timestamp: int | None, ref: str | None
) -> tuple[Snapshot | None, Schema]:
    """The snapshot to read and the schema to read it with (Iceberg Java's SnapshotUtil.schemaFor)."""
    current_schema = metadata.schema()
    if snapshot_id is None and as_of_timestamp is None and ref is None:
        return metadata.current_snapshot(), current_schema
    if ref is not None:
        snap_ref = metadata.refs.get(ref)
        if snap_ref is None:
            msg = f"ref {ref!r} does not exist"
            raise NoSuchSnapshotError(msg)
        snapshot = metadata.snapshot_by_id(snap_ref.snapshot_id)
        if snap_ref.snapshot_ref_type == SnapshotRefType.BRANCH:
            return snapshot, current_schema
    elif snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            msg = (
                f"snapshot {snapshot_id} does not exist: it was expired, or never existed; "
                f"{_oldest_readable(metadata, by_time=False)}"
            )
            raise NoSuchSnapshotError(msg)
    else:
        assert as_of_timestamp is not None
        older = [e for e in metadata.snapshot_log if e.timestamp_ms <= as_of_timestamp]
        when = f"{iso_time(as_of_timestamp)} ({as_of_timestamp} ms)"
        if not older:
            msg = (
                f"no snapshot is older than {when}: the older ones were expired, or the table had "
                f"none yet; {_oldest_readable(metadata, by_time=True)}"
            )
            raise NoSuchSnapshotError(msg)
        snapshot = metadata.snapshot_by_id(older[-1].snapshot_id)
        if snapshot is None:
            msg = (
                f"snapshot {older[-1].snapshot_id}, current at {when}, was expired; "
                f"{_oldest_readable(metadata, by_time=True)}"
            )
            raise NoSuchSnapshotError(msg)
    if snapshot is None:
        msg = "the requested snapshot is no longer in the table metadata"
        raise NoSuchSnapshotError(msg)
    if snapshot.schema_id is not None:
        for s in metadata.schemas:
            if s.schema_id == snapshot.schema_id:
                return snapshot, s
    return snapshot, current_schema


def _oldest_readable(metadata: TableMetadata, *, by_time: bool) -> str:
    """The phrase naming the oldest snapshot a read can still select: of the snapshot log (what
    ``as_of_timestamp`` resolves with) ``by_time``, else of every snapshot in the metadata."""
    if by_time:
        logged = (metadata.snapshot_by_id(e.snapshot_id) for e in metadata.snapshot_log)
        candidates = [s for s in logged if s is not None]
    else:
        candidates = list(metadata.snapshots)
    if not candidates:
        return "the table has no snapshot to read"
    oldest = min(candidates, key=lambda s: s.timestamp_ms)
    return (
        f"the oldest snapshot still readable is {oldest.snapshot_id}, committed at "
        f"{iso_time(oldest.timestamp_ms)} ({oldest.timestamp_ms} ms)"
    )
