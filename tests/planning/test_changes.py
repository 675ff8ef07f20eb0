"""The change feed on the local engine: a model test over random histories, and its edge cases.

The model property: for every snapshot range (a, b], replaying ``changes(a, b)`` onto the rows
at a (deletes and update_befores removed, inserts and update_afters added, as multisets)
gives the rows at b, with and without ``net``. Histories mix appends, merge-on-read DELETE,
UPDATE and MERGE, CDC batches (equality deletes, position deletes of superseded rows), data
and delete-file compaction and equality -> position conversion.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections import Counter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

import icemor
from icemor.cli import run
from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icemor.table import Table

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    NestedField(3, "cat", StringType(), required=False),
)
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("cat", pa.string())])
CHANGE_COLUMNS = ["_change_type", "_change_ordinal", "_commit_snapshot_id"]
_names = itertools.count()
Row = tuple[Any, ...]


def new_table(catalog: SqlCatalog, ns: str, *, partitioned: bool = False) -> Table:
    name = f"{ns}.t{next(_names)}"
    spec = (
        PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "cat")) if partitioned else PartitionSpec()
    )
    catalog.create_table(name, schema=SCHEMA, partition_spec=spec, properties={"format-version": "2"})
    return icemor.load_table(name, catalog=catalog)


def append(table: Table, rows: list[Row]) -> None:
    data = {n: [r[i] for r in rows] for i, n in enumerate(ARROW.names)}
    table.pyiceberg.append(pa.table(data, schema=ARROW))
    table.refresh()


def rows_at(table: Table, snapshot_id: int | None) -> Counter[Row]:
    if snapshot_id is None:
        return Counter()
    got = table.scan(snapshot_id=snapshot_id).to_arrow()
    return Counter(tuple(r[n] for n in ARROW.names) for r in got.to_pylist())


def replay(start: Counter[Row], changes: pa.Table) -> Counter[Row]:
    out = Counter(start)
    for r in changes.to_pylist():
        row = tuple(r[n] for n in ARROW.names)
        if r["_change_type"] in ("INSERT", "UPDATE_AFTER"):
            out[row] += 1
        else:
            assert out[row] > 0, f"{r['_change_type']} of a row that is not live: {row}"
            out[row] -= 1
    return +out


def snapshot_ids(table: Table) -> list[int]:
    return [s.snapshot_id for s in table.snapshots()]


# ------------------------------------------------------------------------------- the model test

value = st.sampled_from(["a", "b", None])
OPS = ("append", "DELETE", "update", "merge", "cdc", "cdc_pos", "compact", "compact_deletes", "eq_to_pos")


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = [
        ("append", draw(st.lists(st.tuples(st.integers(0, 7), value), min_size=1, max_size=6)))
    ]
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(OPS))
        if op == "append":
            arg: Any = draw(st.lists(st.tuples(st.integers(0, 7), value), min_size=1, max_size=4))
        elif op in ("DELETE", "update"):
            arg = (draw(st.integers(2, 4)), draw(st.integers(0, 3)))
        elif op == "merge":
            arg = draw(
                st.lists(
                    st.tuples(st.integers(0, 9), value), min_size=1, max_size=4, unique_by=lambda r: r[0]
                )
            )
        elif op in ("cdc", "cdc_pos"):
            arg = draw(
                st.lists(
                    st.tuples(st.sampled_from(["U", "D"]), st.integers(0, 9), value), min_size=1, max_size=5
                )
            )
        else:
            arg = None
        steps.append((op, arg))
    return steps


def run_history(table: Table, steps: list[tuple[str, Any]]) -> None:
    counter = itertools.count(100)
    for op, arg in steps:
        if op == "append":
            # duplicate ids and duplicate whole rows on purpose: identities, not values, count
            append(table, [(i, v, "x" if i % 2 else "y") for i, v in arg])
        elif op == "DELETE":
            table.delete(f"id % {arg[0]} = {arg[1] % arg[0]}")
        elif op == "update":
            table.update({"v": f"'u{next(counter)}'"}, where=f"id % {arg[0]} = {arg[1] % arg[0]}")
        elif op == "merge":
            source = pa.table(
                {
                    "id": [i for i, _ in arg],
                    "v": [v for _, v in arg],
                    "cat": ["x" if i % 2 else "y" for i, _ in arg],
                },
                schema=ARROW,
            )
            try:
                table.merge(
                    source, on=["id"]
                ).when_matched_update_all().when_not_matched_insert_all().execute()
            except InvalidArgumentError as e:  # an id live twice matches two targets: Spark's rule
                assert "more than one" in str(e) or "matched" in str(e), e
        elif op in ("cdc", "cdc_pos"):
            ops = [o for o, _, _ in arg]
            batch = pa.table(
                {
                    "op": ops,
                    "id": pa.array([i for _, i, _ in arg], pa.int64()),
                    "v": [v for _, _, v in arg],
                    "cat": ["x" if i % 2 else "y" for _, i, _ in arg],
                }
            )
            # both ways of deleting a key's older rows: equality deletes, or their positions found
            table.apply_changes(batch, key=["id"], deletes="position" if op == "cdc_pos" else "equality")
        elif op == "compact":
            table.maintenance.rewrite_data_files(delete_ratio_threshold=0.01)
        elif op == "compact_deletes":
            table.maintenance.rewrite_position_deletes()
        else:
            table.maintenance.rewrite_equality_deletes()


def check_ranges(table: Table) -> None:
    ids = snapshot_ids(table)
    starts: list[int | None] = [None, *ids]
    states = {s: rows_at(table, s) for s in starts}
    # every range (a, b] of the history
    for a, b in itertools.combinations(starts, 2):
        feed = table.changes(a, b).to_arrow()
        assert replay(states[a], feed) == states[b], f"range ({a}, {b}]: {feed.to_pylist()}"
        netted = table.changes(a, b, net=True).to_arrow()
        assert replay(states[a], netted) == states[b], f"net range ({a}, {b}]: {netted.to_pylist()}"
        # net: no row both inserted and deleted over the range
        ins = Counter(
            tuple(r[n] for n in ARROW.names)
            for r in netted.to_pylist()
            if r["_change_type"] in ("INSERT", "UPDATE_AFTER")
        )
        dels = Counter(
            tuple(r[n] for n in ARROW.names)
            for r in netted.to_pylist()
            if r["_change_type"] in ("DELETE", "UPDATE_BEFORE")
        )
        assert not (ins & dels), (a, b, netted.to_pylist())
        assert len(netted) <= len(feed)


@pytest.mark.parametrize("partitioned", [False, True])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=histories())
def test_replaying_the_changes_of_any_range_gives_its_end(
    catalog: SqlCatalog, ns: str, partitioned: bool, steps: list[tuple[str, Any]]
) -> None:
    table = new_table(catalog, ns, partitioned=partitioned)
    run_history(table, steps)
    check_ranges(table)
    catalog.drop_table(table.name)


# ---------------------------------------------------------------------------------- edge cases


def test_columns_types_and_order(catalog: SqlCatalog, ns: str) -> None:
    table = new_table(catalog, ns)
    append(table, [(1, "a", "x"), (2, "b", "y")])
    table.delete("id = 1")
    got = table.changes().to_arrow()
    assert got.schema.names == ["id", "v", "cat", *CHANGE_COLUMNS]
    first, second = snapshot_ids(table)
    assert got.to_pylist() == [
        {
            "id": 1,
            "v": "a",
            "cat": "x",
            "_change_type": "INSERT",
            "_change_ordinal": 0,
            "_commit_snapshot_id": first,
        },
        {
            "id": 2,
            "v": "b",
            "cat": "y",
            "_change_type": "INSERT",
            "_change_ordinal": 0,
            "_commit_snapshot_id": first,
        },
        {
            "id": 1,
            "v": "a",
            "cat": "x",
            "_change_type": "DELETE",
            "_change_ordinal": 1,
            "_commit_snapshot_id": second,
        },
    ]
    # the start is exclusive, the end inclusive
    assert table.changes(first, second).to_arrow().column("_change_type").to_pylist() == ["DELETE"]
    assert table.changes(first, first).to_arrow().num_rows == 0
    assert table.changes(None, first).count() == 2
    narrow = table.changes(selected_fields=["v"], row_filter="id = 1").to_arrow()
    assert narrow.to_pylist() == [
        {"v": "a", "_change_type": "INSERT", "_change_ordinal": 0, "_commit_snapshot_id": first},
        {"v": "a", "_change_type": "DELETE", "_change_ordinal": 1, "_commit_snapshot_id": second},
    ]
    # a SQL filter outside pyiceberg's language
    assert table.changes(row_filter="id % 2 = 0").to_arrow().column("id").to_pylist() == [2]


def test_net_drops_a_row_inserted_and_deleted_within_the_range(catalog: SqlCatalog, ns: str) -> None:
    table = new_table(catalog, ns)
    append(table, [(1, "a", "x")])
    append(table, [(2, "b", "x")])
    table.delete("id = 2")
    assert table.changes().count() == 3
    assert table.changes(net=True).to_arrow().column("id").to_pylist() == [1]


def test_update_pairs_by_key_and_identifier_fields(catalog: SqlCatalog, ns: str) -> None:
    table = new_table(catalog, ns)
    append(table, [(1, "a", "x"), (2, "b", "x"), (3, "c", "x")])
    start = snapshot_ids(table)[-1]
    table.update({"v": "'z'"}, where="id = 2")
    plain = table.changes(start).to_arrow()
    assert sorted(plain.column("_change_type").to_pylist()) == ["DELETE", "INSERT"]
    paired = table.changes(start, key=["id"]).to_arrow()
    assert [(r["id"], r["v"], r["_change_type"]) for r in paired.to_pylist()] == [
        (2, "b", "UPDATE_BEFORE"),
        (2, "z", "UPDATE_AFTER"),
    ]
    # an update that changes nothing is a carry-over: no rows at all
    table.update({"v": "v"}, where="id = 3")
    assert table.changes(snapshot_ids(table)[-2]).count() == 0
    with pytest.raises(InvalidArgumentError, match="unknown key"):
        table.changes(start, key=["nope"])
    # apply_changes makes id the identifier field: pairs without key=
    table.apply_changes(
        pa.table({"op": ["U"], "id": pa.array([1], pa.int64()), "v": ["q"], "cat": ["x"]}), key=["id"]
    )
    got = table.refresh().changes(snapshot_ids(table)[-2]).to_arrow()
    assert [(r["id"], r["v"], r["_change_type"]) for r in got.to_pylist()] == [
        (1, "a", "UPDATE_BEFORE"),
        (1, "q", "UPDATE_AFTER"),
    ]
    assert table.changes(snapshot_ids(table)[-2], key=[]).to_arrow().column("_change_type").to_pylist() == [
        "DELETE",
        "INSERT",
    ]


def test_compaction_snapshots_have_no_changes(catalog: SqlCatalog, ns: str) -> None:
    table = new_table(catalog, ns)
    append(table, [(1, "a", "x"), (2, "b", "x")])
    append(table, [(3, "c", "x")])
    table.delete("id = 2")
    table.apply_changes(
        pa.table({"op": ["D"], "id": pa.array([3], pa.int64()), "v": [None], "cat": [None]}), key=["id"]
    )
    before = snapshot_ids(table)[-1]
    table.maintenance.rewrite_equality_deletes()
    table.maintenance.rewrite_data_files(delete_ratio_threshold=0.01)
    assert [s.operation for s in table.snapshots()][-2:] == ["replace", "replace"]
    assert table.changes(before).count() == 0
    # a row deleted after compaction: its identity is in the new file; net over the compaction
    table.delete("id = 1")
    assert table.changes(before).to_arrow().column("_change_type").to_pylist() == ["DELETE"]
    assert table.changes(net=True).count() == 0


def test_range_errors(catalog: SqlCatalog, ns: str) -> None:
    table = new_table(catalog, ns)
    assert table.changes().count() == 0  # an empty table
    append(table, [(1, "a", "x")])
    append(table, [(2, "b", "x")])
    first, second = snapshot_ids(table)
    with pytest.raises(NoSuchSnapshotError, match="123"):
        table.changes(123)
    with pytest.raises(InvalidArgumentError, match="not an ancestor"):
        table.changes(second, first)
    with pytest.raises(InvalidArgumentError, match="not both"):
        table.changes(first, start_timestamp=1)
    # timestamps: (start, end]
    ts = {s.snapshot_id: s.timestamp_ms for s in table.snapshots()}
    assert table.changes(start_timestamp=ts[first]).to_arrow().column("id").to_pylist() == [2]
    assert table.changes(end_timestamp=ts[first]).to_arrow().column("id").to_pylist() == [1]
    # a start not before the end is refused, as reversed snapshot ids are (Java refuses it too:
    # tests/test_changes_oracle.py), not an empty feed
    for start, end in ((ts[second], ts[first]), (ts[first], ts[first])):
        with pytest.raises(InvalidArgumentError, match="is not before the end"):
            table.changes(start_timestamp=start, end_timestamp=end)


def test_expired_history_is_an_error_naming_the_oldest_readable_snapshot(
    catalog: SqlCatalog, ns: str
) -> None:
    table = new_table(catalog, ns)
    append(table, [(1, "a", "x")])
    append(table, [(2, "b", "x")])
    table.delete("id = 1")
    first, second, third = snapshot_ids(table)
    table.maintenance.expire_snapshots(older_than=table.snapshots()[-1].timestamp_ms + 1, retain_last=2)
    assert snapshot_ids(table) == [second, third]
    for call in (
        table.changes,
        lambda: table.changes(first),
        lambda: table.changes(start_timestamp=0),
    ):
        with pytest.raises(NoSuchSnapshotError, match=f"oldest snapshot that can be read.*{second}"):
            call()
    assert table.changes(second).to_arrow().column("_change_type").to_pylist() == ["DELETE"]


def test_cli_changes(catalog: SqlCatalog, ns: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    table = new_table(catalog, ns)
    append(table, [(1, "a", "x"), (2, "b", "x")])
    table.update({"v": "'z'"}, where="id = 2")
    first, second = snapshot_ids(table)
    out = tmp_path / "c.jsonl"
    assert (
        run(["changes", table.name, "--from-snapshot", str(first), "--key", "id", "--output", str(out)]) == 0
    )
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and '"UPDATE_BEFORE"' in lines[0] and '"UPDATE_AFTER"' in lines[1]
    capsys.readouterr()
    assert (
        run(
            [
                "changes",
                table.name,
                "--net",
                "--columns",
                "v",
                "--where",
                "id = 2",
                "--output",
                "-",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    assert list(csv.reader(io.StringIO(capsys.readouterr().out))) == [
        ["v", "_change_type", "_change_ordinal", "_commit_snapshot_id"],
        ["z", "INSERT", "1", str(second)],
    ]
    assert run(["changes", table.name, "--from-snapshot", "42"]) == 2
    assert "snapshot 42 does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------ bronze -> silver


def consume(bronze: Table, silver: Table, *, app_id: str = "silver-from-bronze") -> int:
    """One batch of the loop: bronze's changes since the last batch silver committed, applied to silver.

    The cursor is bronze's sequence number of the last snapshot consumed, stored by apply_changes
    as the batch id in silver's own commit: the batch and its cursor commit together (exactly once).
    """
    from icemor.ops.cdc import last_committed_batch

    bronze.refresh()
    end = bronze.metadata.current_snapshot()
    assert end is not None
    done = last_committed_batch(silver.refresh().metadata, app_id)
    start = next((s.snapshot_id for s in bronze.metadata.snapshots if s.sequence_number == done), None)
    feed = bronze.changes(start, end.snapshot_id).to_arrow()  # ordered: a key's last change is last
    # INSERT, DELETE, UPDATE_BEFORE (ignored), UPDATE_AFTER are apply_changes ops as they are
    batch = feed.drop_columns(["_change_ordinal", "_commit_snapshot_id"])
    silver.apply_changes(
        batch, key=["id"], op_column="_change_type", app_id=app_id, batch_id=end.sequence_number
    )
    return feed.num_rows


def test_bronze_to_silver_batch_loop(catalog: SqlCatalog, ns: str) -> None:
    bronze, silver = new_table(catalog, ns, partitioned=True), new_table(catalog, ns)

    def cdc(rows: list[tuple[str, int, str | None]]) -> None:
        bronze.apply_changes(
            pa.table(
                {
                    "op": [r[0] for r in rows],
                    "id": pa.array([r[1] for r in rows], pa.int64()),
                    "v": [r[2] for r in rows],
                    "cat": ["x" if r[1] % 2 else "y" for r in rows],
                }
            ),
            key=["id"],
        )

    steps = [
        lambda: cdc([("I", i, f"v{i}") for i in range(12)]),
        lambda: bronze.delete("id % 5 = 1"),
        lambda: bronze.update({"v": "upper(v)"}, where="id % 3 = 0"),
        lambda: cdc([("U", 2, "two"), ("D", 4, None), ("U", 40, "new"), ("D", 41, None)]),
        bronze.maintenance.rewrite_equality_deletes,
        lambda: (
            bronze.merge(
                pa.table({"id": [2, 7, 50], "v": ["m2", "m7", "m50"], "cat": ["y", "x", "y"]}, schema=ARROW),
                on=["id"],
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
        lambda: bronze.maintenance.rewrite_data_files(delete_ratio_threshold=0.01),
        lambda: cdc([("U", 7, "again"), ("U", 7, "and again"), ("I", 60, "x"), ("D", 60, None)]),
        lambda: bronze.delete("v = 'two'"),
    ]
    consumed = 0
    for n, step in enumerate(steps):
        step()
        if n in (2, 5):  # some batches span several bronze snapshots
            continue
        consumed += consume(bronze, silver)
        assert rows_at(silver, silver.refresh().metadata.current_snapshot_id) == rows_at(
            bronze, bronze.refresh().metadata.current_snapshot_id
        ), f"after step {n}"
    assert consumed > 12
    # nothing new: the batch is empty and nothing changes
    before = silver.metadata.current_snapshot_id
    assert consume(bronze, silver) == 0
    assert silver.refresh().metadata.current_snapshot_id == before
