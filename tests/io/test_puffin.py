"""The Puffin files of deletion vectors, parsed here by the spec (format/puffin-spec.md), not by icemor."""

from __future__ import annotations

import json
import struct
import zlib
from typing import TYPE_CHECKING

import numpy as np
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyroaring import BitMap64

from icemor.io.puffin import write_deletion_vectors
from icemor.io.writers import DeleteFileTarget

if TYPE_CHECKING:
    from pathlib import Path


def test_dv_puffin_file_follows_the_spec(tmp_path: Path) -> None:
    target = DeleteFileTarget(
        directory=str(tmp_path), prefix="p", spec_id=0, partition=(), target_file_size=1 << 20,
        deletion_vectors=True,
    )  # fmt: skip
    deletes = [
        ("file:///d/b.parquet", np.array([5, 1 << 33], np.int64)),
        ("file:///d/a.parquet", np.arange(3)),
    ]
    written = write_deletion_vectors(PyArrowFileIO(), target, deletes)
    data = (tmp_path / "p-00000-deletes.puffin").read_bytes()

    # magic, blobs, footer: magic, payload, payload length (LE), flags (0: uncompressed), magic
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1" and data[-8:-4] == bytes(4)
    (length,) = struct.unpack("<i", data[-12:-8])
    assert data[-12 - length - 4 : -12 - length] == b"PFA1"
    footer = json.loads(data[-12 - length : -12].decode("utf-8"))
    blobs = footer["blobs"]
    assert [b["properties"]["referenced-data-file"] for b in blobs] == [
        "file:///d/a.parquet",
        "file:///d/b.parquet",
    ]
    for blob, (path, positions), w in zip(blobs, sorted(deletes), written, strict=True):
        assert blob["type"] == "deletion-vector-v1"
        assert blob["fields"] == [2147483645]  # _pos
        assert blob["snapshot-id"] == -1 and blob["sequence-number"] == -1  # inherited
        assert "compression-codec" not in blob  # DVs are never compressed
        assert blob["properties"]["cardinality"] == str(len(positions))
        raw = data[blob["offset"] : blob["offset"] + blob["length"]]
        # DV blob: BE length of magic+bitmap, magic D1D33964, portable Roaring64, BE CRC-32
        (n,) = struct.unpack(">I", raw[:4])
        body = raw[4 : 4 + n]
        assert body[:4] == bytes([0xD1, 0xD3, 0x39, 0x64])
        assert struct.unpack(">I", raw[4 + n :])[0] == zlib.crc32(body)
        assert list(BitMap64.deserialize(body[4:])) == sorted(int(p) for p in positions)
        assert (w.path, w.content_offset, w.content_size_in_bytes) == (
            target.location(0),
            blob["offset"],
            blob["length"],
        )
        assert (
            w.referenced_data_file == path and w.record_count == len(positions) and w.file_format == "PUFFIN"
        )
        assert w.file_size_in_bytes == len(data)


def test_no_positions_writes_nothing(tmp_path: Path) -> None:
    target = DeleteFileTarget(str(tmp_path), "p", 0, (), 1 << 20, deletion_vectors=True)
    assert (
        write_deletion_vectors(PyArrowFileIO(), target, [("file:///d/a.parquet", np.zeros(0, np.int64))])
        == []
    )
    assert not list(tmp_path.iterdir())
