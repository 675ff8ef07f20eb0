"""apply_changes on the local engine: per-key semantics, the files it writes, keys, bad input, exactly-once."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

import icemor
from icemor.exceptions import CommitConflictError, InvalidArgumentError
from icemor.ops.cdc import APP_ID_PROPERTY, BATCH_ID_PROPERTY, last_committed_batch
from icemor.spec.files import FileContent
from oracle import local_path

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from icemor.table import Table

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    NestedField(3, "cat", StringType(), required=False),
)


def _table(
    catalog: SqlCatalog, ns: str, *, spec: PartitionSpec | None = None, schema: Schema = SCHEMA
) -> Table:
    catalog.create_table(
        f"{ns}.t", schema=schema, partition_spec=spec or PartitionSpec(), properties={"format-version": "2"}
    )
    return icemor.load_table(f"{ns}.t", catalog=catalog)


def _changes(rows: list[tuple[Any, ...]], columns: tuple[str, ...] = ("op", "id", "v")) -> pa.Table:
    data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    if "id" in data:
        data["id"] = pa.array(data["id"], pa.int64())
    return pa.table(data)


def _rows(table: Table) -> list[tuple[Any, ...]]:
    got = table.scan(selected_fields=("id", "v")).to_arrow().to_pylist()
    return sorted((r["id"], r["v"]) for r in got)


def _files(table: Table) -> set[Path]:
    return {p for p in local_path(table.metadata.location).rglob("*") if p.is_file()}


def _deletes(table: Table) -> list[Any]:
    return sorted(
        {d for p in table.scan().plan_files() for d in p.delete_files}, key=lambda d: (d.content, d.path)
    )


def test_per_key_net_effect_in_one_commit(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a"), ("I", 2, "b"), ("I", 3, "c"), ("I", 4, "d")]), key=["id"])
    before = len(t.snapshots())
    m = t.apply_changes(
        _changes(
            [
                ("U", 1, "a1"),  # plain update: equality delete + new row
                ("I", 5, "e"),  # insert, then updated twice and deleted within the batch
                ("U", 5, "e1"),
                ("U", 5, "e2"),
                ("-U", 2, "b"),  # update_before: ignored
                ("U", 2, "b1"),
                ("U", 2, "b2"),  # repeated update: the last one wins
                ("D", 3, None),
                ("D", 5, None),
                ("D", 42, None),  # a key that never existed: harmless
                ("I", 6, "f"),
                ("U", 6, "f1"),
            ]
        ),
        key=["id"],
    )
    assert len(t.snapshots()) == before + 1
    assert _rows(t) == [(1, "a1"), (2, "b2"), (4, "d"), (6, "f1")]
    assert (m.inserts, m.updates, m.deletes, m.ignored, m.changes) == (2, 6, 3, 1, 12)
    assert m.rows_written == 8  # every inserted/updated row is written ...
    assert m.position_deletes == 5  # ... and those superseded in the batch are deleted by position
    assert m.equality_deletes == 6  # the keys updated or deleted: 1, 2, 3, 5, 6, 42
    assert (
        m.data_files_added == 1 and m.position_delete_files_added == 1 and m.equality_delete_files_added == 1
    )


def test_files_written(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a"), ("I", 2, "b")]), key=["id"])
    m = t.apply_changes(_changes([("I", 3, "c"), ("U", 3, "c1"), ("U", 1, "a1"), ("D", 2, None)]), key=["id"])
    snap = t.pyiceberg.current_snapshot()
    assert snap is not None and snap.snapshot_id == m.snapshot_id
    eq = [d for d in _deletes(t) if d.content == FileContent.EQUALITY_DELETES]
    pos = [d for d in _deletes(t) if d.content == FileContent.POSITION_DELETES]
    assert [d.equality_ids for d in eq] == [(1,)]
    [eq_file] = eq
    assert pq.read_schema(local_path(eq_file.path)).names == ["id"]  # the key columns only
    assert sorted(pq.read_table(local_path(eq_file.path)).column("id").to_pylist()) == [1, 2, 3]
    # the position delete points into this batch's own data file, at the superseded row
    [p] = pos
    newest = [
        f for f in t.scan().plan_files() if f.data_file.data_sequence_number == eq_file.data_sequence_number
    ]
    assert [f.data_file.path for f in newest] == [p.referenced_data_file]
    written = pq.read_table(local_path(p.referenced_data_file))
    gone = pq.read_table(local_path(p.path)).column("pos").to_pylist()
    assert [written.column("v")[i].as_py() for i in gone] == ["c"]
    summary = snap.summary
    assert summary is not None and summary.operation.value == "overwrite"
    assert summary.additional_properties["added-equality-deletes"] == "3"
    assert summary.additional_properties["added-position-deletes"] == "1"


def test_inserts_only_is_an_append(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    m = t.apply_changes(_changes([("insert", 1, "a"), ("+I", 2, "b")]), key=["id"])
    assert m.equality_deletes == 0 and m.equality_delete_files_added == 0
    snap = t.pyiceberg.current_snapshot()
    assert snap is not None and snap.summary is not None and snap.summary.operation.value == "append"


def test_op_spellings(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    t.apply_changes(_changes([("INSERT", 1, "a"), ("i", 2, "b"), ("Insert", 3, "c")]), key=["id"])
    t.apply_changes(
        _changes(
            [
                ("update_before", 1, "a"),
                ("update_after", 1, "a1"),
                ("-U", 2, "b"),
                ("+U", 2, "b1"),
                ("delete", 3, None),
            ]
        ),
        key=["id"],
    )
    t.apply_changes(_changes([("-D", 2, None), ("u", 7, "x")]), key=["id"])
    assert _rows(t) == [(1, "a1"), (7, "x")]


def test_order_by_orders_the_changes_of_a_key(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    rows = [
        ("U", 1, "late", 3),
        ("I", 1, "early", 1),
        ("D", 2, None, 9),
        ("I", 2, "b", 5),
        ("U", 1, "mid", 2),
    ]
    m = t.apply_changes(_changes(rows, ("op", "id", "v", "lsn")), key=["id"], order_by="lsn")
    assert _rows(t) == [(1, "late")]
    assert m.position_deletes == 3  # early, mid, and b


def test_same_order_value_for_one_key_is_ambiguous(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    rows = [("I", 1, "a", 1), ("U", 1, "b", 1), ("I", 2, "c", 1)]
    with pytest.raises(InvalidArgumentError, match=r"same lsn value 1: their order is ambiguous"):
        t.apply_changes(_changes(rows, ("op", "id", "v", "lsn")), key=["id"], order_by="lsn")
    # update_before rows do not count: Debezium-style -U/+U pairs share one position
    t.apply_changes(
        _changes([("-U", 1, "a", 1), ("U", 1, "b", 1)], ("op", "id", "v", "lsn")), key=["id"], order_by="lsn"
    )
    assert _rows(t) == [(1, "b")]


def test_identifier_fields_are_set_from_the_key_and_contradictions_refused(
    catalog: SqlCatalog, ns: str
) -> None:
    t = _table(catalog, ns)
    assert t.schema().identifier_field_ids == []
    t.apply_changes(_changes([("I", 1, "a")]), key=["id"])
    assert t.schema().identifier_field_ids == [1]
    t.apply_changes(_changes([("U", 1, "b")]), key=["id"])  # the same key again: fine
    with pytest.raises(InvalidArgumentError, match=r"contradicts the identifier fields .* \(id\)"):
        t.apply_changes(_changes([("U", 1, "b")]), key=["id", "v"])


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        (Schema(NestedField(1, "id", LongType(), required=False)), "optional"),
        (Schema(NestedField(1, "id", DoubleType(), required=True)), "float/double"),
    ],
)
def test_optional_and_float_keys_need_allow_nullable_key(
    catalog: SqlCatalog, ns: str, schema: Schema, needle: str
) -> None:
    t = _table(catalog, ns, schema=schema)
    first = pa.table(
        {"op": ["I", "I"], "id": pa.array([1, 2], pa.float64() if needle == "float/double" else pa.int64())}
    )
    with pytest.raises(InvalidArgumentError, match=needle):
        t.apply_changes(first, key=["id"])
    t.apply_changes(first, key=["id"], allow_nullable_key=True)
    assert t.schema().identifier_field_ids == []  # not an identifier field: it cannot be one
    second = pa.table({"op": ["D"], "id": pa.array([1], first.schema.field("id").type)})
    t.apply_changes(second, key=["id"], allow_nullable_key=True)
    assert [r["id"] for r in t.scan().to_arrow().to_pylist()] == [2]


def test_null_keys_with_allow_nullable_key(catalog: SqlCatalog, ns: str) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False)
    )
    t = _table(catalog, ns, schema=schema)
    t.apply_changes(_changes([("I", None, "a"), ("I", 1, "b")]), key=["id"], allow_nullable_key=True)
    t.apply_changes(_changes([("U", None, "a1")]), key=["id"], allow_nullable_key=True)  # NULL-safe equality
    got = t.scan(selected_fields=("id", "v")).to_arrow().to_pylist()
    assert sorted((r["id"] or 0, r["id"] is None, r["v"]) for r in got) == [(0, True, "a1"), (1, False, "b")]


def _assert_untouched(t: Table, snapshots: int, files: set[Path]) -> None:
    t.refresh()
    assert len(t.snapshots()) == snapshots
    assert _files(t) == files


@pytest.mark.parametrize(
    ("changes", "options", "needle"),
    [
        (
            _changes([("I", 1, "a"), ("X", 2, "b"), ("X", 3, "c")]),
            {},
            r"unknown op 'X' in column 'op' \(2 rows\)",
        ),
        (_changes([("I", 1, "a"), (None, 2, "b")]), {}, "op column 'op' is NULL in 1 rows"),
        (_changes([("I", 1, "a")], ("kind", "id", "v")), {}, "no op column 'op'"),
        (_changes([("I", "a")], ("op", "v")), {}, "no key column 'id'"),
        (_changes([("I", None, "a")]), {}, "key column 'id' is NULL in row 0 of the changes"),
        (_changes([("I", 1, 5)]), {}, "do not fit the schema"),
        (_changes([("I", 1, "a", 0)], ("op", "id", "v", "extra")), {}, "do not fit the schema"),
        (_changes([("I", 1, "a"), ("U", 1, "b")]), {"order_by": "lsn"}, "no order column 'lsn'"),
        (
            _changes([("I", 1, "a", 1), ("U", 1, "b", 1)], ("op", "id", "v", "lsn")),
            {"order_by": "lsn"},
            "ambiguous",
        ),
        (_changes([("I", 1, "a")]), {"key": ["nope"]}, "key column 'nope' is not a top-level column"),
        (_changes([("I", 1, "a")]), {"key": []}, "at least one key column"),
        (_changes([("I", 1, "a")]), {"app_id": "x"}, "app_id and batch_id together"),
    ],
)
def test_bad_input_commits_nothing_and_leaves_no_file(
    catalog: SqlCatalog, ns: str, changes: pa.Table, options: dict[str, Any], needle: str
) -> None:
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a"), ("I", 2, "b")]), key=["id"])
    snapshots, files = len(t.snapshots()), _files(t)
    kwargs: dict[str, Any] = {"key": ["id"], **options}
    with pytest.raises(InvalidArgumentError, match=needle) as info:
        t.apply_changes(changes, **kwargs)
    assert "\n" not in str(info.value)
    _assert_untouched(t, snapshots, files)


@pytest.mark.parametrize("kind", ["pandas", "arrow"])
def test_an_empty_batch_commits_nothing(catalog: SqlCatalog, ns: str, kind: str) -> None:
    """An empty pandas frame has untyped (Arrow null) object columns, the op column too, and
    float64 for columns made of []: nothing to apply, so nothing is committed (it failed with
    "op column 'op' is null")."""
    import pandas as pd

    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a")]), key=["id"])
    snapshots, files = len(t.snapshots()), _files(t)
    empty: Any = (
        pd.DataFrame({"op": pd.Series([], dtype=object), "id": pd.Series([], dtype="int64"), "v": []})
        if kind == "pandas"  # op: object (Arrow's null type); v: [] is float64 to pandas
        else _changes([])
    )
    m = t.apply_changes(empty, key=["id"])
    assert (m.snapshot_id, m.changes, m.rows_written, m.equality_deletes, m.skipped) == (None, 0, 0, 0, False)
    _assert_untouched(t, snapshots, files)
    assert _rows(t) == [(1, "a")]


@pytest.mark.parametrize("kind", ["pandas", "arrow"])
def test_a_null_key_is_named_with_its_row(catalog: SqlCatalog, ns: str, kind: str) -> None:
    """pandas turns an int column holding None into floats: the message still says the key is
    NULL and where, not that a double does not fit the long column."""
    import pandas as pd

    t = _table(catalog, ns)
    rows = [("I", 1, "a"), ("U", 4, "b"), ("D", None, "c"), ("U", None, "d")]
    changes: Any = (
        pd.DataFrame({"op": [r[0] for r in rows], "id": [r[1] for r in rows], "v": [r[2] for r in rows]})
        if kind == "pandas"
        else _changes(rows)
    )
    if kind == "pandas":
        assert str(changes["id"].dtype) == "float64"  # what the message must see through
    with pytest.raises(InvalidArgumentError) as info:
        t.apply_changes(changes, key=["id"])
    text = str(info.value)
    assert "key column 'id' is NULL in row 2" in text and "2 row(s)" in text, text
    assert "double" not in text and "\n" not in text
    assert t.refresh().snapshots() == []


def test_a_null_key_of_an_update_before_is_ignored(catalog: SqlCatalog, ns: str) -> None:
    """update_before rows are ignored, NULL key or not, by the early check as by the batch's."""
    t = _table(catalog, ns)
    t.apply_changes(_changes([("-U", None, "x"), ("I", 1, "a")]), key=["id"])
    assert _rows(t) == [(1, "a")]


