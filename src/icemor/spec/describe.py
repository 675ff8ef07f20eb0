"""What a table is and how it got there, as plain data: its description, snapshots and history.

Built from table metadata alone (no manifest is read), for ``icemor describe``, ``snapshots``
and ``history`` and their Python counterparts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.refs import SnapshotRef
    from pyiceberg.types import IcebergType, NestedField

__all__ = [
    "FieldInfo",
    "HistoryEntry",
    "SnapshotInfo",
    "TableDescription",
    "describe",
    "history",
    "iso_time",
    "snapshots",
    "summary_int",
]


@dataclass(frozen=True)
class FieldInfo:
    """One schema field; nested fields follow their parent with ``depth`` + 1."""

    field_id: int
    name: str
    type: str
    required: bool
    depth: int = 0
    doc: str | None = None


@dataclass(frozen=True)
class TableDescription:
    """A table's schema (with field ids), partition specs, sort order, properties and state."""

    name: str
    location: str
    table_uuid: str
    format_version: int
    schema_id: int
    fields: list[FieldInfo]
    partition_specs: dict[int, list[str]]  # spec id -> "transform(source) as name (field id)"
    default_spec_id: int
    sort_order: list[str]  # "transform(source) ASC NULLS FIRST"; empty when unsorted
    properties: dict[str, str]
    current_snapshot_id: int | None
    last_updated_ms: int
    refs: dict[str, str]  # name -> "branch 123" / "tag 123"


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot with the counts of its summary; ``refs`` are the branches and tags at it."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str | None
    added_records: int | None
    deleted_records: int | None
    added_data_files: int | None
    deleted_data_files: int | None
    added_delete_files: int | None
    removed_delete_files: int | None
    added_position_deletes: int | None
    added_equality_deletes: int | None
    total_records: int | None
    total_data_files: int | None
    total_delete_files: int | None
    is_current: bool
    refs: list[str] = field(default_factory=list)  # "branch main", "tag v1"
    summary: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryEntry:
    """One change of the table's current snapshot (the snapshot log), oldest first."""

    made_current_at_ms: int
    snapshot_id: int
    parent_id: int | None
    operation: str | None
    is_current_ancestor: bool
    refs: list[str] = field(default_factory=list)


def describe(metadata: TableMetadata, name: str) -> TableDescription:
    """The description of a table from its metadata."""
    schema = metadata.schema()
    specs = {
        spec.spec_id: [
            f"{f.transform}({_column(schema, f.source_id)}) as {f.name} ({f.field_id})" for f in spec.fields
        ]
        for spec in metadata.partition_specs
    }
    order = metadata.sort_order_by_id(metadata.default_sort_order_id)
    sort = (
        [
            f"{f.transform}({_column(schema, f.source_id)}) {f.direction.name} "
            f"{f.null_order.name.replace('_', ' ')}"
            for f in order.fields
        ]
        if order is not None
        else []
    )
    return TableDescription(
        name=name,
        location=metadata.location,
        table_uuid=str(metadata.table_uuid),
        format_version=metadata.format_version,
        schema_id=schema.schema_id,
        fields=list(_fields(schema)),
        partition_specs=specs,
        default_spec_id=metadata.default_spec_id,
        sort_order=sort,
        properties=dict(metadata.properties),
        current_snapshot_id=metadata.current_snapshot_id,
        last_updated_ms=metadata.last_updated_ms,
        refs={
            ref_name: f"{ref.snapshot_ref_type.value} {ref.snapshot_id}" for ref_name, ref in _refs(metadata)
        },
    )


