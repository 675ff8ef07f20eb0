"""Writes and maintenance never read a local cache: a forged equality verdict changes reads only.

The equality verdict store (:mod:`icemor.io.verdicts`) is a same-user cache: an entry with a
valid checksum under the right key is believed by reads (docs/reliability.md: a forgery by the
same user is out of scope for reads). It must never be baked into the table: every write and
maintenance action computes the rows it commits from the table's files. Each test forges an
entry through the store's own API, under the key a read saved (so it verifies), shows that a
read through the store now returns other rows (the forgery works, so the test can fail), then
runs one write and checks what it committed against a model of the table's files read with the
store off (``ICEMOR_VERDICT_CACHE=0``, fresh process caches).

Two forgeries: "nothing deleted" (the equality deletes' rows come back) and "every row deleted
but the first" (a write that believes it removes whole data files). ``warm``: the forged
verdict was also read into this process's memory before the write (a read ran first).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

import icemor
from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.io import verdicts
from icemor.io.cache import DELETE_CACHE
from icemor.io.equality_writer import write_equality_deletes
from icemor.io.verdicts import VerdictStore, verdict_store
from icemor.io.writers import DeleteFileTarget

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

Row = dict[str, Any]

ROWS: list[Row] = [{"id": i, "cat": "abc"[i % 3], "qty": 10 * i} for i in range(10)]
"""One data file; an equality delete on ``cat = 'b'`` removes ids 1, 4 and 7 (positions too)."""
LIVE = [r for r in ROWS if r["cat"] != "b"]

FORGERIES: dict[str, Callable[[int], np.ndarray]] = {
    "nothing-deleted": lambda n: np.zeros(0, np.int64),
    "all-but-first-deleted": lambda n: np.arange(1, n, dtype=np.int64),
}


def _key(r: Row) -> tuple[Any, ...]:
    return (r["id"], r["cat"], r["qty"])


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=_key)


def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts with: nothing in memory, no store refused yet."""
    DELETE_CACHE.clear()
    monkeypatch.setattr(verdicts, "_STORES", {})
    monkeypatch.setattr(verdicts, "_WARNED", set())


@pytest.fixture
def store_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private (0700) verdict store for this test, in use."""
    directory = tmp_path / "verdicts"
    directory.mkdir(mode=0o700)
    directory.chmod(0o700)  # whatever the umask
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(directory))
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE_BYTES", raising=False)
    new_process(monkeypatch)
    return directory


def _rows(t: icemor.Table) -> list[Row]:
    return _sorted(t.refresh().scan(selected_fields=("id", "cat", "qty")).to_arrow().to_pylist())


def files_say(t: icemor.Table, monkeypatch: pytest.MonkeyPatch) -> list[Row]:
    """The table's rows as its files say: the store off, nothing in memory (a fresh read)."""
    with monkeypatch.context() as m:
        m.setenv("ICEMOR_VERDICT_CACHE", "0")
        DELETE_CACHE.clear()
        rows = _rows(t)
        DELETE_CACHE.clear()
    return rows


def add_equality_delete(t: icemor.Table, column: str, value: str) -> None:
    """Commit one global equality delete file on ``column`` (not the CDC key: position-mode CDC then
    asks the read path which rows it removes)."""
    pt = t.refresh().pyiceberg
    metadata = pt.metadata
    field = metadata.schema().find_field(column)
    key_schema = Schema(field)
    keys = pa.Table.from_pylist([{column: value}], schema=schema_to_pyarrow(key_schema))
    target = DeleteFileTarget(
        directory=f"{metadata.location}/data",
        prefix=f"{uuid.uuid4().hex[:12]}-eq",
        spec_id=metadata.default_spec_id,
        partition=(),
        target_file_size=1 << 20,
    )
    written = write_equality_deletes(pt.io, target, keys, key_schema, [field.field_id])
    snapshot = metadata.current_snapshot()
    assert snapshot is not None
    RowDelta(pt, Validation(start_snapshot_id=snapshot.snapshot_id), added_files=written).commit()
    t.refresh()


def make_table(name: str) -> icemor.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("cat", pa.string()),
            pa.field("qty", pa.int64()),
        ]
    )
    data = pa.Table.from_pylist(ROWS, schema=schema)
    t = icemor.create_table(name, data)
    add_equality_delete(t, "cat", "b")
    return t