def test_bad_row_after_good_ones_leaves_no_file(catalog: SqlCatalog, ns: str) -> None:
    t = _table(
        catalog, ns, schema=Schema(*SCHEMA.fields[:2], NestedField(3, "cat", StringType(), required=True))
    )
    snapshots, files = len(t.snapshots()), _files(t)
    rows = _changes([("I", 1, "a", "x"), ("I", 2, "b", None), ("D", 3, None, None)], ("op", "id", "v", "cat"))
    with pytest.raises(
        InvalidArgumentError, match="column 'cat' is required but NULL in 1 inserted/updated rows"
    ):
        t.apply_changes(rows, key=["id"])
    _assert_untouched(t, snapshots, files)
    # a NULL in a required column of a delete row is fine: delete rows are not written
    t.apply_changes(
        _changes([("I", 1, "a", "x"), ("D", 3, None, None)], ("op", "id", "v", "cat")), key=["id"]
    )


def test_parquet_files_as_input(catalog: SqlCatalog, ns: str, tmp_path: Path) -> None:
    t = _table(catalog, ns)
    pq.write_table(_changes([("I", 1, "a"), ("I", 2, "b")]), tmp_path / "a.parquet")
    pq.write_table(_changes([("U", 1, "a1"), ("D", 2, None)]), tmp_path / "b.parquet")
    m = t.apply_changes([tmp_path / "a.parquet", str(tmp_path / "b.parquet")], key=["id"])
    assert _rows(t) == [(1, "a1")] and m.changes == 4
    with pytest.raises(InvalidArgumentError, match="no such file"):
        t.apply_changes([tmp_path / "missing.parquet"], key=["id"])


