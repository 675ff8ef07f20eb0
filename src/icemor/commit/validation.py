"""Conflict validation of a commit against what was committed since its scan (Iceberg Java's RowDelta).

The history is the ancestors of the current head back to (excluding) the snapshot the
operation read, as ``MergingSnapshotProducer.validationHistory``. The checks, named as Java's:

- :func:`validate_data_files_exist`: a data file the commit references (adds deletes for, or
  removes) was removed by an ``overwrite``/``replace`` (or ``delete``, for removed files) snapshot;
- :func:`validate_no_conflicting_data_files` (``serializable`` isolation): an ``append``/
  ``overwrite`` snapshot added a data file that may hold rows matching the operation's condition;
- :func:`validate_no_new_deletes` (``validateNoNewDeletesForDataFiles`` and
  ``validateNoConflictingDeleteFiles``): a concurrent commit added deletes that apply to a data
  file this commit removes and rewrites (compaction, UPDATE, MERGE): they would be lost; or to a
  data file one of whose rows UPDATE or MERGE copies (at every isolation level): the copy would
  undo the delete;
- :func:`validate_no_removed_equality_deletes` (no Java counterpart: Java has no equality ->
  position conversion): a rewrite that keeps the starting sequence number relies on equality
  deletes committed after its start to go on applying to its new files; one that a concurrent
  conversion replaced by position deletes of the old data files (and removed) would not.

Whether a delete applies is judged as Java's ``DeleteFileIndex`` does (:func:`may_apply`): by
data sequence number, by file path for position deletes, and by spec and partition for
equality deletes (a global one, of an unpartitioned spec, applies everywhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor._compat.pyiceberg import inclusive_metrics_evaluator, read_manifest_entries_v3, set_spec_id
from icemor.exceptions import CommitConflictError, NewDeletesConflictError
from icemor.planning.manifest_reader import read_manifest_list
from icemor.spec.files import DataFileRef, FileContent
from icemor.spec.rules import file_path_bounds_contain, file_path_bounds_scope

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from collections.abc import Set as AbstractSet

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestEntry
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "Validation",
    "may_apply",
    "validate",
    "validate_data_files_exist",
    "validate_no_conflicting_data_files",
    "validate_no_new_deletes",
    "validate_no_removed_equality_deletes",
]


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
    data_files: Mapping[str, DataFileRef] = field(default_factory=dict)
    """What the scan knew of the data files above (spec, partition, data sequence number), by
    path: a concurrent equality delete conflicts only where it can apply. A path missing here
    counts as in every partition at the starting snapshot's sequence number."""
    ignore_equality_deletes: bool = False
    """The rewritten rows' new data files keep the starting snapshot's sequence number, so an
    equality delete committed concurrently still applies to them: not a conflict (Java's
    ``validateNoNewDeletesForDataFiles(..., ignoreEqualityDeletes)``)."""
    carried: set[str] = field(default_factory=set)
    """Rewritten data files whose position deletes this commit carried onto its new data files,
    as the table had them at sequence number :attr:`carried_through`: those are no conflict."""
    carried_through: int = -1
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
    # the manifest list decoded once per process (a retried commit validates the same history)
    for m in read_manifest_list(io, snapshot):
        if m.content == content and m.added_snapshot_id == snapshot.snapshot_id:
            for e in read_manifest_entries_v3(io.new_input(m.manifest_path)):
                if e.snapshot_id is None and e.status == ManifestEntryStatus.ADDED:
                    e.snapshot_id = m.added_snapshot_id  # inherited (spec: snapshot id inheritance)
                if e.snapshot_id == snapshot.snapshot_id:
                    set_spec_id(e.data_file, m.partition_spec_id)
                    out.append(e)
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

    Runs, snapshot by snapshot (newest first), the checks of Java's ``BaseRowDelta.validate``:
    :func:`validate_data_files_exist`, :func:`validate_no_conflicting_data_files` (serializable
    isolation only) and :func:`validate_no_new_deletes` (Java's ``validateNoNewDeletesForDataFiles``
    and ``validateNoConflictingDeleteFiles``).

    Raises:
        CommitConflictError: With the first conflict found, naming the snapshot and the file.
    """
    snapshots = history(metadata, v.start_snapshot_id)
    if not snapshots:
        return
    if v.history_check is not None:
        v.history_check(snapshots)
    matches = _matcher(metadata, v.conflict_filter) if v.serializable else None
    start = metadata.snapshot_by_id(v.start_snapshot_id) if v.start_snapshot_id is not None else None
    starting_sequence_number = start.sequence_number if start is not None and start.sequence_number else 0
    rewritten = {p: _data_file(p, v, starting_sequence_number) for p in v.no_new_deletes_for}
    removed = {p: f for p, f in rewritten.items() if p in v.removed_data_files}
    for snap in snapshots:
        op = snap.summary.operation if snap.summary is not None else None
        data = _entries(io, snap, ManifestContent.DATA)
        validate_data_files_exist(snap, op, data, v.referenced_data_files, v.removed_data_files)
        if matches is not None:
            validate_no_conflicting_data_files(snap, op, data, matches)
        if rewritten and op in (Operation.OVERWRITE, Operation.DELETE):
            deletes = [_AddedDelete.of(e, snap) for e in _entries(io, snap, ManifestContent.DELETES)]
            new = [d for d in deletes if d is not None]
            specs = metadata.specs()
            kept = {p: f for p, f in rewritten.items() if p not in removed}
            validate_no_new_deletes(
                snap,
                new,
                specs,
                removed=removed,
                kept=kept,
                ignore_equality_deletes=v.ignore_equality_deletes,
                carried=v.carried,
                carried_through=v.carried_through,
            )
        if rewritten and v.ignore_equality_deletes:
            gone = [
                d
                for e in _entries(io, snap, ManifestContent.DELETES)
                if (d := _AddedDelete.of(e, snap, status=ManifestEntryStatus.DELETED)) is not None
            ]
            validate_no_removed_equality_deletes(
                snap, gone, removed, metadata.specs(), starting_sequence_number
            )


def validate_data_files_exist(
    snap: Snapshot,
    op: Operation | None,
    data: Sequence[ManifestEntry],
    referenced: AbstractSet[str],
    removed: AbstractSet[str],
) -> None:
    """A data file the commit adds deletes for, or removes, was not removed by ``snap``.

    Mirrors Java's ``MergingSnapshotProducer.validateDataFilesExist``: a referenced file must not
    be removed by an ``overwrite`` or ``replace`` snapshot (``skipDeletes``: a ``delete`` that
    removed it removed its rows too, which is what the new deletes want), a file this commit
    removes by neither of those nor a ``delete``.

    Raises:
        CommitConflictError: ``snap`` removed one of them.
    """
    if op not in (Operation.OVERWRITE, Operation.REPLACE, Operation.DELETE):
        return
    for e in data:
        if e.status != ManifestEntryStatus.DELETED:
            continue
        path = e.data_file.file_path
        if path in removed or (path in referenced and op != Operation.DELETE):
            msg = f"data file {path} was removed by concurrent snapshot {snap.snapshot_id} ({op})"
            raise CommitConflictError(msg)


def validate_no_conflicting_data_files(
    snap: Snapshot, op: Operation | None, data: Sequence[ManifestEntry], matches: Callable[[DataFile], bool]
) -> None:
    """``snap`` added no data file that may hold rows matching the operation's condition.

    Mirrors Java's ``RowDelta.validateNoConflictingDataFiles`` (``MergingSnapshotProducer.
    validateAddedDataFiles``, at ``serializable`` isolation): ``append`` and ``overwrite``
    snapshots are checked; a file may match by its partition values and column metrics.

    Raises:
        CommitConflictError: ``snap`` added such a file.
    """
    if op not in (Operation.APPEND, Operation.OVERWRITE):
        return
    for e in data:
        if e.status == ManifestEntryStatus.ADDED and matches(e.data_file):
            msg = (
                f"concurrent snapshot {snap.snapshot_id} ({op}) added data file {e.data_file.file_path}, "
                f"which may hold rows matching the condition (serializable isolation)"
            )
            raise CommitConflictError(msg)


def validate_no_new_deletes(
    snap: Snapshot,
    deletes: Sequence[_AddedDelete],
    specs: Mapping[int, PartitionSpec],
    *,
    removed: Mapping[str, _DataFile],
    kept: Mapping[str, _DataFile],
    ignore_equality_deletes: bool = False,
    carried: AbstractSet[str] = frozenset(),
    carried_through: int = -1,
) -> None:
    """``snap`` added no delete that applies to a data file this commit rewrites or carries rows of.

    The new deletes (of ``overwrite``/``delete`` snapshots) are matched to each data file as
    Java's ``DeleteFileIndex.forDataFile`` does (:func:`may_apply`), for two of Java's checks:

    - ``MergingSnapshotProducer.validateNoNewDeletesForDataFiles`` on ``removed``, the data
      files this commit removes and rewrites: the rewrite would lose the delete;
    - ``RowDelta.validateNoConflictingDeleteFiles`` (``MergingSnapshotProducer.
      validateNoNewDeleteFiles``) on ``kept``, the data files whose rows UPDATE and MERGE copy
      into new data files (at every isolation level): the copy would resurrect the deleted
      rows. Java asks for no new delete matching the conflict filter; icemor narrows it to the
      deletes that apply to these files.

    With ``ignore_equality_deletes`` (the new files keep the starting sequence number) only
    position deletes count. Nor does a position delete of a ``carried`` file up to sequence
    number ``carried_through``: the commit took its positions on.

    Raises:
        NewDeletesConflictError: Such a delete was added for a file of ``removed``.
        CommitConflictError: Such a delete was added for a file of ``kept``.
    """
    counted = [
        d for d in deletes if not (ignore_equality_deletes and d.content == FileContent.EQUALITY_DELETES)
    ]

    def message(what: str, d: _AddedDelete, hit: _DataFile) -> str:
        return (
            f"concurrent snapshot {snap.snapshot_id} added delete file {d.path} "
            f"for data file {hit.path}, which this operation {what}"
        )

    _refuse_applying(
        counted,
        removed,
        specs,
        partial(message, "rewrites"),
        error=NewDeletesConflictError,
        skip=lambda d, f: (
            f.path in carried
            and d.content == FileContent.POSITION_DELETES
            and d.data_sequence_number <= carried_through
        ),
    )
    _refuse_applying(counted, kept, specs, partial(message, "updates rows of"))


def validate_no_removed_equality_deletes(
    snap: Snapshot,
    removed_deletes: Sequence[_AddedDelete],
    data_files: Mapping[str, _DataFile],
    specs: Mapping[int, PartitionSpec],
    starting_sequence_number: int,
) -> None:
    """``snap`` removed no equality delete, committed after the rewrite started, that applies to a
    data file the rewrite replaces.

    The rewrite read such a file without that delete (it was not committed yet) and gives its new
    files the starting sequence number, trusting the delete to go on applying to them (Java's
    ``use-starting-sequence-number``). A concurrent equality -> position conversion replaces the
    delete by position deletes of the old file, which the rewrite drops: its rows would come back.

    Raises:
        CommitConflictError: Such a delete was removed.
    """
    later = (
        d
        for d in removed_deletes
        if d.content == FileContent.EQUALITY_DELETES and d.data_sequence_number > starting_sequence_number
    )
    _refuse_applying(
        later,
        data_files,
        specs,
        lambda d, hit: (
            f"concurrent snapshot {snap.snapshot_id} removed equality delete file {d.path}, which "
            f"applies to data file {hit.path} that this operation rewrites (its rows would come back)"
        ),
    )


def _refuse_applying(
    deletes: Iterable[_AddedDelete],
    data_files: Mapping[str, _DataFile],
    specs: Mapping[int, PartitionSpec],
    message: Callable[[_AddedDelete, _DataFile], str],
    *,
    error: type[CommitConflictError] = CommitConflictError,
    skip: Callable[[_AddedDelete, _DataFile], bool] = lambda d, f: False,
) -> None:
    """Refuse the commit when one of ``deletes`` may apply to one of ``data_files`` (:func:`may_apply`),
    unless ``skip`` says the pair is taken care of.

    Raises:
        CommitConflictError: ``error``, with ``message`` of the first such delete and data file.
    """
    for d in deletes:
        hit = next((f for f in data_files.values() if may_apply(d, f, specs) and not skip(d, f)), None)
        if hit is not None:
            raise error(message(d, hit))


@dataclass(frozen=True)
class _DataFile:
    """What deciding whether a delete applies needs of a data file; unknown fields are None."""

    path: str
    spec_id: int | None
    partition: tuple[Any, ...] | None
    data_sequence_number: int


def _data_file(path: str, v: Validation, starting_sequence_number: int) -> _DataFile:
    ref = v.data_files.get(path)
    if ref is None:
        # Java judges every data file at the starting snapshot's sequence number
        return _DataFile(path, None, None, starting_sequence_number)
    return _DataFile(path, ref.spec_id, tuple(ref.partition), ref.data_sequence_number)


@dataclass(frozen=True)
class _AddedDelete:
    """A delete file a concurrent snapshot added."""

    path: str
    content: FileContent
    spec_id: int
    partition: tuple[Any, ...]
    data_sequence_number: int
    lower_bounds: Mapping[int, bytes]
    upper_bounds: Mapping[int, bytes]

    @classmethod
    def of(
        cls, e: ManifestEntry, snap: Snapshot, *, status: ManifestEntryStatus = ManifestEntryStatus.ADDED
    ) -> _AddedDelete | None:
        """The entry's delete file if the entry has ``status`` (added, or removed by ``snap``)."""
        if e.status != status:
            return None
        f = e.data_file
        partition = tuple(f.partition[i] for i in range(len(f.partition))) if f.partition is not None else ()
        return cls(
            path=f.file_path,
            content=FileContent(int(f.content)),
            spec_id=f.spec_id,
            partition=partition,
            # an added entry without one inherits its snapshot's
            data_sequence_number=e.sequence_number
            if e.sequence_number is not None
            else snap.sequence_number or 0,
            lower_bounds=f.lower_bounds or {},
            upper_bounds=f.upper_bounds or {},
        )


