"""The documented SQL subset means the same on both engines: DuckDB (local) and Spark SQL.

Random expressions from the subset (``exprgen``: comparisons, arithmetic, boolean logic,
IN, BETWEEN, LIKE/ILIKE, IS [NOT] NULL, CASE, CAST, coalesce, string and date functions, NULL
everywhere) are evaluated over the same rows by DuckDB (``icemor.expr.duck.session()``, as
UPDATE and MERGE run locally) and by Spark 3.5 (``sql_dataframe``, as they run on Spark), and the
results compared row by row. So are the values UPDATE and MERGE store (``Dialect.cast``).
Where the engines differ outside the subset is written down in docs/sql.md; the boundary
cases here pin what icemor does about the differences it removes.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from exprgen import TABLE, UTC, E, expressions
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from icemor.expr.duck import session
from icemor.expr.sql import parse_sql
from icemor.ops.rowlevel import DUCKDB, SPARK

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pyspark.sql import SparkSession

pytestmark = pytest.mark.oracle

PER_QUERY = 24  # expressions per SELECT: one Spark query per example keeps the test fast
EXAMPLES = int(os.environ.get("ICEMOR_PARITY_EXAMPLES", "40"))  # more to hunt for differences


@pytest.fixture(scope="module")
def sql_spark(spark: SparkSession) -> Iterator[SparkSession]:
    """The oracle session with Arrow transfer on, as icemor's own sessions have it.

    (``sql_dataframe`` hands its inputs to Spark as pandas; without Arrow, PySpark cannot take a
    nullable integer column.)
    """
    key = "spark.sql.execution.arrow.pyspark.enabled"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "true")
    yield spark
    if before is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, before)


# ---- evaluation ----------------------------------------------------------------------------


def duck_columns(sqls: Sequence[str], table: pa.Table = TABLE) -> list[list[Any]]:
    s = session()
    select = ", ".join(f"({sql}\n) AS c{k}" for k, sql in enumerate(sqls))
    with s.inputs({"src": table}):
        out = s.table(f"SELECT {select} FROM src ORDER BY rid")
    return [out.column(k).to_pylist() for k in range(len(sqls))]


def spark_columns(spark: SparkSession, sqls: Sequence[str], table: pa.Table = TABLE) -> list[list[Any]]:
    from icemor.engines.spark import collect_arrow
    from icemor.engines.spark.sql import sql_dataframe

    select = ", ".join(f"({sql}\n) AS c{k}" for k, sql in enumerate(sqls))
    query = lambda v: f"SELECT {select} FROM {v['src']} ORDER BY rid"  # noqa: E731
    with sql_dataframe(spark, query, tables={"src": table}) as df:
        out = collect_arrow(df)  # a few rows per expression: the comparison happens here
    return [out.column(k).to_pylist() for k in range(len(sqls))]


def evaluate(fn: Any, sqls: Sequence[str], *args: Any) -> list[list[Any] | BaseException]:
    """Every expression's column; an expression that fails gets its exception (found one by one)."""
    try:
        return list(fn(*args, sqls))
    except Exception:  # which one: each alone
        out: list[list[Any] | BaseException] = []
        for sql in sqls:
            try:
                out.append(fn(*args, [sql])[0])
            except Exception as e:
                out.append(e)
        return out


