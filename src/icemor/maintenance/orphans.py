"""Remove orphan files: files under the table location that no table metadata references.

As Iceberg Java's ``DeleteOrphanFiles``: the table location is listed first, then the
references are collected from the metadata as it is then (so a file committed while the
listing ran counts as referenced), and hidden files (``.``/``_`` names: Hadoop checksums) are
left alone, but for icemor's own: key-index sidecars (:mod:`icemor.io.key_index`), which are
orphans once no metadata names their data file, and the staging markers of Spark writes
(everything under ``<data path>/_icemor-staging/``, :mod:`icemor.engines.spark.write`: a write
removes its own when it ends, so only those of killed writes are left; the data paths are
``<location>/data`` and each ``write.data.path``-like property set, listed too when they lie
outside the location; the per-write directories they leave empty go with them, local disks
only). The references: every snapshot's manifest list, manifests and the data and delete files
their entries name (any status), statistics and partition-statistics files, the current
metadata file and those in its log, and ``version-hint.text``. A listed file is an orphan when
none of these names it and it was last modified before the cut-off, which by default is 3 days
ago (Java's): files written by a commit still in flight are younger, and must stay. The same
cut-off protects a write in progress: its staging markers (one written as it announces each
file) and their directory are younger than a cut-off before the write began; a cut-off later
than that (``--older-than`` now) may remove the markers of a running write, which then cannot
remove the files of its failed attempts (they stay, as orphans for a later run), as it may
remove any file a commit in flight has written. ``gc.enabled=false`` refuses.

Unlike Java's action, files under another table's locations (its location,
``write.data.path``, ``write.metadata.path``) are never orphans here, whatever the catalog
says about who put that table there: a table nested in this one's location (an older icemor
accepted ``db.t/data``, Iceberg Java creates tables wherever ``LOCATION`` says) keeps its files,
and when this table's location lies inside another's, nothing is deleted at all (the outer
table's own files may lie under it). Such subtrees are reported in ``OrphanMetrics.skipped``.
A table whose metadata cannot be read makes the whole run fail: where its files lie is unknown.

Listing needs pyiceberg's ``PyArrowFileIO`` (local files, S3, GCS, ADLS, HDFS).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow.fs as pafs

from icemor.engines.local import map_ordered
from icemor.exceptions import MissingFileError
from icemor.io.key_index import data_path_of
from icemor.maintenance.expire import DAY_MS, check_gc_enabled, delete_files, filesystem_of
from icemor.planning.manifest_reader import read_manifest_list
from icemor.spec.identifiers import DATA_PATH_PROPERTIES, STAGING_DIR, location_key, location_within

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["ORPHAN_SAFETY_MS", "OrphanMetrics", "remove_orphan_files", "staging_roots"]

ORPHAN_SAFETY_MS = 3 * DAY_MS


@dataclass(frozen=True)
class OrphanMetrics:
    """The orphan files found (and deleted, unless a dry run).

    ``skipped``: (table, location) of each other table whose location lies inside this one's
    (its files were left alone) or around it (then nothing was deleted).
    """

    files: tuple[str, ...]
    bytes: int
    older_than_ms: int
    failed: tuple[str, ...] = ()
    dry_run: bool = False
    seconds: float = field(default=0.0, repr=False)
    skipped: tuple[tuple[str, str], ...] = ()


def _hidden(relative: str) -> bool:
    """Java's hidden-path filter: a name starting with ``.`` or ``_`` (checksums, markers), not a
    partition directory such as ``_k=1``."""
    return any(part[:1] in (".", "_") and "=" not in part for part in relative.split("/") if part)


def staging_roots(location: str, properties: Mapping[str, str]) -> list[str]:
    """The staging directories icemor's Spark writes of this table may have used: under
    ``<location>/data`` and under every data-path property set (one may have been set since)."""
    paths = {f"{location.rstrip('/')}/data"}
    paths.update(v.rstrip("/") for k in DATA_PATH_PROPERTIES if (v := properties.get(k)))
    return sorted(f"{p}/{STAGING_DIR}" for p in paths)


def _is_referenced(path: str, referenced: set[str]) -> bool:
    """Whether metadata names ``path``, or, for a key-index sidecar, the data file it indexes."""
    owner = data_path_of(path)
    return location_key(path) in referenced or (owner is not None and location_key(owner) in referenced)


def _referenced(table: PyIcebergTable) -> set[str]:
    """Every location the table's metadata names, as :func:`_key`."""
    metadata, io = table.metadata, table.io
    refs = {table.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    refs.add(f"{metadata.location}/metadata/version-hint.text")
    refs.update(s.statistics_path for s in [*metadata.statistics, *metadata.partition_statistics])
    manifests: dict[str, ManifestFile] = {}
    for snapshot in metadata.snapshots:
        refs.add(snapshot.manifest_list)
        try:
            manifests.update((m.manifest_path, m) for m in read_manifest_list(io, snapshot))
        except MissingFileError as e:
            # its files cannot be known, so none can be called an orphan
            msg = f"cannot tell which files snapshot {snapshot.snapshot_id} references: {e}"
            raise MissingFileError(msg) from e
    refs.update(manifests)

    def paths(m: ManifestFile) -> list[str]:
        # every entry, DELETED ones too: a superset of what is live can only delete less
        return [e.data_file.file_path for e in m.fetch_manifest_entry(io, discard_deleted=False)]

    for found in map_ordered(list(manifests.values()), paths):
        refs.update(found)
    keys = {location_key(r) for r in refs}
    # a writer may have percent-encoded the location: either spelling means referenced
    return keys | {unquote(k) for k in keys}


def _nested(
    name: str, location: str, tables: Mapping[str, Sequence[str]]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(table, location) of the other tables around ``location`` (or at it), and of those inside it."""
    around, inside = [], []
    for other, locations in sorted(tables.items()):
        if other == name:
            continue
        if (hit := location_within(location, locations)) is not None:
            around.append((other, hit))
        inside += [(other, loc) for loc in locations if location_within(loc, [location]) is not None]
    return around, inside


def _listed_under(io: FileIO, roots: Sequence[str]) -> list[tuple[str, pafs.FileInfo]]:
    """Everything under ``roots`` (staging directories outside the table location), by location."""
    out = []
    for staging in roots:
        fs, path, prefix = filesystem_of(io, staging, purpose="removing orphan files")
        found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        out += [(prefix + f.path, f) for f in found]
    return out


def _remove_empty_staging(
    listed: Sequence[tuple[str, pafs.FileInfo]], staging: Sequence[str], cutoff: int
) -> None:
    """Remove the directories under ``staging`` (not those roots themselves) that are empty now
    and were last modified before ``cutoff`` when listed (a write adding a marker since would
    have made its directory younger), deepest first; local disks only, best effort.

    Only local directories exist by themselves (an object store's vanish with their last file),
    and ``rmdir`` removes only an empty one, whatever came since.
    """
    roots = {location_key(s) for s in staging}
    old = [
        local_path
        for path, f in listed
        if f.type == pafs.FileType.Directory
        and f.mtime is not None
        and f.mtime.timestamp() * 1000 < cutoff
        and location_key(path) not in roots
        and location_within(path, staging) is not None
        and (local_path := _local(path)) is not None
    ]
    for directory in sorted(old, key=lambda d: d.count("/"), reverse=True):
        try:
            os.rmdir(directory)
        except OSError:
            continue  # not empty (or gone)


def _local(listed: str) -> str | None:
    """A listed path that is local (``filesystem_of``'s prefix is empty for local paths only)."""
    return None if "://" in listed else listed


def remove_orphan_files(
    table: PyIcebergTable,
    *,
    tables: Callable[[], Mapping[str, Sequence[str]]],
    older_than_ms: int | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> OrphanMetrics:
    """Delete the files under the table location that no metadata references (see the module doc).

    Args:
        table: The pyiceberg table (refreshed here).
        tables: Every table of the catalog with its locations
            (:func:`icemor.catalog.table_locations`); their subtrees are never touched.
        older_than_ms: Only files last modified before this (ms since the epoch); default 3 days ago.
        dry_run: Find them, delete nothing.
        progress: Called with (files deleted, orphan files).

    Raises:
        InvalidArgumentError: ``gc.enabled=false``.
        UnsupportedFeatureError: The table's FileIO cannot list files.
        MissingFileError, CorruptFileError: From ``tables``: a table's metadata cannot be read.
    """
    started = time.monotonic()
    table = table.refresh()
    check_gc_enabled(table.metadata, "remove orphan files")
    cutoff = older_than_ms if older_than_ms is not None else int(time.time() * 1000) - ORPHAN_SAFETY_MS
    location = table.metadata.location
    fs, root, prefix = filesystem_of(table.io, location, purpose="removing orphan files")
    staging = staging_roots(location, table.metadata.properties)
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    # (location, info, relative path under the table location; None: a staging root outside it)
    listed: list[tuple[str, pafs.FileInfo, str | None]] = [
        (prefix + f.path, f, f.path[len(root) :]) for f in fs.get_file_info(selector)
    ]
    outside = [s for s in staging if location_within(s, [location]) is None]
    listed += [(path, f, None) for path, f in _listed_under(table.io, outside)]

    def candidate(path: str, relative: str | None) -> bool:
        # hidden names are not ours to remove, but for icemor's sidecars and staging markers
        return (
            relative is None
            or not _hidden(relative)
            or data_path_of(path) is not None
            or location_within(path, staging) is not None
        )

    old = [
        (path, f, relative)
        for path, f, relative in listed
        if f.type == pafs.FileType.File
        and f.mtime is not None
        and f.mtime.timestamp() * 1000 < cutoff
        and candidate(path, relative)
    ]
    # after listing, as the references: a table registered meanwhile is protected too
    name = ".".join(table.name())
    catalog_tables = tables()
    around, inside = _nested(name, location, catalog_tables)
    if around:
        old = []  # files of the outer table may lie anywhere under this one's location
    else:
        protected = [loc for _, loc in inside]
        # outside the location: never under another table's locations
        others = [loc for other, locs in catalog_tables.items() if other != name for loc in locs]
        old = [
            (path, f, relative)
            for path, f, relative in old
            if not (guard := protected if relative is not None else others)
            or location_within(path, guard) is None
        ]
    referenced = _referenced(table.refresh())  # after listing: what was committed meanwhile counts
    orphans = sorted(((p, f) for p, f, _ in old if not _is_referenced(p, referenced)), key=lambda x: x[0])
    paths = [p for p, _ in orphans]
    failed = () if dry_run else delete_files(table.io, paths, progress)
    if not dry_run and not around:
        _remove_empty_staging([(p, f) for p, f, _ in listed], staging, cutoff)
    return OrphanMetrics(
        files=tuple(paths),
        bytes=sum(f.size or 0 for _, f in orphans),
        older_than_ms=cutoff,
        failed=failed,
        dry_run=dry_run,
        seconds=time.monotonic() - started,
        skipped=tuple(around + inside),
    )
