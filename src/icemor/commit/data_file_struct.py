"""Manifest-entry ``DataFile`` objects for files icemor wrote."""

from __future__ import annotations

from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from icemor._compat.pyiceberg import v3_data_file
from icemor.spec.files import FileContent, WrittenFile, written_file

__all__ = ["from_data_file", "to_data_file"]


def to_data_file(written: WrittenFile, *, format_version: int = 2) -> DataFile:
    """The manifest ``data_file`` struct of a written data or delete file (Parquet, or Puffin DV).

    ``format_version`` 3: a v3 record with ``referenced_data_file``, ``content_offset`` and
    ``content_size_in_bytes`` (``first_row_id`` stays null: ADDED files inherit it).
    """
    v3: dict[str, Any] = (
        {
            "referenced_data_file": written.referenced_data_file,
            "content_offset": written.content_offset,
            "content_size_in_bytes": written.content_size_in_bytes,
        }
        if format_version >= 3
        else {}
    )
    if written.is_deletion_vector and not v3:
        msg = f"deletion vector {written.path} in a format-version {format_version} table"
        raise ValueError(msg)
    build = v3_data_file if v3 else DataFile.from_args
    dv = written.is_deletion_vector  # DVs have no column metrics (null, as Java writes them)
    df = build(
        **v3,
        content=DataFileContent(int(written.content)),
        file_path=written.path,
        file_format=FileFormat.PUFFIN if written.is_deletion_vector else FileFormat.PARQUET,
        partition=Record(*written.partition),
        record_count=written.record_count,
        file_size_in_bytes=written.file_size_in_bytes,
        column_sizes=None if dv else written.column_sizes,
        value_counts=None if dv else written.value_counts,
        null_value_counts=None if dv else written.null_value_counts,
        nan_value_counts=None if dv else dict(written.nan_value_counts or {}),
        lower_bounds=None if dv else written.lower_bounds,
        upper_bounds=None if dv else written.upper_bounds,
        split_offsets=list(written.split_offsets) if written.split_offsets else None,
        equality_ids=list(written.equality_ids) if written.equality_ids else None,
        sort_order_id=None,
    )
    df.spec_id = written.spec_id
    return df


def from_data_file(df: DataFile, spec_id: int) -> WrittenFile:
    """A data file pyiceberg's writer produced (for spec ``spec_id``), as a :class:`WrittenFile`."""
    metrics = {
        "column_sizes": df.column_sizes,
        "value_counts": df.value_counts,
        "null_value_counts": df.null_value_counts,
        "lower_bounds": df.lower_bounds,
        "upper_bounds": df.upper_bounds,
        "split_offsets": df.split_offsets,
        "nan_value_counts": df.nan_value_counts,
    }
    partition = df.partition
    return written_file(
        FileContent(int(df.content)),
        df.file_path,
        df.record_count,
        df.file_size_in_bytes,
        spec_id=spec_id,
        partition=tuple(partition[i] for i in range(len(partition))) if partition is not None else (),
        metrics=metrics,
    )
