"""Spark DataFrames written on the executors (engines/spark/table_writes.py), judged by Iceberg Java.

``icemor.create_table(name, df)``, ``table.append(df)``, ``table.overwrite(df, where=...)`` and
``icemor.spark.write(df, ...)`` on PySpark 3.5: Java must read exactly the rows of a model (the
source DataFrames' own rows), for every Spark type an Iceberg table holds, partitioned or not,
format v2 and v3 (with row lineage); only file metadata may come to the driver; a task that dies
once and is retried leaves no duplicate row and no extra file; a job or a commit that fails leaves
no file and no snapshot. The first tests need no JVM: the type mapping and the options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as st

import icemor
import icemor.spark
from icemor.engines.spark.table_writes import new_table_schema_of, spark_arrow_schema, write_options
from icemor.exceptions import CommitConflictError, CommitFailedError, InvalidArgumentError
from icemor.ops.overwrite import OverwriteMetrics
from oracle import local_path, sorted_rows

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import DataFrame, SparkSession

    from oracle import IcebergJava


# ------------------------------------------------------------------------------------ no JVM


def test_spark_types_map_as_sparks_arrow_transfer_hands_them_over() -> None:
    schema = st.StructType(
        [
            st.StructField("b", st.ByteType(), False),
            st.StructField("i", st.IntegerType()),
            st.StructField("d", st.DecimalType(38, 10)),
            st.StructField("ts", st.TimestampType()),
            st.StructField("ntz", st.TimestampNTZType()),
            st.StructField("v", st.VarcharType(4)),
            st.StructField("a", st.ArrayType(st.StringType(), containsNull=False)),
            st.StructField("m", st.MapType(st.StringType(), st.LongType(), valueContainsNull=True)),
            st.StructField("s", st.StructType([st.StructField("x", st.DateType(), False)])),
        ]
    )
    assert spark_arrow_schema(schema) == pa.schema(
        [
            pa.field("b", pa.int8(), nullable=False),
            pa.field("i", pa.int32()),
            pa.field("d", pa.decimal128(38, 10)),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("ntz", pa.timestamp("us")),
            pa.field("v", pa.string()),
            pa.field("a", pa.list_(pa.field("element", pa.string(), nullable=False))),
            pa.field(
                "m", pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64()))
            ),
            pa.field("s", pa.struct([pa.field("x", pa.date32(), nullable=False)])),
        ]
    )


@pytest.mark.parametrize(
    ("spark_type", "shown"),
    [
        (st.YearMonthIntervalType(), "interval year to month"),
        (st.StructType([st.StructField("x", st.YearMonthIntervalType())]), "'c.x'"),
        (st.MapType(st.StringType(), st.YearMonthIntervalType()), "'c.value'"),
    ],
)
def test_a_type_no_iceberg_table_holds_is_refused_naming_the_column(
    spark_type: st.DataType, shown: str
) -> None:
    schema = st.StructType([st.StructField("c", spark_type)])
    with pytest.raises(InvalidArgumentError) as err:
        spark_arrow_schema(schema)
    assert "no such type" in str(err.value)
    assert "column 'c" in str(err.value)
    assert shown in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("options", "overwrite", "expected"),
    [
        ({}, False, (None, None, False)),
        ({"catalog": "other"}, False, (None, "other", False)),
        ({"where": "id > 1"}, True, ("id > 1", None, False)),
        ({"overwrite-where": "id > 1", "CATALOG": "c"}, True, ("id > 1", "c", False)),
        ({"overwrite_where": "id > 1"}, True, ("id > 1", None, False)),
        ({"path": "db.t"}, True, (None, None, False)),
        ({"overwrite_mode": "Dynamic"}, True, (None, None, True)),
        ({"overwrite-mode": "static", "where": "id > 1"}, True, ("id > 1", None, False)),
    ],
)
def test_write_options(options: dict[str, str], overwrite: bool, expected: tuple[object, ...]) -> None:
    assert write_options(options, overwrite=overwrite) == expected


@pytest.mark.parametrize(
    ("options", "overwrite", "says"),
    [
        ({"mergeSchema": "true"}, False, "unknown write option 'mergeSchema'"),
        ({"where": "id > 1"}, False, "applies to mode 'overwrite' only"),
        ({"where": "a", "overwrite-where": "b"}, True, "not both"),
        ({"overwrite-mode": "dynamic"}, False, "applies to mode 'overwrite' only"),
        ({"overwrite-mode": "partial"}, True, "unknown overwrite-mode 'partial'"),
        ({"overwrite-mode": "dynamic", "where": "id > 1"}, True, "takes no condition"),
    ],
)
def test_write_options_refused_in_one_line(options: dict[str, str], overwrite: bool, says: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        write_options(options, overwrite=overwrite)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_uuid_text_becomes_uuids_in_sliced_lists_maps_and_structs() -> None:
    """Spark holds a uuid as text: at any depth it becomes the table's 16-byte uuid, NULLs kept,
    also in a slice and under a NULL list whose offsets still span values."""
    from icemor.engines.spark.table_writes import _uuid_array

    a, b, c = (f"{i:08x}-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))
    raw = {x: bytes.fromhex(x.replace("-", "")) for x in (a, b, c)}
    # a NULL list over a non-empty segment: offsets [0, 1, 2, 3], validity [1, 0, 1]
    lists = pa.ListArray.from_arrays(
        pa.array([0, 1, 2, 3], pa.int32()), pa.array([a, "", c]), mask=pa.array([False, True, False])
    )
    out = _uuid_array(lists.slice(1), pa.list_(pa.uuid()))
    assert [None if v is None else [u.bytes for u in v] for v in out.to_pylist()] == [None, [raw[c]]]
    out = _uuid_array(lists, pa.list_(pa.uuid()))
    assert [None if v is None else [u.bytes for u in v] for v in out.to_pylist()] == [
        [raw[a]],
        None,
        [raw[c]],
    ]
    maps = pa.array([[("k", a)], None, [("x", b), ("y", None)]], pa.map_(pa.string(), pa.string()))
    out = _uuid_array(maps.slice(1), pa.map_(pa.string(), pa.uuid()))
    assert out.to_pylist()[0] is None
    assert [(k, None if v is None else v.bytes) for k, v in out.to_pylist()[1]] == [
        ("x", raw[b]),
        ("y", None),
    ]
    structs = pa.array([{"u": a, "w": 1}, None, {"u": None, "w": 3}])
    target = pa.struct([pa.field("u", pa.uuid()), pa.field("w", pa.int64())])
    out = _uuid_array(structs.slice(1), target)
    assert out.to_pylist() == [None, {"u": None, "w": 3}]
    assert _uuid_array(structs, target).to_pylist()[0]["u"].bytes == raw[a]


# ---------------------------------------------------------------------------------- the oracle

# Every Spark type an Iceberg table holds (its Java reader's types in a comment where they differ)
EVERY_TYPE = [
    "id",
    "CAST(id % 3 AS INT) AS k",
    "CAST(id % 100 AS TINYINT) AS tiny",  # int
    "CAST(id AS SHORT) AS small",  # int
    "id % 2 = 0 AS flag",
    "CAST(id AS FLOAT) / 4 AS f",
    "CASE WHEN id % 7 = 0 THEN NULL ELSE id / 3.0d END AS dbl",
    "CAST(id * 1.25 AS DECIMAL(12, 2)) AS dec",
    "CAST(-id AS DECIMAL(38, 10)) AS dec38",
    "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('s', id) END AS s",
    "encode(concat('b', id), 'utf-8') AS bin",
    "date_add(DATE'1969-12-25', CAST(id AS INT)) AS dt",
    "timestamp_micros(1700000000123456 + id * 3600000001) AS ts",  # timestamptz
    "CAST(timestamp_micros(-86400000000 + id * 61000017) AS TIMESTAMP_NTZ) AS ntz",  # timestamp
    "CASE WHEN id % 4 = 0 THEN NULL ELSE array(id, NULL, id + 1) END AS arr",
    "map(concat('k', id), CASE WHEN id % 3 = 0 THEN NULL ELSE id END) AS m",
    "named_struct('x', id, 'y', concat('y', id), 'z', named_struct('w', CAST(id AS INT))) AS st",
    "array(named_struct('p', id, 'q', map('a', array(id)))) AS nested",
]


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """A DataFrame's rows, collected by the test (the model)."""
    return sorted_rows(df.collect())


