"""The work of one unit of a CDC batch, a pure function of its rows (:func:`change_unit`): check
them, decide per key what is written and what is deleted (:func:`_plan`), and write the data
files, the position deletes of rows superseded within the batch and the equality deletes
(equality mode), or the data files and their key indexes, with the live positions of the keys
found (position mode). The local engine runs one unit per batch; Spark one per task."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.typedef import Record

from icemor._compat.pyiceberg import to_file_schema
from icemor.exceptions import InvalidArgumentError
from icemor.io.data_writer import DataFileTarget, file_positions, write_data_files_in_order
from icemor.io.equality_writer import write_equality_deletes
from icemor.io.key_index import build_key_index, remember_key_index, save_key_index
from icemor.io.puffin import write_deletion_vectors
from icemor.io.writers import DeleteFileTarget, write_position_deletes
from icemor.ops.cdc.cleanup import WrittenFiles
from icemor.ops.cdc.prepare import normalized
from icemor.ops.cdc.types import (
    DELETE,
    INSERT,
    OP_HELP,
    OPS,
    POSITION,
    UPDATE,
    UPDATE_BEFORE,
    ChangeContext,
    ChangeUnitResult,
)
from icemor.ops.key_lookup import find_positions, partition_rows, same_as_previous

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO

    from icemor.spec.files import WrittenFile

__all__ = ["change_unit"]


@dataclass
class _Plan:
    """The batch's rows sorted by (key, order), with what becomes of each."""

    rows: pa.Table
    ops: npt.NDArray[np.int8]
    written: npt.NDArray[np.bool_]
    """Inserted/updated rows: written to a data file."""
    superseded: npt.NDArray[np.bool_]
    """Written rows that a later change of their key, in the batch, replaces or deletes."""
    eq_rows: npt.NDArray[np.int64]
    """One row per key updated or deleted: the equality deletes."""
    counts: ChangeUnitResult
    """The op counts (the rest is filled in once written)."""


def change_unit(io: FileIO, ctx: ChangeContext, rows: pa.Table, unit: int) -> ChangeUnitResult:
    """Check and write one unit of a batch: every change of its keys (no other unit has them).

    Bad input is returned as ``error`` before anything is written; any other failure removes
    what the unit wrote and raises.
    """
    try:
        plan = _plan(ctx, rows)
    except InvalidArgumentError as e:
        return ChangeUnitResult(error=str(e))
    if ctx.delete_mode == POSITION:
        return _position_unit(io, ctx, plan, unit)
    prefix = f"{ctx.commit_id}-{unit:05d}"
    data = _data_rows(ctx, plan, plan.written)
    superseded = plan.superseded[plan.written]
    position_deletes = 0
    with WrittenFiles(io) as out:
        for n, (partition, take) in enumerate(_partitions(ctx, data)):
            directory = _directory(ctx, partition)
            files = _write_data(io, ctx, data.take(take), partition, f"{prefix}-d{n:04d}")
            out.add(files)
            gone = np.flatnonzero(superseded[take]).astype(np.int64)
            for j, (path, positions) in enumerate(file_positions(files, gone)):
                pos_target = DeleteFileTarget(
                    directory=directory,
                    prefix=f"{prefix}-d{n:04d}-{j:05d}-pos",
                    spec_id=ctx.spec.spec_id,
                    partition=partition,
                    target_file_size=ctx.delete_target_file_size,
                    compression=ctx.compression,
                    deletion_vectors=ctx.format_version >= 3,  # v3: a DV (the file is new: no older one)
                )
                write = write_deletion_vectors if pos_target.deletion_vectors else write_position_deletes
                out.add(write(io, pos_target, [(path, positions)]))
                position_deletes += len(positions)
        keys = plan.rows.select(list(ctx.key)).take(plan.eq_rows)
        if keys.num_rows:
            out.add(_write_equality(io, ctx, keys, prefix))
    return replace(
        plan.counts,
        written=tuple(out.files),
        rows_written=data.num_rows,
        equality_deletes=keys.num_rows,
        position_deletes=position_deletes,
    )


