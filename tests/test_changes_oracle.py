"""The change feed against Iceberg Java 1.10.2.

* Copy-on-write histories (no delete files), where Java's ``create_changelog_view`` answers:
  the same rows, change types, ordinals and snapshot ids; update pairs with identifier
  columns; the net changes' rows.
* Merge-on-read histories written by Java (position deletes, v3 deletion vectors, equality
  deletes), where Java's changelog refuses delete files: each snapshot's changes equal the
  multiset difference of Java's own reads of the snapshot and its parent.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

import icemor
from icemor.cli import run
from planning.test_changes import histories

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle
_views = itertools.count()


def java_changelog(oracle: IcebergJava, name: str, options: str = "") -> list[tuple[Any, ...]]:
    view = f"changes_{next(_views)}"
    oracle.sql(
        f"CALL {oracle.catalog_name}.system.create_changelog_view("
        f"table => '{name}', changelog_view => '{view}'{options})"
    )
    return [tuple(r) for r in oracle.spark.sql(f"SELECT * FROM {view}").collect()]


def ours(table: icemor.table.Table, **kw: Any) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in table.changes(**kw).to_arrow().to_pylist()]


def cow_history(oracle: IcebergJava, name: str, *, duplicates: bool) -> None:
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} VALUES (1, 'a', 'x'), (2, 'b', 'x'), (3, 'c', 'y'), (4, 'd', 'y')")
    if duplicates:
        oracle.sql(f"INSERT INTO {q} VALUES (3, 'c', 'y'), (5, 'e', 'x')")
    oracle.sql(f"DELETE FROM {q} WHERE id = 1")
    oracle.sql(f"UPDATE {q} SET v = 'z' WHERE id IN (2, 3)")
    oracle.sql(f"UPDATE {q} SET v = v WHERE id = 4")  # rewrites the row unchanged: a carry-over
    oracle.sql(
        f"MERGE INTO {q} t USING (SELECT 4 AS id, 'm' AS v, 'y' AS cat UNION ALL SELECT 9, 'n', 'x') s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    oracle.sql(f"INSERT INTO {q} VALUES (10, 'p', 'y')")
    oracle.sql(f"DELETE FROM {q} WHERE id = 10")


@pytest.mark.parametrize("partitioned", [False, True])
def test_copy_on_write_history_matches_javas_changelog_view(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned: bool
) -> None:
    name = f"{ns}.cow"
    oracle.create_table(
        name,
        "id BIGINT, v STRING, cat STRING",
        partitioned_by="cat" if partitioned else None,
        merge_on_read=False,
    )
    cow_history(oracle, name, duplicates=True)
    table = icemor.load_table(name, catalog=catalog)
    expected = java_changelog(oracle, name)
    assert len(expected) > 10
    assert Counter(ours(table)) == Counter(expected)
    # a sub-range: start exclusive, end inclusive, ordinals counted from the range's first snapshot
    ids = oracle.snapshot_ids(name)
    start, end = ids[1], ids[-2]
    sub = java_changelog(
        oracle, name, f", options => map('start-snapshot-id', '{start}', 'end-snapshot-id', '{end}')"
    )
    assert Counter(ours(table, start_snapshot_id=start, end_snapshot_id=end)) == Counter(sub)
    # net changes: the same rows and types (Java dates a row rewritten by copy-on-write to the
    # rewrite; icemor to the snapshot that inserted it, since carry-overs are not changes)
    net = java_changelog(oracle, name, ", net_changes => true")
    assert Counter(r[:4] for r in ours(table, net=True)) == Counter(r[:4] for r in net)


def test_update_pairs_match_javas_compute_updates(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.cow_keyed"
    oracle.create_table(name, "id BIGINT, v STRING, cat STRING", merge_on_read=False)
    cow_history(oracle, name, duplicates=False)
    table = icemor.load_table(name, catalog=catalog)
    expected = java_changelog(oracle, name, ", identifier_columns => array('id')")
    assert {r[3] for r in expected} >= {"UPDATE_BEFORE", "UPDATE_AFTER", "INSERT", "DELETE"}
    assert Counter(ours(table, key=["id"])) == Counter(expected)


def java_state(oracle: IcebergJava, name: str, snapshot_id: int | None) -> Counter[tuple[Any, ...]]:
    if snapshot_id is None:
        return Counter()
    return Counter(tuple(r) for r in oracle.rows(name, snapshot_id=snapshot_id))


@pytest.mark.parametrize("format_version", [2, 3])
def test_merge_on_read_changes_are_the_difference_of_javas_reads(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, format_version: int
) -> None:
    name = f"{ns}.mor"
    oracle.create_table(
        name, "id BIGINT, v STRING, cat STRING", partitioned_by="cat", format_version=format_version
    )
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('v', id % 4), IF(id % 2 = 0, 'x', 'y') FROM range(0, 40)")
    oracle.sql(f"INSERT INTO {q} VALUES (3, 'v3', 'y'), (100, 'w', 'x')")  # a duplicate row
    oracle.sql(f"DELETE FROM {q} WHERE id % 5 = 1")
    oracle.sql(f"UPDATE {q} SET v = 'u' WHERE id % 7 = 3")
    oracle.sql(f"DELETE FROM {q} WHERE id % 5 = 2")  # a second delete of files with deletes (DVs merge)
    oracle.sql(
        f"MERGE INTO {q} t USING (SELECT id, 'm' AS v, 'x' AS cat FROM range(36, 44)) s ON t.id = s.id "
        "WHEN MATCHED AND t.id % 2 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    if format_version == 2:
        ids = oracle.field_ids(name)
        rows = pa.table({"id": pa.array([4, 8, 3], pa.int64()), "cat": ["x", "x", "x"]})
        oracle.write_equality_deletes(name, rows, [ids["id"]], partition_path="cat=x")
        assert len(java_state(oracle, name, oracle.snapshot_ids(name)[-1])) < len(
            java_state(oracle, name, oracle.snapshot_ids(name)[-2])
        )
    oracle.sql(
        f"CALL {oracle.catalog_name}.system.rewrite_data_files(table => '{name}', options => map('delete-file-threshold', '1'))"
    )
    oracle.sql(f"DELETE FROM {q} WHERE id % 5 = 0")
    table = icemor.load_table(name, catalog=catalog)
    ids = oracle.snapshot_ids(name)
    assert table.snapshots()[-2].operation == "replace"
    for parent, snapshot in itertools.pairwise([None, *ids]):
        before, after = java_state(oracle, name, parent), java_state(oracle, name, snapshot)
        got = table.changes(parent, snapshot).to_arrow().to_pylist()
        inserted = Counter(
            tuple(r[c] for c in ("id", "v", "cat")) for r in got if r["_change_type"] == "INSERT"
        )
        deleted = Counter(
            tuple(r[c] for c in ("id", "v", "cat")) for r in got if r["_change_type"] == "DELETE"
        )
        assert inserted == after - before, f"snapshot {snapshot}"
        assert deleted == before - after, f"snapshot {snapshot}"
        assert {r["_commit_snapshot_id"] for r in got} <= {snapshot}
    # over the whole history, net: exactly the final rows
    net = table.changes(net=True).to_arrow().to_pylist()
    assert {r["_change_type"] for r in net} == {"INSERT"}
    assert Counter(tuple(r[c] for c in ("id", "v", "cat")) for r in net) == java_state(oracle, name, ids[-1])


def test_spark_engine_equals_the_local_engine(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, tmp_path: Path
) -> None:
    from planning.test_changes import ARROW, new_table, run_history

    table = new_table(catalog, ns, partitioned=True)
    run_history(
        table,
        [
            ("append", [(1, "a"), (2, "b"), (3, None), (3, None), (4, "a")]),
            ("DELETE", (3, 1)),
            ("update", (2, 0)),
            ("cdc", [("U", 1, "q"), ("D", 3, None), ("U", 9, "n")]),
            ("cdc", [("U", 9, "n"), ("U", 2, "z")]),  # 9 unchanged: a carry-over
            ("append", [(5, "a"), (6, "b")]),
            ("compact", None),
            ("merge", [(5, "m"), (7, "n")]),
            ("eq_to_pos", None),
            ("DELETE", (2, 1)),
        ],
    )
    ids = [s.snapshot_id for s in table.snapshots()]
    cases: list[dict[str, Any]] = [
        {},
        {"net": True},
        {"key": ["id"]},
        {"net": True, "key": ["id"]},
        {"start_snapshot_id": ids[2], "row_filter": "id % 2 = 1", "selected_fields": ["v", "id"]},
        {"start_snapshot_id": ids[1], "end_snapshot_id": ids[4], "selected_fields": ["cat"]},
    ]
    for kw in cases:
        local = table.changes(**kw).to_arrow()
        remote = table.changes(**kw).to_spark(spark)
        assert remote.columns == local.schema.names, kw
        assert Counter(tuple(r) for r in remote.collect()) == Counter(
            tuple(r.values()) for r in local.to_pylist()
        ), kw
    assert table.changes().count() > 10
    assert ARROW.names == ["id", "v", "cat"]
    # the CLI on the Spark engine
    out = tmp_path / "changes.parquet"
    assert (
        run(
            ["--engine", "spark", "changes", table.name, "--from-snapshot", str(ids[2]), "--output", str(out)]
        )
        == 0
    )
    local = table.changes(ids[2]).to_arrow()
    assert Counter(tuple(r.values()) for r in pq.read_table(out).to_pylist()) == Counter(
        tuple(r.values()) for r in local.to_pylist()
    )


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=histories())
def test_replaying_the_spark_engines_changes_gives_each_ranges_end(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, steps: list[tuple[str, Any]]
) -> None:
    """The model property of ``planning/test_changes.py`` with the feed computed on Spark:
    every range of the history, with and without ``net``."""
    from planning.test_changes import ARROW, new_table, replay, rows_at, run_history

    table = new_table(catalog, ns, partitioned=True)
    run_history(table, steps)
    ids = [s.snapshot_id for s in table.snapshots()]
    starts: list[int | None] = [None, *ids]
    for a, b in itertools.combinations(starts, 2):
        for net in (False, True):
            frame = table.changes(a, b, net=net).to_spark(spark)
            feed = pa.Table.from_pylist([r.asDict() for r in frame.collect()], schema=None)
            if feed.num_rows == 0:
                feed = pa.table({n: [] for n in [*ARROW.names, "_change_type"]})
            assert replay(rows_at(table, a), feed) == rows_at(table, b), (a, b, net, feed.to_pylist())
    catalog.drop_table(table.name)


def test_reversed_or_equal_timestamps_are_refused_as_java_refuses_them(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Java's changelog scan refuses a start-timestamp that is not before the end-timestamp
    (IllegalArgumentException); icemor refuses the same ranges in one line (CLI exit 2), as it
    refuses reversed snapshot ids, where it returned 0 rows before. An ordered range answers."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    name = f"{ns}.ts_range"
    oracle.create_table(name, "id BIGINT, v STRING", merge_on_read=False)
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES (1, 'a')")
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES (2, 'b')")
    first, second = (s.timestampMillis() for s in oracle.snapshots(name))
    table = icemor.load_table(name, catalog=catalog)

    def java(start: int, end: int) -> int:
        options = f", options => map('start-timestamp', '{start}', 'end-timestamp', '{end}')"
        return len(java_changelog(oracle, name, options))

    assert java(first, second) == table.changes(start_timestamp=first, end_timestamp=second).count() == 1
    for start, end in ((second, first), (first, first), (4_070_908_800_000, 946_684_800_000)):
        with pytest.raises((IllegalArgumentException, Py4JJavaError), match="greater than"):
            java(start, end)
        with pytest.raises(icemor.exceptions.InvalidArgumentError, match="is not before"):
            table.changes(start_timestamp=start, end_timestamp=end)
    capsys.readouterr()
    argv = ["changes", name, "--from-timestamp", "2099-01-01", "--to-timestamp", "2000-01-01"]
    assert run(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "2099-01-01" in err[0] and "is not before" in err[0], err


def _feed_rows(frame: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in frame.collect())


def _local_rows(table: icemor.table.Table, *args: Any, **kw: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.changes(*args, **kw).to_arrow().to_pylist())


@pytest.mark.parametrize(("version", "partitioned_by"), [(2, None), (3, "cat")])
def test_spark_change_feed_of_position_mode_cdc(
    oracle: IcebergJava,
    catalog: SqlCatalog,
    ns: str,
    spark: SparkSession,
    version: int,
    partitioned_by: str | None,
) -> None:
    """Position-mode CDC (v2 file-scoped position deletes, v3 DVs), applied on the Spark engine and
    locally, Java's merge-on-read UPDATE between: the change feed read on Spark equals the local
    engine's, per snapshot, net, with update pairs and for a sub-range; each snapshot's inserted
    and deleted rows are the difference of Java's reads of it and its parent (Java's
    ``create_changelog_view`` refuses delete files), and the net feed of the whole history is
    Java's final read."""
    import icemor.spark

    name = f"{ns}.cdcpos"
    oracle.create_table(
        name,
        "id BIGINT NOT NULL, v STRING, cat STRING",
        partitioned_by=partitioned_by,
        format_version=version,
    )
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('java', id), IF(id % 2 = 1, 'x', 'y') FROM range(0, 20)")
    table = icemor.load_table(name, catalog=catalog)
    ddl = "op string, id bigint, v string, cat string"

    def on_spark(rows: list[tuple[Any, ...]]) -> icemor.ops.cdc.ChangeMetrics:
        metrics = table.apply_changes(spark.createDataFrame(rows, schema=ddl), key=["id"], deletes="position")
        table.refresh()
        return metrics

    first = on_spark(
        [
            ("U", 1, "a1", "x"),  # an existing key updated
            ("D", 2, None, None),  # an existing key deleted
            ("I", 100, "new", "y"),
            ("I", 101, "i", "x"),  # inserted then updated in the batch: only the last row written
            ("U", 101, "u", "x"),
            ("I", 102, "gone", "y"),  # inserted then deleted in the batch: nothing
            ("D", 102, None, None),
            ("U", 3, "first", "x"),  # two updates: the second wins
            ("-U", 3, "java3", "x"),
            ("U", 3, "second", "x"),
            ("U", 4, "u4", "y"),  # updated then deleted
            ("D", 4, None, None),
            ("D", 5, None, None),  # deleted then inserted again
            ("I", 5, "back", "x"),
            ("U", 6, "moved", "x"),  # to another partition (cat y -> x)
            ("D", 999, None, None),  # absent
        ]
    )
    assert first.delete_mode == "position" and first.equality_deletes == 0 and first.position_deletes == 6
    oracle.sql(f"UPDATE {q} SET v = 'java' WHERE id % 7 = 0")  # Java's own position deletes / DVs
    table.refresh()
    local = table.apply_changes(
        pa.table(
            {
                "op": ["U", "D", "U", "I"],
                "id": pa.array([7, 14, 100, 103], pa.int64()),
                "v": ["u7", None, "u100", "i103"],
                "cat": ["x", None, "y", "x"],
            }
        ),
        key=["id"],
        deletes="position",
    )
    assert local.position_deletes == 3
    table.refresh()
    absent = on_spark([("D", 500, None, None), ("D", 501, None, None)])
    assert absent.snapshot_id is None and absent.position_deletes == 0  # no snapshot, no delete file
    last = on_spark(
        [
            ("D", 1, None, None),  # a row written by the first batch
            ("U", 101, "again", "x"),
            ("U", 7, "7a", "x"),  # a file whose DV (or position deletes) grows again
            ("U", 7, "7b", "x"),
            ("I", 104, "a", "y"),
            ("U", 104, "b", "y"),
            ("D", 104, None, None),
            ("U", 8, "java8", "y"),  # the same values again: a carry-over, no change
            ("U", 9, "u9", "x"),
        ]
    )
    assert last.position_deletes == 5
    table.refresh()

    ids = oracle.snapshot_ids(name)
    assert [s.snapshot_id for s in table.snapshots()] == ids and len(ids) == 5
    with pytest.raises(Exception, match=r"(?i)delete"):  # Java's changelog refuses the delete files
        java_changelog(oracle, name)
    for parent, snapshot in itertools.pairwise([None, *ids]):
        got = _feed_rows(table.changes(parent, snapshot).to_spark(spark))
        assert got == _local_rows(table, parent, snapshot), f"snapshot {snapshot}"
        before, after = java_state(oracle, name, parent), java_state(oracle, name, snapshot)
        # apply_changes made id the identifier field: updates come as pairs without key=
        inserted = Counter({r[:3]: n for r, n in got.items() if r[3] in ("INSERT", "UPDATE_AFTER")})
        deleted = Counter({r[:3]: n for r, n in got.items() if r[3] in ("DELETE", "UPDATE_BEFORE")})
        assert inserted == after - before, f"snapshot {snapshot}"
        assert deleted == before - after, f"snapshot {snapshot}"
        assert {r[5] for r in got} <= {snapshot}
    # update pairs by key: the first batch's updates of existing keys
    paired = _feed_rows(table.changes(ids[0], ids[1], key=["id"]).to_spark(spark))
    assert paired == _local_rows(table, ids[0], ids[1], key=["id"])
    assert {r[0] for r in paired if r[3] == "UPDATE_AFTER"} == {1, 3, 5, 6}  # 5: deleted and inserted again
    assert {r[0] for r in paired if r[3] == "DELETE"} == {2, 4}
    assert {r[0] for r in paired if r[3] == "INSERT"} == {100, 101}
    assert all(r[0] != 8 for r in _feed_rows(table.changes(ids[3], ids[4]).to_spark(spark)))
    for kw in ({"net": True}, {"net": True, "key": ["id"]}, {"start_snapshot_id": ids[1], "net": True}):
        got = _feed_rows(table.changes(**kw).to_spark(spark))
        assert got == _local_rows(table, **kw), kw
    net = _feed_rows(table.changes(net=True).to_spark(spark))
    assert {r[3] for r in net} == {"INSERT"}
    assert Counter({r[:3]: n for r, n in net.items()}) == java_state(oracle, name, ids[-1])
    # the function form of the data source's change feed
    read = icemor.spark.read(spark, name, starting_snapshot_id=ids[0], key="id")
    assert _feed_rows(read) == _local_rows(table, ids[0], key=["id"])
