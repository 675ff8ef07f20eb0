"""How each engine's SQL names the Iceberg primitive types (icemor.expr.type_names): what UPDATE and
MERGE cast their values to (``Dialect.type_name``), and the types each engine refuses, by name."""

from __future__ import annotations

import pytest
from pyiceberg import types as T

from icemor.exceptions import InvalidArgumentError
from icemor.expr.duck import duck_type
from icemor.ops.rowlevel import DUCKDB, SPARK

NAMES = [
    (T.BooleanType(), "BOOLEAN", "boolean"),
    (T.IntegerType(), "INTEGER", "int"),
    (T.LongType(), "BIGINT", "bigint"),
    (T.FloatType(), "FLOAT", "float"),
    (T.DoubleType(), "DOUBLE", "double"),
    (T.DecimalType(12, 3), "DECIMAL(12, 3)", "decimal(12,3)"),
    (T.DateType(), "DATE", "date"),
    (T.TimeType(), "TIME", None),
    (T.TimestampType(), "TIMESTAMP", "timestamp_ntz"),
    (T.TimestamptzType(), "TIMESTAMPTZ", "timestamp"),
    (T.StringType(), "VARCHAR", "string"),
    (T.BinaryType(), "BLOB", None),
    (T.FixedType(16), "BLOB", None),
    (T.UUIDType(), "UUID", None),
]


@pytest.mark.parametrize(("t", "duckdb", "spark"), NAMES, ids=[str(n[0]) for n in NAMES])
def test_each_engine_names_each_primitive_type(t: T.PrimitiveType, duckdb: str, spark: str | None) -> None:
    assert duck_type(t) == DUCKDB.type_name(t) == duckdb
    if spark is not None:
        assert SPARK.type_name(t) == spark
        return
    with pytest.raises(InvalidArgumentError) as e:
        SPARK.type_name(t)
    assert str(e.value) == f"SQL expressions on columns of type {t} are not supported on Spark"


def test_a_nested_type_has_no_sql_name() -> None:
    nested = T.ListType(1, T.LongType())
    with pytest.raises(InvalidArgumentError) as e:
        duck_type(nested)
    assert str(e.value) == f"SQL expressions on columns of type {nested} are not supported"
    with pytest.raises(InvalidArgumentError) as e:
        SPARK.type_name(nested)  # type: ignore[arg-type]
    assert str(e.value) == f"SQL expressions on columns of type {nested} are not supported on Spark"
