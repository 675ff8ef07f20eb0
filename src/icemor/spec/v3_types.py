"""Iceberg v3 column types that icemor reads where pyiceberg does but cannot write yet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.schema import index_by_id
from pyiceberg.types import (
    GeographyType,
    GeometryType,
    TimestampNanoType,
    TimestamptzNanoType,
    UnknownType,
)

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

__all__ = ["describe_unwritable", "unwritable_columns"]

# pyiceberg 0.12's Arrow writer cannot produce these (nanosecond timestamps are downcast on
# write and then refused by its schema resolver; unknown, geometry and geography have no
# writer), so icemor refuses them by name instead of failing deep inside a write.
_UNWRITABLE = (TimestampNanoType, TimestamptzNanoType, UnknownType, GeometryType, GeographyType)


def unwritable_columns(schema: Schema) -> list[tuple[str, IcebergType]]:
    """(dotted column name, type) of each column whose type icemor cannot write data of."""
    return [
        (schema.find_column_name(fid) or f.name, f.field_type)
        for fid, f in index_by_id(schema).items()
        if isinstance(f.field_type, _UNWRITABLE)
    ]


def describe_unwritable(schema: Schema) -> str | None:
    """One phrase naming the unwritable columns, or None when every column can be written."""
    found = unwritable_columns(schema)
    if not found:
        return None
    cols = ", ".join(f"{name} ({t})" for name, t in found)
    return f"icemor cannot write data of these column types yet: {cols}"
