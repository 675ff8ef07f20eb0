"""Major compaction judged by Iceberg Java: same rows, no delete file left where all applied, Java's
file selection, the starting sequence number, and the validation against concurrent deletes."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from duckdb_iceberg import SITE, duckdb_rows
from icemor.engines.local import runner
from icemor.engines.spark import runner as spark_runner
from icemor.exceptions import CommitConflictError
from icemor.maintenance.data_files import rewrite_data_files
from oracle import assert_same_at_every_snapshot, local_path
from racing import meanwhile

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def data_entries(oracle: IcebergJava, name: str) -> list[Any]:
    return oracle.sql(
        f"SELECT snapshot_id, sequence_number, data_file.file_path AS path, data_file.record_count AS n "
        f"FROM {oracle.qualified(name)}.entries WHERE status < 2 AND data_file.content = 0"
    )


def delete_files(oracle: IcebergJava, name: str) -> list[Any]:
    return oracle.sql(f"SELECT content, file_path FROM {oracle.qualified(name)}.delete_files")


def mixed_deletes_table(oracle: IcebergJava, name: str, partitioned_by: str | None) -> list[int]:
    """Three inserts, Java position deletes, equality deletes, then rows with deleted keys again.

    Returns:
        The live ids, computed by hand.
    """
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by=partitioned_by)
    q = oracle.qualified(name)
    for lo in (0, 100, 200):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 3) FROM range({lo}, {lo + 100})"
        )
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 9")
    ids = oracle.field_ids(name)
    gone = [i for i in range(300) if i % 7 == 0]
    if partitioned_by:
        for part in ("k0", "k1", "k2"):
            keys = [i for i in gone if f"k{i % 3}" == part]
            oracle.write_equality_deletes(
                name, pa.table({"id": pa.array(keys, pa.int64())}), [ids["id"]], partition_path=f"k={part}"
            )
    else:
        oracle.write_equality_deletes(name, pa.table({"id": pa.array(gone, pa.int64())}), [ids["id"]])
    # the trap: rows with deleted keys appended after the equality delete stay visible
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 3) FROM range(0, 30) WHERE id % 7 = 0")
    return sorted([i for i in range(300) if i % 7 and i % 10 != 9] + list(range(0, 30, 7)))


@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("partitioned_by", [None, "k"])
def test_rewrite_applies_every_delete_and_removes_them(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, engine: str, partitioned_by: str | None
) -> None:
    name = f"{ns}.t"
    expected = mixed_deletes_table(oracle, name, partitioned_by)
    before = oracle.rows(name)
    assert sorted(r[0] for r in before) == expected
    assert {r.content for r in delete_files(oracle, name)} == {1, 2}
    start = oracle.java_table(name).currentSnapshot()
    old = {e.path for e in data_entries(oracle, name)}

    table = icemor.load_table(name, catalog=catalog)
    m = table.maintenance.rewrite_data_files(
        delete_file_threshold=1, spark=oracle.spark if engine == "spark" else None
    )

    assert m.snapshot_id is not None and m.rows_written == len(expected)
    assert Counter(oracle.rows(name)) == Counter(before)
    assert delete_files(oracle, name) == []  # every delete applied to a rewritten file
    snapshot = oracle.java_table(name).currentSnapshot()
    assert str(snapshot.operation()) == "replace"
    new = data_entries(oracle, name)
    # the files with deletes are rewritten; the small clean one (appended last) is bin-packed too
    assert {e.path for e in new}.isdisjoint(old)
    assert m.data_files_rewritten == len(old) and m.data_files_added == len(new)
    for e in new:  # Java's use-starting-sequence-number: the starting snapshot's number
        assert e.snapshot_id == snapshot.snapshotId()
        assert e.sequence_number == start.sequenceNumber()
    assert_same_at_every_snapshot(oracle, catalog, name)
    # nothing has deletes or is one of several small files any more
    assert table.maintenance.rewrite_data_files(delete_file_threshold=1).snapshot_id is None


def _two_files(oracle: IcebergJava, name: str, partitioned_by: str | None = None) -> str:
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by=partitioned_by)
    q = oracle.qualified(name)
    for lo in (0, 1000):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 2) FROM range({lo}, {lo + 1000})"
        )
    return q


def _paths(oracle: IcebergJava, name: str) -> dict[str, int]:
    q = oracle.qualified(name)
    return {r.file_path: r.file_size_in_bytes for r in oracle.sql(f"SELECT * FROM {q}.data_files")}


def test_only_files_over_the_delete_ratio_are_rewritten(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """With a target the files' size (not outliers), only the file with >= 30 % deleted is rewritten."""
    name = f"{ns}.t"
    q = _two_files(oracle, name)
    oracle.sql(f"DELETE FROM {q} WHERE id < 350 OR (id >= 1000 AND id < 1100)")  # 35 % and 10 %
    files = _paths(oracle, name)
    by_range = {
        r.file_path: int(r.lo)
        for r in oracle.sql(f"SELECT file_path, readable_metrics.id.lower_bound AS lo FROM {q}.data_files")
    }
    heavy = next(p for p, lo in by_range.items() if lo == 0)
    light = next(p for p, lo in by_range.items() if lo == 1000)
    before = oracle.rows(name)
    table = icemor.load_table(name, catalog=catalog)
    target = sum(files.values()) // 2
    m = table.maintenance.rewrite_data_files(target_file_size_bytes=target)
    assert m.data_files_rewritten == 1 and m.delete_files_removed == 1
    after = _paths(oracle, name)
    assert light in after and heavy not in after
    assert [r.content for r in delete_files(oracle, name)] == [1]  # the light file's stays
    assert Counter(oracle.rows(name)) == Counter(before)
    # the light file alone reaches a 10 % threshold
    m = table.maintenance.rewrite_data_files(delete_ratio_threshold=0.1, target_file_size_bytes=target)
    assert m.data_files_rewritten == 1 and m.data_files_added == 1 and light not in _paths(oracle, name)
    assert delete_files(oracle, name) == []
    assert Counter(oracle.rows(name)) == Counter(before)
    assert_same_at_every_snapshot(oracle, catalog, name)


