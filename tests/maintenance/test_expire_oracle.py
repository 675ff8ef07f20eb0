"""Snapshot expiry and orphan removal judged by Iceberg Java: every retained snapshot, branch and tag
still reads the same rows in Java and icemor, every file they reach is still there, and every file
only the expired snapshots reached is gone."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.exceptions import InvalidArgumentError
from oracle import icemor_rows, local_path

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def reachable(oracle: IcebergJava, name: str) -> set[Path]:
    """Every file Java says a snapshot of the table reaches: content files, manifests, manifest
    lists, statistics files (Java's metadata tables, not icemor's reading of the metadata)."""
    q = oracle.qualified(name)
    paths = {r[0] for r in oracle.sql(f"SELECT file_path FROM {q}.all_files")}
    paths |= {r[0] for r in oracle.sql(f"SELECT path FROM {q}.all_manifests")}
    paths |= {r[0] for r in oracle.sql(f"SELECT manifest_list FROM {q}.snapshots")}
    table = oracle.java_table(name)
    stats = table.statisticsFiles().iterator()
    while stats.hasNext():
        paths.add(stats.next().path())
    return {local_path(p) for p in paths}


def refs(oracle: IcebergJava, name: str) -> dict[str, int]:
    return {r.name: int(r.snapshot_id) for r in oracle.sql(f"SELECT * FROM {oracle.qualified(name)}.refs")}


def rows_at(oracle: IcebergJava, name: str, snapshot_id: int) -> Counter[tuple[Any, ...]]:
    return Counter(oracle.rows(name, snapshot_id=snapshot_id))


def history_with_branch_and_tags(oracle: IcebergJava, catalog: SqlCatalog, name: str) -> dict[str, int]:
    """A table whose files come and go: Java and icemor deletes, equality deletes, a compaction,
    table statistics, a tag, a branch with commits of its own, and a tag too old to keep.

    Returns:
        Snapshot ids by label.
    """
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by="k")
    q = oracle.qualified(name)
    s: dict[str, int] = {}

    def mark(label: str) -> None:
        current = oracle.current_snapshot_id(name)
        assert current is not None
        s[label] = current

    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(0, 100)")
    mark("s1")
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 1")
    mark("s2")
    oracle.sql(f"ALTER TABLE {q} CREATE TAG t2 AS OF VERSION {s['s2']}")
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(100, 200)")
    mark("s3")
    oracle.sql(f"CALL {oracle.catalog_name}.system.compute_table_stats(table => '{name}')")
    ids = oracle.field_ids(name)
    for part in ("k0", "k1"):
        keys = [i for i in range(0, 200, 7) if f"k{i % 2}" == part]
        oracle.write_equality_deletes(
            name, pa.table({"id": pa.array(keys, pa.int64())}), [ids["id"]], partition_path=f"k={part}"
        )
    mark("s4")
    oracle.sql(f"ALTER TABLE {q} CREATE BRANCH b AS OF VERSION {s['s4']}")
    oracle.sql(f"INSERT INTO {q}.branch_b SELECT id, concat('k', id % 2) FROM range(500, 520)")
    oracle.sql(f"DELETE FROM {q}.branch_b WHERE id % 10 = 3")
    s["b"] = refs(oracle, name)["b"]
    # files only main's history between the branch and the compaction reaches
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(200, 220)")
    table = icemor.load_table(name, catalog=catalog)
    table.delete("id >= 150 and id < 160")
    mark("s5")
    table.maintenance.rewrite_data_files(delete_file_threshold=1)
    mark("s6")
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(300, 310)")
    mark("s7")
    # a tag whose max-ref-age (1 ms) has passed: expiry removes it
    table.pyiceberg.manage_snapshots().create_tag(s["s1"], "old", max_ref_age_ms=1).commit()
    return s


def test_expire_keeps_what_refs_reach_and_deletes_the_rest(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    s = history_with_branch_and_tags(oracle, catalog, name)
    all_snapshots = set(oracle.snapshot_ids(name))
    rows = {sid: rows_at(oracle, name, sid) for sid in all_snapshots}
    before = reachable(oracle, name)
    assert all(p.exists() for p in before)
    time.sleep(0.01)
    table = icemor.load_table(name, catalog=catalog)

    dry = table.maintenance.expire_snapshots(older_than=int(time.time() * 1000), retain_last=1, dry_run=True)
    assert set(oracle.snapshot_ids(name)) == all_snapshots and all(p.exists() for p in before)
    m = table.maintenance.expire_snapshots(older_than=int(time.time() * 1000), retain_last=1)

    # main keeps its head, the tag t2 and branch b their heads; "old" aged out
    kept = {s["s7"], s["s2"], s["b"]}
    assert set(oracle.snapshot_ids(name)) == kept
    assert set(m.snapshots_expired) == all_snapshots - kept and m.refs_removed == ("old",)
    assert refs(oracle, name) == {"main": s["s7"], "t2": s["s2"], "b": s["b"]}
    after = reachable(oracle, name)
    assert all(p.exists() for p in after), sorted(p for p in after if not p.exists())[:3]
    gone = before - after
    assert gone and not any(p.exists() for p in gone), sorted(p for p in gone if p.exists())[:3]
    assert {local_path(p) for p in m.files} == gone  # exactly those, nothing Java still reaches
    assert dry.files == m.files and dry.snapshots_expired == m.snapshots_expired
    assert m.statistics_files_deleted == 1 and m.manifest_lists_deleted == len(all_snapshots) - 3
    assert m.data_files_deleted > 0 and m.delete_files_deleted > 0 and not m.failed
    for sid in kept:  # Java (and icemor) still read every retained snapshot, unchanged
        assert rows_at(oracle, name, sid) == rows[sid]
        assert Counter(icemor_rows(catalog, name, snapshot_id=sid)) == rows[sid]
    q = oracle.qualified(name)
    assert Counter(oracle.sql(f"SELECT * FROM {q} VERSION AS OF 't2'")) == rows[s["s2"]]
    assert Counter(oracle.sql(f"SELECT * FROM {q} VERSION AS OF 'b'")) == rows[s["b"]]
    # nothing more to expire
    again = table.maintenance.expire_snapshots(older_than=int(time.time() * 1000), retain_last=1)
    assert again.snapshots_expired == () and again.files == ()


def test_retain_last_and_branch_retention(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    """retain_last keeps the newest ancestors of each branch; a branch's own min-snapshots-to-keep wins."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT")
    q = oracle.qualified(name)
    for i in range(5):
        oracle.sql(f"INSERT INTO {q} VALUES ({i})")
    main = oracle.snapshot_ids(name)
    oracle.sql(f"ALTER TABLE {q} CREATE BRANCH b AS OF VERSION {main[1]} WITH SNAPSHOT RETENTION 2 SNAPSHOTS")
    oracle.sql(f"INSERT INTO {q}.branch_b VALUES (100)")
    oracle.sql(f"INSERT INTO {q}.branch_b VALUES (101)")
    branch_head = refs(oracle, name)["b"]
    table = icemor.load_table(name, catalog=catalog)
    now = int(time.time() * 1000) + 1
    m = table.maintenance.expire_snapshots(older_than=now, retain_last=3)
    remaining = set(oracle.snapshot_ids(name))
    # main: its 3 newest; b: its own 2 (head and parent), not 3
    parent = int(oracle.java_table(name).snapshot(branch_head).parentId())
    assert remaining == {*main[2:], branch_head, parent}
    assert set(m.snapshots_expired) == {main[0], main[1]}
    assert sorted(r[0] for r in oracle.rows(name)) == [0, 1, 2, 3, 4]
    assert sorted(r[0] for r in oracle.sql(f"SELECT id FROM {q} VERSION AS OF 'b'")) == [0, 1, 100, 101]
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        table.maintenance.expire_snapshots(retain_last=0)


