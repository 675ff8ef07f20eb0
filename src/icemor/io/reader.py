"""Read one scan task: a data file's row groups with position, DV and equality deletes applied.

Positions are counted over the whole file, also for row groups a split or a filter skips, so
deletes always address the right rows. The parts, each a module of its own: what a scan's
worker is given (:mod:`icemor.io.read_options`), a data file planned for a task
(:mod:`icemor.io.read_plan`), one decoded batch to the rows it yields (deletes, filter,
projection: :mod:`icemor.io.read_batch`), the row filter in Arrow (:mod:`icemor.io.read_filter`)
and the equality verdicts (:mod:`icemor.io.read_verdicts`). This module reads tasks with them.

Equality verdicts: once a task has been read with every row probed, the positions its
equality deletes removed are cached (files are immutable, so they never change), in memory
and in a private on-disk store (:mod:`icemor.io.verdicts`). Later reads of that task, in this
process or a new one, apply them as positions and read no key columns; see
:func:`_equality_state`. The on-disk store is a same-user cache, never part of the table: only
reads use it. A read whose rows a write or maintenance commits (``verdict_store=False``,
:func:`files_only`) neither loads nor saves there, and ignores the verdicts this process loaded
from it: it computes from the table's files (or uses verdicts this process computed from them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.schema import Schema

from icemor.io.deletes import deleted_positions, equality_delete_sets, union_sorted
from icemor.io.read_batch import NO_POSITIONS, Deletes, all_deleted, batch_positions, process_batch
from icemor.io.read_filter import MAX_ARROW_PREDICATES, ArrowFilter, arrow_filter
from icemor.io.read_options import ReadOptions, files_only, output_schema
from icemor.io.read_plan import batch_rows, check_present, decoded, plan_file
from icemor.io.read_verdicts import known_verdict, remember_verdict, verdict_key
from icemor.io.verdicts import verdict_store

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO

    from icemor.io.read_plan import FilePlan
    from icemor.io.read_verdicts import Known
    from icemor.spec.files import DataFileRef
    from icemor.spec.tasks import FileScanTask

__all__ = [
    "MAX_ARROW_PREDICATES",
    "ArrowFilter",
    "ReadOptions",
    "arrow_filter",
    "count_task",
    "files_only",
    "output_schema",
    "read_run",
    "read_task",
]

PROBE_BATCH_ROWS = 1 << 17
"""At most this many rows a batch while equality deletes are probed: the probe's temporaries
(several arrays of 8 bytes a row) stay small and are reused. 1 M-row batches (a narrow read
of a bigint key) allocated fresh memory for each of them: decoding and probing 5 files of eq10
in a new process took 0.48-0.60 s of CPU in one thread, 0.33-0.37 s in batches of 128k rows."""


def _equality_state(
    io: FileIO,
    task: FileScanTask,
    opts: ReadOptions,
    positions: npt.NDArray[np.int64],
    known: Known | None = None,
) -> tuple[
    npt.NDArray[np.int64],
    list[tuple[tuple[int, ...], Any]],
    tuple[tuple[Any, ...], tuple[Any, ...] | None] | None,
]:
    """(positions, equality sets to probe, (verdict key, on-disk key or None) to record under, or None).

    A cached verdict turns the task's equality deletes into positions: the read then needs
    no key columns and no probe (a 72-character string key is most of a narrow read's cost).
    ``known``: :func:`known_verdict`'s answer when the caller already has it.
    """
    key = verdict_key(task)
    if key is None:
        return positions, [], None
    verdict, stored_key = known_verdict(io, task, key, stored=opts.verdict_store) if known is None else known
    if verdict is not None:
        return union_sorted(positions, verdict), [], None
    eq_sets = equality_delete_sets(io, task.delete_files, opts.field_types, opts.field_parents)
    return positions, eq_sets, (key, stored_key)


def read_task(io: FileIO, task: FileScanTask, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """Yield the live rows of one task (or all rows with ``_deleted`` when include_deleted)."""
    return _read_task(io, task, opts)


def _read_task(
    io: FileIO, task: FileScanTask, opts: ReadOptions, known: Known | None = None
) -> Iterator[pa.RecordBatch]:
    positions = deleted_positions(io, task.data_file.path, task.delete_files)
    state = _equality_state(io, task, opts, positions, known)
    plan = plan_file(io, task, opts, {fid for ids, _ in state[1] for fid in ids})
    yield from _read_planned(task, opts, state, plan)


_State: TypeAlias = (
    "tuple[npt.NDArray[np.int64], list[tuple[tuple[int, ...], Any]], "
    "tuple[tuple[Any, ...], tuple[Any, ...] | None] | None]"
)
"""What :func:`_equality_state` tells: (positions, equality sets to probe, where to record the verdict)."""


def _read_planned(
    task: FileScanTask, opts: ReadOptions, state: _State, plan: FilePlan
) -> Iterator[pa.RecordBatch]:
    """The rows of a task whose deletes (:func:`_equality_state`) and file are known; closes the file."""
    positions, eq_sets, record = state
    out_schema = opts.arrow_schema
    # the verdict is recorded only when every row of the task was probed
    deletes = Deletes(positions, eq_sets, [] if record is not None else None)
    try:
        for rg in plan.row_groups:
            first = plan.rg_first_row[rg]
            if not opts.include_deleted and all_deleted(
                positions, first, plan.pf.metadata.row_group(rg).num_rows
            ):
                deletes.eq_hits = None
                continue  # every row of this row group is deleted: do not decode it
            rows = opts.batch_size or batch_rows(plan, rg)
            if eq_sets and not opts.batch_size:
                rows = min(rows, PROBE_BATCH_ROWS)
            for batch in decoded(plan, rg, rows, task.data_file.path, threads=opts.decode_threads):
                n = batch.num_rows
                out = process_batch(batch, first, deletes, plan, opts, task.data_file, out_schema)
                first += n
                if out is not None and out.num_rows:
                    yield out
        if (eq_hits := deletes.eq_hits) is not None and record is not None:
            # sorted and unique by construction (np.unique cost 15-25 ms per 100k positions)
            verdict = np.concatenate(eq_hits) if eq_hits else np.zeros(0, dtype=np.int64)
            key, stored_key = record
            remember_verdict(key, verdict)
            if stored_key is not None and (store := verdict_store()) is not None:
                store.save(stored_key, verdict, task.data_file.record_count)
    finally:
        plan.pf.close()


RUN_ROWS = 65_536
"""Rows, and :data:`RUN_BYTES` bytes, of small files' batches :func:`read_run` handles at once."""
RUN_BYTES = 16 << 20


def read_run(io: FileIO, tasks: Sequence[FileScanTask], opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The live rows of several pieces, in order: what :func:`read_task` yields for each in turn.

    For many small files (a streamed table's). A file that needs no equality probe and no
    per-row metadata column is decoded as usual, but its deletes, filter and projection are
    applied once to the joined batches of up to :data:`RUN_ROWS` rows of files of one layout:
    per 100-row file, masking, filtering, projecting and building its batch cost more under
    the GIL than decoding it (issue 41). The rows are exactly those of :func:`read_task`.
    """
    joined = _RunGroup(opts)
    max_rows = min(opts.batch_size or RUN_ROWS, RUN_ROWS)  # (an asked-for batch size stays a bound)
    bulk = not (
        opts.file_column
        or opts.pos_column
        or opts.include_deleted
        or opts.row_id_column
        or opts.last_updated_column
    )
    for task in tasks:
        positions = deleted_positions(io, task.data_file.path, task.delete_files)
        state = _equality_state(io, task, opts, positions)
        eq_sets = state[1]
        plan = plan_file(io, task, opts, {fid for ids, _ in eq_sets for fid in ids})
        if not bulk or eq_sets or plan.missing_fields or plan.lineage_columns or plan.out_columns is not None:
            try:
                yield from joined.flush()
            except BaseException:  # closed early: _read_planned, which closes the file, never ran
                plan.pf.close()
                raise
            yield from _read_planned(task, opts, state, plan)
            continue
        positions = state[0]
        try:
            for rg in plan.row_groups:
                first = plan.rg_first_row[rg]
                if all_deleted(positions, first, plan.pf.metadata.row_group(rg).num_rows):
                    continue
                rows = opts.batch_size or batch_rows(plan, rg)
                for batch in decoded(plan, rg, rows, task.data_file.path, threads=opts.decode_threads):
                    if not joined.takes(plan, batch) or joined.rows + batch.num_rows > max_rows:
                        yield from joined.flush()
                    joined.add(plan, batch, first, positions, task.data_file)
                    first += batch.num_rows
                    if joined.rows >= max_rows or joined.nbytes >= RUN_BYTES:
                        yield from joined.flush()
        finally:
            plan.pf.close()
    yield from joined.flush()


class _RunGroup:
    """Decoded batches of files of one layout (file schema, filter), their deletes still to apply."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.plan: FilePlan | None = None
        self.batches: list[pa.RecordBatch] = []
        self.deleted: list[tuple[int, int, npt.NDArray[np.int64]]] = []
        """(batch index, its first row in the held rows, its deleted positions in the batch)"""
        self.rows = self.nbytes = 0
        self.data_file: DataFileRef | None = None

    def takes(self, plan: FilePlan, batch: pa.RecordBatch) -> bool:
        """Whether ``batch`` of a file planned as ``plan`` can join the batches held."""
        held = self.plan
        return held is None or (
            held.file_project_schema is plan.file_project_schema
            and held.pyarrow_filter is plan.pyarrow_filter
            and held.columns == plan.columns
            and self.batches[0].schema.equals(batch.schema)
        )

    def add(
        self,
        plan: FilePlan,
        batch: pa.RecordBatch,
        first: int,
        positions: npt.NDArray[np.int64],
        data_file: DataFileRef,
    ) -> None:
        """Hold ``batch``, rows ``first``.. of its file, whose deleted positions are ``positions``."""
        if self.plan is None:
            self.plan, self.data_file = plan, data_file
        n = batch.num_rows
        deleted = batch_positions(positions, first, n)
        if len(deleted):
            self.deleted.append((len(self.batches), self.rows, deleted))
        self.batches.append(batch)
        self.rows += n
        self.nbytes += batch.nbytes

    def flush(self) -> Iterator[pa.RecordBatch]:
        """The held rows with their deletes, filter and projection applied; then nothing is held."""
        plan, batches, deleted, data_file = self.plan, self.batches, self.deleted, self.data_file
        if plan is None or data_file is None:
            return
        self.plan, self.batches, self.deleted, self.data_file = None, [], [], None
        self.rows = self.nbytes = 0
        opts, out_schema = self.opts, self.opts.arrow_schema
        if not batches[0].num_columns:  # a count: no filter either (it would read its columns)
            live = sum(b.num_rows for b in batches) - sum(len(p) for _, _, p in deleted)
            if live:
                rows = pa.StructArray.from_buffers(pa.struct([]), live, [None])
                yield pa.RecordBatch.from_struct_array(rows)
            return
        if len(batches) > 1:
            # one chunk per column, unless a column outgrows its offsets: then batch by batch
            chunks = pa.Table.from_batches(batches).combine_chunks().to_batches()
            if len(chunks) == 1:
                positions = np.concatenate([p + at for _, at, p in deleted]) if deleted else NO_POSITIONS
                batches, deleted = chunks, [(0, 0, positions)]
        by_batch = {i: p for i, _, p in deleted}
        for i, batch in enumerate(batches):
            positions = by_batch.get(i, NO_POSITIONS)
            out = process_batch(batch, 0, Deletes(positions), plan, opts, data_file, out_schema)
            if out is not None and out.num_rows:
                yield out


def count_task(io: FileIO, task: FileScanTask, opts: ReadOptions) -> int:
    """Live rows of one task; reads no data when only positions (or a known verdict) and no filter apply.

    Without reading, the count still checks (one stat) that the data file exists with its
    recorded size: Iceberg Java's ``count(*)`` reads files that have deletes, so a missing or
    truncated file fails there, and it must not give a number here either. The same stat
    gives the modification time the verdict store's key needs.
    """
    key = verdict_key(task)
    known: Known | None = None
    if isinstance(opts.row_filter, AlwaysTrue) and task.is_whole_file:
        mtime = check_present(io, task.data_file)
        if key is not None:
            known = known_verdict(io, task, key, stored=opts.verdict_store, stat_data=False, data_mtime=mtime)
        verdict = None if known is None else known[0]
        if key is None or verdict is not None:  # no equality deletes, or their verdict is known
            positions = deleted_positions(io, task.data_file.path, task.delete_files)
            if verdict is not None:
                positions = union_sorted(positions, verdict)
            n = task.data_file.record_count
            return n - int(np.count_nonzero(positions < n))
    # no columns, no metadata columns: every other option (field parents!) stays as the scan's
    narrow = replace(
        opts,
        projected_schema=Schema(),
        file_column=False,
        pos_column=False,
        include_deleted=False,
        row_id_column=False,
        last_updated_column=False,
    )
    return sum(b.num_rows for b in _read_task(io, task, narrow, known))