def may_apply(delete: _AddedDelete, data_file: _DataFile, specs: Mapping[int, PartitionSpec]) -> bool:
    """Whether ``delete`` may apply to ``data_file``, as Java's ``DeleteFileIndex.forDataFile``.

    - by sequence number: an equality delete applies to data files with a lower data sequence
      number, a position delete to those with a lower or equal one;
    - a position delete applies to the data file its ``file_path`` bounds name (or may name);
    - an equality delete of an unpartitioned spec applies to every partition (global); otherwise
      only to data files of its spec and partition.

    Fields of ``data_file`` that are unknown (None) never rule a delete out.
    """
    if delete.content == FileContent.POSITION_DELETES:
        if delete.data_sequence_number < data_file.data_sequence_number:
            return False
        scope = file_path_bounds_scope(delete.lower_bounds, delete.upper_bounds)
        if scope is not None:
            return scope == data_file.path
        return file_path_bounds_contain(data_file.path, delete.lower_bounds, delete.upper_bounds)
    if delete.data_sequence_number <= data_file.data_sequence_number:
        return False
    spec = specs.get(delete.spec_id)
    if spec is None or spec.is_unpartitioned() or data_file.spec_id is None or data_file.partition is None:
        return True
    return data_file.spec_id == delete.spec_id and data_file.partition == delete.partition
