"""Append rows to a table as one snapshot, streamed in bounded batches.

The rows (an Arrow table or reader, a pandas or polars DataFrame, Parquet files) are read
``BATCH_ROWS`` at a time, converted to the table's columns (:class:`icemor.ops.inputs.TableRows`:
promotions, NULL-typed columns, nanosecond timestamps) and written by one
:class:`icemor.io.data_writer.TableDataWriter` (a rolling file per partition); all its files are
committed as one snapshot. Whatever fails (an interrupt too), every file written is removed
unless the catalog may have committed.

Rows another engine writes (a Spark DataFrame on its executors: :class:`ExternalRows`) follow
the same rules there; only their files' metadata reaches this process, which commits them alike.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException

from icemor.commit.append import commit_append
from icemor.commit.data_file_struct import to_data_file
from icemor.commit.door import first_line, may_have_committed
from icemor.engines import ExternalFiles, ExternalRows
from icemor.exceptions import (
    NO_ROOM_ERRNOS,
    CommitFailedError,
    IcemorError,
    WriteFailedError,
)
from icemor.io.data_writer import RecordingIO, TableDataWriter
from icemor.ops.inputs import TableRows, input_batches

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as PyIcebergTable

__all__ = [
    "BATCH_ROWS",
    "ExternalFiles",
    "ExternalRows",
    "append_data",
    "append_files",
    "downcast_ns_timestamps",
    "schema_mismatch_message",
    "write_rows",
]

# Rows read, converted and written at a time: the memory bound of an append (not the input size).
BATCH_ROWS = 1 << 20

# Called with the number of rows of every batch held in memory before it is written (tests
# check the peak against BATCH_ROWS).
observe_chunk: Callable[[int], None] | None = None


def append_files(
    table: PyIcebergTable,
    files: Sequence[Path | str],
    *,
    progress: Callable[[int], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> int:
    """Append Parquet files as one snapshot; nothing is committed, and no file left, if any is bad.

    Every file's schema is checked first; then the rows are streamed as :func:`append_data` does.

    Raises:
        InvalidArgumentError: A missing or unreadable file, or one whose schema does not fit.
    """
    if not files:
        return 0
    return append_data(table, [Path(f) for f in files], progress=progress, note=note)


def append_data(
    table: PyIcebergTable,
    data: Any,
    *,
    progress: Callable[[int], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> int:
    """Append ``data`` as one snapshot (none when it has no row).

    Args:
        table: The pyiceberg table.
        data: An Arrow table, record batch or reader, a pandas or polars DataFrame, or Parquet
            file path(s) (local); or :class:`ExternalRows` (a Spark DataFrame's rows).
        progress: Called with the number of rows of each batch once it is written (of
            :class:`ExternalRows`: once, with all of them).
        note: Told, in one line, how many nanosecond timestamps lost digits (if any did).

    Returns:
        The number of rows appended.

    Raises:
        InvalidArgumentError: A missing or unreadable file, or rows that do not fit the schema
            (the message names the column).
        WriteFailedError: A file could not be written (disk full, permission denied, ...).
        CommitFailedError: The catalog refused the commit (e.g. a read-only catalog).
        CommitStateUnknownError: The catalog call failed after it may have committed; every
            file is kept.
    """
    name = ".".join(table.name())
    if isinstance(data, ExternalRows):
        return _append_external(table, data, progress=progress, note=note)
    # every file this append writes (data files, manifests, manifest list) goes through it
    io = RecordingIO(table.io)
    try:
        rows, written, convert = write_rows(table, io, data, what="the data", progress=progress)
        if written:
            commit_append(table, io, written, what=f"the append to {name}")
    except BaseException as e:
        if may_have_committed(e):
            raise  # the catalog may have committed: every file may be the table's now
        # nothing was committed: the files written so far would be orphans
        io.discard()
        error = _user_error(e, name, io.paths)
        if error is e:
            raise
        raise error from e
    if note is not None and (text := convert.summary()):
        note(text)
    return rows


def _append_external(
    table: PyIcebergTable,
    data: ExternalRows,
    *,
    progress: Callable[[int], None] | None,
    note: Callable[[str], None] | None,
) -> int:
    """:func:`append_data` of rows another engine writes: its files committed here, as one snapshot."""
    name = ".".join(table.name())
    convert = TableRows(table.metadata.schema(), table=name)
    written = data.write(table, convert)  # removes what it wrote if it fails
    paths = [f.path for f in written.files]
    keep: list[str] = []
    io = RecordingIO(table.io)  # the manifests and the manifest list
    try:
        if progress is not None:
            progress(written.rows)
        try:
            if written.files:
                added = [to_data_file(f) for f in written.files]
                commit_append(table, io, added, what=f"the append to {name}")
            keep = paths
        except BaseException as e:
            if may_have_committed(e):
                keep = paths  # the catalog may have committed: every file may be the table's now
                raise
            io.discard()
            error = _user_error(e, name, io.paths)
            if error is e:
                raise
            raise error from e
    finally:
        written.finish(keep)
    if note is not None and (text := convert.summary()):
        note(text)
    return written.rows


def write_rows(
    table: PyIcebergTable,
    io: FileIO,
    data: Any,
    *,
    what: str,
    progress: Callable[[int], None] | None = None,
) -> tuple[int, list[DataFile], TableRows]:
    """Stream ``data`` into data files of the table's current spec (nothing committed).

    Every schema known up front (Parquet files') is checked before any row is written; on any
    failure every file written is removed and the error raised.

    Returns:
        The rows written, the data files, and the converter (its :meth:`TableRows.summary`).
    """
    metadata = table.metadata
    convert = TableRows(metadata.schema(), table=".".join(table.name()))
    source = input_batches(data, what=what, batch_rows=BATCH_ROWS)
    for label, schema in source.schemas:
        convert.check(schema, what=label)
    writer = TableDataWriter(metadata, io, write_uuid=uuid.uuid4())
    rows = 0
    try:
        for label, batch in source.batches:
            if observe_chunk is not None:
                observe_chunk(batch.num_rows)
            convert.write(writer, batch, what=label)
            rows += batch.num_rows
            if progress is not None:
                progress(batch.num_rows)
        return rows, writer.close(), convert
    except BaseException:
        writer.abort()
        raise


def _user_error(e: BaseException, name: str, written: list[str]) -> BaseException:
    """The error to raise for a failed append that committed nothing."""
    if isinstance(e, IcemorError) or not isinstance(e, Exception):
        return e
    if isinstance(e, OSError) and e.errno in NO_ROOM_ERRNOS and written:
        return WriteFailedError.of(written[-1], e)  # a manifest or manifest list (data files are named)
    if isinstance(e, CommitFailedException) or type(e).__name__ in ("OperationalError", "IntegrityError"):
        return CommitFailedError(f"the catalog refused the append to {name}: {first_line(e)}")
    return e


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
        return first_line(text, default="schemas differ")
    diffs = []
    for line in rows:
        cells = [c.strip() for c in line.replace("┃", "│").split("│") if c.strip() and c.strip() != "❌"]
        if len(cells) == 2:
            diffs.append(f"table has {cells[0]}, file has {cells[1]}")
        elif cells:
            diffs.append(" / ".join(cells))
    return "; ".join(diffs)
