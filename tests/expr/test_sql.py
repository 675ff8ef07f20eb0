"""parse_sql: one expression or a clear refusal, and its columns (conditions: test_condition.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from exprgen import TABLE, expressions
from hypothesis import HealthCheck, given, settings
from pyiceberg.schema import Schema
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
from icemor.expr.sql import (
    ALLOWED_FUNCTIONS,
    MAX_NESTING,
    MAX_TEXT_CHARS,
    UnsupportedSqlError,
    parse_sql,
    quote_identifier,
)

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


@pytest.mark.parametrize("text", ["sum(a) + 1", "count(*)", "max(b)", "avg(a) > 1"])
def test_parse_sql_refuses_aggregates(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="aggregate"):
        parse_sql(text)


# ---- the function allow-list ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("current_setting('secret_directory')", "function current_setting()"),  # stored a secrets path
        ("current_query()", "function current_query()"),  # stored icemor's own SQL
        ("getvariable('x')", "function getvariable()"),
        ("'secret_directory'.current_setting()", "function current_setting()"),  # method syntax
        ("upper(current_setting('home_directory'))", "function current_setting()"),  # nested
        ("system.main.upper(s)", "function system.main.upper()"),  # qualified: what macros call
        ("main.upper(s)", "function main.upper()"),
        ("s.upper()", "function s.upper()"),
        ("version()", "function version()"),
        ("random() < 0.5", "function random()"),
        ("nextval('seq')", "function nextval()"),
        ("strpos(s, 'a')", "function strpos()"),  # DuckDB only
        ("list_transform([1], lambda x: x)", "function list_transform()"),
        ("a // 2", "operator //"),
    ],
)
def test_parse_sql_refuses_functions_outside_the_allow_list(text: str, refused: str) -> None:
    # functions: UnsupportedSqlError (row filters show it); operators: plain, as a typo is likelier
    error = InvalidArgumentError if refused.startswith("operator") else UnsupportedSqlError
    with pytest.raises(error) as info:
        parse_sql(text, what="SET value of note")
    message = str(info.value)
    assert message.startswith(refused), message
    assert "is not allowed in the SET value of note" in message and "see docs/sql.md" in message


@pytest.mark.parametrize(
    "text",
    [
        "power(2, 3) + abs(-1) - sign(i) * round(m, 1) / ceil(f) % floor(f)",
        "concat('it', chr(39), 's') || concat_ws('-', s, 'x')",
        "s LIKE '100!%' ESCAPE '!' OR s NOT LIKE 'a%' OR s ILIKE 'a%' OR s NOT ILIKE 'b%' ESCAPE '!'",
        "extract(QUARTER FROM d) + extract(YEAR FROM t)",
        "t + INTERVAL 3 HOUR - INTERVAL 1 DAY + INTERVAL 2 MONTH - INTERVAL 1 YEAR + INTERVAL 5 MINUTE",
        "t + INTERVAL 7 SECOND",
        "position('a' IN s) + instr(s, 'b') + length(s)",
        "(a, b) IN ((1, 2), (3, 4))",
        "now() > t",
        "ifnull(a, 1) + coalesce(b, 2) + nullif(i, 0)",
        "isnan(f) AND sqrt(f) > ln(f)",
        "make_date(2024, 1, 31) = last_day(d)",
        "TRY_CAST(s AS INT) = CAST(s AS INT)",
        "- - 1 + (-i)",
        "if(b, greatest(i, 1), least(i, 2))",
        "date_trunc('month', d) = date_add(d, 1)",
    ],
)
def test_parse_sql_allows_the_documented_subset(text: str) -> None:
    assert parse_sql(text).text == text


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=expressions())
def test_every_generated_expression_passes_the_allow_list(e: Any) -> None:
    """exprgen draws from the subset that both engines agree on: all of it must be allowed."""
    parse_sql(e.sql)


def test_allow_list_and_docs_agree() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text()
    block = text.split("<!-- allowed-functions -->")[1].split("<!-- /allowed-functions -->")[0]
    assert set(re.findall(r"`([^`]+)`", block)) == ALLOWED_FUNCTIONS


def test_every_allowed_function_exists_in_duckdb() -> None:
    """No typo in the list: each name is a DuckDB function or operator (or one of icemor's macros)."""
    rows = session().con.execute("SELECT DISTINCT function_name FROM duckdb_functions()").fetchall()
    assert ALLOWED_FUNCTIONS - {r[0] for r in rows} == set()


# ---- size limits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "(" * (MAX_NESTING + 1) + "a" + ")" * (MAX_NESTING + 1),
        "NOT " * (MAX_NESTING + 1) + "a",
        "NOT (" * 60 + "- " * 60 + "1" + ")" * 60,
        "CASE WHEN a THEN " * (MAX_NESTING + 1) + "1" + " END" * (MAX_NESTING + 1),
        "abs(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1),
    ],
)
def test_nesting_beyond_the_limit_is_refused(text: str) -> None:
    with pytest.raises(
        InvalidArgumentError, match=f"the condition .* nests too deeply \\(more than {MAX_NESTING}"
    ):
        parse_sql(text, what="condition")


def test_nesting_at_the_limit_and_long_flat_conditions_are_accepted() -> None:
    parse_sql("(" * MAX_NESTING + "a" + ")" * MAX_NESTING)
    parse_sql(" AND ".join(["NOT (a = 1)"] * 500))  # NOTs side by side do not nest
    parse_sql(" OR ".join(f"(i = {k} AND NOT b)" for k in range(500)))
    parse_sql("s = '" + "(" * 500 + "' -- ((((((((\n")  # parentheses in literals and comments


def test_a_very_deep_condition_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(InvalidArgumentError, match="nests too deeply"):
        parse_sql("NOT (" * 50_000 + "a" + ")" * 50_000, what="condition")
    assert time.monotonic() - started < 5


def test_a_long_operator_chain_is_refused_in_icemor_words() -> None:
    """DuckDB's parser stops at 1,000 levels and suggests a setting: not a hint for icemor's users."""
    with pytest.raises(InvalidArgumentError, match="nests too deeply") as info:
        parse_sql(" + ".join(["1"] * 2000), what="condition")
    assert "max_expression_depth" not in str(info.value)


def test_text_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"the condition is too long \(1,000,00\d characters"):
        parse_sql("s = '" + "x" * (MAX_TEXT_CHARS - 4) + "'", what="condition")


@pytest.mark.parametrize(("text", "why"), [("#1 = 1", "positional reference")])
def test_parse_sql_refuses_other_nodes(text: str, why: str) -> None:
    with pytest.raises(UnsupportedSqlError, match=why):
        parse_sql(text)
