"""Spark 4: DELETE, UPDATE (a partition-column move), MERGE and a CDC batch, then the streaming sink.

Each step is checked against a Python model with icemor's local reader (``scenarios``); the
final tables stay in ``OUT/home`` with the model's rows in ``OUT/expected``, where
``tools/spark4_check.py`` (``make test-spark4``, main venv) has Iceberg Java read them.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scenarios

import icemor
import icemor.spark

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_delete_update_merge_cdc(spark: SparkSession, out_dir: Path, partitioned: bool) -> None:
    name = f"spark4.{'part' if partitioned else 'flat'}"
    model = scenarios.run_writes(spark, name, partitioned=partitioned)
    scenarios.save_expected(out_dir, name, model)


def test_streaming_cdc_sink_applies_each_batch_once(spark: SparkSession, out_dir: Path) -> None:
    name = "spark4.stream"
    table = scenarios.create_table(name, partitioned=True)
    model = scenarios.initial_rows()
    source, checkpoint = out_dir / "stream-in", out_dir / "stream-checkpoint"
    for old in (source, checkpoint):  # an earlier run's
        shutil.rmtree(old, ignore_errors=True)
    source.mkdir()
    # a delete names its key only: every other column of a change may be NULL
    schema = pa.schema(
        [pa.field("op", pa.string())] + [f.with_nullable(True) for f in scenarios.arrow_schema()]
    )
    batches = [
        [("U", 5, "p2", 55, "s1"), ("D", 6, None, None, None), ("I", 1000, "p0", 1, "new")],
        [("U", 1000, "p1", 2, "again"), ("D", 7, None, None, None), ("U", 5, "p0", 56, "s2")],
    ]
    stream_schema = f"op string, {scenarios.SPARK_DDL}"
    for n, batch in enumerate(batches):
        rows = [dict(zip(("op", *scenarios.COLUMNS), c, strict=True)) for c in batch]
        # written to a hidden name, then renamed: the file source must never see half a file
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), source / f".b{n}.tmp")
        (source / f".b{n}.tmp").rename(source / f"b{n}.parquet")
        query = (
            spark.readStream.schema(stream_schema)
            .parquet(str(source))
            .writeStream.foreachBatch(icemor.spark.cdc_sink(table, key=["id"], app_id="s4-stream"))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(timeout=300)
        assert query.exception() is None
        for op, i, part, qty, note in batch:
            if op == "D":
                model.pop(i, None)
            else:
                model[i] = (i, part, qty, note)  # type: ignore[assignment]
        scenarios.check(name, model, f"stream batch {n}")
    apps = [
        s.summary.additional_properties.get("icemor.cdc.app-id")
        for s in icemor.load_table(name).pyiceberg.snapshots()
        if s.summary is not None
    ]
    assert apps.count("s4-stream") == len(batches)
    scenarios.save_expected(out_dir, name, model)
