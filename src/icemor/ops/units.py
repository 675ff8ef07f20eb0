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

Every read here is a write's: it computes from the table's files, never from the persisted
equality verdict store (:func:`icemor.io.reader.files_only`, forced on every unit and every
read of this module, whoever built its options; :func:`write_job` for the scans of writes).
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
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.typedef import Record

from icemor.commit.data_file_struct import from_data_file
from icemor.commit.validation import Validation
from icemor.engines.local import read_batches
from icemor.exceptions import IcemorError, InvalidArgumentError, UnsupportedFeatureError
from icemor.io.data_writer import TableDataWriter, with_row_id
from icemor.io.deletes import deleted_positions, remember_written, sorted_unique, union_sorted
from icemor.io.puffin import write_deletion_vectors
from icemor.io.reader import count_task, files_only, read_task
from icemor.io.writers import DeleteFileTarget, remove_written, write_position_deletes
from icemor.planning.planner import plan_files
from icemor.spec import properties as P
from icemor.spec.dv import delete_file_removal_key
from icemor.spec.files import DeleteFileRef, FileContent
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.io.reader import ReadOptions
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.files import DataFileRef, WrittenFile
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "CHANGE_NEW",
    "CHANGE_OLD",
    "ChangeResult",
    "ChangeWrite",
    "DeleteUnit",
    "Positions",
    "UnitResult",
    "check_writable",
    "dead_positions",
    "delete_matches",
    "delete_unit",
    "delete_units",
    "deleted_concurrently",
    "isolation_level",
    "row_validation",
    "run_units",
    "write_change_task",
    "write_job",
]


def write_job(job: ScanJob) -> ScanJob:
    """``job`` as a write or maintenance scans: its rows computed from the table's files only,
    never from the persisted verdict store (the choice travels in its options, to executors too)."""
    return job if not job.options.verdict_store else replace(job, options=files_only(job.options))


@dataclass(frozen=True)
class DeleteUnit:
    """Data files of one partition and where their delete files go: one unit of work."""

    files: tuple[PlannedFile, ...]
    options: ReadOptions
    """How its files are read (:func:`delete_unit` reads them from the files only, whatever this says)."""
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
    marked = replace(
        opts, include_deleted=True, pos_column=True, row_filter=AlwaysTrue(), verdict_store=False
    )
    parts = []
    for b in read_task(io, task, marked):
        pos = b.column(b.schema.get_field_index("_pos")).to_numpy()
        gone = b.column(b.schema.get_field_index("_deleted")).to_numpy(zero_copy_only=False)
        parts.append(pos[gone])
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)


def dead_positions(io: FileIO, task: FileScanTask, opts: ReadOptions) -> npt.NDArray[np.int64]:
    """Sorted positions of the rows every applicable delete (position, DV, equality) removes
    from ``task``'s data file: the read path's own verdict, computed from the table's files
    (cached in the process like a scan's, never taken from the persisted store)."""
    return _deleted_positions(io, task, opts)


def _file_scoped(planned: PlannedFile) -> list[Any]:
    """The position delete files (not DVs) that reference this data file alone."""
    return [
        d
        for d in planned.delete_files
        if d.content == FileContent.POSITION_DELETES
        and not d.is_deletion_vector
        and d.referenced_data_file == planned.data_file.path
    ]


def _dvs_of(planned: PlannedFile) -> list[DeleteFileRef]:
    """The deletion vectors of this data file (at most one, by the spec; every one is merged)."""
    return [
        d
        for d in planned.delete_files
        if d.is_deletion_vector and d.referenced_data_file == planned.data_file.path
    ]


