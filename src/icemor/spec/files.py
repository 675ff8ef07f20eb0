"""Slim, picklable descriptors of data and delete files as a scan task carries them.

Planning builds these from manifest entries; readers on any engine (threads or Spark
executors) receive only these, never pyiceberg metadata objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ContentFileRef", "DataFileRef", "DeleteFileRef", "FileContent", "WrittenFile", "written_file"]


class FileContent(IntEnum):
    """The ``content`` field of a manifest entry's data_file struct."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


@dataclass(frozen=True, slots=True)
class ContentFileRef:
    """What every file a scan task names has: where it is, its size, its partition and sequence."""

    path: str
    file_format: str
    record_count: int
    file_size_in_bytes: int
    spec_id: int
    partition: tuple[Any, ...]
    data_sequence_number: int


@dataclass(frozen=True, slots=True)
class DataFileRef(ContentFileRef):
    """A data file with what reading it needs: its data sequence number and partition."""

    split_offsets: tuple[int, ...] | None = None
    first_row_id: int | None = None
    """v3: the row id of the file's first row (explicit or inherited); None before v3."""


@dataclass(frozen=True, slots=True)
class DeleteFileRef(ContentFileRef):
    """A position delete file, deletion vector, or equality delete file."""

    content: FileContent
    equality_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None
    content_offset: int | None = None
    content_size_in_bytes: int | None = None

    @property
    def is_deletion_vector(self) -> bool:
        """A v3 deletion vector: a Puffin blob, addressed by offset and size."""
        return self.content == FileContent.POSITION_DELETES and self.file_format.upper() == "PUFFIN"

    @property
    def kind(self) -> str:
        """A short human name: ``position``, ``dv`` or ``equality``."""
        if self.content == FileContent.EQUALITY_DELETES:
            return "equality"
        return "dv" if self.is_deletion_vector else "position"


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A file icemor wrote and has not committed yet: what its manifest entry needs.

    Picklable, so Spark executors can return it to the driver. Bounds are serialized as the
    spec's single-value binary form.
    """

    content: FileContent
    path: str
    record_count: int
    file_size_in_bytes: int
    spec_id: int
    partition: tuple[Any, ...]
    column_sizes: dict[int, int]
    value_counts: dict[int, int]
    null_value_counts: dict[int, int]
    lower_bounds: dict[int, bytes]
    upper_bounds: dict[int, bytes]
    referenced_data_file: str | None = None
    equality_ids: tuple[int, ...] = ()
    split_offsets: tuple[int, ...] | None = None
    nan_value_counts: dict[int, int] | None = None
    """Data files' footer metrics carry them; delete files have no float column."""
    file_format: str = "PARQUET"
    """``PUFFIN`` for a deletion vector."""
    content_offset: int | None = None
    """A deletion vector's blob offset in its Puffin file."""
    content_size_in_bytes: int | None = None
    """A deletion vector's blob length."""

    @property
    def is_deletion_vector(self) -> bool:
        """A v3 deletion vector: one Puffin blob for one data file."""
        return self.content == FileContent.POSITION_DELETES and self.file_format == "PUFFIN"


def written_file(
    content: FileContent,
    path: str,
    record_count: int,
    file_size_in_bytes: int,
    *,
    spec_id: int,
    partition: tuple[Any, ...],
    metrics: Mapping[str, Any],
    referenced_data_file: str | None = None,
    equality_ids: tuple[int, ...] = (),
) -> WrittenFile:
    """The :class:`WrittenFile` of a data, position-delete or equality-delete file: the one builder.

    ``metrics`` has the keys of pyiceberg's serialized statistics (``column_sizes``,
    ``value_counts``, ``null_value_counts``, ``lower_bounds``, ``upper_bounds``, and for data
    files ``nan_value_counts`` and ``split_offsets``); a missing one is empty. Delete files
    carry neither NaN counts (no float column) nor split offsets.
    """
    data = content == FileContent.DATA
    split_offsets = metrics.get("split_offsets") if data else None
    return WrittenFile(
        content=content,
        path=path,
        record_count=record_count,
        file_size_in_bytes=file_size_in_bytes,
        spec_id=spec_id,
        partition=partition,
        column_sizes=dict(metrics.get("column_sizes") or {}),
        value_counts=dict(metrics.get("value_counts") or {}),
        null_value_counts=dict(metrics.get("null_value_counts") or {}),
        lower_bounds=dict(metrics.get("lower_bounds") or {}),
        upper_bounds=dict(metrics.get("upper_bounds") or {}),
        referenced_data_file=referenced_data_file,
        equality_ids=equality_ids,
        split_offsets=tuple(split_offsets) if split_offsets else None,
        nan_value_counts=dict(metrics.get("nan_value_counts") or {}) if data else None,
    )
