"""Deletion vectors (Iceberg v3): the ``deletion-vector-v1`` Puffin blob codec.

Blob layout (spec, "Deletion Vectors"): a 4-byte big-endian length of magic + bitmap, the magic
bytes ``D1 D3 39 64``, a Roaring bitmap in the portable 64-bit format, then a 4-byte big-endian
CRC-32 of magic + bitmap. The portable 64-bit format is exactly what CRoaring's
``roaring64_bitmap_portable_serialize`` (pyroaring ``BitMap64.serialize``) produces.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import numpy.typing as npt
from pyroaring import BitMap64

from icemor.exceptions import CorruptFileError

__all__ = [
    "DV_BLOB_TYPE",
    "DV_MAGIC",
    "DV_POSITION_FIELD_ID",
    "deserialize_dv",
    "dv_removal_key",
    "serialize_dv",
]

DV_BLOB_TYPE = "deletion-vector-v1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_POSITION_FIELD_ID = 2_147_483_645
"""The ``_pos`` metadata column (Integer.MAX_VALUE - 2): a DV blob's ``fields``."""
_MIN_BLOB = 4 + len(DV_MAGIC) + 8 + 4  # length, magic, empty bitmap (bucket count), CRC


def serialize_dv(positions: npt.ArrayLike) -> bytes:
    """Encode deleted row positions as a ``deletion-vector-v1`` blob."""
    bitmap = BitMap64(np.asarray(positions, dtype=np.uint64))
    body = DV_MAGIC + bitmap.serialize()
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def deserialize_dv(blob: bytes, *, source: str = "deletion vector") -> npt.NDArray[np.int64]:
    """Decode a ``deletion-vector-v1`` blob into sorted row positions, verifying length, magic and CRC.

    Raises:
        CorruptFileError: The blob is truncated, has the wrong magic, or fails its CRC check.
    """
    if len(blob) < _MIN_BLOB:
        msg = f"{source}: deletion vector blob is truncated ({len(blob)} bytes)"
        raise CorruptFileError(msg)
    (length,) = struct.unpack_from(">I", blob, 0)
    if length + 8 != len(blob):
        msg = f"{source}: deletion vector length {length} does not match blob size {len(blob)}"
        raise CorruptFileError(msg)
    body = blob[4 : 4 + length]
    if body[:4] != DV_MAGIC:
        msg = f"{source}: bad deletion vector magic {body[:4].hex()}"
        raise CorruptFileError(msg)
    (crc,) = struct.unpack_from(">I", blob, 4 + length)
    if zlib.crc32(body) != crc:
        msg = f"{source}: deletion vector CRC mismatch"
        raise CorruptFileError(msg)
    try:
        bitmap = BitMap64.deserialize(body[4:])
    except (ValueError, RuntimeError, OverflowError) as e:
        msg = f"{source}: invalid Roaring bitmap in deletion vector: {e}"
        raise CorruptFileError(msg) from e
    return np.asarray(bitmap.to_array(), dtype=np.uint64).astype(np.int64)


def dv_removal_key(path: str, content_offset: int) -> str:
    """How a commit names one deletion vector to remove: a Puffin file holds the DVs of many data
    files, each its own manifest entry, so the file's path alone would remove them all. NUL
    never occurs in a path, so the key cannot name a file."""
    return f"{path}\x00dv@{content_offset}"
