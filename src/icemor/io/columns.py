"""Find and extract columns of an Arrow batch by Iceberg field id (also nested, also dropped)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.types import StructType

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

__all__ = [
    "ancestors_null",
    "column_by_path",
    "equality_key_columns",
    "field_path",
    "leaf_column",
    "top_level_names",
]


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


def ancestors_null(
    batch: pa.RecordBatch | pa.Table, file_schema: Schema, ancestors: tuple[int, ...]
) -> pa.Array:
    """True where a struct enclosing a nested field is NULL (or absent from the file)."""
    n = batch.num_rows
    out: pa.Array | None = None
    for ancestor in ancestors:
        path = field_path(file_schema, ancestor)
        if path is None:
            return pa.array(np.ones(n, dtype=bool))
        arr = batch.column(path[0])
        for name in path[1:]:
            arr = pc.struct_field(arr, name)
        nulls = arr.is_null()
        out = nulls if out is None else pc.or_(out, nulls)
    return out if out is not None else pa.array(np.zeros(n, dtype=bool))


def equality_key_columns(
    batch: pa.RecordBatch | pa.Table,
    file_schema: Schema,
    ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    field_parents: Mapping[int, tuple[int, ...]],
    constants: Mapping[int, Any] | None = None,
) -> list[pa.Array | pa.ChunkedArray]:
    """The key columns equality deletes compare, for data and delete rows alike.

    One column per equality id, then, for each nested id, whether an enclosing struct is NULL:
    Iceberg Java compares the projected struct, so a NULL struct is not equal to a struct
    whose field is NULL. ``constants``: identity-partition values the file does not store.
    """
    cols: list[pa.Array | pa.ChunkedArray] = []
    for fid in ids:
        if constants and fid in constants and fid not in file_schema.field_ids:
            target = schema_to_pyarrow(field_types[fid])
            cols.append(pa.nulls(batch.num_rows, target).fill_null(constants[fid]))
        else:
            cols.append(leaf_column(batch, file_schema, fid, field_types[fid]))
    cols.extend(
        ancestors_null(batch, file_schema, field_parents[fid]) for fid in ids if field_parents.get(fid)
    )
    return cols


def column_by_path(rows: pa.Table, path: str) -> pa.Array:
    """A column by dotted path (a top-level name first: names may contain dots)."""
    if path in rows.column_names:
        return rows.column(path).combine_chunks()
    head, _, rest = path.partition(".")
    arr: pa.Array = rows.column(head).combine_chunks()
    for part in rest.split("."):
        arr = pc.struct_field(arr, part)
    return arr
