"""Scan-planning rules of the Iceberg spec for deciding which delete file applies to which data file.

Spec, "Scan Planning": a position delete file (or deletion vector) applies to a data file when
the data file's data sequence number is <= the delete file's; an equality delete file applies
when it is strictly <, because an equality delete must not delete rows added in its own commit
(those are deleted by position instead). Equality deletes of an unpartitioned spec are global.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DELETE_FILE_PATH_FIELD_ID",
    "DELETE_FILE_POS_FIELD_ID",
    "DELETE_FILE_ROW_FIELD_ID",
    "equality_delete_applies",
    "file_path_bounds_contain",
    "file_path_bounds_scope",
    "position_delete_applies",
]

# Reserved field ids of the position delete file schema.
DELETE_FILE_PATH_FIELD_ID = 2147483546
DELETE_FILE_POS_FIELD_ID = 2147483545
DELETE_FILE_ROW_FIELD_ID = 2147483544


def position_delete_applies(data_sequence_number: int, delete_sequence_number: int) -> bool:
    """Position deletes and deletion vectors: data_seq <= delete_seq."""
    return data_sequence_number <= delete_sequence_number


def equality_delete_applies(data_sequence_number: int, delete_sequence_number: int) -> bool:
    """Equality deletes: data_seq < delete_seq (strictly)."""
    return data_sequence_number < delete_sequence_number


def file_path_bounds_scope(
    lower_bounds: Mapping[int, bytes] | None, upper_bounds: Mapping[int, bytes] | None
) -> str | None:
    """The one data file a position delete file references when its ``file_path`` bounds are equal.

    As Iceberg Java's ``ContentFileUtil.referencedDataFile``: v2 manifests have no
    ``referenced_data_file`` field, and equal bounds are how writers scope a file.
    """
    lo = (lower_bounds or {}).get(DELETE_FILE_PATH_FIELD_ID)
    hi = (upper_bounds or {}).get(DELETE_FILE_PATH_FIELD_ID)
    return lo.decode("utf-8") if lo is not None and lo == hi else None


def file_path_bounds_contain(
    path: str, lower_bounds: Mapping[int, bytes] | None, upper_bounds: Mapping[int, bytes] | None
) -> bool:
    """Whether a position delete file's ``file_path`` bounds admit ``path`` (missing bounds do)."""
    lo = (lower_bounds or {}).get(DELETE_FILE_PATH_FIELD_ID)
    hi = (upper_bounds or {}).get(DELETE_FILE_PATH_FIELD_ID)
    encoded = path.encode("utf-8")
    return (lo is None or lo <= encoded) and (hi is None or encoded <= hi)
