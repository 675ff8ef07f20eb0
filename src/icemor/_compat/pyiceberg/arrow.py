"""pyiceberg's Arrow layer: projection by field id, schema conversion and the write-compatibility check.

Borrowed: the projection visitor of ``_to_requested_schema`` (``ArrowProjectionVisitor`` with
``ArrowAccessor``, ``visit_with_partner`` and ``ParquetFormatModel``), subclassed to keep NULL
lists and maps; ``_get_column_projection_values``, ``_pyarrow_to_schema_without_ids`` and
``_check_pyarrow_schema_compatible``.
"""

from __future__ import annotations

from contextlib import redirect_stdout
from io import StringIO
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.io import pyarrow as _pyarrow_io
from pyiceberg.schema import visit_with_partner

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema

__all__ = [
    "arrow_schema_to_iceberg_without_ids",
    "check_arrow_schema_compatible",
    "partition_constants",
    "to_file_schema",
    "to_requested_schema",
]

# (module, name) of every internal used below; tests/_compat/test_pyiceberg.py imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.io.pyarrow", "ArrowProjectionVisitor"),
    ("pyiceberg.io.pyarrow", "ArrowProjectionVisitor.list"),
    ("pyiceberg.io.pyarrow", "ArrowProjectionVisitor.map"),
    ("pyiceberg.io.pyarrow", "ArrowAccessor"),
    ("pyiceberg.schema", "visit_with_partner"),
    ("pyiceberg.io.pyarrow", "ParquetFormatModel"),
    ("pyiceberg.io.pyarrow", "_get_column_projection_values"),
    ("pyiceberg.io.pyarrow", "_pyarrow_to_schema_without_ids"),
    ("pyiceberg.io.pyarrow", "_check_pyarrow_schema_compatible"),
)


class _NullKeepingProjection(_pyarrow_io.ArrowProjectionVisitor):
    """pyiceberg's projection visitor, except that a NULL list or map stays NULL.

    Why: pyiceberg 0.12 rebuilds a list whose elements are structs (and a map whose values
    are structs) from its offsets alone, its workaround for apache/arrow#38809; the rebuilt
    array has no validity bitmap, so every NULL ``array<struct<...>>`` / ``map<..., struct>``
    became ``[]`` / ``{}``, on read and on write (apache/iceberg-python#3833, open). The Parquet
    reader decodes those NULLs correctly; this puts the source array's NULLs back.
    """

    def list(
        self, list_type: Any, list_array: pa.Array | None, value_array: pa.Array | None
    ) -> pa.Array | None:
        return _with_nulls_of(super().list(list_type, list_array, value_array), list_array)

    def map(
        self,
        map_type: Any,
        map_array: pa.Array | None,
        key_result: pa.Array | None,
        value_result: pa.Array | None,
    ) -> pa.Array | None:
        return _with_nulls_of(super().map(map_type, map_array, key_result, value_result), map_array)


def _with_nulls_of(out: pa.Array | None, source: pa.Array | None) -> pa.Array | None:
    """``out`` (a list or map array projected from ``source``) with ``source``'s NULL slots."""
    if out is None or source is None or source.null_count == out.null_count:
        return out  # nothing lost: pyiceberg only ever drops all of the NULLs, never moves them
    if not isinstance(out, pa.ListArray | pa.LargeListArray | pa.MapArray):
        return out  # fixed-size lists are cast, which keeps their NULLs
    offsets = out.offsets
    if offsets.offset:  # Arrow refuses a validity mask over sliced offsets: copy the few ints
        offsets = pa.array(offsets.to_numpy(zero_copy_only=False), offsets.type)
    mask = source.is_null()
    if isinstance(out, pa.MapArray):
        return pa.MapArray.from_arrays(offsets, out.keys, out.items, type=out.type, mask=mask)
    return type(out).from_arrays(offsets, out.values, type=out.type, mask=mask)


def _project(
    requested: Schema,
    file_schema: Schema,
    batch: pa.RecordBatch,
    **options: Any,
) -> pa.RecordBatch:
    """pyiceberg's ``_to_requested_schema`` with :class:`_NullKeepingProjection` as its visitor."""
    struct_array = visit_with_partner(
        requested,
        batch,
        _NullKeepingProjection(file_schema, **options),
        _pyarrow_io.ArrowAccessor(file_schema),
    )
    return pa.RecordBatch.from_struct_array(struct_array)


