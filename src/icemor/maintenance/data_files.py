"""Major compaction: rewrite data files with every delete applied, and bin-pack small ones.

The file selection is Iceberg Java's (``BinPackRewriteFilePlanner``, 1.10), with its option
names and defaults:

- a data file is a candidate when its deleted fraction reaches ``delete-ratio-threshold``
  (0.3), when ``delete-file-threshold`` or more delete files apply to it (default: never), or
  when its size is outside [75 %, 180 %] of the target (``write.target-file-size-bytes``,
  512 MiB, or ``target_file_size_bytes``);
- candidates are grouped by partition, and a group is rewritten when one of its files has
  too many deletes, or it has at least 5 files (``min-input-files``), or more than one file
  and more bytes than the target.

The deleted fraction counts position deletes exactly (Java counts the record counts of
file-scoped delete files only); equality deletes cannot be counted without reading the data,
so they count through ``delete-file-threshold`` only, as in Java.

Each group is split into units of about the target size; a unit reads its files with every
delete applied (the read path's own verdict, computed from the table's files: never the
local verdict store) and writes the rows with icemor's data writer
(pyiceberg's field-id projection and metrics), in row groups of ``write.parquet.row-group-limit``
rows, rolling to a new file once the bytes written reach the target,
locally or on Spark executors. Files of an older partition spec are written by pyiceberg's
``append`` writer instead, which partitions rows by the current spec but sizes files by
in-memory Arrow bytes (they come out smaller). One ``replace`` commit removes the rewritten
data files and every delete file that then applies to no data file.

Sequence numbers (Java's ``rewrite.use-starting-sequence-number``, default true): the new
data files get the sequence number of the snapshot the rewrite started from. An equality
delete committed concurrently has a higher number, so it still applies to the rewritten rows
(and is not a conflict); deletes that existed at the start (<= that number) were applied
while rewriting and do not apply again. Position deletes and DVs that a concurrent commit
added for a file being rewritten are carried onto the new files and committed with them
(:mod:`icemor.maintenance.carry_over`), where Java's ``validateNoNewDeletesForDataFiles``
fails the rewrite. Still a conflict: with the option off, any new equality delete for a
rewritten file; a new position delete for a file of an older spec (its rows were
repartitioned); the removal, by a concurrent equality -> position conversion, of an equality
delete committed after the start, which the new files relied on
(:func:`icemor.commit.validation.validate_no_removed_equality_deletes`).

Partial progress (Java's ``partial-progress.enabled`` / ``max-commits``): the file groups are
spread over several commits, each validated from the snapshot its groups were planned on. Before
a commit's work starts, the commits made since its plan are checked for anything touching its
files (their own manifests only); if so, or after a conflict (with a backoff), its files are
planned again on the head. A commit that keeps conflicting is given up; the others stand.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import pyarrow as pa
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table.snapshots import Operation

from icemor._compat.pyiceberg import to_file_schema
from icemor.commit.data_file_struct import from_data_file
from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.engines.local import stream
from icemor.exceptions import InvalidArgumentError
from icemor.io.data_writer import DataFileTarget, TableDataWriter, write_data_files_in_order
from icemor.io.deletes import deleted_positions
from icemor.io.reader import files_only, read_task
from icemor.io.writers import remove_written
from icemor.maintenance import _units
from icemor.maintenance._run_metrics import RunMetrics, run_metrics
from icemor.maintenance.carry_over import CarryOver, CarryUnit, carry_target
from icemor.ops.units import write_job
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P
from icemor.spec.files import FileContent
from icemor.spec.metadata_columns import LINEAGE_COLUMNS
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.io.reader import ReadOptions
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.files import WrittenFile
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "DataRewriteMetrics",
    "RewriteUnit",
    "rewrite_data_files",
    "rewrite_data_unit",
    "write_streamed",
]

# Iceberg Java's SizeBasedFileRewritePlanner defaults
MIN_FILE_SIZE_RATIO = 0.75
MAX_FILE_SIZE_RATIO = 1.8
MIN_INPUT_FILES = 5
MAX_FILE_GROUP_SIZE_BYTES = 100 * 1024**3


@dataclass(frozen=True)
class DataRewriteMetrics(RunMetrics):
    """What a major compaction did (``snapshot_id`` None: no file needed rewriting)."""

    data_files_rewritten: int
    data_files_added: int
    delete_files_removed: int
    rows_written: int
    bytes_rewritten: int
    bytes_added: int
    position_deletes_carried: int = 0
    """Positions deleted by commits made during the rewrite, carried onto the new files
    (:mod:`icemor.maintenance.carry_over`)."""


@dataclass(frozen=True)
class RewriteUnit:
    """Data files of one partition whose live rows become new data files; picklable for executors."""

    files: tuple[PlannedFile, ...]
    options: ReadOptions
    target: DataFileTarget | None
    """None: files of an older partition spec, whose rows a ``TableDataWriter`` partitions anew."""
    metadata: TableMetadata
    """The table's metadata, with ``write.target-file-size-bytes`` as the rewrite's target."""
    write_uuid: str


@dataclass(frozen=True)
class _UnitResult:
    written: tuple[WrittenFile, ...]
    rows: int
    runs: tuple[tuple[int, int], ...] = ()
    """``(index of the unit's file, rows)`` in the order the rows were written (the files are
    read concurrently; each one's rows come in position order): the old->new position map that
    carrying concurrent deletes over needs. Empty for repartitioned rows."""


def _repartitioned(io: FileIO, unit: RewriteUnit, batches: Iterator[pa.RecordBatch]) -> list[WrittenFile]:
    """Rows of an older spec, partitioned by the current spec: a rolling file per partition at
    the rewrite's target size (on disk), as Java's rewrite writes them."""
    metadata = unit.metadata
    lineage = unit.options.row_id_column
    writer = TableDataWriter(metadata, io, write_uuid=uuid.UUID(unit.write_uuid), lineage=lineage)
    try:
        for batch in batches:
            writer.write(batch)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    return [from_data_file(f, metadata.default_spec_id) for f in files]


def _row_groups(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The rows in tables of exactly ``rows`` rows (the last one shorter): one row group each."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if batch.num_rows:
            held.append(batch)
            count += batch.num_rows
        while count >= rows:
            table = pa.Table.from_batches(held)
            yield table.slice(0, rows)
            rest = table.slice(rows)
            held, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(held)


def write_streamed(
    io: FileIO,
    target: DataFileTarget,
    batches: Iterator[pa.RecordBatch],
    schema: Schema,
    properties: Mapping[str, str],
    *,
    format_version: int,
) -> list[WrittenFile]:
    """Write rows of ``schema`` as they come, in row groups of ``target.row_group_rows`` rows,
    rolled at the target size; memory holds one row group. On failure nothing is left."""
    # as pyiceberg's writer: Parquet gets Avro-safe column names when the table's are not
    file_schema = sanitize_column_names(schema)
    chunks = (
        to_file_schema(schema, file_schema, g, format_version=format_version)
        for g in _row_groups(batches, target.row_group_rows)
    )
    return write_data_files_in_order(io, target, chunks, file_schema, properties)


def _with_lineage(schema: Schema) -> Schema:
    """``schema`` plus the row-lineage fields, which the rows read with them carry."""
    return Schema(
        *schema.fields,
        *LINEAGE_COLUMNS.values(),
        schema_id=schema.schema_id,
        identifier_field_ids=schema.identifier_field_ids,
    )


def rewrite_data_unit(io: FileIO, unit: RewriteUnit) -> _UnitResult:
    """Read the unit's files with every delete applied and write their rows as new data files.

    The files are read on threads; memory stays at a few batches and one row group. On
    failure, the files written so far are removed.
    """
    opts = files_only(unit.options)  # the rows it writes: from the table's files only
    tasks = list(enumerate(_whole_file_tasks(unit.files)))
    tagged = cast(
        "Generator[tuple[int, pa.RecordBatch]]",
        stream(tasks, lambda t: ((t[0], b) for b in read_task(io, t[1], opts))),
    )
    runs: list[tuple[int, int]] = []

    def recorded() -> Iterator[pa.RecordBatch]:
        for n, batch in tagged:
            if batch.num_rows:
                if runs and runs[-1][0] == n:
                    runs[-1] = (n, runs[-1][1] + batch.num_rows)
                else:
                    runs.append((n, batch.num_rows))
                yield batch

    try:
        if unit.target is None:
            written = _repartitioned(io, unit, recorded())
            runs.clear()  # rows of several partitions: no single order
        else:
            metadata = unit.metadata
            written = write_streamed(
                io,
                unit.target,
                recorded(),
                _with_lineage(opts.schema) if opts.row_id_column else opts.schema,
                metadata.properties,
                format_version=metadata.format_version,
            )
    finally:
        tagged.close()  # stops the readers when writing failed
    return _UnitResult(tuple(written), sum(w.record_count for w in written), tuple(runs))


def _whole_file_tasks(files: Iterable[PlannedFile]) -> list[FileScanTask]:
    return [FileScanTask(p.data_file, p.delete_files, 0, p.data_file.file_size_in_bytes) for p in files]


def _too_high_delete_ratio(io: FileIO, planned: PlannedFile, threshold: float) -> bool:
    """Whether position deletes remove at least ``threshold`` of the file's rows (counted exactly)."""
    f = planned.data_file
    pos = [d for d in planned.delete_files if d.content == FileContent.POSITION_DELETES]
    if not pos or f.record_count <= 0:
        return False
    if sum(d.record_count for d in pos) < threshold * f.record_count:
        return False  # the delete files' rows bound the count from above: no need to decode
    positions = deleted_positions(io, f.path, pos)
    return int((positions < f.record_count).sum()) >= threshold * f.record_count


def _bins(files: list[PlannedFile], target: int) -> list[list[PlannedFile]]:
    """First-fit decreasing by size: units of about ``target`` bytes (a bigger file alone)."""
    bins: list[tuple[int, list[PlannedFile]]] = []
    for p in sorted(files, key=lambda p: -p.data_file.file_size_in_bytes):
        size = p.data_file.file_size_in_bytes
        for i, (used, members) in enumerate(bins):
            if used + size <= target:
                members.append(p)
                bins[i] = (used + size, members)
                break
        else:
            bins.append((size, [p]))
    return [members for _, members in bins]


def _check_options(ratio: float, file_threshold: int | None, target: int | None) -> None:
    if not 0 < ratio <= 1:
        msg = f"delete_ratio_threshold is {ratio} but must be > 0 and <= 1"
        raise InvalidArgumentError(msg)
    if file_threshold is not None and file_threshold < 0:
        msg = f"delete_file_threshold is {file_threshold} but must be >= 0"
        raise InvalidArgumentError(msg)
    if target is not None and target <= 0:
        msg = f"target_file_size_bytes is {target} but must be > 0"
        raise InvalidArgumentError(msg)


@dataclass(frozen=True)
class _Selection:
    """How files are chosen and written: the options of one rewrite."""

    delete_ratio_threshold: float
    file_threshold: int
    target: int
    use_starting_sequence_number: bool


def _job(metadata: TableMetadata, io: FileIO) -> ScanJob:
    # v3: the rewritten rows keep their row lineage, written explicitly (as Java's rewrite)
    lineage = metadata.format_version >= 3
    job = prepare_scan(metadata, io, selected_fields=("*", *LINEAGE_COLUMNS) if lineage else ("*",))
    return write_job(job)  # the rows it rewrites come from the table's files, never the local verdict store


def _groups(io: FileIO, considered: Sequence[PlannedFile], sel: _Selection) -> list[list[PlannedFile]]:
    """The file groups to rewrite, one per partition, as Java's ``BinPackRewriteFilePlanner``."""
    min_size, max_size = sel.target * MIN_FILE_SIZE_RATIO, sel.target * MAX_FILE_SIZE_RATIO
    groups: dict[tuple[int, tuple[Any, ...]], list[PlannedFile]] = defaultdict(list)
    troubled: set[str] = set()
    for p in considered:
        f = p.data_file
        too_many = len(p.delete_files) >= sel.file_threshold  # as Java: 0 selects every file
        if too_many or _too_high_delete_ratio(io, p, sel.delete_ratio_threshold):
            troubled.add(f.path)
        elif not min_size <= f.file_size_in_bytes <= max_size:
            pass  # a size outlier: a candidate for bin-packing only
        else:
            continue
        groups[(f.spec_id, f.partition)].append(p)
    rewrite: list[list[PlannedFile]] = []
    for files in groups.values():
        size = sum(p.data_file.file_size_in_bytes for p in files)
        if (
            any(p.data_file.path in troubled for p in files)
            or (len(files) > 1 and len(files) >= MIN_INPUT_FILES)
            or (len(files) > 1 and size > sel.target)
            or size > MAX_FILE_GROUP_SIZE_BYTES
        ):
            rewrite.append(files)
    return rewrite


def _rewrite_and_commit(
    table: PyIcebergTable, job: ScanJob, groups: Sequence[Sequence[PlannedFile]], sel: _Selection, run: Runner
) -> DataRewriteMetrics:
    """Rewrite ``groups`` (planned by ``job``) and commit them as one ``replace`` snapshot,
    validated from ``job``'s snapshot as Java's ``RewriteFiles``; the metrics of this commit."""
    metadata, io = job.metadata, job.io
    snapshot = job.snapshot
    assert snapshot is not None
    props = metadata.properties
    # the writer of rows of older specs rolls its files at this property: the rewrite's target
    write_metadata = metadata.model_copy(
        update={"properties": {**props, P.WRITE_TARGET_FILE_SIZE_BYTES: str(sel.target)}}
    )
    commit_id = uuid.uuid4().hex[:12]
    row_group_rows = P.int_property(props, P.PARQUET_ROW_GROUP_LIMIT, P.PARQUET_ROW_GROUP_LIMIT_DEFAULT)
    units: list[RewriteUnit] = []
    for files in groups:
        f = files[0].data_file
        for b in _bins(list(files), sel.target):
            data_target = None
            if f.spec_id == metadata.default_spec_id:
                data_target = DataFileTarget(
                    directory=_units.partition_directory(table, f.spec_id, f.partition),
                    prefix=f"{len(units):05d}-{commit_id}-rewrite",
                    spec_id=f.spec_id,
                    partition=f.partition,
                    target_file_size=sel.target,
                    row_group_rows=row_group_rows,
                    compression=props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT),
                )
            units.append(RewriteUnit(tuple(b), job.options, data_target, write_metadata, str(uuid.uuid4())))

    def lost() -> None:
        for u in units:
            if u.target is not None:
                remove_written(io, u.target)

    results = _units.run_guarded(
        io, run, rewrite_data_unit, units, lambda r: [w.path for w in r.written], lost=lost
    )
    written = [w for r in results for w in r.written]
    rewritten = {p.data_file.path for u in units for p in u.files}
    # delete files still applying to a data file that stays; the others apply to nothing after
    in_use = {d.path for p in job.planned if p.data_file.path not in rewritten for d in p.delete_files}
    obsolete = {d.path for d in live_delete_files(io, snapshot)} - in_use
    carry = CarryOver(
        io,
        metadata,
        [
            CarryUnit(u.files, r.written, r.runs, carry_target(metadata, u.target) if u.target else None)
            for u, r in zip(units, results, strict=True)
        ],
        run,
    )
    start_seq = snapshot.sequence_number or 0  # v2: always set
    sequence_numbers = {w.path: start_seq for w in written} if sel.use_starting_sequence_number else {}
    delta = RowDelta(
        table,
        Validation(
            start_snapshot_id=snapshot.snapshot_id,
            serializable=False,  # rows do not change: new data cannot conflict
            removed_data_files=rewritten,
            no_new_deletes_for=rewritten,
            data_files={p.data_file.path: p.data_file for u in units for p in u.files},
            ignore_equality_deletes=sel.use_starting_sequence_number,
        ),
        added_files=written,
        removed_paths=rewritten | obsolete,
        # a dangling delete file another commit removed meanwhile is no conflict
        optional_removals=obsolete,
        operation=Operation.REPLACE,
        data_sequence_numbers=sequence_numbers,
        carry=carry,
    )
    committed = delta.commit()
    carried = [f for f in delta.added_files if f.content != FileContent.DATA]
    return DataRewriteMetrics(
        data_files_rewritten=len(rewritten),
        data_files_added=len(written),
        delete_files_removed=len(obsolete),
        rows_written=sum(r.rows for r in results),
        bytes_rewritten=sum(p.data_file.file_size_in_bytes for u in units for p in u.files),
        bytes_added=sum(w.file_size_in_bytes for w in written),
        position_deletes_carried=sum(f.record_count for f in carried),
        snapshot_id=committed.snapshot_id,
        seconds=0.0,  # the run's, set by run_metrics
        commits=1,
    )


