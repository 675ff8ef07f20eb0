"""Minor compaction: merge the position-delete files of a partition (or of a data file) into one file.

Per partition under ``write.delete.granularity=partition``, per data file under ``file`` (the
default), the position-delete files that apply are read and their positions written again as
one sorted file (rolled at ``write.delete.target-file-size-bytes``). Only positions that
still delete something are kept: those of live data files the old file applied to (the read
path's own verdict, sequence numbers included) and below the data file's record count, so
dangling deletes go. A position-delete file that applies to no live data file is removed
unread; a data file whose every row is deleted is removed instead of listing its rows.

Groups are found from the scan plan: delete files and the data files they apply to are
joined into components (a partition-scoped file joins every data file it may name), and a
component is rewritten when a data file has two or more position-delete files (any two in
the partition, under ``partition`` granularity), or when a file's metrics show dangling
positions (a ``pos`` bound past the data file's rows, a ``file_path`` bound naming a removed
file).

Sequence numbers: a new file gets the largest data sequence number of the files it replaces,
as Iceberg Java's ``RewritePositionDeletesCommitManager`` does (``addFile(file,
maxRewrittenDataSequenceNumber)``). It still applies to every data file it names, since each
had a sequence number <= the delete file that named it; and a concurrent major compaction
that started from a later snapshot does not see it as a new delete for the data files it
rewrites (Java's ``validateNoNewDeletesForDataFiles`` compares sequence numbers). The rows are
unchanged, so the commit is a ``replace`` that only checks that what it removes is still live.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import ManifestContent
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import LongType

from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.io.deletes import deleted_positions
from icemor.io.puffin import write_deletion_vectors
from icemor.io.writers import DeleteFileTarget, remove_written, write_position_deletes
from icemor.maintenance import _units
from icemor.maintenance._run_metrics import RunMetrics, run_metrics
from icemor.planning.manifest_reader import read_manifest_entries, read_manifest_list
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P
from icemor.spec.dv import dv_removal_key
from icemor.spec.files import FileContent
from icemor.spec.rules import DELETE_FILE_PATH_FIELD_ID, DELETE_FILE_POS_FIELD_ID

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.planning.manifest_reader import ManifestFileEntry
    from icemor.spec.files import DataFileRef, DeleteFileRef, WrittenFile
    from icemor.spec.tasks import PlannedFile

__all__ = ["PositionDeleteMetrics", "PositionUnit", "rewrite_position_deletes", "rewrite_position_unit"]


@dataclass(frozen=True)
class PositionDeleteMetrics(RunMetrics):
    """What a minor compaction did (``snapshot_id`` None: there was nothing to compact)."""

    delete_files_rewritten: int
    """Position-delete files merged into new ones."""
    dangling_delete_files_removed: int
    """Position-delete files that applied to no live data file, removed unread."""
    delete_files_added: int
    positions_before: int
    """Rows of the rewritten files (duplicates and dangling positions included)."""
    positions_written: int
    data_files_removed: int
    """Data files whose every row was deleted: removed rather than listed."""


_Pair = tuple["DataFileRef", tuple["DeleteFileRef", ...]]


@dataclass(frozen=True)
class _Output:
    """One new file (or a few, rolled at the target size): these data files' positions."""

    target: DeleteFileTarget
    data_files: tuple[_Pair, ...]
    """Each data file with the position-delete files (being rewritten) that apply to it."""


@dataclass(frozen=True)
class PositionUnit:
    """One component: its outputs; picklable for Spark executors."""

    outputs: tuple[_Output, ...]


@dataclass(frozen=True)
class _UnitResult:
    written: tuple[WrittenFile, ...]
    removed_data_files: tuple[str, ...]


