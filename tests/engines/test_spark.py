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
        df = table.to_spark(oracle.spark, strategy="python")  # one Spark partition per task
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


def test_native_strategy_is_used_where_exact_and_matches_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """Position deletes and two-column equality deletes with NULLs, a filter, metadata columns: native."""
    from icemor.engines.spark.native import native_dataframe

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING", partitioned_by="bucket(4, id)")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, cast(id % 10 AS INT), cast(id AS STRING) FROM range(0, 2000)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 0")
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(
        name, pa.table({"k": pa.array([3, None], pa.int32()), "s": ["13", None]}), [ids["k"], ids["s"]]
    )
    oracle.sql(f"INSERT INTO {q} VALUES (5000, NULL, NULL)")
    table = icemor.load_table(name, catalog=catalog)
    scan = table.scan(row_filter="id < 1500 or k is null", metadata_columns=True)
    df = native_dataframe(scan.job, oracle.spark)
    assert df is not None
    got = sorted_rows(tuple(r) for r in df.collect())
    java = sorted_rows(
        tuple(r) for r in oracle.sql(f"SELECT id, k, s, _file, _pos FROM {q} WHERE id < 1500 OR k IS NULL")
    )
    assert got == java
    assert (5000, None, None) in {r[:3] for r in got}


def test_native_strategy_refuses_what_it_cannot_do_exactly(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    from icemor.exceptions import InvalidArgumentError

    name = f"{ns}.p"
    oracle.create_table(name, "id BIGINT, cat STRING", partitioned_by="cat")
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES (1, 'a'), (2, 'b')")
    with pytest.raises(InvalidArgumentError, match="identity-partition"):
        icemor.load_table(name, catalog=catalog).to_spark(oracle.spark, strategy="native")

    name = f"{ns}.u"
    oracle.create_table(name, "id BIGINT, cat STRING")
    # one data file; deleting part of it writes a delete file (a whole file would just be dropped)
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} SELECT /*+ COALESCE(1) */ id, 'x' FROM range(0, 5)")
    oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id = 2")
    table = icemor.load_table(name, catalog=catalog)
    with pytest.raises(InvalidArgumentError, match="include_deleted"):
        table.to_spark(oracle.spark, strategy="native", include_deleted=True)
    with pytest.raises(InvalidArgumentError, match="unknown Spark strategy"):
        table.to_spark(oracle.spark, strategy="turbo")
    # auto stays exact: the file with deletes goes through the Python workers
    rows = sorted_rows(tuple(r) for r in table.to_spark(oracle.spark, include_deleted=True).collect())
    assert rows == [(i, "x", i == 2) for i in range(5)]


def test_auto_reads_clean_files_natively_and_files_with_deletes_in_python(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, v STRING")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, cast(id AS STRING) FROM range(0, 100)")
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, cast(id AS STRING) FROM range(100, 200)")
    oracle.sql(f"DELETE FROM {q} WHERE id IN (5, 6, 7)")  # only the first file has deletes
    table = icemor.load_table(name, catalog=catalog)
    planned = table.scan().plan_files()
    assert sorted(bool(p.delete_files) for p in planned) == [False, True]
    df = table.to_spark(oracle.spark, metadata_columns=True, include_deleted=True)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "FileScan parquet" in plan, plan
    got = sorted_rows(tuple(r) for r in df.collect())
    java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, v, _file, _pos FROM {q}"))
    assert [r[:4] for r in got if not r[4]] == java
    assert sorted(r[0] for r in got if r[4]) == [5, 6, 7]


def test_few_combined_tasks_are_split_into_one_partition_per_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """Four data files packed into one combined task would run on one core of local[2]."""
    name = f"{ns}.few"
    oracle.create_table(name, "id BIGINT, k INT")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ REPARTITION(4) */ id, cast(id % 10 AS INT) FROM range(0, 4000)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 0")
    table = icemor.load_table(name, catalog=catalog)
    combined = table.scan().plan_tasks()
    pieces = [t for ct in combined for t in ct.tasks]
    assert len(combined) < 2 * oracle.spark.sparkContext.defaultParallelism < len(pieces) + 1
    df = table.to_spark(oracle.spark, strategy="python")
    assert df.rdd.getNumPartitions() == len(pieces) == 4
    assert sorted_rows(tuple(r) for r in df.collect()) == sorted_rows(oracle.rows(name))