def saved_key(t: icemor.Table, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The store key of the table's one data file: the one a read saves its verdict under."""
    keys: list[tuple[Any, ...]] = []
    real = VerdictStore.save

    def spy(self: VerdictStore, key: tuple[Any, ...], *args: Any) -> None:
        keys.append(key)
        real(self, key, *args)

    with monkeypatch.context() as m:
        m.setattr(VerdictStore, "save", spy)
        DELETE_CACHE.clear()
        assert _rows(t) == _sorted(LIVE)
    assert len(keys) == 1, keys
    return keys[0]


def forge(store: VerdictStore, key: tuple[Any, ...], forgery: str) -> list[Row]:
    """Store the forged verdict under ``key`` (it verifies); the rows a read through it gives."""
    n = len(ROWS)
    positions = FORGERIES[forgery](n)
    store.save(key, positions, n)
    loaded = store.load(key, n)
    assert loaded is not None and loaded.tolist() == positions.tolist()  # it verifies
    gone = set(positions.tolist())
    return _sorted([r for i, r in enumerate(ROWS) if i not in gone])


def forged_table(name: str, forgery: str, monkeypatch: pytest.MonkeyPatch, *, warm: bool) -> icemor.Table:
    """The table, its verdict forged and shown to change a read; ``warm``: the forged verdict is
    in this process's memory too, as after that read."""
    t = make_table(name)
    key = saved_key(t, monkeypatch)
    store = verdict_store()
    assert store is not None
    forged_rows = forge(store, key, forgery)
    assert forged_rows != _sorted(LIVE)
    new_process(monkeypatch)
    assert _rows(t) == forged_rows, "the forged entry must change a read through the store"
    if not warm:
        new_process(monkeypatch)
    return t


# ------------------------------------------------------------------------ the writes and their models


def _changes() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "cat": ["y", "y", None],
            "qty": pa.array([111, 222, None], pa.int64()),
            "op": ["U", "U", "D"],
        }
    )


def _cdc_model(live: list[Row]) -> list[Row]:
    return [r for r in live if r["id"] not in (2, 3)] + [
        {"id": 1, "cat": "y", "qty": 111},
        {"id": 2, "cat": "y", "qty": 222},
    ]


def _merge(t: icemor.Table) -> Any:
    source = pa.table(
        {
            "id": pa.array([1, 2, 10], pa.int64()),
            "cat": ["x", "x", "x"],
            "qty": pa.array([1000, 2000, 3000], pa.int64()),
        }
    )
    return (
        t.merge(source, on=["id"])
        .when_matched_update({"qty": "t.qty + s.qty"})
        .when_not_matched_insert_all()
        .execute()
    )


def _merge_model(live: list[Row]) -> list[Row]:
    out = [dict(r, qty=r["qty"] + 2000) if r["id"] == 2 else r for r in live]
    return [*out, {"id": 1, "cat": "x", "qty": 1000}, {"id": 10, "cat": "x", "qty": 3000}]


WRITES: dict[str, tuple[Callable[[icemor.Table], Any], Callable[[list[Row]], list[Row]], dict[str, int]]] = {
    # name: (the write, the rows it leaves from the live rows, metrics it must report)
    "rewrite_equality_deletes": (
        lambda t: t.maintenance.rewrite_equality_deletes(),
        lambda live: live,
        {"positions_written": 3, "equality_delete_files_removed": 1},
    ),
    "rewrite_data_files": (
        lambda t: t.maintenance.rewrite_data_files(delete_file_threshold=1),
        lambda live: live,
        {"rows_written": 7, "data_files_rewritten": 1},
    ),
    "delete": (
        lambda t: t.delete("id <= 4"),
        lambda live: [r for r in live if r["id"] > 4],
        {"deleted_rows": 3, "data_files_removed": 0},
    ),
    "update": (
        lambda t: t.update({"qty": "qty + 1"}, "id <= 4"),
        lambda live: [dict(r, qty=r["qty"] + 1) if r["id"] <= 4 else r for r in live],
        {"rows_updated": 3, "data_files_removed": 0},
    ),
    "merge": (_merge, _merge_model, {"rows_updated": 1, "rows_inserted": 2, "data_files_removed": 0}),
    "apply_changes-position": (
        lambda t: t.apply_changes(_changes(), key=["id"], deletes="position"),
        _cdc_model,
        {"position_deletes": 2, "data_files_removed": 0},
    ),
    "apply_changes-equality": (
        lambda t: t.apply_changes(_changes(), key=["id"], deletes="equality"),
        _cdc_model,
        {"equality_deletes": 3},
    ),
}


def _metrics(m: Any, expected: dict[str, int]) -> dict[str, int]:
    return {k: getattr(m, k) for k in expected}


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("forgery", list(FORGERIES))
@pytest.mark.parametrize("write", list(WRITES))
def test_a_forged_verdict_never_reaches_a_commit(
    home: Path, store_dir: Path, monkeypatch: pytest.MonkeyPatch, write: str, forgery: str, warm: bool
) -> None:
    t = forged_table(f"db.t_{uuid.uuid4().hex[:8]}", forgery, monkeypatch, warm=warm)
    action, model, metrics = WRITES[write]
    m = action(t)
    assert files_say(t, monkeypatch) == _sorted(model(LIVE))
    assert _metrics(m, metrics) == metrics


