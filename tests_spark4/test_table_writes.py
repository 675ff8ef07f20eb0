"""Spark 4: DataFrames written on the executors (``engines/spark/table_writes.py``).

``icemor.create_table(name, df)``, ``table.append(df)``, ``table.overwrite(df, where=...)`` and
``icemor.spark.write`` (the same tests as ``tests/engines/test_spark_table_writes.py`` on 3.5),
and ``df.write.format(...)`` through :class:`IcemorBatchWriter` with a DataSource of this test
(the ``icemor`` data source returns the same writer). A ``TimestampType`` column once failed
here with a bare ``AssertionError`` from PySpark's Arrow export on the driver.

Each step is checked against the source DataFrames' own rows (the model) with icemor's reader;
the final rows are saved in ``OUT/expected`` as text (``CAST(... AS STRING)``, the same on Spark 3.5
and 4.x for these types), where ``tools/spark4_check.py`` has Iceberg Java read them.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource

import icemor
import icemor.spark
from icemor.engines.spark.table_writes import IcemorBatchWriter, new_table_schema_of
from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

# Compared as text: Java (Spark 3.5) and Spark 4 print these types alike
TEXT = [
    "CAST(id AS STRING)",
    "CAST(k AS STRING)",
    "CAST(ts AS STRING)",
    "CAST(ntz AS STRING)",
    "CAST(dec AS STRING)",
    "s",
    "CAST(arr AS STRING)",
    "CAST(st AS STRING)",
]
SOURCE = [
    "id",
    "CAST(id % 3 AS INT) AS k",
    "timestamp_micros(1700000000123456 + id * 3600000001) AS ts",
    "CAST(timestamp_micros(-86400000000 + id * 61000017) AS TIMESTAMP_NTZ) AS ntz",
    "CAST(id * 1.25 AS DECIMAL(12, 2)) AS dec",
    "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('s', id) END AS s",
    "CASE WHEN id % 4 = 0 THEN NULL ELSE array(id, NULL) END AS arr",
    "named_struct('x', id, 'y', CAST(id % 100 AS TINYINT)) AS st",
]


class _Writes(DataSource):
    """A data source that only writes, by icemor's writer with the facade's services."""

    services = icemor.spark._data_source_services()

    @classmethod
    def name(cls) -> str:
        return "icemor_test_writes"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return IcemorBatchWriter(self.services, dict(self.options), schema, overwrite)


@pytest.fixture(scope="module")
def writes(spark: SparkSession) -> str:
    """The format name of the test's data source (pickled by value: workers cannot import tests)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(_Writes)
    return _Writes.name()


def _drop(name: str) -> None:
    """Drop an earlier run's table."""
    namespace = name.split(".", maxsplit=1)[0]
    if namespace in icemor.list_namespaces() and name in icemor.list_tables(namespace):
        icemor.drop_table(name, purge=True)


def _text(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.selectExpr(*TEXT).collect())


def _source(spark: SparkSession, lo: int, hi: int) -> DataFrame:
    return spark.range(lo, hi, numPartitions=3).selectExpr(*SOURCE)


def _read(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    """The table's rows as text, read by icemor (Python workers: the local reader on executors)."""
    return _text(icemor.load_table(name).to_spark(spark, strategy="python"))


def _save(out: Path, name: str, rows: list[tuple[Any, ...]]) -> None:
    (out / "expected").mkdir(parents=True, exist_ok=True)
    data = {"columns": TEXT, "rows": [list(r) for r in rows]}
    (out / "expected" / f"{name}.json").write_text(json.dumps(data))


def _files(name: str) -> tuple[set[str], set[str]]:
    """(data files on disk, data files any snapshot references); no staged file may be left."""
    from pathlib import Path
    from urllib.parse import urlparse

    table = icemor.load_table(name).pyiceberg
    root = Path(urlparse(table.metadata.location).path)
    staging = root / "data" / "_icemor-staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*"))
    on_disk = {str(p) for p in (root / "data").rglob("*") if p.is_file() and not p.name.startswith(".")}
    referenced = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                referenced.add(urlparse(entry.data_file.file_path).path)
    return on_disk, referenced


