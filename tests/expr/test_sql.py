"""parse_sql: one expression or a clear refusal; to_iceberg: a pruning filter implied by it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from exprgen import STRINGS, TABLE, expressions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    NotNull,
    Or,
)
from pyiceberg.expressions.visitors import bind, expression_evaluator
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from icemor.exceptions import InvalidArgumentError
from icemor.expr.duck import session
from icemor.expr.sql import parse_sql, quote_identifier, to_iceberg

SCHEMA = Schema(
    NestedField(1, "rid", IntegerType()),
    NestedField(2, "i", IntegerType()),
    NestedField(3, "l", LongType()),
    NestedField(4, "f", DoubleType()),
    NestedField(5, "m", DecimalType(10, 2)),
    NestedField(6, "s", StringType()),
    NestedField(7, "d", DateType()),
    NestedField(8, "t", TimestamptzType()),
    NestedField(9, "b", BooleanType()),
    NestedField(10, "r", FloatType()),
)
ROWS = TABLE.append_column(
    "r", pa.array([0.1, -2.5, None, 0.0, 1e10, 3.25, -0.1, 7.0, 0.30000001, 1.5], pa.float32())
)


# ---- parse_sql -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "is empty"),
        ("   \n", "is empty"),
        ("1; DROP TABLE x", "cannot parse"),
        ("1) FROM t WHERE (1", "must be one SQL expression"),
        ("1) UNION SELECT (2", "must be one SQL expression"),
        ("(SELECT 1)", "subquery"),
        ("a IN (SELECT 1)", "subquery"),
        ("EXISTS (SELECT 1)", "subquery"),
        ("row_number() OVER ()", "window function"),
        ("a, b", "not a comma-separated list"),
        ("qty + 1, 2", "not a comma-separated list"),
        ("*", "uses *"),
        ("qty = ?", "parameter"),
        ('"qty" = 1', "double quotes"),  # Spark: the string 'qty'
        ("note = 'it''s'", "quote or backslash"),  # Spark: 'its'
        ("note LIKE 'a\\%'", "quote or backslash"),  # Spark: an escape
        ("2 ^ 3", "power(x, y)"),  # Spark: XOR
        ("qty ** 2", "power(x, y)"),
    ],
)
def test_parse_sql_refuses(text: str, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match="the condition") as info:
        parse_sql(text, what="condition")
    assert why in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "qty > 3 AND region = 'EU'",
        "`odd name` = 1 -- a comment with 'quotes' and \"doubles\"",
        "concat('it', chr(39), 's')",
        "s = 'say \"hi\"'",
        "(1, 2)",  # one row value, written as such
        "CASE WHEN a THEN 1 ELSE 2 END",
        "x = ''",
    ],
)
def test_parse_sql_accepts(text: str) -> None:
    assert parse_sql(text).text == text


def test_columns_are_the_references() -> None:
    e = parse_sql("t.id = s.id AND upper(`Note`) LIKE 'A%' AND qty > 1")
    assert e.columns() == {("t", "id"), ("s", "id"), ("Note",), ("qty",)}


def test_quote_identifier_reads_back_as_the_name() -> None:
    name = 'we`ird "name"'
    assert parse_sql(f"{quote_identifier(name)} = 1").columns() == {(name,)}


# ---- to_iceberg: what translates -----------------------------------------------------------


def translated(text: str, qualifier: str | None = None) -> BooleanExpression:
    return to_iceberg(parse_sql(text), SCHEMA, qualifier=qualifier)


def same_bound(a: BooleanExpression, b: BooleanExpression) -> bool:
    return bool(bind(SCHEMA, a, case_sensitive=False) == bind(SCHEMA, b, case_sensitive=False))


def test_translates_the_exact_conjuncts_only() -> None:
    got = translated("i = 1 AND l IN (1, 2) AND s LIKE 'x%'")
    assert got == And(EqualTo("i", 1), In("l", {1, 2}))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NOT (i = 1)", Not(EqualTo("i", 1))),
        ("i BETWEEN 1 AND 3", And(GreaterThanOrEqual("i", 1), LessThanOrEqual("i", 3))),
        ("d = DATE '2024-01-01'", EqualTo("d", "2024-01-01")),
        ("1 < i", GreaterThan("i", 1)),
        ("i = -1", EqualTo("i", -1)),
        ("s IS NULL OR s <> 'a'", Or(IsNull("s"), NotEqualTo("s", "a"))),
        ("b IS NOT NULL AND b = TRUE", And(NotNull("b"), EqualTo("b", True))),
        ("m >= 1.25", GreaterThanOrEqual("m", Decimal("1.25"))),
        ("m < 99999999.99", LessThan("m", Decimal("99999999.99"))),
        ("f < 1", LessThan("f", 1.0)),
        ("I = 1", EqualTo("i", 1)),  # SQL names are case-insensitive
    ],
)
def test_translates(text: str, expected: BooleanExpression) -> None:
    assert same_bound(translated(text), expected)


@pytest.mark.parametrize(
    "text",
    [
        "i = 1.5",  # SQL compares as decimal: i = 1 is not the same
        "i NOT IN (1, NULL)",  # never true
        "s = 1",  # SQL casts s to a number
        "m = 1.255",  # more scale than the column: pyiceberg would round
        "m < 99999999999",  # more digits than DECIMAL(10,2): reading would fail on the bound literal
        "m > 1e20",
        "d = '2024-01-01'",  # a string against a date
        "t > TIMESTAMP '2024-01-01 00:00:00'",
        "i + 1 = 2",
        "i = l",
        "i = 1 OR s LIKE 'a%'",  # one side does not translate: neither does the OR
        "NOT (i NOT IN (1, NULL))",
        "nosuch = 1",
        "b",
    ],
)
def test_does_not_translate(text: str) -> None:
    assert translated(text) == AlwaysTrue()


def test_qualifier_keeps_the_table_side_only() -> None:
    assert translated("t.i = 1 AND s.i = 2", qualifier="t") == EqualTo("i", 1)
    assert to_iceberg(None, SCHEMA) == AlwaysTrue()


# ---- to_iceberg: never fewer rows than the condition ---------------------------------------

_COLUMNS = {
    "i": IntegerType(),
    "l": LongType(),
    "f": DoubleType(),
    "r": FloatType(),
    "m": DecimalType(10, 2),
    "s": StringType(),
    "d": DateType(),
    "b": BooleanType(),
}
_NUMBERS = ["0", "1", "-7", "3", "1000", "2147483648", "-2147483649", "9223372036854775808", "1.5", "1.25",
            "-3.50", "1.255", "0.1", "7.0", "1e3", "-0.0", "0.30000001", "1e10", "99999999999"]  # fmt: skip


def literal(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["number", "number", "string", "date", "bool", "null"]))
    if kind == "number":
        return draw(st.sampled_from(_NUMBERS))
    if kind == "string":
        return f"'{draw(st.sampled_from([*STRINGS, '1970-01-01', '1.5', 'true']))}'"
    if kind == "date":
        return f"DATE '{draw(st.sampled_from(['2024-01-31', '1970-01-01', '2000-02-29', '2024-02-01']))}'"
    if kind == "bool":
        return draw(st.sampled_from(["TRUE", "FALSE"]))
    return "NULL"


@st.composite
def prunable(draw: st.DrawFn, depth: int = 2) -> str:
    """Conditions made mostly of what to_iceberg translates, with literals of every kind."""
    pick = draw(st.integers(0, 8 if depth > 0 else 4))
    column = draw(st.sampled_from(list(_COLUMNS)))
    if pick == 0:
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        lit = literal(draw)
        return f"{column} {op} {lit}" if draw(st.booleans()) else f"{lit} {op} {column}"
    if pick == 1:
        items = ", ".join(literal(draw) for _ in range(draw(st.integers(1, 4))))
        return f"{column} {draw(st.sampled_from(['IN', 'NOT IN']))} ({items})"
    if pick == 2:
        return f"{column} BETWEEN {literal(draw)} AND {literal(draw)}"
    if pick == 3:
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if pick == 4:
        return draw(expressions(kinds=("bool",), depth=1)).sql
    if pick == 5:
        return f"NOT ({draw(prunable(depth - 1))})"
    parts = [f"({draw(prunable(depth - 1))})" for _ in range(draw(st.integers(2, 3)))]
    return f" {'OR' if pick == 8 else 'AND'} ".join(parts)


def _iceberg_value(v: Any) -> Any:
    """A row value as pyiceberg's evaluator holds it (days, microseconds)."""
    if isinstance(v, dt.datetime):
        return int((v - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() * 1_000_000)
    if isinstance(v, dt.date):
        return (v - dt.date(1970, 1, 1)).days
    return v


_RECORDS = [Record(*(_iceberg_value(row[f.name]) for f in SCHEMA.fields)) for row in ROWS.to_pylist()]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(condition=prunable())
def test_to_iceberg_keeps_every_row_the_condition_keeps(condition: str) -> None:
    s = session()
    try:
        with s.inputs({"src": ROWS}):
            true_rows = set(s.table(f"SELECT rid FROM src WHERE {condition}").column(0).to_pylist())
    except InvalidArgumentError:  # e.g. a string literal that is no number: the UPDATE fails
        return
    pruning = to_iceberg(parse_sql(condition), SCHEMA)
    bound = bind(SCHEMA, pruning, case_sensitive=False)
    kept = set(ROWS.filter(expression_to_pyarrow(bound)).column("rid").to_pylist())
    assert true_rows <= kept, f"{pruning} drops rows {sorted(true_rows - kept)} that {condition!r} keeps"
    evaluate = expression_evaluator(SCHEMA, pruning, case_sensitive=False)
    kept_by_rows = {k for k, record in enumerate(_RECORDS) if evaluate(record)}
    assert true_rows <= kept_by_rows, f"{pruning} (row by row) drops {sorted(true_rows - kept_by_rows)}"


@pytest.mark.parametrize("text", ["sum(a) + 1", "count(*)", "max(b)", "avg(a) > 1"])
def test_parse_sql_refuses_aggregates(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="aggregate"):
        parse_sql(text)
