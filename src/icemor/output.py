"""Rendering scan output for the CLI: rich tables, or streamed .parquet/.csv/.jsonl files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
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
    """Stream batches to ``path`` by extension; the file appears only when complete."""
    import os

    suffix = path.suffix.lower()
    tmp = path.with_name(f".{path.name}.icemor-tmp")
    n = 0
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(tmp, schema) as w:
                for b in _limited(batches, limit):
                    w.write_batch(b)
                    n += b.num_rows
        elif suffix == ".csv":
            import pyarrow.csv as pacsv

            with pacsv.CSVWriter(tmp, schema) as w:
                for b in _limited(batches, limit):
                    w.write_batch(b)
                    n += b.num_rows
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for b in _limited(batches, limit):
                    f.writelines(json.dumps(row, default=_json_default) + "\n" for row in b.to_pylist())
                    n += b.num_rows
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return n


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
