"""Conflict validation of a commit against what was committed since its scan (Iceberg Java's RowDelta).

The history is the ancestors of the current head back to (excluding) the snapshot the
operation read, as ``MergingSnapshotProducer.validationHistory``. The checks:

- data files exist: a data file the commit references (adds deletes for, or removes) was
  removed by an ``overwrite``/``replace`` (or ``delete``, for removed files) snapshot;
- no conflicting data files (``serializable`` isolation): an ``append``/``overwrite``
  snapshot added a data file that may hold rows matching the operation's condition;
- no new deletes for rewritten data files: a concurrent commit added deletes that apply to a
  data file whose rows this commit carries into new data files (a file it removes and
  rewrites, or, for UPDATE and MERGE, a file one of whose rows it updates): the deletes would
  be lost with it, or undone by the copy (Java's ``validateNoNewDeletesForDataFiles`` and,
  for row-level operations at every isolation level, ``validateNoConflictingDeleteFiles``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor._compat.pyiceberg import inclusive_metrics_evaluator
from icemor.exceptions import CommitConflictError
from icemor.spec.files import FileContent
from icemor.spec.rules import file_path_bounds_contain, file_path_bounds_scope

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestEntry
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["Validation", "validate"]


@dataclass
class Validation:
    """What a commit must check against concurrent commits."""

    start_snapshot_id: int | None
    """The snapshot the operation read; None: the table was empty."""
    conflict_filter: BooleanExpression = field(default_factory=AlwaysTrue)
    serializable: bool = True
    referenced_data_files: set[str] = field(default_factory=set)
    removed_data_files: set[str] = field(default_factory=set)
    no_new_deletes_for: set[str] = field(default_factory=set)
    """Data files whose rows live on in this commit's new data files (compaction, UPDATE,
    MERGE): deletes that a concurrent commit adds for them would be lost or undone. A DELETE
    leaves this empty: the rows it removes are deleted anyway."""
    ignore_equality_deletes: bool = False
    """The rewritten rows' new data files keep the starting snapshot's sequence number, so an
    equality delete committed concurrently still applies to them: not a conflict (Java's
    ``validateNoNewDeletesForDataFiles(..., ignoreEqualityDeletes)``)."""
    history_check: Callable[[Sequence[Snapshot]], None] | None = None
    """Called on every attempt with the snapshots committed since the scan (newest first); it
    raises CommitConflictError to refuse (e.g. a streaming batch that was committed concurrently)."""


def history(metadata: TableMetadata, start_snapshot_id: int | None) -> list[Snapshot]:
    """Snapshots committed on the main branch after ``start_snapshot_id``, newest first.

    Raises:
        CommitConflictError: The start snapshot is no longer an ancestor of the head (the branch
            was reset, or its history expired), so what changed cannot be determined.
    """
    out: list[Snapshot] = []
    snapshot = metadata.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != start_snapshot_id:
        out.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
        if parent is not None and snapshot is None:
            msg = (
                f"cannot determine what changed since snapshot {start_snapshot_id}: "
                f"snapshot {parent} is no longer in the table metadata"
            )
            raise CommitConflictError(msg)
    if start_snapshot_id is not None and snapshot is None:
        msg = f"snapshot {start_snapshot_id}, which this operation read, is no longer an ancestor of the head"
        raise CommitConflictError(msg)
    return out


def _entries(io: FileIO, snapshot: Snapshot, content: ManifestContent) -> list[ManifestEntry]:
    """Entries of the manifests ``snapshot`` itself wrote (what it added or removed)."""
    out: list[ManifestEntry] = []
    for m in snapshot.manifests(io):
        if m.content == content and m.added_snapshot_id == snapshot.snapshot_id:
            out.extend(
                e
                for e in m.fetch_manifest_entry(io, discard_deleted=False)
                if e.snapshot_id == snapshot.snapshot_id
            )
    return out


def _matcher(metadata: TableMetadata, expr: BooleanExpression) -> Callable[[DataFile], bool]:
    """Whether a data file may hold rows matching ``expr`` (partition values, then column metrics)."""
    if isinstance(expr, AlwaysTrue):
        return lambda _: True
    schema = metadata.schema()
    specs = metadata.specs()
    partition_ok = {}
    for spec_id, spec in specs.items():
        projected = inclusive_projection(schema, spec, True)(expr)
        partition_ok[spec_id] = expression_evaluator(
            Schema(*spec.partition_type(schema).fields), projected, True
        )
    metrics_ok = inclusive_metrics_evaluator(schema, expr, case_sensitive=True)
    return lambda f: bool(partition_ok[f.spec_id](f.partition)) and metrics_ok(f)


def validate(metadata: TableMetadata, io: FileIO, v: Validation) -> None:
    """Check the commits after ``v.start_snapshot_id`` on the current head of ``metadata``.

    Raises:
        CommitConflictError: With the first conflict found, naming the snapshot and the file.
    """
    snapshots = history(metadata, v.start_snapshot_id)
    if not snapshots:
        return
    if v.history_check is not None:
        v.history_check(snapshots)
    matches = _matcher(metadata, v.conflict_filter) if v.serializable else None
    for snap in snapshots:
        op = snap.summary.operation if snap.summary is not None else None
        data = _entries(io, snap, ManifestContent.DATA)
        for e in data:
            path = e.data_file.file_path
            if e.status == ManifestEntryStatus.DELETED:
                removed_ours = path in v.removed_data_files
                if (path in v.referenced_data_files and op in (Operation.OVERWRITE, Operation.REPLACE)) or (
                    removed_ours and op in (Operation.OVERWRITE, Operation.REPLACE, Operation.DELETE)
                ):
                    msg = f"data file {path} was removed by concurrent snapshot {snap.snapshot_id} ({op})"
                    raise CommitConflictError(msg)
            elif (
                matches is not None
                and e.status == ManifestEntryStatus.ADDED
                and op in (Operation.APPEND, Operation.OVERWRITE)
                and matches(e.data_file)
            ):
                msg = (
                    f"concurrent snapshot {snap.snapshot_id} ({op}) added data file {path}, which may hold "
                    f"rows matching the condition (serializable isolation)"
                )
                raise CommitConflictError(msg)
        if v.no_new_deletes_for and op in (Operation.OVERWRITE, Operation.DELETE):
            for e in _entries(io, snap, ManifestContent.DELETES):
                if v.ignore_equality_deletes and int(e.data_file.content) == FileContent.EQUALITY_DELETES:
                    continue
                if e.status == ManifestEntryStatus.ADDED and _may_apply(e.data_file, v.no_new_deletes_for):
                    msg = (
                        f"concurrent snapshot {snap.snapshot_id} added delete file {e.data_file.file_path} "
                        f"for a data file this operation rewrites"
                    )
                    raise CommitConflictError(msg)


def _may_apply(delete: DataFile, data_paths: set[str]) -> bool:
    """Whether a new delete file may apply to one of ``data_paths`` (position deletes by path)."""
    if int(delete.content) != FileContent.POSITION_DELETES:
        return True
    scope = file_path_bounds_scope(delete.lower_bounds, delete.upper_bounds)
    if scope is not None:
        return scope in data_paths
    return any(file_path_bounds_contain(p, delete.lower_bounds, delete.upper_bounds) for p in data_paths)
