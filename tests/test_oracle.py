"""The oracle works: Iceberg Java and pyiceberg share one catalog, and Java applies every kind of delete."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent

from oracle import OracleUnavailableError, load_oracle_env, local_path, sorted_rows

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from oracle import IcebergJava

PUFFIN_MAGIC = b"PFA1"


def live_files(table: Table, content: ManifestContent) -> list[DataFile]:
    """Return the live data or delete files of the table's current snapshot, read by pyiceberg."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        if manifest.content == content
        for entry in manifest.fetch_manifest_entry(table.io)
    ]


def test_missing_env_file_says_to_run_make_oracle(tmp_path: Path) -> None:
    with pytest.raises(OracleUnavailableError, match="make oracle"):
        load_oracle_env(tmp_path / "oracle.env.json")


def test_sorted_rows_orders_none_first() -> None:
    assert sorted_rows([(2, "b"), (None, "x"), (1, None), (1, "a")]) == [
        (None, "x"),
        (1, None),
        (1, "a"),
        (2, "b"),
    ]


@pytest.mark.oracle
def test_java_position_deletes_are_seen_by_pyiceberg(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.events"
    oracle.create_table(name, "id BIGINT, data STRING")
    oracle.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")
    oracle.sql(f"DELETE FROM {name} WHERE id IN (2, 4)")

    assert oracle.rows(name) == [(1, "a"), (3, "c"), (5, "e")]
    assert (ns, "events") in catalog.list_tables(ns)
    table = catalog.load_table(name)
    assert table.format_version == 2
    assert table.properties["write.delete.mode"] == "merge-on-read"
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.snapshot_id == oracle.current_snapshot_id(name)
    assert [m.content for m in snapshot.manifests(table.io)].count(ManifestContent.DELETES) >= 1
    delete_files = live_files(table, ManifestContent.DELETES)
    assert delete_files
    assert {f.content for f in delete_files} == {DataFileContent.POSITION_DELETES}
    assert {f.file_format for f in delete_files} == {FileFormat.PARQUET}
    assert sum(f.record_count for f in delete_files) == 2
    # Merge-on-read: the data files are still those of the insert.
    assert sum(f.record_count for f in live_files(table, ManifestContent.DATA)) == 5


@pytest.mark.oracle
def test_java_reads_a_pyiceberg_append(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.events"
    oracle.create_table(name, "id BIGINT, data STRING")
    oracle.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    oracle.sql(f"DELETE FROM {name} WHERE id = 2")
    java_snapshots = oracle.snapshot_ids(name)

    table = catalog.load_table(name)
    table.append(pa.table({"id": pa.array([10, 11, 12], pa.int64()), "data": ["x", None, "z"]}))
    appended = table.current_snapshot()
    assert appended is not None

    assert oracle.snapshot_ids(name) == [*java_snapshots, appended.snapshot_id]
    assert oracle.rows(name) == [(1, "a"), (3, "c"), (10, "x"), (11, None), (12, "z")]
    assert oracle.rows(name, snapshot_id=java_snapshots[-1]) == [(1, "a"), (3, "c")]
    assert oracle.rows(name, columns=["data"]) == [(None,), ("a",), ("c",), ("x",), ("z",)]
    arrow = oracle.arrow(name)
    assert arrow.schema.names == ["id", "data"]
    assert sorted(arrow.column("id").to_pylist()) == [1, 3, 10, 11, 12]


@pytest.mark.oracle
def test_format_v3_delete_writes_a_deletion_vector(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.events"
    oracle.create_table(name, "id BIGINT, data STRING", format_version=3)
    oracle.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    oracle.sql(f"DELETE FROM {name} WHERE id IN (1, 3)")

    assert oracle.rows(name) == [(2, "b"), (4, "d")]
    table = catalog.load_table(name)
    assert table.format_version == 3
    delete_files = live_files(table, ManifestContent.DELETES)
    assert delete_files
    for delete_file in delete_files:
        assert delete_file.content == DataFileContent.POSITION_DELETES
        assert delete_file.file_format == FileFormat.PUFFIN
        assert delete_file.file_path.endswith(".puffin")
        assert local_path(delete_file.file_path).read_bytes()[:4] == PUFFIN_MAGIC
    assert sum(f.record_count for f in delete_files) == 2


@pytest.mark.oracle
def test_java_applies_equality_deletes(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.items"
    oracle.create_table(name, "id BIGINT, category STRING, qty INT")
    oracle.sql(
        f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'a', 2), (3, NULL, 5), (4, NULL, 6), (5, 'b', 5),"
        " (6, 'b', NULL)"
    )
    ids = oracle.field_ids(name)

    by_id = pa.table({"id": pa.array([1, 4, 99], pa.int64())})
    first = oracle.write_equality_deletes(name, by_id, [ids["id"]])
    assert oracle.rows(name) == [(2, "a", 2), (3, None, 5), (5, "b", 5), (6, "b", None)]

    # Two columns; NULL in a delete row matches NULL in a data row.
    by_pair = pa.table(
        {"category": pa.array([None, "b", "a"], pa.string()), "qty": pa.array([5, None, 1], pa.int32())}
    )
    oracle.write_equality_deletes(name, by_pair, [ids["category"], ids["qty"]])
    assert oracle.rows(name) == [(2, "a", 2), (5, "b", 5)]
    assert oracle.rows(name, snapshot_id=first) == [(2, "a", 2), (3, None, 5), (5, "b", 5), (6, "b", None)]

    table = catalog.load_table(name)
    delete_files = live_files(table, ManifestContent.DELETES)
    assert {f.content for f in delete_files} == {DataFileContent.EQUALITY_DELETES}
    assert sorted(f.equality_ids for f in delete_files) == [[ids["id"]], [ids["category"], ids["qty"]]]
    assert sorted(f.record_count for f in delete_files) == [3, 3]

    # Equality deletes only reach data files with a lower sequence number: later rows survive.
    oracle.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (7, NULL, 5)")
    assert oracle.rows(name) == [(1, "a", 1), (2, "a", 2), (5, "b", 5), (7, None, 5)]


@pytest.mark.oracle
def test_equality_delete_scopes_after_partition_evolution(oracle: IcebergJava, ns: str) -> None:
    name = f"{ns}.items"
    oracle.create_table(name, "id BIGINT, category STRING, qty INT")
    oracle.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'b', 1), (3, 'b', 2)")
    oracle.sql(f"ALTER TABLE {oracle.qualified(name)} ADD PARTITION FIELD category")
    oracle.sql(f"INSERT INTO {name} VALUES (4, 'a', 1), (5, 'b', 1), (6, 'b', 2)")
    assert oracle.java_table(name).spec().specId() == 1
    ids = oracle.field_ids(name)
    qty = [ids["qty"]]

    # Partition-scoped (spec 1, category=b): spec 0's row (3, 'b', 2) is out of its reach.
    oracle.write_equality_deletes(
        name, pa.table({"qty": pa.array([2], pa.int32())}), qty, partition_path="category=b"
    )
    assert oracle.rows(name) == [(1, "a", 1), (2, "b", 1), (3, "b", 2), (4, "a", 1), (5, "b", 1)]

    # Global (unpartitioned spec 0) delete committed with a new data file: it reaches every older data
    # file of both specs, but not the file added in its own commit.
    added = oracle.write_data_file(
        name,
        pa.table({"id": pa.array([7], pa.int64()), "category": ["b"], "qty": pa.array([1], pa.int32())}),
        partition_path="category=b",
    )
    global_delete = oracle.write_equality_delete_file(
        name, pa.table({"qty": pa.array([1], pa.int32())}), qty, spec_id=0
    )
    oracle.commit_row_delta(name, data_files=[added], delete_files=[global_delete])
    assert oracle.rows(name) == [(3, "b", 2), (7, "b", 1)]

    delete_files = oracle.sql(
        f"SELECT spec_id, content, equality_ids FROM {oracle.qualified(name)}.delete_files"
    )
    assert sorted((r.spec_id, r.content, list(r.equality_ids)) for r in delete_files) == [
        (0, 2, qty),
        (1, 2, qty),
    ]
