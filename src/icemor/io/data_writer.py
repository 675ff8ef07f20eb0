"""icemor's Parquet file writing: the two rolling writers every data and delete file goes through.

Two, because two contracts need them; both write through :class:`ParquetOutput` and describe
their files with :func:`icemor.spec.files.written_file`:

- :func:`write_rolling` writes *ordered* output of one partition: pieces in the order given,
  one file open at a time, files numbered ``{prefix}-00000``, ``-00001``, … without gaps, each
  rolled once a piece brings it to the target size (on disk). A writer of changes must know, for
  each row it wrote, the file and position it went to (a row superseded later in the same batch
  is deleted by position, Flink's ``insertedRowMap``): row ``i`` is in the file whose cumulative
  record count first exceeds ``i`` (:func:`file_positions`). The gap-free names are how
  :func:`icemor.io.writers.remove_written` finds what a lost Spark task wrote without a listing.
  Position deletes (:mod:`icemor.io.writers`), equality deletes
  (:mod:`icemor.io.equality_writer`), CDC's data files and a compaction's rewrite of one
  partition (:func:`write_data_files_in_order`) write through it.
- :class:`TableDataWriter` writes rows whose positions nobody needs (appends, the new rows of
  UPDATE and MERGE, compaction across specs) as Iceberg Java's fanout writer does: it partitions
  them by the table's current spec and keeps one file per partition open across ``write`` calls
  (batches pushed by the caller, not one iterable), named by the table's location provider; it
  sizes row groups to land under the target and closes the largest open file when over its
  memory budget. A streamed append makes one file per partition and target size, not one per
  batch and partition.

Metrics are the table's (``write.metadata.metrics.*``), computed from the Parquet footer by
pyiceberg's statistics collector, as its own writer does.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table.locations import load_location_provider
from pyiceberg.typedef import Record
from pyiceberg.types import UUIDType

from icemor._compat import pyiceberg as compat
from icemor.exceptions import UnsupportedFeatureError, WriteFailedError
from icemor.io.columns import column_by_path
from icemor.io.uuids import is_uuid, uuid_from_strings
from icemor.spec import properties as P
from icemor.spec.files import FileContent, WrittenFile, written_file
from icemor.spec.metadata_columns import LAST_UPDATED_SEQUENCE_NUMBER, ROW_ID
from icemor.spec.v3_types import describe_unwritable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    import numpy.typing as npt
    from pyiceberg.io import InputFile, OutputStream
    from pyiceberg.partitioning import PartitionField
    from pyiceberg.table.metadata import TableMetadata

__all__ = [
    "MEMORY_BUDGET_DEFAULT",
    "MEMORY_BUDGET_PROPERTY",
    "DataFileTarget",
    "FileTarget",
    "ParquetOutput",
    "PartitionTarget",
    "RecordingIO",
    "TableDataWriter",
    "file_positions",
    "parquet_metrics",
    "with_row_id",
    "write_data_files_in_order",
    "write_parquet_tables",
    "write_rolling",
]

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class PartitionTarget:
    """Where the files of one partition go and how large they grow (picklable for executors)."""

    directory: str
    """The partition's data directory (a URI or path, no trailing slash)."""
    prefix: str
    """Unique per unit of work and partition: the files are ``{prefix}-{n:05d}…``, n = 0, 1, …"""
    spec_id: int
    partition: tuple[object, ...]
    target_file_size: int


@dataclass(frozen=True, slots=True)
class DataFileTarget(PartitionTarget):
    """Where and how to write the data files of one partition: ``{prefix}-{n:05d}.parquet``."""

    row_group_rows: int
    compression: str = "zstd"

    def location(self, index: int) -> str:
        return f"{self.directory}/{self.prefix}-{index:05d}.parquet"


