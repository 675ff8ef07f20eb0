"""Iceberg types as Spark SQL types (what Iceberg's own Spark integration maps them to)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)
from pyspark.sql import types as st

from icemor.exceptions import UnsupportedFeatureError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema

__all__ = ["spark_schema", "spark_type"]

_PRIMITIVES: dict[type[IcebergType], st.DataType] = {
    BooleanType: st.BooleanType(),
    IntegerType: st.IntegerType(),
    LongType: st.LongType(),
    FloatType: st.FloatType(),
    DoubleType: st.DoubleType(),
    DateType: st.DateType(),
    StringType: st.StringType(),
    UUIDType: st.StringType(),
    BinaryType: st.BinaryType(),
    FixedType: st.BinaryType(),
    TimestamptzType: st.TimestampType(),
    TimestampType: st.TimestampNTZType(),
}


def spark_type(t: IcebergType) -> st.DataType:
    """Map one Iceberg type; time, nanosecond timestamps, variant and geo types are refused."""
    if isinstance(t, DecimalType):
        return st.DecimalType(t.precision, t.scale)
    if isinstance(t, StructType):
        return st.StructType(
            [st.StructField(f.name, spark_type(f.field_type), not f.required) for f in t.fields]
        )
    if isinstance(t, ListType):
        return st.ArrayType(spark_type(t.element_type), not t.element_required)
    if isinstance(t, MapType):
        return st.MapType(spark_type(t.key_type), spark_type(t.value_type), not t.value_required)
    for cls, spark in _PRIMITIVES.items():
        if type(t) is cls:
            return spark
    msg = f"Iceberg type {t} has no Spark equivalent in the Spark engine"
    raise UnsupportedFeatureError(msg)


def spark_schema(schema: Schema, arrow_schema: pa.Schema) -> st.StructType:
    """Spark schema of a scan: the projected Iceberg columns, then metadata columns by name."""
    fields = [st.StructField(f.name, spark_type(f.field_type), not f.required) for f in schema.fields]
    names = {f.name for f in schema.fields}
    meta = {"_file": st.StringType(), "_pos": st.LongType(), "_deleted": st.BooleanType()}
    for af in arrow_schema:
        if af.name not in names and af.name in meta:
            fields.append(st.StructField(af.name, meta[af.name], False))
        elif af.name not in names and af.name in ("_row_id", "_last_updated_sequence_number"):
            fields.append(st.StructField(af.name, st.LongType(), True))  # v3 row lineage
    return st.StructType(fields)
