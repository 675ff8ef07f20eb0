"""Rows handed to an operation (MERGE source, CDC changes, appended files) as Arrow, one way."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pyarrow.parquet as pq

__all__ = ["check_distinct_names", "open_parquet", "read_arrow"]


def check_distinct_names(names: Iterable[str], *, what: str) -> None:
    """Refuse column names that SQL cannot tell apart: equal, or differing only in case.

    SQL names are case-insensitive in DuckDB and in Spark by default
    (``spark.sql.caseSensitive=false``): with ``id`` and ``ID`` in a MERGE source, one part of
    a MERGE once read one and another part the other, and inserted a key that existed.

    Args:
        names: The column names.
        what: How the message names their owner (``the MERGE source``, ``table db.t``).

    Raises:
        InvalidArgumentError: Two names that are equal ignoring case (the message names both).
    """
    seen: dict[str, str] = {}
    for name in names:
        other = seen.get(name.lower())
        if other is None:
            seen[name.lower()] = name
            continue
        if other == name:
            msg = f"{what} has two columns named {name!r}"
        else:
            msg = (
                f"{what} has columns {other!r} and {name!r}, whose names differ only in case: SQL "
                "names are case-insensitive (as in Spark by default), so they cannot be told apart; "
                "rename one"
            )
        raise InvalidArgumentError(msg)


def open_parquet(path: Path) -> pq.ParquetFile:
    """Open a local Parquet file, with one-line errors for a missing, directory or bad file."""
    import pyarrow.parquet as pq

    if not path.exists():
        msg = f"no such file: {path}"
        raise InvalidArgumentError(msg)
    if path.is_dir():
        msg = f"{path} is a directory, not a Parquet file"
        raise InvalidArgumentError(msg)
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as e:
        msg = f"cannot read Parquet file {path}: {str(e).splitlines()[0]}"
        raise InvalidArgumentError(msg) from e


def read_arrow(rows: Any, *, what: str) -> pa.Table:
    """``rows`` as one Arrow table: a table, record batch or reader, a pandas DataFrame, or
    Parquet file path(s) (read whole; their schemas may differ only by missing columns).

    Args:
        rows: The input.
        what: How errors name it (``the MERGE source``, ``the changes``).

    Raises:
        InvalidArgumentError: A missing or unreadable file, no file, schemas that differ, an
            input of another kind, or columns whose names differ only in case
            (:func:`check_distinct_names`).
    """
    table = _read_arrow(rows, what=what)
    check_distinct_names(table.column_names, what=what)
    return table


def _read_arrow(rows: Any, *, what: str) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    if isinstance(rows, pa.RecordBatchReader):
        return rows.read_all()
    if type(rows).__module__.startswith("pandas"):
        return pa.Table.from_pandas(rows, preserve_index=False)
    paths = [rows] if isinstance(rows, str | Path) else rows
    if not isinstance(paths, list | tuple) or not all(isinstance(p, str | Path) for p in paths):
        kind = type(rows).__name__
        msg = f"{what} must be an Arrow table, Parquet file paths or a pandas DataFrame, not {kind}"
        raise InvalidArgumentError(msg)
    if not paths:
        msg = f"{what}: no file given"
        raise InvalidArgumentError(msg)
    tables = []
    for p in paths:
        path = Path(p)
        try:
            tables.append(open_parquet(path).read())
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {path}: {str(e).splitlines()[0]}"
            raise InvalidArgumentError(msg) from e
    try:
        return pa.concat_tables(tables, promote_options="default")
    except pa.ArrowInvalid as e:
        msg = f"the files of {what} have schemas that differ: {str(e).splitlines()[0]}"
        raise InvalidArgumentError(msg) from e
