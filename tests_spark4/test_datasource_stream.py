"""The ``icemor`` data source as a streaming source (the change feed) and sink (CDC), PySpark 4.x.

Each micro-batch of the source must hold exactly ``table.changes(start, end)`` for the offsets
Spark recorded for it; the sink applies each micro-batch once; and a replication stream (one
table's change feed into another table through the sink) killed with SIGKILL in the middle of a
micro-batch, twice, then restarted from its checkpoint, ends with the target equal to the source
(nothing lost, nothing applied twice). Iceberg Java reads the sink's tables afterwards
(``tools/spark4_check.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scenarios
from ds_tables import SOURCE_COLUMNS, local, rows, run_replication, same

import icemor
import icemor.spark

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

HERE = Path(__file__).resolve().parent
APP_ID = "icemor.cdc.app-id"
BATCH_ID = "icemor.cdc.batch-id"


@pytest.fixture(autouse=True, scope="module")
def _front_removed_after(spark: SparkSession) -> Iterator[None]:
    """The suite shares one session: leave its ``spark.read`` as PySpark's own."""
    yield
    icemor.spark.register(spark, fast_reads=False)


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


def _history(table: Any) -> list[int]:
    """Commits of every kind after the table's creation: DELETE, UPDATE (partition move), a CDC
    batch (equality deletes), an append, a MERGE. Returns their snapshot ids."""
    out = []
    table.refresh().delete("id % 5 = 0")
    out.append(table.refresh().metadata.current_snapshot().snapshot_id)
    table.update({"part": "'p9'", "qty": "qty + 1000"}, where="id % 7 = 1")
    out.append(table.refresh().metadata.current_snapshot().snapshot_id)
    cdc = pa.table(
        {
            "op": ["U", "D", "I"],
            "id": pa.array([2, 3, 700], pa.int64()),
            "part": ["p1", None, "p0"],
            "qty": pa.array([7, None, 9], pa.int64()),
            "note": ["cdc", None, "new"],
        }
    )
    table.apply_changes(cdc, key=["id"])
    out.append(table.refresh().metadata.current_snapshot().snapshot_id)
    table.append(scenarios.to_arrow([(i, "p1", i, f"a{i}") for i in range(800, 810)]))
    out.append(table.refresh().metadata.current_snapshot().snapshot_id)
    source = pa.table({"id": pa.array([4, 6, 900], pa.int64()), "part": ["p2", "p2", "p2"],
                       "qty": pa.array([1, 2, 3], pa.int64()), "note": ["m", "m", "m"]})  # fmt: skip
    table.merge(source, on=["id"]).when_matched_update_all().when_not_matched_insert_all().execute()
    out.append(table.refresh().metadata.current_snapshot().snapshot_id)
    return out


