"""Compaction inside the CDC writer (icemor.maintenance.in_writer): between a stream's batches,
when ``icemor.cdc.compact.enabled`` is set, the writer keeps the table healthy by itself."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.maintenance.in_writer import COMPACT_ENABLED

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from oracle import IcebergJava

ROWS = 400
BATCHES = 12


def _stream(table: Any, model: dict[int, str], seed: int, *, deletes: str) -> None:
    r = random.Random(seed)
    for b in range(BATCHES):
        keys = r.sample(range(ROWS + 50), 40)
        ops = [r.choice("UUUD") for _ in keys]
        vals = [f"b{b}-{k}" for k in keys]
        for k, op, v in zip(keys, ops, vals, strict=True):
            if op == "D":
                model.pop(k, None)
            else:
                model[k] = v
        batch = pa.table({"op": ops, "id": pa.array(keys, pa.int64()), "v": vals})
        table.refresh().apply_changes(batch, key=["id"], deletes=deletes)


def _setup(catalog: SqlCatalog, name: str, version: int, *, compact: bool) -> tuple[Any, dict[int, str]]:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    props = {COMPACT_ENABLED: "true"} if compact else {}
    table = icemor.create_table(
        name, schema, identifier_fields=["id"], format_version=version, properties=props, catalog=catalog
    )
    model = {i: f"v{i}" for i in range(ROWS)}
    table.append(
        pa.table({"id": pa.array(list(model), pa.int64()), "v": list(model.values())}, schema=schema)
    )
    return table, model


def _rows(table: Any) -> dict[int, str]:
    got = table.refresh().scan().to_arrow().to_pylist()
    return {r["id"]: r["v"] for r in got}


@pytest.mark.oracle
@pytest.mark.parametrize(("version", "deletes"), [(2, "equality"), (3, "position")])
def test_the_writer_keeps_its_table_healthy(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, version: int, deletes: str
) -> None:
    on, model_on = _setup(catalog, f"{ns}.on", version, compact=True)
    off, model_off = _setup(catalog, f"{ns}.off", version, compact=False)
    _stream(on, model_on, 7, deletes=deletes)
    _stream(off, model_off, 7, deletes=deletes)
    assert model_on == model_off
    assert _rows(on) == model_on
    assert _rows(off) == model_off
    java = {int(r[0]): r[1] for r in oracle.rows(f"{ns}.on", columns=["id", "v"])}
    assert java == model_on
    health_on, health_off = on.refresh().inspect(), off.refresh().inspect()
    # without it the debt grows batch by batch; with it the writer paid it down as it went
    assert health_off.table.score < 90
    assert health_on.table.score >= 90, health_on.recommendations
    assert health_on.table.read_amplification.max <= 2
    assert (
        "equality_global" not in health_on.table.delete_files
        or not health_on.table.delete_files["equality_global"].files
    )
    ops = [s.summary.operation.value for s in on.pyiceberg.snapshots() if s.summary is not None]
    assert "replace" in ops  # the compaction's own commits, between the batches


@pytest.mark.oracle
def test_the_foreach_batch_sink_compacts_between_batches(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession
) -> None:
    """``icemor.spark.cdc_sink`` on Spark: equality-mode batches, each followed by the writer's own
    equality -> position conversion (on the executors), so no equality delete stays live."""
    import icemor.spark

    table, model = _setup(catalog, f"{ns}.sink", 2, compact=True)
    sink = icemor.spark.cdc_sink(table, key=["id"], app_id="compacting", deletes="equality")
    r = random.Random(3)
    for b in range(4):
        keys = r.sample(range(ROWS), 30)
        rows = [("U" if k % 3 else "D", k, f"s{b}-{k}") for k in keys]
        for op, k, v in rows:
            if op == "D":
                model.pop(k, None)
            else:
                model[k] = v
        sink(spark.createDataFrame(rows, "op string, id long, v string"), b)
    assert _rows(table) == model
    assert {int(r[0]): r[1] for r in oracle.rows(f"{ns}.sink", columns=["id", "v"])} == model
    kinds = table.refresh().inspect().table.delete_files
    assert not kinds.get("equality_global") or not kinds["equality_global"].files
    assert not kinds.get("equality_partition") or not kinds["equality_partition"].files
    ops = [s.summary.operation.value for s in table.pyiceberg.snapshots() if s.summary is not None]
    assert ops.count("replace") >= 1


def test_a_failed_compaction_keeps_the_committed_batch(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch is committed before its compaction: a compaction that fails is a warning, the
    batch's metrics are returned and its rows are there."""
    from icemor.exceptions import CommitFailedError
    from icemor.maintenance import in_writer

    def failing(*_: Any, **__: Any) -> None:
        msg = "the disk went away"
        raise CommitFailedError(msg)

    monkeypatch.setattr(in_writer, "compact_after_batch", failing)
    table, model = _setup(catalog, f"{ns}.t", 2, compact=True)
    batch = pa.table({"op": ["U", "D"], "id": pa.array([1, 2], pa.int64()), "v": ["x", None]})
    with caplog.at_level("WARNING", logger="icemor"):
        metrics = table.apply_changes(batch, key=["id"])
    assert metrics.snapshot_id is not None
    assert "compaction after the batch failed" in caplog.text and "the disk went away" in caplog.text
    model[1] = "x"
    del model[2]
    assert _rows(table) == model


def test_each_batch_compacts_a_bounded_share(home: Any) -> None:
    """``icemor.cdc.compact.max-groups-per-batch``: a batch's round makes at most that many group
    commits per action; the next batches take the rest, and no row changes on the way."""
    from icemor.exceptions import InvalidArgumentError
    from icemor.maintenance.in_writer import COMPACT_MAX_GROUPS
    from icemor.maintenance.optimize import DATA_REWRITE
    from icemor.ops.table_meta import set_properties

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = icemor.create_table(
        "db.b",
        schema,
        identifier_fields=["id"],
        partition_by=["truncate(100,id)"],
        format_version=3,
        properties={"icemor.optimize.partial-progress.max-commits": "4"},
    )
    model = {i: f"v{i}" for i in range(400)}
    for lo in range(0, 400, 50):  # two small files in each of 4 partitions
        ids = list(range(lo, lo + 50))
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "v": [model[i] for i in ids]}, schema=schema))
    table.delete("id % 4 = 0")  # a quarter of every file: over the major delete ratio
    model = {k: v for k, v in model.items() if k % 4}
    set_properties(table.pyiceberg, {COMPACT_ENABLED: "true", COMPACT_MAX_GROUPS: "1"})
    rounds = []
    for b in range(6):
        batch = pa.table({"op": ["U"], "id": pa.array([401 + b], pa.int64()), "v": [f"n{b}"]})
        table.refresh().apply_changes(batch, key=["id"], deletes="position")
        model[401 + b] = f"n{b}"
        result = table.refresh().compact_after_batch()  # what the next batch would do, seen here
        rounds.append(None if result is None else {a.action: a for a in result.actions}.get(DATA_REWRITE))
    rewrites = [r for r in rounds if r is not None]
    assert rewrites and all(r.commits <= 1 for r in rewrites), rounds
    assert any(r.stopped > 0 for r in rewrites), rounds  # the bound held work back
    assert _rows(table) == model
    set_properties(table.refresh().pyiceberg, {COMPACT_MAX_GROUPS: "0"})
    with pytest.raises(InvalidArgumentError, match="max-groups-per-batch is 0"):
        table.refresh().compact_after_batch()
