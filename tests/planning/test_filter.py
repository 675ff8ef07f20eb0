"""Row filters: long ``or`` chains of equalities become ``IN``, chains are rebalanced, depth and size
limits are clean and cheap, refused SQL gets SQL's message."""

from __future__ import annotations

import functools
import time

import pytest
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, Not, Or
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icemor.exceptions import InvalidArgumentError
from icemor.expr.sql import MAX_NESTING, MAX_TEXT_CHARS
from icemor.planning.scan_job import flatten_filter, parse_filter

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False), NestedField(2, "data", StringType(), required=False)
)


def _depth(expr: object) -> int:
    if isinstance(expr, And | Or):
        return 1 + max(_depth(expr.left), _depth(expr.right))
    if isinstance(expr, Not):
        return 1 + _depth(expr.child)
    return 1


def test_or_of_equalities_on_one_column_is_one_in() -> None:
    expr = parse_filter(" or ".join(f"id = {i}" for i in range(2000)), SCHEMA)
    assert isinstance(expr, In)
    assert {lit.value for lit in expr.literals} == set(range(2000))


def test_merge_keeps_other_operands_and_columns_apart() -> None:
    expr = parse_filter("id = 1 or data = 'a' or id in (2, 3) or id > 10 or data = 'b' or id = 1", SCHEMA)
    assert isinstance(expr, Or)
    parts = [expr.left, expr.right]
    flat: list[object] = []
    while parts:
        p = parts.pop()
        if isinstance(p, Or):
            parts += [p.left, p.right]
        else:
            flat.append(p)
    ins = {p.term.name: {lit.value for lit in p.literals} for p in flat if isinstance(p, In)}
    assert ins == {"id": {1, 2, 3}, "data": {"a", "b"}}
    assert len(flat) == 3  # id IN, data IN, id > 10


def test_a_single_equality_stays_an_equality() -> None:
    assert parse_filter("id = 1", SCHEMA) == EqualTo("id", 1)
    assert parse_filter("id = 1 or id = 1", SCHEMA) == EqualTo("id", 1)


def test_or_under_and_and_not_is_merged_too() -> None:
    expr = parse_filter("data = 'x' and not (id = 1 or id = 2)", SCHEMA)
    assert isinstance(expr, And) and isinstance(expr.right, Not)
    assert expr.right.child == In("id", {1, 2})


def test_left_deep_chains_are_rebalanced() -> None:
    """An API user's functools.reduce(And, …) of 5,000 predicates binds (depth ~13, not 5,000)."""
    deep = functools.reduce(And, [Not(EqualTo("id", i)) for i in range(5000)])
    flat = parse_filter(deep, SCHEMA)
    assert _depth(flat) <= 16
    assert _depth(flatten_filter(functools.reduce(Or, [EqualTo("id", i) for i in range(5000)]))) == 1


def test_too_deep_nesting_is_a_clean_error() -> None:
    deep: BooleanExpression = EqualTo("id", 1)
    for i in range(20_000):  # NOT(NOT x) would fold to x: alternate with AND
        deep = Not(And(deep, EqualTo("id", i)))
    with pytest.raises(InvalidArgumentError, match="nests too deeply"):
        parse_filter(deep, SCHEMA)
    # redundant parentheses are no nesting in the result, up to the text's limit
    assert parse_filter("(" * MAX_NESTING + "id = 1" + ")" * MAX_NESTING, SCHEMA) == EqualTo("id", 1)


@pytest.mark.parametrize(
    "text",
    [
        "(" * 50_000 + "id = 1" + ")" * 50_000,
        "not (" * 50_000 + "id = 1" + ")" * 50_000,
        "(id = 1 and " * 50_000 + "id = 2" + ")" * 50_000,  # the shape that once took 127 s
        "not " * (MAX_NESTING + 1) + "id = 1",
        "(" * (MAX_NESTING + 1) + "id = 1" + ")" * (MAX_NESTING + 1),
    ],
)
def test_too_deep_filter_text_is_refused_before_parsing(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(
        InvalidArgumentError, match=f"row filter .* nests too deeply \\(more than {MAX_NESTING}"
    ):
        parse_filter(text, SCHEMA)
    assert time.monotonic() - started < 2


def test_too_long_filter_text_is_refused() -> None:
    text = "data = '" + "x" * MAX_TEXT_CHARS + "'"
    with pytest.raises(InvalidArgumentError, match="the row filter is too long"):
        parse_filter(text, SCHEMA)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the message UPDATE gives for the same condition, not "expected a value after 'in ('"
        ("id in (select 1)", "the row filter 'id in (select 1)' uses a subquery, which is not supported"),
        ("exists (select 1)", "the row filter 'exists (select 1)' uses a subquery, which is not supported"),
        ("id = (select max(id) from t)", "uses a subquery, which is not supported"),
        ("current_setting('x') = 'a'", "function current_setting() is not allowed in the row filter"),
    ],
)
def test_refused_sql_gets_the_sql_message(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_filter(text, SCHEMA)
    assert message in str(info.value)


def test_long_filters_are_shortened_in_messages() -> None:
    text = " or ".join(f"nope = {i}" for i in range(1000))
    with pytest.raises(InvalidArgumentError) as info:
        parse_filter(text, SCHEMA)
    assert len(str(info.value)) < 400 and "characters)" in str(info.value)