def _position_unit(io: FileIO, ctx: ChangeContext, plan: _Plan, unit: int) -> ChangeUnitResult:
    """Position mode: find the live rows of the keys updated or deleted, and write each key's
    final row (rows superseded within the batch are not written at all: no position delete for
    them). The positions go back to the driver, which writes them per data file."""
    assert ctx.lookup is not None
    keys = plan.rows.select(list(ctx.key)).take(plan.eq_rows)
    found = find_positions(io, ctx.lookup, keys) if keys.num_rows else None
    data = _data_rows(ctx, plan, plan.written & ~plan.superseded)
    prefix = f"{ctx.commit_id}-{unit:05d}"
    with WrittenFiles(io) as out:
        for n, (partition, take) in enumerate(_partitions(ctx, data)):
            rows = data.take(take)
            files = _write_data(io, ctx, rows, partition, f"{prefix}-d{n:04d}")
            out.add(files)
            out.add(paths=_index_written(io, ctx, files, rows))
    return replace(
        plan.counts,
        written=tuple(out.files),
        rows_written=data.num_rows,
        positions=tuple(found.positions.items()) if found is not None else (),
        sidecars=tuple(out.paths),
        files_searched=found.files_searched if found is not None else 0,
        lookup_seconds=found.seconds if found is not None else 0.0,
        keys=keys if keys.num_rows else None,
    )


def _data_rows(ctx: ChangeContext, plan: _Plan, keep: npt.NDArray[np.bool_]) -> pa.Table:
    """The rows ``keep`` selects, as data rows: without the columns that are not the table's."""
    dropped = [c for c in ctx.dropped if c in plan.rows.column_names]
    return plan.rows.filter(keep).drop_columns(dropped)


