"""A merge-on-read scan as a plan: snapshot, read options and (lazily) its files and tasks.

:class:`ScanJob` is what every engine executes and what the write operations scan their
targets with; the public :class:`icemor.scan.Scan` facade wraps one. Building it resolves the
snapshot selectors (Iceberg Java's ``SnapshotUtil.schemaFor``), parses and binds the row
filter, and fixes the projection.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.table.refs import SnapshotRefType

from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError, UnsupportedFeatureError
from icemor.expr.condition import Condition, parse_condition
from icemor.io.deletes import fully_deleted
from icemor.io.reader import ReadOptions
from icemor.planning.planner import all_field_parents, all_field_types, plan_files
from icemor.planning.tasks import SplitOptions, plan_tasks
from icemor.spec.describe import iso_time
from icemor.spec.metadata_columns import LINEAGE_COLUMNS, METADATA_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.spec.tasks import CombinedScanTask, PlannedFile

__all__ = [
    "ScanJob",
    "SnapshotSelection",
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
    row_filter: str | BooleanExpression | Condition | None = None,
    selected_fields: Sequence[str] = ("*",),
    selection: SnapshotSelection | None = None,
    metadata_columns: bool = False,
    include_deleted: bool = False,
    case_sensitive: bool = True,
) -> ScanJob:
    """Resolve the snapshot, parse the filter and fix the projection of a scan.

    A :class:`~icemor.expr.condition.Condition` (an operation's, parsed against the current
    schema) is taken as it is: neither parsed nor bound again.

    Raises:
        InvalidArgumentError: Conflicting snapshot selectors, unknown column, bad filter.
        NoSuchSnapshotError: The snapshot, timestamp or ref does not exist.
    """
    snapshot, schema = (selection or SnapshotSelection()).resolve(metadata)
    condition = parse_condition(row_filter, schema, case_sensitive=case_sensitive)
    residual = condition.residual
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
        row_filter=condition.row_filter,
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
    assert condition.sql is not None  # only SQL has a residual
    names = tuple(opts.arrow_schema.names)
    wanted = {f.name for f in projected.fields}
    extra = [c for c in condition.columns if c not in wanted]
    if extra:
        opts = replace(opts, projected_schema=schema.select(*[f.name for f in projected.fields], *extra))
    _check_condition(residual, opts.arrow_schema)
    return ScanJob(metadata, io, snapshot, opts, residual=residual, output_names=names)


def _check_condition(text: str, read_schema: pa.Schema) -> None:
    """Bind the SQL row filter now (columns, functions, types), not on the first batch."""
    # a scan without a text condition needs no DuckDB (tests/test_import.py)
    from icemor.expr.duck import empty_table, is_boolean_type, session  # noqa: PLC0415 - cost: duckdb ~100 ms

    s = session()
    try:
        with s.inputs({"__batch": empty_table(read_schema)}):
            kind = s.types(f"SELECT ({text}\n) FROM __batch")[0][1].upper()
    except InvalidArgumentError as e:
        raise InvalidArgumentError(str(e)) from e
    if not is_boolean_type(kind):
        shown = text if len(text) <= 80 else text[:77] + "..."
        msg = f"the row filter {shown!r} is of type {kind}, not a boolean condition"
        raise InvalidArgumentError(msg)


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
