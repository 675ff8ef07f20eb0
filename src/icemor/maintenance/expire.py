"""Expire snapshots, then delete the files no remaining snapshot can reach.

Which snapshots go is Iceberg Java's ``RemoveSnapshots`` rule:

- a branch or tag whose head is older than its ``max-ref-age-ms`` (default
  ``history.expire.max-ref-age-ms``: forever) is removed, ``main`` never;
- every remaining ref's head is kept; along each remaining branch, ancestors are kept while
  fewer than ``min-snapshots-to-keep`` are kept or they are younger than the cut-off (the
  branch's ``max-snapshot-age-ms``, else ``older_than``, else now minus
  ``history.expire.max-snapshot-age-ms``, 5 days); ``retain_last`` is the default of
  ``min-snapshots-to-keep`` (``history.expire.min-snapshots-to-keep``, 1);
- a snapshot no ref reaches is kept while younger than the cut-off.

pyiceberg 0.12's ``ExpireSnapshots`` removes snapshots by id or age, keeping only ref heads:
it has no ``retain_last``, does not keep a branch's ancestors, and deletes no file. Here the
choice is icemor's, the metadata change pyiceberg's (:mod:`icemor.commit.snapshots`).

After the commit, as Java's ``ReachableFileCleanup``: manifest lists of the removed
snapshots; their manifests that no remaining snapshot lists; the data and delete files
(position, equality, deletion-vector Puffin) live in those manifests and live in no remaining
manifest; and statistics files (Puffin) of removed snapshots. A file any remaining snapshot,
branch or tag reaches is never deleted. ``gc.enabled=false`` refuses, as Java does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType

from icemor.commit.snapshots import SnapshotRemoval, commit_removal, preview_removal
from icemor.engines.local import map_ordered
from icemor.exceptions import IcemorError, InvalidArgumentError, MissingFileError, UnsupportedFeatureError
from icemor.io.key_index import data_path_of
from icemor.planning.manifest_reader import read_manifest_entries, read_manifest_list
from icemor.spec import properties as P
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["ExpireMetrics", "check_gc_enabled", "choose_expired", "expire_snapshots"]

DAY_MS = 24 * 3600 * 1000
MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MAX_SNAPSHOT_AGE_MS_DEFAULT = 5 * DAY_MS
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MIN_SNAPSHOTS_TO_KEEP_DEFAULT = 1
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"
GC_ENABLED = "gc.enabled"


@dataclass(frozen=True)
class ExpireMetrics:
    """What an expiry removed (or, in a dry run, would remove)."""

    snapshots_expired: tuple[int, ...]
    refs_removed: tuple[str, ...]
    data_files_deleted: int
    delete_files_deleted: int
    manifests_deleted: int
    manifest_lists_deleted: int
    statistics_files_deleted: int
    failed: tuple[str, ...] = ()
    """Files that could not be deleted (the commit stands; they are orphans now)."""
    dry_run: bool = False
    files: tuple[str, ...] = field(default=(), repr=False)
    """Every file deleted (or, in a dry run, to delete)."""
    seconds: float = 0.0


def check_gc_enabled(metadata: TableMetadata, what: str) -> None:
    """Refuse to delete files of a table with ``gc.enabled=false`` (its files may be another table's)."""
    if metadata.properties.get(GC_ENABLED, "true").strip().lower() == "false":
        msg = f"cannot {what}: gc.enabled=false on this table (deleting its files may corrupt other tables)"
        raise InvalidArgumentError(msg)


def _ancestors(metadata: TableMetadata, snapshot_id: int) -> Iterable[Snapshot]:
    snapshot = metadata.snapshot_by_id(snapshot_id)
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None


def choose_expired(
    metadata: TableMetadata, *, now_ms: int, older_than_ms: int | None, retain_last: int | None
) -> SnapshotRemoval:
    """The snapshots and refs Iceberg Java's ``RemoveSnapshots`` removes (see the module doc)."""
    props = metadata.properties
    default_cutoff = (
        older_than_ms
        if older_than_ms is not None
        else now_ms - P.int_property(props, MAX_SNAPSHOT_AGE_MS, MAX_SNAPSHOT_AGE_MS_DEFAULT)
    )
    default_keep = (
        retain_last
        if retain_last is not None
        else P.int_property(props, MIN_SNAPSHOTS_TO_KEEP, MIN_SNAPSHOTS_TO_KEEP_DEFAULT)
    )
    default_ref_age = P.int_property(props, MAX_REF_AGE_MS, 2**63 - 1)
    kept_refs = {}
    for name, ref in metadata.refs.items():
        head = metadata.snapshot_by_id(ref.snapshot_id)
        if name == MAIN_BRANCH:
            kept_refs[name] = ref
        elif head is not None:
            max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default_ref_age
            if now_ms - head.timestamp_ms <= max_age:
                kept_refs[name] = ref
    retained = {ref.snapshot_id for ref in kept_refs.values()}
    reached = set(retained)
    for ref in kept_refs.values():
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            continue
        cutoff = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else default_cutoff
        keep = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else default_keep
        kept = 0
        for snapshot in _ancestors(metadata, ref.snapshot_id):
            if kept < keep or snapshot.timestamp_ms >= cutoff:
                retained.add(snapshot.snapshot_id)
                kept += 1
            else:
                break
        reached.update(s.snapshot_id for s in _ancestors(metadata, ref.snapshot_id))
    for snapshot in metadata.snapshots:  # no ref reaches it: kept while young
        if snapshot.snapshot_id not in reached and snapshot.timestamp_ms >= default_cutoff:
            retained.add(snapshot.snapshot_id)
    return SnapshotRemoval(
        snapshot_ids=frozenset(s.snapshot_id for s in metadata.snapshots) - retained,
        refs=frozenset(metadata.refs) - frozenset(kept_refs),
    )


@dataclass
class _Unreachable:
    manifest_lists: set[str] = field(default_factory=set)
    manifests: set[str] = field(default_factory=set)
    data: set[str] = field(default_factory=set)
    sidecars: set[str] = field(default_factory=set)
    deletes: set[str] = field(default_factory=set)
    statistics: set[str] = field(default_factory=set)

    def all(self) -> list[str]:
        # content files first, then what lists them: an interrupted run leaves no dangling reference
        return [
            *sorted(self.data),
            *sorted(self.sidecars),
            *sorted(self.deletes),
            *sorted(self.statistics),
            *sorted(self.manifests),
            *sorted(self.manifest_lists),
        ]


def _manifests(io: FileIO, snapshots: Iterable[Snapshot]) -> dict[str, ManifestFile]:
    def listed(s: Snapshot) -> list[ManifestFile]:
        try:
            return read_manifest_list(io, s)
        except MissingFileError:
            return []  # already gone: nothing of it to find

    out: dict[str, ManifestFile] = {}
    for manifests in map_ordered(list(snapshots), listed):
        out.update((m.manifest_path, m) for m in manifests)
    return out


def _live_paths(io: FileIO, manifests: Iterable[ManifestFile]) -> list[tuple[str, int]]:
    def entries(m: ManifestFile) -> list[tuple[str, int]]:
        try:
            return [(e.data_file.file_path, int(e.data_file.content)) for e in read_manifest_entries(io, m)]
        except MissingFileError:
            return []

    return [p for ps in map_ordered(list(manifests), entries) for p in ps]


def unreachable_files(io: FileIO, before: TableMetadata, after: TableMetadata) -> _Unreachable:
    """Files reachable from the snapshots ``after`` lost, and from none it kept (Java's rule)."""
    kept_ids = {s.snapshot_id for s in after.snapshots}
    expired = [s for s in before.snapshots if s.snapshot_id not in kept_ids]
    out = _Unreachable()
    if expired:
        out.manifest_lists = {s.manifest_list for s in expired} - {s.manifest_list for s in after.snapshots}
        kept_manifests = _manifests(io, after.snapshots)
        candidates = {p: m for p, m in _manifests(io, expired).items() if p not in kept_manifests}
        out.manifests = set(candidates)
        content = dict(_live_paths(io, candidates.values()))
        if content:
            for path, _ in _live_paths(io, kept_manifests.values()):
                content.pop(path, None)
        out.data = {p for p, c in content.items() if c == FileContent.DATA}
        out.sidecars = key_sidecars(io, out.data)
        out.deletes = {p for p, c in content.items() if c != FileContent.DATA}
    stats_before = {s.statistics_path for s in [*before.statistics, *before.partition_statistics]}
    stats_after = {s.statistics_path for s in [*after.statistics, *after.partition_statistics]}
    out.statistics = stats_before - stats_after
    return out


def filesystem_of(io: FileIO, location: str, *, purpose: str) -> tuple[pafs.FileSystem, str, str]:
    """The pyarrow filesystem of ``location``, its path there, and the URI prefix its paths need.

    Raises:
        UnsupportedFeatureError: ``io`` cannot list files (``purpose`` names what needed it).
    """
    if not isinstance(io, PyArrowFileIO):
        msg = f"{purpose} needs pyiceberg's PyArrowFileIO to list files, not {type(io).__name__}"
        raise UnsupportedFeatureError(msg)
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    prefix = "" if scheme == "file" else f"{scheme}://"
    return io.fs_by_scheme(scheme, netloc), path, prefix


def key_sidecars(io: FileIO, data_paths: set[str]) -> set[str]:
    """The key-index sidecars (:mod:`icemor.io.key_index`) of ``data_paths``, found by listing
    their directories (one listing a directory; a sidecar's name holds key ids no metadata
    records). Best effort: a directory that cannot be listed keeps its sidecars for
    ``remove_orphan_files``, which removes a sidecar once its data file is unreferenced.
    """
    by_directory: dict[str, set[str]] = {}
    for path in data_paths:
        by_directory.setdefault(path.rpartition("/")[0], set()).add(path)

    def listed(directory: str) -> list[str]:
        try:
            fs, root, _ = filesystem_of(io, directory, purpose="finding key-index sidecars")
            infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except (UnsupportedFeatureError, OSError):
            return []
        names = (i.path.rpartition("/")[2] for i in infos if i.type == pafs.FileType.File)
        found = (f"{directory}/{n}" for n in names if n.startswith("."))
        return [p for p in found if data_path_of(p) in by_directory[directory]]

    return {p for found in map_ordered(sorted(by_directory), listed) for p in found}


def delete_files(
    io: FileIO, paths: list[str], progress: Callable[[int, int], None] | None = None
) -> tuple[str, ...]:
    """Delete ``paths`` on threads, best effort; return those that could not be deleted."""
    lock = threading.Lock()
    done = [0]

    def one(path: str) -> str | None:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except OSError:
            return path
        finally:
            if progress is not None:
                with lock:
                    done[0] += 1
                    progress(done[0], len(paths))
        return None

    return tuple(p for p in map_ordered(paths, one) if p is not None)


def expire_snapshots(
    table: PyIcebergTable,
    *,
    older_than_ms: int | None = None,
    retain_last: int | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ExpireMetrics:
    """Expire snapshots (Java's rule, see the module doc) and delete the files only they reached.

    Args:
        table: The pyiceberg table (refreshed here).
        older_than_ms: Expire snapshots older than this (ms since the epoch); default now minus
            ``history.expire.max-snapshot-age-ms`` (5 days).
        retain_last: Keep at least this many ancestors of each branch head; default
            ``history.expire.min-snapshots-to-keep`` (1).
        dry_run: Commit and delete nothing; report what would go.
        progress: Called with (files deleted, files to delete).

    Raises:
        InvalidArgumentError: ``retain_last`` < 1, or ``gc.enabled=false``.
        CommitFailedError: Every attempt lost its compare-and-swap to concurrent commits.
    """
    started = time.monotonic()
    if retain_last is not None and retain_last < 1:
        msg = f"retain_last is {retain_last} but must be at least 1"
        raise InvalidArgumentError(msg)
    table = table.refresh()
    check_gc_enabled(table.metadata, "expire snapshots")
    now = int(time.time() * 1000)

    def choose(metadata: TableMetadata) -> SnapshotRemoval:
        return choose_expired(metadata, now_ms=now, older_than_ms=older_than_ms, retain_last=retain_last)

    if dry_run:
        before = table.metadata
        removal = choose(before)
        after = preview_removal(before, removal) if removal else before
    else:
        before, after, removal = commit_removal(table, choose)
    try:
        files = unreachable_files(table.io, before, after)
    except IcemorError as e:
        if dry_run or not removal:
            raise
        msg = (
            f"expired {len(removal.snapshot_ids)} snapshots (committed), but cannot tell which files they "
            f"alone reached, so none was deleted: {e}"
        )
        raise type(e)(msg) from e
    paths = files.all()
    failed = () if dry_run else delete_files(table.io, paths, progress)
    return ExpireMetrics(
        snapshots_expired=tuple(sorted(removal.snapshot_ids)),
        refs_removed=tuple(sorted(removal.refs)),
        data_files_deleted=len(files.data),
        delete_files_deleted=len(files.deletes),
        manifests_deleted=len(files.manifests),
        manifest_lists_deleted=len(files.manifest_lists),
        statistics_files_deleted=len(files.statistics),
        failed=failed,
        dry_run=dry_run,
        files=tuple(paths),
        seconds=time.monotonic() - started,
    )
