"""Write position-delete files and rewritten data files, rolled at a target size, with metrics.

Spec, "Position Delete Files": rows sorted by ``file_path`` then ``pos``; the file belongs to
the partition (and spec) of the data files it deletes from. Metrics are full for both columns
(Iceberg Java's ``MetricsConfig.forPositionDelete``): a file referencing one data file has
equal ``file_path`` bounds, which is how v2 readers scope it to that file.

Data files (compaction) are written by pyiceberg's own Parquet writer, metrics included
(``write.metadata.metrics.*``); icemor only rolls to a new file once the bytes written reach
the target, as Java's rolling writers do, so memory stays at one row group.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io import OutputFile
from pyiceberg.types import LongType, StringType

from icemor._compat.pyiceberg import to_requested_schema
from icemor.spec.files import FileContent, WrittenFile
from icemor.spec.rules import DELETE_FILE_PATH_FIELD_ID, DELETE_FILE_POS_FIELD_ID

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO, InputFile, OutputStream
    from pyiceberg.schema import Schema

__all__ = [
    "POSITION_DELETE_SCHEMA",
    "DataFileTarget",
    "DeleteFileTarget",
    "remove_written",
    "write_data_rows",
    "write_position_deletes",
]

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path",
            pa.string(),
            nullable=False,
            metadata={b"PARQUET:field_id": str(DELETE_FILE_PATH_FIELD_ID).encode()},
        ),
        pa.field(
            "pos",
            pa.int64(),
            nullable=False,
            metadata={b"PARQUET:field_id": str(DELETE_FILE_POS_FIELD_ID).encode()},
        ),
    ]
)
_ROWS_PER_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class DeleteFileTarget:
    """Where and how to write the delete files of one partition (picklable for executors)."""

    directory: str
    """The partition's data directory (a URI or path, no trailing slash)."""
    prefix: str
    """Unique per unit of work: the file names are ``{prefix}-{n:05d}-deletes.parquet``, n = 0, 1, …"""
    spec_id: int
    partition: tuple[object, ...]
    target_file_size: int
    compression: str = "zstd"

    def location(self, index: int) -> str:
        return f"{self.directory}/{self.prefix}-{index:05d}-deletes.parquet"


def write_position_deletes(
    io: FileIO,
    target: DeleteFileTarget,
    deletes: Sequence[tuple[str, npt.NDArray[np.int64]]],
) -> list[WrittenFile]:
    """Write ``(data file path, sorted unique positions)`` pairs as position-delete files.

    The pairs may come in any order; files are written sorted by path, then position, and a
    new file is started once the current one reaches the target size.
    """
    pending = sorted((d for d in deletes if len(d[1])), key=lambda d: d[0])
    out: list[WrittenFile] = []
    writer: _RollingFile | None = None
    try:
        for path, positions in pending:
            for start in range(0, len(positions), _ROWS_PER_CHUNK):
                if writer is None:
                    writer = _RollingFile(io, target, len(out))
                writer.write(path, positions[start : start + _ROWS_PER_CHUNK])
                if writer.size() >= target.target_file_size:
                    out.append(writer.close())
                    writer = None
        if writer is not None:
            out.append(writer.close())
    except BaseException:
        if writer is not None:
            writer.abort()
        remove_written(io, target)
        raise
    return out


class _Numbered(Protocol):
    def location(self, index: int) -> str: ...


def remove_written(io: FileIO, target: _Numbered) -> None:
    """Remove what a (failed or lost) unit of work wrote to ``target``, best effort.

    Files are numbered from 0 without gaps, so no listing is needed: a worker that died
    leaves no way to learn what it wrote except its target's names.
    """
    index = 0
    while True:
        location = target.location(index)
        try:
            if not io.new_input(location).exists():
                return
            io.delete(location)
        except OSError:
            return
        index += 1


class _RollingFile:
    def __init__(self, io: FileIO, target: DeleteFileTarget, index: int) -> None:
        self.target = target
        self.location = target.location(index)
        # a retried task (Spark) rewrites its own names: they are unique to this commit and unit
        self._stream = io.new_output(self.location).create(overwrite=True)
        self._writer = pq.ParquetWriter(
            self._stream, POSITION_DELETE_SCHEMA, compression=target.compression, write_page_checksum=True
        )
        self.rows = 0
        self.paths: list[str] = []
        self.min_pos: int | None = None
        self.max_pos: int | None = None

    def write(self, path: str, positions: npt.NDArray[np.int64]) -> None:
        n = len(positions)
        # one dictionary value per data file: the path column costs nearly nothing
        paths = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([path]))
        batch = pa.record_batch(
            [paths.cast(pa.string()), pa.array(positions, pa.int64())], schema=POSITION_DELETE_SCHEMA
        )
        self._writer.write_batch(batch)
        self.rows += n
        if not self.paths or self.paths[-1] != path:
            self.paths.append(path)
        lo, hi = int(positions.min()), int(positions.max())
        self.min_pos = lo if self.min_pos is None else min(self.min_pos, lo)
        self.max_pos = hi if self.max_pos is None else max(self.max_pos, hi)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._stream.close()

    def size(self) -> int:
        return int(self._stream.tell())

    def close(self) -> WrittenFile:
        self._writer.close()
        metadata = self._writer.writer.metadata
        size = int(self._stream.tell())
        self._stream.close()
        sizes = {DELETE_FILE_PATH_FIELD_ID: 0, DELETE_FILE_POS_FIELD_ID: 0}
        for rg in range(metadata.num_row_groups):
            group = metadata.row_group(rg)
            sizes[DELETE_FILE_PATH_FIELD_ID] += group.column(0).total_compressed_size
            sizes[DELETE_FILE_POS_FIELD_ID] += group.column(1).total_compressed_size
        assert self.min_pos is not None and self.max_pos is not None
        ids = (DELETE_FILE_PATH_FIELD_ID, DELETE_FILE_POS_FIELD_ID)
        return WrittenFile(
            content=FileContent.POSITION_DELETES,
            path=self.location,
            record_count=self.rows,
            file_size_in_bytes=size,
            spec_id=self.target.spec_id,
            partition=self.target.partition,
            column_sizes=sizes,
            value_counts=dict.fromkeys(ids, self.rows),
            null_value_counts=dict.fromkeys(ids, 0),
            lower_bounds={
                DELETE_FILE_PATH_FIELD_ID: to_bytes(StringType(), self.paths[0]),
                DELETE_FILE_POS_FIELD_ID: to_bytes(LongType(), self.min_pos),
            },
            upper_bounds={
                DELETE_FILE_PATH_FIELD_ID: to_bytes(StringType(), self.paths[-1]),
                DELETE_FILE_POS_FIELD_ID: to_bytes(LongType(), self.max_pos),
            },
            referenced_data_file=self.paths[0] if len(self.paths) == 1 else None,
        )


