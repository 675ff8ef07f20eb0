"""Manifest-entry ``DataFile`` objects for files icemor wrote."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from icemor.spec.files import FileContent, WrittenFile

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["to_data_file", "to_written_file"]

V = TypeVar("V")


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


def _plain_dict(values: Mapping[int, V] | None) -> dict[int, V]:
    return dict(values) if values else {}


def to_written_file(data_file: DataFile, *, spec_id: int) -> WrittenFile:
    """The picklable form of a ``DataFile`` pyiceberg's writer returned (it drops its spec id when pickled).

    Executors return this to the driver, which turns it back with :func:`to_data_file`.
    """
    partition = data_file.partition
    return WrittenFile(
        content=FileContent(int(data_file.content)),
        path=data_file.file_path,
        record_count=data_file.record_count,
        file_size_in_bytes=data_file.file_size_in_bytes,
        spec_id=spec_id,
        partition=tuple(partition[i] for i in range(len(partition))) if partition is not None else (),
        column_sizes=_plain_dict(data_file.column_sizes),
        value_counts=_plain_dict(data_file.value_counts),
        null_value_counts=_plain_dict(data_file.null_value_counts),
        lower_bounds=_plain_dict(data_file.lower_bounds),
        upper_bounds=_plain_dict(data_file.upper_bounds),
        split_offsets=tuple(data_file.split_offsets) if data_file.split_offsets else None,
        nan_value_counts=_plain_dict(data_file.nan_value_counts),
    )
