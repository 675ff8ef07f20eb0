"""``create-table --format-version 3`` and ``upgrade`` from the CLI: results and one-line refusals."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import icemor
from icemor.cli import run

if TYPE_CHECKING:
    from pathlib import Path


def _err(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_create_v3_append_delete_and_upgrade_from_the_cli(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.v3", "--schema-from", str(parquet), "--format-version", "3"]) == 0
    assert run(["append", "db.v3", str(parquet)]) == 0
    table = icemor.load_table("db.v3")
    assert table.metadata.format_version == 3
    m = table.delete("id = 2")
    assert m.deleted_rows == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    assert [d.kind for p in table.scan().plan_files() for d in p.delete_files] == ["dv"]

    assert run(["create-table", "db.v2", "--schema-from", str(parquet)]) == 0
    capsys.readouterr()
    assert run(["upgrade", "db.v2", "--format-version", "3"]) == 0
    assert "from format-version 2 to 3" in capsys.readouterr().out
    assert icemor.load_table("db.v2").metadata.format_version == 3
    assert run(["upgrade", "db.v2", "--format-version", "3"]) == 0
    assert "already format-version 3" in capsys.readouterr().out

    assert run(["upgrade", "db.v2", "--format-version", "2"]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "cannot downgrade" in err[0]
    assert run(["upgrade", "db.v2", "--format-version", "4"]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "2 or 3" in err[0]
    assert run(["create-table", "db.v4", "--schema-from", str(parquet), "--format-version", "4"]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "2 or 3" in err[0]


@pytest.mark.parametrize("version", ["2", "3"])
def test_null_typed_column_is_refused_in_one_line(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "n": pa.array([None], pa.null())}), path)
    assert run(["create-table", "db.n", "--schema-from", str(path), "--format-version", version]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "column n has Arrow's null type" in err[0]
    assert run(["count", "db.n"]) == 2  # nothing was created


def test_v3_types_icemor_cannot_write_are_refused_in_one_line(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A nanosecond timestamp column: refused when icemor creates the table, and on every data
    write to a table another writer created with one (pyiceberg failed deep in its resolver)."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StructType, TimestampNanoType

    from icemor.catalog import load_catalog
    from icemor.commit.v3 import v3_metadata_json
    from icemor.exceptions import InvalidArgumentError, UnsupportedFeatureError

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StructType(NestedField(3, "ts", TimestampNanoType(), required=False))),
    )
    with pytest.raises(InvalidArgumentError, match=r"cannot write .*s\.ts \(timestamp_ns\)"):
        icemor.create_table("db.ns", schema, format_version=3)
    catalog = load_catalog()
    with v3_metadata_json():  # as another v3 writer would have made it
        catalog.create_namespace("db")
        catalog.create_table("db.ns", schema=schema, properties={"format-version": "3"})
    table = icemor.load_table("db.ns")
    rows = pa.table(
        {"id": pa.array([1], pa.int64()), "s": pa.array([{"ts": 5}], pa.struct([("ts", pa.timestamp("ns"))]))}
    )
    with pytest.raises(UnsupportedFeatureError, match=r"s\.ts \(timestamp_ns\)"):
        table.append(rows)
    path = tmp_path / "rows.parquet"
    import pyarrow.parquet as pq

    pq.write_table(rows, path)
    capsys.readouterr()
    assert run(["append", "db.ns", str(path)]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "timestamp_ns" in err[0]
    assert table.refresh().metadata.current_snapshot_id is None  # nothing committed
    assert not list((home / "warehouse").rglob("*.parquet"))  # and no file left behind
