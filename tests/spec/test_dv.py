"""Deletion-vector blob codec (spec, "Deletion Vectors": the ``deletion-vector-v1`` Puffin blob)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from pyroaring import BitMap64

from icemor.exceptions import CorruptFileError
from icemor.spec.dv import DV_BLOB_TYPE, DV_MAGIC, deserialize_dv, serialize_dv

SPEC_MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])


def expected_blob(positions: list[int]) -> bytes:
    """The blob as the spec lays it out, assembled by hand."""
    bitmap = BitMap64(positions).serialize()
    body = SPEC_MAGIC + bitmap
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def portable_64bit_roaring(positions: list[int]) -> bytes:
    """The portable 64-bit Roaring format written out field by field, for small sparse sets.

    An 8-byte little-endian count of 32-bit buckets, then per bucket (ascending) its 4-byte
    little-endian key (the high 32 bits) and a portable 32-bit Roaring bitmap. With array
    containers only (< 4096 values each, no runs) that is: cookie 12346 (uint32), container
    count (uint32), (key, cardinality - 1) per container (uint16 pairs), a uint32 byte offset
    per container, then each container's sorted uint16 values.
    """
    buckets: dict[int, list[int]] = {}
    for p in sorted(set(positions)):
        buckets.setdefault(p >> 32, []).append(p & 0xFFFFFFFF)
    out = struct.pack("<Q", len(buckets))
    for high in sorted(buckets):
        out += struct.pack("<I", high)
        containers: dict[int, list[int]] = {}
        for low in buckets[high]:
            containers.setdefault(low >> 16, []).append(low & 0xFFFF)
        keys = sorted(containers)
        r32 = struct.pack("<II", 12346, len(keys))
        for k in keys:
            r32 += struct.pack("<HH", k, len(containers[k]) - 1)
        offset = len(r32) + 4 * len(keys)
        for k in keys:
            r32 += struct.pack("<I", offset)
            offset += 2 * len(containers[k])
        for k in keys:
            r32 += struct.pack(f"<{len(containers[k])}H", *containers[k])
        out += r32
    return out


def test_constants_match_spec() -> None:
    assert DV_MAGIC == SPEC_MAGIC
    assert DV_BLOB_TYPE == "deletion-vector-v1"


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [0, 1, 2, 3, 99],
        list(range(0, 100_000, 7)),
        [5, 1 << 32, (1 << 32) + 1, (1 << 40) + 3],
        [(1 << 63) - 1],
    ],
)
def test_round_trip(positions: list[int]) -> None:
    decoded = deserialize_dv(serialize_dv(positions))
    assert decoded.dtype == np.int64
    assert decoded.tolist() == sorted(set(positions))


def test_round_trip_unsorted_duplicates() -> None:
    assert deserialize_dv(serialize_dv([9, 3, 3, 1 << 33, 0, 9])).tolist() == [0, 3, 9, 1 << 33]


@pytest.mark.parametrize("positions", [[], [1, 2, 3], [0, 65535, 65536, 1 << 32, (1 << 32) + 70000]])
def test_exact_bytes_layout(positions: list[int]) -> None:
    blob = serialize_dv(positions)
    assert blob == expected_blob(positions)
    # field by field
    (length,) = struct.unpack(">I", blob[:4])
    assert length == len(blob) - 8
    assert blob[4:8] == b"\xd1\xd3\x39\x64"
    bitmap = blob[8 : 4 + length]
    assert bitmap == portable_64bit_roaring(positions)
    (crc,) = struct.unpack(">I", blob[-4:])
    assert crc == zlib.crc32(blob[4 : 4 + length])


def test_hand_built_blob_decodes() -> None:
    positions = [2, 4, 1 << 32, (1 << 32) + 9]
    body = SPEC_MAGIC + portable_64bit_roaring(positions)
    blob = struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))
    assert deserialize_dv(blob, source="x").tolist() == positions


def test_empty_bitmap_is_eight_zero_bytes() -> None:
    blob = serialize_dv([])
    body = SPEC_MAGIC + b"\0" * 8
    assert blob == struct.pack(">I", 12) + body + struct.pack(">I", zlib.crc32(body))
    assert deserialize_dv(blob).tolist() == []


def test_positions_above_2_pow_32() -> None:
    positions = [(1 << 32) - 1, 1 << 32, (1 << 33) + 5, (1 << 50) + 12345]
    blob = serialize_dv(np.array(positions, dtype=np.int64))
    # four distinct high-32-bit buckets: 0, 1, 2, 2^18
    assert struct.unpack_from("<Q", blob, 8)[0] == 4
    assert deserialize_dv(blob).tolist() == positions


def _flip(blob: bytes, index: int) -> bytes:
    b = bytearray(blob)
    b[index] ^= 0xFF
    return bytes(b)


def test_crc_mismatch() -> None:
    blob = serialize_dv([1, 2, 3])
    with pytest.raises(CorruptFileError, match="CRC"):
        deserialize_dv(_flip(blob, len(blob) - 1), source="dv.puffin")


def test_crc_mismatch_in_bitmap_bytes() -> None:
    blob = serialize_dv([1, 2, 3])
    with pytest.raises(CorruptFileError, match=r"dv\.puffin"):
        deserialize_dv(_flip(blob, 12), source="dv.puffin")


def test_bad_magic() -> None:
    positions = [1, 2, 3]
    body = b"\x00\x01\x02\x03" + BitMap64(positions).serialize()
    blob = struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))
    with pytest.raises(CorruptFileError, match="magic"):
        deserialize_dv(blob)


@pytest.mark.parametrize("cut", [0, 3, 8, 12, 15])
def test_truncated_blob(cut: int) -> None:
    blob = serialize_dv([1, 2, 3, 1 << 33])
    with pytest.raises(CorruptFileError):
        deserialize_dv(blob[:cut])


def test_truncated_by_one_byte() -> None:
    blob = serialize_dv([1, 2, 3, 1 << 33])
    with pytest.raises(CorruptFileError):
        deserialize_dv(blob[:-1])


@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_wrong_length(delta: int) -> None:
    blob = serialize_dv([7, 8])
    (length,) = struct.unpack(">I", blob[:4])
    bad = struct.pack(">I", length + delta) + blob[4:]
    with pytest.raises(CorruptFileError, match="length"):
        deserialize_dv(bad)


def test_trailing_garbage() -> None:
    blob = serialize_dv([7, 8])
    with pytest.raises(CorruptFileError):
        deserialize_dv(blob + b"\0\0\0\0")


def test_valid_crc_but_invalid_bitmap() -> None:
    body = SPEC_MAGIC + b"\xff" * 12  # claims 2^64-1 buckets
    blob = struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))
    with pytest.raises(CorruptFileError):
        deserialize_dv(blob)


def test_positions_below_2_to_the_32_take_the_32_bit_path_to_the_same_bytes() -> None:
    """Below 2**32 the blob is built from a 32-bit bitmap (20x faster): byte for byte pyroaring's
    64-bit serialisation, and decoded back the same way."""
    from pyroaring import BitMap64

    rng = np.random.default_rng(7)
    for positions in ([9, 3, 3, 0, 9], rng.integers(0, 1 << 32, 5000), rng.integers(0, 1_000_000, 80_000)):
        values = np.asarray(positions, dtype=np.int64)
        blob = serialize_dv(values)
        assert blob[8:-4] == BitMap64(np.unique(values).astype(np.uint64)).serialize()
        assert deserialize_dv(blob).tolist() == np.unique(values).tolist()