def delete_unit(io: FileIO, unit: DeleteUnit) -> UnitResult:
    """Find the matching live rows of each data file of ``unit`` and write their position deletes.

    On a v3 table (``unit.target.deletion_vectors``) each data file gets one deletion vector
    holding every position deleted so far: the new ones, its previous DV and its position
    delete files (spec: at most one DV per data file, and a new DV must include the deletes of
    older position delete files). The previous DV and the file-scoped position delete files are
    removed in the same commit; partition-scoped ones may serve other data files and stay.
    """
    dvs = unit.target.deletion_vectors
    if unit.options.verdict_store:  # delete_units gives files-only options; a unit built otherwise too
        unit = replace(unit, options=files_only(unit.options))
    everything = replace(unit.options, row_filter=AlwaysTrue())
    pending: list[tuple[str, npt.NDArray[np.int64]]] = []
    referenced: list[str] = []
    removed: list[str] = []
    removed_data = 0
    deleted = 0
    for i, planned in enumerate(unit.files):
        f = planned.data_file
        task = FileScanTask(f, planned.delete_files, 0, f.file_size_in_bytes)
        scoped = [delete_file_removal_key(d) for d in (*_file_scoped(planned), *_dvs_of(planned))]
        if unit.convert:
            gone = _deleted_positions(io, task, unit.options)
            if len(gone) == f.record_count:
                removed.append(f.path)  # nothing of it is live: drop it rather than list every row
                removed.extend(scoped)
                removed_data += 1
            elif len(gone):
                deleted += len(gone)
                referenced.append(f.path)
                removed.extend(scoped)  # their positions are part of ``gone``
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
            removed.extend(scoped)
            removed_data += 1
            continue
        referenced.append(f.path)
        if dvs:
            # the DV replaces every earlier position delete of the file: merge them all
            older_refs = [d for d in planned.delete_files if d.content == FileContent.POSITION_DELETES]
            older = deleted_positions(io, f.path, older_refs) if older_refs else np.zeros(0, np.int64)
            matched = union_sorted(sorted_unique(matched), older)
            removed.extend(scoped)
        elif unit.merge_file_scoped and scoped:
            older = deleted_positions(io, f.path, _file_scoped(planned))
            matched = union_sorted(sorted_unique(matched), older)
            removed.extend(scoped)
        else:
            matched = sorted_unique(matched)
        pending.append((f.path, matched))
    if not pending:
        written: list[WrittenFile] = []
    elif dvs:
        written = write_deletion_vectors(io, unit.target, pending)
    else:
        written = write_position_deletes(io, unit.target, pending)
    remember_written(written, pending)
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
    """Refuse tables icemor cannot write merge-on-read deletes to (v1, above v3, copy-on-write).

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
    if metadata.format_version > 3:
        version = metadata.format_version
        msg = f"writing format-version {version} tables is not supported (icemor writes up to 3)"
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


def isolation_level(table: PyIcebergTable, isolation_property: str) -> str:
    """The operation's isolation level, ``serializable`` (default) or ``snapshot``.

    Raises:
        InvalidArgumentError: Another value.
    """
    return P.choice(
        table.metadata.properties,
        isolation_property,
        P.ISOLATION_LEVEL_DEFAULT,
        ("serializable", "snapshot"),
    )


def row_validation(
    job: ScanJob,
    isolation: str,
    *,
    referenced: set[str],
    removed: set[str],
    no_new_deletes_for: set[str] | None = None,
    data_files: Mapping[str, DataFileRef] | None = None,
) -> Validation:
    """What the commit of a row-level write (DELETE, UPDATE, MERGE, overwrite) checks, as Iceberg
    Java validates its row-level operations: from ``job``'s snapshot, against its row filter.

    Args:
        job: The scan that found the rows.
        isolation: :func:`isolation_level`.
        referenced: Data files the new position deletes name.
        removed: Data files removed (every live row deleted).
        no_new_deletes_for: Data files whose rows live on in new data files.
        data_files: What the scan knew of those data files, by path.
    """
    return Validation(
        start_snapshot_id=job.snapshot.snapshot_id if job.snapshot is not None else None,
        conflict_filter=job.options.row_filter,
        serializable=isolation == "serializable",
        referenced_data_files=referenced,
        removed_data_files=removed,
        no_new_deletes_for=no_new_deletes_for or set(),
        data_files=data_files or {},
    )


def delete_units(
    table: PyIcebergTable,
    planned: Sequence[PlannedFile],
    opts: ReadOptions,
    *,
    convert: bool = False,
    positions: Mapping[str, npt.NDArray[np.int64]] | None = None,
    dvs_per_partition: bool = False,
) -> list[DeleteUnit]:
    """Units of work: one per data file (``file`` granularity) or per partition, with targets.

    ``positions``: the positions to delete per data file path, when the caller found them.
    ``dvs_per_partition``: on v3, one unit per partition whatever the granularity (a DV is one
    data file's either way): one Puffin file per partition instead of one per data file, for an
    operation that touches many files a little (a CDC batch).
    """
    metadata = table.metadata
    opts = files_only(opts)
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
        per_file = granularity == "file" and not (dvs_per_partition and metadata.format_version >= 3)
        members = [[p] for p in files] if per_file else [files]
        for part in members:
            target = DeleteFileTarget(
                directory=directory,
                prefix=f"{len(units):05d}-{commit_id}",
                spec_id=spec_id,
                partition=partition,
                target_file_size=target_size,
                compression=compression,
                deletion_vectors=metadata.format_version >= 3,
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
        pos = np.asarray(positions.to_numpy(zero_copy_only=False) if isinstance(positions, pa.Array)
                         else positions.to_numpy(), dtype=np.int64)  # fmt: skip
        for path, rows in rows_by_file(files):
            self._parts[path].append(pos[rows])
        self.rows += len(pos)

    def finish(self, *, unique: str | None = None) -> dict[str, npt.NDArray[np.int64]]:
        """Sorted positions per file. ``unique``: the error if a position comes twice."""
        out: dict[str, npt.NDArray[np.int64]] = {}
        for path, parts in self._parts.items():
            every = np.concatenate(parts)
            pos = sorted_unique(every)
            if unique is not None and len(pos) != len(every):
                raise InvalidArgumentError(unique)
            out[path] = pos
        return out


def delete_matches(table: PyIcebergTable, job: ScanJob, opts: ReadOptions, run: Runner) -> list[UnitResult]:
    """Write the deletes of the live rows ``job`` matches (read with ``opts``) by DELETE's units
    (:func:`run_units`); nothing is committed.

    A SQL condition (``job.residual``): the local scan (DuckDB) finds the positions first and
    only their data files get units; a pyiceberg filter: each live file's unit finds its own.
    """
    if job.residual is None:
        units = delete_units(table, job.live_files(), opts)
    else:
        found = _sql_positions(job)
        planned = [p for p in job.live_files() if p.data_file.path in found]
        units = delete_units(table, planned, opts, positions=found)
    return run_units(table, units, run)


def _sql_positions(job: ScanJob) -> dict[str, npt.NDArray[np.int64]]:
    """Sorted positions per data file of the live rows matching the job's SQL condition (local)."""
    positions = Positions()
    for batch in read_batches(job):
        positions.add(batch.column("_file"), batch.column("_pos"))
    return positions.finish()


def rows_by_file(files: pa.Array | pa.ChunkedArray) -> list[tuple[str, npt.NDArray[np.intp]]]:
    """Each distinct path of ``files`` (no nulls) with the indices of its rows, in row order."""
    encoded = pc.dictionary_encode(files)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1))
    return [
        (path, order[bounds[i] : bounds[i + 1]])
        for i, path in enumerate(encoded.dictionary.to_pylist())
        if bounds[i + 1] > bounds[i]
    ]