def normal(v: Any) -> Any:
    """A value as both engines' results are compared: numbers as numbers, instants in UTC."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | Decimal | float):
        return ("number", v)
    if isinstance(v, dt.datetime):
        return ("instant", v if v.tzinfo else v.replace(tzinfo=UTC))
    if isinstance(v, dt.date):  # DuckDB's date + INTERVAL or date_trunc is a TIMESTAMP at midnight
        return ("instant", dt.datetime(v.year, v.month, v.day, tzinfo=UTC))
    return ("other", repr(v))


def same(a: Any, b: Any) -> bool:
    x, y = normal(a), normal(b)
    if isinstance(x, tuple) and isinstance(y, tuple) and x[0] == y[0] == "number":
        p, q = x[1], y[1]
        if isinstance(p, float) or isinstance(q, float):
            p, q = float(p), float(q)
            if math.isnan(p) or math.isnan(q):
                return math.isnan(p) and math.isnan(q)
            return math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-12)
        return Decimal(p) == Decimal(q)
    return bool(x == y)  # a bool is never a number here: normal() keeps it a bool


def differences(spark: SparkSession, pairs: Sequence[tuple[str, str]]) -> list[str]:
    """(DuckDB SQL, Spark SQL) pairs whose results differ on some row, described."""
    duck = evaluate(duck_columns, [d for d, _ in pairs])
    sparks = evaluate(spark_columns, [s for _, s in pairs], spark)
    problems = []
    for (d_sql, s_sql), d, s in zip(pairs, duck, sparks, strict=True):
        label = d_sql if d_sql == s_sql else f"{d_sql}  (Spark: {s_sql})"
        if isinstance(d, BaseException) or isinstance(s, BaseException):
            problems.append(f"{label}\n    DuckDB: {_shown(d)}\n    Spark:  {_shown(s)}")
            continue
        rows = [k for k in range(len(d)) if not same(d[k], s[k])]
        if rows:
            detail = ", ".join(f"row {k}: DuckDB {d[k]!r} / Spark {s[k]!r}" for k in rows[:3])
            problems.append(f"{label}\n    {detail}")
    return problems


def _shown(v: Any) -> str:
    if isinstance(v, BaseException):
        return f"error: {str(v).strip().splitlines()[0][:200]}"
    return repr(v)[:200]


# ---- the boundary cases --------------------------------------------------------------------

# Where DuckDB by default means something else than Spark, and icemor makes it agree
# (src/icemor/expr/duck.py: settings and macros). Each line failed before.
FIXED = [
    "i / 0",  # NULL (DuckDB's IEEE mode: inf)
    "f / 0",
    "m / 0",
    "i % 0",
    "(0.0e0 / 0)",
    "substring(s, 0, 2)",  # position 0 is 1 in Spark
    "substr(s, 0)",
    "substring(s, 2, -1)",  # negative length: ''
    "substring(s, -2, -1)",
    "left(s, -1)",
    "right(s, -2)",
    "dayofweek(d)",  # 1 = Sunday
    "dayofweek(t)",
    "concat(s, 'x')",  # NULL with a NULL argument
    "concat(s, i, d)",
    "concat(s)",
    "isnan(f)",  # false for NULL
    "hour(t)",  # UTC, not the machine's zone (test_time_zone_is_utc)
    "CAST(t AS DATE)",
    "CAST(d AS TIMESTAMP) = t",
]


def test_fixed_differences_agree(sql_spark: SparkSession) -> None:
    problems = differences(sql_spark, [(e, e) for e in FIXED])
    assert not problems, "\n".join(problems)


def test_nan_reaches_spark_as_nan(sql_spark: SparkSession) -> None:
    """A NaN in a MERGE source stays NaN on Spark (pandas would make it NULL on the way)."""
    table = pa.table({"rid": pa.array([0, 1, 2], pa.int32()),
                      "x": pa.array([float("nan"), None, 1.0], pa.float64())})  # fmt: skip
    pairs = [(sql, sql) for sql in ["x", "x IS NULL", "isnan(x)", "x = x", "x > 1e308", "coalesce(x, 0.5e0)"]]
    duck = duck_columns([d for d, _ in pairs], table)
    spark = spark_columns(sql_spark, [s for _, s in pairs], table)
    problems = [
        f"{d_sql}: DuckDB {dc} / Spark {sc}"
        for (d_sql, _), dc, sc in zip(pairs, duck, spark, strict=True)
        if not all(same(a, b) for a, b in zip(dc, sc, strict=True))
    ]
    assert not problems, "\n".join(problems)
    assert spark[2] == [True, False, False]  # isnan: a NaN arrived, and NULL stayed NULL


def test_time_zone_is_utc() -> None:
    """Local SQL reads timestamptz in UTC, as icemor's Spark sessions do, whatever TZ says."""
    code = textwrap.dedent(
        """
        from icemor.expr.duck import session
        con = session().con
        print(con.execute(
            "SELECT hour(TIMESTAMPTZ '2024-01-01 23:30:00+00'),"
            " CAST(TIMESTAMPTZ '2024-01-01 23:30:00+00' AS DATE),"
            " CAST(DATE '2024-01-01' AS TIMESTAMPTZ) = TIMESTAMPTZ '2024-01-01 00:00:00+00'"
        ).fetchall())
        """
    )
    env = {**os.environ, "TZ": "Asia/Tokyo"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[(23, datetime.date(2024, 1, 1), True)]"


# ---- the property test ---------------------------------------------------------------------

_STORE_TARGETS: dict[str, list[PrimitiveType]] = {
    "int": [IntegerType(), LongType(), DoubleType(), FloatType(), DecimalType(10, 2)],
    "double": [DoubleType(), FloatType(), IntegerType(), LongType()],  # to decimal: docs/sql.md
    "decimal": [DecimalType(10, 2), DecimalType(12, 4), DoubleType(), IntegerType(), LongType()],
    "string": [StringType()],
    "date": [DateType(), TimestamptzType(), TimestampType()],
    "timestamp": [TimestamptzType(), TimestampType(), DateType()],
    "bool": [BooleanType()],
}


@st.composite
def stored(draw: st.DrawFn) -> tuple[str, str] | None:
    """A SET value cast to a column type as UPDATE/MERGE store it: (DuckDB SQL, Spark SQL)."""
    e: E = draw(expressions(kinds=("int", "double", "decimal", "string", "date", "timestamp", "bool")))
    target = draw(st.sampled_from(_STORE_TARGETS[e.kind]))
    limit = math.inf
    if isinstance(target, IntegerType):
        limit = 2.0**31 - 2
    elif isinstance(target, LongType):
        limit = 2.0**62
    elif isinstance(target, DecimalType):
        limit = 10.0 ** (target.precision - target.scale) - 1
    if e.bound >= limit:  # overflow: Spark wraps or gives NULL, DuckDB raises (docs/sql.md)
        return None
    return DUCKDB.cast(e.sql, target), SPARK.cast(e.sql, target)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # each failure names its expressions
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    exprs=st.lists(expressions(), min_size=PER_QUERY - 6, max_size=PER_QUERY - 6),
    stores=st.lists(stored(), min_size=6, max_size=6),
)
def test_random_expressions_agree(
    sql_spark: SparkSession, exprs: list[E], stores: list[tuple[str, str] | None]
) -> None:
    for e in exprs:
        parse_sql(e.sql)  # the subset passes icemor's own checks
    pairs = [(e.sql, e.sql) for e in exprs] + [p for p in stores if p is not None]
    problems = differences(sql_spark, pairs)
    assert not problems, f"{len(problems)} of {len(pairs)} expressions differ:\n" + "\n".join(problems)
