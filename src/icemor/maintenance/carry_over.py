"""Carry position deletes committed during a data-file rewrite onto its new data files.

A rewrite reads each data file with the deletes of its starting snapshot and writes the live rows
into new files. A DELETE, UPDATE, MERGE or position-mode CDC batch that commits meanwhile adds
position deletes or a DV for an old file; Iceberg Java's ``RewriteFiles`` then fails the rewrite
(``validateNoNewDeletesForDataFiles``), which is why compaction loses to busy writers. Instead,
:class:`CarryOver` maps those positions onto the new files and the rewrite commits them as the new
files' deletes (no peer does this):

- the old->new position map: a unit writes the live rows of its old files, each file's in position
  order, in the order recorded while writing (``runs``: ``(file, rows)``, files read concurrently);
  the old file's live rows at the start (``survivors``: its positions read with the start's
  deletes applied, exactly as the rewrite read them) give each row's index;
- a position deleted at the head of the table that was a survivor is the row at that index of the
  unit's output, i.e. a position of one new file (positions deleted at the start never reach the
  output; every position a concurrent delete adds stays in the head's deletes, DVs included);
- equality deletes need nothing: the new files keep the starting sequence number, so those
  committed meanwhile still apply to them.

Rows of an older partition spec, repartitioned on the way, have no single order: a delete for one
of those files stays a conflict.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from icemor.commit.row_delta import CarriedDeletes
from icemor.exceptions import CommitConflictError
from icemor.io.data_writer import file_positions
from icemor.io.deletes import deleted_positions
from icemor.io.puffin import write_deletion_vectors
from icemor.io.reader import files_only, read_task
from icemor.io.writers import DeleteFileTarget, remove_written, write_position_deletes
from icemor.ops.units import write_job
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P
from icemor.spec.dv import delete_file_removal_key
from icemor.spec.files import FileContent
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata

    from icemor.engines import Runner
    from icemor.io.data_writer import DataFileTarget
    from icemor.io.reader import ReadOptions
    from icemor.spec.files import DeleteFileRef, WrittenFile
    from icemor.spec.tasks import PlannedFile

__all__ = ["CarryOver", "CarryUnit", "carry_target"]


@dataclass(frozen=True)
class CarryUnit:
    """One rewrite unit as written: its old files and, in order, what it wrote from them."""

    files: tuple[PlannedFile, ...]
    """The old files with the deletes applied when they were read (the start's)."""
    written: tuple[WrittenFile, ...]
    runs: tuple[tuple[int, int], ...]
    """``(index in files, rows)`` in written order; empty: the rows cannot be mapped."""
    target: DeleteFileTarget | None
    """Where the unit's carried deletes go (its new files' partition); None: cannot carry."""


@dataclass(frozen=True)
class _FileWork:
    """One old file's part of a carry (picklable for executors): its live positions at the start
    are read with the deletes the rewrite applied; those deleted at the head are ranked among them."""

    planned: PlannedFile
    at_head: tuple[DeleteFileRef, ...]
    options: ReadOptions


def _deleted_ranks(io: FileIO, work: _FileWork) -> tuple[npt.NDArray[np.int64], int]:
    """The indexes, among the file's rows the rewrite wrote, of those deleted at the head; and how
    many rows it had live at the start."""
    f = work.planned.data_file
    task = FileScanTask(f, work.planned.delete_files, 0, f.file_size_in_bytes)
    parts = [b.column("_pos").to_numpy().astype(np.int64) for b in read_task(io, task, work.options)]
    survivors = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    deleted = deleted_positions(io, f.path, work.at_head)
    at = np.searchsorted(survivors, deleted)
    inside = at < len(survivors)
    hit = np.zeros(len(deleted), dtype=bool)
    hit[inside] = survivors[at[inside]] == deleted[inside]
    ranks: npt.NDArray[np.int64] = at[hit].astype(np.int64)
    return ranks, len(survivors)


@dataclass
class CarryOver:
    """The carry-over of one rewrite commit (:attr:`icemor.commit.row_delta.RowDelta.carry`).

    The per-file work (reading old positions) runs where the rewrite's units ran (``run``: local
    threads or Spark executors); only the ranks of the deleted rows come back.
    """

    io: FileIO
    start: TableMetadata
    """The metadata the rewrite planned on."""
    units: Sequence[CarryUnit]
    run: Runner
    _calls: int = 0

    def __call__(self, head: TableMetadata) -> CarriedDeletes:
        """The concurrent position deletes of the rewritten files at ``head``, as new delete files.

        Raises:
            CommitConflictError: A file whose rows were repartitioned has new position deletes.
            WriteFailedError: A delete file could not be written (what this call wrote is removed).
        """
        rewritten = {p.data_file.path for u in self.units for p in u.files}
        at_head = {
            p.data_file.path: p.delete_files
            for p in prepare_scan(head, self.io).planned
            if p.data_file.path in rewritten
        }
        carried: set[str] = set()
        removals: set[str] = set()
        todo: list[tuple[int, int]] = []  # (unit, file) with new position deletes
        work: list[_FileWork] = []
        options = files_only(write_job(prepare_scan(self.start, self.io, selected_fields=("_pos",))).options)
        for u, unit in enumerate(self.units):
            for i, old in enumerate(unit.files):
                path = old.data_file.path
                refs = [d for d in at_head.get(path, ()) if d.content == FileContent.POSITION_DELETES]
                started = {delete_file_removal_key(d) for d in old.delete_files}
                new = [d for d in refs if delete_file_removal_key(d) not in started]
                carried.add(path)  # with nothing new at this head too (a file gone is a conflict anyway)
                if not new:
                    continue
                if unit.target is None:  # (a unit that wrote no row has no runs: nothing to map)
                    msg = (
                        f"data file {path} got position deletes during the rewrite and its rows were "
                        "repartitioned (an older partition spec): they cannot be carried over"
                    )
                    raise CommitConflictError(msg)
                todo.append((u, i))
                work.append(_FileWork(old, tuple(refs), options))
                removals.update(delete_file_removal_key(d) for d in new if d.referenced_data_file == path)
        rows: dict[int, list[npt.NDArray[np.int64]]] = {}
        for (u, i), (ranks, live) in zip(todo, self.run(_deleted_ranks, work) if work else [], strict=True):
            rows.setdefault(u, []).append(_output_rows(self.units[u], i, ranks, live))
        pending = [
            (self.units[u], file_positions(list(self.units[u].written), np.unique(np.concatenate(parts))))
            for u, parts in rows.items()
        ]
        self._calls += 1
        return CarriedDeletes(
            files=tuple(self._write(pending)), data_files=frozenset(carried), removals=frozenset(removals)
        )

    def _write(
        self, pending: Sequence[tuple[CarryUnit, list[tuple[str, npt.NDArray[np.int64]]]]]
    ) -> list[WrittenFile]:
        written: list[WrittenFile] = []
        targets: list[DeleteFileTarget] = []
        try:
            for unit, deletes in pending:
                assert unit.target is not None
                target = replace(unit.target, prefix=f"{unit.target.prefix}-carry{self._calls}")
                targets.append(target)
                write = write_deletion_vectors if target.deletion_vectors else write_position_deletes
                written.extend(write(self.io, target, deletes))
        except BaseException:
            for target in targets:
                with contextlib.suppress(OSError):
                    remove_written(self.io, target)
            raise
        return written


def _output_rows(
    unit: CarryUnit, index: int, ranks: npt.NDArray[np.int64], live: int
) -> npt.NDArray[np.int64]:
    """The rows of the unit's output (over all its new files) that the rows at ``ranks`` among old
    file ``index``'s written rows became."""
    lengths = np.array([n for _, n in unit.runs], dtype=np.int64)
    output_start = np.cumsum(lengths) - lengths
    mine = np.array([f == index for f, _ in unit.runs], dtype=bool)
    mine_lengths = lengths[mine]
    within = np.cumsum(mine_lengths) - mine_lengths  # where each of its runs starts in the file
    wrote = int(mine_lengths.sum())
    if wrote != live:  # the map does not hold: never guess
        path = unit.files[index].data_file.path
        msg = f"cannot carry deletes of {path}: the rewrite wrote {wrote} of its rows, not {live}"
        raise CommitConflictError(msg)
    run = np.searchsorted(within, ranks, side="right") - 1
    rows: npt.NDArray[np.int64] = (output_start[mine][run] + ranks - within[run]).astype(np.int64)
    return rows


def carry_target(metadata: TableMetadata, data: DataFileTarget) -> DeleteFileTarget:
    """Where a unit's carried deletes go: beside its new data files, as the table writes deletes."""
    props = metadata.properties
    return DeleteFileTarget(
        directory=data.directory,
        prefix=data.prefix,
        spec_id=data.spec_id,
        partition=data.partition,
        target_file_size=P.int_property(
            props, P.DELETE_TARGET_FILE_SIZE_BYTES, P.DELETE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
        compression=props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT),
        deletion_vectors=metadata.format_version >= 3,
    )
