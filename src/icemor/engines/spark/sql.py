"""Run an operation's Spark SQL over merge-on-read scans and Arrow tables: a DataFrame, or Arrow.

UPDATE and MERGE on the Spark engine evaluate their conditions and values as Spark SQL: the
target scan becomes a DataFrame (read on the executors, deletes applied), small inputs (a MERGE
source already on the driver) become DataFrames, each under a temporary view name, and the
statement's DataFrame is handed on (:func:`sql_dataframe`: UPDATE and MERGE write from it on
the executors; nothing is collected). Views are dropped afterwards.

The statement holds user text (conditions, values), so it is never a template: the caller
builds it from the view names, which are chosen first. (Replacing ``{target}`` in the finished
statement once stored a view name where a user's ``'{target}'`` literal was.)
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa
from pyspark.errors import AnalysisException, ParseException

from icemor.engines.spark import scan_to_dataframe
from icemor.engines.spark._compat import spark_schema_of
from icemor.exceptions import InvalidArgumentError
from icemor.expr.sql import quote_identifier

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from pyspark.sql import DataFrame, SparkSession

    from icemor.planning.scan_job import ScanJob

__all__ = ["arrow_to_dataframe", "sql_dataframe"]


@contextmanager
def sql_dataframe(
    spark: SparkSession,
    build: Callable[[Mapping[str, str]], str],
    *,
    scans: Mapping[str, ScanJob] | None = None,
    tables: Mapping[str, pa.Table] | None = None,
    frames: Mapping[str, DataFrame] | None = None,
) -> Iterator[DataFrame]:
    """The statement's DataFrame, not collected; its input views exist until the block ends.

    Args:
        spark: The session.
        build: Given each input's name -> its view, quoted as an SQL identifier, the statement
            (``lambda v: f"SELECT … FROM {v['target']}"``).
        scans: Merge-on-read scans, read on the executors.
        tables: Driver-side Arrow tables.
        frames: DataFrames.

    Raises:
        InvalidArgumentError: Spark's analyzer or parser refuses the statement (its first line).
    """
    suffix = uuid.uuid4().hex[:12]
    inputs = [*(scans or {}), *(tables or {}), *(frames or {})]
    if len(set(inputs)) != len(inputs):
        msg = f"sql_dataframe: an input name is given twice ({', '.join(inputs)})"
        raise ValueError(msg)
    views = {name: f"__icemor_{k}_{suffix}" for k, name in enumerate(inputs)}
    made: list[str] = []
    try:
        for name, job in (scans or {}).items():
            scan_to_dataframe(job, spark).createOrReplaceTempView(views[name])
            made.append(views[name])
        for name, table in (tables or {}).items():
            _from_arrow(spark, table).createOrReplaceTempView(views[name])
            made.append(views[name])
        for name, frame in (frames or {}).items():
            frame.createOrReplaceTempView(views[name])
            made.append(views[name])
        sql = build({name: quote_identifier(view) for name, view in views.items()})
        try:
            df = spark.sql(sql)
        except (AnalysisException, ParseException) as e:
            text = str(e).strip().splitlines()
            raise InvalidArgumentError(text[0] if text else type(e).__name__) from e
        yield df
    finally:
        for view in made:
            spark.catalog.dropTempView(view)


def arrow_to_dataframe(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A driver-side Arrow table as a DataFrame (see :func:`_from_arrow`)."""
    return _from_arrow(spark, table)


def _from_arrow(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A driver-side Arrow table as a DataFrame (Arrow transfer; nullable ints stay ints).

    Floats go through pandas' nullable dtypes too: in a plain float64 column pandas cannot
    tell NaN from NULL, and PySpark sends every NaN as NULL.
    """
    schema = spark_schema_of(table.schema)
    frame = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(),
                                          pa.bool_(): pd.BooleanDtype(), pa.float64(): pd.Float64Dtype(),
                                          pa.float32(): pd.Float32Dtype()}.get)  # fmt: skip
    # the nullable pandas dtypes need the Arrow path; a session may have it off
    key = "spark.sql.execution.arrow.pyspark.enabled"
    saved = spark.conf.get(key, "false") or "false"
    spark.conf.set(key, "true")
    try:
        return spark.createDataFrame(frame, schema=schema)
    finally:
        spark.conf.set(key, saved)
