"""Bad SQL input to ``icemor.spark.sql`` is refused in one line, and Spark's lexical rules hold.

Issue 51, defect 7: 48 levels of parentheses raised a raw RecursionError from sqlglot (the
builders take 100: ``MAX_NESTING``); the size limit was checked after sqlglot had parsed the
text (11.6 s for a 1.02 MB statement); ``… WHERE id = 9 ; -- done`` was "2 statements";
``SET v = 'a\\'b'`` an "unterminated string literal". And a DELETE's condition the builders'
SQL refused was read in pyiceberg's filter language, so ``WHERE "id" = 1`` deleted row 1 where
Spark deletes nothing. The values Spark gives its string literals are Spark's own (``spark``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
import sqlglot

import icemor
import icemor.spark
from icemor.exceptions import InvalidArgumentError
from icemor.expr import dml
from icemor.expr.dml import Delete, Merge, Update, parse_statement
from icemor.expr.sql import MAX_NESTING, MAX_TEXT_CHARS

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

COLUMNS = ["id", "v"]


def _statement(kind: str, condition: str) -> str:
    return {
        "DELETE": f"DELETE FROM db.t WHERE {condition}",
        "UPDATE": f"UPDATE db.t SET v = 'x' WHERE {condition}",
        "MERGE": f"MERGE INTO db.t t USING s ON t.id = s.id WHEN MATCHED AND {condition} THEN DELETE",
    }[kind]


def _condition(plan: Merge | Update | Delete) -> str | None:
    return plan.clauses[0].condition if isinstance(plan, Merge) else plan.where


def _nested(levels: int) -> str:
    return "(" * levels + "id = 9" + ")" * levels


def _one_line(info: pytest.ExceptionInfo[InvalidArgumentError]) -> str:
    text = str(info.value)
    assert "\n" not in text
    return text


def _table(catalog: SqlCatalog, name: str) -> icemor.Table:
    data = pa.table({"id": pa.array([1, 2, 9], pa.int64()), "v": ["x", "a'b", "ab"]})
    return icemor.create_table(name, data, catalog=catalog)


def _rows(catalog: SqlCatalog, name: str) -> dict[int, str]:
    rows = icemor.load_table(name, catalog=catalog).scan().to_arrow().to_pylist()
    return {r["id"]: r["v"] for r in rows}


# ---- nesting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["DELETE", "UPDATE", "MERGE"])
@pytest.mark.parametrize("levels", [48, MAX_NESTING])
def test_conditions_nested_up_to_the_limit_parse(kind: str, levels: int) -> None:
    plan = parse_statement(_statement(kind, _nested(levels))).translate(COLUMNS)
    assert _condition(plan) == _nested(levels)


@pytest.mark.parametrize("kind", ["DELETE", "UPDATE", "MERGE"])
def test_the_limit_holds_whatever_the_callers_depth(kind: str) -> None:
    """From a caller 100 frames short of Python's recursion limit, 100 levels still parse."""

    def at(depth: int) -> Merge | Update | Delete:
        if depth > 0:
            return at(depth - 1)
        return parse_statement(_statement(kind, _nested(MAX_NESTING))).translate(COLUMNS)

    limit = sys.getrecursionlimit()
    plan = at(limit - 100 - _depth())
    assert _condition(plan) == _nested(MAX_NESTING)
    assert sys.getrecursionlimit() == limit  # raised only while parsing


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


