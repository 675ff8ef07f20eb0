"""The manifests of a commit (``icemor.commit.manifest_writer``): what a process keeps of the
manifests it wrote equals what decoding them gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.commit import manifest_writer as mw
from icemor.io.cache import DELETE_CACHE

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog


@pytest.mark.parametrize("format_version", [2, 3])
def test_names_of_written_manifests_are_kept_and_equal_decoding(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch, format_version: int
) -> None:
    """After a commit that adds files and rewrites a manifest (DVs replaced on v3, a position
    delete file removed with its data file on v2...), the names by which a later commit removes
    files are known for each new manifest without decoding it; decoded, they are the same."""
    rows = pa.table({"id": pa.array(range(20), pa.int64()), "v": [str(i) for i in range(20)]})
    t = icemor.create_table(
        f"{ns}.t", rows, format_version=format_version, identifier_fields=["id"], catalog=catalog
    )
    for i in range(3):  # each batch replaces the DV (v3) of the file it deletes from
        changes = pa.table({"op": ["U", "D"], "id": pa.array([i, 10 + i], pa.int64()), "v": ["u", None]})
        t.apply_changes(changes, key=["id"], deletes="position")
    io = t.pyiceberg.io
    v3 = format_version >= 3
    manifests = t.pyiceberg.metadata.current_snapshot().manifests(io)
    kept = {
        m.manifest_path: DELETE_CACHE.peek("manifest-names", (m.manifest_path, m.manifest_length, v3))
        for m in manifests
    }
    assert all(names is not None for names in kept.values()), kept
    decoded = {}
    for m in manifests:
        decoded[m.manifest_path] = mw._sized_names(mw.live_entries(io, m, v3=v3))[0]
    assert kept == decoded
    assert sum(len(names) for names in decoded.values()) >= 5  # four data files, deletes

    def no_decoding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("decoded a manifest this process wrote")

    monkeypatch.setattr(mw, "live_entries", no_decoding)
    for m in manifests:
        if m.has_added_files() or m.has_existing_files():
            assert mw._names(io, m, v3) == decoded[m.manifest_path]
