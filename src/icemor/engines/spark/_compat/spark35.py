"""The PySpark 3.5 internals icemor borrows, each wrapped once, with why (see the package)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SPARK_RANGE = "3.5"

# (module, name) of every internal used below; the compat test imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyspark.context", "SparkContext._jvm"),
    ("pyspark.context", "SparkContext._gateway"),
    ("pyspark.sql.dataframe", "DataFrame._collect_as_arrow"),
    ("pyspark.sql.pandas.types", "to_arrow_schema"),
    ("pyspark.sql.pandas.types", "from_arrow_schema"),
)

WORKER_MODULE = "pyspark.worker"
"""The module whose per-task setup calls ``importlib.invalidate_caches()`` (see
:func:`icemor.engines.spark._compat.spare_zip_rescans`)."""

HIDE_TRACEBACK_ENV: str | None = None
"""PySpark 3.5's workers always send the whole traceback (4.x reads ``SPARK_HIDE_TRACEBACK``)."""
HIDE_TRACEBACK_MODULE = "pyspark.util"

ROW_INDEX_COLUMN = "_tmp_metadata_row_index"
"""The column Spark's Parquet reader fills with each row's position when the read schema names it
(``ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME``; ``_metadata.row_index`` is built from
it). Why: read directly it is a plain long column; through ``_metadata`` every row would also
box it into a struct (measured: ~10% of a narrow read)."""


def jvm_and_gateway(spark: SparkSession) -> tuple[Any, Any] | None:
    """The py4j JVM view and gateway of ``spark``'s context; None when it has none.

    Why: building an ``UnsafeArrayData`` literal from one transfer of bytes needs py4j's
    ``new_array``; PySpark exposes neither handle publicly.
    """
    context = spark.sparkContext
    jvm, gateway = context._jvm, context._gateway
    if jvm is None or gateway is None:
        return None
    return jvm, gateway


def collect_arrow_batches(df: DataFrame) -> list[pa.RecordBatch]:
    """The rows of ``df`` as Arrow record batches on the driver.

    Why: ``toArrow`` is public from PySpark 4 only; 3.5's ``toPandas`` uses this private
    collector, which keeps Arrow types (no pandas round trip).
    """
    return list(df._collect_as_arrow())


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema, as ``mapInArrow`` expects it back.

    Why: PySpark's own conversion lives in ``pyspark.sql.pandas.types``, not public API.
    """
    return to_arrow_schema(schema)


def spark_schema_of(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema, as PySpark's Arrow transfer converts it.

    Why: the same mapping as ``createDataFrame`` from pandas with Arrow, which lives in
    ``pyspark.sql.pandas.types``, not public API.
    """
    return from_arrow_schema(schema)
