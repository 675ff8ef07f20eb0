"""Row filters: long ``or`` chains of equalities become ``IN``, chains are rebalanced, depth limits are clean."""

from __future__ import annotations

import functools

import pytest
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, Not, Or
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icemor.exceptions import InvalidArgumentError
from icemor.planning.scan import flatten_filter, parse_filter

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
    # redundant parentheses are no nesting at all
    assert parse_filter("(" * 5000 + "id = 1" + ")" * 5000, SCHEMA) == EqualTo("id", 1)


def test_long_filters_are_shortened_in_messages() -> None:
    text = " or ".join(f"nope = {i}" for i in range(1000))
    with pytest.raises(InvalidArgumentError) as info:
        parse_filter(text, SCHEMA)
    assert len(str(info.value)) < 400 and "characters)" in str(info.value)
