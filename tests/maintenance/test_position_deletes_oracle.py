"""Minor compaction judged by Iceberg Java: same rows, one position-delete file per data file (or per
partition), no dangling position left, and the replaced files' sequence number kept."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import pytest

import icemor
from oracle import assert_same_at_every_snapshot

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def delete_entries(oracle: IcebergJava, name: str) -> list[Any]:
    """Live position-delete entries of the current snapshot, as Java's ``entries`` table shows them."""
    return oracle.sql(
        f"SELECT snapshot_id, sequence_number, file_sequence_number, data_file.file_path AS path, "
        f"data_file.partition AS partition FROM {oracle.qualified(name)}.entries "
        f"WHERE status < 2 AND data_file.content = 1"
    )


def live_positions(oracle: IcebergJava, name: str) -> tuple[Counter[tuple[str, int]], set[tuple[str, int]]]:
    """Java's ``position_deletes`` rows, and those that name a live data file below its row count."""
    q = oracle.qualified(name)
    counts = {
        r.file_path: r.record_count for r in oracle.sql(f"SELECT file_path, record_count FROM {q}.data_files")
    }
    rows = Counter(
        (r.file_path, int(r.pos)) for r in oracle.sql(f"SELECT file_path, pos FROM {q}.position_deletes")
    )
    valid = {(p, pos) for p, pos in rows if p in counts and pos < counts[p]}
    return rows, valid


@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("granularity", ["file", "partition"])
def test_merges_position_deletes_and_drops_dangling_ones(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, granularity: str, engine: str
) -> None:
    name = f"{ns}.t"
    # Java writes partition-scoped delete files (each names both data files of its partition)
    oracle.create_table(
        name, "id BIGINT, k STRING", partitioned_by="k", properties={"write.delete.granularity": "partition"}
    )
    q = oracle.qualified(name)
    for lo in (0, 100):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 2) FROM range({lo}, {lo + 100})"
        )
    for m in (3, 5, 7):
        oracle.sql(f"DELETE FROM {q} WHERE id % 11 = {m}")
    # the k0 data files, the one starting at id 0 first (its position 0 holds id 0)
    live = [
        r.file_path
        for r in oracle.sql(
            f"SELECT file_path FROM {q}.data_files WHERE partition.k = 'k0' "
            "ORDER BY readable_metrics.id.lower_bound"
        )
    ]
    # a hand-written file: one live position, one past the data file's rows, one of a removed file
    gone = live[0].replace(".parquet", "-removed.parquet")
    crafted = oracle.write_position_delete_file(
        name, [(live[0], 0), (live[0], 10_000), (gone, 1)], partition_path="k=k0"
    )
    # and one that names a removed data file only: it applies to nothing
    unused = oracle.write_position_delete_file(name, [(gone, 2)], partition_path="k=k0")
    oracle.commit_row_delta(name, delete_files=[crafted, unused])
    oracle.sql(f"ALTER TABLE {q} SET TBLPROPERTIES ('write.delete.granularity' = '{granularity}')")

    before = oracle.rows(name)
    assert 0 not in {r[0] for r in before}
    _, valid_before = live_positions(oracle, name)
    old = delete_entries(oracle, name)
    assert len(old) == 8  # 3 per partition from Java's DELETEs, plus the two hand-written ones
    max_seq = defaultdict(int)
    for e in old:
        if e.path != unused.path():  # applies to nothing: removed, its number does not carry over
            max_seq[e.partition.k] = max(max_seq[e.partition.k], e.sequence_number)

    table = icemor.load_table(name, catalog=catalog)
    m = table.maintenance.rewrite_position_deletes(spark=oracle.spark if engine == "spark" else None)

    assert m.snapshot_id is not None
    assert (m.delete_files_rewritten, m.dangling_delete_files_removed, m.data_files_removed) == (7, 1, 0)
    assert Counter(oracle.rows(name)) == Counter(before)
    rows, valid = live_positions(oracle, name)
    assert valid == valid_before  # every live position is still deleted ...
    assert set(rows) == valid and max(rows.values()) == 1  # ... once, and nothing dangles
    assert m.positions_written == len(valid)

    new = delete_entries(oracle, name)
    snapshot = oracle.java_table(name).currentSnapshot()
    assert str(snapshot.operation()) == "replace"
    assert {e.snapshot_id for e in new} == {snapshot.snapshotId()}
    for e in new:  # the replaced files' data sequence number, the commit's file sequence number
        assert e.sequence_number == max_seq[e.partition.k]
        assert e.file_sequence_number == snapshot.sequenceNumber()
    per_delete: dict[str, set[str]] = defaultdict(set)
    per_data: dict[str, set[str]] = defaultdict(set)
    for r in oracle.sql(f"SELECT file_path, delete_file_path FROM {q}.position_deletes"):
        per_delete[r.delete_file_path].add(r.file_path)
        per_data[r.file_path].add(r.delete_file_path)
    assert all(len(v) == 1 for v in per_data.values())  # one delete file per data file
    if granularity == "file":
        assert len(new) == 4 and all(len(v) == 1 for v in per_delete.values())
    else:
        assert len(new) == 2 and {e.partition.k for e in new} == {"k0", "k1"}
    assert_same_at_every_snapshot(oracle, catalog, name)
    assert table.maintenance.rewrite_position_deletes().snapshot_id is None  # nothing left to do


def test_data_file_whose_rows_are_all_deleted_is_removed(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT", properties={"write.delete.granularity": "partition"})
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id FROM range(0, 10)")
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id FROM range(10, 20)")
    oracle.sql(f"DELETE FROM {q} WHERE id < 5 OR id = 12")
    oracle.sql(f"DELETE FROM {q} WHERE id < 10 OR id = 15")
    files = oracle.sql(f"SELECT file_path, record_count FROM {q}.data_files")
    assert len(files) == 2
    m = icemor.load_table(name, catalog=catalog).maintenance.rewrite_position_deletes()
    assert (m.data_files_removed, m.delete_files_rewritten, m.positions_written) == (1, 2, 2)
    assert [r.record_count for r in oracle.sql(f"SELECT record_count FROM {q}.data_files")] == [10]
    assert sorted(r[0] for r in oracle.rows(name)) == [i for i in range(10, 20) if i not in (12, 15)]
    assert_same_at_every_snapshot(oracle, catalog, name)


def test_single_clean_file_per_data_file_is_left_alone(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """Java's own file-granularity DELETEs leave one file per data file: nothing to compact."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by="k")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(0, 50)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 1")
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 2")
    snapshots = oracle.snapshot_ids(name)
    m = icemor.load_table(name, catalog=catalog).maintenance.rewrite_position_deletes()
    assert m.snapshot_id is None and m.delete_files_rewritten == 0
    assert oracle.snapshot_ids(name) == snapshots
