"""pyiceberg's filter language: plain-words parse errors, date literals on timestamp columns, flat chains.

pyiceberg parses filters with pyparsing, whose error for a typo is the whole grammar (2,900
characters) at column 1. :func:`explain_parse_error` walks the tokens instead and says where the
filter went wrong and what was expected there (SQL that icemor refuses, a subquery or a function
outside the allow-list, never gets here: :func:`icemor.expr.condition.parse_condition` gives
the refusal UPDATE and MERGE give).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from pyiceberg.expressions import (
    And,
    EqualTo,
    In,
    LiteralPredicate,
    Not,
    NotEqualTo,
    NotIn,
    Or,
    Reference,
    SetPredicate,
)
from pyiceberg.expressions.literals import StringLiteral
from pyiceberg.types import TimestampNanoType, TimestampType, TimestamptzNanoType, TimestamptzType

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema

__all__ = ["dates_as_midnight", "explain_parse_error", "flatten_filter"]

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'(?:[^']|'')*'?)
    | (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_$]*(?:\.[A-Za-z_][A-Za-z0-9_$]*)*|"[^"]*"?)
    | (?P<op><=|>=|!=|<>|==|=|<|>)
    | (?P<punct>[(),])
    | (?P<other>\S)
    )""",
    re.VERBOSE,
)
_VALUE = "a value (a number, a 'quoted string', true or false)"
_COMPARISON = "a comparison (=, !=, <, <=, >, >=, in, not in, like, between, is null)"
_KEYWORDS = {"and", "or", "not", "in", "like", "between", "is", "null", "nan", "true", "false"}


def explain_parse_error(text: str) -> str:
    """Where ``text`` stops being a valid filter and what was expected there, in under 200 chars.

    It reads the text with a small walk of the grammar, no parser: the text was parsed already.
    """
    shown = text if len(text) <= 60 else text[:57] + "..."
    problem = _first_problem(text)
    if problem is None:
        return f"cannot parse row filter {shown!r}"
    return f"cannot parse row filter {shown!r}: {problem}"[:199]


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        kind = m.lastgroup or "other"
        out.append((kind, m.group(kind), m.start(kind) + 1))
        pos = m.end()
    return out


def _first_problem(text: str) -> str | None:
    """A small walk of the grammar (condition (and|or condition)*), reporting the first misstep."""
    toks = _tokens(text)
    i = 0
    depth = 0

    def at(j: int) -> str:
        if j >= len(toks):
            return "at the end"
        return f"at column {toks[j][2]} ({toks[j][1]!r})"

    def word(j: int) -> str:
        return toks[j][1].lower() if j < len(toks) and toks[j][0] == "name" else ""

    def value(j: int, after: str) -> tuple[int, str | None]:
        if j < len(toks) and (toks[j][0] in ("number", "string") or word(j) in ("true", "false")):
            if toks[j][0] == "string" and (len(toks[j][1]) < 2 or not toks[j][1].endswith("'")):
                return j, f"{at(j)}: the string has no closing quote"
            return j + 1, None
        if j < len(toks) and toks[j][0] == "name" and word(j) not in _KEYWORDS:
            return j, f"{at(j)}: expected {_VALUE} after {after!r}; strings need quotes: '{toks[j][1]}'"
        return j, f"{at(j)}: expected {_VALUE} after {after!r}"

    while True:
        # a condition
        while word(i) == "not":
            i += 1
        if i < len(toks) and toks[i][1] == "(":
            depth += 1
            i += 1
            continue
        if i >= len(toks) or toks[i][0] != "name" or word(i) in _KEYWORDS - {"true", "false"}:
            if i < len(toks) and toks[i][0] in ("number", "string"):
                return f"{at(i)}: expected a column name (write the column first: col = value)"
            return f"{at(i)}: expected a column name"
        column = toks[i][1]
        i += 1
        if i < len(toks) and toks[i][0] == "op":
            op = toks[i][1]
            i, problem = value(i + 1, op)
            if problem:
                return problem
        elif word(i) == "is":
            i += 1
            if word(i) == "not":
                i += 1
            if word(i) not in ("null", "nan"):
                return f"{at(i)}: expected null or nan after 'is'"
            i += 1
        elif word(i) in ("in", "not", "like", "between"):
            if word(i) == "not":
                i += 1
                if word(i) not in ("in", "like"):
                    return f"{at(i)}: expected 'in' or 'like' after '{column} not'"
            kw = word(i)
            i += 1
            if kw == "in":
                if i >= len(toks) or toks[i][1] != "(":
                    return f"{at(i)}: expected '(' after 'in'"
                i += 1
                while True:
                    i, problem = value(i, "in (")
                    if problem:
                        return problem
                    if i < len(toks) and toks[i][1] == ",":
                        i += 1
                        continue
                    if i < len(toks) and toks[i][1] == ")":
                        i += 1
                        break
                    return f"{at(i)}: expected ',' or ')' in the 'in' list"
            elif kw == "like":
                if i >= len(toks) or toks[i][0] != "string":
                    return f"{at(i)}: expected a 'quoted pattern' after 'like'"
                i += 1
            else:
                i, problem = value(i, "between")
                if problem:
                    return problem
                if word(i) != "and":
                    return f"{at(i)}: expected 'and' in 'between ... and ...'"
                i, problem = value(i + 1, "and")
                if problem:
                    return problem
        else:
            return f"{at(i)}: expected {_COMPARISON} after {column!r}"
        # after a condition
        while i < len(toks) and toks[i][1] == ")":
            if depth == 0:
                return f"{at(i)}: ')' without '('"
            depth -= 1
            i += 1
        if i >= len(toks):
            return "at the end: expected ')'" if depth else None
        if word(i) in ("and", "or"):
            i += 1
            continue
        return f"{at(i)}: expected 'and', 'or' or the end of the filter"


