"""Manifest-entry ``DataFile`` objects for files icemor wrote."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

if TYPE_CHECKING:
    from icemor.spec.files import WrittenFile

__all__ = ["to_data_file"]


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
        nan_value_counts={},
        lower_bounds=written.lower_bounds,
        upper_bounds=written.upper_bounds,
        split_offsets=list(written.split_offsets) if written.split_offsets else None,
        equality_ids=list(written.equality_ids) if written.equality_ids else None,
        sort_order_id=None,
    )
    df.spec_id = written.spec_id
    return df