def _write_data(
    io: FileIO, ctx: ChangeContext, rows: pa.Table, partition: tuple[Any, ...], prefix: str
) -> list[WrittenFile]:
    """Write the rows of one partition to data files, in their order."""
    part_rows = to_file_schema(ctx.schema, ctx.file_schema, rows, format_version=ctx.format_version)
    target = DataFileTarget(
        directory=_directory(ctx, partition),
        prefix=prefix,
        spec_id=ctx.spec.spec_id,
        partition=partition,
        target_file_size=ctx.target_file_size,
        row_group_rows=max(1, ctx.row_group_bytes * part_rows.num_rows // max(1, part_rows.nbytes)),
        compression=ctx.compression,
    )
    return write_data_files_in_order(io, target, part_rows, ctx.file_schema, ctx.properties)


def _index_written(io: FileIO, ctx: ChangeContext, files: Sequence[WrittenFile], rows: pa.Table) -> list[str]:
    """Store the key index of each data file just written (its rows, in order, are ``rows``), so
    that later batches look its keys up without reading it; returns the sidecars written."""
    assert ctx.lookup is not None
    types = [
        schema_to_pyarrow(ctx.schema.find_field(i).field_type, include_field_ids=False) for i in ctx.key_ids
    ]
    columns = [rows.column(k).combine_chunks() for k in ctx.key]
    columns = [c if c.type == t else c.cast(t) for c, t in zip(columns, types, strict=True)]
    out = []
    start = 0
    for f in files:
        index = build_key_index([c.slice(start, f.record_count) for c in columns])
        start += f.record_count
        remember_key_index(f.path, f.file_size_in_bytes, ctx.key_ids, index)
        stored = save_key_index(io, f.path, f.file_size_in_bytes, ctx.key_ids, index)
        if stored is not None:
            out.append(stored)
    return out


def _write_equality(io: FileIO, ctx: ChangeContext, keys: pa.Table, prefix: str) -> list[WrittenFile]:
    out: list[WrittenFile] = []
    if ctx.eq_partitioned:
        groups = list(_partitions(ctx, keys))
        spec_id = ctx.spec.spec_id
    else:
        groups = [((), np.arange(keys.num_rows))]
        spec_id = ctx.global_spec_id
    for n, (partition, take) in enumerate(groups):
        target = DeleteFileTarget(
            directory=_directory(ctx, partition) if ctx.eq_partitioned else ctx.data_dir,
            prefix=f"{prefix}-e{n:04d}-eq",
            spec_id=spec_id,
            partition=partition,
            target_file_size=ctx.delete_target_file_size,
            compression=ctx.compression,
        )
        rows = to_file_schema(ctx.schema, ctx.key_schema, keys.take(take), format_version=ctx.format_version)
        out.extend(write_equality_deletes(io, target, rows, ctx.key_schema, ctx.key_ids))
    return out


def _directory(ctx: ChangeContext, partition: tuple[Any, ...]) -> str:
    if ctx.spec.is_unpartitioned():
        return ctx.data_dir
    return f"{ctx.data_dir}/{ctx.spec.partition_to_path(Record(*partition), ctx.schema)}"


def _partitions(ctx: ChangeContext, rows: pa.Table) -> list[tuple[tuple[Any, ...], npt.NDArray[np.int64]]]:
    """The rows of each partition of the table's spec: (partition tuple, row indices in order)."""
    return partition_rows(ctx.spec, ctx.schema, rows)


def _op_codes(ctx: ChangeContext, column: pa.ChunkedArray) -> npt.NDArray[np.int8]:
    arr = column.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if not len(arr):  # an empty batch (an empty pandas frame's op column has Arrow's null type)
        return np.zeros(0, dtype=np.int8)
    if arr.null_count:
        msg = f"op column {ctx.op_column!r} is NULL in {arr.null_count} rows ({OP_HELP})"
        raise InvalidArgumentError(msg)
    encoded = pc.dictionary_encode(arr)
    codes = np.empty(len(encoded.dictionary), dtype=np.int8)
    for i, value in enumerate(encoded.dictionary.to_pylist()):  # the few distinct op spellings
        code = OPS.get(str(value).strip().lower())
        if code is None:
            n = pc.sum(pc.equal(arr, value)).as_py()
            msg = f"unknown op {value!r} in column {ctx.op_column!r} ({n} rows): {OP_HELP}"
            raise InvalidArgumentError(msg)
        codes[i] = code
    return np.asarray(codes[encoded.indices.to_numpy(zero_copy_only=False)], dtype=np.int8)


def _describe_key(ctx: ChangeContext, rows: pa.Table, i: int) -> str:
    return ", ".join(f"{k}={rows.column(k)[i].as_py()!r}" for k in ctx.key)


def _plan(ctx: ChangeContext, rows: pa.Table) -> _Plan:
    """Validate the rows and decide, vectorised, what is written and what is deleted."""
    schema = normalized(rows.schema, ctx.schema)
    if schema != rows.schema:
        rows = rows.cast(schema)
    ops = _op_codes(ctx, rows.column(ctx.op_column))
    counts = ChangeUnitResult(
        changes=rows.num_rows,
        inserts=int(np.count_nonzero(ops == INSERT)),
        updates=int(np.count_nonzero(ops == UPDATE)),
        deletes=int(np.count_nonzero(ops == DELETE)),
        ignored=int(np.count_nonzero(ops == UPDATE_BEFORE)),
    )
    keep = ops != UPDATE_BEFORE
    if not keep.all():
        rows, ops = rows.filter(keep), ops[keep]
    for k in ctx.key:
        nulls = rows.column(k).null_count
        if nulls and (not ctx.nullable_key or k in ctx.required):
            hint = "" if k in ctx.required else " (allow_nullable_key / --allow-nullable-key accepts them)"
            msg = f"key column {k!r} is NULL in {nulls} change rows{hint}"
            raise InvalidArgumentError(msg)
    if ctx.order_column is not None and (nulls := rows.column(ctx.order_column).null_count):
        msg = f"order column {ctx.order_column!r} is NULL in {nulls} change rows"
        raise InvalidArgumentError(msg)
    if ctx.feed_order and ctx.order_column is not None:
        # one snapshot's DELETE and INSERT of a key share an ordinal: the DELETE is first
        ordinal = rows.column(ctx.order_column).to_numpy().astype(np.int64)
        at = rows.schema.get_field_index(ctx.order_column)
        rows = rows.set_column(at, ctx.order_column, pa.array(ordinal * 2 + (ops != DELETE)))
    sort_keys = [(k, "ascending") for k in ctx.key]
    if ctx.order_column is not None:
        sort_keys.append((ctx.order_column, "ascending"))
    # a stable sort: without an order column, the rows of one key keep their row order
    order = pc.sort_indices(rows, sort_keys=sort_keys)
    rows, ops = rows.take(order), ops[order.to_numpy()]
    n = rows.num_rows
    same = np.ones(n, dtype=bool)
    same[:1] = False
    for k in ctx.key:
        same &= same_as_previous(rows.column(k).combine_chunks())
    if ctx.order_column is not None and n > 1:
        tie = same & same_as_previous(rows.column(ctx.order_column).combine_chunks())
        if tie.any():
            i = int(np.argmax(tie))
            value = rows.column(ctx.order_column)[i].as_py()
            msg = (
                f"two changes of key ({_describe_key(ctx, rows, i)}) have the same {ctx.order_column} "
                f"value {value!r}: their order is ambiguous"
            )
            raise InvalidArgumentError(msg)
    starts = np.flatnonzero(~same)
    last = np.ones(n, dtype=bool)
    last[:-1] = ~same[1:]
    written = (ops == INSERT) | (ops == UPDATE)
    superseded = written & ~last
    touched = (ops == UPDATE) | (ops == DELETE)
    eq_rows = starts[np.logical_or.reduceat(touched, starts)] if n else np.zeros(0, np.int64)
    for name in ctx.required:
        if name in rows.column_names and rows.column(name).null_count:
            nulls = pc.sum(pc.and_(pc.is_null(rows.column(name)), pa.array(written))).as_py() or 0
            if nulls:
                msg = f"column {name!r} is required but NULL in {nulls} inserted/updated rows"
                raise InvalidArgumentError(msg)
    return _Plan(rows, ops, written, superseded, eq_rows.astype(np.int64), counts)