def test_delete_file_threshold_and_where(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.t"
    q = _two_files(oracle, name, partitioned_by="k")
    oracle.sql(f"DELETE FROM {q} WHERE id = 2 OR id = 3")  # one delete file in each partition
    before = oracle.rows(name)
    table = icemor.load_table(name, catalog=catalog)
    big = 10 * max(_paths(oracle, name).values())  # files are small: outliers, yet only 2 a partition
    assert table.maintenance.rewrite_data_files(target_file_size_bytes=big).snapshot_id is None
    k1 = {p for p in _paths(oracle, name) if "k=k1" in p}
    m = table.maintenance.rewrite_data_files(delete_file_threshold=1, where="k = 'k0'")
    assert m.data_files_rewritten == 2 and m.delete_files_removed == 1
    assert k1 <= set(_paths(oracle, name))  # the other partition is untouched
    assert [r.file_path for r in delete_files(oracle, name)] != []
    assert Counter(oracle.rows(name)) == Counter(before)
    assert_same_at_every_snapshot(oracle, catalog, name)


def _racing(between: Callable[[], None]) -> Callable[..., Any]:
    """A local runner that runs ``between`` (another writer's commit) after the units, before the commit."""

    def make(io: Any) -> Any:
        run = runner(io)

        def go(fn: Any, items: Any) -> Any:
            results = run(fn, items)
            between()
            return results

        return go

    return make


@pytest.mark.parametrize("use_starting", [True, False])
def test_equality_delete_committed_during_the_rewrite_still_applies(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, use_starting: bool
) -> None:
    """Java's use-starting-sequence-number: the new files keep the starting snapshot's number, so an
    equality delete committed meanwhile applies to them; without it the rewrite must fail."""
    name = f"{ns}.t"
    _two_files(oracle, name)
    oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id < 600")
    field = oracle.field_ids(name)["id"]

    def concurrent() -> None:
        oracle.write_equality_deletes(name, pa.table({"id": pa.array([700, 1500], pa.int64())}), [field])

    table = icemor.load_table(name, catalog=catalog)
    run = _racing(concurrent)(table.io)
    if not use_starting:
        with pytest.raises(CommitConflictError, match="added delete file"):
            rewrite_data_files(table.pyiceberg, run=run, use_starting_sequence_number=False)
        _assert_no_stray_files(oracle, name)
    else:
        m = rewrite_data_files(table.pyiceberg, run=run)
        assert m.snapshot_id is not None and m.rows_written == 1400
    ids = sorted(r[0] for r in oracle.rows(name))
    assert ids == [i for i in range(600, 2000) if i not in (700, 1500)]
    assert_same_at_every_snapshot(oracle, catalog, name)


@pytest.mark.parametrize(("version", "engine"), [(2, "local"), (3, "local"), (3, "spark")])
def test_deletes_committed_during_the_rewrite_are_carried_over(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, version: int, engine: str
) -> None:
    """A Java DELETE, a Java UPDATE and an icemor position-mode CDC batch commit while the rewrite
    runs (Java's RewriteFiles would fail: validateNoNewDeletesForDataFiles); icemor carries their
    positions onto the new files (the units' row order comes back from Spark's executors too).
    Java, icemor and DuckDB read every snapshot alike."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, v STRING", format_version=version)
    q = oracle.qualified(name)
    for lo in (0, 1000):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('r', id) FROM range({lo}, {lo + 1000})"
        )
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 3")
    model = {i: f"r{i}" for i in range(2000) if i % 10 != 3}
    table = icemor.load_table(name, catalog=catalog)

    def writers() -> None:
        oracle.sql(f"DELETE FROM {q} WHERE id IN (7, 1007, 1500)")
        for i in (7, 1007, 1500):
            del model[i]
        oracle.sql(f"UPDATE {q} SET v = 'u' WHERE id % 250 = 1")
        model.update(dict.fromkeys(range(1, 2000, 250), "u"))
        changes = pa.table(
            {"id": pa.array([20, 1020, 5000], pa.int64()), "v": ["c", None, "n"], "op": ["U", "D", "I"]}
        )
        icemor.load_table(name, catalog=catalog).apply_changes(
            changes, key=["id"], deletes="position", allow_nullable_key=True
        )
        model.update({20: "c", 5000: "n"})
        del model[1020]

    base = spark_runner(oracle.spark, table.io, table.metadata.location) if engine == "spark" else None
    run = meanwhile(table.io, writers, base=base)
    m = rewrite_data_files(table.pyiceberg, run=run, delete_file_threshold=1)
    assert m.data_files_rewritten == 2 and m.position_deletes_carried == 3 + 8 + 2
    assert str(oracle.java_table(name).currentSnapshot().operation()) == "replace"
    assert sorted(oracle.rows(name)) == sorted(model.items())
    assert_same_at_every_snapshot(oracle, catalog, name)
    if (SITE / ".prepared").exists():
        assert duckdb_rows(table.refresh().pyiceberg.metadata_location) == sorted(model.items())
    _assert_no_stray_files(oracle, name)


def _data_dir_files(oracle: IcebergJava, name: str) -> list[Any]:
    location = oracle.java_table(name).location()
    # not the key-index sidecars position-mode CDC keeps beside data files (``.<name>.icemor-keys.parquet``)
    return [p for p in (local_path(location) / "data").rglob("*.parquet") if not p.name.startswith(".")]


def _assert_no_stray_files(oracle: IcebergJava, name: str) -> None:
    """Every Parquet file under data/ is one some snapshot references (failed rewrites leave none)."""
    q = oracle.qualified(name)
    known = {local_path(r.file_path) for r in oracle.sql(f"SELECT file_path FROM {q}.all_files")}
    stray = set(_data_dir_files(oracle, name)) - known
    assert not stray, sorted(stray)[:3]
