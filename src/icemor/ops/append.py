"""Append Parquet files to a table as one snapshot, streamed in bounded chunks."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException

from icemor._compat.pyiceberg import check_arrow_schema_compatible
from icemor.commit.append import commit_append
from icemor.commit.swap import Outcome, failed_outcome, first_line, tracked_swaps
from icemor.exceptions import (
    NO_ROOM_ERRNOS,
    CommitFailedError,
    CommitStateUnknownError,
    IcemorError,
    InvalidArgumentError,
    WriteFailedError,
)
from icemor.io.data_writer import RecordingIO, write_table_data_files
from icemor.ops.inputs import open_parquet

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["BATCH_ROWS", "append_files", "downcast_ns_timestamps", "schema_mismatch_message"]

# Rows read, converted and written at a time: the memory bound of an append (not the input size).
BATCH_ROWS = 1 << 20

# Called with the number of rows of every chunk held in memory before it is written (tests
# check the peak against BATCH_ROWS).
observe_chunk: Callable[[int], None] | None = None


def append_files(
    table: PyIcebergTable, files: Sequence[Path | str], *, progress: Callable[[int], None] | None = None
) -> int:
    """Append Parquet files as one snapshot; nothing is committed, and no file left, if any is bad.

    Every file's schema is checked first; then the rows are read, converted and written as data
    files ``BATCH_ROWS`` at a time, and all the data files are committed in one snapshot.
    ``timestamp[ns]`` columns are stored as microseconds on v1/v2 tables.

    Args:
        table: The pyiceberg table.
        files: Local Parquet files.
        progress: Called with the number of rows of each chunk once it is written.

    Returns:
        The number of rows appended.

    Raises:
        InvalidArgumentError: A missing or unreadable file, or one whose schema does not fit.
        WriteFailedError: A file could not be written (disk full, permission denied, ...).
        CommitFailedError: The catalog refused the commit (e.g. a read-only catalog).
        CommitStateUnknownError: The catalog call failed after it may have committed; every
            file is kept.

    Whatever fails (an interrupt too), every file written is removed unless the catalog may
    have committed.
    """
    paths = [Path(f) for f in files]
    name = ".".join(table.name())
    metadata = table.metadata
    opened = []
    for path in paths:
        pf = open_parquet(path)
        schema = downcast_ns_timestamps(pf.schema_arrow) if metadata.format_version < 3 else pf.schema_arrow
        try:
            check_arrow_schema_compatible(metadata.schema(), schema, format_version=metadata.format_version)
        except ValueError as e:
            msg = f"{path} does not match the schema of {name}: {schema_mismatch_message(e)}"
            raise InvalidArgumentError(msg) from e
        opened.append((path, pf, schema))
    if not opened:
        return 0

    write_uuid, counter = uuid.uuid4(), itertools.count()
    # every file this append writes (data files, manifests, manifest list) goes through it
    io = RecordingIO(table.io)
    rows = 0
    with tracked_swaps(table.catalog) as calls:
        try:
            written: list[DataFile] = []
            for path, chunk in _chunks(opened):
                if observe_chunk is not None:
                    observe_chunk(chunk.num_rows)
                try:
                    data = pa.Table.from_batches(chunk.batches, schema=chunk.schema)
                    written += write_table_data_files(
                        metadata, data, io, write_uuid=write_uuid, counter=counter
                    )
                except (pa.ArrowInvalid, ValueError) as e:
                    msg = f"cannot write the rows of {path} to {name}: {str(e).splitlines()[0]}"
                    raise InvalidArgumentError(msg) from e
                rows += chunk.num_rows
                if progress is not None:
                    progress(chunk.num_rows)
            commit_append(table, io, written)
        except BaseException as e:
            outcome = failed_outcome(calls, e)
            if outcome == Outcome.UNKNOWN:
                # the catalog may have committed: every file may be the table's now
                if isinstance(e, Exception) and not calls.committed:
                    msg = f"append to {name} may or may not have happened: {first_line(e)}"
                    raise CommitStateUnknownError(msg) from e
                raise
            # nothing was committed: the files written so far would be orphans
            io.discard()
            error = _user_error(e, name, io.paths)
            if error is e:
                raise
            raise error from e
    return rows


def _user_error(e: BaseException, name: str, written: list[str]) -> BaseException:
    """The error to raise for a failed append that committed nothing."""
    if isinstance(e, IcemorError) or not isinstance(e, Exception):
        return e
    if isinstance(e, OSError) and e.errno in NO_ROOM_ERRNOS and written:
        return WriteFailedError.of(written[-1], e)  # a manifest or manifest list (data files are named)
    if isinstance(e, CommitFailedException) or type(e).__name__ in ("OperationalError", "IntegrityError"):
        return CommitFailedError(f"the catalog refused the append to {name}: {first_line(e)}")
    return e


class _Chunk:
    """Batches of one schema held together, at most BATCH_ROWS rows."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.batches: list[pa.RecordBatch] = []
        self.num_rows = 0


def _chunks(opened: list[tuple[Path, pq.ParquetFile, pa.Schema]]) -> Iterator[tuple[Path, _Chunk]]:
    """Chunks of at most BATCH_ROWS rows; small files share a chunk when their schemas agree."""
    limit = max(1, BATCH_ROWS)
    chunk: _Chunk | None = None
    last = opened[0][0]
    for path, pf, schema in opened:
        if chunk is not None and chunk.schema != schema:
            yield last, chunk
            chunk = None
        try:
            for batch in pf.iter_batches(batch_size=limit):
                if chunk is not None and chunk.num_rows + batch.num_rows > limit:
                    yield last, chunk
                    chunk = None
                if chunk is None:
                    chunk = _Chunk(schema)
                # ns -> us: the checked cast refuses to drop sub-microsecond digits
                chunk.batches.append(batch.cast(schema) if batch.schema != schema else batch)
                chunk.num_rows += batch.num_rows
                last = path
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {path}: {str(e).splitlines()[0]}"
            raise InvalidArgumentError(msg) from e
    if chunk is not None and chunk.num_rows:
        yield last, chunk


def downcast_ns_timestamps(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every ``timestamp[ns]`` (at any depth) as ``timestamp[us]``, same zone."""
    return pa.schema([f.with_type(_downcast(f.type)) for f in schema], metadata=schema.metadata)


def _downcast(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_downcast(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_downcast(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_downcast(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_downcast(t.key_type)), t.item_field.with_type(_downcast(t.item_type))
        )
    return t


def schema_mismatch_message(e: ValueError) -> str:
    """pyiceberg's schema-mismatch explanation (a rich table) as one line: the differing fields."""
    text = str(e)
    rows = [line for line in text.splitlines() if "❌" in line]
    if not rows:
        return text.strip().splitlines()[0] if text.strip() else "schemas differ"
    diffs = []
    for line in rows:
        cells = [c.strip() for c in line.replace("┃", "│").split("│") if c.strip() and c.strip() != "❌"]
        if len(cells) == 2:
            diffs.append(f"table has {cells[0]}, file has {cells[1]}")
        elif cells:
            diffs.append(" / ".join(cells))
    return "; ".join(diffs)
