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
from dataclasses import dataclass, field, replace
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
from icemor.spec.dv import dv_removal_key
from icemor.spec.files import FileContent
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata

    from icemor.io.data_writer import DataFileTarget
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


@dataclass
class CarryOver:
    """The carry-over of one rewrite commit (:attr:`icemor.commit.row_delta.RowDelta.carry`)."""

    io: FileIO
    start: TableMetadata
    """The metadata the rewrite planned on."""
    units: Sequence[CarryUnit]
    _survivors: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    _calls: int = 0

    @property
    def _rewritten(self) -> set[str]:
        return {p.data_file.path for u in self.units for p in u.files}

    def __call__(self, head: TableMetadata) -> CarriedDeletes:
        """The concurrent position deletes of the rewritten files at ``head``, as new delete files.

        Raises:
            CommitConflictError: A file whose rows were repartitioned has new position deletes.
            WriteFailedError: A delete file could not be written (what this call wrote is removed).
        """
        snapshot = head.current_snapshot()
        through = (snapshot.sequence_number or 0) if snapshot is not None else 0
        at_head = {
            p.data_file.path: p.delete_files
            for p in prepare_scan(head, self.io).planned
            if p.data_file.path in self._rewritten
        }
        carried: set[str] = set()
        removals: set[str] = set()
        pending: list[tuple[CarryUnit, list[tuple[str, npt.NDArray[np.int64]]]]] = []
        for unit in self.units:
            rows: list[npt.NDArray[np.int64]] = []
            for i, old in enumerate(unit.files):
                path = old.data_file.path
                refs = [d for d in at_head.get(path, ()) if d.content == FileContent.POSITION_DELETES]
                started = {_key(d) for d in old.delete_files}
                new = [d for d in refs if _key(d) not in started]
                if not new:
                    carried.add(path)  # nothing new at this head (or the file is gone: a conflict anyway)
                    continue
                if unit.target is None:  # (a unit that wrote no row has no runs: nothing to map)
                    msg = (
                        f"data file {path} got position deletes during the rewrite and its rows were "
                        "repartitioned (an older partition spec): they cannot be carried over"
                    )
                    raise CommitConflictError(msg)
                rows.append(self._output_rows(unit, i, deleted_positions(self.io, path, refs)))
                carried.add(path)
                removals.update(_key(d) for d in new if d.referenced_data_file == path)
            if rows:
                out = np.unique(np.concatenate(rows))
                pending.append((unit, file_positions(list(unit.written), out)))
        self._calls += 1
        return CarriedDeletes(
            files=tuple(self._write(pending)),
            data_files=frozenset(carried),
            through=through,
            removals=frozenset(removals),
        )

    def _output_rows(
        self, unit: CarryUnit, index: int, deleted: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The rows of the unit's output (over all its new files) that ``deleted`` positions of
        old file ``index`` became; positions already deleted at the start drop out."""
        survivors = self._survivors_of(unit.files[index])
        at = np.searchsorted(survivors, deleted)
        inside = at < len(survivors)
        hit = np.zeros(len(deleted), dtype=bool)
        hit[inside] = survivors[at[inside]] == deleted[inside]
        ranks = at[hit]  # index of each deleted row among the file's written rows
        lengths = np.array([n for _, n in unit.runs], dtype=np.int64)
        output_start = np.cumsum(lengths) - lengths
        mine = np.array([f == index for f, _ in unit.runs], dtype=bool)
        mine_lengths = lengths[mine]
        within = np.cumsum(mine_lengths) - mine_lengths  # where each of its runs starts in the file
        wrote = int(mine_lengths.sum())
        if wrote != len(survivors):  # the map does not hold: never guess
            path = unit.files[index].data_file.path
            msg = (
                f"cannot carry deletes of {path}: the rewrite wrote {wrote} of its rows, not {len(survivors)}"
            )
            raise CommitConflictError(msg)
        run = np.searchsorted(within, ranks, side="right") - 1
        rows: npt.NDArray[np.int64] = (output_start[mine][run] + ranks - within[run]).astype(np.int64)
        return rows

    def _survivors_of(self, planned: PlannedFile) -> npt.NDArray[np.int64]:
        """The file's positions live at the start, read with the deletes the rewrite applied."""
        path = planned.data_file.path
        found = self._survivors.get(path)
        if found is None:
            options = files_only(
                write_job(prepare_scan(self.start, self.io, selected_fields=("_pos",))).options
            )
            task = FileScanTask(
                planned.data_file, planned.delete_files, 0, planned.data_file.file_size_in_bytes
            )
            parts = [b.column("_pos").to_numpy().astype(np.int64) for b in read_task(self.io, task, options)]
            found = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            self._survivors[path] = found
        return found

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


def _key(d: DeleteFileRef) -> str:
    """How a commit names a delete file to remove (a DV by its blob: its Puffin file holds others)."""
    if d.is_deletion_vector and d.content_offset is not None:
        return dv_removal_key(d.path, d.content_offset)
    return d.path


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
