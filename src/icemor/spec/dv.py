"""Deletion vectors (Iceberg v3): the ``deletion-vector-v1`` Puffin blob codec.

Blob layout (spec, "Deletion Vectors"): a 4-byte big-endian length of magic + bitmap, the magic
bytes ``D1 D3 39 64``, a Roaring bitmap in the portable 64-bit format, then a 4-byte big-endian
CRC-32 of magic + bitmap. The portable 64-bit format is exactly what CRoaring's
``roaring64_bitmap_portable_serialize`` (pyroaring ``BitMap64.serialize``) produces.
"""

from __future__ import annotations

import array
import struct
import zlib
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from pyroaring import BitMap, BitMap64

from icemor.exceptions import CorruptFileError

if TYPE_CHECKING:
    from icemor.spec.files import DeleteFileRef

__all__ = [
    "DV_BLOB_TYPE",
    "DV_MAGIC",
    "DV_POSITION_FIELD_ID",
    "delete_file_removal_key",
    "deserialize_dv",
    "dv_removal_key",
    "serialize_dv",
]

DV_BLOB_TYPE = "deletion-vector-v1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_POSITION_FIELD_ID = 2_147_483_645
"""The ``_pos`` metadata column (Integer.MAX_VALUE - 2): a DV blob's ``fields``."""
_MIN_BLOB = 4 + len(DV_MAGIC) + 8 + 4  # length, magic, empty bitmap (bucket count), CRC
_LOW_ONLY = struct.pack("<QI", 1, 0)
"""The portable 64-bit format's header for one 32-bit bucket of high bits 0 (every position
below 2**32): then the bucket's 32-bit portable bitmap. pyroaring builds and reads a 32-bit
``BitMap`` from a buffer 20x faster than a ``BitMap64`` from an array (10 ms per 80k positions,
element by element): a CDC batch rewrites the DV of every data file it touches."""


def serialize_dv(positions: npt.ArrayLike) -> bytes:
    """Encode deleted row positions as a ``deletion-vector-v1`` blob."""
    values = np.asarray(positions, dtype=np.uint64)
    if len(values) and int(values.max()) < 1 << 32:
        # the same bytes as BitMap64's: one bucket, high bits 0 (checked against it in the tests)
        low = array.array("I")
        low.frombytes(values.astype(np.uint32).tobytes())  # pyroaring's fast path: an array.array
        bitmap = BitMap(low)
        body = DV_MAGIC + _LOW_ONLY + bitmap.serialize()
    else:
        body = DV_MAGIC + BitMap64(values).serialize()
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
        if body[4 : 4 + len(_LOW_ONLY)] == _LOW_ONLY:  # one bucket of high bits 0: a 32-bit bitmap
            low = BitMap.deserialize(body[4 + len(_LOW_ONLY) :])
            return np.frombuffer(low.to_array(), dtype=np.uint32).astype(np.int64)
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


def delete_file_removal_key(ref: DeleteFileRef) -> str:
    """How a commit names the delete file ``ref`` to remove: its path, a DV by
    :func:`dv_removal_key` (its Puffin file holds others)."""
    if ref.is_deletion_vector and ref.content_offset is not None:
        return dv_removal_key(ref.path, ref.content_offset)
    return ref.path