def rewrite_position_unit(io: FileIO, unit: PositionUnit) -> _UnitResult:
    """Write the live positions of the unit's data files again; remove them all on failure."""
    written: list[WrittenFile] = []
    removed: list[str] = []
    try:
        for out in unit.outputs:
            pending = []
            for data_file, deletes in out.data_files:
                positions = deleted_positions(io, data_file.path, deletes)  # sorted, unique
                live = positions[positions < data_file.record_count]
                if len(live) >= data_file.record_count:
                    removed.append(data_file.path)  # no row left: drop the file, not list each row
                elif len(live):
                    pending.append((data_file.path, live))
            if pending and out.target.deletion_vectors:
                written.extend(write_deletion_vectors(io, out.target, pending))
            elif pending:
                written.extend(write_position_deletes(io, out.target, pending))
    except BaseException:
        for out in unit.outputs:
            remove_written(io, out.target)
        raise
    return _UnitResult(tuple(written), tuple(removed))


class _Components:
    """Union-find over hashable keys."""

    def __init__(self) -> None:
        self._parent: dict[Any, Any] = {}

    def find(self, key: Any) -> Any:
        root = self._parent.setdefault(key, key)
        while root != self._parent[root]:
            root = self._parent[root]
        while key != root:  # path compression
            self._parent[key], key = root, self._parent[key]
        return root

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[ra] = rb


def _position_entries(io: FileIO, table: PyIcebergTable) -> dict[str, ManifestFileEntry]:
    """Live position-delete entries (Parquet, not deletion vectors) of the current snapshot by path."""
    snapshot = table.metadata.current_snapshot()
    assert snapshot is not None
    out = {}
    for m in read_manifest_list(io, snapshot):
        if m.content != ManifestContent.DELETES:
            continue
        for e in read_manifest_entries(io, m):
            ref = e.to_delete_ref()
            if ref.content == FileContent.POSITION_DELETES and not ref.is_deletion_vector:
                out[ref.path] = e
    return out


def _dvs_of(planned: PlannedFile) -> tuple[DeleteFileRef, ...]:
    """The deletion vector(s) of this data file."""
    path = planned.data_file.path
    return tuple(d for d in planned.delete_files if d.is_deletion_vector and d.referenced_data_file == path)


def _dangling_by_metrics(entry: ManifestFileEntry, users: list[PlannedFile], live: set[str]) -> bool:
    """Whether the file's bounds prove it holds a dangling position (missing bounds prove nothing)."""
    f = entry.data_file
    lower, upper = f.lower_bounds or {}, f.upper_bounds or {}
    for bound in (lower.get(DELETE_FILE_PATH_FIELD_ID), upper.get(DELETE_FILE_PATH_FIELD_ID)):
        if bound is not None and bound.decode("utf-8") not in live:
            return True  # bounds are values of the file: it names a removed data file
    pos = upper.get(DELETE_FILE_POS_FIELD_ID)
    if pos is None or not users:
        return False
    return int(from_bytes(LongType(), pos)) >= max(p.data_file.record_count for p in users)


@dataclass(frozen=True)
class _Plan:
    """The compaction of one snapshot: its units with their sequence numbers, what they replace."""

    snapshot_id: int
    units: tuple[PositionUnit, ...]
    unit_seq: tuple[int, ...]
    inputs: frozenset[str]
    old_dvs: frozenset[str]
    dangling: tuple[str, ...]
    positions_before: int

    @property
    def data_files(self) -> dict[str, DataFileRef]:
        """The data files whose positions the plan writes again."""
        return {pair[0].path: pair[0] for u in self.units for o in u.outputs for pair in o.data_files}


