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
from typing import TYPE_CHECKING, Any, TypeAlias

from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.maintenance._run_metrics import RunMetrics, run_metrics
from icemor.maintenance._units import PartialProgress, ScanBatch, commit_groups, spread
from icemor.ops.units import check_writable, delete_units, run_units, write_job
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.maintenance._units import GroupCommits
    from icemor.ops.units import DeleteUnit
    from icemor.planning.scan_job import ScanJob

__all__ = ["ConversionMetrics", "rewrite_equality_deletes"]


@dataclass(frozen=True)
class ConversionMetrics(RunMetrics):
    """What an equality -> position conversion did (``snapshot_id`` None: the table had no
    equality delete)."""

    data_files_converted: int
    positions_written: int
    position_delete_files_added: int
    equality_delete_files_removed: int
    position_delete_files_removed: int
    data_files_removed: int


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
    batches = [[u for g in commit for u in g] for commit in spread(list(by_partition.values()), max_commits)]
    return batches or [[]]  # no data file left to convert: one commit removes the equality deletes


def rewrite_equality_deletes(
    table: PyIcebergTable,
    *,
    run: Runner,
    partial: PartialProgress | None = None,
) -> ConversionMetrics:
    """Convert every equality delete of the current snapshot into position deletes.

    Without partial progress, one commit. With it (:class:`PartialProgress`), the data files' new
    position deletes are committed per partition group; the equality-delete files are removed by
    the last commit, only when every group committed (otherwise they stay, still exact, for the
    next run).

    Raises:
        InvalidArgumentError: A v1 or copy-on-write table.
        CommitConflictError: A concurrent commit removed a data file being converted (with
            partial progress: only when no commit succeeded).
    """
    started = time.monotonic()
    partial = partial or PartialProgress()
    table = table.refresh()
    check_writable(table)
    # the positions it writes come from the table's files, never the local verdict store
    job = write_job(prepare_scan(table.metadata, table.io, selected_fields=("_pos",)))
    snapshot = job.snapshot
    if snapshot is None:
        return run_metrics(ConversionMetrics, (), started)
    equality = {
        d.path for d in live_delete_files(table.io, snapshot) if d.content == FileContent.EQUALITY_DELETES
    }
    if not equality:
        return run_metrics(ConversionMetrics, (), started)
    units = _units(table, job)
    if not partial.enabled:
        c = _commit(
            table, _batch(job, _batches(units, 1)[0]), run, start=snapshot, done=[], equality=equality
        )
        return run_metrics(ConversionMetrics, [c], started)

    def replan(n: int, planned: _Batch, head: Snapshot) -> _Batch | None:
        # on the head, with the deletes that apply to them now
        again = write_job(prepare_scan(table.metadata, table.io, selected_fields=("_pos",)))
        batch_units = _units(table, again, only=set(planned.data_files))
        return _batch(again, batch_units) if batch_units else None

    batches = _batches(units, partial.max_commits)

    def commit(n: int, batch: _Batch, so_far: GroupCommits[_Committed]) -> _Committed:
        # the equality deletes go with the last group, once every group is converted
        remove = equality if n == len(batches) - 1 and not so_far.failed else set()
        return _commit(table, batch, run, start=snapshot, done=so_far.done, equality=remove)

    progress = commit_groups(
        table,
        [_batch(job, batch) for batch in batches],
        replan=replan,
        commit=commit,
        partial=partial,
    )
    return run_metrics(
        ConversionMetrics, progress.done, started, failed=progress.failed, stopped=progress.stopped
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
class _Committed(ConversionMetrics):
    """The metrics of one commit, with the data files it converted (positions written for them)."""

    referenced: frozenset[str] = frozenset()


_Batch: TypeAlias = "ScanBatch[DeleteUnit]"
"""The units of one commit."""


def _batch(job: ScanJob, units: Sequence[DeleteUnit]) -> _Batch:
    return ScanBatch.of(job, units, (p for u in units for p in u.files))


def _commit(
    table: PyIcebergTable,
    batch: _Batch,
    run: Runner,
    *,
    start: Snapshot,
    done: list[_Committed],
    equality: set[str],
) -> _Committed:
    """Convert the batch's units and commit their position deletes, with ``equality``
    removed.

    A group's commit validates from the snapshot it was planned on. Removing the equality
    deletes validates from the conversion's start that no data file converted by any group
    (this one's or an earlier commit's) was removed by another commit: a rewrite of such a file
    that began before its conversion may have carried rows the equality deletes still remove.
    """
    units, snapshot_id = batch.items, batch.snapshot_id
    results = run_units(table, units, run)
    written = [w for r in results for w in r.written]
    removed_data = sum(r.removed_data_files for r in results)
    removed_other = {p for r in results for p in r.removed}
    referenced = frozenset(p for r in results for p in r.referenced)
    sequence_numbers = {
        w.path: _sequence_number(u) for u, r in zip(units, results, strict=True) for w in r.written
    }
    validation = Validation(
        start_snapshot_id=snapshot_id,
        serializable=False,  # rows do not change: new data cannot conflict
        referenced_data_files=set(referenced),
        removed_data_files=removed_other,
    )
    also = []
    if equality and (done or snapshot_id != start.snapshot_id):
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
        data_files_converted=len(referenced) + removed_data,
        positions_written=sum(w.record_count for w in written),
        position_delete_files_added=len(written),
        equality_delete_files_removed=len(equality),
        position_delete_files_removed=len(removed_other) - removed_data,
        data_files_removed=removed_data,
        snapshot_id=committed.snapshot_id,
        seconds=0.0,  # the run's, set by run_metrics
        commits=1,
        referenced=referenced,
    )
