"""Reading manifests: entries decoded once per process, keyed by what they inherit."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from icemor.io.cache import DELETE_CACHE
from icemor.planning.manifest_reader import (
    ManifestFileEntry,
    manifest_entries_cached,
    read_manifest_entries,
    read_manifest_list,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_manifest_entries_are_decoded_once_and_keyed_by_inherited_sequence_number(home: Path) -> None:
    import icemor
    from icemor.catalog import load_catalog

    cat = load_catalog()
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([pa.field("x", pa.int64())])).append(pa.table({"x": [1, 2, 3]}))
    table = icemor.load_table("ns.t")
    snapshot = table.metadata.current_snapshot()
    assert snapshot is not None
    (manifest,) = read_manifest_list(table.io, snapshot)
    DELETE_CACHE.clear()
    assert not manifest_entries_cached(manifest)

    first = read_manifest_entries(table.io, manifest)
    assert manifest_entries_cached(manifest)
    assert read_manifest_entries(table.io, manifest) == first
    assert DELETE_CACHE.loads["manifest-entries"] == 1
    assert [e.data_file.record_count for e in first] == [3]
    assert table.scan().to_arrow().column("x").to_pylist() == [1, 2, 3]  # the planner shares them
    assert DELETE_CACHE.loads["manifest-entries"] == 1

    # the same file listed with another sequence number (which entries without one inherit,
    # as Java writes them) is decoded for that number, not served the first decode
    later = copy.copy(manifest)
    later.sequence_number = (manifest.sequence_number or 0) + 5
    assert not manifest_entries_cached(later)
    read_manifest_entries(table.io, later)
    assert DELETE_CACHE.loads["manifest-entries"] == 2
    assert manifest_entries_cached(manifest)


def test_data_ref_is_built_once_per_entry() -> None:
    f = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="s3://bucket/data/a.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(7),
        record_count=3,
        file_size_in_bytes=100,
        split_offsets=[4],
    )
    entry = ManifestFileEntry(f, 5, 5, 1, None, None, None, first_row_id=9)
    ref = entry.to_data_ref()
    assert (ref.path, ref.file_format, ref.partition, ref.data_sequence_number) == (
        f.file_path,
        "PARQUET",
        (7,),
        5,
    )
    assert (ref.split_offsets, ref.first_row_id, ref.spec_id, ref.record_count) == ((4,), 9, 1, 3)
    assert entry.to_data_ref() is ref
