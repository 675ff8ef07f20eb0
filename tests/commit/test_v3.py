"""Format version 3 commits: icemor creates v3 tables and appends to them; Iceberg Java
reads the metadata, manifests and manifest lists it writes, and agrees on row lineage."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.ops.create import create_table

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def _rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": pa.array(ids, pa.int64()), "k": [f"k{i % 3}" for i in ids]})


def _parquet(tmp_path: Path, name: str, rows: pa.Table) -> Path:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(rows, path)
    return path


def _lineage(oracle: IcebergJava, name: str) -> list[tuple[int, int, int]]:
    """(id, _row_id, _last_updated_sequence_number) of every row, as Iceberg Java reads them."""
    q = oracle.qualified(name)
    rows = oracle.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {q}")
    return sorted((int(r[0]), int(r[1]), int(r[2])) for r in rows)


@pytest.mark.parametrize("partition_by", [(), ("k",)])
def test_create_v3_and_append_read_by_java_with_row_lineage(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    name = f"{ns}.t"
    first = _parquet(tmp_path, "a", _rows(0, 10))
    create_table(
        catalog,
        name,
        schema_from=first,
        partition_by=partition_by,
        format_version=3,
        tables=dict,
    )
    table = icemor.load_table(name, catalog=catalog)
    assert table.metadata.format_version == 3
    table.append_files([first])
    table.append_files([_parquet(tmp_path, "b", _rows(10, 25))])

    q = oracle.qualified(name)
    props = {r[0]: r[1] for r in oracle.sql(f"SHOW TBLPROPERTIES {q}")}
    assert props.get("format-version") == "3"
    assert sorted(int(r[0]) for r in oracle.sql(f"SELECT id FROM {q}")) == list(range(25))
    # row lineage: ids 0..24 in order of the appends, each row's sequence number its append's
    java_table = oracle.java_table(name)
    assert java_table.operations().current().nextRowId() == 25
    lineage = _lineage(oracle, name)
    by_id = {i: (row_id, seq) for i, row_id, seq in lineage}
    assert sorted(r for r, _ in by_id.values()) == list(range(25))
    assert {seq for i, (_, seq) in by_id.items() if i < 10} == {1}
    assert {seq for i, (_, seq) in by_id.items() if i >= 10} == {2}
    assert all(r < 10 for i, (r, _) in by_id.items() if i < 10)

    # Java appends after icemor: it continues from icemor's next-row-id, and icemor's next append
    # continues from Java's
    oracle.sql(f"INSERT INTO {q} VALUES (100, 'k0'), (101, 'k1')")
    table.refresh()
    table.append_files([_parquet(tmp_path, "c", _rows(200, 203))])
    lineage = _lineage(oracle, name)
    assert sorted(r for _, r, _ in lineage) == list(range(30))
    assert oracle.java_table(name).operations().current().nextRowId() == 30

    # a commit that rewrites a data manifest (partitioned: a whole file removed, its manifest's
    # other files kept as EXISTING) keeps every remaining row's id and sequence number
    table.refresh().delete("id < 10 and k = 'k0'")
    gone = {i for i in range(10) if i % 3 == 0}
    assert _lineage(oracle, name) == [t for t in lineage if t[0] not in gone]


def test_create_v3_refuses_bad_versions(catalog: SqlCatalog, ns: str, tmp_path: Path) -> None:
    from icemor.exceptions import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="2 or 3"):
        create_table(
            catalog,
            f"{ns}.t",
            schema_from=_parquet(tmp_path, "a", _rows(0, 1)),
            format_version=4,
            tables=dict,
        )


def test_add_files_on_v3_read_by_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path
) -> None:
    name = f"{ns}.t"
    first = _parquet(tmp_path, "a", _rows(0, 10))
    create_table(catalog, name, schema_from=first, format_version=3, tables=dict)
    table = icemor.load_table(name, catalog=catalog)
    table.append_files([first])
    assert table.add_files([str(_parquet(tmp_path, "b", _rows(10, 14)))]) == 4  # no field ids: name mapping
    q = oracle.qualified(name)
    assert sorted(int(r[0]) for r in oracle.sql(f"SELECT id FROM {q}")) == list(range(14))
    assert sorted(r for _, r, _ in _lineage(oracle, name)) == list(range(14))
    # refused (already in the table): nothing committed, and the caller's file is never deleted
    again = tmp_path / "b.parquet"
    with pytest.raises(Exception, match="already"):
        table.add_files([str(again)])
    assert again.exists()
    assert len(oracle.snapshot_ids(name)) == 2