def write_rolling(
    io: FileIO,
    location: Callable[[int], str],
    pieces: Iterable[_T],
    *,
    arrow_schema: Callable[[_T], pa.Schema],
    write: Callable[[ParquetOutput, _T], None],
    close: Callable[[ParquetOutput], _R],
    target_file_size: int,
    compression: str,
    **options: Any,
) -> list[_R]:
    """Write ``pieces`` in order to ``location(0)``, ``location(1)``, …, rolling at the target size.

    A file is opened (with the Arrow schema of the piece that opens it) when a piece comes and
    none is open; ``write`` writes the piece to it; once the file holds ``target_file_size``
    bytes on disk it is closed and described by ``close``. On failure the files written so far
    are removed and the error raised.

    Args:
        io: The table's FileIO.
        location: The path of the n-th file.
        pieces: What to write, in order (row groups, or chunks of positions).
        arrow_schema: The file schema (with field ids) of a file that ``piece`` opens.
        write: Writes one piece to the open file.
        close: Closes the file (:meth:`ParquetOutput.close`) and describes it.
        target_file_size: Bytes on disk after which the next file is started.
        compression: The Parquet codec.
        options: More ``pyarrow.parquet.ParquetWriter`` options.

    Raises:
        WriteFailedError: A file could not be written (disk full, permission denied, ...),
            naming it; the files written so far are removed.
    """
    out: list[_R] = []
    # every file begun, recorded before it is created: an interrupt (Ctrl-C, SIGTERM) landing
    # while a file is being opened, before the writer holds it, must still remove it
    started: list[str] = []
    current: ParquetOutput | None = None
    try:
        for piece in pieces:
            if current is None:
                started.append(location(len(out)))
                current = ParquetOutput(io, started[-1], arrow_schema(piece), compression, **options)
            write(current, piece)
            if current.size() >= target_file_size:
                out.append(close(current))
                current = None
        if current is not None:
            out.append(close(current))
            current = None
    except BaseException:
        if current is not None:
            current.abort()
        for path in started:
            with contextlib.suppress(OSError):
                io.delete(path)
        raise
    return out


def parquet_metrics(
    f: ParquetOutput, schema: Schema, metrics_properties: Mapping[str, str]
) -> dict[str, Any]:
    """The metrics of a closed file (pyiceberg's serialized statistics), by the metrics modes of
    ``metrics_properties`` (``write.metadata.metrics.*``).

    Raises:
        UnsupportedFeatureError: A date or timestamp after year 9999, which Iceberg allows but
            pyiceberg's statistics (Python's ``datetime``) cannot hold.
    """
    try:
        return compat.parquet_statistics(f.metadata, schema, metrics_properties)
    except OverflowError as e:
        msg = (
            f"cannot write data file {f.location}: a date or timestamp after 9999-12-31 (or before "
            f"0001-01-01), which icemor's column statistics cannot hold ({e})"
        )
        raise UnsupportedFeatureError(msg) from e


def write_data_files_in_order(
    io: FileIO,
    target: DataFileTarget,
    rows: pa.Table | Iterable[pa.Table],
    schema: Schema,
    properties: Mapping[str, str],
) -> list[WrittenFile]:
    """Write ``rows`` (already in the file's Arrow schema, with field ids) in order, as data files.

    Each row group holds at most ``target.row_group_rows`` rows; the size is checked after each.

    Args:
        io: The table's FileIO.
        target: Directory, name prefix, partition and sizes.
        rows: The rows, in the order their positions are counted; or chunks of them as they
            come (a rewrite streams its input: memory holds one chunk).
        schema: The Iceberg schema of ``rows``.
        properties: Table properties (metrics modes).

    Returns:
        The files in row order; their record counts add up to the rows'.

    Raises:
        WriteFailedError: A file could not be written, naming it; what this call wrote is removed.
    """
    step = max(1, target.row_group_rows)
    chunks = [rows] if isinstance(rows, pa.Table) else rows
    groups = (chunk.slice(start, step) for chunk in chunks for start in range(0, chunk.num_rows, step))

    return write_parquet_tables(
        io, target, groups, content=FileContent.DATA, schema=schema, metrics_properties=properties
    )


class FileTarget(Protocol):
    """Where and how files of one partition are written (:class:`DataFileTarget`,
    :class:`icemor.io.writers.DeleteFileTarget`)."""

    @property
    def spec_id(self) -> int: ...
    @property
    def partition(self) -> tuple[object, ...]: ...
    @property
    def target_file_size(self) -> int: ...
    @property
    def compression(self) -> str: ...
    def location(self, index: int) -> str: ...