def _java_rows(oracle: IcebergJava, name: str, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    return oracle.rows(name, columns=columns)


def _files_left(oracle: IcebergJava, name: str) -> tuple[set[str], set[str]]:
    """(files under the table's data directory, files any snapshot references); no staging file
    may be left under data/_icemor-staging/."""
    location = next(
        r[1] for r in oracle.sql(f"DESCRIBE TABLE EXTENDED {oracle.qualified(name)}") if r[0] == "Location"
    )
    root = local_path(location)
    staging = root / "data" / "_icemor-staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*"))
    on_disk = {str(p) for p in (root / "data").rglob("*") if p.is_file() and not p.name.startswith(".")}
    q = oracle.qualified(name)
    referenced = {str(local_path(r[0])) for r in oracle.sql(f"SELECT file_path FROM {q}.all_files")}
    return on_disk, referenced


class _Collected:
    """What DataFrames bring to the driver while :meth:`on`: each result's columns and rows."""

    def __init__(self) -> None:
        self.results: list[tuple[list[str], int]] = []
        self.active = False

    @contextmanager
    def on(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> _Collected:
    """Record every collect, toPandas, toLocalIterator and Arrow collect of a DataFrame."""
    from pyspark.sql import DataFrame

    from icemor.engines.spark import _compat

    record = _Collected()
    collect, to_pandas, to_iterator = DataFrame.collect, DataFrame.toPandas, DataFrame.toLocalIterator
    batches = _compat.collect_arrow_batches

    def recording_collect(self: DataFrame) -> Any:
        rows = collect(self)
        if record.active:
            record.results.append((self.columns, len(rows)))
        return rows

    def refused(*_: Any, **__: Any) -> Any:
        if record.active:
            record.results.append((["rows streamed or collected whole"], -1))
        msg = "rows were brought to the driver"
        raise AssertionError(msg)

    def recording_to_pandas(self: DataFrame) -> Any:
        return refused() if record.active else to_pandas(self)

    def recording_iterator(self: DataFrame, *args: Any, **kwargs: Any) -> Any:
        return refused() if record.active else to_iterator(self, *args, **kwargs)

    def recording_batches(df: DataFrame) -> Any:
        return refused() if record.active else batches(df)

    monkeypatch.setattr(DataFrame, "collect", recording_collect)
    monkeypatch.setattr(DataFrame, "toPandas", recording_to_pandas)
    monkeypatch.setattr(DataFrame, "toLocalIterator", recording_iterator)
    monkeypatch.setattr(_compat, "collect_arrow_batches", recording_batches)
    return record


def _only_file_metadata(record: _Collected, tasks: int) -> None:
    """Every result the driver collected is the tasks' pickled file metadata (one row a task)."""
    assert record.results, "nothing was collected: did the write run on Spark?"
    for columns, rows in record.results:
        assert columns in (["result"],), f"rows came to the driver: {columns}"
        assert 0 <= rows <= tasks


def _source(spark: SparkSession, lo: int, hi: int) -> DataFrame:
    return spark.range(lo, hi, numPartitions=4).selectExpr(*EVERY_TYPE)


@pytest.mark.oracle
@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("partition_by", [(), ("k", "day(ts)")], ids=["flat", "partitioned"])
def test_create_append_overwrite_of_every_type_read_by_java(
    oracle: IcebergJava,
    catalog: SqlCatalog,
    ns: str,
    version: int,
    partition_by: tuple[str, ...],
    collected: _Collected,
) -> None:
    spark = oracle.spark
    name = f"{ns}.t"
    first, second, third, fourth = (
        _source(spark, 0, 300),
        _source(spark, 300, 500),
        _source(spark, 1000, 1040),
        _source(spark, 2000, 2010),
    )
    with collected.on():
        table = icemor.create_table(
            name, first, partition_by=list(partition_by), format_version=version, catalog=catalog
        )
    model = _rows(first)
    # the Spark schema, every column optional (as Spark's CREATE TABLE AS SELECT)
    types = {f.name: (str(f.field_type), f.required) for f in table.schema().fields}
    assert types["ts"] == ("timestamptz", False)
    assert types["ntz"] == ("timestamp", False)
    assert types["tiny"] == ("int", False)
    assert types["id"] == ("long", False)  # spark.range's id is not nullable in Spark
    assert types["dec38"] == ("decimal(38, 10)", False)
    assert _java_rows(oracle, name) == model

    with collected.on():
        assert table.append(second) == 200
    model = sorted_rows(model + _rows(second))
    assert _java_rows(oracle, name) == model
    if version == 3:  # row lineage: Java reads ids 0..299 for the first snapshot's rows, then 300..499
        lineage = oracle.sql(
            f"SELECT id, _row_id, _last_updated_sequence_number FROM {oracle.qualified(name)}"
        )
        assert sorted(r[1] for r in lineage) == list(range(500))
        assert {(r[0] < 300, r[1] < 300, r[2]) for r in lineage} == {(True, True, 1), (False, False, 2)}

    with collected.on():
        m = table.overwrite(third, where="id >= 100 AND id < 350")
    assert (m.rows_deleted, m.rows_added) == (250, 40)
    model = sorted_rows([r for r in model if not 100 <= r[0] < 350] + _rows(third))
    assert _java_rows(oracle, name) == model

    with collected.on():
        m = icemor.spark.write(fourth, name, mode="overwrite", catalog=catalog.name)
    assert isinstance(m, OverwriteMetrics)
    assert (m.rows_deleted, m.rows_added) == (len(model), 10)
    model = _rows(fourth)
    assert _java_rows(oracle, name) == model
    _only_file_metadata(collected, tasks=spark.sparkContext.defaultParallelism * 50)

    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


@pytest.mark.oracle
def test_append_converts_by_the_input_rules(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    """int -> long, int/long -> double, tinyint -> int, a missing optional column NULL, columns by
    name in any order; a Spark timestamp (an instant) into timestamptz, a zone-less one into
    timestamp; the text of uuids (as Spark holds them) into uuid columns, nested too."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DoubleType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestampType,
        TimestamptzType,
        UUIDType,
    )

    spark = oracle.spark
    name = f"{ns}.t"
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "qty", DoubleType()),
        NestedField(3, "small", IntegerType()),
        NestedField(4, "ts", TimestamptzType()),
        NestedField(5, "ntz", TimestampType()),
        NestedField(6, "u", UUIDType()),
        NestedField(
            7, "inner", StructType(NestedField(8, "v", UUIDType()), NestedField(9, "w", StringType()))
        ),
        NestedField(10, "us", ListType(11, UUIDType(), element_required=False)),
        NestedField(12, "note", StringType()),
    )
    table = icemor.create_table(name, schema, catalog=catalog)
    df = (
        spark.range(0, 50, numPartitions=3)
        .selectExpr(
            "CAST(id AS INT) AS id",
            "concat(lpad(hex(id), 8, '0'), '-0000-4000-8000-', lpad(hex(id * 7), 12, 'A')) AS u",
            "CAST(id AS INT) AS qty",
            "CAST(id AS TINYINT) AS small",
            "timestamp_micros(1700000000000001 + id) AS ts",
            "CAST(timestamp_micros(1700000000000001 + id) AS TIMESTAMP_NTZ) AS ntz",
        )
        .selectExpr(
            "*",
            "named_struct('v', CASE WHEN id % 2 = 0 THEN NULL ELSE u END, 'w', 'x') AS inner",
            "CASE WHEN id % 3 = 0 THEN NULL ELSE array(u, NULL) END AS us",
        )
    )
    assert table.append(df) == 50
    got = oracle.rows(name, columns=["id", "qty", "small", "ts", "ntz", "u", "inner", "us", "note"])
    expected = sorted_rows(
        (
            r.id,
            float(r.qty),
            r.small,
            r.ts,
            r.ntz,
            r.u.lower(),  # Java reads a uuid as its lowercase text
            (None if r.inner.v is None else r.inner.v.lower(), "x"),
            None if r.us is None else [r.us[0].lower(), None],
            None,
        )
        for r in df.collect()
    )
    assert got == expected
    # the instant and the wall-clock time are both kept: Java's values are the source's
    raw = oracle.sql(
        f"SELECT CAST(ts AS STRING), CAST(ntz AS STRING) FROM {oracle.qualified(name)} WHERE id = 0"
    )
    assert tuple(raw[0]) == ("2023-11-14 22:13:20.000001", "2023-11-14 22:13:20.000001")

    bad = spark.range(1).selectExpr("id", "'not-a-uuid' AS u")
    before = oracle.current_snapshot_id(name)
    with pytest.raises(InvalidArgumentError, match="'not-a-uuid' is not a uuid"):
        table.append(bad)
    assert oracle.current_snapshot_id(name) == before
    null_key = spark.range(3).selectExpr("CASE WHEN id = 2 THEN NULL ELSE id END AS id")
    with pytest.raises(InvalidArgumentError, match=r"column 'id' of .* is required \(NOT NULL\)"):
        table.append(null_key)
    extra = spark.range(3).selectExpr("id", "id AS other")
    with pytest.raises(InvalidArgumentError, match="column 'other' is not in the table"):
        table.append(extra)
    assert oracle.current_snapshot_id(name) == before
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


@pytest.mark.oracle
def test_table_properties_are_honoured(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    """Target file size, row-group size, compression and metrics modes, as Java writes by them."""
    spark = oracle.spark
    name = f"{ns}.t"
    oracle.create_table(
        name,
        "id BIGINT, s STRING",
        properties={
            "write.target-file-size-bytes": str(256 << 10),
            "write.parquet.row-group-limit": "20000",
            "write.parquet.compression-codec": "snappy",
            "write.metadata.metrics.default": "counts",
            "write.metadata.metrics.column.id": "full",
        },
    )
    table = icemor.load_table(name, catalog=catalog)
    df = spark.range(0, 200_000, numPartitions=1).selectExpr("id", "sha2(CAST(id AS STRING), 256) AS s")
    table.append(df)
    q = oracle.qualified(name)
    files = oracle.sql(f"SELECT file_path, file_size_in_bytes, lower_bounds, upper_bounds FROM {q}.files")
    assert len(files) > 3  # ~12 MiB of hashes rolled at 256 KiB (compressed)
    ids = oracle.field_ids(name)
    for path, size, lower, upper in files:
        assert size < 2 * (256 << 10)
        meta = pq.ParquetFile(local_path(path)).metadata
        assert {meta.row_group(i).column(0).compression for i in range(meta.num_row_groups)} == {"SNAPPY"}
        assert all(meta.row_group(i).num_rows <= 20000 for i in range(meta.num_row_groups))
        assert set(lower) == set(upper) == {ids["id"]}  # "counts" keeps no bounds for s
    assert oracle.sql(f"SELECT count(*), sum(id) FROM {q}")[0][:] == (200_000, 199_999 * 200_000 // 2)


@pytest.mark.oracle
@pytest.mark.parametrize(("mode", "files"), [("hash", 3), ("none", 12)])
def test_partitioned_rows_are_spread_by_the_distribution_mode(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, mode: str, files: int
) -> None:
    """As Iceberg Java: ``hash`` (the default of a partitioned table) brings each partition's rows
    to one task, so 4 input partitions holding all 3 values write 3 files, not 12."""
    spark = oracle.spark
    name = f"{ns}.t"
    props = {} if mode == "hash" else {"write.distribution-mode": mode}
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by="k", properties=props)
    df = spark.range(0, 600, numPartitions=4).selectExpr("id", "concat('k', id % 3) AS k")
    icemor.load_table(name, catalog=catalog).append(df)
    q = oracle.qualified(name)
    assert oracle.sql(f"SELECT count(*) FROM {q}.files")[0][0] == files
    assert oracle.rows(name) == sorted_rows((i, f"k{i % 3}") for i in range(600))


@pytest.mark.oracle
def test_a_failing_job_leaves_no_file_and_no_snapshot(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """One task of eight fails after writing row groups (NULL in a required column at its end);
    the others finished or are cancelled: nothing is committed, no file stays."""
    spark = oracle.spark
    name = f"{ns}.t"
    oracle.create_table(
        name,
        "id BIGINT NOT NULL, k STRING",
        partitioned_by="k",
        properties={"write.parquet.row-group-limit": "100", "write.distribution-mode": "none"},
    )
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES (-1, 'k0')")
    before = oracle.current_snapshot_id(name)
    table = icemor.load_table(name, catalog=catalog)
    df = spark.range(0, 80_000, numPartitions=8).selectExpr(
        "CASE WHEN id = 59999 THEN NULL ELSE id END AS id", "concat('k', id % 4) AS k"
    )
    with pytest.raises(InvalidArgumentError) as err:
        table.append(df)
    assert str(err.value) == (
        f"column 'id' of {name} is required (NOT NULL) but 1 row(s) of the Spark DataFrame hold NULL in it"
    )
    assert oracle.current_snapshot_id(name) == before
    assert oracle.rows(name) == [(-1, "k0")]
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


@pytest.mark.oracle
def test_a_refused_commit_removes_every_written_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Append: the catalog refuses the commit. Overwrite: Java inserts a row the condition matches
    while the executors write (a conflict, serializable isolation). Both: no snapshot of ours, no
    file left."""
    from pyiceberg.exceptions import CommitFailedException

    from icemor.engines.spark import table_writes
    from icemor.ops import append

    spark = oracle.spark
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING", partitioned_by="k")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('k', id % 2) FROM range(0, 100)")
    before = oracle.current_snapshot_id(name)
    table = icemor.load_table(name, catalog=catalog)
    df = spark.range(100, 400, numPartitions=3).selectExpr("id", "concat('k', id % 2) AS k")

    def refuse(*_: Any, **__: Any) -> None:
        msg = "the catalog says no"
        raise CommitFailedException(msg)

    with monkeypatch.context() as patch:
        patch.setattr(append, "commit_append", refuse)
        with pytest.raises(CommitFailedError, match="the catalog refused the append"):
            table.append(df)
    assert oracle.current_snapshot_id(name) == before
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced

    written = table_writes.write_dataframe

    def then_java_deletes(*args: Any, **kwargs: Any) -> Any:
        out = written(*args, **kwargs)
        oracle.sql(f"INSERT INTO {q} VALUES (7000, 'k0')")  # a row the overwrite would replace
        return out

    monkeypatch.setattr(table_writes, "write_dataframe", then_java_deletes)
    with pytest.raises(CommitConflictError):
        table.overwrite(df, where="id < 50 OR id >= 7000")
    assert oracle.rows(name) == sorted_rows([*((i, f"k{i % 2}") for i in range(100)), (7000, "k0")])
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


@pytest.mark.oracle
def test_a_failed_create_leaves_no_table_and_no_directory(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, icemor_home: Path
) -> None:
    spark = oracle.spark
    df = spark.range(0, 1000, numPartitions=2).selectExpr(
        "id", "CASE WHEN id = 999 THEN 'bad' ELSE '00000000-0000-0000-0000-000000000000' END AS u"
    )
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, UUIDType

    # the schema of a uuid column cannot come from Spark: create one, then write through it
    uuids = icemor.create_table(
        f"{ns}.u", Schema(NestedField(1, "id", LongType()), NestedField(2, "u", UUIDType())), catalog=catalog
    )
    with pytest.raises(InvalidArgumentError, match="'bad' is not a uuid"):
        uuids.append(df)
    assert oracle.rows(f"{ns}.u") == []
    on_disk, referenced = _files_left(oracle, f"{ns}.u")
    assert on_disk == referenced == set()

    failing = (
        spark.range(0, 1000, numPartitions=2)
        .selectExpr("id", "CAST(id AS STRING) AS s")
        .selectExpr("id", "assert_true(id < 990, 'boom') IS NULL AS ok")
    )
    with pytest.raises(Exception, match="boom"):
        icemor.create_table(f"{ns}.gone", failing, catalog=catalog)
    assert f"{ns}.gone" not in icemor.list_tables(ns, catalog=catalog)
    assert not (icemor_home / "warehouse" / ns / "gone").exists()


@pytest.mark.oracle
def test_dataframe_overwrite_and_function_form_refusals(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, collected: _Collected
) -> None:
    spark = oracle.spark
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING")
    df = spark.range(3).selectExpr("id", "'x' AS k")
    table = icemor.load_table(name, catalog=catalog)
    with collected.on():
        with pytest.raises(InvalidArgumentError, match="nope"):
            table.overwrite(df, where="nope > 1")
        with pytest.raises(InvalidArgumentError, match="unknown write mode 'upsert'"):
            icemor.spark.write(df, name, mode="upsert", catalog=catalog.name)
        with pytest.raises(InvalidArgumentError, match="applies to mode 'overwrite' only"):
            icemor.spark.write(df, name, where="id > 1", catalog=catalog.name)
    assert collected.results == []  # refused before any Spark job
    assert icemor.spark.write(df, name, catalog=catalog.name) == 3
    assert oracle.rows(name) == [(0, "x"), (1, "x"), (2, "x")]


_CRASHING_IO = '''
"""A FileIO whose first attempt of every Spark task dies (the worker process exits) when it
opens its second data file: the first one is complete on disk by then."""
import os
from collections import Counter

from pyiceberg.io.pyarrow import PyArrowFileIO

_OPENED = Counter()


class CrashingIO(PyArrowFileIO):
    def new_output(self, location):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and "_icemor-staging" not in location:
            _OPENED[context.taskAttemptId()] += 1
            if _OPENED[context.taskAttemptId()] == 2:
                os._exit(17)
        return super().new_output(location)
'''

_RETRY_SCRIPT = """
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
import icemor
from icemor.engines.spark import session

home, name = sys.argv[1], sys.argv[2]
catalog = SqlCatalog("icemor", uri=f"sqlite:///{home}/catalog.db", warehouse=f"file://{home}/warehouse",
                     **{"py-io-impl": "crashing_io.CrashingIO"})
# Spark's own log: a quiet session prints no failed task attempt (their errors reach the caller)
spark = session(master="local[2,3]", conf={"spark.ui.enabled": "false"}, quiet=False)
table = icemor.load_table(name, catalog=catalog)
df = spark.range(0, 2000, numPartitions=4).selectExpr("id", "concat('k', id % 4) AS k")
print(json.dumps({"rows": table.append(df)}))
"""


@pytest.mark.oracle
@pytest.mark.slow
def test_a_retried_task_leaves_no_duplicate_and_no_extra_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, icemor_home: Path, tmp_path: Path
) -> None:
    name = f"{ns}.t"
    # each task holds rows of all four partitions: its first attempt dies at its second file
    oracle.create_table(
        name, "id BIGINT, k STRING", partitioned_by="k", properties={"write.distribution-mode": "none"}
    )
    (tmp_path / "crashing_io.py").write_text(textwrap.dedent(_CRASHING_IO))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    env.pop("SPARK_HOME", None)
    done = subprocess.run(
        [sys.executable, "-c", _RETRY_SCRIPT, str(icemor_home), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Python worker exited unexpectedly" in done.stderr  # the first attempts did die
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rows": 2000}
    assert oracle.rows(name) == sorted_rows((i, f"k{i % 4}") for i in range(2000))
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced
    assert len(referenced) == 16  # four tasks, four partitions each: the lost attempts' are gone


def test_new_table_schema_is_optional_at_every_depth() -> None:
    class _Frame:
        schema = st.StructType(
            [
                st.StructField("id", st.LongType(), False),
                st.StructField(
                    "s",
                    st.StructType([st.StructField("a", st.ArrayType(st.IntegerType(), False), False)]),
                    False,
                ),
                st.StructField("m", st.MapType(st.StringType(), st.LongType(), False), False),
            ]
        )

    schema = new_table_schema_of(_Frame())  # type: ignore[arg-type]
    assert schema == pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("s", pa.struct([pa.field("a", pa.list_(pa.field("element", pa.int32())))])),
            pa.field(
                "m", pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64()))
            ),
        ]
    )
