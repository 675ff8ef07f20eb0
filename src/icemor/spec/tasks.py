"""Scan task descriptors: what planning hands to the engines and the engines hand to readers.

All are slim and picklable (Spark executors receive them), built from :mod:`icemor.spec.files`.
"""

from __future__ import annotations

from dataclasses import dataclass

from icemor.spec.files import DataFileRef, DeleteFileRef  # noqa: TC001 (dataclass fields)

__all__ = ["CombinedScanTask", "FileScanTask", "PlannedFile"]


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A data file selected by a scan and every delete file that applies to it."""

    data_file: DataFileRef
    delete_files: tuple[DeleteFileRef, ...]


@dataclass(frozen=True, slots=True)
class FileScanTask:
    """Read bytes [start, start + length) of a data file (whole row groups) with its deletes."""

    data_file: DataFileRef
    delete_files: tuple[DeleteFileRef, ...]
    start: int
    length: int

    @property
    def is_whole_file(self) -> bool:
        return self.start == 0 and self.length >= self.data_file.file_size_in_bytes

    def size_in_bytes(self) -> int:
        return self.length + sum(d.content_size_in_bytes or d.file_size_in_bytes for d in self.delete_files)


@dataclass(frozen=True, slots=True)
class CombinedScanTask:
    """Pieces one worker reads in a row; a Spark partition or a thread's unit of work."""

    tasks: tuple[FileScanTask, ...]

    def size_in_bytes(self) -> int:
        return sum(t.size_in_bytes() for t in self.tasks)