def write_parquet_tables(
    io: FileIO,
    target: FileTarget,
    tables: Iterable[pa.Table],
    *,
    content: FileContent,
    schema: Schema,
    metrics_properties: Mapping[str, str],
    equality_ids: tuple[int, ...] = (),
) -> list[WrittenFile]:
    """Write ``tables`` (in the file's Arrow schema, with field ids) in order with :func:`write_rolling`
    to ``target`` as files of ``content``, each described with the metrics ``metrics_properties``
    ask for.

    Data files and equality-delete files are written alike; only what they hold differs.
    """

    def close(f: ParquetOutput) -> WrittenFile:
        f.close()
        return written_file(
            content,
            f.location,
            f.rows,
            f.file_size_in_bytes,
            spec_id=target.spec_id,
            partition=target.partition,
            metrics=parquet_metrics(f, schema, metrics_properties),
            equality_ids=equality_ids,
        )

    return write_rolling(
        io,
        target.location,
        tables,
        arrow_schema=lambda table: table.schema,
        write=ParquetOutput.write,
        close=close,
        target_file_size=target.target_file_size,
        compression=target.compression,
        store_decimal_as_integer=True,
    )


class RecordingIO(FileIO):
    """A FileIO that records the path of every file opened for writing through it.

    For writers that do not say what they wrote when they fail (pyiceberg's snapshot producer,
    whose manifests an append writes through it): :meth:`discard` removes what they began.
    pyiceberg's threads may go on after the caller saw the failure (an interrupt), so once
    discarded no new file can be created through it: a file is either created before the
    removal, and removed, or not at all.
    """

    def __init__(self, io: FileIO) -> None:
        super().__init__(io.properties)
        self.inner = io
        self.paths: list[str] = []
        self._closed = False
        self._lock = threading.Lock()

    def new_input(self, location: str) -> InputFile:
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        with self._lock:
            self.paths.append(location)
        return _RecordedOutput(self, self.inner.new_output(location))

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)

    def discard(self) -> list[str]:
        """Remove every file begun through this FileIO and refuse new ones; return those left."""
        with self._lock:
            self._closed = True
            paths = list(self.paths)
        failed = []
        for path in paths:
            try:
                self.inner.delete(path)
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(path)
        return failed

    def _create(self, output: OutputFile, overwrite: bool) -> OutputStream:
        with self._lock:
            if self._closed:
                msg = f"not writing {output.location}: the write it belongs to failed"
                raise WriteFailedError(msg)
            stream = output.create(overwrite=overwrite)
        if output.location.startswith(("file:", "/")):
            return stream  # removing a local file while it is open leaves nothing when it closes
        return _RemovedIfDiscarded(self, output.location, stream)

    @property
    def discarded(self) -> bool:
        with self._lock:
            return self._closed


class _RemovedIfDiscarded:
    """A stream to object storage, where the object appears only when its upload completes (on
    close): closed after its :class:`RecordingIO` was discarded (a writer thread still running
    when the write failed), the object is removed then, or it would outlive the removal."""

    def __init__(self, owner: RecordingIO, location: str, stream: OutputStream) -> None:
        self._owner, self._location, self._stream = owner, location, stream

    def write(self, data: bytes) -> int:
        return self._stream.write(data)

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            if self._owner.discarded:
                with contextlib.suppress(OSError):
                    self._owner.inner.delete(self._location)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> _RemovedIfDiscarded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RecordedOutput(OutputFile):
    """An output file of a :class:`RecordingIO` (creation goes through it)."""

    def __init__(self, owner: RecordingIO, inner: OutputFile) -> None:
        super().__init__(inner.location)
        self._owner = owner
        self._inner = inner

    def __len__(self) -> int:
        return len(self._inner)

    def exists(self) -> bool:
        return self._inner.exists()

    def to_input_file(self) -> InputFile:
        return self._inner.to_input_file()

    def create(self, overwrite: bool = False) -> OutputStream:
        return self._owner._create(self._inner, overwrite)


def file_positions(
    files: list[WrittenFile], rows: npt.NDArray[np.int64]
) -> list[tuple[str, npt.NDArray[np.int64]]]:
    """Map sorted row numbers of one :func:`write_data_files_in_order` call to ``(file path, positions)``."""
    ends = np.cumsum([f.record_count for f in files], dtype=np.int64)
    which = np.searchsorted(ends, rows, side="right")
    out = []
    for i, f in enumerate(files):
        mine = rows[which == i]
        if len(mine):
            out.append((f.path, mine - (ends[i] - f.record_count)))
    return out


