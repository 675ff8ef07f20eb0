"""Rendering scan output for the CLI: rich tables, or streamed .parquet/.csv/.jsonl files."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

    from icemor.spec.tasks import PlannedFile

__all__ = ["print_plan", "print_table", "write_batches"]


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


def write_batches(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, path: Path, *, limit: int | None
) -> int:
    """Stream batches to ``path`` by extension; the file appears only when complete.

    Raises:
        InvalidArgumentError: ``path`` cannot be written (a directory, a missing parent, a
            regular file where a directory should be, no permission, disk full): every
            ``OSError`` of the output, naming the user's path. Errors of reading the table
            pass through unchanged.
    """
    if path.is_dir():
        raise _output_error(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    tmp = path.with_name(f".{path.name}.icemor-tmp")
    n = 0
    try:
        write, close = _guarded(path, lambda: _open_sink(tmp, path.suffix.lower(), schema))
        try:
            for b in _limited(batches, limit):
                _guarded(path, partial(write, b))
                n += b.num_rows
        except BaseException:
            with contextlib.suppress(Exception):
                close()
            raise
        _guarded(path, close)
        _guarded(path, lambda: os.replace(tmp, path))
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return n


_T = TypeVar("_T")


def _guarded(path: Path, fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except OSError as e:
        raise _output_error(path, e) from e


def _output_error(path: Path, e: OSError) -> InvalidArgumentError:
    reason = os.strerror(e.errno) if e.errno else (str(e).strip().splitlines() or [type(e).__name__])[0]
    return InvalidArgumentError(f"cannot write --output {path}: {reason}")


def _open_sink(
    tmp: Path, suffix: str, schema: pa.Schema
) -> tuple[Callable[[pa.RecordBatch], None], Callable[[], None]]:
    """(write one batch, close) of a new file ``tmp`` in the format ``suffix`` names."""
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pw = pq.ParquetWriter(tmp, schema)
        return pw.write_batch, pw.close
    if suffix == ".csv":
        import pyarrow.csv as pacsv

        cw = pacsv.CSVWriter(tmp, schema)
        return cw.write_batch, cw.close
    f = open(tmp, "w", encoding="utf-8")  # noqa: SIM115 (closed by the returned close)

    def write_jsonl(b: pa.RecordBatch) -> None:
        f.writelines(json.dumps(row, default=_json_default) + "\n" for row in b.to_pylist())

    return write_jsonl, f.close


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def print_table(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    *,
    limit: int | None,
    title: str,
    max_rows: int = 1000,
) -> None:
    from rich.console import Console
    from rich.table import Table

    shown = max_rows if limit is None else min(limit, max_rows)
    rows = pa.Table.from_batches(list(_limited(batches, shown)), schema=schema)
    t = Table(
        title=title,
        caption=f"{rows.num_rows} rows" + (" (display limit)" if rows.num_rows == max_rows else ""),
    )
    for name in schema.names:
        t.add_column(name)
    for row in rows.to_pylist():
        t.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    Console().print(t)


def print_plan(planned: list[PlannedFile]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="scan plan: data files and the delete files that apply")
    for col in ("data file", "seq", "rows", "delete kind", "delete file", "delete seq", "delete rows"):
        t.add_column(col)
    for pf in planned:
        f = pf.data_file
        if not pf.delete_files:
            t.add_row(f.path, str(f.data_sequence_number), str(f.record_count), "-", "", "", "")
        for i, d in enumerate(pf.delete_files):
            kind = d.kind + (f" {list(d.equality_ids)}" if d.equality_ids else "")
            first = i == 0
            t.add_row(
                f.path if first else "",
                str(f.data_sequence_number) if first else "",
                str(f.record_count) if first else "",
                kind,
                d.path,
                str(d.data_sequence_number),
                str(d.record_count),
            )
    Console(width=250).print(t)
    n_del = len({d.path for pf in planned for d in pf.delete_files})
    Console().print(f"{len(planned)} data files, {n_del} delete files")
