"""The per-file work of merge-on-read deletes: DELETE, UPDATE, MERGE and equality->position.

Data files are grouped into units (one per data file, ``write.delete.granularity`` = ``file``,
or per partition); each unit finds the positions to delete in its data files and writes their
position-delete file(s) (:func:`delete_unit`), on the local engine's threads or on Spark
executors. Per data file:

- no position to delete: nothing;
- every live row goes: the data file is removed (with the delete files scoped to it alone)
  instead of writing a position for each row (Impala's design);
- otherwise its positions go to a position-delete file of its partition (with ``file``
  granularity merged with the data file's older file-scoped deletes, as Iceberg's Spark writer
  does since 1.8).

:class:`Positions` gathers the positions UPDATE and MERGE (and DELETE with a SQL condition)
find with a query; :func:`deleted_concurrently` corrects a commit's count of deleted rows for
rows a concurrent commit deleted first.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.typedef import Record

from icemor.exceptions import IcemorError, InvalidArgumentError, UnsupportedFeatureError
from icemor.io.deletes import deleted_positions
from icemor.io.reader import count_task, read_task
from icemor.io.writers import DeleteFileTarget, remove_written, write_position_deletes
from icemor.planning.planner import plan_files
from icemor.spec import properties as P
from icemor.spec.files import DeleteFileRef, FileContent
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.io.reader import ReadOptions
    from icemor.spec.files import WrittenFile
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "DeleteUnit",
    "Positions",
    "UnitResult",
    "check_writable",
    "delete_unit",
    "delete_units",
    "deleted_concurrently",
    "run_units",
]


@dataclass(frozen=True)
class DeleteUnit:
    """Data files of one partition and where their delete files go: one unit of work."""

    files: tuple[PlannedFile, ...]
    options: ReadOptions
    target: DeleteFileTarget
    merge_file_scoped: bool
    """``file`` granularity: fold each data file's older file-scoped deletes into the new file."""
    convert: bool = False
    """Instead of matching rows, write every row already deleted (by any delete kind) as a
    position: the equality->position conversion of maintenance."""
    positions: tuple[npt.NDArray[np.int64], ...] | None = None
    """The live positions to delete, per file of ``files``, when the caller found them
    (UPDATE and MERGE find them with SQL); None: the rows matching ``options.row_filter``."""


@dataclass(frozen=True)
class UnitResult:
    deleted_rows: int
    written: tuple[WrittenFile, ...]
    referenced: tuple[str, ...]
    """Data files that get new position deletes."""
    removed: tuple[str, ...]
    """Data files whose every live row matched, and delete files that only they used."""
    removed_data_files: int


def _matching_positions(io: FileIO, task: FileScanTask, opts: ReadOptions) -> npt.NDArray[np.int64]:
    parts = [b.column(b.schema.get_field_index("_pos")).to_numpy() for b in read_task(io, task, opts)]
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)


def _deleted_positions(io: FileIO, task: FileScanTask, opts: ReadOptions) -> npt.NDArray[np.int64]:
    """Sorted positions of the rows every applicable delete (position, DV, equality) removes."""
    marked = replace(opts, include_deleted=True, pos_column=True, row_filter=AlwaysTrue())
    parts = []
    for b in read_task(io, task, marked):
        pos = b.column(b.schema.get_field_index("_pos")).to_numpy()
        gone = b.column(b.schema.get_field_index("_deleted")).to_numpy(zero_copy_only=False)
        parts.append(pos[gone])
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)


def _file_scoped(planned: PlannedFile) -> list[Any]:
    """The position delete files (not DVs) that reference this data file alone."""
    return [
        d
        for d in planned.delete_files
        if d.content == FileContent.POSITION_DELETES
        and not d.is_deletion_vector
        and d.referenced_data_file == planned.data_file.path
    ]


def delete_unit(io: FileIO, unit: DeleteUnit) -> UnitResult:
    """Find the matching live rows of each data file of ``unit`` and write their position deletes."""
    everything = replace(unit.options, row_filter=AlwaysTrue())
    pending: list[tuple[str, npt.NDArray[np.int64]]] = []
    referenced: list[str] = []
    removed: list[str] = []
    removed_data = 0
    deleted = 0
    for i, planned in enumerate(unit.files):
        f = planned.data_file
        task = FileScanTask(f, planned.delete_files, 0, f.file_size_in_bytes)
        scoped = _file_scoped(planned)
        if unit.convert:
            gone = _deleted_positions(io, task, unit.options)
            if len(gone) == f.record_count:
                removed.append(f.path)  # nothing of it is live: drop it rather than list every row
                removed.extend(d.path for d in scoped)
                removed_data += 1
            elif len(gone):
                deleted += len(gone)
                referenced.append(f.path)
                removed.extend(d.path for d in scoped)  # their positions are part of ``gone``
                pending.append((f.path, gone))
            continue
        if unit.positions is not None:
            matched = unit.positions[i]
        else:
            matched = _matching_positions(io, task, unit.options)
        if not len(matched):
            continue
        deleted += len(matched)
        if len(matched) == count_task(io, task, everything):
            removed.append(f.path)  # every live row goes: drop the file, not each row
            removed.extend(d.path for d in scoped)
            removed_data += 1
            continue
        referenced.append(f.path)
        if unit.merge_file_scoped and scoped:
            older = deleted_positions(io, f.path, scoped)
            matched = np.union1d(matched, older)
            removed.extend(d.path for d in scoped)
        else:
            matched = np.sort(matched)
        pending.append((f.path, matched))
    written = write_position_deletes(io, unit.target, pending) if pending else []
    return UnitResult(deleted, tuple(written), tuple(referenced), tuple(removed), removed_data)