@pytest.mark.parametrize("kind", ["DELETE", "UPDATE", "MERGE"])
@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 5000])
def test_deeper_nesting_is_one_line_before_any_parser(
    kind: str, levels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_parser(monkeypatch)
    with pytest.raises(InvalidArgumentError) as info:
        parse_statement(_statement(kind, _nested(levels)))
    assert f"nests too deeply (more than {MAX_NESTING} levels" in _one_line(info)


@pytest.mark.parametrize(
    "condition",
    ["!" * 5000 + "(id = 9)", "v[" * 3000 + "0" + "]" * 3000 + " = 1"],
    ids=["bang", "subscript"],
)
def test_nesting_the_count_does_not_see_is_one_line_too(condition: str) -> None:
    """What the size check does not count (``!``, ``a[…]``) still never escapes as a RecursionError."""
    limit = sys.getrecursionlimit()
    with pytest.raises(InvalidArgumentError) as info:
        parse_statement(_statement("DELETE", condition)).translate(COLUMNS)
    _one_line(info)
    assert sys.getrecursionlimit() == limit


def test_nested_statements_run(catalog: SqlCatalog, ns: str) -> None:
    """100 levels all the way: the statement, the builders, the commit (locally: spark=None)."""
    _table(catalog, f"{ns}.t")
    icemor.spark.sql(None, f"UPDATE {ns}.t SET v = 'nine' WHERE {_nested(MAX_NESTING)}", catalog=catalog)  # type: ignore[arg-type]
    assert _rows(catalog, f"{ns}.t") == {1: "x", 2: "a'b", 9: "nine"}
    deep_one = "(" * MAX_NESTING + "id = 1" + ")" * MAX_NESTING
    icemor.spark.sql(None, f"DELETE FROM {ns}.t WHERE {deep_one}", catalog=catalog)  # type: ignore[arg-type]
    assert _rows(catalog, f"{ns}.t") == {2: "a'b", 9: "nine"}


# ---- size --------------------------------------------------------------------------------------


def _no_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make sqlglot's tokenizer and parser fail the test if anything calls them."""

    def called(*args: object, **kwargs: object) -> Any:
        pytest.fail("sqlglot read the statement before its size and nesting were checked")

    monkeypatch.setattr(dml._DIALECT, "tokenize", called)
    monkeypatch.setattr(dml._Parser, "parse", called)
    monkeypatch.setattr(sqlglot, "parse", called)
    monkeypatch.setattr(sqlglot, "parse_one", called)
    monkeypatch.setattr(sqlglot, "tokenize", called)


def test_a_statement_over_the_size_limit_is_refused_before_any_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = ",".join(["1234567"] * 128_000)  # 1.02 MB: 11.6 s to parse before it was refused
    text = f"DELETE FROM db.t WHERE id IN ({values})"
    assert len(text) > MAX_TEXT_CHARS
    _no_parser(monkeypatch)
    with pytest.raises(InvalidArgumentError) as info:
        parse_statement(text)
    assert f"the statement is too long ({len(text):,} characters, at most {MAX_TEXT_CHARS:,})" in _one_line(
        info
    )


# ---- statement ends ----------------------------------------------------------------------------


def test_a_trailing_semicolon_and_comments_end_the_one_statement() -> None:
    """Spark's grammar is ``statement ';'* EOF``; a second statement is still refused."""
    for end in [" ; -- done", "; /* x */", ";;", " /* a */ ; /* b */ -- c\n", "; ; -- x", ";\n\n"]:
        assert parse_statement(f"DELETE FROM db.t WHERE id = 9{end}").translate(COLUMNS) == Delete(
            "db.t", "id = 9"
        ), end
        text = f"MERGE INTO db.t t USING s ON t.id = s.id WHEN MATCHED THEN DELETE{end}"
        assert isinstance(parse_statement(text).translate(COLUMNS), Merge), end
    for two in [
        "DELETE FROM db.t WHERE id = 9; DELETE FROM db.t",
        "DELETE FROM db.t WHERE id = 9; -- done\nDELETE FROM db.t",
        "UPDATE db.t SET v = 'x'; /* then */ SELECT 1;",
    ]:
        with pytest.raises(InvalidArgumentError, match="the text holds 2 statements") as info:
            parse_statement(two)
        _one_line(info)


def test_a_trailing_comment_deletes_the_right_rows(catalog: SqlCatalog, ns: str) -> None:
    _table(catalog, f"{ns}.t")
    icemor.spark.sql(None, f"DELETE FROM {ns}.t WHERE id = 9 ; -- done", catalog=catalog)  # type: ignore[arg-type]
    assert _rows(catalog, f"{ns}.t") == {1: "x", 2: "a'b"}
    icemor.spark.sql(None, f"UPDATE {ns}.t SET v = 'y' WHERE id = 1; /* x */", catalog=catalog)  # type: ignore[arg-type]
    assert _rows(catalog, f"{ns}.t") == {1: "y", 2: "a'b"}


# ---- string literals as Spark reads them ---------------------------------------------------------


def test_an_escaped_quote_is_a_quote_through_the_statement_and_the_builders(
    catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    table = _table(catalog, name)
    icemor.spark.sql(None, f"UPDATE {name} SET v = 'c\\'d' WHERE id = 1", catalog=catalog)  # type: ignore[arg-type]
    assert _rows(catalog, name) == {1: "c'd", 2: "a'b", 9: "ab"}
    # the builders and a scan take the same text the same way
    assert table.scan("v = 'a\\'b'").to_arrow().column("id").to_pylist() == [2]
    table.update({"v": "'e\\'f' || v"}, "v = 'c\\'d'")
    assert _rows(catalog, name) == {1: "e'fc'd", 2: "a'b", 9: "ab"}
    icemor.spark.sql(None, f"DELETE FROM {name} WHERE v = 'a\\'b'", catalog=catalog)  # type: ignore[arg-type]
    assert _rows(catalog, name) == {1: "e'fc'd", 9: "ab"}
    table.refresh()
    table.delete("v IN ('e\\'fc\\'d')")
    assert _rows(catalog, name) == {9: "ab"}


@pytest.mark.parametrize(
    ("where", "message"),
    [
        # Spark: the string 'id' (so no row); pyiceberg's filter language read the column id
        ('"id" = 1', 'has the double-quoted "id", a string in Spark SQL'),
        # Spark: 'ab' (row 9); the builders read a'b (row 2)
        ("v = 'a''b'", "has adjacent string literals ('a''b'), which Spark SQL joins into one ('ab')"),
        # a backslash left in the value: LIKE reads it as an escape on Spark only
        ("v LIKE 'a\\%'", "has a string literal with a quote or backslash in it: 'a\\%' holds a backslash"),
        ("v = 'a\\\\b'", "write chr(92)"),
    ],
)
def test_what_spark_reads_otherwise_is_refused_and_deletes_nothing(
    catalog: SqlCatalog, ns: str, where: str, message: str
) -> None:
    _table(catalog, f"{ns}.t")
    before = icemor.load_table(f"{ns}.t", catalog=catalog).metadata.current_snapshot_id
    with pytest.raises(InvalidArgumentError) as info:
        icemor.spark.sql(None, f"DELETE FROM {ns}.t WHERE {where}", catalog=catalog)  # type: ignore[arg-type]
    assert message in _one_line(info)
    assert icemor.load_table(f"{ns}.t", catalog=catalog).metadata.current_snapshot_id == before


# Spark SQL literals whose value the builders must store as Spark does (Spark's own SELECT says
# what that is): backslash escapes processed (spark.sql.parser.escapedStringLiterals=false)
LITERALS = [
    "'a\\'b'",
    "'a\\\"b'",
    "'say \"hi\"'",
    "'a\\nb'",
    "'a\\tb\\rc'",
    "'\\u0041\\u00e9'",
    "'\\U0001F600'",
    "'\\uD83D\\uDE00'",
    "'a\\zb'",
    "'\\101\\1234'",
    "'x\\Zy\\0z'",
    "'\\''",
    "'it\\'s' || 'x'",
    "concat('\\'', v)",
    "upper('\\'q\\'')",
]


def test_string_literals_store_what_spark_reads(spark: SparkSession, catalog: SqlCatalog, ns: str) -> None:
    """``SET v = 'a\\'b'`` stores a'b: the value Spark's own ``SELECT 'a\\'b'`` gives, on Spark's
    executors and locally (DuckDB), one row per literal."""
    selected = ", ".join(f"{v} AS c{i}" for i, v in enumerate(LITERALS))
    expected = list(spark.sql(f"SELECT {selected} FROM (SELECT '' AS v)").first())
    assert expected[0] == "a'b"  # spark.sql("SELECT 'a\\'b'")
    rows = pa.table({"id": pa.array(range(len(LITERALS)), pa.int64()), "v": [""] * len(LITERALS)})
    case = " ".join(f"WHEN {i} THEN {v}" for i, v in enumerate(LITERALS))
    for engine, name in ((spark, f"{ns}.on_spark"), (None, f"{ns}.local")):
        icemor.create_table(name, rows, catalog=catalog)
        icemor.spark.sql(
            engine, f"UPDATE {name} SET v = CASE id {case} END; -- every literal", catalog=catalog
        )  # type: ignore[arg-type]
        stored = _rows(catalog, name)
        assert [stored[i] for i in range(len(LITERALS))] == expected, name
    # and a condition with one reads the same on Spark
    icemor.spark.sql(
        spark, f"DELETE FROM {ns}.on_spark WHERE v = 'a\\'b' OR v = '\\u0041\\u00e9'", catalog=catalog
    )
    assert sorted(_rows(catalog, f"{ns}.on_spark")) == [i for i in range(len(LITERALS)) if i not in (0, 5)]
