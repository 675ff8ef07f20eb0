"""Slim, picklable descriptors of data and delete files as a scan task carries them.

Planning builds these from manifest entries; readers on any engine (threads or Spark
executors) receive only these, never pyiceberg metadata objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = ["DataFileRef", "DeleteFileRef", "FileContent", "WrittenFile"]


class FileContent(IntEnum):
    """The ``content`` field of a manifest entry's data_file struct."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


@dataclass(frozen=True, slots=True)
class DataFileRef:
    """A data file with what reading it needs: its data sequence number and partition."""

    path: str
    file_format: str
    record_count: int
    file_size_in_bytes: int
    spec_id: int
    partition: tuple[Any, ...]
    data_sequence_number: int
    split_offsets: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class DeleteFileRef:
    """A position delete file, deletion vector, or equality delete file."""

    content: FileContent
    path: str
    file_format: str
    record_count: int
    file_size_in_bytes: int
    spec_id: int
    partition: tuple[Any, ...]
    data_sequence_number: int
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
    """Data files written by pyiceberg's writer carry them; delete files have no float column."""