def test_existing_data_is_never_read(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", i, f"v{i}") for i in range(10)]), key=["id"])
    data_files = [local_path(p.data_file.path) for p in t.scan().plan_files()]
    hidden = [p.with_suffix(".hidden") for p in data_files]
    for a, b in zip(data_files, hidden, strict=True):
        shutil.move(a, b)  # the writer must not need them
    try:
        t.apply_changes(_changes([("U", 3, "x"), ("D", 4, None), ("I", 10, "y")]), key=["id"])
    finally:
        for a, b in zip(data_files, hidden, strict=True):
            shutil.move(b, a)
    assert _rows(t) == sorted([(i, f"v{i}") for i in range(10) if i not in (3, 4)] + [(3, "x"), (10, "y")])


def test_key_deciding_the_partition_clusters_equality_deletes(catalog: SqlCatalog, ns: str) -> None:
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket"))
    t = _table(catalog, ns, spec=spec)
    t.apply_changes(_changes([("I", i, f"v{i}") for i in range(40)]), key=["id"])
    m = t.apply_changes(_changes([("U", i, "u") for i in range(0, 40, 3)] + [("D", 1, None)]), key=["id"])
    eq = [d for d in _deletes(t) if d.content == FileContent.EQUALITY_DELETES]
    assert m.equality_delete_files_added == len(eq) > 1
    assert all(d.spec_id == 0 and d.partition != () for d in eq)  # in the partition of their keys
    assert len(t.metadata.partition_specs) == 1
    expected = sorted([(i, "u" if i % 3 == 0 else f"v{i}") for i in range(40) if i != 1])
    assert _rows(t) == expected


def test_other_partitioning_gets_global_equality_deletes(catalog: SqlCatalog, ns: str) -> None:
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "cat"))
    t = _table(catalog, ns, spec=spec)
    t.apply_changes(
        _changes([("I", i, f"v{i}", f"c{i % 3}") for i in range(30)], ("op", "id", "v", "cat")), key=["id"]
    )
    # the category of key 4 changes: its old row (partition c1) must go although the new one is in c0
    t.apply_changes(
        _changes([("U", 4, "moved", "c0"), ("D", 5, None, None)], ("op", "id", "v", "cat")), key=["id"]
    )
    specs = t.metadata.specs()
    assert len(specs) == 2 and t.metadata.default_spec_id == 0  # an unpartitioned spec was added
    [eq] = [d for d in _deletes(t) if d.content == FileContent.EQUALITY_DELETES]
    assert specs[eq.spec_id].is_unpartitioned() and eq.partition == ()
    assert _rows(t) == sorted([(i, f"v{i}") for i in range(30) if i not in (4, 5)] + [(4, "moved")])
    # the next batch reuses the spec
    t.apply_changes(_changes([("D", 6, None, None)], ("op", "id", "v", "cat")), key=["id"])
    assert len(t.metadata.specs()) == 2


