"""The DataFrame type guards: right for each library's frames, and they never import a library."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest

from icemor import dependencies as deps
from spark_connect_fake import as_connect_session_class


def test_guards_tell_the_frames_apart() -> None:
    table = pa.table({"a": [1]})
    frame = pd.DataFrame({"a": [1]})
    assert deps.is_pyarrow_table(table) and not deps.is_pyarrow_table(frame)
    assert deps.is_pandas_dataframe(frame) and not deps.is_pandas_dataframe(table)
    assert not deps.is_spark_dataframe(frame) and not deps.is_spark_dataframe(table)
    assert deps.is_into_arrow(table) and deps.is_into_arrow(frame) and not deps.is_into_arrow([1])
    # a look-alike named like a Spark DataFrame is not one (the old module-name sniffing said yes)
    fake = type("DataFrame", (), {"__module__": "pyspark.sql.dataframe"})()
    assert not deps.is_spark_dataframe(fake)


def test_polars_frames() -> None:
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"a": [1]})
    assert deps.is_polars_dataframe(df) and not deps.is_polars_lazyframe(df)
    assert deps.is_polars_lazyframe(df.lazy()) and deps.is_into_arrow(df.lazy())


def test_spark_dataframe(spark: object) -> None:
    df = spark.range(1)  # type: ignore[attr-defined]
    assert deps.is_spark_dataframe(df) and not deps.is_spark_connect_dataframe(df)
    assert not deps.is_pandas_dataframe(df) and not deps.is_into_arrow(df)


def test_guards_import_nothing() -> None:
    code = (
        "import sys; from icemor import dependencies as d; d.is_spark_dataframe(1); d.is_pandas_dataframe(1);"
        "d.is_polars_dataframe(1); d.is_into_arrow(1);"
        "print(sorted(m for m in ('pyspark', 'pandas', 'polars') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_spark_connect_session(monkeypatch: pytest.MonkeyPatch) -> None:
    class SparkSession:
        pass

    # a class merely named as the Connect client's, in its module, is not it
    look_alike = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    assert not deps.is_spark_connect_session(look_alike)
    as_connect_session_class(monkeypatch, SparkSession)
    assert deps.is_spark_connect_session(SparkSession())
    assert not deps.is_spark_connect_session(look_alike)
