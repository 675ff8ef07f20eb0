"""DataFrame type guards: "is this a Spark / pandas / polars / Arrow frame?", asked in one place.

Each guard looks the library up in ``sys.modules`` and never imports it: an object can only be
an instance of a library's class if that library is already imported, so a guard costs nothing
where the library is absent and ``import icemor`` stays free of PySpark, pandas and polars.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame as SparkDataFrame
    from typing_extensions import TypeIs

__all__ = [
    "is_into_arrow",
    "is_pandas_dataframe",
    "is_polars_dataframe",
    "is_polars_lazyframe",
    "is_pyarrow_table",
    "is_spark_connect_dataframe",
    "is_spark_connect_session",
    "is_spark_dataframe",
]


def _class(module: str, name: str) -> type | None:
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def is_spark_dataframe(obj: Any) -> TypeIs[SparkDataFrame]:
    """A PySpark DataFrame, classic or Spark Connect, on PySpark 3.5 and 4.x."""
    # 3.5's Connect DataFrame is not a subclass of pyspark.sql.DataFrame; 4.x's is
    return any(
        cls is not None and isinstance(obj, cls)
        for cls in (
            _class("pyspark.sql.dataframe", "DataFrame"),
            _class("pyspark.sql.connect.dataframe", "DataFrame"),
        )
    )


def is_spark_connect_dataframe(obj: Any) -> bool:
    """A Spark Connect DataFrame (its session is a remote one)."""
    cls = _class("pyspark.sql.connect.dataframe", "DataFrame")
    return cls is not None and isinstance(obj, cls)


def is_spark_connect_session(obj: Any) -> bool:
    """A Spark Connect client session (``SparkSession.builder.remote(...)``).

    Its class, ``pyspark.sql.connect.session.SparkSession``, is not a subclass of the classic
    one, and importing its module needs the Connect client's libraries (grpc), which a classic
    installation may lack: like every guard here, it is only looked up.
    """
    cls = _class("pyspark.sql.connect.session", "SparkSession")
    return cls is not None and isinstance(obj, cls)


def is_pandas_dataframe(obj: Any) -> bool:
    """A pandas DataFrame. Typed ``bool``: icemor type-checks without pandas stubs."""
    cls = _class("pandas", "DataFrame")
    return cls is not None and isinstance(obj, cls)


def is_polars_dataframe(obj: Any) -> bool:
    """A polars DataFrame (eager). Typed ``bool``: polars ships no stubs icemor type-checks against."""
    cls = _class("polars", "DataFrame")
    return cls is not None and isinstance(obj, cls)


def is_polars_lazyframe(obj: Any) -> bool:
    """A polars LazyFrame."""
    cls = _class("polars", "LazyFrame")
    return cls is not None and isinstance(obj, cls)


def is_pyarrow_table(obj: Any) -> TypeIs[pa.Table]:
    """A pyarrow Table."""
    cls = _class("pyarrow", "Table")
    return cls is not None and isinstance(obj, cls)


def is_into_arrow(obj: Any) -> bool:
    """A frame icemor turns into Arrow on the driver: pyarrow, pandas or polars (eager or lazy)."""
    return (
        is_pyarrow_table(obj)
        or is_pandas_dataframe(obj)
        or is_polars_dataframe(obj)
        or is_polars_lazyframe(obj)
    )