def _stream(
    spark: SparkSession, name: str, checkpoint: Path, sink: list[tuple[int, pa.Table]], **options: str
) -> Any:
    """Run the change stream of ``name`` until it has read everything (AvailableNow), each
    micro-batch collected into ``sink``; returns the query's progress reports."""

    def collect(df: DataFrame, batch_id: int) -> None:
        sink.append((batch_id, df.toArrow()))

    reader = spark.readStream.format("icemor").option("readChangeFeed", "true")
    query = (
        reader.options(**options)
        .load(name)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    from pyspark.errors import StreamingQueryException

    with contextlib.suppress(StreamingQueryException):  # the callers look at query.exception()
        query.awaitTermination(300)
    return query


def _offset(text: str | None) -> int | None:
    snapshot = json.loads(text)["snapshot_id"] if text else -1
    return None if snapshot == -1 else snapshot


def test_micro_batches_are_the_change_feed(spark: SparkSession, out_dir: Path) -> None:
    """From the current snapshot on (the default), two snapshots a micro-batch, restarted after
    new commits: each batch equals ``table.changes(start, end, key=["id"])`` of its offsets, and
    the offsets chain from the first start to the current snapshot."""
    icemor.spark.register(spark)
    name = "ds.changes"
    table = scenarios.create_table(name, partitioned=True)
    start = table.metadata.current_snapshot().snapshot_id
    checkpoint = _fresh(out_dir / "ds-changes-checkpoint")
    batches: list[tuple[int, pa.Table]] = []
    first = _stream(spark, name, checkpoint, batches, maxSnapshotsPerTrigger="2", key="id")
    assert first.exception() is None
    assert sum(t.num_rows for _, t in batches) == 0  # only changes after the first start
    _history(table)
    again = _stream(spark, name, checkpoint, batches, maxSnapshotsPerTrigger="2", key="id")
    assert again.exception() is None
    current = table.refresh().metadata.current_snapshot().snapshot_id
    ranges = [
        (p.batchId, _offset(p.sources[0].startOffset), _offset(p.sources[0].endOffset))
        for p in again.recentProgress
        if p.sources[0].startOffset != p.sources[0].endOffset
    ]
    assert ranges[0][1] == start and ranges[-1][2] == current
    assert all(a[2] == b[1] for a, b in itertools.pairwise(ranges))
    assert len(ranges) == 3  # five snapshots, at most two a batch
    seen = dict(batches)
    for batch_id, lo, hi in ranges:
        want = table.changes(lo, hi, key=["id"]).to_arrow()
        assert rows(_conform(seen[batch_id], want.schema)) == rows(want), (lo, hi)
    kinds = {k for _, t in batches for k in t.column("_change_type").to_pylist()}
    assert kinds == {"INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"}


def _conform(got: pa.Table, schema: pa.Schema) -> pa.Table:
    from icemor.engines.spark import conform_batch

    return pa.Table.from_batches([conform_batch(b, schema) for b in got.to_batches()], schema=schema)


def test_starting_snapshot_or_time(spark: SparkSession, out_dir: Path) -> None:
    """``starting-snapshot-id`` (exclusive), ``starting-timestamp``, ``startingOffsets=earliest``
    and ``stream-from-timestamp`` (inclusive) start the feed there;
    ``columns`` and ``filter`` as in ``table.changes`` (columns in the order given)."""
    icemor.spark.register(spark)
    name = "ds.changes"
    table = icemor.load_table(name)
    snapshots = list(table.pyiceberg.snapshots())
    since = snapshots[2]
    # Iceberg's stream-from-timestamp takes the snapshot committed at that time (inclusive)
    at = next(
        i for i in range(2, len(snapshots)) if snapshots[i - 1].timestamp_ms < snapshots[i].timestamp_ms
    )
    cases: list[tuple[dict[str, str], pa.Table]] = [
        ({"starting-snapshot-id": str(since.snapshot_id)}, table.changes(since.snapshot_id).to_arrow()),
        ({"startingOffsets": "earliest"}, table.changes().to_arrow()),
        (
            {"stream-from-timestamp": str(snapshots[at].timestamp_ms)},
            table.changes(snapshots[at - 1].snapshot_id).to_arrow(),
        ),
        (
            {"startingTimestamp": str(since.timestamp_ms), "columns": "note,id", "filter": "id % 2 = 0"},
            table.changes(since.snapshot_id, selected_fields=("id", "note"), row_filter="id % 2 = 0")
            .to_arrow()
            .select(["note", "id", "_change_type", "_change_ordinal", "_commit_snapshot_id"]),
        ),
    ]
    for option, want in cases:
        assert want.num_rows, option
        batches: list[tuple[int, pa.Table]] = []
        query = _stream(spark, name, _fresh(out_dir / "ds-start-checkpoint"), batches, **option)
        assert query.exception() is None, str(query.exception())[-600:]
        got = pa.concat_tables([_conform(t, want.schema) for _, t in batches if t.num_rows])
        assert rows(got) == rows(want), option


def test_feed_start_errors_are_one_line(spark: SparkSession) -> None:
    """A bad ``startingOffsets``, two starts, or ``startingOffsets`` on a batch read: refused, naming
    what to give."""
    icemor.spark.register(spark, fast_reads=False)
    cases = [
        ({"startingOffsets": '{"t": 1}'}, "startingOffsets must be earliest"),
        ({"startingOffsets": "earliest", "starting-snapshot-id": "1"}, "give one start of the change feed"),
    ]
    batches: list[int] = []
    for options, text in cases:
        with pytest.raises(Exception, match=text):
            reader = spark.readStream.format("icemor").option("readChangeFeed", "true").options(**options)
            reader.load("ds.changes").writeStream.foreachBatch(lambda df, i: batches.append(i)).start()
    assert not batches  # refused before any micro-batch
    with pytest.raises(Exception, match="startingOffsets is for streams"):
        spark.read.format("icemor").option("startingOffsets", "earliest").load("ds.changes").count()


def test_expired_checkpoint_names_the_oldest_snapshot(spark: SparkSession, out_dir: Path) -> None:
    """A checkpoint whose snapshot was expired fails the restart in one line naming the oldest
    snapshot that can still be a start; nothing is skipped silently."""
    icemor.spark.register(spark)
    name = "ds.expiring"
    table = scenarios.create_table(name, partitioned=False)
    checkpoint = _fresh(out_dir / "ds-expiring-checkpoint")
    batches: list[tuple[int, pa.Table]] = []
    assert _stream(spark, name, checkpoint, batches).exception() is None
    _history(table)
    newest = table.refresh().metadata.current_snapshot()
    table.maintenance.expire_snapshots(older_than=newest.timestamp_ms + 1, retain_last=1)
    assert [s.snapshot_id for s in table.refresh().pyiceberg.snapshots()] == [newest.snapshot_id]
    oldest = newest.snapshot_id
    query = _stream(spark, name, checkpoint, batches)
    error = str(query.exception())
    assert "history was expired" in error and f"is {oldest}" in error, error[-600:]


def test_sink_applies_each_batch_once(spark: SparkSession, out_dir: Path) -> None:
    """``writeStream.format("icemor")`` with a key: CDC per micro-batch, one commit each, the
    app id the checkpoint's; staged rows removed after each batch."""
    icemor.spark.register(spark)
    name = "ds.sink"
    table = scenarios.create_table(name, partitioned=True)
    model = scenarios.initial_rows()
    source, checkpoint = _fresh(out_dir / "ds-sink-in"), _fresh(out_dir / "ds-sink-checkpoint")
    source.mkdir()
    schema = pa.schema(
        [pa.field("op", pa.string())] + [f.with_nullable(True) for f in scenarios.arrow_schema()]
    )
    batches = [
        [("U", 5, "p2", 55, "s1"), ("D", 6, None, None, None), ("I", 1000, "p0", 1, "new")],
        [
            ("I", 1001, "p1", 2, "x"),
            ("U", 1001, "p2", 3, "y"),
            ("D", 7, None, None, None),
            ("U", 5, "p0", 56, "s2"),
        ],
    ]
    for n, batch in enumerate(batches):
        data = [dict(zip(("op", *scenarios.COLUMNS), c, strict=True)) for c in batch]
        pq.write_table(pa.Table.from_pylist(data, schema=schema), source / f".b{n}.tmp")
        (source / f".b{n}.tmp").rename(source / f"b{n}.parquet")
        query = (
            spark.readStream.schema(f"op string, {scenarios.SPARK_DDL}")
            .parquet(str(source))
            .repartition(1)  # the changes of one key in file order
            .writeStream.format("icemor")
            .option("key", "id")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(name)
        )
        query.awaitTermination(300)
        assert query.exception() is None, str(query.exception())[-800:]
        for op, i, part, qty, note in batch:
            if op == "D":
                model.pop(i, None)
            else:
                model[i] = (i, part, qty, note)  # type: ignore[assignment]
        scenarios.check(name, model, f"sink batch {n}")
    summaries = [s.summary.additional_properties for s in table.refresh().pyiceberg.snapshots() if s.summary]
    mine = [p[BATCH_ID] for p in summaries if p.get(APP_ID) == f"checkpoint:{checkpoint}"]
    assert mine == ["0", "1"]
    staged = Path(table.metadata.location.removeprefix("file://")) / "data" / "_icemor-staging"
    assert staged.is_dir()  # the sink staged its rows there
    assert not [p for p in staged.rglob("*") if p.is_file()]
    scenarios.save_expected(out_dir, name, model)


def _run_killed(out_dir: Path, pause: str, source: str, target: str, checkpoint: Path, start: int) -> None:
    """Run the replication in a process group of its own with ``ICEMOR_TEST_PAUSE=pause``; when
    a process reaches the point, SIGKILL the group (driver, JVM, Python workers)."""
    os.environ["DS_START_SNAPSHOT"] = str(start)
    try:
        _killed_at(out_dir, pause, [source, target, str(checkpoint)])
    finally:
        del os.environ["DS_START_SNAPSHOT"]


def _killed_at(out_dir: Path, pause: str, args: list[str]) -> None:
    """``ds_tables.py OUT *args`` in a process group of its own with ``ICEMOR_TEST_PAUSE=pause``,
    SIGKILLed as a whole (driver, JVM, Python workers) when one of its processes gets there."""
    marker = out_dir / "ds-paused"
    marker.unlink(missing_ok=True)
    env = dict(os.environ)
    env["ICEMOR_TEST_PAUSE"] = f"{pause}:{marker}"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE / "hooks"), str(HERE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(HERE / "ds_tables.py"), str(out_dir), *args]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            if proc.poll() is not None:
                out = proc.stdout.read().decode()[-2000:] if proc.stdout else ""
                pytest.fail(f"the stream ended before pausing at {pause}: {out}")
            if time.monotonic() > deadline:
                pytest.fail(f"the stream did not reach {pause} in time")
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_replication_survives_kills_mid_batch(spark: SparkSession, out_dir: Path) -> None:
    """Source change feed -> icemor sink, one snapshot a micro-batch. Killed (1) in the sink's
    commit right after batch 1's table commit, before Spark records it, then (2) while the
    source reads batch 3's changes; restarted each time from the checkpoint. The target ends
    equal to the source, each batch committed once."""
    icemor.spark.register(spark)
    source, target = "ds.repl_src", "ds.repl_dst"
    src = scenarios.create_table(source, partitioned=True)
    scenarios.create_table(target, partitioned=False)  # the same rows as the source now
    start = src.metadata.current_snapshot().snapshot_id
    snapshots = _history(src)
    checkpoint = _fresh(out_dir / "ds-repl-checkpoint")
    _run_killed(out_dir, "sink-commit:1", source, target, checkpoint, start)
    committed = _batches(target, checkpoint)
    assert committed == ["0", "1"]  # batch 1 reached the table ...
    assert not (checkpoint / "commits" / "1").exists()  # ... but not Spark's commit log
    _run_killed(out_dir, f"source-read:{snapshots[3]}", source, target, checkpoint, start)
    assert _batches(target, checkpoint) == ["0", "1", "2"]
    os.environ["DS_START_SNAPSHOT"] = str(start)
    try:
        run_replication(spark, source, target, str(checkpoint))
    finally:
        del os.environ["DS_START_SNAPSHOT"]
    assert _batches(target, checkpoint) == ["0", "1", "2", "3", "4"]
    want = local(icemor.load_table(source), selected_fields=SOURCE_COLUMNS)
    got = local(icemor.load_table(target), selected_fields=SOURCE_COLUMNS)
    assert rows(got) == rows(want)
    model = {r[0]: r for r in rows(want)}
    scenarios.save_expected(out_dir, target, model)  # type: ignore[arg-type]
    staged = Path(icemor.load_table(target).metadata.location.removeprefix("file://")) / "data"
    assert (staged / "_icemor-staging").is_dir()
    assert not [p for p in (staged / "_icemor-staging").rglob("*") if p.is_file()]


