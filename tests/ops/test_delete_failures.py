"""A DELETE whose per-file work fails commits nothing and leaves no file behind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from icemor.exceptions import MissingFileError
from oracle import local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _three_file_table(home: Path) -> icemor.table.Table:
    from icemor.catalog import load_catalog

    catalog = load_catalog()
    catalog.create_namespace_if_not_exists("db")
    t = catalog.create_table(
        "db.t", schema=pa.schema([("id", pa.int64()), ("k", pa.string())]), properties={"format-version": "2"}
    )
    for lo in (0, 100, 200):
        t.append(pa.table({"id": pa.array(range(lo, lo + 100), pa.int64()), "k": ["a", "b"] * 50}))
    return icemor.load_table("db.t")


def _files(table: icemor.table.Table) -> set[Path]:
    return {p for p in local_path(table.metadata.location).rglob("*") if p.is_file()}


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_failed_unit_removes_every_written_delete_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "home"))
    table = _three_file_table(tmp_path)
    snapshot = table.pyiceberg.current_snapshot()
    assert snapshot is not None
    # the middle file vanishes: its unit fails, the two others write their delete files first or not
    victim = local_path(sorted(p.data_file.path for p in table.scan().plan_files())[1])
    victim.unlink()
    before = _files(table)
    spark: SparkSession | None = request.getfixturevalue("spark") if engine == "spark" else None
    with pytest.raises(Exception) as info:
        table.delete("k = 'a'", spark=spark)
    if engine == "local":
        assert isinstance(info.value, MissingFileError)
    else:
        assert "not found" in str(info.value)
    assert _files(table) == before  # no delete file, manifest or manifest list left
    assert not [p for p in before if p.name.endswith("-deletes.parquet")]
    assert table.refresh().pyiceberg.current_snapshot().snapshot_id == snapshot.snapshot_id