def test_batches_of_an_app_are_committed_once(catalog: SqlCatalog, ns: str) -> None:
    t = _table(catalog, ns)
    m1 = t.apply_changes(_changes([("I", 1, "a")]), key=["id"], app_id="app", batch_id=0)
    m2 = t.apply_changes(_changes([("U", 1, "b")]), key=["id"], app_id="app", batch_id=1)
    snap = t.pyiceberg.current_snapshot()
    assert snap is not None and snap.summary is not None
    assert snap.summary.additional_properties[APP_ID_PROPERTY] == "app"
    assert snap.summary.additional_properties[BATCH_ID_PROPERTY] == "1"
    assert m1.snapshot_id and m2.snapshot_id and not m2.skipped
    again = t.apply_changes(_changes([("U", 1, "c")]), key=["id"], app_id="app", batch_id=1)
    assert again.skipped and again.snapshot_id is None
    assert _rows(t) == [(1, "b")]
    # another app's batch 1 is its own; a plain commit in between does not hide the app's last batch
    t.apply_changes(_changes([("I", 2, "x")]), key=["id"], app_id="other", batch_id=1)
    t.apply_changes(_changes([("I", 3, "y")]), key=["id"])
    assert last_committed_batch(t.metadata, "app") == 1 and last_committed_batch(t.metadata, "other") == 1
    assert t.apply_changes(_changes([("U", 1, "z")]), key=["id"], app_id="app", batch_id=0).skipped
    assert not t.apply_changes(_changes([("U", 1, "z")]), key=["id"], app_id="app", batch_id=2).skipped
    assert _rows(t) == [(1, "z"), (2, "x"), (3, "y")]


