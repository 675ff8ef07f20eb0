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