def _batches(target: str, checkpoint: Path) -> list[str]:
    """The batch ids the sink committed to ``target`` for this checkpoint, in commit order."""
    table = icemor.load_table(target)
    return [
        s.summary.additional_properties[BATCH_ID]
        for s in table.pyiceberg.snapshots()
        if s.summary is not None and s.summary.additional_properties.get(APP_ID) == f"checkpoint:{checkpoint}"
    ]


def test_function_and_source_read_the_same_feed(spark: SparkSession) -> None:
    """The change feed's batch read through the source equals ``icemor.spark.read``'s."""
    icemor.spark.register(spark, fast_reads=False)
    table = icemor.load_table("ds.changes")
    want = table.changes().to_arrow()
    same(spark.read.format("icemor").option("readChangeFeed", "true").load("ds.changes"), want)
    same(icemor.spark.read(spark, "ds.changes", read_change_feed=True), want)


def _readme_stream() -> str:
    readme = (HERE.parent / "README.md").read_text()
    section = readme[readme.index("## A mirror kept by a stream") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("\n```", start)]


def test_readme_stream_runs_verbatim(spark: SparkSession, out_dir: Path) -> None:
    """The README's stream block, unchanged: the mirror is created like its source, seeded from
    the first snapshot, takes the feed's columns as they come, and after a restart from the
    checkpoint goes on; then the block runs in a process killed (driver, JVM, workers) right
    after a batch's table commit, before Spark records it, and a restart commits that batch
    no second time. The mirror equals the source each time (Iceberg Java reads it last)."""
    code = _readme_stream()
    checkpoint = Path("/tmp/icemor-checkpoints/orders_mirror")
    assert f'"{checkpoint}"' in code
    shutil.rmtree(checkpoint, ignore_errors=True)
    for name in ("shop.orders_mirror", "shop.orders"):
        with contextlib.suppress(Exception):
            icemor.drop_table(name, purge=True)
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("sku", pa.string()), pa.field("qty", pa.int32())]
    )
    orders = icemor.create_table("shop.orders", schema, partition_by=["sku"], format_version=3)
    orders.append(pa.table({"id": pa.array(range(20), pa.int64()), "sku": ["a", "b"] * 10,
                            "qty": pa.array(range(20), pa.int32())}, schema=schema))  # fmt: skip
    orders.update({"qty": "qty + 100"}, "id % 3 = 0")  # the feed shows an update as DELETE + INSERT
    orders.delete("id % 5 = 1")

    def run_and_compare(step: str) -> None:
        scope: dict[str, Any] = {"spark": spark}
        exec(compile(code, "README.md", "exec"), scope)
        query = scope["query"]
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None, str(query.exception())[-800:]
        mirror = icemor.load_table("shop.orders_mirror")
        assert [f.name for f in mirror.schema().fields] == ["id", "sku", "qty"], step
        assert mirror.schema().identifier_field_names() == {"id"}, step
        assert [f.name for f in mirror.metadata.spec().fields] == ["sku"], step
        assert mirror.metadata.format_version == 3, step
        want = icemor.load_table("shop.orders").scan().to_arrow().sort_by("id")
        assert mirror.scan().to_arrow().sort_by("id").to_pylist() == want.to_pylist(), step

    run_and_compare("first run (created, seeded from the first snapshot)")
    orders.refresh().update({"sku": "'c'"}, "id = 2")  # a partition move
    orders.refresh().apply_changes(
        pa.table(
            {
                "op": ["I", "D"],
                "id": pa.array([50, 4], pa.int64()),
                "sku": ["a", None],
                "qty": pa.array([5, None], pa.int32()),
            }
        ),
        key=["id"],
        allow_nullable_key=True,  # the source's id is optional (as the README's shop.orders)
    )
    run_and_compare("after a restart from the checkpoint")
    orders.refresh().delete("id IN (6, 7)")
    orders.refresh().update({"qty": "qty * 2"}, "sku = 'b'")
    done = _batches("shop.orders_mirror", checkpoint)
    next_batch = str(max(int(b) for b in done) + 1)
    script = out_dir / "readme-stream.py"
    script.write_text(code)
    _killed_at(out_dir, f"sink-commit:{next_batch}", ["--code", str(script)])
    assert _batches("shop.orders_mirror", checkpoint) == [*done, next_batch]  # in the table ...
    assert not (checkpoint / "commits" / next_batch).exists()  # ... not in Spark's commit log
    run_and_compare("after a kill mid-batch and a restart from the checkpoint")
    after = _batches("shop.orders_mirror", checkpoint)
    assert len(after) == len(set(after)) and after[: len(done) + 1] == [*done, next_batch], after
    rows = icemor.load_table("shop.orders").scan().to_arrow().to_pylist()
    (out_dir / "expected").mkdir(parents=True, exist_ok=True)
    expected = {"columns": ["id", "sku", "qty"], "rows": sorted([r["id"], r["sku"], r["qty"]] for r in rows)}
    (out_dir / "expected" / "shop.orders_mirror.json").write_text(json.dumps(expected))
