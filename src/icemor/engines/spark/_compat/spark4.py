"""The PySpark 4.x internals icemor borrows, each wrapped once, with why (see the package).

What changed from 3.5: ``DataFrame.toArrow`` is public (no ``_collect_as_arrow``, and it works
on Spark Connect too); ``to_arrow_schema`` takes the session time zone; ``from_arrow_schema``
maps zone-less timestamps to ``TIMESTAMP_NTZ`` unless told otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SPARK_RANGE = "4.x"

# (module, name) of every internal used below; the compat test imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyspark.sql.pandas.types", "to_arrow_schema"),
    ("pyspark.sql.pandas.types", "from_arrow_schema"),
)

WORKER_MODULE = "pyspark.worker_util"
"""The module whose per-task setup calls ``importlib.invalidate_caches()`` (see
:func:`icemor.engines.spark._compat.spare_zip_rescans`)."""

HIDE_TRACEBACK_ENV: str | None = "SPARK_HIDE_TRACEBACK"
"""What a Python worker reads (``pyspark.util``) when it reports an exception, to send its last line
only (the JVM sets it from ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``)."""
HIDE_TRACEBACK_MODULE = "pyspark.util"

ROW_INDEX_COLUMN = "_tmp_metadata_row_index"
"""The column Spark's Parquet reader fills with each row's position when the read schema names it
(``ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME``, unchanged in Spark 4). Why: read
directly it is a plain long column; through ``_metadata`` every row would also box it into a
struct."""


def jvm_and_gateway(spark: SparkSession) -> tuple[Any, Any] | None:
    """None on Spark 4: the native strategy's JVM-built bitmap literals are 3.5-only.

    Why: they wrap a catalyst ``Literal`` with ``new org.apache.spark.sql.Column(Expression)``,
    a constructor Spark 4 removed (a ``Column`` holds a ``ColumnNode`` now). Without the handles
    the native strategy reads position deletes and DVs through its anti-join instead (exact;
    slower on wide deletes). ``tests_spark4/test_compat.py`` fails when the 3.5 constructor
    comes back or when a 4.x way is wired in.
    """
    return None


def collect_arrow_batches(df: DataFrame) -> list[pa.RecordBatch]:
    """The rows of ``df`` as Arrow record batches on the driver (public ``toArrow``)."""
    # PySpark 3.5's stubs (what mypy sees in the main venv) have no toArrow
    table: pa.Table = df.toArrow()  # type: ignore[operator,unused-ignore]
    return table.to_batches()  # type: ignore[no-any-return,unused-ignore]


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema, as ``mapInArrow`` expects it back (timestamps UTC).

    Why: PySpark's own conversion lives in ``pyspark.sql.pandas.types``, not public API.
    """
    return to_arrow_schema(schema, timezone="UTC")  # type: ignore[call-arg,unused-ignore]


def spark_schema_of(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema, as PySpark 3.5's Arrow transfer converts it.

    Why: the same mapping as ``createDataFrame`` from pandas with Arrow, which lives in
    ``pyspark.sql.pandas.types``, not public API; 3.5's mapping (zone-less timestamps as
    ``TIMESTAMP``) keeps both versions alike.
    """
    return from_arrow_schema(schema, prefer_timestamp_ntz=False)