def dates_as_midnight(expr: BooleanExpression, schema: Schema, *, case_sensitive: bool) -> BooleanExpression:
    """``expr`` with each 'YYYY-MM-DD' string compared to a timestamp column read as that midnight.

    Spark SQL casts a date literal to a timestamp the same way; the zone of a ``timestamptz``
    midnight is UTC (icemor's session zone).
    """
    if isinstance(expr, And):
        return And(
            dates_as_midnight(expr.left, schema, case_sensitive=case_sensitive),
            dates_as_midnight(expr.right, schema, case_sensitive=case_sensitive),
        )
    if isinstance(expr, Or):
        return Or(
            dates_as_midnight(expr.left, schema, case_sensitive=case_sensitive),
            dates_as_midnight(expr.right, schema, case_sensitive=case_sensitive),
        )
    if isinstance(expr, Not):
        return Not(dates_as_midnight(expr.child, schema, case_sensitive=case_sensitive))
    if not isinstance(expr, (LiteralPredicate, SetPredicate)):
        return expr
    name = getattr(expr.term, "name", None)
    if name is None:
        return expr
    try:
        field = schema.find_field(name, case_sensitive=case_sensitive)
    except ValueError:
        return expr  # bind reports the unknown column
    if isinstance(field.field_type, (TimestamptzType, TimestamptzNanoType)):
        suffix = "T00:00:00+00:00"
    elif isinstance(field.field_type, (TimestampType, TimestampNanoType)):
        suffix = "T00:00:00"
    else:
        return expr

    def fix(lit: object) -> object:
        if isinstance(lit, StringLiteral) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", lit.value):
            return StringLiteral(lit.value + suffix)
        return lit

    if isinstance(expr, LiteralPredicate):
        return type(expr)(expr.term, fix(expr.literal))
    return type(expr)(expr.term, {fix(lit) for lit in expr.literals})


def flatten_filter(expr: BooleanExpression) -> BooleanExpression:
    """Flatten ``and``/``or`` chains into balanced trees, merging ``col = v or col = w…`` into ``IN``.

    Equalities and ``IN`` on the same column under one ``or`` become one ``IN``, and
    inequalities and ``NOT IN`` under one ``and`` one ``NOT IN`` (the same rows, NULLs included,
    two-valued as :mod:`icemor.expr.condition` means them); repeated operands are kept once.
    Chains are collected without recursion and rebuilt balanced, so a left-deep tree of any
    length (``functools.reduce(Or, …)``) binds and evaluates at logarithmic depth. A
    10,000-term ``or`` of equalities is then one ``IN``, which Arrow evaluates as one hash lookup
    instead of a 10,000-node expression (such a tree overflowed Arrow's native stack: a segfault).
    """
    if isinstance(expr, Not):
        return Not(flatten_filter(expr.child))
    if not isinstance(expr, And | Or):
        return expr
    op = type(expr)
    operands: list[BooleanExpression] = []
    stack: list[BooleanExpression] = [expr]
    while stack:  # depth-first, left to right, without recursion along the chain
        node = stack.pop()
        if type(node) is op:
            stack.extend((node.right, node.left))
        else:
            operands.append(flatten_filter(node))
    if op is Or:
        operands = _merge_sets(operands, EqualTo, In, _in)
    else:
        operands = _merge_sets(operands, NotEqualTo, NotIn, _not_in)
    seen: set[str] = set()
    unique = []
    for e in operands:
        key = repr(e)
        if key not in seen:
            seen.add(key)
            unique.append(e)
    if len(unique) == 1:
        return unique[0]
    return op(*unique)  # pyiceberg builds three or more operands as a balanced tree


# In's and NotIn's pydantic models hide their (term, literals) constructors from mypy
_in = cast("Callable[[str, set[Any]], BooleanExpression]", In)
_not_in = cast("Callable[[str, set[Any]], BooleanExpression]", NotIn)


def _merge_sets(
    operands: list[BooleanExpression],
    single: type,
    many: type,
    build: Callable[[str, set[Any]], BooleanExpression],
) -> list[BooleanExpression]:
    """Operands with every ``single`` (``col = v``) and ``many`` (``col IN (…)``) predicate on one
    column merged into one ``many`` predicate, at the place of the first."""
    literals: dict[str, set[Any]] = {}
    first: dict[str, int] = {}
    out: list[BooleanExpression | None] = []
    for e in operands:
        if isinstance(e, single | many) and isinstance(e.term, Reference):  # type: ignore[attr-defined]
            name = e.term.name  # type: ignore[attr-defined]
            values = {e.literal} if isinstance(e, single) else set(e.literals)  # type: ignore[attr-defined]
            if name in literals:
                literals[name] |= values
                continue
            literals[name] = values
            first[name] = len(out)
            out.append(None)  # placeholder, keeps the operands' order
        else:
            out.append(e)
    for name, i in first.items():
        out[i] = build(name, literals[name])  # one value: pyiceberg makes it (Not)EqualTo again
    return [e for e in out if e is not None]
