"""Deletion vectors from icemor's writers on format-version 3 tables, judged by Iceberg Java.

Each test builds a v3 table with Iceberg Java, writes with icemor, and checks that Java reads exactly
the rows a Python model of the operation expects, that the live delete files are Puffin DVs with at
most one per data file, and that Java's own DVs on the same files are merged by icemor's next write.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

import icemor
from oracle import icemor_rows

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def _make(oracle: IcebergJava, name: str, *, partitioned_by: str | None, version: int = 3) -> str:
    oracle.create_table(
        name, "id BIGINT, k STRING, m INT", partitioned_by=partitioned_by, format_version=version
    )
    q = oracle.qualified(name)
    for lo in (0, 100, 200):  # three inserts: three (sets of) data files
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 3), cast(id % 10 as int) "
            f"FROM range({lo}, {lo + 100})"
        )
    return q


def _ids(rows: list[tuple[Any, ...]]) -> list[int]:
    return sorted(int(r[0]) for r in rows)


def live_deletes(oracle: IcebergJava, name: str) -> list[tuple[str, str, int, str | None]]:
    """(file_format, file_path, record_count, referenced_data_file) of the live delete files, by Java."""
    q = oracle.qualified(name)
    rows = oracle.sql(
        f"SELECT file_format, file_path, record_count, referenced_data_file FROM {q}.delete_files"
    )
    return [(str(r[0]), str(r[1]), int(r[2]), r[3]) for r in rows]


def assert_one_dv_per_data_file(oracle: IcebergJava, name: str, *, deleted: int) -> None:
    deletes = live_deletes(oracle, name)
    assert deletes and {fmt for fmt, _, _, _ in deletes} == {"PUFFIN"}
    per_file = Counter(ref for _, _, _, ref in deletes)
    assert all(ref is not None for ref in per_file) and max(per_file.values()) == 1
    assert sum(n for _, _, n, _ in deletes) == deleted


@pytest.mark.parametrize("partitioned_by", [None, "k"])
def test_delete_writes_dvs_read_by_java_then_merged_with_javas(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned_by: str | None
) -> None:
    name = f"{ns}.t"
    q = _make(oracle, name, partitioned_by=partitioned_by)
    table = icemor.load_table(name, catalog=catalog)

    m = table.delete("m = 3")
    expected = [i for i in range(300) if i % 10 != 3]
    assert m.deleted_rows == 30 and m.data_files_removed == 0
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=30)

    # icemor again on the same files: each DV is replaced by one holding old and new positions
    m = table.delete("m = 4")
    expected = [i for i in expected if i % 10 != 4]
    assert m.deleted_rows == 30
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=60)

    # Java deletes more on every file (its DVs merge icemor's: one Puffin file holds several),
    # then icemor replaces the DV of one data file only: the others in that Puffin file stay
    oracle.sql(f"DELETE FROM {q} WHERE m = 7")
    expected = [i for i in expected if i % 10 != 7]
    table.refresh()
    assert _ids(icemor_rows(catalog, name)) == expected
    m = table.delete("id < 50")
    expected = [i for i in expected if i >= 50]
    assert m.deleted_rows == 35
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=300 - len(expected))
    m = table.delete("m = 5")
    expected = [i for i in expected if i % 10 != 5]
    assert m.deleted_rows == 25
    assert _ids(oracle.rows(name)) == expected
    assert _ids(icemor_rows(catalog, name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=300 - len(expected))


def _twins(oracle: IcebergJava, ns: str, partitioned_by: str | None) -> tuple[str, str]:
    java, ours = f"{ns}.java", f"{ns}.ours"
    _make(oracle, java, partitioned_by=partitioned_by)
    _make(oracle, ours, partitioned_by=partitioned_by)
    return java, ours


def _same(oracle: IcebergJava, catalog: SqlCatalog, java: str, ours: str) -> None:
    expected = Counter(oracle.rows(java))
    assert Counter(oracle.rows(ours)) == expected  # Java reads what icemor wrote
    assert Counter(icemor_rows(catalog, ours)) == expected  # and icemor agrees


def _deleted(oracle: IcebergJava, name: str) -> int:
    """Rows the live delete files delete (the DVs' cardinalities)."""
    return sum(n for _, _, n, _ in live_deletes(oracle, name))


@pytest.mark.parametrize("partitioned_by", [None, "k"])
def test_update_and_merge_write_dvs_like_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned_by: str | None
) -> None:
    java, ours = _twins(oracle, ns, partitioned_by)
    table = icemor.load_table(ours, catalog=catalog)
    oracle.sql(f"UPDATE {oracle.qualified(java)} SET m = m + 100 WHERE id % 7 = 2")
    m = table.update({"m": "m + 100"}, where="id % 7 = 2")
    assert m.rows_updated == len([i for i in range(300) if i % 7 == 2])
    _same(oracle, catalog, java, ours)
    assert_one_dv_per_data_file(oracle, ours, deleted=_deleted(oracle, ours))
    assert _deleted(oracle, ours) == m.rows_updated

    # MERGE over the same files: the DVs of the UPDATE are merged into the new ones
    source = [(i, "src", 1) for i in range(250, 330, 4)]
    view = f"src_{ns}"
    oracle.spark.createDataFrame(source, schema="id bigint, k string, m int").createOrReplaceTempView(view)
    oracle.sql(
        f"MERGE INTO {oracle.qualified(java)} t USING {view} s ON t.id = s.id "
        "WHEN MATCHED AND t.id % 8 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET m = t.m + s.m "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    import pyarrow as pa

    arrow = pa.table(
        {
            "id": pa.array([r[0] for r in source], pa.int64()),
            "k": [r[1] for r in source],
            "m": pa.array([r[2] for r in source], pa.int32()),
        }
    )
    (
        table.refresh()
        .merge(arrow, on="t.id = s.id")
        .when_matched_delete("t.id % 8 = 0")
        .when_matched_update({"m": "t.m + s.m"})
        .when_not_matched_insert_all()
        .execute()
    )
    _same(oracle, catalog, java, ours)
    deletes = live_deletes(oracle, ours)
    assert {fmt for fmt, _, _, _ in deletes} == {"PUFFIN"}
    assert max(Counter(ref for _, _, _, ref in deletes).values()) == 1


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_cdc_same_batch_deletes_are_dvs_and_equality_deletes_stay(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, engine: str
) -> None:
    import pyarrow as pa

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT NOT NULL, v STRING", format_version=3)
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('java', id) FROM range(0, 20)")
    table = icemor.load_table(name, catalog=catalog)
    batch = [("U", 1, "a"), ("I", 30, "b"), ("U", 30, "c"), ("D", 2, None), ("I", 31, "d"), ("U", 31, "e")]
    changes: Any = pa.table(
        {
            "op": [r[0] for r in batch],
            "id": pa.array([r[1] for r in batch], pa.int64()),
            "v": [r[2] for r in batch],
        }
    )
    if engine == "spark":  # the same unit code, on executors
        changes = oracle.spark.createDataFrame(batch, schema="op string, id bigint, v string")
    # equality mode asked for (v3 tables default to position mode: test_apply_changes_oracle.py)
    table.apply_changes(changes, key=["id"], deletes="equality")
    model = {i: f"java{i}" for i in range(20)}
    model.update({1: "a", 30: "c", 31: "e"})
    model.pop(2)
    assert sorted((int(r[0]), r[1]) for r in oracle.rows(name)) == sorted(model.items())
    kinds = Counter(
        (int(r[0]), str(r[1])) for r in oracle.sql(f"SELECT content, file_format FROM {q}.delete_files")
    )
    assert kinds[(2, "PARQUET")] >= 1  # equality deletes stay allowed on v3
    assert kinds[(1, "PUFFIN")] >= 1  # rows superseded within the batch: DVs
    assert (1, "PARQUET") not in kinds


def test_delete_on_spark_engine_writes_dvs(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.t"
    _make(oracle, name, partitioned_by="k")
    table = icemor.load_table(name, catalog=catalog)
    m = table.delete("m = 3", spark=oracle.spark)
    expected = [i for i in range(300) if i % 10 != 3]
    assert m.deleted_rows == 30
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=30)


@pytest.mark.parametrize("partitioned_by", [None, "k"])
def test_maintenance_on_v3_writes_dvs(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned_by: str | None
) -> None:
    import pyarrow as pa

    name = f"{ns}.t"
    q = _make(oracle, name, partitioned_by=partitioned_by)
    oracle.sql(f"DELETE FROM {q} WHERE m = 9")  # Java's DVs, to be merged
    ids = oracle.field_ids(name)
    gone = list(range(0, 300, 7))
    if partitioned_by is None:
        oracle.write_equality_deletes(name, pa.table({"id": pa.array(gone, pa.int64())}), [ids["id"]])
    else:  # one equality delete file per partition k = k0, k1, k2
        for j in range(3):
            part = pa.table({"id": pa.array([i for i in gone if i % 3 == j], pa.int64())})
            oracle.write_equality_deletes(name, part, [ids["id"]], partition_path=f"k=k{j}")
    expected = [i for i in range(300) if i % 10 != 9 and i % 7 != 0]
    assert _ids(oracle.rows(name)) == expected

    table = icemor.load_table(name, catalog=catalog)
    table.maintenance.rewrite_equality_deletes()  # equality -> DVs merged with Java's
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=300 - len(expected))
    assert table.maintenance.rewrite_position_deletes().snapshot_id is None  # DVs only: nothing to do

    table.maintenance.rewrite_data_files(delete_ratio_threshold=0.1)  # major compaction
    assert _ids(oracle.rows(name)) == expected
    assert _ids(icemor_rows(catalog, name)) == expected
    # Java deletes more of the rewritten files, then icemor merges its DVs
    oracle.sql(f"DELETE FROM {q} WHERE m = 8")
    m = table.refresh().delete("m = 6")
    expected = [i for i in expected if i % 10 not in (6, 8)]
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=_deleted(oracle, name))
    assert m.deleted_rows > 0


