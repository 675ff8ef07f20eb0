"""Structured Streaming into apply_changes, exactly once: a file-source stream fails right after a
batch is committed (before Spark records it in its checkpoint), is restarted, replays that batch
(which the sink skips) and goes on; every batch is applied once."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icemor
import icemor.spark
from icemor.ops.cdc import APP_ID_PROPERTY, BATCH_ID_PROPERTY

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from icemor.ops.cdc import ChangeMetrics

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
# each batch inserts new keys too: applying one twice would leave a key live twice
BATCHES: list[list[tuple[int, str, int, str | None]]] = [
    [(1, "I", 1, "a"), (2, "I", 2, "b"), (3, "I", 3, "c")],
    [(4, "U", 1, "a1"), (5, "D", 2, None), (6, "I", 4, "d")],
    [(7, "I", 5, "e"), (8, "U", 5, "e1"), (9, "U", 3, "c1"), (10, "I", 6, "f")],
    [(11, "D", 1, None), (12, "I", 7, "g"), (13, "-U", 3, "c1"), (14, "U", 3, "c2")],
    [(15, "I", 8, "h"), (16, "D", 8, None), (17, "I", 1, "a2")],
]


class Crash(RuntimeError):
    pass


def _model() -> dict[int, str | None]:
    model: dict[int, str | None] = {}
    for batch in BATCHES:
        for _, op, key, v in batch:
            if op in ("I", "U"):
                model[key] = v
            elif op == "D":
                model.pop(key, None)
    return model


def _write_inputs(directory: Path) -> None:
    directory.mkdir()
    for n, batch in enumerate(BATCHES):
        path = directory / f"changes-{n:03d}.parquet"
        pq.write_table(
            pa.table(
                {
                    "lsn": pa.array([r[0] for r in batch], pa.int64()),
                    "op": [r[1] for r in batch],
                    "id": pa.array([r[2] for r in batch], pa.int64()),
                    "v": pa.array([r[3] for r in batch], pa.string()),
                }
            ),
            path,
        )
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # the file source reads oldest first


def _run(spark: SparkSession, inputs: Path, checkpoint: Path, sink: Any) -> None:
    stream = (
        spark.readStream.schema("lsn bigint, op string, id bigint, v string")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(inputs))
    )
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


@pytest.mark.parametrize("deletes", ["equality", "position"])
def test_a_restarted_stream_applies_every_batch_once(
    catalog: SqlCatalog, ns: str, spark: SparkSession, tmp_path: Path, deletes: str
) -> None:
    catalog.create_table(f"{ns}.t", schema=SCHEMA, properties={"format-version": "2"})
    table = icemor.load_table(f"{ns}.t", catalog=catalog)
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    _write_inputs(inputs)
    seen: list[tuple[int, bool]] = []

    def progress(batch_id: int, m: ChangeMetrics) -> None:
        seen.append((batch_id, m.skipped))

    sink = icemor.spark.cdc_sink(
        table, key=["id"], app_id="orders", order_by="lsn", progress=progress, deletes=deletes
    )

    def crash_after_batch_2(df: Any, batch_id: int) -> None:
        sink(df, batch_id)
        if batch_id == 2:
            msg = "killed after the commit of batch 2, before the checkpoint"
            raise Crash(msg)

    with pytest.raises(Exception, match="killed after the commit of batch 2"):
        _run(spark, inputs, checkpoint, crash_after_batch_2)
    assert seen == [(0, False), (1, False), (2, False)]
    _run(spark, inputs, checkpoint, sink)  # restarted: Spark runs batch 2 again, then 3 and 4
    assert seen[3:] == [(2, True), (3, False), (4, False)]

    rows = table.refresh().scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == sorted(_model().items())
    committed = [
        s.summary.additional_properties.get(BATCH_ID_PROPERTY)
        for s in table.pyiceberg.snapshots()
        if s.summary is not None and s.summary.additional_properties.get(APP_ID_PROPERTY) == "orders"
    ]
    assert committed == ["0", "1", "2", "3", "4"]


def test_the_sink_pickles_and_loads_its_table_where_it_runs(
    catalog: SqlCatalog, ns: str, spark: SparkSession
) -> None:
    """Spark Connect runs a foreachBatch function in its server's Python, pickled (cloudpickle):
    the sink travels as its table's catalog and identifier and loads the table there."""
    from pyspark import cloudpickle

    catalog.create_table(f"{ns}.pickled", schema=SCHEMA, properties={"format-version": "2"})
    table = icemor.load_table(f"{ns}.pickled", catalog=catalog)
    sink = icemor.spark.cdc_sink(table, key=["id"], app_id="moved", order_by="lsn")
    moved = cloudpickle.loads(cloudpickle.dumps(sink))
    schema = "lsn long, op string, id long, v string"
    # inserts: applied twice, a key would be live twice
    moved(spark.createDataFrame([(1, "I", 1, "a"), (2, "I", 2, "b")], schema), 0)
    moved(spark.createDataFrame([(1, "I", 1, "a"), (2, "I", 2, "b")], schema), 0)  # replayed
    moved(spark.createDataFrame([(3, "U", 1, "a1")], schema), 1)
    rows = table.refresh().scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(1, "a1"), (2, "b")]
    committed = [
        s.summary.additional_properties.get(BATCH_ID_PROPERTY)
        for s in table.pyiceberg.snapshots()
        if s.summary is not None and s.summary.additional_properties.get(APP_ID_PROPERTY) == "moved"
    ]
    assert committed == ["0", "1"]
