"""Scan-planning rules of the Iceberg spec for deciding which delete file applies to which data file.

Spec, "Scan Planning": a position delete file (or deletion vector) applies to a data file when
the data file's data sequence number is <= the delete file's; an equality delete file applies
when it is strictly <, because an equality delete must not delete rows added in its own commit
(those are deleted by position instead). Equality deletes of an unpartitioned spec are global.
"""

from __future__ import annotations

__all__ = [
    "DELETE_FILE_PATH_FIELD_ID",
    "DELETE_FILE_POS_FIELD_ID",
    "DELETE_FILE_ROW_FIELD_ID",
    "equality_delete_applies",
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
