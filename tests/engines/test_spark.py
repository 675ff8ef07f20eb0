"""The Spark engine: work is split across executors and delete files are decoded once per process."""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from oracle import sorted_rows

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def test_tasks_spread_over_executors_and_deletes_decoded_once_per_process(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path
) -> None:
    name = f"{ns}.t"
    oracle.create_table(
        name,
        "id BIGINT, k INT",
        # one task per data file: tiny target size, no open-file cost packing
        properties={"read.split.target-size": "1024", "read.split.open-file-cost": "1"},
    )
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ REPARTITION(8) */ id, cast(id % 10 AS INT) FROM range(0, 8000)")
    ids = oracle.field_ids(name)
    # one global equality delete file that every task needs
    oracle.write_equality_deletes(name, pa.table({"k": pa.array([3, 7], pa.int32())}), [ids["k"]])
    oracle.sql(f"DELETE FROM {q} WHERE id % 100 = 0")

    table = icemor.load_table(name, catalog=catalog)
    tasks = table.scan().plan_tasks()
    assert len(tasks) >= 4

    log_dir = tmp_path / "loads"
    log_dir.mkdir()
    sc = oracle.spark.sparkContext
    sc.environment["ICEMOR_DELETE_LOAD_LOG"] = str(log_dir)  # reaches the Python workers
    try:
        df = table.to_spark(oracle.spark)
        assert df.rdd.getNumPartitions() == len(tasks)
        got = sorted_rows(tuple(r) for r in df.collect())
    finally:
        del sc.environment["ICEMOR_DELETE_LOAD_LOG"]
    assert got == sorted_rows(oracle.rows(name))
    assert len(got) == 8000 - 1600 - 80  # k in (3, 7), and id % 100 == 0 (where k == 0)

    logs = list(log_dir.glob("*.log"))
    assert logs, "no executor process decoded any delete file"
    for log in logs:
        per_key = Counter(log.read_text().splitlines())
        assert per_key, log
        repeated = {k: n for k, n in per_key.items() if n > 1}
        assert not repeated, f"process {log.stem} decoded delete files more than once: {repeated}"
    equality_decodes = sum(
        1 for log in logs for line in log.read_text().splitlines() if line.startswith("equality\t")
    )
    # at most once per executor process, and fewer decodes than tasks that needed the file
    assert 1 <= equality_decodes <= len(logs) < len(tasks)
    assert os.getpid() not in {int(p.stem) for p in logs}  # decoded on executors, not the driver


def test_spark_engine_refuses_unsupported_types_clearly(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, TimeType

    from icemor.exceptions import UnsupportedFeatureError

    name = f"{ns}.t"
    catalog.create_table(name, Schema(NestedField(1, "id", LongType()), NestedField(2, "t", TimeType())))
    table = icemor.load_table(name, catalog=catalog)
    with pytest.raises(UnsupportedFeatureError, match="time"):
        table.to_spark(oracle.spark)