def _plan(table: PyIcebergTable, *, only: set[str] | None = None) -> _Plan | None:
    """Plan the compaction of the current snapshot (None: nothing to compact); ``only``: the
    components of these data files (a group planned again), without the dangling files."""
    metadata, io = table.metadata, table.io
    v3 = metadata.format_version >= 3
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return None
    entries = _position_entries(io, table)
    if not entries:
        return None
    planned = prepare_scan(metadata, io).planned
    live = {p.data_file.path for p in planned}
    users: dict[str, list[PlannedFile]] = defaultdict(list)
    for p in planned:
        for d in p.delete_files:
            if d.path in entries:
                users[d.path].append(p)
    dangling = () if only is not None else tuple(sorted(path for path in entries if path not in users))

    props = metadata.properties
    granularity = P.choice(props, P.DELETE_GRANULARITY, P.DELETE_GRANULARITY_DEFAULT, ("file", "partition"))
    components = _Components()
    for path, ps in users.items():
        for p in ps:
            f = p.data_file
            components.union(("delete", path), ("data", f.path))
            if granularity == "partition":
                components.union(("data", f.path), ("partition", f.spec_id, f.partition))
    members: dict[Any, list[PlannedFile]] = defaultdict(list)
    for p in planned:
        if any(d.path in entries for d in p.delete_files):
            members[components.find(("data", p.data_file.path))].append(p)

    units: list[PositionUnit] = []
    unit_seq: list[int] = []
    inputs: set[str] = set()
    old_dvs: set[str] = set()
    builder = _Targets(table)
    for files in members.values():
        if only is not None and not any(p.data_file.path in only for p in files):
            continue
        per_file = [tuple(d for d in p.delete_files if d.path in entries) for p in files]
        # v3: each data file's DV (if any) is merged with its position deletes into a new DV
        dvs = [_dvs_of(p) if v3 else () for p in files]
        used = {d.path for ds in per_file for d in ds}
        # file granularity: a data file with two or more; partition: a partition with two or more;
        # v3: every position-delete file (a v3 table keeps deletion vectors only)
        wanted = v3 or (any(len(ds) > 1 for ds in per_file) if granularity == "file" else len(used) > 1)
        if not wanted and not any(_dangling_by_metrics(entries[u], users[u], live) for u in used):
            continue
        pairs = [(p.data_file, ds + dv) for p, ds, dv in zip(files, per_file, dvs, strict=True)]
        if granularity == "file" and not v3:
            outputs = tuple(builder.output([pair]) for pair in pairs)
        else:
            by_partition: dict[tuple[int, tuple[Any, ...]], list[_Pair]] = defaultdict(list)
            for pair in pairs:
                by_partition[(pair[0].spec_id, pair[0].partition)].append(pair)
            outputs = tuple(builder.output(group) for group in by_partition.values())
        units.append(PositionUnit(outputs))
        unit_seq.append(
            max(
                [entries[u].data_sequence_number for u in used]
                + [d.data_sequence_number for ds in dvs for d in ds]
            )
        )
        inputs |= used
        old_dvs |= {
            dv_removal_key(d.path, d.content_offset) for ds in dvs for d in ds if d.content_offset is not None
        }
    if not units and not dangling:
        return None
    return _Plan(
        snapshot_id=snapshot.snapshot_id,
        units=tuple(units),
        unit_seq=tuple(unit_seq),
        inputs=frozenset(inputs),
        old_dvs=frozenset(old_dvs),
        dangling=dangling,
        positions_before=sum(entries[p].data_file.record_count for p in inputs),
    )


def _batch(plan: _Plan, index: list[int], dangling: bool) -> _Plan:
    """The part of ``plan`` made of its units ``index`` (and the dangling files, or not)."""
    units = [plan.units[i] for i in index]
    inputs = {d.path for u in units for o in u.outputs for _, ds in o.data_files for d in ds}
    return _Plan(
        snapshot_id=plan.snapshot_id,
        units=tuple(units),
        unit_seq=tuple(plan.unit_seq[i] for i in index),
        inputs=frozenset(inputs & plan.inputs),
        old_dvs=frozenset(
            k
            for u in units
            for o in u.outputs
            for _, ds in o.data_files
            for d in ds
            if d.is_deletion_vector
            and d.content_offset is not None
            and (k := dv_removal_key(d.path, d.content_offset)) in plan.old_dvs
        ),
        dangling=plan.dangling if dangling else (),
        positions_before=0,
    )


