"""Rendering scan output for the CLI: rich tables, or streamed .parquet/.csv/.jsonl files."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import os
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa
import pyarrow.csv as pacsv
import typer

from icemor.exceptions import InvalidArgumentError, redact_properties

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator, Sequence
    from pathlib import Path

    from icemor.spec.describe import HistoryEntry, SnapshotInfo, TableDescription
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "FORMATS",
    "print_description",
    "print_history",
    "print_names",
    "print_plan",
    "print_snapshots",
    "print_table",
    "stream_batches",
    "write_batches",
]


def _limited(batches: Iterable[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    left = limit
    for b in batches:
        if left is not None:
            if left <= 0:
                return
            if b.num_rows > left:
                b = b.slice(0, left)
            left -= b.num_rows
        yield b


FORMATS = ("parquet", "csv", "jsonl")


def write_batches(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: Path,
    *,
    limit: int | None,
    fmt: str | None = None,
    overwrite: bool = False,
) -> int:
    """Stream batches to ``path`` (format by ``fmt``, else by extension); the file appears only when complete.

    Raises:
        InvalidArgumentError: ``path`` exists and ``overwrite`` is False, or it cannot be written
            (a directory, a missing folder, a regular file where a folder should be, no
            permission, disk full): every ``OSError`` of the output, naming the user's path.
            Errors of reading the table pass through unchanged.
    """
    if path.is_dir():
        raise _output_error(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    if path.exists() and not overwrite:
        msg = f"{path} exists: give --overwrite to replace it"
        raise InvalidArgumentError(msg)
    tmp = path.with_name(f".{path.name}.icemor-tmp")
    try:
        with open(tmp, "wb") as f:
            n = stream_batches(
                _reading(batches), schema, f, fmt=fmt or path.suffix.lower().lstrip("."), limit=limit
            )
        os.replace(tmp, path)
    except OSError as e:
        raise _output_error(path, e) from e
    except _ReadError as e:
        raise e.error from e.error.__cause__
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return n


class _ReadError(Exception):
    """An OSError of reading the table, carried past the output's OSError handling."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _reading(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    it = iter(batches)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except OSError as e:
            raise _ReadError(e) from e
        yield batch


def _output_error(path: Path, e: OSError) -> InvalidArgumentError:
    reason = os.strerror(e.errno) if e.errno else (str(e).strip().splitlines() or [type(e).__name__])[0]
    return InvalidArgumentError(f"cannot write --output {path}: {reason}")


def stream_batches(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, sink: BinaryIO, *, fmt: str, limit: int | None
) -> int:
    """Write batches to a binary stream (a file, or stdout for pipes) as parquet, csv or jsonl.

    Timestamps are ISO-8601 (``2024-02-01T10:00:00.000000``, ``+00:00`` when zoned) in both
    csv and jsonl.
    """
    n = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415 - cost: pyarrow.parquet ~10 ms (`icemor namespaces`)

        with pq.ParquetWriter(sink, schema) as w:
            for b in _limited(batches, limit):
                w.write_batch(b)
                n += b.num_rows
    elif fmt == "csv":
        with pacsv.CSVWriter(sink, _iso_schema(schema)) as w:
            for b in _limited(batches, limit):
                w.write_batch(_iso_timestamps(b))
                n += b.num_rows
    elif fmt == "jsonl":
        for b in _limited(batches, limit):
            rows = _iso_timestamps(b).to_pylist()
            sink.write("".join(json.dumps(row, default=_json_default) + "\n" for row in rows).encode())
            n += b.num_rows
    else:
        msg = f"unknown output format {fmt!r}: use parquet, csv or jsonl"
        raise InvalidArgumentError(msg)
    sink.flush()
    return n


def _iso_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(pa.string()) if pa.types.is_timestamp(f.type) else f for f in schema])