class ParquetOutput:
    """One Parquet file being written; an OSError is raised as :class:`WriteFailedError` naming it."""

    def __init__(
        self, io: FileIO, location: str, arrow_schema: pa.Schema, compression: str, **options: Any
    ) -> None:
        self.location = location
        self.arrow_schema = arrow_schema
        try:
            # a retried task (Spark) rewrites its own names: they are unique to this commit and unit
            self._stream: OutputStream = io.new_output(location).create(overwrite=True)
        except OSError as e:
            raise WriteFailedError.of(location, e) from e
        try:
            self._writer = pq.ParquetWriter(
                self._stream, arrow_schema, compression=compression, write_page_checksum=True, **options
            )
        except BaseException as e:
            with contextlib.suppress(Exception):
                self._stream.close()
            with contextlib.suppress(OSError):
                io.delete(location)  # created, and no caller knows it yet
            if isinstance(e, OSError):
                raise WriteFailedError.of(location, e) from e
            raise
        self.rows = 0
        self.file_size_in_bytes = 0

    def write(self, rows: pa.Table) -> None:
        """Write ``rows`` as one row group."""
        try:
            self._writer.write_table(rows, row_group_size=max(1, rows.num_rows))
        except OSError as e:
            raise WriteFailedError.of(self.location, e) from e
        self.rows += rows.num_rows

    def size(self) -> int:
        return int(self._stream.tell())

    def abort(self) -> None:
        """Close after a failure; errors are ignored (the file is removed next, and a full disk
        fails the footer write again: that must not hide the first error)."""
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(Exception):
            self._stream.close()

    def close(self) -> None:
        """Write the footer and close; then ``file_size_in_bytes`` and :attr:`metadata` are set."""
        try:
            self._writer.close()
            self.file_size_in_bytes = int(self._stream.tell())
            self._stream.close()
        except OSError as e:
            raise WriteFailedError.of(self.location, e) from e

    @property
    def metadata(self) -> pq.FileMetaData:
        """The Parquet footer of the closed file."""
        return self._writer.writer.metadata


# ----------------------------------------------------------------------------------- table writer

MEMORY_BUDGET_PROPERTY = "icemor.write.memory-budget-bytes"
"""Table property: the bytes a :class:`TableDataWriter` may hold for its open files."""
MEMORY_BUDGET_DEFAULT = 512 * 1024 * 1024
"""512 MiB: four of Iceberg's default 128 MiB row groups, or the buffers of hundreds of partitions."""
# what an open file costs besides its buffered rows (writer state; an object store's upload
# buffer): counted against the budget, so that very many open partitions close files too
_OPEN_FILE_BYTES_LOCAL = 256 * 1024
_OPEN_FILE_BYTES_REMOTE = 8 * 1024 * 1024
# files are filled to this share of the target (see TableDataWriter._flush), and closed once
# less than the slack is left rather than given a tiny row group
_TARGET_AIM = 0.95
_TARGET_SLACK = 0.02


@dataclass
class _PartitionFile:
    """The rolling file of one partition: rows buffered for its next row group, and the open file."""

    partition: tuple[Any, ...]
    key: PartitionKey | None
    pending: list[pa.Table]
    pending_rows: int = 0
    pending_bytes: int = 0
    file: ParquetOutput | None = None
    file_arrow_bytes: int = 0
    """Arrow bytes written to the open file: with its size on disk, the compression it shows."""