def to_requested_schema(
    requested: Schema,
    file_schema: Schema,
    batch: pa.RecordBatch,
    *,
    downcast_ns_timestamp_to_us: bool,
    missing_fields: dict[int, Any],
) -> pa.RecordBatch:
    """Project a batch read with ``file_schema`` onto ``requested`` by field id.

    Why: pyiceberg's projection handles renames, added columns (nulls or initial defaults),
    type promotions and identity-partition constants exactly as its own reader does; there is
    no public per-batch entry point. Its visitor is used with NULL lists and maps kept
    (:class:`_NullKeepingProjection`).
    """
    return _project(
        requested,
        file_schema,
        batch,
        downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us,
        projected_missing_fields=missing_fields,
        allow_timestamp_tz_mismatch=True,
    )


def to_file_schema(
    table_schema: Schema, file_schema: Schema, data: pa.Table, *, format_version: int
) -> pa.Table:
    """``data`` (columns matched to ``table_schema`` by name) as a file of ``file_schema`` is written.

    ``file_schema`` holds fields of ``table_schema`` (the same ids; names may be sanitized, or a
    subset). Columns get their field ids (``PARQUET:field_id``), order and Iceberg's Arrow
    types; missing optional columns become NULL; ``timestamp[ns]`` becomes microseconds; NULL
    lists and maps stay NULL (:class:`_NullKeepingProjection`).

    Why: pyiceberg's writer does this per write task with the same private projection; icemor
    writes its files itself (it must know each row's position) and needs the conversion alone.
    """
    task_schema = _pyarrow_io.pyarrow_to_schema(
        data.schema,
        name_mapping=table_schema.name_mapping,
        downcast_ns_timestamp_to_us=True,
        format_version=format_version,  # type: ignore[arg-type]
    )
    batches = data.to_batches() or [pa.RecordBatch.from_pylist([], schema=data.schema)]
    parquet = _pyarrow_io.ParquetFormatModel()
    return pa.Table.from_batches(
        [
            _project(
                file_schema,
                task_schema,
                b,
                downcast_ns_timestamp_to_us=True,
                include_field_ids=True,
                format_model=parquet,
            )
            for b in batches
        ]
    )


def partition_constants(
    data_file: DataFile, table_schema: Schema, spec: PartitionSpec, file_field_ids: set[int]
) -> dict[int, Any]:
    """Values of identity-partition fields the data file does not store (imported files).

    Why: pyiceberg's reader decides these with the spec's column-projection rules; reusing it
    keeps our reads identical to pyiceberg's for such files.
    """
    return _pyarrow_io._get_column_projection_values(
        data_file, table_schema, table_schema, spec, file_field_ids
    )


def arrow_schema_to_iceberg_without_ids(schema: pa.Schema, *, downcast_ns_timestamp_to_us: bool) -> Schema:
    """An Iceberg schema (ids still to assign) for an Arrow schema without field ids.

    Why: ``pyarrow_to_schema`` requires field ids or a name mapping; creating a table from a
    plain Parquet file needs the id-less conversion pyiceberg uses in ``create_table``.
    """
    return _pyarrow_io._pyarrow_to_schema_without_ids(
        schema, downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us
    )


def check_arrow_schema_compatible(
    table_schema: Schema, arrow_schema: pa.Schema, *, format_version: int
) -> None:
    """Raise ValueError unless Arrow data with ``arrow_schema`` can be written to ``table_schema``.

    Why: the rules (missing optional columns, promotions, name mapping) are pyiceberg's
    ``append``/``add_files`` check; icemor applies them before it writes anything. On a
    mismatch pyiceberg prints its explanation table to stdout as well as into the error: the
    print is swallowed here, the error keeps it.
    """
    with redirect_stdout(StringIO()):
        _pyarrow_io._check_pyarrow_schema_compatible(
            table_schema,
            arrow_schema,
            downcast_ns_timestamp_to_us=False,
            format_version=format_version,  # type: ignore[arg-type]
        )
