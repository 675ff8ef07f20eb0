"""Find and extract columns of an Arrow batch by Iceberg field id (also nested, also dropped)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.types import NestedField, StructType

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

__all__ = ["field_path", "leaf_column", "top_level_names"]


def field_path(schema: Schema | StructType, field_id: int) -> list[str] | None:
    """Names from the top-level column down to ``field_id`` through structs, or None if absent."""
    struct = schema.as_struct() if not isinstance(schema, StructType) else schema
    for field in struct.fields:
        if field.field_id == field_id:
            return [field.name]
        if isinstance(field.field_type, StructType):
            sub = field_path(field.field_type, field_id)
            if sub is not None:
                return [field.name, *sub]
    return None


def top_level_names(schema: Schema, field_ids: set[int]) -> list[str]:
    """Top-level column names (in file order) needed to read ``field_ids``."""
    wanted = set()
    for fid in field_ids:
        path = field_path(schema, fid)
        if path is not None:
            wanted.add(path[0])
    return [f.name for f in schema.as_struct().fields if f.name in wanted]


def leaf_column(
    batch: pa.RecordBatch | pa.Table, file_schema: Schema, field_id: int, field_type: IcebergType
) -> pa.Array | pa.ChunkedArray:
    """The values of ``field_id`` from ``batch``, cast to the table type; nulls if the file lacks it.

    A NULL parent struct makes the child NULL, as Iceberg Java's accessors do.
    """
    target = schema_to_pyarrow(field_type)
    path = field_path(file_schema, field_id)
    if path is None:
        return pa.nulls(batch.num_rows, type=target)
    arr = batch.column(path[0])
    for name in path[1:]:
        arr = pc.struct_field(arr, name)
    if arr.type != target:
        arr = arr.cast(target)
    return arr


def nested_field(schema: Schema, field_id: int) -> NestedField:
    return schema.find_field(field_id)
