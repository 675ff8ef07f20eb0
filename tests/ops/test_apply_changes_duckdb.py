"""DuckDB 1.5.5 (its iceberg extension, from PyPI) reads position-mode CDC tables exactly: position deletes
on v2, deletion vectors on v3, read from the metadata file on local disk after every batch
(:mod:`duckdb_iceberg`: skipped where DuckDB 1.5.5 is not prepared)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

import icemor
from duckdb_iceberg import duckdb_rows, needs_duckdb

pytestmark = needs_duckdb


@pytest.mark.parametrize("version", [2, 3])
def test_duckdb_reads_position_mode_tables_exactly(home: Path, version: int) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    t = icemor.create_table("db.t", schema, format_version=version)
    rnd = random.Random(version)
    model: dict[int, str | None] = {}
    for b in range(4):
        batch = []
        for i in range(40):
            key = rnd.randrange(30)
            op = rnd.choice(["U", "D"] + ([] if key in model else ["I", "I"]))
            batch.append((op, key, None if rnd.random() < 0.2 else f"{b}-{i}"))
            if op == "D":
                model.pop(key, None)
            else:
                model[key] = batch[-1][2]
        changes = pa.table(
            {
                "op": [r[0] for r in batch],
                "id": pa.array([r[1] for r in batch], pa.int64()),
                "v": [r[2] for r in batch],
            }
        )
        m = t.apply_changes(changes, key=["id"], deletes="position")
        assert m.equality_delete_files_added == 0
        assert duckdb_rows(t.pyiceberg.metadata_location) == sorted(model.items()), f"batch {b}"
    kinds = {d.kind for p in t.scan().plan_files() for d in p.delete_files}
    assert kinds == ({"dv"} if version == 3 else {"position"})