def test_writes_do_not_store_verdicts(home: Path, store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write computes its verdicts from the files and keeps them in memory only: the store is
    neither read nor written (a read after it still saves its own)."""
    t = make_table("db.quiet")
    loads: list[Any] = []
    saves: list[Any] = []
    with monkeypatch.context() as m:
        m.setattr(VerdictStore, "load", lambda self, *a: loads.append(a))
        m.setattr(VerdictStore, "save", lambda self, *a: saves.append(a))
        t.update({"qty": "qty + 1"}, "id <= 4")
        t.maintenance.rewrite_data_files(delete_file_threshold=1)
        assert (loads, saves) == ([], [])
        add_equality_delete(t, "cat", "c")
        DELETE_CACHE.clear()
        t.maintenance.rewrite_equality_deletes()
        assert (loads, saves) == ([], [])
        add_equality_delete(t, "cat", "a")
        DELETE_CACHE.clear()
        assert _rows(t) == []  # every row left was 'a' or 'c'
        assert (len(loads), len(saves)) == (1, 1)  # a read uses the store
    assert files_say(t, monkeypatch) == []


# ------------------------------------------------------------------------------------- on Spark


def _executor_store(spark: SparkSession) -> Path:
    """The verdict store the session's Python workers use (their environment is the JVM's, from
    when the session started: the test's ICEMOR_VERDICT_DIR does not reach them)."""

    def where(_: Any) -> Iterator[tuple[str | None, str]]:
        from icemor.io import verdicts as v

        root = v._root()
        yield (None if root is None else str(root), os.environ.get("ICEMOR_VERDICT_CACHE", "1"))

    ((root, enabled),) = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert root is not None and enabled.strip().lower() not in ("0", "false", "off", "no"), (root, enabled)
    return Path(root)


SPARK_WRITES: dict[str, Callable[[icemor.Table, SparkSession], Any]] = {
    "rewrite_equality_deletes": lambda t, spark: t.maintenance.rewrite_equality_deletes(spark=spark),
    "update": lambda t, spark: t.update({"qty": "qty + 1"}, "id <= 4", spark=spark),
}


@pytest.mark.parametrize("write", list(SPARK_WRITES))
def test_a_forged_verdict_never_reaches_a_commit_on_spark(
    spark: SparkSession, ns: str, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """The executors' Python workers read with their own store: forged there, a Spark read (icemor's
    reader in the workers) is affected, and the write run on the executors is not."""
    root = _executor_store(spark)
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(root))  # the driver saves and forges there too
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    new_process(monkeypatch)
    t = make_table(f"{ns}.t")
    key = saved_key(t, monkeypatch)
    store = verdict_store()
    assert store is not None
    name, sub, _ = verdicts._locate(key)
    try:
        forged_rows = forge(store, key, "nothing-deleted")
        read = t.refresh().to_spark(spark, strategy="python", selected_fields=("id", "cat", "qty"))
        assert _sorted([r.asDict() for r in read.collect()]) == forged_rows, (
            "the forgery must change a Spark read"
        )
        _, model, metrics = WRITES[write]
        m = SPARK_WRITES[write](t, spark)
        assert files_say(t, monkeypatch) == _sorted(model(LIVE))
        assert _metrics(m, metrics) == metrics
    finally:
        (root / sub / name).unlink(missing_ok=True)


def test_a_write_beside_a_stored_verdict_computes_it_once(
    home: Path, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a stored verdict in memory, a write's read computes its own once and keeps it apart:
    the next write does not probe again, and a read still takes the stored one (reads may)."""
    from icemor.io import reader
    from icemor.spec.tasks import FileScanTask

    t = forged_table("db.once", "nothing-deleted", monkeypatch, warm=True)
    (planned,) = t.scan().job.planned
    f = planned.data_file
    task = FileScanTask(f, planned.delete_files, 0, f.file_size_in_bytes)
    opts = reader.files_only(t.scan(selected_fields=("id",)).job.options)
    probes = [0]
    real = reader.equality_delete_sets

    def counted(*args: Any) -> Any:
        probes[0] += 1
        return real(*args)

    monkeypatch.setattr(reader, "equality_delete_sets", counted)
    for _ in range(2):
        assert sum(b.num_rows for b in reader.read_task(t.io, task, opts)) == len(LIVE)
        assert reader.count_task(t.io, task, opts) == len(LIVE)
    assert probes[0] == 1
    assert reader.count_task(t.io, task, t.scan().job.options) == len(ROWS)  # the forged one
