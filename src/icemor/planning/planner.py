"""Plan a scan: prune manifests and files by the row filter, attach applicable delete files."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.visitors import (
    bind,
    expression_evaluator,
    extract_field_ids,
    inclusive_projection,
    manifest_evaluator,
)
from pyiceberg.manifest import ManifestContent
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.transforms import VoidTransform
from pyiceberg.typedef import Record
from pyiceberg.types import PrimitiveType, StructType, UUIDType

from icemor._compat.pyiceberg import inclusive_metrics_evaluator
from icemor.planning.delete_index import DeleteFileIndex
from icemor.planning.manifest_reader import (
    ManifestFileEntry,
    manifest_entries_cached,
    read_manifest_entries,
    read_manifest_list,
)
from icemor.spec.files import FileContent
from icemor.spec.tasks import PlannedFile

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["all_field_parents", "all_field_types", "plan_files"]


def plan_files(
    metadata: TableMetadata,
    io: FileIO,
    snapshot: Snapshot | None,
    *,
    schema: Schema,
    row_filter: BooleanExpression | None = None,
    case_sensitive: bool = True,
    max_workers: int | None = None,
) -> list[PlannedFile]:
    """Return the data files of ``snapshot`` that may hold rows matching ``row_filter``.

    Manifests are pruned by partition summaries, entries by partition values and (data files
    only) column metrics. Delete manifests are pruned by partition alone: a delete file's own
    column metrics say nothing about which data rows it deletes.
    """
    if snapshot is None:
        return []
    row_filter = AlwaysTrue() if row_filter is None else row_filter
    specs = metadata.specs()
    manifests = read_manifest_list(io, snapshot)

    partition_filters: dict[int, BooleanExpression] = {}
    for spec_id, spec in specs.items():
        partition_filters[spec_id] = inclusive_projection(schema, spec, case_sensitive)(row_filter)
    keep_manifest = {
        spec_id: manifest_evaluator(spec, schema, partition_filters[spec_id], case_sensitive)
        for spec_id, spec in specs.items()
    }
    partition_evaluators: dict[int, Callable[[DataFile], bool] | None] = {}
    for spec_id, spec in specs.items():
        if isinstance(partition_filters[spec_id], AlwaysTrue):
            partition_evaluators[spec_id] = None  # every partition matches: no call per file
            continue
        partition_type = spec.partition_type(schema)
        evaluator = expression_evaluator(
            Schema(*partition_type.fields), partition_filters[spec_id], case_sensitive
        )
        uuids = [i for i, f in enumerate(partition_type.fields) if isinstance(f.field_type, UUIDType)]
        if uuids:  # manifests give a UUID, pyiceberg's literals hold its bytes: compare bytes
            partition_evaluators[spec_id] = lambda f, ev=evaluator, at=uuids: ev(_uuid_bytes(f.partition, at))  # type: ignore[misc]
        else:
            partition_evaluators[spec_id] = lambda f, ev=evaluator: ev(f.partition)  # type: ignore[misc]
    metrics_eval = (
        _not_empty
        if isinstance(row_filter, AlwaysTrue)
        else inclusive_metrics_evaluator(schema, row_filter, case_sensitive=case_sensitive)
    )
    parents = all_field_parents(metadata)
    nested = [fid for fid in _filter_ids(schema, row_filter, case_sensitive) if fid in parents]

    selected: list[ManifestFile] = [m for m in manifests if keep_manifest[m.partition_spec_id](m)]
    uncached = [m for m in selected if not manifest_entries_cached(m)]
    if len(uncached) <= 1:
        # a pool costs ~1 ms to start and join: more than a small, repeated query's whole plan
        per_manifest = [(m, read_manifest_entries(io, m)) for m in selected]
    else:
        # only the manifests to decode go to the pool (a CDC stream's table has ~100 manifests,
        # all but the last commit's cached: handing each to a thread cost ~5 ms a plan)
        with ThreadPoolExecutor(max_workers=max_workers) as pool:
            list(pool.map(lambda m: read_manifest_entries(io, m), uncached))
        per_manifest = [(m, read_manifest_entries(io, m)) for m in selected]

    data_entries: list[ManifestFileEntry] = []
    delete_entries: list[ManifestFileEntry] = []
    for manifest, entries in per_manifest:
        part_ok = partition_evaluators[manifest.partition_spec_id]
        data_manifest = manifest.content == ManifestContent.DATA
        for entry in entries:
            f = entry.data_file
            if part_ok is not None and not part_ok(f):
                continue
            # the raw content code, not entry.content: an enum built per entry cost ~8 ms a plan
            if int(f.content) != FileContent.DATA:
                delete_entries.append(entry)
            elif data_manifest and (metrics_eval(f) or _unsound_nested_metrics(f, nested)):
                data_entries.append(entry)

    index = DeleteFileIndex(
        delete_entries,
        unpartitioned_spec_ids={sid for sid, spec in specs.items() if _is_unpartitioned(spec)},
        field_types=all_field_types(metadata),
    )
    refs = [e.to_data_ref() for e in data_entries]
    if not index:
        return [PlannedFile(r, ()) for r in refs]
    deletes = index.for_data_files(
        [e.data_file for e in data_entries],
        sequence_numbers=[r.data_sequence_number for r in refs],
        spec_ids=[r.spec_id for r in refs],
        partitions=[r.partition for r in refs],
    )
    return [PlannedFile(r, d) for r, d in zip(refs, deletes, strict=True)]


def _not_empty(f: DataFile) -> bool:
    """What the inclusive metrics evaluator answers for an always-true filter, without its visit.

    pyiceberg's evaluator skips empty files (``include_empty_files=False``) and keeps the others;
    a test checks this against it.
    """
    return bool(f.record_count != 0)


def _filter_ids(schema: Schema, row_filter: BooleanExpression, case_sensitive: bool) -> set[int]:
    if isinstance(row_filter, AlwaysTrue):
        return set()
    return extract_field_ids(bind(schema, row_filter, case_sensitive=case_sensitive))


def _unsound_nested_metrics(f: DataFile, nested: list[int]) -> bool:
    """Whether a data file's metrics of a field inside a struct cannot be right.

    Such a field has one value (NULL included) per row. Iceberg Java 1.10 writes a double or float
    field under a NULL struct as neither a value nor a NULL (value count 0, null count 0), so its
    own planning skips the file for ``st.c IS NULL``, which every such row satisfies; icemor does
    not prune a file by metrics that do not add up.
    """
    if not nested or not f.value_counts:
        return False
    return any((n := f.value_counts.get(fid)) is not None and n != f.record_count for fid in nested)


def all_field_parents(metadata: TableMetadata) -> dict[int, tuple[int, ...]]:
    """For every field id nested in structs (in any schema), the ids of its enclosing structs."""
    parents: dict[int, tuple[int, ...]] = {}

    def walk(struct: StructType, chain: tuple[int, ...]) -> None:
        for field in struct.fields:
            if chain:
                parents[field.field_id] = chain
            if isinstance(field.field_type, StructType):
                walk(field.field_type, (*chain, field.field_id))

    for schema in metadata.schemas:
        walk(schema.as_struct(), ())
    return parents


def _uuid_bytes(partition: Record, at: list[int]) -> Record:
    values = [partition[i] for i in range(len(partition))]
    for i in at:
        if isinstance(values[i], uuid.UUID):
            values[i] = values[i].bytes
    return Record(*values)


def _is_unpartitioned(spec: PartitionSpec) -> bool:
    """As Iceberg Java: a spec of void transforms only is unpartitioned (its deletes are global)."""
    return all(isinstance(f.transform, VoidTransform) for f in spec.fields)


def all_field_types(metadata: TableMetadata) -> dict[int, PrimitiveType]:
    """Types of every field id any schema ever had: equality deletes may name dropped columns."""
    types: dict[int, PrimitiveType] = {}
    for schema in metadata.schemas:
        for field_id, field in index_by_id(schema).items():
            if isinstance(field.field_type, PrimitiveType):
                types[field_id] = field.field_type
    return types