def run_units(table: PyIcebergTable, units: Sequence[DeleteUnit], run: Runner) -> list[UnitResult]:
    """Run the units; if any fails, remove what every unit wrote (the others' results are lost)."""
    try:
        results: list[UnitResult] = run(delete_unit, units)
    except BaseException:
        for unit in units:
            remove_written(table.io, unit.target)
        raise
    return results


def check_writable(table: PyIcebergTable, *, mode_property: str = P.DELETE_MODE) -> None:
    """Refuse tables icemor cannot write merge-on-read deletes to (v1, v3, copy-on-write).

    ``mode_property``: the operation's mode property (``write.delete.mode``,
    ``write.update.mode``, ``write.merge.mode``), as Iceberg Java consults one per operation.
    """
    metadata = table.metadata
    if metadata.format_version < 2:
        msg = (
            f"{'.'.join(table.name())} is a format-version 1 table: merge-on-read deletes need format "
            "version 2 (upgrade it with the table property format-version=2, e.g. Spark's "
            "ALTER TABLE ... SET TBLPROPERTIES ('format-version'='2'))"
        )
        raise InvalidArgumentError(msg)
    if metadata.format_version > 2:
        msg = "writing format-version 3 tables is not supported yet (pyiceberg 0.12 cannot write v3 metadata)"
        raise UnsupportedFeatureError(msg)
    mode = metadata.properties.get(mode_property, P.MERGE_ON_READ).strip().lower()
    if mode == P.COPY_ON_WRITE:
        msg = (
            f"{'.'.join(table.name())} has {mode_property}=copy-on-write; icemor writes merge-on-read only: "
            f"set {mode_property}=merge-on-read to write with it"
        )
        raise InvalidArgumentError(msg)
    if mode != P.MERGE_ON_READ:
        msg = f"table property {mode_property}={mode!r} must be merge-on-read or copy-on-write"
        raise InvalidArgumentError(msg)


def delete_units(
    table: PyIcebergTable,
    planned: Sequence[PlannedFile],
    opts: ReadOptions,
    *,
    convert: bool = False,
    positions: Mapping[str, npt.NDArray[np.int64]] | None = None,
) -> list[DeleteUnit]:
    """Units of work: one per data file (``file`` granularity) or per partition, with targets.

    ``positions``: the positions to delete per data file path, when the caller found them.
    """
    metadata = table.metadata
    props = metadata.properties
    granularity = P.choice(props, P.DELETE_GRANULARITY, P.DELETE_GRANULARITY_DEFAULT, ("file", "partition"))
    target_size = P.int_property(
        props, P.DELETE_TARGET_FILE_SIZE_BYTES, P.DELETE_TARGET_FILE_SIZE_BYTES_DEFAULT
    )
    compression = props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT)
    # the data directory as the table's location provider lays it out (write.data.path etc.)
    data_dir = table.location_provider().new_data_location("x").rsplit("/", 1)[0]
    schema = metadata.schema()
    specs = metadata.specs()
    commit_id = uuid.uuid4().hex[:12]
    groups: dict[tuple[int, tuple[Any, ...]], list[PlannedFile]] = defaultdict(list)
    for p in planned:
        groups[(p.data_file.spec_id, p.data_file.partition)].append(p)
    units: list[DeleteUnit] = []
    for (spec_id, partition), files in groups.items():
        spec = specs[spec_id]
        directory = data_dir
        if not spec.is_unpartitioned():
            directory = f"{data_dir}/{spec.partition_to_path(Record(*partition), schema)}"
        members = [[p] for p in files] if granularity == "file" else [files]
        for part in members:
            target = DeleteFileTarget(
                directory=directory,
                prefix=f"{len(units):05d}-{commit_id}",
                spec_id=spec_id,
                partition=partition,
                target_file_size=target_size,
                compression=compression,
            )
            units.append(
                DeleteUnit(
                    tuple(part),
                    opts,
                    target,
                    merge_file_scoped=granularity == "file",
                    convert=convert,
                    positions=None if positions is None else tuple(positions[p.data_file.path] for p in part),
                )
            )
    return units


