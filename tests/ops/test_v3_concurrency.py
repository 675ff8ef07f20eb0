"""A data file has at most one live deletion vector: a DELETE that lost the race to another
writer's DV for the same data file is refused, not committed as a second DV."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run
from icemor.commit.row_delta import RowDelta
from icemor.exceptions import CommitConflictError

if TYPE_CHECKING:
    from pathlib import Path


def test_concurrent_dv_for_the_same_data_file_conflicts(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), rows)
    assert run(["create-table", "db.t", "--schema-from", str(rows), "--format-version", "3"]) == 0
    assert run(["append", "db.t", str(rows)]) == 0

    original = RowDelta.commit
    raced: list[bool] = []

    def commit_after_a_concurrent_delete(self: RowDelta) -> Any:
        if not raced:
            raced.append(True)
            icemor.load_table("db.t").delete("id = 1")  # another writer's DV for the same file
        return original(self)

    monkeypatch.setattr(RowDelta, "commit", commit_after_a_concurrent_delete)
    table = icemor.load_table("db.t")
    with pytest.raises(CommitConflictError, match="deletion vector"):
        table.delete("id = 2")
    monkeypatch.setattr(RowDelta, "commit", original)

    table.refresh()
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, *range(2, 10)]
    dvs = [d for p in table.scan().plan_files() for d in p.delete_files]
    assert [d.kind for d in dvs] == ["dv"]
    # the next DELETE replaces that DV with one holding both
    table.delete("id = 2")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, *range(3, 10)]
    assert [d.kind for p in table.scan().plan_files() for d in p.delete_files] == ["dv"]
