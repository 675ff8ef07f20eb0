"""Iceberg's reserved metadata columns that a scan can project."""

from __future__ import annotations

from pyiceberg.types import BooleanType, LongType, NestedField, StringType

__all__ = [
    "DELETED",
    "FILE_PATH",
    "LAST_UPDATED_SEQUENCE_NUMBER",
    "LINEAGE_COLUMNS",
    "METADATA_COLUMNS",
    "ROW_ID",
    "ROW_POSITION",
]

# Ids as Iceberg Java's MetadataColumns (Integer.MAX_VALUE - 1, - 2, - 3).
FILE_PATH = NestedField(
    2147483646, "_file", StringType(), required=True, doc="Path of the file a row is read from"
)
ROW_POSITION = NestedField(
    2147483645, "_pos", LongType(), required=True, doc="Ordinal position of a row in its file"
)
DELETED = NestedField(
    2147483644, "_deleted", BooleanType(), required=True, doc="Whether the row has been deleted"
)

# v3 row lineage (spec "Row Lineage"; Java's MetadataColumns.ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER):
# optional in data files, where a null (or absent) value is inherited from the file's metadata
ROW_ID = NestedField(2147483540, "_row_id", LongType(), required=False, doc="Implicit row ID")
LAST_UPDATED_SEQUENCE_NUMBER = NestedField(
    2147483539,
    "_last_updated_sequence_number",
    LongType(),
    required=False,
    doc="Sequence number when the row was last updated",
)

LINEAGE_COLUMNS = {f.name: f for f in (ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER)}
METADATA_COLUMNS = {
    f.name: f for f in (FILE_PATH, ROW_POSITION, DELETED, ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER)
}
