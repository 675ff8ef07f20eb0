"""A merge-on-read scan as a plan: snapshot, read options and (lazily) its files and tasks.

:class:`ScanJob` is what every engine executes and what the write operations scan their
targets with; the public :class:`icemor.scan.Scan` facade wraps one. Building it resolves the
snapshot selectors (Iceberg Java's ``SnapshotUtil.schemaFor``), parses and binds the row
filter, and fixes the projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.table.refs import SnapshotRefType

from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError
from icemor.io.deletes import fully_deleted
from icemor.io.reader import ReadOptions, output_schema
from icemor.planning.planner import all_field_parents, all_field_types, plan_files
from icemor.planning.tasks import SplitOptions, plan_tasks
from icemor.spec.metadata_columns import METADATA_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.spec.tasks import CombinedScanTask, PlannedFile

__all__ = ["ScanJob", "SnapshotSelection", "parse_filter", "prepare_scan", "resolve_snapshot"]


@dataclass
class ScanJob:
    """One snapshot's merge-on-read scan: planned once, on demand, then executed by an engine."""

    metadata: TableMetadata
    io: FileIO
    snapshot: Snapshot | None
    options: ReadOptions

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
        return plan_tasks(self.live_files() if files is None else files, self.split_options(**overrides))

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of every batch the scan yields."""
        return output_schema(self.options)


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
    fields = [f for f in selected_fields if f not in METADATA_COLUMNS]
    meta = {f for f in selected_fields if f in METADATA_COLUMNS}
    if "_deleted" in meta:
        include_deleted = True
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
    )
    return ScanJob(metadata, io, snapshot, opts)


def parse_filter(
    row_filter: str | BooleanExpression | None, schema: Schema, *, case_sensitive: bool = True
) -> BooleanExpression:
    """A pyiceberg expression from a SQL-like string (or an expression), checked against ``schema``."""
    if row_filter is None:
        return AlwaysTrue()
    if isinstance(row_filter, str):
        from pyiceberg.expressions import parser

        from icemor.planning.filter_text import dates_as_midnight, explain_parse_error

        try:
            expr = parser.parse(row_filter)
        except Exception as e:  # pyparsing raises its own ParseException family
            raise InvalidArgumentError(explain_parse_error(row_filter)) from e
        expr = dates_as_midnight(expr, schema, case_sensitive=case_sensitive)
    else:
        expr = row_filter
    try:
        bind(schema, expr, case_sensitive=case_sensitive)
    except ValueError as e:
        msg = f"invalid row filter {row_filter!r}: {e}"
        raise InvalidArgumentError(msg) from e
    return expr


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
            msg = f"snapshot {snapshot_id} does not exist"
            raise NoSuchSnapshotError(msg)
    else:
        assert as_of_timestamp is not None
        older = [e for e in metadata.snapshot_log if e.timestamp_ms <= as_of_timestamp]
        if not older:
            msg = f"no snapshot is older than timestamp {as_of_timestamp} ms"
            raise NoSuchSnapshotError(msg)
        snapshot = metadata.snapshot_by_id(older[-1].snapshot_id)
    if snapshot is None:
        msg = "the requested snapshot is no longer in the table metadata"
        raise NoSuchSnapshotError(msg)
    if snapshot.schema_id is not None:
        for s in metadata.schemas:
            if s.schema_id == snapshot.schema_id:
                return snapshot, s
    return snapshot, current_schema
