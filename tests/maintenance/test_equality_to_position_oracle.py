"""Equality -> position conversion judged by Iceberg Java: same rows before and after, no equality
delete left, and the sequence-number trap (rows added after, or with, an equality delete stay)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from oracle import assert_same_at_every_snapshot

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def _delete_contents(oracle: IcebergJava, name: str) -> Counter[int]:
    rows = oracle.sql(f"SELECT content FROM {oracle.qualified(name)}.delete_files")
    return Counter(int(r[0]) for r in rows)


def _ids(oracle: IcebergJava, name: str) -> list[int]:
    return sorted(r[0] for r in oracle.rows(name))


@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("partitioned_by", [None, "k"])
def test_conversion_keeps_rows_and_rows_added_after_the_delete(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, engine: str, partitioned_by: str | None
) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by=partitioned_by)
    q = oracle.qualified(name)
    for lo in (0, 100, 200):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 3) FROM range({lo}, {lo + 100})"
        )
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 9")  # Java's position deletes, to be folded in
    ids = oracle.field_ids(name)
    gone = [i for i in range(300) if i % 7 == 0]
    if partitioned_by:  # equality deletes of a partitioned spec live in the partition of their rows
        for part in ("k0", "k1", "k2"):
            keys = [i for i in gone if f"k{i % 3}" == part]
            oracle.write_equality_deletes(
                name, pa.table({"id": pa.array(keys, pa.int64())}), [ids["id"]], partition_path=f"k={part}"
            )
    else:
        oracle.write_equality_deletes(name, pa.table({"id": pa.array(gone, pa.int64())}), [ids["id"]])
    # the trap: rows with deleted keys added after the equality delete stay visible
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 3) FROM range(0, 30) WHERE id % 7 = 0")
    before = oracle.rows(name)
    expected_ids = sorted([i for i in range(300) if i % 7 and i % 10 != 9] + list(range(0, 30, 7)))
    assert [r[0] for r in sorted(before)] == expected_ids
    assert _delete_contents(oracle, name)[2] > 0

    table = icemor.load_table(name, catalog=catalog)
    m = table.maintenance.rewrite_equality_deletes(spark=oracle.spark if engine == "spark" else None)
    assert m.snapshot_id is not None and m.equality_delete_files_removed == (3 if partitioned_by else 1)
    assert _delete_contents(oracle, name)[2] == 0  # no equality delete left
    assert Counter(oracle.rows(name)) == Counter(before)
    assert _ids(oracle, name) == expected_ids
    assert str(oracle.java_table(name).currentSnapshot().operation()) == "replace"
    assert_same_at_every_snapshot(oracle, catalog, name)
    # nothing left to convert: a second run commits nothing
    assert table.maintenance.rewrite_equality_deletes().snapshot_id is None


def test_rows_committed_with_the_equality_delete_stay(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """An equality delete does not apply to data of its own commit: converting must not delete it."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING")
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} SELECT id, 'old' FROM range(0, 10)")
    ids = oracle.field_ids(name)
    data = oracle.write_data_file(name, pa.table({"id": pa.array([1, 2], pa.int64()), "k": ["new", "new"]}))
    eq = oracle.write_equality_delete_file(name, pa.table({"id": pa.array([1, 2], pa.int64())}), [ids["id"]])
    oracle.commit_row_delta(name, data_files=[data], delete_files=[eq])
    before = oracle.rows(name)
    assert sorted(before) == sorted(
        [(i, "old") for i in range(10) if i not in (1, 2)] + [(1, "new"), (2, "new")]
    )
    m = icemor.load_table(name, catalog=catalog).maintenance.rewrite_equality_deletes()
    assert m.data_files_converted == 1 and m.positions_written == 2
    assert Counter(oracle.rows(name)) == Counter(before)
    assert_same_at_every_snapshot(oracle, catalog, name)


def test_data_file_left_empty_is_removed(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id FROM range(0, 10)")
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id FROM range(10, 20)")
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(name, pa.table({"id": pa.array([*range(10), 15], pa.int64())}), [ids["id"]])
    m = icemor.load_table(name, catalog=catalog).maintenance.rewrite_equality_deletes()
    assert m.data_files_removed == 1 and m.positions_written == 1
    assert len(oracle.sql(f"SELECT * FROM {q}.data_files")) == 1
    assert _ids(oracle, name) == [i for i in range(10, 20) if i != 15]
    assert_same_at_every_snapshot(oracle, catalog, name)