def test_default_age_keeps_young_snapshots_and_gc_disabled_refuses(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT")
    for i in range(3):
        oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES ({i})")
    table = icemor.load_table(name, catalog=catalog)
    m = table.maintenance.expire_snapshots()  # 5 days by default: all are younger
    assert m.snapshots_expired == () and len(oracle.snapshot_ids(name)) == 3
    oracle.sql(f"ALTER TABLE {oracle.qualified(name)} SET TBLPROPERTIES ('gc.enabled' = 'false')")
    with pytest.raises(InvalidArgumentError, match=r"gc\.enabled=false"):
        table.refresh().maintenance.expire_snapshots(older_than=int(time.time() * 1000) + 1)
    with pytest.raises(InvalidArgumentError, match=r"gc\.enabled=false"):
        table.maintenance.remove_orphan_files(dry_run=True)


def _age(path: Path, days: float) -> None:
    t = time.time() - days * 86400
    os.utime(path, (t, t))


def test_orphans_are_only_unreferenced_files_past_the_window(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    s = history_with_branch_and_tags(oracle, catalog, name)
    location = local_path(oracle.java_table(name).location())
    referenced = reachable(oracle, name)
    # every file of the table looks old, referenced or not: only references may protect them
    for p in location.rglob("*"):
        if p.is_file():
            _age(p, 10)
    old_orphan = location / "data" / "k=k0" / "stray-old.parquet"
    old_orphan.write_bytes(b"x" * 10)
    _age(old_orphan, 4)
    new_orphan = location / "data" / "stray-new.parquet"
    new_orphan.write_bytes(b"y")
    old_meta_orphan = location / "metadata" / "stray.avro"
    old_meta_orphan.write_bytes(b"z")
    _age(old_meta_orphan, 30)
    rows = {sid: rows_at(oracle, name, sid) for sid in oracle.snapshot_ids(name)}
    table = icemor.load_table(name, catalog=catalog)

    dry = table.maintenance.remove_orphan_files(dry_run=True)
    assert {local_path(p) for p in dry.files} == {old_orphan, old_meta_orphan} and dry.bytes == 11
    assert old_orphan.exists() and old_meta_orphan.exists()
    m = table.maintenance.remove_orphan_files()
    assert m.files == dry.files and not m.failed
    assert not old_orphan.exists() and not old_meta_orphan.exists() and new_orphan.exists()
    # a cut-off in the future: the young orphan goes too, and still nothing referenced
    m = table.maintenance.remove_orphan_files(older_than=int(time.time() * 1000) + 60_000)
    assert {local_path(p) for p in m.files} == {new_orphan}
    assert all(p.exists() for p in referenced)
    metadata_files = {local_path(e.metadata_file) for e in table.refresh().metadata.metadata_log}
    assert all(p.exists() for p in metadata_files) and local_path(table.pyiceberg.metadata_location).exists()
    for sid, expected in rows.items():
        assert rows_at(oracle, name, sid) == expected
    assert s["s7"] in rows


def test_v3_dry_run_finds_replaced_deletion_vector_puffins(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """A dry run on v3 names exactly the files Java says only the expired snapshots reach, the
    replaced deletion-vector Puffin too, and deletes nothing."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING", format_version=3)
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(0, 100)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 1")
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 2")  # Java merges the first DV into a new Puffin
    current = {r[0] for r in oracle.sql(f"SELECT file_path FROM {q}.files")}
    current |= {r[0] for r in oracle.sql(f"SELECT path FROM {q}.manifests")}
    current.add(str(oracle.java_table(name).currentSnapshot().manifestListLocation()))
    expected = reachable(oracle, name) - {local_path(p) for p in current}
    assert any(p.suffix == ".puffin" for p in expected)
    table = icemor.load_table(name, catalog=catalog)
    m = table.maintenance.expire_snapshots(
        older_than=int(time.time() * 1000) + 1, retain_last=1, dry_run=True
    )
    assert {local_path(p) for p in m.files} == expected
    assert m.delete_files_deleted == 1 and len(m.snapshots_expired) == 2
    assert all(p.exists() for p in expected) and len(oracle.snapshot_ids(name)) == 3


def test_v3_expiry_deletes_what_only_expired_snapshots_reach(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """On v3: Java's and icemor's DVs replaced over
    three DELETEs; expiry deletes exactly the files Java says only the expired snapshots reach
    (a Puffin file still holding a live DV of another data file stays), and the table then
    reads the same rows in Java and icemor, at its one snapshot."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING", format_version=3)
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(0, 100)")
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(100, 200)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 1")  # DVs of both data files
    table = icemor.load_table(name, catalog=catalog)
    table.delete("id < 100 and id % 10 = 2")  # replaces one data file's DV only
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 3")
    current = {r[0] for r in oracle.sql(f"SELECT file_path FROM {q}.files")}
    current |= {r[0] for r in oracle.sql(f"SELECT path FROM {q}.manifests")}
    current.add(str(oracle.java_table(name).currentSnapshot().manifestListLocation()))
    kept = {local_path(p) for p in current}
    expected = reachable(oracle, name) - kept
    assert any(p.suffix == ".puffin" for p in expected)
    head = oracle.current_snapshot_id(name)
    assert head is not None
    before = rows_at(oracle, name, head)
    m = icemor.load_table(name, catalog=catalog).maintenance.expire_snapshots(
        older_than=int(time.time() * 1000) + 1, retain_last=1
    )
    assert {local_path(p) for p in m.files} == expected
    assert not any(p.exists() for p in expected)
    assert all(p.exists() for p in kept)
    assert oracle.snapshot_ids(name) == [head]
    assert rows_at(oracle, name, head) == before
    assert Counter(icemor_rows(catalog, name)) == before
    assert sum(before.values()) == 200 - 20 - 10 - 20
