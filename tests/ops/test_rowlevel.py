"""NewRows: the new rows of UPDATE and MERGE, written by one rolling writer across batches."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField

from icemor.ops import rowlevel

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog


def test_new_rows_in_many_batches_make_one_file_per_partition(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # new rows were once written every BATCH_ROWS rows, a file per flush and partition
    monkeypatch.setattr(rowlevel, "BATCH_ROWS", 1_000, raising=False)
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "p", LongType()))
    table = catalog.create_table(
        f"{ns}.t",
        schema=schema,
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p")),
    )
    new_rows = rowlevel.NewRows(table)
    for lo in range(0, 10_000, 2_000):  # five batches, each over every partition
        ids = np.arange(lo, lo + 2_000, dtype=np.int64)
        new_rows.add(pa.table({"id": ids, "p": ids % 10}))
    files = new_rows.files()
    assert new_rows.rows == 10_000
    assert len(files) == 10
    assert sorted(f.partition for f in files) == [(p,) for p in range(10)]
    for f in files:  # each file holds its partition's rows, every one once (a numpy model)
        ids = pq.read_table(f.path.removeprefix("file://")).column("id").to_numpy()
        [p] = f.partition
        assert sorted(ids.tolist()) == list(range(p, 10_000, 10)) and f.record_count == len(ids)
    # abort removes them
    new_rows.abort()
    assert not any(Path(f.path.removeprefix("file://")).exists() for f in files)


def test_update_and_delete_compare_uuids_as_their_text(home: Path) -> None:
    """SQL sees a uuid as Spark does, its lowercase text; UPDATE writes text back as bytes (it
    failed with 'Failed casting from string to fixed_size_binary[16]')."""
    import uuid

    import icemor

    u1, u2 = (
        uuid.UUID("102cb62f-e7a3-4d5c-9a1b-0c2d3e4f5a6b"),
        uuid.UUID("f0000000-0000-4000-8000-000000000001"),
    )
    storage = pa.array([u1.bytes, None, u2.bytes], pa.binary(16))
    data = pa.table(
        {"id": pa.array([1, 2, 3], pa.int64()), "u": pa.ExtensionArray.from_storage(pa.uuid(), storage)}
    )
    table = icemor.create_table("db.t", data)
    assert table.update({"id": "id + 10"}, where=f"u = '{str(u1).upper()}'").rows_updated == 0  # text differs
    assert table.update({"id": "id + 10"}, where=f"u = '{u1}'").rows_updated == 1
    assert table.update({"u": f"'{str(u1).upper()}'"}, where="id = 3").rows_updated == 1
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 2, "u": None}, {"id": 3, "u": u1}, {"id": 11, "u": u1}]
    assert table.delete(f"upper(u) = '{str(u1).upper()}'").deleted_rows == 2
