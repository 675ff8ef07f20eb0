"""Equality -> position conversion: rewrite equality deletes as position deletes, one commit.

For every live data file that equality deletes apply to, the positions of all its deleted
rows (the read path's own verdict: position deletes, DVs and equality deletes, with the
sequence-number rules, computed from the table's files, never from the local verdict store)
become a position-delete file of its partition; the data file's older file-scoped position
deletes are folded in and removed, and a data file with no live row left is removed instead.
Then every equality-delete file of the snapshot is removed.

The sequence-number trap: the new position deletes get this commit's sequence number, which
is higher than every data file's, so they could apply to any data file; they name positions
of one data file each (file-scoped), and only of rows that were already deleted. Data files
added after an equality delete were never affected by it and are not touched; equality
deletes are removed only when every data file they apply to was converted, which holds
because every live data file with an applicable equality delete is converted in this commit.
A concurrent commit that removes a converted data file (compaction) is a conflict; new
equality deletes committed concurrently are not in this commit's removal set and stay.

The new position deletes carry the largest data sequence number of the delete files whose
positions they hold, not the commit's: they apply to the data files they name as those did,
and they stay what they were for a rewrite that starts from a later snapshot (as Java's
``RewritePositionDeleteFiles`` keeps the rewritten files' numbers).

With partial progress the position deletes are committed per partition group; the equality
deletes go with the last group's commit, once every group committed, validated from the
conversion's start against the removal of any converted data file (see :func:`_commit`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.exceptions import CommitConflictError, CommitFailedError, InvalidArgumentError
from icemor.maintenance._units import raise_if_none_committed, touched_since
from icemor.maintenance.data_files import backoff
from icemor.ops.units import check_writable, delete_units, run_units, write_job
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.ops.units import DeleteUnit
    from icemor.planning.scan_job import ScanJob

__all__ = ["ConversionMetrics", "rewrite_equality_deletes"]


@dataclass(frozen=True)
class ConversionMetrics:
    """What an equality -> position conversion did."""

    data_files_converted: int
    positions_written: int
    position_delete_files_added: int
    equality_delete_files_removed: int
    position_delete_files_removed: int
    data_files_removed: int
    snapshot_id: int | None
    """None when the table had no equality delete (nothing committed); else the last commit's."""
    seconds: float
    commits: int = 0
    failed_commits: tuple[str, ...] = ()
    """With partial progress: why each commit that kept conflicting was given up."""
    stopped_commits: int = 0
    """With partial progress: commits not attempted because ``stop`` asked to end."""


def _sequence_number(unit: DeleteUnit) -> int:
    """The data sequence number of a unit's new position deletes: the largest of the delete files
    whose positions they hold (Java's rule for rewritten deletes). They still apply to each data
    file they name (every one of those deletes did), and the commit does not present deletes
    that existed before as new ones to a rewrite that started after them."""
    return max(d.data_sequence_number for p in unit.files for d in p.delete_files)


