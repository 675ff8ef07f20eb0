"""What each engine's SQL calls the Iceberg primitive types: DuckDB's and Spark's names side by side.

One table, so that the types SQL expressions may hold on each engine (UPDATE ``SET`` values,
MERGE values, casts) are read in one place: a type without a Spark name is refused on Spark.
"""

from __future__ import annotations

from typing import Literal

from pyiceberg import types as T

from icemor.exceptions import InvalidArgumentError

__all__ = ["sql_type_name"]

# Iceberg type -> (DuckDB's name, Spark's name or None: not on Spark)
_NAMES: dict[type[T.PrimitiveType], tuple[str, str | None]] = {
    T.BooleanType: ("BOOLEAN", "boolean"),
    T.IntegerType: ("INTEGER", "int"),
    T.LongType: ("BIGINT", "bigint"),
    T.FloatType: ("FLOAT", "float"),
    T.DoubleType: ("DOUBLE", "double"),
    T.DateType: ("DATE", "date"),
    T.TimeType: ("TIME", None),
    T.TimestampType: ("TIMESTAMP", "timestamp_ntz"),
    T.TimestamptzType: ("TIMESTAMPTZ", "timestamp"),  # Spark's TIMESTAMP is an instant, as timestamptz
    T.StringType: ("VARCHAR", "string"),
    T.BinaryType: ("BLOB", None),
    T.FixedType: ("BLOB", None),
    T.UUIDType: ("UUID", None),
}


def sql_type_name(t: T.IcebergType, engine: Literal["duckdb", "spark"]) -> str:
    """The name of Iceberg primitive type ``t`` in ``engine``'s SQL (DuckDB's: as Arrow stores it).

    Raises:
        InvalidArgumentError: A type the engine's SQL expressions do not take (nested types too).
    """
    spark = engine == "spark"
    if isinstance(t, T.DecimalType):
        return f"decimal({t.precision},{t.scale})" if spark else f"DECIMAL({t.precision}, {t.scale})"
    for cls, (duckdb_name, spark_name) in _NAMES.items():
        name = spark_name if spark else duckdb_name
        if isinstance(t, cls) and name is not None:
            return name
    msg = f"SQL expressions on columns of type {t} are not supported{' on Spark' if spark else ''}"
    raise InvalidArgumentError(msg)
