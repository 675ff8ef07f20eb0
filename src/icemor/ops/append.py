"""Append Parquet files to a table as one snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["append_files"]


def append_files(table: PyIcebergTable, files: Sequence[Path]) -> int:
    """Append Parquet files as one snapshot; nothing is committed if any file is bad.

    Returns:
        The number of rows appended.
    """
    import pyarrow.parquet as pq

    parts = []
    for path in files:
        try:
            parts.append(pq.read_table(path))
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {path}: {e}"
            raise InvalidArgumentError(msg) from e
    if not parts:
        return 0
    try:
        data = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        msg = f"the files do not share one schema: {e}"
        raise InvalidArgumentError(msg) from e
    try:
        table.append(data)
    except ValueError as e:
        msg = f"the files do not match the schema of {'.'.join(table.name())}: {e}"
        raise InvalidArgumentError(msg) from e
    return int(data.num_rows)
