"""Manifest-entry ``DataFile`` objects for files icemor wrote."""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from icemor.spec.files import FileContent, WrittenFile

__all__ = ["from_data_file", "to_data_file"]


def to_data_file(written: WrittenFile) -> DataFile:
    """The manifest ``data_file`` struct of a written data or delete file (Parquet)."""
    df = DataFile.from_args(
        content=DataFileContent(int(written.content)),
        file_path=written.path,
        file_format=FileFormat.PARQUET,
        partition=Record(*written.partition),
        record_count=written.record_count,
        file_size_in_bytes=written.file_size_in_bytes,
        column_sizes=written.column_sizes,
        value_counts=written.value_counts,
        null_value_counts=written.null_value_counts,
        nan_value_counts=dict(written.nan_value_counts or {}),
        lower_bounds=written.lower_bounds,
        upper_bounds=written.upper_bounds,
        split_offsets=list(written.split_offsets) if written.split_offsets else None,
        equality_ids=list(written.equality_ids) if written.equality_ids else None,
        sort_order_id=None,
    )
    df.spec_id = written.spec_id
    return df


def from_data_file(df: DataFile, spec_id: int) -> WrittenFile:
    """A data file pyiceberg's writer produced (for spec ``spec_id``), as a :class:`WrittenFile`."""
    return WrittenFile(
        content=FileContent(int(df.content)),
        path=df.file_path,
        record_count=df.record_count,
        file_size_in_bytes=df.file_size_in_bytes,
        spec_id=spec_id,
        partition=tuple(df.partition[i] for i in range(len(df.partition)))
        if df.partition is not None
        else (),
        column_sizes=dict(df.column_sizes or {}),
        value_counts=dict(df.value_counts or {}),
        null_value_counts=dict(df.null_value_counts or {}),
        lower_bounds=dict(df.lower_bounds or {}),
        upper_bounds=dict(df.upper_bounds or {}),
        split_offsets=tuple(df.split_offsets) if df.split_offsets else None,
        nan_value_counts=dict(df.nan_value_counts or {}),
    )