def _commit(table: PyIcebergTable, plan: _Plan, run: Runner) -> PositionDeleteMetrics:
    """Rewrite the plan's units and commit them as one ``replace`` snapshot; the metrics of this
    commit (``positions_before`` is the run's)."""
    io = table.io
    units = list(plan.units)

    def lost() -> None:
        for u in units:
            for o in u.outputs:
                remove_written(io, o.target)

    results = _units.run_guarded(
        io, run, rewrite_position_unit, units, lambda r: [w.path for w in r.written], lost=lost
    )
    written = [w for r in results for w in r.written]
    removed_data = {p for r in results for p in r.removed_data_files}
    sequence_numbers = {w.path: seq for r, seq in zip(results, plan.unit_seq, strict=True) for w in r.written}
    delta = RowDelta(
        table,
        Validation(start_snapshot_id=plan.snapshot_id, serializable=False, removed_data_files=removed_data),
        added_files=written,
        removed_paths=set(plan.inputs) | set(plan.dangling) | removed_data | set(plan.old_dvs),
        # a dangling file another commit removed meanwhile is no conflict
        optional_removals=set(plan.dangling),
        operation=Operation.REPLACE,
        data_sequence_numbers=sequence_numbers,
    )
    committed = delta.commit()
    return PositionDeleteMetrics(
        delete_files_rewritten=len(plan.inputs),
        dangling_delete_files_removed=len(plan.dangling),
        delete_files_added=len(written),
        positions_before=0,  # the run's, set by run_metrics
        positions_written=sum(w.record_count for w in written),
        data_files_removed=len(removed_data),
        snapshot_id=committed.snapshot_id,
        seconds=0.0,  # the run's, set by run_metrics
        commits=1,
    )


def rewrite_position_deletes(
    table: PyIcebergTable,
    *,
    run: Runner,
    partial: _units.PartialProgress | None = None,
) -> PositionDeleteMetrics:
    """Merge the position-delete files of each partition (or data file) of the current snapshot.

    Without partial progress, one commit; with it (:class:`~icemor.maintenance._units.PartialProgress`,
    Java's ``partial-progress.*`` options of ``rewrite_position_delete_files``), one per group.

    Raises:
        InvalidArgumentError: A v1 table.
        CommitConflictError: A concurrent commit removed a file this one replaces (with partial
            progress: only when no commit succeeded).
    """
    started = time.monotonic()
    partial = partial or _units.PartialProgress()
    table = table.refresh()
    _units.check_rewritable(table)
    plan = _plan(table)
    if plan is None:
        return run_metrics(PositionDeleteMetrics, (), started)
    if not partial.enabled:
        return run_metrics(
            PositionDeleteMetrics,
            [_commit(table, plan, run)],
            started,
            positions_before=plan.positions_before,
        )

    def replan(n: int, planned: _Plan, head: Snapshot) -> _Plan | None:
        paths = planned.data_files.keys()
        again = _plan(table, only=set(paths)) if paths else None
        dangling = plan.dangling if n == 0 else ()  # the dangling files go with the first commit
        if again is None and not dangling:
            return None  # nothing left to compact in this group
        if again is None:
            return _Plan(head.snapshot_id, (), (), frozenset(), frozenset(), dangling, 0)
        return replace(again, dangling=dangling)

    indexes = _units.spread(range(len(plan.units)), partial.max_commits) or [range(0)]
    progress = _units.commit_groups(
        table,
        [_batch(plan, list(index), dangling=n == 0) for n, index in enumerate(indexes)],
        replan=replan,
        commit=lambda n, batch, so_far: _commit(table, batch, run),
        partial=partial,
    )
    return run_metrics(
        PositionDeleteMetrics,
        progress.done,
        started,
        failed=progress.failed,
        stopped=progress.stopped,
        positions_before=plan.positions_before,
    )


class _Targets:
    """Where the new delete files of one commit go: the partition's data directory, unique names."""

    def __init__(self, table: PyIcebergTable) -> None:
        props = table.metadata.properties
        self._size = P.int_property(
            props, P.DELETE_TARGET_FILE_SIZE_BYTES, P.DELETE_TARGET_FILE_SIZE_BYTES_DEFAULT
        )
        self._compression = props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT)
        self._table = table
        self._commit_id = uuid.uuid4().hex[:12]
        self._n = 0

    def output(self, pairs: list[_Pair]) -> _Output:
        first = pairs[0][0]
        target = DeleteFileTarget(
            directory=_units.partition_directory(self._table, first.spec_id, first.partition),
            prefix=f"{self._n:05d}-{self._commit_id}-compacted",
            spec_id=first.spec_id,
            partition=first.partition,
            target_file_size=self._size,
            compression=self._compression,
            deletion_vectors=self._table.metadata.format_version >= 3,
        )
        self._n += 1
        return _Output(target, tuple(pairs))