def iso_time(ms: int) -> str:
    """A commit time (ms since the epoch) as ISO-8601 UTC to the millisecond, as messages show it."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def summary_int(summary: Mapping[str, str], key: str) -> int | None:
    """An integer count of a snapshot summary; None when absent or not an integer."""
    value = summary.get(key)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def snapshots(metadata: TableMetadata) -> list[SnapshotInfo]:
    """Every snapshot in the metadata, oldest first, with its summary counts and refs."""
    refs = _refs_by_snapshot(metadata)
    out = []
    for snap in sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)):
        summary = dict(snap.summary.additional_properties) if snap.summary is not None else {}
        operation = snap.summary.operation.value if snap.summary is not None else None
        count = partial(summary_int, summary)
        out.append(
            SnapshotInfo(
                snapshot_id=snap.snapshot_id,
                parent_id=snap.parent_snapshot_id,
                timestamp_ms=snap.timestamp_ms,
                operation=operation,
                added_records=count("added-records"),
                deleted_records=count("deleted-records"),
                added_data_files=count("added-data-files"),
                deleted_data_files=count("deleted-data-files"),
                added_delete_files=count("added-delete-files"),
                removed_delete_files=count("removed-delete-files"),
                added_position_deletes=count("added-position-deletes"),
                added_equality_deletes=count("added-equality-deletes"),
                total_records=count("total-records"),
                total_data_files=count("total-data-files"),
                total_delete_files=count("total-delete-files"),
                is_current=snap.snapshot_id == metadata.current_snapshot_id,
                refs=refs.get(snap.snapshot_id, []),
                summary={"operation": operation or "", **summary} if operation else summary,
            )
        )
    return out


def history(metadata: TableMetadata) -> list[HistoryEntry]:
    """The snapshot log (each time the current snapshot changed), as Spark's ``history`` table."""
    ancestors = set()
    snap = metadata.current_snapshot()
    while snap is not None:
        ancestors.add(snap.snapshot_id)
        snap = (
            metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        )
    refs = _refs_by_snapshot(metadata)
    out = []
    for entry in metadata.snapshot_log:
        s = metadata.snapshot_by_id(entry.snapshot_id)
        out.append(
            HistoryEntry(
                made_current_at_ms=entry.timestamp_ms,
                snapshot_id=entry.snapshot_id,
                parent_id=s.parent_snapshot_id if s is not None else None,
                operation=s.summary.operation.value if s is not None and s.summary is not None else None,
                is_current_ancestor=entry.snapshot_id in ancestors,
                refs=refs.get(entry.snapshot_id, []),
            )
        )
    return out


def _refs(metadata: TableMetadata) -> list[tuple[str, SnapshotRef]]:
    refs = dict(metadata.refs)
    # pyiceberg keeps "main" implicit in older metadata: the current snapshot is main's head.
    if "main" not in refs and metadata.current_snapshot_id is not None:
        from pyiceberg.table.refs import SnapshotRef, SnapshotRefType  # noqa: PLC0415 - cost: pyiceberg.table ~600 ms (icemor.table)

        refs["main"] = SnapshotRef.model_validate(
            {"snapshot-id": metadata.current_snapshot_id, "type": SnapshotRefType.BRANCH}
        )
    return sorted(refs.items())


def _refs_by_snapshot(metadata: TableMetadata) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name, ref in _refs(metadata):
        out.setdefault(ref.snapshot_id, []).append(f"{ref.snapshot_ref_type.value} {name}")
    return out


def _column(schema: Schema, field_id: int) -> str:
    name = schema.find_column_name(field_id)
    return name if name is not None else f"dropped column {field_id}"


def _fields(schema: Schema) -> list[FieldInfo]:
    out: list[FieldInfo] = []

    def walk(f: NestedField, depth: int) -> None:
        out.append(FieldInfo(f.field_id, f.name, _type_name(f.field_type), f.required, depth, f.doc))
        for child in _children(f.field_type):
            walk(child, depth + 1)

    for f in schema.fields:
        walk(f, 0)
    return out


def _children(t: IcebergType) -> list[NestedField]:
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415 - cost: pyiceberg.types ~150 ms (icemor.table)

    if isinstance(t, StructType):
        return list(t.fields)
    if isinstance(t, ListType):
        return [t.element_field]
    if isinstance(t, MapType):
        return [t.key_field, t.value_field]
    return []


def _type_name(t: IcebergType) -> str:
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415 - cost: pyiceberg.types ~150 ms (icemor.table)

    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ListType):
        return "list"
    if isinstance(t, MapType):
        return "map"
    return str(t)
