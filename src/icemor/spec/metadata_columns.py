"""Iceberg's reserved metadata columns that a scan can project."""

from __future__ import annotations

from pyiceberg.types import BooleanType, LongType, NestedField, StringType

__all__ = ["DELETED", "FILE_PATH", "METADATA_COLUMNS", "ROW_POSITION"]

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

METADATA_COLUMNS = {f.name: f for f in (FILE_PATH, ROW_POSITION, DELETED)}
