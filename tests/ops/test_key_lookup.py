"""Position-mode CDC (icemor.ops.key_lookup): which files a batch searches, which rows it deletes, and
when a concurrent commit conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

import icemor
from icemor.exceptions import CommitConflictError, InvalidArgumentError
from icemor.io.key_index import data_path_of
from icemor.ops.cdc import DELETE_MODE_PROPERTY, V4_READY_PROPERTY
from icemor.spec.files import FileContent
from oracle import local_path

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icemor.table import Table

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
)


def _table(
    catalog: SqlCatalog, ns: str, *, spec: PartitionSpec | None = None, version: int = 2, **props: str
) -> Table:
    catalog.create_table(
        f"{ns}.t",
        schema=SCHEMA,
        partition_spec=spec or PartitionSpec(),
        properties={"format-version": "2", **props},
    )
    t = icemor.load_table(f"{ns}.t", catalog=catalog)
    if version == 3:
        t.upgrade(format_version=3)
    return t


def _changes(rows: list[tuple[str, int, str | None]]) -> pa.Table:
    return pa.table(
        {
            "op": [r[0] for r in rows],
            "id": pa.array([r[1] for r in rows], pa.int64()),
            "v": [r[2] for r in rows],
        }
    )


def _insert(t: Table, ids: range, tag: str = "a") -> None:
    t.apply_changes(_changes([("I", i, f"{tag}{i}") for i in ids]), key=["id"], deletes="position")


def _rows(t: Table) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["v"]) for r in t.scan().to_arrow().to_pylist())


def _files(t: Table) -> set[Path]:
    return {p for p in local_path(t.metadata.location).rglob("*") if p.is_file()}


def test_keys_are_pruned_by_bounds_then_found_in_the_index(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    for lo in (0, 100, 200):  # three files, disjoint id ranges
        _insert(t, range(lo, lo + 50))
    m = t.apply_changes(
        _changes([("U", 110, "x"), ("D", 120, None), ("D", 150, None)]), key=["id"], deletes="position"
    )
    assert m.files_searched == 1  # only [100, 149] may hold them; 150 is in none
    assert m.position_deletes == 2 and m.equality_deletes == 0 and m.equality_delete_files_added == 0
    m = t.apply_changes(_changes([("D", 10, None), ("D", 210, None)]), key=["id"], deletes="position")
    assert m.files_searched == 2
    want = [(i, f"a{i}") for r in (range(50), range(100, 150), range(200, 250)) for i in r]
    want = sorted([*[w for w in want if w[0] not in (110, 120, 10, 210)], (110, "x")])
    assert _rows(t) == want


def test_keys_are_pruned_by_partition(catalog: SqlCatalog, ns: str) -> None:
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(8), "b"))
    t = _table(catalog, ns, spec=spec)
    _insert(t, range(200))
    files = len(t.scan().plan_files())
    assert files == 8
    m = t.apply_changes(_changes([("D", 7, None)]), key=["id"], deletes="position")
    assert m.files_searched == 1 and m.position_deletes == 1
    assert 7 not in {i for i, _ in _rows(t)}


def test_rows_already_deleted_are_not_deleted_again(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    _insert(t, range(10))
    t.delete("id < 3")  # position deletes of DELETE
    t.apply_changes(_changes([("D", 3, None), ("U", 4, "eq")]), key=["id"], deletes="equality")
    # 0-2 by position, 3 and the old 4 by equality: only 5 and the new 4 are live rows of these keys
    m = t.apply_changes(
        _changes([("D", k, None) for k in (0, 1, 2, 3, 4, 5)]), key=["id"], deletes="position"
    )
    assert m.position_deletes == 2  # the new 4 and 5; the rest were gone already
    assert _rows(t) == [(i, f"a{i}") for i in range(6, 10)]


def test_a_batch_whose_keys_are_absent_writes_no_delete_file(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns, version=3)
    _insert(t, range(10))
    before = _files(t)
    m = t.apply_changes(_changes([("D", 42, None), ("D", 43, None)]), key=["id"], deletes="position")
    assert m.snapshot_id is None and m.position_delete_files_added == 0
    assert _files(t) == before
    m = t.apply_changes(_changes([("U", 44, "new"), ("D", 45, None)]), key=["id"], deletes="position")
    assert m.snapshot_id is not None and m.position_delete_files_added == 0 and m.data_files_added == 1
    snap = t.pyiceberg.current_snapshot()
    assert snap is not None and snap.summary is not None and snap.summary.operation.value == "append"
    assert not [d for p in t.scan().plan_files() for d in p.delete_files]


def test_v3_gets_one_deletion_vector_per_file_with_the_older_ones_merged(
    catalog: SqlCatalog, ns: str
) -> None:
    t = _table(catalog, ns, version=3)
    _insert(t, range(10))
    for batch in ([("D", 1, None)], [("U", 2, "b")], [("D", 3, None), ("D", 4, None)]):
        t.apply_changes(_changes(batch), key=["id"], deletes="position")
    [first] = [p for p in t.scan().plan_files() if p.data_file.record_count == 10]
    [dv] = first.delete_files
    assert dv.is_deletion_vector and dv.record_count == 4  # 1, 2, 3, 4: one DV holds them all
    assert not any(
        d.content == FileContent.EQUALITY_DELETES for p in t.scan().plan_files() for d in p.delete_files
    )
    assert _rows(t) == sorted([(0, "a0"), (2, "b"), *[(i, f"a{i}") for i in range(5, 10)]])


def test_a_file_whose_every_live_row_goes_is_removed(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    _insert(t, range(3))
    m = t.apply_changes(
        _changes([("D", 0, None), ("D", 1, None), ("U", 2, "z")]), key=["id"], deletes="position"
    )
    assert m.data_files_removed == 1 and m.position_delete_files_added == 0
    assert _rows(t) == [(2, "z")]


def test_the_delete_mode_by_default_property_and_v4_readiness(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    assert t.apply_changes(_changes([("I", 1, "a")]), key=["id"]).delete_mode == "equality"  # v2
    t.upgrade(format_version=3)
    assert t.apply_changes(_changes([("U", 1, "b")]), key=["id"]).delete_mode == "equality"  # v3 too
    catalog.drop_table(f"{ns}.t")
    t = _table(catalog, ns, **{DELETE_MODE_PROPERTY: "position"})
    m = t.apply_changes(_changes([("I", 1, "a"), ("I", 2, "b")]), key=["id"])
    m = t.apply_changes(_changes([("U", 1, "c")]), key=["id"])
    assert m.delete_mode == "position" and m.position_deletes == 1 and m.equality_delete_files_added == 0
    catalog.drop_table(f"{ns}.t")
    t = _table(catalog, ns, **{V4_READY_PROPERTY: "true"})
    t.apply_changes(_changes([("I", 1, "a")]), key=["id"])
    assert t.apply_changes(_changes([("D", 1, None)]), key=["id"]).delete_mode == "position"
    before = _files(t)
    with pytest.raises(
        InvalidArgumentError, match=r"icemor\.v4-ready=true: format v4 forbids new equality deletes"
    ):
        t.apply_changes(_changes([("D", 1, None)]), key=["id"], deletes="equality")
    with pytest.raises(InvalidArgumentError, match="must be 'equality' or 'position'"):
        t.apply_changes(_changes([("D", 1, None)]), key=["id"], deletes="dv")
    assert _files(t) == before


def _race(monkeypatch: pytest.MonkeyPatch, concurrent: Any) -> None:
    """Run ``concurrent()`` after the batch found its positions, before it commits."""
    from icemor.ops.cdc import local as mod

    real = mod.change_unit

    def unit_then_other(*args: Any) -> Any:
        result = real(*args)
        monkeypatch.setattr(mod, "change_unit", real)
        concurrent()
        return result

    monkeypatch.setattr(mod, "change_unit", unit_then_other)


@pytest.mark.parametrize("version", [2, 3])
def test_a_concurrent_row_with_a_batch_key_conflicts(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """An equality delete would remove a row added concurrently with the key; positions found before it
    existed cannot: the commit must refuse, and leave nothing of its own."""
    t = _table(catalog, ns, version=version)
    _insert(t, range(10))
    twin = icemor.load_table(t.name, catalog=catalog)
    _race(monkeypatch, lambda: twin.append(pa.table({"id": pa.array([5], pa.int64()), "v": ["twin"]})))
    files = _files(t)
    with pytest.raises(CommitConflictError, match=r"added data file .* holding key \(id=5\)"):
        t.apply_changes(_changes([("U", 5, "me"), ("D", 6, None)]), key=["id"], deletes="position")
    t.refresh()
    assert (5, "twin") in _rows(t) and (6, "a6") in _rows(t)
    leftover = _files(t) - files
    live = {Path(f.data_file.path).name for f in t.scan().plan_files()}
    for p in leftover:  # the twin's file (and the key index the check built of it) and metadata only
        owner = data_path_of(str(p))
        assert "metadata" in p.parts or p.name in live or (owner is not None and Path(owner).name in live), p


def test_concurrent_rows_of_other_keys_do_not_conflict(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(catalog, ns)
    _insert(t, range(10))
    twin = icemor.load_table(t.name, catalog=catalog)

    def other_keys() -> None:
        # inside the batch's key range (its bounds cannot tell), and an insert-only key of the batch
        twin.append(pa.table({"id": pa.array([4, 7, 11], pa.int64()), "v": ["t4", "t7", "t11"]}))

    _race(monkeypatch, other_keys)
    t.apply_changes(
        _changes([("U", 5, "me"), ("D", 6, None), ("I", 11, "mine")]), key=["id"], deletes="position"
    )
    got = _rows(t.refresh())
    assert (5, "me") in got and 6 not in {i for i, _ in got}
    assert [r for r in got if r[0] == 11] == [(11, "mine"), (11, "t11")]  # as equality mode: no delete for I


def test_a_concurrent_compaction_of_a_file_it_deletes_from_conflicts(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(catalog, ns)
    _insert(t, range(5))
    _insert(t, range(5, 10))
    t.delete("id = 0")
    twin = icemor.load_table(t.name, catalog=catalog)
    _race(monkeypatch, lambda: twin.maintenance.rewrite_data_files(delete_ratio_threshold=0.01))
    with pytest.raises(CommitConflictError, match="was removed by concurrent snapshot"):
        t.apply_changes(_changes([("D", 1, None)]), key=["id"], deletes="position")
    assert 1 in {i for i, _ in _rows(t.refresh())}


def test_files_registered_outside_the_table_get_no_sidecar_there(
    catalog: SqlCatalog, ns: str, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    t = _table(catalog, ns)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    pq.write_table(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema), outside / "f.parquet")
    t.add_files([str(outside / "f.parquet")])
    m = t.apply_changes(_changes([("U", 2, "x")]), key=["id"], deletes="position")
    assert m.position_deletes == 1 and _rows(t) == [(1, "a"), (2, "x"), (3, "c")]
    assert sorted(p.name for p in outside.iterdir()) == ["f.parquet"]  # icemor wrote nothing beside it


KEYS = {
    "string": (["k1"], False),
    "composite": (["k2", "k1"], False),
    "nullable string with NULLs": (["k1"], True),
}


@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("version", [2, 3])
def test_hashed_keys_match_the_model(catalog: SqlCatalog, ns: str, kind: str, version: int) -> None:
    """String, composite and nullable keys go through the hash index (every match checked against
    the values); a stream of them gives the model's rows, as equality deletes do."""
    import random

    key, nullable = KEYS[kind]
    schema = Schema(
        NestedField(1, "k1", StringType(), required=not nullable),
        NestedField(2, "k2", LongType(), required=True),
        NestedField(3, "v", StringType(), required=False),
    )
    catalog.create_table(f"{ns}.t", schema=schema, properties={"format-version": "2"})
    t = icemor.load_table(f"{ns}.t", catalog=catalog)
    if version == 3:
        t.upgrade(format_version=3)
    rnd = random.Random(kind)
    names = (
        [None, "", "a", "bb", "x" * 40, "x" * 39 + "y"]
        if nullable
        else ["", "a", "bb", "x" * 40, "x" * 39 + "y"]
    )
    model: dict[tuple[Any, ...], str] = {}
    for b in range(5):
        rows = []
        for i in range(30):
            k1, k2 = rnd.choice(names), rnd.randrange(2) if len(key) == 2 else 0
            k = (k1, k2) if len(key) == 2 else (k1,)
            op = rnd.choice(["U", "D"] + ([] if k in model else ["I"]))
            rows.append((op, k1, k2, f"{b}.{i}"))
            if op == "D":
                model.pop(k, None)
            else:
                model[k] = f"{b}.{i}"
        changes = pa.table(
            {
                "op": [r[0] for r in rows],
                "k1": pa.array([r[1] for r in rows], pa.string()),
                "k2": pa.array([r[2] for r in rows], pa.int64()),
                "v": [r[3] for r in rows],
            }
        )
        t.apply_changes(changes, key=key, deletes="position", allow_nullable_key=nullable)
        got = t.scan().to_arrow().to_pylist()
        as_model = {((r["k1"], r["k2"]) if len(key) == 2 else (r["k1"],)): r["v"] for r in got}
        assert len(as_model) == len(got) and as_model == model, f"batch {b}"