def _written_positions(io: FileIO, data_path: str, written: Sequence[WrittenFile]) -> npt.NDArray[np.int64]:
    """The positions of ``data_path`` in the position-delete files this operation wrote."""
    refs = [
        DeleteFileRef(
            content=w.content,
            path=w.path,
            file_format=w.file_format,
            record_count=w.record_count,
            file_size_in_bytes=w.file_size_in_bytes,
            spec_id=w.spec_id,
            partition=w.partition,
            data_sequence_number=0,
            referenced_data_file=w.referenced_data_file,
            content_offset=w.content_offset,
            content_size_in_bytes=w.content_size_in_bytes,
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


# --- row changes written by executor tasks (the Spark engine's UPDATE, MERGE, SQL DELETE) ---

CHANGE_OLD = "__icemor_old"
"""Optional boolean column of a change: the old row (``_file``, ``_pos``) is deleted (default:
whenever ``_file`` is set)."""
CHANGE_NEW = "__icemor_new"
"""Optional boolean column of a change: its table columns are a new row to write (default: when
the change has the table's columns)."""


@dataclass(frozen=True)
class ChangeWrite:
    """What every task of a row-change write needs; pickled once per task, never per row."""

    units: Mapping[str, DeleteUnit]
    """The delete-unit template (``positions`` unset) of each live data file of the scan, by path."""
    metadata: TableMetadata
    """The table's metadata: new rows are written as data files of its current spec."""
    unique: str | None = None
    """The error if a target row comes twice (MERGE); None: a repeated position is one delete."""


@dataclass(frozen=True)
class ChangeResult:
    """What one task wrote: file metadata and counts only."""

    units: tuple[UnitResult, ...]
    data: tuple[WrittenFile, ...]
    deleted: int
    """Old rows deleted without a new row."""
    updated: int
    """Old rows deleted and written anew."""
    inserted: int
    """New rows without an old one."""


class _ChangeTask:
    """The state of one task: the open data file's positions, pending units, buffered new rows."""

    def __init__(self, io: FileIO, change: ChangeWrite, attempt: str) -> None:
        self.io, self.change, self.attempt = io, change, attempt
        schema = change.metadata.schema()
        self.arrow_schema = schema_to_pyarrow(schema, include_field_ids=False)
        self.required = [f.name for f in schema.fields if f.required]
        self.results: list[UnitResult] = []
        self.data: list[WrittenFile] = []
        self.counts = {"removed": 0, "updated": 0, "inserted": 0}
        self.open: dict[str, tuple[list[npt.NDArray[np.int64]], list[npt.NDArray[np.int64]]]] = {}
        """Data file -> (every matched position, the positions to delete), until the file is complete."""
        self.grouped: dict[str, list[tuple[PlannedFile, npt.NDArray[np.int64]]]] = defaultdict(list)
        """Partition-granularity units (by target prefix): their complete files, written at the end."""
        self.writer: TableDataWriter | None = None
        """New rows: one rolling file per partition across the task's batches."""

    def add(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        old_file = batch.column(names.index("_file"))
        located = pc.is_valid(old_file)
        has_row = all(n in names for n in self.arrow_schema.names)
        new = batch.column(names.index(CHANGE_NEW)) if CHANGE_NEW in names else pa.scalar(has_row)
        new = pc.fill_null(pc.and_(pa.array(np.ones(batch.num_rows, bool)), new), False)
        old = batch.column(names.index(CHANGE_OLD)) if CHANGE_OLD in names else located
        old = pc.fill_null(pc.and_(old, located), False)
        n_new = pc.sum(new).as_py() or 0
        self.counts["updated"] += pc.sum(pc.and_(old, new)).as_py() or 0
        self.counts["inserted"] += n_new - (pc.sum(pc.and_(new, located)).as_py() or 0)
        self._positions(batch.filter(located), old.filter(located))
        if n_new:
            self._add_rows(batch.filter(new))

    def _positions(self, located: pa.RecordBatch, old: pa.Array) -> None:
        if not located.num_rows:
            return
        files = located.column(located.schema.get_field_index("_file"))
        pos = located.column(located.schema.get_field_index("_pos")).to_numpy(zero_copy_only=False)
        pos = pos.astype(np.int64, copy=False)
        deleting = old.to_numpy(zero_copy_only=False)
        for path, rows in rows_by_file(files):
            matched, deleted = self.open.setdefault(path, ([], []))
            if self.change.unique is not None:
                matched.append(pos[rows])
            deleted.append(pos[rows[deleting[rows]]])
        # rows come sorted by _file: every file but the batch's last one is complete
        last = files[len(files) - 1].as_py()
        for path in [p for p in self.open if p != last]:
            self._close(path)

    def _close(self, path: str) -> None:
        matched, deleted = self.open.pop(path)
        if self.change.unique is not None:
            every = np.concatenate(matched)
            if len(sorted_unique(every)) != len(every):
                raise InvalidArgumentError(self.change.unique)
        positions = sorted_unique(np.concatenate(deleted)) if deleted else np.zeros(0, np.int64)
        # rows, not pairs: without ``unique`` (a MERGE whose only MATCHED clause is an
        # unconditional DELETE) one row may come several times and is deleted once
        self.counts["removed"] += len(positions)
        if not len(positions):
            return
        unit = self.change.units.get(path)
        if unit is None:
            msg = f"a change names data file {path}, which is not live in the scanned snapshot"
            raise IcemorError(msg)
        planned = next(p for p in unit.files if p.data_file.path == path)
        if len(unit.files) == 1:
            self._run(unit, [(planned, positions)])
        else:
            self.grouped[unit.target.prefix].append((planned, positions))

    def _run(self, unit: DeleteUnit, files: Sequence[tuple[PlannedFile, npt.NDArray[np.int64]]]) -> None:
        # the attempt in the names: a retried or speculative attempt never writes another's files
        target = replace(unit.target, prefix=f"{unit.target.prefix}-{self.attempt}")
        mine = replace(
            unit, files=tuple(p for p, _ in files), positions=tuple(pos for _, pos in files), target=target
        )
        self.results.append(delete_unit(self.io, mine))

    def _add_rows(self, rows: pa.RecordBatch) -> None:
        for name in self.required:
            if rows.column(name).null_count:
                msg = f"column {name!r} is required (NOT NULL) but a new value of it is NULL"
                raise InvalidArgumentError(msg)

        # v3: the changes carry the target rows' _row_id, which updated rows keep
        lineage = "_row_id" in rows.schema.names and self.change.metadata.format_version >= 3
        if self.writer is None:
            # a new write uuid per task attempt: no two attempts write the same file name
            self.writer = TableDataWriter(
                self.change.metadata, self.io, write_uuid=uuid.uuid4(), lineage=lineage
            )
        self.writer.write(with_row_id(pa.Table.from_batches([rows]), self.arrow_schema, lineage=lineage))

    def _flush_rows(self) -> None:
        if self.writer is None:
            return

        spec_id = self.change.metadata.default_spec_id
        self.data += [from_data_file(f, spec_id) for f in self.writer.close()]

    def finish(self) -> ChangeResult:
        for path in list(self.open):
            self._close(path)
        units = {u.target.prefix: u for u in self.change.units.values()}
        for prefix, files in self.grouped.items():
            self._run(units[prefix], files)
        self._flush_rows()
        return ChangeResult(
            tuple(self.results),
            tuple(self.data),
            self.counts["removed"] - self.counts["updated"],
            self.counts["updated"],
            self.counts["inserted"],
        )


def write_change_task(
    io: FileIO, batches: Iterable[pa.RecordBatch], change: ChangeWrite, attempt: str
) -> ChangeResult:
    """One executor task of a row-change write: the same per-file delete units as the local path.

    ``batches`` are the task's changes sorted by ``_file, _pos``: ``_file``, ``_pos`` (the old
    row, null for an insert), optionally :data:`CHANGE_OLD` / :data:`CHANGE_NEW`, and the new
    row's table columns. The positions of each data file, once complete, go through
    :func:`delete_unit` (granularity, whole-file removal, merging older file-scoped deletes);
    new rows are written as data files of the table's current spec. ``attempt`` names this
    task attempt uniquely; it is part of every delete file's name.

    Raises:
        InvalidArgumentError: A target row comes twice and ``change.unique`` is set; a NULL new
            value of a required column.
    """
    task = _ChangeTask(io, change, attempt)
    for batch in batches:
        if batch.num_rows:
            task.add(batch)
    return task.finish()