_Batch: TypeAlias = "_units.ScanBatch[Sequence[PlannedFile]]"
"""The file groups of one commit."""


def _batch(job: ScanJob, groups: Sequence[Sequence[PlannedFile]]) -> _Batch:
    return _units.ScanBatch.of(job, groups, (p for g in groups for p in g))


def _by_partition(planned: Iterable[PlannedFile]) -> list[list[PlannedFile]]:
    groups: dict[tuple[int, tuple[Any, ...]], list[PlannedFile]] = defaultdict(list)
    for p in planned:
        groups[(p.data_file.spec_id, p.data_file.partition)].append(p)
    return list(groups.values())


def rewrite_data_files(
    table: PyIcebergTable,
    *,
    run: Runner,
    delete_ratio_threshold: float = 0.3,
    delete_file_threshold: int | None = None,
    target_file_size_bytes: int | None = None,
    where: str | BooleanExpression | None = None,
    use_starting_sequence_number: bool = True,
    partial: _units.PartialProgress | None = None,
) -> DataRewriteMetrics:
    """Rewrite the data files of the current snapshot that need it (see the module doc).

    Without partial progress, one commit (a conflict fails the whole rewrite, as Java's); with it,
    one per group of partitions (:class:`~icemor.maintenance._units.PartialProgress`), a commit
    that conflicts planned again from the new head (its files still live, with the deletes that
    apply now).

    Args:
        table: The pyiceberg table (refreshed here).
        run: Where the per-unit work runs (local threads or Spark executors).
        delete_ratio_threshold: Java's ``delete-ratio-threshold``.
        delete_file_threshold: Java's ``delete-file-threshold`` (None: never).
        target_file_size_bytes: Java's ``target-file-size-bytes`` (None: the table's
            ``write.target-file-size-bytes``).
        where: Consider only data files that may hold rows matching this filter (whole files
            are rewritten).
        use_starting_sequence_number: Java's ``use-starting-sequence-number``.
        partial: Java's ``partial-progress.*`` options (default: one commit).

    Raises:
        InvalidArgumentError: Bad option or filter; a v1 table.
        CommitConflictError: A concurrent commit removed a file being rewritten, or added deletes
            that apply to one (with partial progress: only when no commit succeeded).
    """
    started = time.monotonic()
    _check_options(delete_ratio_threshold, delete_file_threshold, target_file_size_bytes)
    partial = partial or _units.PartialProgress()
    table = table.refresh()
    _units.check_rewritable(table)
    metadata, io = table.metadata, table.io
    sel = _Selection(
        delete_ratio_threshold=delete_ratio_threshold,
        file_threshold=delete_file_threshold if delete_file_threshold is not None else 2**31 - 1,
        target=target_file_size_bytes
        or P.int_property(
            metadata.properties, P.WRITE_TARGET_FILE_SIZE_BYTES, P.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
        use_starting_sequence_number=use_starting_sequence_number,
    )
    job = _job(metadata, io)
    if job.snapshot is None:
        return run_metrics(DataRewriteMetrics, (), started)
    considered = job.planned
    if where is not None:
        chosen = {p.data_file.path for p in prepare_scan(metadata, io, row_filter=where).planned}
        considered = [p for p in job.planned if p.data_file.path in chosen]
    groups = _groups(io, considered, sel)
    if not groups:
        return run_metrics(DataRewriteMetrics, (), started)
    if not partial.enabled:
        return run_metrics(DataRewriteMetrics, [_rewrite_and_commit(table, job, groups, sel, run)], started)

    def replan(n: int, planned: _Batch, head: Snapshot) -> _Batch | None:
        # with the deletes that apply now; None when every file of the group is gone
        paths = planned.data_files.keys()
        again = _job(table.metadata, io)
        groups = _by_partition(p for p in again.planned if p.data_file.path in paths)
        return _batch(again, groups) if groups else None

    progress = _units.commit_groups(
        table,
        [_batch(job, batch) for batch in _units.spread(groups, partial.max_commits)],
        replan=replan,
        commit=lambda n, b, so_far: _rewrite_and_commit(table, b.job, b.items, sel, run),
        partial=partial,
        ignore_equality_deletes=sel.use_starting_sequence_number,
    )
    return run_metrics(
        DataRewriteMetrics, progress.done, started, failed=progress.failed, stopped=progress.stopped
    )