class Positions:
    """The positions of changed rows, per data file, gathered from query output batches."""

    def __init__(self) -> None:
        self._parts: dict[str, list[npt.NDArray[np.int64]]] = defaultdict(list)
        self.rows = 0

    def add(self, files: pa.Array | pa.ChunkedArray, positions: pa.Array | pa.ChunkedArray) -> None:
        if not len(files):
            return
        encoded = pc.dictionary_encode(files)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        pos = np.asarray(positions.to_numpy(zero_copy_only=False) if isinstance(positions, pa.Array)
                         else positions.to_numpy(), dtype=np.int64)  # fmt: skip
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1))
        for i, path in enumerate(encoded.dictionary.to_pylist()):
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                self._parts[path].append(pos[order[lo:hi]])
        self.rows += len(pos)

    def finish(self, *, unique: str | None = None) -> dict[str, npt.NDArray[np.int64]]:
        """Sorted positions per file. ``unique``: the error if a position comes twice."""
        out: dict[str, npt.NDArray[np.int64]] = {}
        for path, parts in self._parts.items():
            pos = np.sort(np.concatenate(parts))
            if len(pos) > 1 and bool((pos[1:] == pos[:-1]).any()):
                if unique is not None:
                    raise InvalidArgumentError(unique)
                pos = np.unique(pos)
            out[path] = pos
        return out


def _written_positions(io: FileIO, data_path: str, written: Sequence[WrittenFile]) -> npt.NDArray[np.int64]:
    """The positions of ``data_path`` in the position-delete files this operation wrote."""
    refs = [
        DeleteFileRef(
            content=w.content,
            path=w.path,
            file_format="PARQUET",
            record_count=w.record_count,
            file_size_in_bytes=w.file_size_in_bytes,
            spec_id=w.spec_id,
            partition=w.partition,
            data_sequence_number=0,
            referenced_data_file=w.referenced_data_file,
        )
        for w in written
        if w.content == FileContent.POSITION_DELETES
    ]
    return deleted_positions(io, data_path, refs)


def deleted_concurrently(
    table: PyIcebergTable,
    start: Snapshot,
    committed: Snapshot,
    touched: Sequence[tuple[PlannedFile, Sequence[WrittenFile] | None]],
    opts: ReadOptions,
) -> int:
    """Rows this operation counted as deleted that a concurrent commit had deleted first.

    A delete's metrics count the rows live in the snapshot its commit applies to (the new
    snapshot's parent), not in the one it scanned: a concurrent DELETE of some of the same rows
    (no conflict, with either isolation level) makes the difference. Only when other commits
    came in between is anything read: for each touched data file, the delete files that apply
    to it at the parent but did not at the scan.

    Args:
        table: The table, refreshed after the commit.
        start: The snapshot the operation scanned.
        committed: The snapshot it committed.
        touched: Each data file as planned at the scan, with the position-delete files this
            operation wrote for it (None: it removed the file, every live row of it).
        opts: The scan's read options.

    The commit has happened: a failure here (reading a file) gives 0, the scan's count.
    """
    parent_id = committed.parent_snapshot_id
    parent = table.metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    if parent is None or parent_id == start.snapshot_id or not touched:
        return 0
    try:
        return _deleted_concurrently(table, parent, touched, opts)
    except (IcemorError, OSError):
        return 0


def _deleted_concurrently(
    table: PyIcebergTable,
    parent: Snapshot,
    touched: Sequence[tuple[PlannedFile, Sequence[WrittenFile] | None]],
    opts: ReadOptions,
) -> int:
    io = table.io
    now = {
        p.data_file.path: p
        for p in plan_files(
            table.metadata,
            io,
            parent,
            schema=opts.schema,
            row_filter=opts.row_filter,
            case_sensitive=opts.case_sensitive,
        )
    }
    counted = 0
    for planned, ours in touched:
        f = planned.data_file
        current = now.get(f.path)
        if current is None:
            continue  # removed concurrently: the commit's validation would have refused
        known = {(d.path, d.content_offset) for d in planned.delete_files}
        new = [d for d in current.delete_files if (d.path, d.content_offset) not in known]
        if not new:
            continue
        before = (
            _deleted_positions(io, FileScanTask(f, planned.delete_files, 0, f.file_size_in_bytes), opts)
            if planned.delete_files
            else np.zeros(0, np.int64)
        )
        # a concurrent writer may fold older deletes into its new file: only new positions count
        gone = np.setdiff1d(
            _deleted_positions(io, FileScanTask(f, tuple(new), 0, f.file_size_in_bytes), opts), before
        )
        if ours is None:
            counted += len(gone)
        else:
            counted += len(np.intersect1d(gone, _written_positions(io, f.path, ours)))
    return counted