class TableDataWriter:
    """Data files of a table's current spec: one rolling file per partition kept open across batches,
    each rolled at write.target-file-size-bytes; open-file memory bounded by a budget (closes the
    largest open file when over).

    As Iceberg Java's fanout writer: a partition's rows are buffered up to a row group
    (``write.parquet.row-group-limit`` rows or ``write.parquet.row-group-size-bytes``), appended
    to the partition's open file, and the file is closed once its size on disk reaches the target;
    rows are split between files by the compression the file shows so far, so files stay near
    the target, not over it by a row group. Memory: the buffered rows plus a fixed cost per open
    file stay under ``icemor.write.memory-budget-bytes`` (:data:`MEMORY_BUDGET_DEFAULT`, 512 MiB):
    when over, the largest buffer is written out as a smaller row group, and if the open files
    alone exceed it, the largest open file is closed. Files carry the metrics the table asks
    for (``write.metadata.metrics.*``), as pyiceberg's writer's do.

    Not thread-safe: one caller writes, then closes or aborts.

    Args:
        metadata: The table's metadata (schema, default spec, properties, location).
        io: The table's FileIO.
        write_uuid: Part of every file name (one per write); a new one if not given.
        memory_budget_bytes: Overrides the table property.
        lineage: v3 row lineage: every file also has the ``_row_id`` and
            ``_last_updated_sequence_number`` columns (their reserved field ids), taken from the
            rows' columns of those names, NULL where absent: what Iceberg Java writes for the
            rows of an UPDATE or MERGE (the old row's id, NULL sequence number) and of a
            compaction (both).
    """

    def __init__(
        self,
        metadata: TableMetadata,
        io: FileIO,
        *,
        write_uuid: uuid.UUID | None = None,
        memory_budget_bytes: int | None = None,
        lineage: bool = False,
    ) -> None:
        props = metadata.properties
        self._io = io
        self._schema = metadata.schema()
        if (unwritable := describe_unwritable(self._schema)) is not None:
            raise UnsupportedFeatureError(unwritable)
        if lineage:
            # matched by name to the rows' columns; missing ones are written as NULL
            self._schema = Schema(
                *self._schema.fields,
                ROW_ID,
                LAST_UPDATED_SEQUENCE_NUMBER,
                schema_id=self._schema.schema_id,
                identifier_field_ids=self._schema.identifier_field_ids,
            )
        self._spec = metadata.spec()
        self._format_version = metadata.format_version
        self._metrics_properties = dict(props)
        # as pyiceberg's writer: Parquet gets Avro-safe column names when the table's are not
        self._file_schema = sanitize_column_names(self._schema)
        self._locations = load_location_provider(table_location=metadata.location, table_properties=props)
        self._uuid = write_uuid or uuid.uuid4()
        self._target = max(
            1, P.int_property(props, P.WRITE_TARGET_FILE_SIZE_BYTES, P.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)
        )
        self._row_group_rows = max(
            1, P.int_property(props, P.PARQUET_ROW_GROUP_LIMIT, P.PARQUET_ROW_GROUP_LIMIT_DEFAULT)
        )
        self._row_group_bytes = max(
            1, P.int_property(props, P.PARQUET_ROW_GROUP_SIZE_BYTES, P.PARQUET_ROW_GROUP_SIZE_BYTES_DEFAULT)
        )
        self._compression = props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT)
        self.memory_budget_bytes = (
            memory_budget_bytes
            if memory_budget_bytes is not None
            else P.int_property(props, MEMORY_BUDGET_PROPERTY, MEMORY_BUDGET_DEFAULT)
        )
        local = metadata.location.startswith(("file:", "/"))
        self._open_file_bytes = _OPEN_FILE_BYTES_LOCAL if local else _OPEN_FILE_BYTES_REMOTE
        self._partitions: dict[tuple[Any, ...], _PartitionFile] = {}
        self._done: list[WrittenFile] = []
        self._paths: list[str] = []
        self._ratio = 1.0  # disk bytes per Arrow byte in the files closed so far (no guess yet: 1)
        self._finished = False

    @property
    def written_paths(self) -> list[str]:
        """Every file started, including the open ones."""
        return list(self._paths)

    @property
    def memory_bytes(self) -> int:
        """What is held against the budget: the buffered rows and the open files' fixed cost."""
        states = self._partitions.values()
        return sum(s.pending_bytes for s in states) + self._open_file_bytes * sum(
            1 for s in states if s.file is not None
        )

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Add rows (in the table's Arrow schema, without field ids) to their partitions' files.

        Raises:
            WriteFailedError: A file could not be written, naming it (then :meth:`abort`).
        """
        if self._finished:
            msg = "this TableDataWriter was closed or aborted"
            raise WriteFailedError(msg)
        if not data.num_rows:
            return
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        rows = compat.to_file_schema(
            self._schema, self._file_schema, table, format_version=self._format_version
        )
        for partition, key, take in self._split(table):
            state = self._partitions.get(partition)
            if state is None:
                state = self._partitions[partition] = _PartitionFile(partition, key, [])
            part = rows if take is None else rows.take(take)
            state.pending.append(part)
            state.pending_rows += part.num_rows
            state.pending_bytes += part.nbytes
            if state.pending_rows >= self._row_group_rows or state.pending_bytes >= self._row_group_bytes:
                self._flush(state)
        self._keep_budget()

    def close(self) -> list[DataFile]:
        """Write what is buffered and close every open file: every file written, as pyiceberg
        ``DataFile`` objects of the current spec. Raises as :meth:`write` (then :meth:`abort`)."""
        if not self._finished:
            for state in self._partitions.values():
                self._flush(state)
                self._close_file(state)
            self._partitions.clear()
            self._finished = True
        return [_to_data_file(w) for w in self._done]

    def abort(self) -> None:
        """Close and delete every file written so far (idempotent); failures to delete are ignored."""
        self._finished = True
        for state in self._partitions.values():
            if state.file is not None:
                state.file.abort()
                state.file = None
            state.pending = []
        self._partitions.clear()
        for path in self._paths:
            with contextlib.suppress(OSError):
                self._io.delete(path)

    def _split(self, table: pa.Table) -> list[tuple[tuple[Any, ...], PartitionKey | None, pa.Array | None]]:
        """Each partition in ``table``: (partition tuple, key, its row indices in order; None: all rows)."""
        if self._spec.is_unpartitioned():
            return [((), None, None)]
        columns: dict[str, pa.Array] = {}
        for i, pf in enumerate(self._spec.fields):
            name = self._schema.find_column_name(pf.source_id)
            if name is None:
                msg = f"partition field {pf.name!r} has no source column in the table schema"
                raise WriteFailedError(msg)
            source = self._schema.find_field(pf.source_id)
            value = pf.transform.pyarrow_transform(source.field_type)(column_by_path(table, name))
            if isinstance(value.type, pa.BaseExtensionType):  # a uuid: Arrow groups its bytes only
                chunks = value.chunks if isinstance(value, pa.ChunkedArray) else [value]
                value = pa.chunked_array([c.storage for c in chunks], value.type.storage_type)
            columns[f"p{i}"] = value
        names = list(columns)
        indexed = pa.table({**columns, "rows": pa.array(np.arange(table.num_rows, dtype=np.int64))})
        # one thread keeps each partition's rows in their order
        groups = indexed.group_by(names, use_threads=False).aggregate([("rows", "list")])
        out: list[tuple[tuple[Any, ...], PartitionKey | None, pa.Array | None]] = []
        for g in range(groups.num_rows):
            values = [
                PartitionFieldValue(pf, _partition_value(groups.column(f"p{i}")[g].as_py(), pf, self._schema))
                for i, pf in enumerate(self._spec.fields)
            ]
            key = PartitionKey(field_values=values, partition_spec=self._spec, schema=self._schema)
            record = key.partition
            take = groups.column("rows_list")[g].values
            out.append(
                (tuple(record[i] for i in range(len(record))), key, None if groups.num_rows == 1 else take)
            )
        return out

    def _flush(self, state: _PartitionFile) -> None:
        """Write the partition's buffered rows to its file, rolling to new ones at the target size."""
        if not state.pending_rows:
            return
        rows = pa.concat_tables(state.pending) if len(state.pending) > 1 else state.pending[0]
        state.pending, state.pending_rows, state.pending_bytes = [], 0, 0
        while rows.num_rows:
            f = state.file if state.file is not None else self._open(state, rows.schema)
            size = f.size()
            # aim a little under the target: row groups of a file compress unevenly, and the
            # footer comes on top (Java overshoots by up to its check interval instead)
            room = self._target * _TARGET_AIM - size
            if state.file_arrow_bytes and room < self._target * _TARGET_SLACK:
                self._close_file(state)  # full: no row group worth writing fits
                continue
            # the file's own compression once it has rows; before, that of the files closed
            ratio = size / state.file_arrow_bytes if state.file_arrow_bytes else self._ratio
            per_row = max(1.0, rows.nbytes / rows.num_rows)
            fits = int(max(0.0, room) / max(ratio, 1e-3) / per_row)
            n = min(rows.num_rows, self._row_group_rows, max(1, fits))
            piece = rows.slice(0, n)
            f.write(piece if piece.schema == f.arrow_schema else piece.cast(f.arrow_schema))
            state.file_arrow_bytes += piece.nbytes
            rows = rows.slice(n)
            if f.size() >= self._target * _TARGET_AIM:
                self._close_file(state)

    def _open(self, state: _PartitionFile, schema: pa.Schema) -> ParquetOutput:
        name = f"00000-{len(self._paths)}-{self._uuid}.parquet"
        location = self._locations.new_data_location(data_file_name=name, partition_key=state.key)
        self._paths.append(location)  # before it exists: an interrupt while creating it still removes it
        state.file = ParquetOutput(
            self._io, location, schema, self._compression, store_decimal_as_integer=True
        )
        state.file_arrow_bytes = 0
        return state.file

    def _close_file(self, state: _PartitionFile) -> None:
        f = state.file
        if f is None:
            return
        state.file = None
        f.close()
        if state.file_arrow_bytes:
            self._ratio = f.file_size_in_bytes / state.file_arrow_bytes
        self._done.append(
            written_file(
                FileContent.DATA,
                f.location,
                f.rows,
                f.file_size_in_bytes,
                spec_id=self._spec.spec_id,
                partition=state.partition,
                metrics=parquet_metrics(f, self._file_schema, self._metrics_properties),
            )
        )

    def _keep_budget(self) -> None:
        """Write out the largest buffers, then close the largest open files, until under budget."""
        while self.memory_bytes > self.memory_budget_bytes:
            states = list(self._partitions.values())
            buffered = max(states, key=lambda s: s.pending_bytes)
            if buffered.pending_bytes:
                self._flush(buffered)
                continue
            open_files = [s for s in states if s.file is not None]
            if not open_files:
                return
            self._close_file(max(open_files, key=lambda s: s.file.size() if s.file is not None else 0))


def _partition_value(value: Any, pf: PartitionField, schema: Schema) -> Any:
    """A grouped partition value as pyiceberg's PartitionKey takes it (a uuid's bytes as UUID)."""
    if isinstance(value, bytes) and isinstance(
        pf.transform.result_type(schema.find_type(pf.source_id)), UUIDType
    ):
        return uuid.UUID(bytes=value)
    return value


def with_row_id(rows: pa.Table, arrow_schema: pa.Schema, *, lineage: bool) -> pa.Table:
    """``rows`` as the table's ``arrow_schema``, plus their ``_row_id`` column when ``lineage``
    and they have one (the input of a :class:`TableDataWriter` with ``lineage``)."""
    out = rows.select(arrow_schema.names)
    for i, f in enumerate(arrow_schema):
        if is_uuid(f.type) and pa.types.is_string(out.schema.field(i).type):  # SQL's view of a uuid
            out = out.set_column(i, f.name, uuid_from_strings(out.column(i), f.type))
    out = out.cast(arrow_schema)
    if lineage and ROW_ID.name in rows.column_names:
        out = out.append_column(ROW_ID.name, rows.column(ROW_ID.name).cast(pa.int64()))
    return out


def _to_data_file(written: WrittenFile) -> DataFile:
    """The pyiceberg ``DataFile`` of a data file written here (as pyiceberg's writer makes them)."""
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=written.path,
        file_format=FileFormat.PARQUET,
        partition=Record(*written.partition),
        record_count=written.record_count,
        file_size_in_bytes=written.file_size_in_bytes,
        column_sizes=written.column_sizes,
        value_counts=written.value_counts,
        null_value_counts=written.null_value_counts,
        nan_value_counts=dict(written.nan_value_counts or {}),
        lower_bounds=written.lower_bounds,
        upper_bounds=written.upper_bounds,
        split_offsets=list(written.split_offsets) if written.split_offsets else None,
        equality_ids=None,
        sort_order_id=None,
        key_metadata=None,
        spec_id=written.spec_id,
    )