def _iso_timestamps(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Top-level timestamp columns as ISO-8601 strings, the same in csv and jsonl."""
    import pyarrow.compute as pc  # noqa: PLC0415 - cost: pyarrow.compute ~50 ms (`icemor namespaces`)

    if not any(pa.types.is_timestamp(t) for t in batch.schema.types):
        return batch
    columns = []
    for col in batch.columns:
        if pa.types.is_timestamp(col.type):
            if col.type.tz is None:
                col = pc.strftime(col, format="%Y-%m-%dT%H:%M:%S")
            else:
                col = pc.replace_substring_regex(
                    pc.strftime(col, format="%Y-%m-%dT%H:%M:%S%z"),
                    pattern=r"([+-]\d\d)(\d\d)$",
                    replacement=r"\1:\2",
                )
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, schema=_iso_schema(batch.schema))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime.datetime):  # nested in a struct or list
        return value.isoformat(timespec="microseconds")
    return str(value)


DISPLAY_ROWS = 1000  # rows a terminal display shows when no --limit is given


def print_table(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    *,
    limit: int | None,
    title: str,
    max_rows: int = DISPLAY_ROWS,
) -> None:
    """Print rows as a table: ``limit`` rows if given, else at most ``max_rows`` (says when cut)."""
    from rich.console import Console  # noqa: PLC0415 - cost: rich ~30 ms when no table is printed
    from rich.table import Table  # noqa: PLC0415 - cost: rich ~30 ms when no table is printed

    shown = max_rows if limit is None else limit
    # one row more than shown tells whether the display was cut
    rows = pa.Table.from_batches(list(_limited(batches, shown + 1)), schema=schema)
    cut = rows.num_rows > shown
    rows = rows.slice(0, shown)
    t = Table(title=title, caption=f"{rows.num_rows} rows")
    for name in schema.names:
        t.add_column(name)
    for row in rows.to_pylist():
        t.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    console = Console()
    console.print(t)
    if cut:  # on a line of its own: a caption wraps in narrow tables
        console.print(
            f"showing the first {shown} rows (display limit {max_rows}): --limit N shows more, "
            "--output FILE writes every row"
            if limit is None
            else f"showing the first {shown} rows (--limit {limit}): more rows match",
            soft_wrap=True,
        )


def _uri(path: str) -> str:
    """Local paths in one form, ``file:///abs/path`` (Java writes ``file:/``, some writers bare paths)."""
    if path.startswith("/"):
        return "file://" + path
    if path.startswith("file:/") and not path.startswith("file://"):
        return "file:///" + path[len("file:/") :]
    return path


def print_plan(planned: list[PlannedFile], *, as_json: bool = False, jsonl: bool = False) -> None:
    """The scan plan as a table, or as JSON: an array (``as_json``) or lines (``jsonl``) of one
    object per data file with its delete files."""
    from rich.console import Console  # noqa: PLC0415 - cost: rich ~30 ms when no table is printed
    from rich.table import Table  # noqa: PLC0415 - cost: rich ~30 ms when no table is printed

    if as_json or jsonl:
        plan = [
            {
                "path": _uri(pf.data_file.path),
                "sequence_number": pf.data_file.data_sequence_number,
                "record_count": pf.data_file.record_count,
                "deletes": [
                    {
                        "kind": d.kind,
                        "path": _uri(d.path),
                        "sequence_number": d.data_sequence_number,
                        "record_count": d.record_count,
                        "equality_ids": list(d.equality_ids),
                    }
                    for d in pf.delete_files
                ],
            }
            for pf in planned
        ]
        print_json(plan, lines=jsonl)
        return

    t = Table(title="scan plan: data files and the delete files that apply")
    for col in ("data file", "seq", "rows", "delete kind", "delete file", "delete seq", "delete rows"):
        t.add_column(col)
    for pf in planned:
        f = pf.data_file
        if not pf.delete_files:
            t.add_row(_uri(f.path), str(f.data_sequence_number), str(f.record_count), "-", "", "", "")
        for i, d in enumerate(pf.delete_files):
            kind = d.kind + (f" {list(d.equality_ids)}" if d.equality_ids else "")
            first = i == 0
            t.add_row(
                _uri(f.path) if first else "",
                str(f.data_sequence_number) if first else "",
                str(f.record_count) if first else "",
                kind,
                _uri(d.path),
                str(d.data_sequence_number),
                str(d.record_count),
            )
    Console(width=250).print(t)
    n_del = len({d.path for pf in planned for d in pf.delete_files})
    Console().print(f"{len(planned)} data files, {n_del} delete files")


def print_names(names: list[str], *, as_json: bool) -> None:
    """One name a line (namespaces, tables), or a JSON list."""
    if as_json:
        print_json(names)
    else:
        for name in names:
            typer.echo(name)


def print_json(items: list[Any], *, lines: bool = False) -> None:
    """Every ``--json`` of the CLI: exactly one JSON document (an array) per invocation; with
    ``lines`` (``--jsonl``), one compact JSON value a line, written as they come."""
    if lines:
        for item in items:
            typer.echo(json.dumps(item, default=_json_default))
    else:
        typer.echo(json.dumps(items, default=_json_default))


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def print_description(d: TableDescription, *, as_json: bool) -> None:
    """``icemor describe``: the table's state, schema, partitioning, sort order, properties."""
    # a FileIO credential may be a table property (s3.secret-access-key): never shown
    d = dataclasses.replace(d, properties=redact_properties(d.properties))
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(d), indent=2))
        return
    echo = typer.echo
    echo(f"table            {d.name}")
    echo(f"location         {d.location}")
    echo(f"uuid             {d.table_uuid}")
    echo(f"format version   {d.format_version}")
    current = "none (empty table)" if d.current_snapshot_id is None else str(d.current_snapshot_id)
    echo(f"current snapshot {current}")
    echo(f"last updated     {_when(d.last_updated_ms)} ({d.last_updated_ms} ms)")
    if d.refs:
        echo("refs             " + ", ".join(f"{name} ({what})" for name, what in d.refs.items()))
    echo(f"\nschema (id {d.schema_id}):")
    width = max((len(f.name) + 2 * f.depth for f in d.fields), default=0)
    for f in d.fields:
        name = "  " * f.depth + f.name
        req = "required" if f.required else "optional"
        doc = f"  -- {f.doc}" if f.doc else ""
        echo(f"  {f.field_id:>5}  {name:<{width}}  {req} {f.type}{doc}")
    echo("\npartition spec" + ("s:" if len(d.partition_specs) > 1 else ":"))
    for spec_id, fields in sorted(d.partition_specs.items()):
        mark = " (default)" if spec_id == d.default_spec_id and len(d.partition_specs) > 1 else ""
        echo(f"  [{spec_id}]{mark} " + (", ".join(fields) if fields else "unpartitioned"))
    echo("\nsort order:")
    echo("  " + (", ".join(d.sort_order) if d.sort_order else "unsorted"))
    echo("\nproperties:")
    if not d.properties:
        echo("  (none)")
    for key, value in sorted(d.properties.items()):
        echo(f"  {key}={value}")


