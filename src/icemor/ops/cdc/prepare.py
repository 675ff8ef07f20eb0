"""Check a CDC batch against its table before anything is written, and decide how it is written:
:func:`prepare_changes` (the :class:`~icemor.ops.cdc.types.ChangeContext` every unit writes by)
and :func:`delete_mode`."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.types import DoubleType, FloatType, PrimitiveType

from icemor._compat.pyiceberg import check_arrow_schema_compatible
from icemor.commit.schema import unpartitioned_spec_id
from icemor.exceptions import InvalidArgumentError
from icemor.io.changes import CHANGE_COLUMNS, CHANGE_ORDINAL, CHANGE_TYPE
from icemor.ops.append import downcast_ns_timestamps, schema_mismatch_message
from icemor.ops.cdc.options import parse_delete_mode
from icemor.ops.cdc.types import (
    DELETE_MODE_PROPERTY,
    EQUALITY,
    OP_HELP,
    OPS,
    POSITION,
    UNSET_SPEC,
    UPDATE_BEFORE,
    V4_READY_PROPERTY,
    ChangeContext,
)
from icemor.ops.key_lookup import plan_lookup
from icemor.ops.units import check_writable
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.types import NestedField

    from icemor.ops.cdc.options import ChangeOptions

__all__ = ["delete_mode", "normalized", "prepare_changes"]


def prepare_changes(
    table: PyIcebergTable,
    schema: pa.Schema,
    options: ChangeOptions,
    *,
    sequence_column: str | None = None,
    rows: pa.Table | None = None,
) -> ChangeContext:
    """Check the table, the key and the changes' schema; decide how the batch is written.

    ``options.deletes``: ``equality``, ``position`` or None (:func:`delete_mode` decides). Position
    mode plans the key lookup over the live files of the table's current snapshot.

    ``rows``, when the caller holds them (the local engine), are checked for NULL keys before the
    column types are: a NULL makes pandas turn an integer column into floats, and the type
    mismatch would hide the NULL.

    Raises:
        InvalidArgumentError: A v1 or copy-on-write table, a bad key (unknown, nested, float,
            optional, contradicting the table's identifier fields), a missing op/order/key
            column, or columns that do not fit the table.
    """
    check_writable(table)
    metadata = table.metadata
    mode = delete_mode(metadata, options.deletes)
    name = ".".join(table.name())
    tschema = metadata.schema()
    key = options.key
    fields = _key_fields(tschema, options, name)
    key_ids = [f.field_id for f in fields]
    table_columns = {f.name for f in tschema.fields}
    # the change feed's own columns (table.changes, readStream's feed): never table columns
    feed = [c for c in CHANGE_COLUMNS if c in schema.names and c not in table_columns]
    op_column = options.op_column
    if op_column == "op" and op_column not in schema.names and CHANGE_TYPE in feed:
        op_column = CHANGE_TYPE
    _check_columns(schema, options, op_column)
    if rows is not None:
        required = {f.name for f in fields if f.required}
        _check_null_keys(rows, key, op_column, options.allow_nullable_key, required)
    dropped = [op_column, *(c for c in feed if c != op_column)]
    if options.order_by is not None and options.order_by not in table_columns:
        dropped.append(options.order_by)
    if sequence_column is not None:
        dropped.append(sequence_column)
    order_column = options.order_by if options.order_by is not None else sequence_column
    # a feed's changes are in _change_ordinal's order; within one snapshot a key's DELETE comes
    # before its INSERT (a feed read without the key shows an update as the two)
    feed_order = options.order_by is None and op_column == CHANGE_TYPE and CHANGE_ORDINAL in feed
    if feed_order:
        order_column = CHANGE_ORDINAL
    _check_fits(metadata, schema, dropped, name)

    spec = metadata.spec()
    props = dict(metadata.properties)
    eq_partitioned = spec.is_unpartitioned() or _key_decides_partition(table, spec, set(key_ids))
    global_spec_id = spec.spec_id if spec.is_unpartitioned() else _unpartitioned_spec_id(metadata)
    file_schema = sanitize_column_names(tschema)
    lookup = None
    if mode == POSITION:
        # the rows the keys hit are found in the live files of the snapshot the batch starts from
        job = prepare_scan(metadata, table.io, selected_fields=("_pos",))
        opts = replace(job.options, projected_schema=Schema(), file_column=False)
        lookup = plan_lookup(
            metadata, table.io, job.live_files(), key_names=key, key_ids=key_ids, options=opts
        )
    return ChangeContext(
        schema=tschema,
        file_schema=file_schema,
        key_schema=Schema(*[file_schema.find_field(i) for i in key_ids]),
        spec=spec,
        format_version=metadata.format_version,
        key=key,
        key_ids=tuple(key_ids),
        op_column=op_column,
        order_column=order_column,
        feed_order=feed_order,
        dropped=tuple(dropped),
        nullable_key=options.allow_nullable_key,
        required=tuple(f.name for f in tschema.fields if f.required),
        # the data directory as the table's location provider lays it out (write.data.path etc.)
        data_dir=table.location_provider().new_data_location("x").rsplit("/", 1)[0],
        eq_partitioned=eq_partitioned,
        global_spec_id=global_spec_id,
        commit_id=uuid.uuid4().hex[:12],
        properties=props,
        target_file_size=P.int_property(
            props, P.WRITE_TARGET_FILE_SIZE_BYTES, P.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
        delete_target_file_size=P.int_property(
            props, P.DELETE_TARGET_FILE_SIZE_BYTES, P.DELETE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
        row_group_bytes=P.int_property(
            props, P.PARQUET_ROW_GROUP_SIZE_BYTES, P.PARQUET_ROW_GROUP_SIZE_BYTES_DEFAULT
        ),
        compression=props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT),
        delete_mode=mode,
        lookup=lookup,
    )


def _key_fields(tschema: Schema, options: ChangeOptions, name: str) -> list[NestedField]:
    """The table fields of the key, checked: top-level, primitive, the identifier fields if the
    table has them, and (unless ``allow_nullable_key``) required and not float/double."""
    key = options.key
    top = {f.name: f for f in tschema.fields}
    if unknown := [k for k in key if k not in top]:
        msg = f"key column {unknown[0]!r} is not a top-level column of {name}"
        raise InvalidArgumentError(msg)
    fields = [top[k] for k in key]
    existing = set(tschema.identifier_field_ids)
    if existing and existing != {f.field_id for f in fields}:
        names = ", ".join(sorted(tschema.find_column_name(i) or str(i) for i in existing))
        msg = f"key ({', '.join(key)}) contradicts the identifier fields of {name} ({names})"
        raise InvalidArgumentError(msg)
    for f in fields:
        if not isinstance(f.field_type, PrimitiveType):
            msg = f"key column {f.name!r} is a {f.field_type}: keys must be primitive columns"
            raise InvalidArgumentError(msg)
        if not options.allow_nullable_key and isinstance(f.field_type, FloatType | DoubleType):
            msg = (
                f"key column {f.name!r} is a {f.field_type}: float/double keys compare unreliably (NaN, "
                "-0.0) and cannot be identifier fields; pass allow_nullable_key (--allow-nullable-key) to "
                "use it anyway"
            )
            raise InvalidArgumentError(msg)
        if not options.allow_nullable_key and not f.required:
            msg = (
                f"key column {f.name!r} is optional (nullable): identifier fields must be required; make it "
                "NOT NULL, or pass allow_nullable_key (--allow-nullable-key) to key on it anyway"
            )
            raise InvalidArgumentError(msg)
    return fields


def _check_columns(schema: pa.Schema, options: ChangeOptions, op_column: str) -> None:
    """The changes have the op column (of strings, not a key column), the order and key columns."""
    columns = set(schema.names)
    if op_column not in columns:
        msg = f"the changes have no op column {op_column!r} (columns: {', '.join(schema.names)})"
        raise InvalidArgumentError(msg)
    if op_column in options.key:
        msg = f"the op column {op_column!r} cannot be a key column"
        raise InvalidArgumentError(msg)
    op_type = schema.field(op_column).type
    if pa.types.is_dictionary(op_type):
        op_type = op_type.value_type
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view, pa.types.is_null)
    # Arrow's null type: an empty pandas batch (or an op column of NULLs, refused per row)
    if not any(is_string(op_type) for is_string in strings):
        msg = f"op column {op_column!r} is {op_type}: it must hold strings ({OP_HELP})"
        raise InvalidArgumentError(msg)
    if options.order_by is not None and options.order_by not in columns:
        msg = f"the changes have no order column {options.order_by!r}"
        raise InvalidArgumentError(msg)
    if missing := [k for k in options.key if k not in columns]:
        msg = f"the changes have no key column {missing[0]!r}"
        raise InvalidArgumentError(msg)


def delete_mode(metadata: TableMetadata, deletes: str | None = None) -> str:
    """How a CDC batch deletes old rows: ``deletes`` if given, else the table property
    ``icemor.cdc.delete-mode``, else ``position`` on tables with ``icemor.v4-ready=true`` and
    ``equality`` on the others (a stream's compaction keeps up with equality deletes; position
    deletes written every second conflict with every rewrite of the files they hit).

    Raises:
        InvalidArgumentError: An unknown mode, or ``equality`` on a table marked v4-ready.
    """
    props = metadata.properties
    v4_ready = P.bool_property(props, V4_READY_PROPERTY, False)
    given = deletes if deletes is not None else props.get(DELETE_MODE_PROPERTY)
    if given is None:
        return POSITION if v4_ready else EQUALITY
    where = "deletes" if deletes is not None else f"table property {DELETE_MODE_PROPERTY}"
    mode = parse_delete_mode(given, where)
    if mode == EQUALITY and v4_ready:
        msg = (
            f"the table has {V4_READY_PROPERTY}=true: format v4 forbids new equality deletes, so icemor "
            f"writes none; apply the changes with deletes='position' (--deletes position)"
        )
        raise InvalidArgumentError(msg)
    return mode


def _check_null_keys(
    rows: pa.Table, key: Sequence[str], op_column: str, allow_nullable_key: bool, required: set[str]
) -> None:
    """Refuse a NULL key (unless allowed) in a row that is not an update-before (those are
    ignored), naming the column and the first such row (numbered from 0, in input order)."""
    ignored = None
    for k in key:
        column = rows.column(k)
        if not column.null_count or (allow_nullable_key and k not in required):
            continue
        if ignored is None:
            ignored = _update_before_rows(rows.column(op_column))
        bad = pc.and_(pc.is_null(column), pc.invert(ignored))
        count = pc.sum(bad).as_py() or 0
        if count:
            row = pc.index(bad, True).as_py()
            hint = "" if k in required else " (allow_nullable_key / --allow-nullable-key accepts them)"
            msg = f"key column {k!r} is NULL in row {row} of the changes ({count} row(s) in all){hint}"
            raise InvalidArgumentError(msg)


def _update_before_rows(op: pa.ChunkedArray) -> pa.ChunkedArray:
    """Where ``op`` is an update-before spelling (``-U``, ``update_before``; case and blanks aside)."""
    if pa.types.is_null(op.type):
        return pa.chunked_array([pc.fill_null(pa.nulls(len(op), pa.bool_()), False)])
    if pa.types.is_dictionary(op.type):
        op = op.cast(op.type.value_type)
    spellings = pa.array([s for s, code in OPS.items() if code == UPDATE_BEFORE])
    spelled = pc.utf8_lower(pc.utf8_trim_whitespace(op.cast(pa.string())))
    return pc.fill_null(pc.is_in(spelled, value_set=spellings), False)


def _check_fits(metadata: TableMetadata, schema: pa.Schema, dropped: Sequence[str], name: str) -> None:
    """The table columns of the changes must fit the table; NULLs in required ones are checked per row."""
    tschema = metadata.schema()
    required = {f.name for f in tschema.fields if f.required}
    fields = [
        # nullability is checked on the rows that are written (a delete row may carry NULLs)
        f.with_nullable(False) if f.name in required else f
        for f in normalized(downcast_ns_timestamps(schema), tschema)
        if f.name not in dropped
    ]
    try:
        check_arrow_schema_compatible(tschema, pa.schema(fields), format_version=metadata.format_version)
    except ValueError as e:
        msg = f"the changes do not fit the schema of {name}: {schema_mismatch_message(e)}"
        raise InvalidArgumentError(msg) from e


def normalized(schema: pa.Schema, table_schema: Schema) -> pa.Schema:
    """The changes' schema as written: zoned timestamps in UTC (Spark hands them in its session
    zone; the instant is the same), and all-NULL columns (Arrow's null type, e.g. a batch of
    deletes built from Python lists) typed as the table's column."""
    top = {f.name: f for f in table_schema.fields}
    out = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            f = f.with_type(pa.timestamp(f.type.unit, tz="UTC"))
        elif pa.types.is_null(f.type) and f.name in top:
            f = f.with_type(schema_to_pyarrow(top[f.name].field_type, include_field_ids=False))
        out.append(f)
    return pa.schema(out, metadata=schema.metadata)


def _key_decides_partition(table: PyIcebergTable, spec: PartitionSpec, key_ids: set[int]) -> bool:
    """Every partition field is a transform of a key column, and every live data file uses this spec.

    Then a key's older rows all live in the partition its values map to: an equality delete in
    that partition reaches them. Data files of an older spec would not be reached (a partitioned
    delete applies to its own spec and partition only).
    """
    if not all(f.source_id in key_ids for f in spec.fields):
        return False
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return True
    return all(
        m.partition_spec_id == spec.spec_id for m in snapshot.manifests(table.io) if int(m.content) == 0
    )


def _unpartitioned_spec_id(metadata: TableMetadata) -> int:
    spec_id = unpartitioned_spec_id(metadata)
    return UNSET_SPEC if spec_id is None else spec_id
