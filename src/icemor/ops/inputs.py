"""Rows handed to an operation (MERGE source, CDC changes, appended files) as Arrow, one way."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["open_parquet", "read_arrow"]


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
        InvalidArgumentError: A missing or unreadable file, no file, schemas that differ, or an
            input of another kind.
    """
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