def _batches(units: list[DeleteUnit], max_commits: int) -> list[list[DeleteUnit]]:
    """Units by partition, the partitions spread evenly over at most ``max_commits`` commits."""
    by_partition: dict[tuple[int, tuple[Any, ...]], list[DeleteUnit]] = defaultdict(list)
    for u in units:
        by_partition[(u.target.spec_id, u.target.partition)].append(u)
    groups = list(by_partition.values())
    if not groups:
        return [[]]  # no data file left to convert: one commit removes the equality deletes
    per_commit = -(-len(groups) // max_commits)
    return [[u for g in groups[i : i + per_commit] for u in g] for i in range(0, len(groups), per_commit)]


def rewrite_equality_deletes(
    table: PyIcebergTable,
    *,
    run: Runner,
    partial_progress_enabled: bool = False,
    partial_progress_max_commits: int = 10,
    max_group_attempts: int = 3,
    stop: Callable[[], bool] | None = None,
) -> ConversionMetrics:
    """Convert every equality delete of the current snapshot into position deletes.

    Without partial progress, one commit. With it, the data files' new position deletes are
    committed per partition group (at most ``partial_progress_max_commits`` commits, each
    validated on its own and, after a conflict, planned again on the new head up to
    ``max_group_attempts`` times); the equality-delete files are removed by the last commit,
    only when every group committed (otherwise they stay, still exact, for the next run).

    Raises:
        InvalidArgumentError: A v1 or copy-on-write table.
        CommitConflictError: A concurrent commit removed a data file being converted (with
            partial progress: only when no commit succeeded).
    """
    started = time.monotonic()
    if partial_progress_max_commits < 1 or max_group_attempts < 1:
        msg = "partial_progress_max_commits and max_group_attempts must be >= 1"
        raise InvalidArgumentError(msg)
    table = table.refresh()
    check_writable(table)
    # the positions it writes come from the table's files, never the local verdict store
    job = write_job(prepare_scan(table.metadata, table.io, selected_fields=("_pos",)))
    snapshot = job.snapshot
    nothing = ConversionMetrics(0, 0, 0, 0, 0, 0, None, 0.0)
    if snapshot is None:
        return replace(nothing, seconds=time.monotonic() - started)
    equality = {
        d.path for d in live_delete_files(table.io, snapshot) if d.content == FileContent.EQUALITY_DELETES
    }
    if not equality:
        return replace(nothing, seconds=time.monotonic() - started)
    units = _units(table, job)
    batches = _batches(units, partial_progress_max_commits if partial_progress_enabled else 1)
    attempts = max_group_attempts if partial_progress_enabled else 1
    done: list[_Committed] = []
    failed: list[str] = []
    stopped = 0
    for n, batch in enumerate(batches):
        if partial_progress_enabled and stop is not None and stop():
            stopped = len(batches) - n
            break
        last = n == len(batches) - 1
        paths = {p.data_file.path for u in batch for p in u.files}
        batch_job, batch_units = job, batch
        for attempt in range(attempts):
            head = table.refresh().metadata.current_snapshot()
            assert batch_job.snapshot is not None
            start_id = batch_job.snapshot.snapshot_id
            refs = {p.data_file.path: p.data_file for u in batch_units for p in u.files}
            if (
                partial_progress_enabled
                and head is not None
                and head.snapshot_id != start_id
                and (attempt or touched_since(table.metadata, table.io, start_id, refs))
            ):
                # after a conflict, or when a commit since touched the group's files: planned
                # again on the head, with the deletes that apply to them now
                batch_job = write_job(prepare_scan(table.metadata, table.io, selected_fields=("_pos",)))
                batch_units = _units(table, batch_job, only=paths)
                if not batch_units:
                    break
            # the equality deletes go with the last group, once every group is converted
            remove = equality if last and not failed and not stopped else set()
            try:
                done.append(
                    _commit(table, batch_job, batch_units, run, start=snapshot, done=done, equality=remove)
                )
                break
            except (CommitConflictError, CommitFailedError) as e:
                if attempt + 1 == attempts:
                    if not partial_progress_enabled:
                        raise
                    failed.append(str(e))
                    break
                time.sleep(backoff(attempt))
    raise_if_none_committed(failed, done)
    return ConversionMetrics(
        data_files_converted=sum(c.converted for c in done),
        positions_written=sum(c.positions for c in done),
        position_delete_files_added=sum(c.added for c in done),
        equality_delete_files_removed=sum(c.equality_removed for c in done),
        position_delete_files_removed=sum(c.position_removed for c in done),
        data_files_removed=sum(c.data_removed for c in done),
        snapshot_id=done[-1].snapshot_id if done else None,
        seconds=time.monotonic() - started,
        commits=len(done),
        failed_commits=tuple(failed),
        stopped_commits=stopped,
    )


def _units(table: PyIcebergTable, job: ScanJob, *, only: set[str] | None = None) -> list[DeleteUnit]:
    affected = [
        p
        for p in job.planned
        if any(d.content == FileContent.EQUALITY_DELETES for d in p.delete_files)
        and (only is None or p.data_file.path in only)
    ]
    opts = replace(job.options, projected_schema=Schema())
    return delete_units(table, affected, opts, convert=True)


@dataclass(frozen=True)
class _Committed:
    converted: int
    positions: int
    added: int
    equality_removed: int
    position_removed: int
    data_removed: int
    snapshot_id: int
    referenced: frozenset[str]


def _commit(
    table: PyIcebergTable,
    job: ScanJob,
    units: list[DeleteUnit],
    run: Runner,
    *,
    start: Snapshot,
    done: list[_Committed],
    equality: set[str],
) -> _Committed:
    """Convert ``units`` (planned by ``job``) and commit their position deletes, with ``equality``
    removed.

    A group's commit validates from the snapshot it was planned on. Removing the equality
    deletes validates from the conversion's start that no data file converted by any group
    (this one's or an earlier commit's) was removed by another commit: a rewrite of such a file
    that began before its conversion may have carried rows the equality deletes still remove.
    """
    assert job.snapshot is not None
    results = run_units(table, units, run)
    written = [w for r in results for w in r.written]
    removed_data = sum(r.removed_data_files for r in results)
    removed_other = {p for r in results for p in r.removed}
    referenced = frozenset(p for r in results for p in r.referenced)
    sequence_numbers = {
        w.path: _sequence_number(u) for u, r in zip(units, results, strict=True) for w in r.written
    }
    validation = Validation(
        start_snapshot_id=job.snapshot.snapshot_id,
        serializable=False,  # rows do not change: new data cannot conflict
        referenced_data_files=set(referenced),
        removed_data_files=removed_other,
    )
    also = []
    if equality and (done or job.snapshot.snapshot_id != start.snapshot_id):
        # (the groups' own commits remove no converted file: they only add deletes for them)
        converted = set(referenced).union(*(c.referenced for c in done))
        also.append(Validation(start.snapshot_id, serializable=False, referenced_data_files=converted))
    delta = RowDelta(
        table,
        validation,
        extra_validations=also,
        added_files=written,
        removed_paths=removed_other | equality,
        optional_removals=equality,  # one another conversion removed first is no conflict
        operation=Operation.REPLACE,
        data_sequence_numbers=sequence_numbers,
    )
    committed = delta.commit()
    return _Committed(
        converted=len(referenced) + removed_data,
        positions=sum(w.record_count for w in written),
        added=len(written),
        equality_removed=len(equality),
        position_removed=len(removed_other) - removed_data,
        data_removed=removed_data,
        snapshot_id=committed.snapshot_id,
        referenced=referenced,
    )
