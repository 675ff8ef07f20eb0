"""Format version 3 in the commit layer: v3 manifests, manifest lists and row lineage.

pyiceberg 0.12 reads v3 tables but writes none of their metadata; these shims, gated on the
table's ``format_version`` (and stepping aside where pyiceberg writes v3 itself, see
:data:`icemor._compat.pyiceberg.PYICEBERG_WRITES_V3`), write what the spec asks:

- manifests with the v3 entry schema: ``first_row_id`` (explicit for EXISTING and DELETED
  entries, inherited for ADDED ones), ``referenced_data_file``, ``content_offset`` and
  ``content_size_in_bytes`` (deletion vectors);
- manifest lists with ``first_row_id`` per data manifest (assigned from the table's
  ``next-row-id`` to each data manifest that has none, advancing by its added and existing
  rows, as Iceberg Java's v3 writer does), and the snapshot's ``first-row-id`` and
  ``added-rows``, from which the catalog update advances ``next-row-id``;
- the metadata JSON with ``next-row-id`` (:func:`v3_metadata_json`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DataFile, FileFormat, ManifestContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table.update import UpgradeFormatVersionUpdate

from icemor._compat.pyiceberg import (
    V3_DATA_FILE_POSITIONS,
    read_manifest_entries_v3,
    read_manifest_list_v3,
    set_spec_id,
    set_v3_field,
    v3_data_file,
    v3_fields,
    v3_metadata_json,
)
from icemor.commit.schema import commit_metadata_change
from icemor.commit.validation import history
from icemor.exceptions import CommitConflictError, InvalidArgumentError, UnsupportedFeatureError
from icemor.planning.manifest_reader import live_with_first_row_ids

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "MAX_FORMAT_VERSION",
    "as_v3",
    "commit_format_upgrade",
    "is_v3",
    "live_entries",
    "next_row_id",
    "snapshot_manifests",
    "v3_metadata_json",
    "validate_no_concurrent_dvs",
]

MAX_FORMAT_VERSION = 3
"""The highest format version icemor writes."""

_V3_ONLY = ("first_row_id", "referenced_data_file", "content_offset", "content_size_in_bytes")


def is_v3(metadata: TableMetadata) -> bool:
    """Whether the table's metadata is format version 3 (the v3 writers apply)."""
    if metadata.format_version > MAX_FORMAT_VERSION:
        msg = f"format-version {metadata.format_version} tables are not supported (icemor writes up to 3)"
        raise UnsupportedFeatureError(msg)
    return metadata.format_version == 3


def next_row_id(metadata: TableMetadata) -> int:
    """The table's ``next-row-id`` (0 when a v3 table has none yet)."""
    value = getattr(metadata, "next_row_id", None)
    return int(value) if value is not None else 0


def snapshot_manifests(metadata: TableMetadata, io: FileIO, snapshot: Snapshot | None) -> list[ManifestFile]:
    """The manifests of ``snapshot``; on v3 read with the v3 list schema, keeping ``first_row_id``."""
    if snapshot is None:
        return []
    if is_v3(metadata):
        return read_manifest_list_v3(io.new_input(snapshot.manifest_list))
    return list(snapshot.manifests(io))


def as_v3(data_file: DataFile) -> DataFile:
    """A v3 ``DataFile`` record with the fields of ``data_file`` (a v2 record: v3 fields null)."""
    if len(data_file) > max(V3_DATA_FILE_POSITIONS.values()):
        return data_file
    out = v3_data_file()
    for i in range(min(V3_DATA_FILE_POSITIONS.values())):  # the v2 fields come first, in order
        out[i] = data_file[i]
    out.spec_id = data_file.spec_id  # icemor sets it on every file it commits
    return out


