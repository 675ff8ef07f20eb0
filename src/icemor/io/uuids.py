"""Iceberg's uuid as 16 bytes (icemor's Arrow data) and as its text (SQL's view of it).

Iceberg's Spark integration reads a ``uuid`` column as its canonical lowercase text, and
conditions compare it as such; icemor hands Spark and DuckDB the same text and turns text back
into 16 bytes where rows are written. Both directions are vectorised.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icemor.exceptions import InvalidArgumentError

__all__ = ["is_uuid", "is_uuid_extension", "to_text_batch", "uuid_from_strings", "uuid_strings"]

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# where each of the 32 hex digits goes in the 36-character text (hyphens at 8, 13, 18, 23)
_DIGIT_AT = np.array([i + (i >= 8) + (i >= 12) + (i >= 16) + (i >= 20) for i in range(32)])


def is_uuid_extension(t: pa.DataType) -> bool:
    """Whether ``t`` is Arrow's uuid extension type (what icemor reads Iceberg's uuid as)."""
    return isinstance(t, pa.BaseExtensionType) and bool(t.extension_name == "arrow.uuid")


def is_uuid(t: pa.DataType) -> bool:
    """Whether ``t`` holds Iceberg uuids: Arrow's uuid extension, or 16-byte fixed binary."""
    return (isinstance(t, pa.BaseExtensionType) and bool(t.extension_name == "arrow.uuid")) or (
        pa.types.is_fixed_size_binary(t) and t.byte_width == 16
    )


def uuid_strings(column: pa.Array) -> pa.Array:
    """16-byte uuids as canonical lowercase text (``102cb62f-e7a3-…``), NULLs kept."""
    storage = column.storage if isinstance(column, pa.ExtensionArray) else column
    n = len(storage)
    raw = np.frombuffer(storage.buffers()[1], np.uint8, n * 16, storage.offset * 16).reshape(n, 16)
    digits = np.empty((n, 32), np.uint8)
    digits[:, 0::2] = _HEX[raw >> 4]
    digits[:, 1::2] = _HEX[raw & 0x0F]
    text = np.full((n, 36), ord("-"), np.uint8)
    text[:, _DIGIT_AT] = digits
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    validity = storage.buffers()[0]
    if validity is not None and storage.offset:
        validity = storage.is_valid().buffers()[1]
    return pa.Array.from_buffers(
        pa.string(),
        n,
        [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(text.tobytes())],
        null_count=storage.null_count,
    )


_CANONICAL = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def uuid_from_strings(column: pa.Array, target: pa.DataType) -> pa.Array:
    """UUID text (``102cb62f-e7a3-…``, either case) as 16-byte values of ``target``, vectorised.

    Raises:
        InvalidArgumentError: A value that is not a UUID's text.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    valid = column.is_valid()
    well_formed = pc.match_substring_regex(column, _CANONICAL)
    if not pc.all(pc.or_kleene(well_formed, pc.invert(valid))).as_py():
        bad = column.filter(pc.invert(pc.fill_null(well_formed, True)))[0].as_py()
        msg = f"{bad!r} is not a uuid (32 hex digits as 8-4-4-4-12)"
        raise InvalidArgumentError(msg)
    hex32 = pc.fill_null(pc.replace_substring(column, "-", ""), "0" * 32).cast(pa.large_string())
    offsets = np.frombuffer(hex32.buffers()[1], np.int64, len(hex32) + 1, hex32.offset * 8)
    data = np.frombuffer(hex32.buffers()[2], np.uint8)[offsets[0] : offsets[-1]].reshape(-1, 32)
    nibbles = np.where(data <= ord("9"), data - ord("0"), (data | 0x20) - ord("a") + 10).astype(np.uint8)
    raw = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    storage_type = pa.binary(16)
    values = pa.FixedSizeBinaryArray.from_buffers(
        storage_type, len(column), [None, pa.py_buffer(raw.tobytes())]
    )
    values = pc.if_else(valid, values, pa.scalar(None, storage_type))
    if isinstance(target, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(target, values)
    return values


def _to_text(column: pa.Array, target: pa.DataType) -> pa.Array:
    if is_uuid(column.type) and pa.types.is_string(target):
        return uuid_strings(column)
    if pa.types.is_struct(column.type) and pa.types.is_struct(target) and _has_uuid(column.type):
        children = [_to_text(column.field(i), target.field(i).type) for i in range(column.type.num_fields)]
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=column.is_null() if column.null_count else None
        )
    if pa.types.is_list(column.type) and pa.types.is_list(target) and _has_uuid(column.type):
        values = _to_text(column.flatten(), target.value_type)
        offsets = column.offsets
        return pa.ListArray.from_arrays(
            offsets, values, type=target, mask=column.is_null() if column.null_count else None
        )
    return column.cast(target)


def _has_uuid(t: pa.DataType) -> bool:
    if is_uuid(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_uuid(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_uuid(t.value_type)
    if pa.types.is_map(t):
        return _has_uuid(t.key_type) or _has_uuid(t.item_type)
    return False


def to_text_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` (icemor's reader's) cast to ``target``, where uuids are strings: their text."""
    if not any(_has_uuid(f.type) for f in batch.schema):
        return batch.cast(target)
    columns = [_to_text(c, f.type) for c, f in zip(batch.columns, target, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=target)
