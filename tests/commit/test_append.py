"""Appends commit through ``icemor.commit.append``: a lost swap is retried (``commit.retry.*``).

Before every commit went through ``icemor.commit``, ``ops/append.py`` committed with pyiceberg's transaction once: a commit that
lost against a concurrent writer failed the append.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from icemor.exceptions import CommitFailedError
from icemor.ops.add_files import add_files
from icemor.ops.append import append_files

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


@pytest.fixture
def table(tmp_path: Path) -> Any:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("ns")
    props = {"format-version": "2", "commit.retry.num-retries": "2", "commit.retry.min-wait-ms": "1"}
    return catalog.create_table("ns.t", SCHEMA, properties=props)


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), path)
    return path


def _lose(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    calls: list[int] = []
    real = SqlCatalog.commit_table

    def commit_table(self: SqlCatalog, *args: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            msg = "lost the race"
            raise CommitFailedException(msg)
        return real(self, *args)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    return calls


def _files(tmp_path: Path) -> set[str]:
    return {str(p) for p in (tmp_path / "w").rglob("*") if p.is_file()}


def _referenced(table: Any) -> set[str]:
    """Every file the table's current metadata references (metadata JSONs aside)."""
    snap = table.metadata.current_snapshot()
    out = {snap.manifest_list.removeprefix("file://")}
    for m in snap.manifests(table.io):
        out.add(m.manifest_path.removeprefix("file://"))
        out.update(e.data_file.file_path.removeprefix("file://") for e in m.fetch_manifest_entry(table.io))
    return out


def test_append_retries_a_lost_swap_and_leaves_no_orphan(
    table: Any, rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _lose(monkeypatch, 1)
    assert append_files(table, [rows]) == 3
    assert len(calls) == 2
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert table.scan().to_arrow().num_rows == 3
    # the lost attempt's manifests were removed: only what the table references is left
    left = {p for p in _files(tmp_path) if not p.endswith(".metadata.json")}
    assert left == _referenced(table)


def test_append_gives_up_after_num_retries_and_removes_everything(
    table: Any, rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _files(tmp_path)
    calls = _lose(monkeypatch, 100)
    with pytest.raises(CommitFailedError):
        append_files(table, [rows])
    assert len(calls) == 3  # 2 retries
    assert _files(tmp_path) == before


def test_add_files_retries_a_lost_swap(table: Any, rows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _lose(monkeypatch, 1)
    assert add_files(table, [rows]) == 3
    assert len(calls) == 2
    assert table.refresh().scan().to_arrow().num_rows == 3
