"""Change files on the driver, handed to Spark executors that cannot see the driver's disk.

``icemor --engine spark apply-changes TABLE --changes FILE`` once gave Spark the driver-local
path of FILE, which executors on other hosts cannot read. The files are now staged in the
table's warehouse (the one storage every executor shares) and removed afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icemor

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))


def _changes(path: Path, rows: list[tuple[str, int, str | None]]) -> str:
    ops, ids, values = zip(*rows, strict=True)
    pq.write_table(pa.table({"op": list(ops), "id": pa.array(ids, pa.int64()), "v": list(values)}), path)
    return str(path)


def _staging_files(location: str) -> list[Path]:
    root = Path(location.removeprefix("file://")) / "data" / "_icemor-staging"
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.mark.oracle
def test_staged_files_do_not_depend_on_the_driver_path(
    spark: SparkSession, catalog: SqlCatalog, ns: str, tmp_path: Path
) -> None:
    """The DataFrame still reads every row, in the files' order, after the driver's files are
    gone (an executor elsewhere never sees them); the staged copies go when the block ends."""
    from icemor.engines.spark.changes import staged_parquet

    table = catalog.create_table(f"{ns}.staged", schema=SCHEMA)
    driver = tmp_path / "driver-only"
    driver.mkdir()
    first = [("I", i, f"a{i}") for i in range(5)]
    second = [("U", i, None) for i in range(3)]
    paths = [_changes(driver / "a.parquet", first), _changes(driver / "b.parquet", second)]
    with staged_parquet(spark, table.io, table.metadata.location, paths) as df:
        for p in paths:
            os.remove(p)
        assert len(_staging_files(table.metadata.location)) == 2
        got = [(r["op"], r["id"], r["v"]) for r in df.collect()]
    assert got == first + second
    assert _staging_files(table.metadata.location) == []


_NO_DRIVER_PATHS = """
import sys
from pyspark.sql.readwriter import DataFrameReader

warehouse = sys.argv[1]
read = DataFrameReader.parquet


def parquet(self, *paths, **options):
    # an executor on another host sees the warehouse only
    for p in paths:
        if not str(p).removeprefix("file:").lstrip("/").startswith(warehouse.lstrip("/")):
            raise RuntimeError(f"Spark was given a driver-local path: {p}")
    return read(self, *paths, **options)


DataFrameReader.parquet = parquet
from icemor.cli import run

sys.exit(run(sys.argv[2:]))
"""


@pytest.mark.oracle
def test_cli_spark_apply_changes_reads_the_changes_from_the_warehouse(home: Path, tmp_path: Path) -> None:
    from oracle import load_oracle_env

    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA, properties={"format-version": "2"})
    first = _changes(tmp_path / "a.parquet", [("I", 1, "a"), ("I", 2, "b")])
    second = _changes(tmp_path / "b.parquet", [("U", 1, "a1"), ("D", 2, None), ("I", 3, "c")])
    env: dict[str, Any] = {
        **os.environ,
        "JAVA_HOME": load_oracle_env()["java_home"],
        "ICEMOR_SPARK_MASTER": "local[2]",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["--engine", "spark", "apply-changes", "db.t", "--changes", first, "--changes", second]
    done = subprocess.run(
        [sys.executable, "-c", _NO_DRIVER_PATHS, str(home / "warehouse"), *args, "--key", "id"],
        capture_output=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().startswith("applied 5 changes")
    rows = sorted((r["id"], r["v"]) for r in icemor.load_table("db.t").scan().to_arrow().to_pylist())
    assert rows == [(1, "a1"), (3, "c")]
    assert _staging_files(table.metadata.location) == []


def _stages_per_job(spark: SparkSession, group: str) -> list[int]:
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in sorted(tracker.getJobIdsForGroup(group))]
    return [len(j.stageIds) for j in jobs if j is not None]


@pytest.mark.oracle
@pytest.mark.parametrize("deletes", ["equality", "position"])
def test_one_task_applies_the_batch_unshuffled(
    spark: SparkSession, catalog: SqlCatalog, ns: str, deletes: str
) -> None:
    """``partitions=1``: every change of every key already meets in the one task, so the batch is
    not shuffled by key (a Spark job and stage less, a quarter of a small batch's time), and in
    position mode the task, holding every position of each data file, also writes their deletes
    (no second job); by default the batch is shuffled over the default parallelism. The rows
    are the same either way."""
    catalog.create_table(f"{ns}.t", schema=SCHEMA, properties={"format-version": "2"})
    table = icemor.load_table(f"{ns}.t", catalog=catalog)
    table.apply_changes(
        pa.table({"op": ["I"] * 6, "id": pa.array(range(6), pa.int64()), "v": [f"v{i}" for i in range(6)]}),
        key=["id"],
    )
    batch = [
        ("U", 1, "a"),
        ("U", 1, "b"),  # the later row wins
        ("D", 2, None),
        ("I", 20, "x"),
        ("U", 20, "y"),
        ("I", 21, "z"),
        ("D", 21, None),
        ("U", 3, "c"),
    ]
    want = {0: "v0", 1: "b", 3: "c", 4: "v4", 5: "v5", 20: "y"}
    sc = spark.sparkContext
    for n, partitions in enumerate((1, None)):
        df = spark.createDataFrame(batch, schema="op string, id bigint, v string")  # rows in order
        assert df.rdd.getNumPartitions() == 2
        group = f"{ns}-{n}"
        sc.setJobGroup(group, group)
        try:
            table.apply_changes(df, key=["id"], deletes=deletes, partitions=partitions)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        stages = _stages_per_job(spark, group)
        assert stages, group
        if partitions == 1:
            # one job of one stage: no shuffle, and (position mode) the task wrote the deletes too
            assert stages == [1], stages
        else:
            assert max(stages) > 1, stages
        rows = {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
        assert rows == want, partitions