def live_entries(io: FileIO, manifest: ManifestFile, *, v3: bool) -> list[ManifestEntry]:
    """The live (ADDED and EXISTING) entries of ``manifest`` with inherited values, for rewriting.

    On v3 the entries are read with the v3 schema (deletion vectors keep their referenced data
    file and offsets) and a data file without ``first_row_id`` gets its inherited one (spec,
    "First Row ID Inheritance": the manifest's ``first_row_id`` plus the record counts of the
    data files before it that have none), so that rewriting the manifest keeps every row's id.
    """
    if not v3:
        return list(manifest.fetch_manifest_entry(io, discard_deleted=True))
    manifest_seq = manifest.sequence_number
    out: list[ManifestEntry] = []
    raw = read_manifest_entries_v3(io.new_input(manifest.manifest_path))
    for entry, first_row_id in live_with_first_row_ids(manifest, raw):
        df = entry.data_file
        set_spec_id(df, manifest.partition_spec_id)
        if first_row_id is not None:
            set_v3_field(df, "first_row_id", first_row_id)
        if entry.sequence_number is None and entry.status == ManifestEntryStatus.ADDED:
            entry.sequence_number = manifest_seq
        if entry.file_sequence_number is None and entry.status == ManifestEntryStatus.ADDED:
            entry.file_sequence_number = manifest_seq
        out.append(entry)
    return out


def commit_format_upgrade(table: PyIcebergTable, format_version: int) -> int:
    """Upgrade the table's format version in one metadata commit; return the version it had.

    Only the version changes (v2 -> v3: ``next-row-id`` starts at 0; existing rows get ids
    from the next commit's manifest list, existing position-delete files keep applying). Nothing
    is committed when the table has that version already.

    Raises:
        InvalidArgumentError: A downgrade, a version above 3, or v1 -> v3 in one step.
        CommitFailedError: The catalog refused it, or every attempt lost its swap.
    """
    name = ".".join(table.name())
    before = table.metadata.format_version

    def change(metadata: TableMetadata) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        current = metadata.format_version
        if format_version < current:
            msg = f"cannot downgrade {name} from format-version {current} to {format_version}"
            raise InvalidArgumentError(msg)
        if format_version > MAX_FORMAT_VERSION:
            msg = f"format-version must be 2 or 3, got {format_version}"
            raise InvalidArgumentError(msg)
        if format_version == current:
            return None
        if format_version - current > 1 and current < 2:
            msg = f"{name} is a format-version 1 table: upgrade it to 2 first"
            raise InvalidArgumentError(msg)
        return (), (UpgradeFormatVersionUpdate(format_version=format_version),)  # type: ignore[call-arg]

    commit_metadata_change(table, f"upgrading the format version to {format_version}", change)
    return before


def validate_no_concurrent_dvs(
    metadata: TableMetadata, io: FileIO, start_snapshot_id: int | None, dv_data_files: set[str]
) -> None:
    """No commit since ``start_snapshot_id`` added a deletion vector for a data file this commit
    writes one for: both would be live (the spec allows one per data file), and neither holds
    the other's positions (Iceberg Java's ``validateAddedDVs``).

    Raises:
        CommitConflictError: Naming the data file and the concurrent snapshot.
    """
    if not dv_data_files:
        return
    for snap in history(metadata, start_snapshot_id):
        for m in read_manifest_list_v3(io.new_input(snap.manifest_list)):
            if m.content != ManifestContent.DELETES or m.added_snapshot_id != snap.snapshot_id:
                continue
            for e in read_manifest_entries_v3(io.new_input(m.manifest_path)):
                if e.status != ManifestEntryStatus.ADDED or e.snapshot_id not in (None, snap.snapshot_id):
                    continue
                referenced, _, _ = v3_fields(e.data_file)
                if e.data_file.file_format == FileFormat.PUFFIN and referenced in dv_data_files:
                    msg = (
                        f"concurrent snapshot {snap.snapshot_id} added a deletion vector for data file "
                        f"{referenced}, which this commit writes one for"
                    )
                    raise CommitConflictError(msg)