def test_position_delete_compaction_after_upgrade_writes_dvs(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    q = _make(oracle, name, partitioned_by="k", version=2)
    oracle.sql(f"DELETE FROM {q} WHERE m = 1")
    oracle.sql(f"DELETE FROM {q} WHERE m = 2")  # two position-delete files per data file
    table = icemor.load_table(name, catalog=catalog)
    table.upgrade(format_version=3)
    expected = [i for i in range(300) if i % 10 not in (1, 2)]
    r = table.maintenance.rewrite_position_deletes()
    assert r.snapshot_id is not None
    assert _ids(oracle.rows(name)) == expected
    assert_one_dv_per_data_file(oracle, name, deleted=60)


_DV_SUMMARY_KEYS = (
    "added-dvs",
    "removed-dvs",
    "added-delete-files",
    "removed-delete-files",
    "added-position-delete-files",
    "removed-position-delete-files",
    "added-position-deletes",
    "removed-position-deletes",
    "total-delete-files",
    "total-position-deletes",
)


def _summary(oracle: IcebergJava, name: str) -> dict[str, str]:
    q = oracle.qualified(name)
    (row,) = oracle.sql(f"SELECT summary FROM {q}.snapshots ORDER BY committed_at DESC LIMIT 1")
    return dict(row[0])


def test_snapshot_summary_counts_dvs_as_java(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    """A DV is ``added-dvs`` and a delete file but not a position delete file, and its size is its
    blob's ``content_size_in_bytes`` (Java's SnapshotSummary); replacing it is ``removed-dvs``."""
    java, ours = _twins(oracle, ns, None)
    table = icemor.load_table(ours, catalog=catalog)
    for condition in ("m = 3", "m = 4"):  # the second replaces every DV of the first
        oracle.sql(f"DELETE FROM {oracle.qualified(java)} WHERE {condition}")
        table.delete(condition)
        theirs, mine = _summary(oracle, java), _summary(oracle, ours)
        assert {k: mine.get(k) for k in _DV_SUMMARY_KEYS} == {k: theirs.get(k) for k in _DV_SUMMARY_KEYS}
        blobs = oracle.sql(f"SELECT sum(content_size_in_bytes) FROM {oracle.qualified(ours)}.delete_files")[
            0
        ][0]
        assert int(mine["added-files-size"]) == int(blobs)
    assert int(mine["removed-dvs"]) == 3
