"""Write data files whose rows keep the order they were given, so each row's position is known.

pyiceberg's writer bin-packs and splits its input as it likes; a writer of changes must know,
for each row it wrote, the file and position it went to (a row superseded later in the same
batch is deleted by position, Flink's ``insertedRowMap``). Here the rows of one partition are
written in the order given, rolled to a new file once the current one reaches the target size
(measured on disk), and the files come back in that order: row ``i`` is in the file whose
cumulative record count first exceeds ``i`` (:func:`file_positions`).

Metrics are the table's (``write.metadata.metrics.*``), computed from the Parquet footer by
pyiceberg's statistics collector, as its own writer does.

:func:`write_rolling` is icemor's one rolling-file writer: data files here, position deletes
(:mod:`icemor.io.writers`) and equality deletes (:mod:`icemor.io.equality_writer`) all write
through it, and describe what they wrote with :func:`icemor.spec.files.written_file`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, OutputFile

from icemor._compat import pyiceberg as compat
from icemor.exceptions import WriteFailedError
from icemor.spec.files import FileContent, WrittenFile, written_file

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable, Iterable, Iterator, Mapping

    import numpy.typing as npt
    from pyiceberg.io import InputFile, OutputStream
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata

__all__ = [
    "DataFileTarget",
    "FileTarget",
    "ParquetOutput",
    "RecordingIO",
    "file_positions",
    "parquet_metrics",
    "write_data_files_in_order",
    "write_parquet_tables",
    "write_rolling",
    "write_table_data_files",
]

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class DataFileTarget:
    """Where and how to write the data files of one partition (picklable for executors)."""

    directory: str
    """The partition's data directory (a URI or path, no trailing slash)."""
    prefix: str
    """Unique per unit of work and partition: files are ``{prefix}-{n:05d}.parquet``, n = 0, 1, …"""
    spec_id: int
    partition: tuple[object, ...]
    target_file_size: int
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
    done: list[str] = []
    current: ParquetOutput | None = None
    try:
        for piece in pieces:
            if current is None:
                current = ParquetOutput(io, location(len(out)), arrow_schema(piece), compression, **options)
            write(current, piece)
            if current.size() >= target_file_size:
                out.append(close(current))
                done.append(current.location)
                current = None
        if current is not None:
            out.append(close(current))
            done.append(current.location)
            current = None
    except BaseException:
        if current is not None:
            current.abort()
            done.append(current.location)
        for path in done:
            with contextlib.suppress(OSError):
                io.delete(path)
        raise
    return out


def parquet_metrics(
    f: ParquetOutput, schema: Schema, metrics_properties: Mapping[str, str]
) -> dict[str, Any]:
    """The metrics of a closed file (pyiceberg's serialized statistics), by the metrics modes of
    ``metrics_properties`` (``write.metadata.metrics.*``)."""
    return compat.parquet_statistics(f.metadata, schema, metrics_properties)


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

    For writers that do not say what they wrote when they fail (pyiceberg's data writer and
    snapshot producer): :meth:`discard` removes what they began. pyiceberg's writer threads
    may go on after the caller saw the failure (an interrupt), so once discarded no new file
    can be created through it: a file is either created before the removal, and removed, or
    not at all.
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


def write_table_data_files(
    metadata: TableMetadata, data: pa.Table, io: FileIO, *, write_uuid: uuid.UUID, counter: Iterator[int]
) -> list[DataFile]:
    """pyiceberg's data writer (partitioned, target-sized), leaving nothing behind when it fails.

    Raises:
        WriteFailedError: A file could not be written (disk full, permission denied, ...); it
            names the file last opened (pyiceberg writes on several threads and does not say
            which failed). Every file this call began is removed.
    """
    recording = RecordingIO(io)
    try:
        with _quiet_failed_writer_stats():
            return compat.write_data_files(metadata, data, recording, write_uuid=write_uuid, counter=counter)
    except BaseException as e:
        recording.discard()
        if isinstance(e, OSError):
            where = recording.paths[-1] if recording.paths else f"{metadata.location}/data"
            raise WriteFailedError.of(where, e) from e
        raise


class _FailedWriterStats(logging.Filter):
    """Drops pyiceberg's "statistics missing" warning while icemor's writes run.

    pyiceberg closes a writer that failed (a full disk) and then warns that the half-written
    file has no statistics: noise after the one-line error. Its writes on several threads make
    a per-call filter impossible; the count of writes in flight decides.
    """

    def __init__(self) -> None:
        super().__init__()
        self.active = 0
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.active and str(record.msg).startswith("PyArrow statistics missing"))


_STATS_FILTER = _FailedWriterStats()
logging.getLogger("pyiceberg.io.pyarrow").addFilter(_STATS_FILTER)


@contextlib.contextmanager
def _quiet_failed_writer_stats() -> Iterator[None]:
    with _STATS_FILTER.lock:
        _STATS_FILTER.active += 1
    try:
        yield
    finally:
        with _STATS_FILTER.lock:
            _STATS_FILTER.active -= 1


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