def _n(v: int | None) -> str:
    return "" if v is None else str(v)


def print_snapshots(snaps: list[SnapshotInfo], *, title: str, as_json: bool, jsonl: bool = False) -> None:
    """``icemor snapshots``: every snapshot with its summary counts and refs; ``as_json``: one
    JSON array, ``jsonl``: one JSON object a line."""
    columns = (
        "committed at (UTC)",
        "ms",
        "snapshot id",
        "parent id",
        "operation",
        "+rows",
        "-rows",
        "+data files",
        "-data files",
        "+delete files",
        "-delete files",
        "total rows",
        "data files",
        "delete files",
        "refs",
    )
    rows = (  # built only for the table
        (
            _when(s.timestamp_ms),
            str(s.timestamp_ms),
            str(s.snapshot_id) + (" *" if s.is_current else ""),
            _n(s.parent_id),
            s.operation or "",
            _n(s.added_records),
            _n(s.deleted_records),
            _n(s.added_data_files),
            _n(s.deleted_data_files),
            _n(s.added_delete_files),
            _n(s.removed_delete_files),
            _n(s.total_records),
            _n(s.total_data_files),
            _n(s.total_delete_files),
            ", ".join(s.refs),
        )
        for s in snaps
    )
    no_wrap = ("snapshot id", "parent id", "committed at (UTC)")
    caption = f"{len(snaps)} snapshots; * = current"
    _print_records(snaps, rows, columns, no_wrap, title=title, caption=caption, as_json=as_json, jsonl=jsonl)


def print_history(entries: list[HistoryEntry], *, title: str, as_json: bool, jsonl: bool = False) -> None:
    """``icemor history``: each change of the current snapshot, oldest first; ``as_json``: one
    JSON array, ``jsonl``: one JSON object a line."""
    columns = ("made current at (UTC)", "ms", "snapshot id", "parent id", "operation", "ancestor", "refs")
    rows = (  # built only for the table
        (
            _when(e.made_current_at_ms),
            str(e.made_current_at_ms),
            str(e.snapshot_id),
            _n(e.parent_id),
            e.operation or "",
            "yes" if e.is_current_ancestor else "no (rolled back)",
            ", ".join(e.refs),
        )
        for e in entries
    )
    no_wrap = columns[:-1]  # every column but refs
    caption = f"{len(entries)} entries"
    _print_records(
        entries, rows, columns, no_wrap, title=title, caption=caption, as_json=as_json, jsonl=jsonl
    )


def _print_records(
    records: Sequence[Any],
    rows: Iterable[Sequence[str]],
    columns: Sequence[str],
    no_wrap: Collection[str],
    *,
    title: str,
    caption: str,
    as_json: bool,
    jsonl: bool,
) -> None:
    """Dataclass ``records`` as JSON (``as_json``: one array, ``jsonl``: one object a line), or
    their ``rows`` as a wide table of ``columns`` (those in ``no_wrap`` not wrapped)."""
    from rich.console import Console  # noqa: PLC0415 - cost: rich ~30 ms when no table is printed
    from rich.table import Table  # noqa: PLC0415 - cost: rich ~30 ms when no table is printed

    if as_json or jsonl:
        print_json([dataclasses.asdict(r) for r in records], lines=jsonl)
        return
    t = Table(title=title, caption=caption)
    for col in columns:
        t.add_column(col, no_wrap=col in no_wrap)
    for row in rows:
        t.add_row(*row)
    Console(width=250).print(t)
