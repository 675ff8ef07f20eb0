"""Write the manifests of a new snapshot: added files, and existing manifests filtered of removals.

As Iceberg Java's MergingSnapshotProducer: a manifest holding a removed file is rewritten with
that entry DELETED (by this snapshot) and the rest EXISTING (sequence numbers kept); other
manifests are carried over untouched; a manifest left with no live entry is dropped.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.manifest import (
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
)

from icemor._compat.pyiceberg import ManifestWriterV3, manifest_writer, v3_fields
from icemor.commit.files import delete_quietly, writing
from icemor.commit.v3 import as_v3, is_v3, live_entries
from icemor.io.cache import DELETE_CACHE
from icemor.spec.dv import dv_removal_key

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestFile, ManifestWriter
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["ManifestChanges", "removal_key", "write_snapshot_manifests"]


@dataclass
class ManifestChanges:
    """What the new manifests of one commit attempt hold, and the files written for them."""

    manifests: list[ManifestFile] = field(default_factory=list)
    written_paths: list[str] = field(default_factory=list)
    removed: list[DataFile] = field(default_factory=list)
    """Entries of removed files as the parent held them (for the summary)."""
    removed_keys: list[str] = field(default_factory=list)
    """Their paths and :func:`removal_key` s."""


def _removed(data_file: DataFile, removed_paths: set[str]) -> bool:
    # a Puffin file's path removes each of its DVs; a DV's key only that one
    return data_file.file_path in removed_paths or removal_key(data_file) in removed_paths


def _names(io: FileIO, manifest: ManifestFile, v3: bool) -> frozenset[str]:
    """Every name by which ``removed_paths`` can reach a live entry of ``manifest`` (its path and
    :func:`removal_key`), decoded once per process: a manifest is written once and never changed,
    and a commit that removes a few files would otherwise decode every manifest of the table (a
    CDC batch after 100 others: 100 manifests, most of the commit's time)."""

    def load() -> tuple[frozenset[str], int]:
        return _sized_names(live_entries(io, manifest, v3=v3))

    key = (manifest.manifest_path, manifest.manifest_length, v3)
    return DELETE_CACHE.get_or_load("manifest-names", key, load)


def _sized_names(entries: Iterable[ManifestEntry]) -> tuple[frozenset[str], int]:
    names = frozenset(n for e in entries for n in (e.data_file.file_path, removal_key(e.data_file)))
    return names, 64 + sum(48 + len(n) for n in names)


def _remember_names(manifest: ManifestFile, live: Iterable[ManifestEntry], v3: bool) -> None:
    """Keep the :func:`_names` of a manifest this process just wrote (its live entries are at
    hand): the next commit would otherwise decode it again to learn them."""
    names, size = _sized_names(live)
    DELETE_CACHE.put("manifest-names", (manifest.manifest_path, manifest.manifest_length, v3), names, size)


def removal_key(data_file: DataFile) -> str:
    """How ``removed_paths`` names a file: its path, or for a deletion vector (one of the many
    blobs of a Puffin file) :func:`icemor.spec.dv.dv_removal_key`."""
    if data_file.file_format == FileFormat.PUFFIN:
        _, offset, _ = v3_fields(data_file)
        if offset is not None:
            return dv_removal_key(data_file.file_path, offset)
    return data_file.file_path


def _writer(
    metadata: TableMetadata, io: FileIO, spec_id: int, content: ManifestContent, snapshot_id: int, path: str
) -> ManifestWriter:
    # the v3 writer class and the v2 factory take the same arguments
    new_writer = ManifestWriterV3 if is_v3(metadata) else manifest_writer
    return new_writer(
        metadata.specs()[spec_id],
        metadata.schema(),
        io.new_output(path),
        snapshot_id,
        deletes=content == ManifestContent.DELETES,
    )


def _manifest_path(metadata: TableMetadata, commit_id: str, n: int) -> str:
    return f"{metadata.location}/metadata/{commit_id}-m{n}.avro"


def write_snapshot_manifests(
    metadata: TableMetadata,
    io: FileIO,
    parent_manifests: Iterable[ManifestFile],
    *,
    snapshot_id: int,
    added: Iterable[DataFile],
    removed_paths: set[str],
    data_sequence_numbers: Mapping[str, int] | None = None,
) -> ManifestChanges:
    """Manifests of a snapshot that adds ``added`` and removes ``removed_paths`` from the parent's.

    ``removed_paths`` name files by path (a Puffin file's path: every DV in it) or by
    :func:`removal_key` (one deletion vector: path and offset).
    Paths of ``removed_paths`` not found live in the parent are left out of ``changes.removed``;
    the caller decides whether that is a conflict. An added file named in
    ``data_sequence_numbers`` gets that data sequence number explicitly in its ADDED entry (a
    rewrite keeping the rewritten files' number, as Java's ``RewriteFiles``); the others inherit
    the commit's. Their file sequence number is always the commit's (inherited).

    Raises:
        WriteFailedError: A manifest could not be written; the ones written are removed.
    """
    explicit = data_sequence_numbers or {}
    v3 = is_v3(metadata)
    if v3:
        added = [as_v3(f) for f in added]
    commit_id = uuid.uuid4().hex
    changes = ManifestChanges()

    def new_path() -> str:
        path = _manifest_path(metadata, commit_id, len(changes.written_paths))
        changes.written_paths.append(path)
        return path

    try:
        by_kind: dict[tuple[int, ManifestContent], list[DataFile]] = defaultdict(list)
        for f in added:
            kind = ManifestContent.DATA if int(f.content) == 0 else ManifestContent.DELETES
            by_kind[(f.spec_id, kind)].append(f)
        for (spec_id, content), files in sorted(by_kind.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
            path = new_path()
            entries = [
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=snapshot_id,
                    sequence_number=explicit.get(f.file_path),
                    data_file=f,
                )
                for f in files
            ]
            with writing(path), _writer(metadata, io, spec_id, content, snapshot_id, path) as w:
                for e in entries:
                    w.add_entry(e)
            changes.manifests.append(w.to_manifest_file())
            _remember_names(changes.manifests[-1], entries, v3)

        for manifest in parent_manifests:
            if not (manifest.has_added_files() or manifest.has_existing_files()):
                continue  # no live entry: Java drops such manifests too
            if not removed_paths or not (_names(io, manifest, v3) & removed_paths):
                changes.manifests.append(manifest)
                continue
            entries = live_entries(io, manifest, v3=v3)
            live = [e for e in entries if not _removed(e.data_file, removed_paths)]
            gone = [e for e in entries if _removed(e.data_file, removed_paths)]
            path = new_path()
            with (
                writing(path),
                _writer(metadata, io, manifest.partition_spec_id, manifest.content, snapshot_id, path) as w,
            ):
                for e in gone:
                    w.delete(e)
                for e in live:
                    w.existing(e)
            changes.removed.extend(e.data_file for e in gone)
            changes.removed_keys.extend(
                k for e in gone for k in {removal_key(e.data_file), e.data_file.file_path}
            )
            changes.manifests.append(w.to_manifest_file())
            _remember_names(changes.manifests[-1], live, v3)
    except BaseException:
        delete_quietly(io, changes.written_paths)
        raise
    return changes
