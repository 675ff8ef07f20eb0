"""Conditions judged by Spark SQL over Iceberg Java's tables: NOT IN and NULL, NaN, uuid, zone-less
timestamps; on both engines, for scans, counts, DELETE and UPDATE (issue: one text, three meanings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from pyiceberg.expressions import NotIn, NotNaN
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, UUIDType

import icemor

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

U1 = "102cb62f-e7a3-4d5c-9a1b-0c2d3e4f5a6b"
U2 = "f0000000-0000-4000-8000-000000000001"


def java_ids(oracle: IcebergJava, name: str, where: str | None = None) -> list[Any]:
    """The rows where ``where`` is TRUE in Spark SQL, over Iceberg Java's read of the table.

    The condition is a projected column, not a WHERE clause: Iceberg's file pruning would
    apply it too, and it drops NaN rows Spark SQL selects (see the NaN test below).
    """
    if where is None:
        rows = oracle.sql(f"SELECT id FROM {oracle.qualified(name)}")
        return sorted((r[0] for r in rows), key=lambda v: (v is not None, v))
    rows = oracle.sql(f"SELECT id, ({where}) IS TRUE FROM {oracle.qualified(name)}")
    return sorted((r[0] for r in rows if r[1]), key=lambda v: (v is not None, v))


def icemor_ids(table: icemor.Table, where: Any = None, *, spark: SparkSession | None = None) -> list[Any]:
    if spark is None:
        values = table.scan(row_filter=where, selected_fields=("id",)).to_arrow().column("id").to_pylist()
    else:
        values = [r[0] for r in table.to_spark(spark, row_filter=where).select("id").collect()]
    return sorted(values, key=lambda v: (v is not None, v))


def _departments(oracle: IcebergJava, name: str, version: int) -> None:
    oracle.create_table(name, "id INT, dep STRING", format_version=version)
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES (1, 'hr'), (2, 'hardware'), (NULL, 'hr')")


@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("version", [2, 3])
def test_not_in_keeps_null_rows_as_spark_does(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, engine: str, version: int
) -> None:
    """DELETE ... WHERE id NOT IN (1, 10) keeps (NULL, 'hr'): NULL NOT IN (…) is unknown."""
    ours, twin = f"{ns}.ours", f"{ns}.twin"
    _departments(oracle, ours, version)
    _departments(oracle, twin, version)
    on = spark if engine == "spark" else None
    table = icemor.load_table(ours, catalog=catalog)
    text = "id NOT IN (1, 10)"
    assert icemor_ids(table, text, spark=on) == java_ids(oracle, twin, text) == [2]
    assert table.scan(row_filter=text).count() == 1
    m = table.delete(text, spark=on)
    oracle.sql(f"DELETE FROM {oracle.qualified(twin)} WHERE {text}")
    assert m.deleted_rows == 1
    assert java_ids(oracle, ours) == java_ids(oracle, twin) == [None, 1]
    # the same text means the same in UPDATE
    table.update({"dep": "'x'"}, where="id NOT IN (2, 10)", spark=on)
    oracle.sql(f"UPDATE {oracle.qualified(twin)} SET dep = 'x' WHERE id NOT IN (2, 10)")
    rows = "SELECT id, dep FROM {} ORDER BY id NULLS FIRST"
    assert oracle.sql(rows.format(oracle.qualified(ours))) == oracle.sql(rows.format(oracle.qualified(twin)))
    # and with a NULL in the list it is never TRUE
    assert icemor_ids(table, "id NOT IN (2, NULL)", spark=on) == java_ids(oracle, twin, "id NOT IN (2, NULL)")


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_expressions_keep_iceberg_meaning(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, engine: str
) -> None:
    """pyiceberg's NotNaN and NotIn keep NULL rows (Iceberg's evaluator: NULL is not NaN, not in)."""
    name = f"{ns}.t"
    oracle.create_table(name, "id INT, x DOUBLE")
    oracle.sql(
        f"INSERT INTO {oracle.qualified(name)} VALUES (1, 1.0), (2, CAST('NaN' AS DOUBLE)), (3, NULL), (4, -0.0)"
    )
    on = spark if engine == "spark" else None
    table = icemor.load_table(name, catalog=catalog)
    # Iceberg's row evaluator: two-valued, NotNaN(NULL) and NotIn(NULL) are true
    assert icemor_ids(table, NotNaN("x"), spark=on) == [1, 3, 4]
    assert icemor_ids(table, NotIn("x", {1.0}), spark=on) == [2, 3, 4]
    # the same as text is Spark SQL's: NOT isnan(NULL) is TRUE, NULL NOT IN (…) unknown
    assert icemor_ids(table, "NOT isnan(x)", spark=on) == java_ids(oracle, name, "NOT isnan(x)") == [1, 3, 4]
    assert icemor_ids(table, "x NOT IN (1.0)", spark=on) == java_ids(oracle, name, "x NOT IN (1.0)")
    # NaN is greater than every double in Spark SQL
    for text in ("x > 0.5", "NOT (x > 0.5)", "x >= 1e300", "x <> 1.0", "x = 0", "x <= 1.0"):
        assert icemor_ids(table, text, spark=on) == java_ids(oracle, name, text), text
    # Iceberg Java prunes the file: its upper bound (1.0) leaves NaN out, and Java's metrics
    # evaluator does not count NaN as above 1e300, which Spark SQL (and the spec's NaN ordering)
    # does. Java's filtered read depends on the file layout there; icemor's does not.
    assert [r[0] for r in oracle.sql(f"SELECT id FROM {oracle.qualified(name)} WHERE x >= 1e300")] == []
    assert icemor_ids(table, "x >= 1e300", spark=on) == [2]


def _uuid_table(oracle: IcebergJava, catalog: SqlCatalog, name: str) -> None:
    """Created with a uuid column (Spark SQL has no uuid type), written by Iceberg Java."""
    catalog.create_table(
        name,
        Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "u", UUIDType(), required=False),
            NestedField(3, "s", StringType(), required=False),
        ),
        properties={"format-version": "2", "write.delete.mode": "merge-on-read"},
    )
    oracle.sql(
        f"INSERT INTO {oracle.qualified(name)} VALUES (1, '{U1}', 'a'), (2, '{U2}', 'b'), (3, NULL, 'c'), "
        f"(4, '{U1}', 'd')"
    )


@pytest.mark.parametrize("strategy", ["local", "auto", "python"])
def test_uuid_columns_read_and_filter_as_java_does(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, strategy: str
) -> None:
    name = f"{ns}.t"
    _uuid_table(oracle, catalog, name)
    table = icemor.load_table(name, catalog=catalog)
    expected = sorted((r[0], r[1]) for r in oracle.sql(f"SELECT id, u FROM {oracle.qualified(name)}"))
    texts = [f"u = '{U1}'", f"u != '{U1}'", f"u IN ('{U2}', NULL)", f"u < '{U2}'", f"u = '{U1.upper()}'"]
    if strategy == "local":
        got = table.scan(selected_fields=("id", "u")).to_arrow()
        assert sorted(zip(got.column("id").to_pylist(), [v and str(v) for v in got.column("u").to_pylist()],
                          strict=True)) == expected  # fmt: skip
        for text in texts:
            assert icemor_ids(table, text) == java_ids(oracle, name, text), text
        return
    df = table.to_spark(spark, strategy=strategy)
    assert sorted((r[0], r[1]) for r in df.select("id", "u").collect()) == expected
    for text in texts:
        got_ids = sorted(r[0] for r in table.to_spark(spark, row_filter=text, strategy=strategy).collect())
        assert got_ids == java_ids(oracle, name, text), text


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_zone_less_timestamp_literal_reads_in_utc(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, engine: str
) -> None:
    """ts >= '2023-03-05 00:00:00' on a timestamptz column is accepted, in UTC, as Spark SQL (UTC session)."""
    name = f"{ns}.t"
    oracle.create_table(name, "id INT, ts TIMESTAMP")
    oracle.sql(
        f"INSERT INTO {oracle.qualified(name)} VALUES (1, TIMESTAMP '2023-03-04 23:59:59.999999'), "
        "(2, TIMESTAMP '2023-03-05 00:00:00'), (3, TIMESTAMP '2023-03-05 00:00:00.000001'), (4, NULL)"
    )
    on = spark if engine == "spark" else None
    table = icemor.load_table(name, catalog=catalog)
    for text in ("ts >= '2023-03-05 00:00:00'", "ts < '2023-03-05'", "ts = '2023-03-05 00:00:00.000001'"):
        assert icemor_ids(table, text, spark=on) == java_ids(oracle, name, text), text
    m = table.delete("ts >= '2023-03-05 00:00:00'", spark=on)
    assert m.deleted_rows == 2
    assert java_ids(oracle, name) == [1, 4]


def test_uuid_identity_partitions_write_prune_and_read_as_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """A uuid partition column: icemor's append grouped it (Arrow has no kernel for the
    extension type) and its pruning compared manifests' UUIDs with a literal's bytes: no rows."""
    import uuid

    import pyarrow as pa

    name, twin = f"{ns}.ours", f"{ns}.twin"
    u1, u2 = uuid.UUID(U1), uuid.UUID(U2)
    storage = pa.array([u1.bytes, None, u2.bytes, u1.bytes], pa.binary(16))
    data = pa.table(
        {"id": pa.array([1, 2, 3, 4], pa.int64()), "u": pa.ExtensionArray.from_storage(pa.uuid(), storage)}
    )
    table = icemor.create_table(name, data, partition_by=["u"], catalog=catalog)
    _uuid_table(oracle, catalog, twin)
    oracle.sql(f"ALTER TABLE {oracle.qualified(twin)} ADD PARTITION FIELD u")
    oracle.sql(f"INSERT INTO {oracle.qualified(twin)} VALUES (5, '{U1}', 'e'), (6, NULL, 'f')")
    java_twin = icemor.load_table(twin, catalog=catalog)
    for text in (f"u = '{U1}'", f"u <> '{U1}'", "u IS NULL", f"u IN ('{U2}')"):
        assert icemor_ids(table, text) == java_ids(oracle, name, text), text
        assert icemor_ids(java_twin, text) == java_ids(oracle, twin, text), text
    assert table.delete(f"u = '{U1}'").deleted_rows == 2
    assert java_ids(oracle, name) == [2, 3]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_null_struct_makes_its_fields_null_whatever_the_metrics_say(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, spark: SparkSession, engine: str
) -> None:
    """Iceberg Java writes a double field under a NULL struct with value count 0 and null count 0;
    pruning by those metrics skips the file for ``st.c IS NULL``, which Spark SQL says every such row
    satisfies. Java's own filtered read misses them; icemor must not."""
    name = f"{ns}.t"
    oracle.create_table(name, "id INT, st STRUCT<a: INT, c: DOUBLE>")
    q = oracle.qualified(name)
    oracle.sql(
        f"INSERT INTO {q} VALUES (1, named_struct('a', 1, 'c', 1.0)), (2, named_struct('a', 2, 'c', NULL))"
    )
    oracle.sql(f"INSERT INTO {q} VALUES (3, NULL), (4, NULL)")
    on = spark if engine == "spark" else None
    table = icemor.load_table(name, catalog=catalog)
    for text in ("st.c IS NULL", "st.c IS NOT NULL", "NOT (st.c > 0.5)", "st.a IS NULL"):
        assert icemor_ids(table, text, spark=on) == java_ids(oracle, name, text), text
    assert java_ids(oracle, name, "st.c IS NULL") == [2, 3, 4]
    assert sorted(r[0] for r in oracle.sql(f"SELECT id FROM {q} WHERE st.c IS NULL")) == [2]  # Java's miss
    assert table.delete("st.c IS NULL", spark=on).deleted_rows == 3