@dataclass(frozen=True, slots=True)
class DataFileTarget:
    """Where and how to write the data files of one partition (picklable for executors)."""

    directory: str
    """The partition's data directory (a URI or path, no trailing slash)."""
    prefix: str
    """Unique per unit of work: the file names are ``{prefix}-{n:05d}.parquet``, n = 0, 1, …"""
    spec_id: int
    partition: tuple[object, ...]
    target_file_size: int

    def location(self, index: int) -> str:
        return f"{self.directory}/{self.prefix}-{index:05d}.parquet"


class _Measured(OutputFile):
    """An output file that keeps its stream, so the bytes written so far can be read (``tell``)."""

    def __init__(self, inner: OutputFile) -> None:
        super().__init__(inner.location)
        self._inner = inner
        self.stream: OutputStream | None = None

    def __len__(self) -> int:
        return len(self._inner)

    def exists(self) -> bool:
        return self._inner.exists()

    def to_input_file(self) -> InputFile:
        return self._inner.to_input_file()

    def create(self, overwrite: bool = False) -> OutputStream:
        self.stream = self._inner.create(overwrite=overwrite)
        return self.stream


def write_data_rows(
    io: FileIO,
    target: DataFileTarget,
    schema: Schema,
    properties: Mapping[str, str],
    batches: Iterable[pa.RecordBatch],
) -> list[WrittenFile]:
    """Write rows of ``schema`` (all of one partition of ``target``) as data files of the target size.

    Row groups hold ``write.parquet.row-group-limit`` rows; a new file starts once the bytes
    written reach ``target.target_file_size``. On failure every file written is removed.
    """
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.properties import property_as_int

    files = _RollingDataFiles(io, target, schema, properties)
    row_limit = property_as_int(
        dict(properties),
        TableProperties.PARQUET_ROW_GROUP_LIMIT,
        TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT,
    )
    assert row_limit is not None
    try:
        held: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            if batch.num_rows:
                held.append(files.convert(batch))
                rows += batch.num_rows
            while rows >= row_limit:  # whole row groups of exactly the limit; the rest waits
                table = pa.Table.from_batches(held)
                files.write(table.slice(0, row_limit))
                held = table.slice(row_limit).to_batches()
                rows -= row_limit
        if rows:
            files.write(pa.Table.from_batches(held))
        files.close()
    except BaseException:
        files.abort()
        raise
    return files.written


class _RollingDataFiles:
    """pyiceberg's Parquet writer (field ids, metrics), one file after another at the target size."""

    def __init__(
        self, io: FileIO, target: DataFileTarget, schema: Schema, properties: Mapping[str, str]
    ) -> None:
        from pyiceberg.io.fileformat import FileFormatFactory
        from pyiceberg.manifest import FileFormat
        from pyiceberg.schema import sanitize_column_names

        self._io, self._target, self._schema = io, target, schema
        self._props = dict(properties)
        self._model = FileFormatFactory.get(FileFormat.PARQUET)
        # as pyiceberg's write_file: Parquet gets Avro-safe column names when the table's are not
        self._file_schema = sanitize_column_names(schema)
        self._writer: Any = None
        self._file: _Measured | None = None
        self.written: list[WrittenFile] = []

    def convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch as pyiceberg's writer takes it (its types, field ids)."""
        return to_requested_schema(
            self._file_schema,
            self._schema,
            batch,
            downcast_ns_timestamp_to_us=False,
            missing_fields={},
            for_parquet_write=True,
        )

    def write(self, rows: pa.Table) -> None:
        """Write one row group; start the next file once this one reached the target."""
        if self._writer is None:
            self._file = _Measured(self._io.new_output(self._target.location(len(self.written))))
            self._writer = self._model.create_writer(self._file, self._file_schema, self._props)
        self._writer.write(rows)
        stream = self._file.stream if self._file is not None else None
        if stream is not None and stream.tell() >= self._target.target_file_size:
            self.close()

    def close(self) -> None:
        if self._writer is None or self._file is None:
            return
        writer, measured = self._writer, self._file
        self._writer = self._file = None
        stats = writer.close().to_serialized_dict()
        offsets = stats.pop("split_offsets", None)
        self.written.append(
            WrittenFile(
                content=FileContent.DATA,
                path=measured.location,
                file_size_in_bytes=len(measured),
                spec_id=self._target.spec_id,
                partition=self._target.partition,
                split_offsets=tuple(offsets) if offsets else None,
                **stats,
            )
        )

    def abort(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the original error matters, not this one
                self._writer.close()
        remove_written(self._io, self._target)