def test_a_batch_committed_concurrently_is_refused(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one batch race: the second to commit sees the first in its validation."""
    from icemor.ops.cdc import local as mod

    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a")]), key=["id"])
    twin = icemor.load_table(t.name, catalog=catalog)
    real = mod.change_unit

    def unit_then_twin(*args: Any) -> Any:
        result = real(*args)
        monkeypatch.setattr(mod, "change_unit", real)
        twin.apply_changes(_changes([("U", 1, "twin")]), key=["id"], app_id="app", batch_id=7)
        return result

    monkeypatch.setattr(mod, "change_unit", unit_then_twin)
    files = _files(t)
    with pytest.raises(CommitConflictError, match="batch 7 of app 'app' was committed concurrently"):
        t.apply_changes(_changes([("U", 1, "me")]), key=["id"], app_id="app", batch_id=7)
    assert _rows(t.refresh()) == [(1, "twin")]
    leftover = {p for p in _files(t) - files if "data" in p.parts}
    twin_files = {local_path(f.path) for f in _data_and_delete_paths(t)}
    assert leftover <= twin_files  # the loser's files are gone


def _data_and_delete_paths(t: Table) -> list[Any]:
    out: list[Any] = []
    for p in t.scan().plan_files():
        out.append(p.data_file)
        out.extend(p.delete_files)
    return out


def test_data_of_an_older_spec_gets_global_equality_deletes(catalog: SqlCatalog, ns: str) -> None:
    """The key decides the current spec's partition, but rows written under the old spec live in
    partitions that a current-spec delete would not reach: the deletes must be global."""
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "cat"))
    t = _table(catalog, ns, spec=spec)
    t.apply_changes(
        _changes([("I", i, f"v{i}", "c") for i in range(10)], ("op", "id", "v", "cat")), key=["id"]
    )
    with t.pyiceberg.update_spec() as update:
        update.remove_field("cat")
        update.add_field("id", BucketTransform(4), "id_bucket")
    t.refresh()
    t.apply_changes(
        _changes([("U", 3, "x", "c"), ("D", 4, None, None)], ("op", "id", "v", "cat")), key=["id"]
    )
    [eq] = [d for d in _deletes(t) if d.content == FileContent.EQUALITY_DELETES]
    assert t.metadata.specs()[eq.spec_id].is_unpartitioned()
    assert _rows(t) == sorted([(i, f"v{i}") for i in range(10) if i not in (3, 4)] + [(3, "x")])


def test_rolled_files_get_their_own_position_deletes(catalog: SqlCatalog, ns: str) -> None:
    """Tiny row groups and target size: one row per data file, so the positions of superseded
    rows must be mapped to the right one of several files of one batch."""
    catalog.create_table(
        f"{ns}.t",
        schema=SCHEMA,
        properties={
            "format-version": "2",
            "write.parquet.row-group-size-bytes": "1",
            "write.target-file-size-bytes": "1",
        },
    )
    t = icemor.load_table(f"{ns}.t", catalog=catalog)
    m = t.apply_changes(
        _changes([("I", 1, "a"), ("I", 2, "b"), ("U", 1, "a1"), ("I", 3, "c"), ("D", 2, None)]), key=["id"]
    )
    assert m.data_files_added == 4 and m.position_delete_files_added == 2 and m.position_deletes == 2
    assert _rows(t) == [(1, "a1"), (3, "c")]
    for p in t.scan().plan_files():
        assert pq.ParquetFile(local_path(p.data_file.path)).metadata.num_row_groups == 1


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([("I", i, "a", i) for i in range(40)] + [("X", 7, "b", 99)], "unknown op 'X'"),
        (
            [("I", i, "a", i) for i in range(40)] + [("U", 7, "b", 7)],
            "same lsn value 7: their order is ambiguous",
        ),
    ],
)
def test_bad_input_on_spark_leaves_nothing(
    catalog: SqlCatalog, ns: str, spark: SparkSession, rows: list[tuple[Any, ...]], needle: str
) -> None:
    """One task finds the bad row; what the other task wrote is removed; nothing is committed."""
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1000, "x")]), key=["id"])
    snapshots, files = len(t.snapshots()), _files(t)
    df = spark.createDataFrame(rows, schema="op string, id bigint, v string, lsn bigint")
    with pytest.raises(InvalidArgumentError, match=needle) as info:
        t.apply_changes(df, key=["id"], order_by="lsn", partitions=4)
    assert "\n" not in str(info.value)
    _assert_untouched(t, snapshots, files)


@pytest.mark.parametrize("deletes", ["equality", "position"])
def test_a_batch_reads_the_table_metadata_once(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch, deletes: str
) -> None:
    """One catalog read of the table per batch (its refresh), besides the one pyiceberg's SQL
    catalog makes inside ``commit_table``: the commit starts from the refreshed metadata, and the
    table is left at the metadata the commit answered (a read each parses the whole metadata JSON,
    which grows with every batch: four reads a batch were ~15% of a position-mode batch)."""
    from pyiceberg.catalog.sql import SqlCatalog as Sql

    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", i, "a") for i in range(5)]), key=["id"], deletes=deletes)
    loads: list[object] = []
    real = Sql.load_table
    monkeypatch.setattr(Sql, "load_table", lambda c, name: loads.append(name) or real(c, name))
    m = t.apply_changes(_changes([("U", 1, "b"), ("D", 2, None)]), key=["id"], deletes=deletes)
    assert m.snapshot_id is not None and len(loads) == 2, loads
    # ... and neither parses the metadata JSON: both read the file the previous batch's commit wrote
    from pyiceberg.table.metadata import TableMetadataUtil

    parsed: list[str] = []
    real_parse = TableMetadataUtil.parse_raw
    monkeypatch.setattr(
        TableMetadataUtil, "parse_raw", staticmethod(lambda d: parsed.append(d) or real_parse(d))
    )
    loads.clear()
    m = t.apply_changes(_changes([("U", 1, "b")]), key=["id"], deletes=deletes)
    assert len(loads) == 2 and parsed == []
    assert t.metadata.current_snapshot_id == m.snapshot_id
    assert _rows(t) == [(0, "a"), (1, "b"), (3, "a"), (4, "a")]


@pytest.mark.parametrize("deletes", ["equality", "position"])
@pytest.mark.parametrize("key", [None, ("id",)])
def test_the_change_feed_is_applied_as_it_comes(
    catalog: SqlCatalog, ns: str, deletes: str, key: tuple[str, ...] | None
) -> None:
    """table.changes(...) as the batch: _change_type is the op, _change_ordinal the order, the
    feed's columns are not written; a feed read without the key shows an update as a DELETE and an
    INSERT of one snapshot, which must leave the INSERT's row."""
    source = _table(catalog, ns)
    catalog.create_table(f"{ns}.mirror", schema=SCHEMA, properties={"format-version": "2"})
    mirror = icemor.load_table(f"{ns}.mirror", catalog=catalog)
    source.append(
        pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": ["a", "b", "c", "d"], "cat": ["x"] * 4})
    )
    source.update({"v": "'b2'"}, "id = 2")
    source.delete("id = 3")
    source.append(pa.table({"id": pa.array([5], pa.int64()), "v": ["e"], "cat": ["y"]}))
    source.update({"v": "'e2'"}, "id = 5")
    feed = source.changes(key=key).to_arrow()
    assert {"_change_ordinal", "_commit_snapshot_id"} <= set(feed.column_names)
    mirror.apply_changes(feed, key=["id"], deletes=deletes)
    assert [f.name for f in mirror.schema().fields] == ["id", "v", "cat"]
    assert _rows(mirror) == _rows(source) == [(1, "a"), (2, "b2"), (4, "d"), (5, "e2")]
