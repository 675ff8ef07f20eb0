"""Reading manifests: entries decoded once per process, keyed by what they inherit."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import pyarrow as pa

from icemor.io.cache import DELETE_CACHE
from icemor.planning.manifest_reader import manifest_entries_cached, read_manifest_entries, read_manifest_list

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