@pytest.mark.parametrize("partition_by", [(), ("k", "day(ts)")], ids=["flat", "partitioned"])
def test_create_append_overwrite_with_timestamps(
    spark: SparkSession, out_dir: Path, partition_by: tuple[str, ...]
) -> None:
    name = f"s4w.{'part' if partition_by else 'flat'}"
    _drop(name)
    first, second, third = _source(spark, 0, 200), _source(spark, 200, 300), _source(spark, 1000, 1030)
    table = icemor.create_table(name, first, partition_by=list(partition_by), format_version=3)
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert (types["ts"], types["ntz"], types["dec"]) == ("timestamptz", "timestamp", "decimal(12, 2)")
    model = _text(first)
    assert _read(spark, name) == model
    assert table.append(second) == 100  # a TimestampType column: PySpark's Arrow export failed here
    model = sorted(model + _text(second))
    assert _read(spark, name) == model
    m = table.overwrite(third, where="id >= 50 AND id < 250")
    assert (m.rows_deleted, m.rows_added) == (200, 30)
    model = sorted([r for r in model if not 50 <= int(r[0]) < 250] + _text(third))
    assert _read(spark, name) == model
    assert icemor.spark.write(_source(spark, 2000, 2010), name, mode="append") == 10
    model = sorted(model + _text(_source(spark, 2000, 2010)))
    assert _read(spark, name) == model
    on_disk, referenced = _files(name)
    assert on_disk == referenced
    _save(out_dir, name, model)


def test_the_data_source_writer(spark: SparkSession, out_dir: Path, writes: str) -> None:
    name = "s4w.source"
    _drop(name)
    first = _source(spark, 0, 100)
    icemor.create_table(name, new_table_schema_of(first), partition_by=["k"])
    first.write.format(writes).mode("append").save(name)
    model = _text(first)
    assert _read(spark, name) == model

    second = _source(spark, 100, 160)
    second.write.format(writes).mode("append").save(name)
    model = sorted(model + _text(second))
    assert _read(spark, name) == model

    third = _source(spark, 500, 520)
    third.write.format(writes).mode("overwrite").option("where", "id < 30 OR k = 2").save(name)
    model = sorted([r for r in model if not (int(r[0]) < 30 or r[1] == "2")] + _text(third))
    assert _read(spark, name) == model

    # refused while the writer is made, before any row is written: the message is Spark's
    # wrapping of icemor's one line
    before = icemor.load_table(name).pyiceberg.metadata.current_snapshot_id
    for mode, options, says in (
        ("append", {"where": "id < 3"}, "applies to mode 'overwrite' only"),
        ("overwrite", {"where": "nope > 1"}, "nope"),
        ("append", {"mergeSchema": "true"}, "unknown write option"),
    ):
        with pytest.raises(Exception, match=says):
            third.write.format(writes).mode(mode).options(**options).save(name)
    with pytest.raises(Exception, match="does not match the schema"):
        spark.range(3).selectExpr("id", "id AS other").write.format(writes).mode("append").save(name)
    # a job that fails after tasks wrote files (the last row of the last task): Spark calls
    # abort, which removes every file of the write
    bad = spark.range(3000, 3300, numPartitions=3).selectExpr(
        "CASE WHEN id = 3299 THEN CAST(raise_error('boom') AS BIGINT) ELSE id END AS id", *SOURCE[1:]
    )
    with pytest.raises(Exception, match="boom"):
        bad.write.format(writes).mode("append").save(name)
    assert icemor.load_table(name).pyiceberg.metadata.current_snapshot_id == before
    on_disk, referenced = _files(name)
    assert on_disk == referenced

    # overwrite without a condition: every row replaced
    fourth = _source(spark, 9000, 9005)
    fourth.write.format(writes).mode("overwrite").save(name)
    model = _text(fourth)
    assert _read(spark, name) == model
    on_disk, referenced = _files(name)
    assert on_disk == referenced
    _save(out_dir, name, model)


def test_function_form_refusals_match_the_data_source(spark: SparkSession) -> None:
    df = spark.range(3)
    with pytest.raises(InvalidArgumentError, match="unknown write mode 'errorifexists'"):
        icemor.spark.write(df, "s4w.flat", mode="errorifexists")
    with pytest.raises(InvalidArgumentError, match="applies to mode 'overwrite' only"):
        icemor.spark.write(df, "s4w.flat", where="id > 1")
