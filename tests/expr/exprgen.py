"""Random SQL expressions from the subset both engines mean the same by (docs/sql.md).

A typed generator: each expression knows its kind (int, double, decimal, string, date,
timestamp, bool) and, for numbers, a bound on its magnitude, so that it never leaves the
range where the engines agree (Spark wraps an integer overflow where DuckDB raises; a decimal
product of more than 18 digits overflows in DuckDB; Spark rounds decimals past 38 digits).
Every composite is parenthesised: precedence is tested separately (docs/sql.md lists where
it differs). Columns: ``i`` int32, ``l`` int64, ``f`` double, ``m`` decimal(10,2), ``s``
string, ``d`` date, ``t`` timestamptz (UTC), ``b`` boolean; ``rid`` orders the rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa
from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

UTC = dt.UTC

TABLE = pa.table(
    {
        "rid": pa.array(range(10), pa.int32()),
        "i": pa.array([1, -7, 0, None, 3, -2, 1000, 5, 12, -1], pa.int32()),
        "l": pa.array([10, None, -3, 0, 123456, 2, -100000, 7, -1, 3], pa.int64()),
        "f": pa.array([1.5, -2.5, None, 0.0, 2.25, -0.0, 1000.0, 0.1, 3.0, -7.75], pa.float64()),
        "m": pa.array(
            [
                Decimal(x) if x else None
                for x in [
                    "1.25",
                    "-3.50",
                    "0.00",
                    None,
                    "12.34",
                    "2.50",
                    "-0.05",
                    "100.00",
                    "7.00",
                    "-999.99",
                ]
            ],
            pa.decimal128(10, 2),
        ),
        "s": pa.array(["abc", "", None, " A b ", "10", "x%_y", "Ab", "é!", "a!b%", "zz"], pa.string()),
        "d": pa.array(
            [
                dt.date(2024, 1, 31),
                dt.date(1970, 1, 1),
                dt.date(2000, 2, 29),
                None,
                dt.date(1969, 12, 31),
                dt.date(2024, 12, 31),
                dt.date(2023, 3, 1),
                dt.date(2024, 2, 29),
                dt.date(1999, 12, 31),
                dt.date(2024, 6, 15),
            ],
            pa.date32(),
        ),
        "t": pa.array(
            [
                dt.datetime(2024, 1, 31, 23, 59, 59, 123456, UTC),
                dt.datetime(1970, 1, 1, tzinfo=UTC),
                dt.datetime(1969, 12, 31, 12, tzinfo=UTC),
                dt.datetime(2000, 2, 29, 0, 0, 1, tzinfo=UTC),
                None,
                dt.datetime(2024, 6, 1, tzinfo=UTC),
                dt.datetime(2024, 3, 10, 2, 30, tzinfo=UTC),
                dt.datetime(2023, 12, 31, 23, 0, tzinfo=UTC),
                dt.datetime(2024, 2, 29, 12, 0, 0, 500000, UTC),
                dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        "b": pa.array([True, False, None, True, False, None, True, True, False, False], pa.bool_()),
    }
)

INT_LIMIT = 2**31 - 1  # int32 results: below it (Spark wraps, DuckDB raises)
DECIMAL_DIGITS = 17  # DuckDB keeps a product of two DECIMAL(<=18) in 18 digits


@dataclass(frozen=True)
class E:
    """One expression: SQL text, kind, and for numbers a bound on |value|."""

    sql: str
    kind: str
    bound: float = 0.0
    scale: int = 0  # decimal: Spark's scale (DuckDB's is the same for + - * %)
    prec: int = 0  # decimal: Spark's precision (> 38: Spark rounds; refused)
    i32: bool = False  # int: INTEGER in DuckDB and int in Spark (what date + n takes)
    literal: float | None = None  # a numeric literal's value


NUMERIC = ("int", "double", "decimal")
TEMPORAL = ("date", "timestamp")


def group(kind: str) -> str:
    """Kinds that mix in comparisons, CASE, coalesce, IN, BETWEEN."""
    if kind in NUMERIC:
        return "number"
    if kind in TEMPORAL:
        return "temporal"
    return kind


def ok(e: E) -> bool:
    if e.kind == "int":
        return e.bound <= INT_LIMIT
    if e.kind == "decimal":
        return e.prec <= 38 and e.bound * 10.0**e.scale < 10.0**DECIMAL_DIGITS
    return True


def as_decimal(e: E) -> tuple[int, int]:
    """(precision, scale) of ``e`` in decimal arithmetic (ints conservatively as 20 digits)."""
    if e.kind == "decimal":
        return e.prec, e.scale
    return (10 if e.i32 else 20), 0


# ---- leaves --------------------------------------------------------------------------------

_DATES = ["2024-01-31", "1970-01-01", "2000-02-29", "2024-03-01", "1969-12-31"]
_TIMESTAMPS = ["2024-01-31 23:59:59", "1970-01-01 00:00:00", "2000-02-29 12:00:00", "2024-06-01 00:00:00"]
STRINGS = ["abc", "", "A", "b", "x%_y", "é", " ", "zz", "10", "a!b%", "Ab"]
_TYPED_NULL = {
    "int": "CAST(NULL AS INT)",
    "double": "CAST(NULL AS DOUBLE)",
    "decimal": "CAST(NULL AS DECIMAL(10,2))",
    "string": "CAST(NULL AS STRING)",
    "date": "CAST(NULL AS DATE)",
    "timestamp": "CAST(NULL AS TIMESTAMP)",
    "bool": "CAST(NULL AS BOOLEAN)",
}


def int_literal(v: int) -> E:
    return E(f"({v})" if v < 0 else str(v), "int", abs(v), i32=True, literal=v)


def leaf(draw: st.DrawFn, kind: str) -> E:
    choice = draw(st.integers(0, 9))
    if choice == 0:
        null = _TYPED_NULL[kind]
        if kind == "decimal":
            return E(null, kind, 0, scale=2, prec=10)
        return E(null, kind, 0, i32=kind == "int")
    column = choice <= 5
    if kind == "int":
        if column:
            return draw(st.sampled_from([E("i", "int", 1000, i32=True), E("l", "int", 123456)]))
        return int_literal(draw(st.integers(-20, 20)))
    if kind == "double":
        if column:
            return E("f", "double", 1000)
        v = draw(st.sampled_from([0.5, 1.5, -2.25, 0.1, 3.0, 10.0, -0.75]))
        return E(f"({v}e0)" if v < 0 else f"{v}e0", "double", abs(v), literal=v)
    if kind == "decimal":
        if column:
            return E("m", "decimal", 1000, scale=2, prec=10)
        text = draw(st.sampled_from(["1.5", "0.25", "-2.75", "100.5", "0.05", "3.0"]))
        d = Decimal(text)
        scale = -int(d.as_tuple().exponent)  # type: ignore[operator]
        prec = max(len(d.as_tuple().digits), scale)
        return E(f"({text})" if d < 0 else text, "decimal", float(abs(d)), scale=scale, prec=prec,
                 literal=float(d))  # fmt: skip
    if kind == "string":
        if column:
            return E("s", "string")
        return E(f"'{draw(st.sampled_from(STRINGS))}'", "string")
    if kind == "date":
        if column:
            return E("d", "date")
        return E(f"DATE '{draw(st.sampled_from(_DATES))}'", "date")
    if kind == "timestamp":
        if column:
            return E("t", "timestamp")
        return E(f"TIMESTAMP '{draw(st.sampled_from(_TIMESTAMPS))}'", "timestamp")
    assert kind == "bool"
    if column:
        return E("b", "bool")
    return E(draw(st.sampled_from(["TRUE", "FALSE"])), "bool")


# ---- composites ----------------------------------------------------------------------------


def expr(draw: st.DrawFn, kind: str, depth: int) -> E:
    """An expression of ``kind``; a leaf at depth 0 or when the composite drawn does not fit."""
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return leaf(draw, kind)
    makers = _MAKERS[kind]
    e = draw(st.sampled_from(makers))(draw, depth - 1)
    return e if e is not None and ok(e) else leaf(draw, kind)


def number(draw: st.DrawFn, depth: int, kinds: Sequence[str] = NUMERIC) -> E:
    return expr(draw, draw(st.sampled_from(list(kinds))), depth)


def arith_kind(a: E, b: E) -> str:
    if "double" in (a.kind, b.kind):
        return "double"
    if "decimal" in (a.kind, b.kind):
        return "decimal"
    return "int"


def arith(draw: st.DrawFn, depth: int, want: str) -> E | None:
    """a + b, a - b, a * b, a % b over numbers, giving kind ``want``."""
    allowed = {"int": ("int",), "decimal": ("int", "decimal"), "double": NUMERIC}[want]
    a = number(draw, depth, allowed)
    b = number(draw, depth, allowed)
    if arith_kind(a, b) != want:
        return None
    op = draw(st.sampled_from(["+", "-", "*", "%"]))
    bound = {"+": a.bound + b.bound, "-": a.bound + b.bound, "*": a.bound * b.bound, "%": a.bound}[op]
    sql = f"({a.sql} {op} {b.sql})"
    if want == "int":
        return E(sql, "int", bound, i32=a.i32 and b.i32)
    if want == "double":
        return E(sql, "double", bound)
    (p1, s1), (p2, s2) = as_decimal(a), as_decimal(b)
    if op == "*":
        prec, scale = p1 + p2 + 1, s1 + s2
    elif op == "%":
        scale = max(s1, s2)
        prec = min(p1 - s1, p2 - s2) + scale
    else:
        scale = max(s1, s2)
        prec = max(p1 - s1, p2 - s2) + scale + 1
    return E(sql, "decimal", bound, scale=scale, prec=prec)


def divide(draw: st.DrawFn, depth: int) -> E:
    """a / b over ints and doubles: a double in both engines (decimals: docs/sql.md)."""
    a = number(draw, depth, ("int", "double"))
    b = number(draw, depth, ("int", "double"))
    bound = a.bound * 2 if b.literal is not None and abs(b.literal) >= 0.5 else float("inf")
    return E(f"({a.sql} / {b.sql})", "double", bound)


def unary(draw: st.DrawFn, depth: int, kind: str) -> E:
    a = expr(draw, kind, depth)
    fn = draw(st.sampled_from(["abs", "-"]))
    return replace(a, sql=f"abs({a.sql})" if fn == "abs" else f"(- {a.sql})", literal=None)


def rounded(draw: st.DrawFn, depth: int, kind: str) -> E | None:
    a = expr(draw, kind, depth)
    if kind == "int":
        return E(f"round({a.sql}, -1)", "int", a.bound + 10, i32=a.i32)
    if kind == "double":  # round(x, n > 0) of a double differs at decimal ties: docs/sql.md
        return E(f"round({a.sql})", "double", a.bound + 1)
    k = draw(st.integers(0, 2))
    return E(f"round({a.sql}, {k})", "decimal", a.bound + 1, scale=min(k, a.scale), prec=a.prec + 1)


def ceil_floor(draw: st.DrawFn, depth: int, source: str) -> E | None:
    a = expr(draw, source, depth)
    fn = draw(st.sampled_from(["ceil", "floor"]))
    if source == "double":  # Spark: BIGINT, DuckDB: DOUBLE; the same numbers below 2^53
        return E(f"{fn}({a.sql})", "double", a.bound + 1) if a.bound < 1e15 else None
    return E(f"{fn}({a.sql})", "decimal", a.bound + 1, scale=0, prec=a.prec - a.scale + 1)


def int_of(draw: st.DrawFn, depth: int) -> E:
    """Integer functions of other kinds."""
    pick = draw(st.integers(0, 5))
    if pick == 0:
        s = expr(draw, "string", depth)
        return E(f"length({s.sql})", "int", 100)
    if pick == 1:
        s = expr(draw, "string", depth)
        sub = draw(st.sampled_from(STRINGS))
        if draw(st.booleans()):
            return E(f"instr({s.sql}, '{sub}')", "int", 100)
        return E(f"position('{sub}' IN {s.sql})", "int", 100)
    if pick == 2:
        x = expr(draw, draw(st.sampled_from(TEMPORAL)), depth)
        fn = draw(st.sampled_from(
            ["year", "month", "day", "quarter", "dayofyear", "dayofweek", "dayofmonth", "weekofyear"]))  # fmt: skip
        return E(f"{fn}({x.sql})", "int", 3000)
    if pick == 3:
        x = expr(draw, "timestamp", depth)
        fn = draw(st.sampled_from(["hour", "minute", "second"]))
        return E(f"{fn}({x.sql})", "int", 60)
    if pick == 4:
        x = expr(draw, draw(st.sampled_from(TEMPORAL)), depth)
        field = draw(st.sampled_from(["YEAR", "MONTH", "DAY", "QUARTER"]))
        return E(f"extract({field} FROM {x.sql})", "int", 3000)
    a = expr(draw, draw(st.sampled_from(["int", "bool"])), depth)
    if a.kind == "bool":
        return E(f"CAST({a.sql} AS INT)", "int", 1, i32=True)
    return E(f"CAST({a.sql} AS INT)", "int", a.bound, i32=True) if a.bound <= INT_LIMIT else a


def double_of(draw: st.DrawFn, depth: int) -> E:
    a = number(draw, depth, ("int", "decimal"))
    if draw(st.booleans()):
        return E(f"CAST({a.sql} AS DOUBLE)", "double", a.bound)
    return E(f"sign({number(draw, depth).sql})", "double", 1)  # Spark: DOUBLE, DuckDB: the input's


def decimal_of(draw: st.DrawFn, depth: int) -> E | None:
    a = number(draw, depth, ("int", "decimal"))
    target, scale, prec = draw(st.sampled_from([("DECIMAL(10,2)", 2, 10), ("DECIMAL(10,1)", 1, 10),
                                                ("DECIMAL(12,4)", 4, 12)]))  # fmt: skip
    if a.bound * 10.0**scale >= 10.0 ** (prec - 1):  # overflow: Spark NULL, DuckDB error
        return None
    return E(f"CAST({a.sql} AS {target})", "decimal", a.bound + 1, scale=scale, prec=prec)


def choice_of(draw: st.DrawFn, depth: int, kind: str) -> E | None:
    """CASE, coalesce, ifnull, nullif, if, greatest, least: values of one group."""
    wanted = group(kind)

    def value() -> E:
        if wanted == "number":
            # int with decimal is a decimal, anything with a double a double
            kinds = {"int": ("int",), "decimal": ("int", "decimal"), "double": NUMERIC}[kind]
            return number(draw, depth, kinds)
        if wanted == "temporal":
            return expr(draw, kind if kind == "date" else draw(st.sampled_from(TEMPORAL)), depth)
        return expr(draw, kind, depth)

    values = [value() for _ in range(draw(st.integers(2, 3)))]
    out_kind = kind
    if wanted == "number":
        out_kind = values[0].kind
        for v in values[1:]:
            out_kind = arith_kind(E("", out_kind), v)
        if out_kind != kind:
            return None
    if wanted == "temporal" and kind == "timestamp" and all(v.kind == "date" for v in values):
        return None
    form = draw(st.integers(0, 6))
    a, b = values[0], values[1]
    if form == 0:
        cond = expr(draw, "bool", depth)
        arms = f"WHEN {cond.sql} THEN {a.sql}"
        if len(values) == 3:
            arms += f" WHEN {expr(draw, 'bool', depth).sql} THEN {values[2].sql}"
        tail = f" ELSE {b.sql}" if draw(st.booleans()) else ""
        sql = f"CASE {arms}{tail} END"
    elif form == 1:
        x = expr(draw, draw(st.sampled_from(["int", "string"])), depth)
        lit = (
            int_literal(draw(st.integers(-2, 3))).sql
            if x.kind == "int"
            else f"'{draw(st.sampled_from(STRINGS))}'"
        )
        sql = f"CASE {x.sql} WHEN {lit} THEN {a.sql} ELSE {b.sql} END"
    elif form == 2:
        sql = f"coalesce({', '.join(v.sql for v in values)})"
    elif form == 3:
        sql = f"ifnull({a.sql}, {b.sql})"
    elif form == 4:
        # nullif's type is its first argument's (nullif(i, m) is an INT, not a DECIMAL), and
        # floor/ceil of an INT differ in type (docs/sql.md): generated for one numeric kind only
        if wanted == "number" and not a.kind == b.kind == kind:
            return None
        sql = f"nullif({a.sql}, {b.sql})"
    elif form == 5:
        sql = f"if({expr(draw, 'bool', depth).sql}, {a.sql}, {b.sql})"
    else:
        sql = f"{draw(st.sampled_from(['greatest', 'least']))}({', '.join(v.sql for v in values)})"
    bound = max(v.bound for v in values)
    if out_kind == "decimal":
        scale = max(as_decimal(v)[1] for v in values)
        prec = max(as_decimal(v)[0] - as_decimal(v)[1] for v in values) + scale
        return E(sql, "decimal", bound, scale=scale, prec=prec)
    return E(sql, out_kind, bound, i32=all(v.i32 for v in values))


def stringable(draw: st.DrawFn, depth: int) -> E | None:
    """A value whose text is the same in both engines (not a double, a timestamp, a decimal of
    scale > 6: Java prints 1E-8)."""
    a = expr(draw, draw(st.sampled_from(["string", "string", "int", "decimal", "date", "bool"])), depth)
    return None if a.kind == "decimal" and a.scale > 6 else a


def string_of(draw: st.DrawFn, depth: int) -> E | None:
    pick = draw(st.integers(0, 10))
    s = expr(draw, "string", depth)
    if pick == 0:
        return E(f"{draw(st.sampled_from(['upper', 'lower', 'trim', 'ltrim', 'rtrim', 'reverse']))}({s.sql})",
                 "string")  # fmt: skip
    if pick == 1:
        pos = int_literal(draw(st.integers(-6, 6))).sql
        if draw(st.booleans()):
            return E(f"{draw(st.sampled_from(['substring', 'substr']))}({s.sql}, {pos})", "string")
        n = int_literal(draw(st.integers(-2, 6))).sql
        return E(f"{draw(st.sampled_from(['substring', 'substr']))}({s.sql}, {pos}, {n})", "string")
    if pick == 2:
        n = int_literal(draw(st.integers(-2, 6))).sql
        return E(f"{draw(st.sampled_from(['left', 'right']))}({s.sql}, {n})", "string")
    if pick == 3:
        old, new = draw(st.sampled_from(STRINGS)), draw(st.sampled_from(STRINGS))
        return E(f"replace({s.sql}, '{old}', '{new}')", "string")
    if pick == 4:
        pad = draw(st.sampled_from(["*", "xy", "é"]))  # an empty pad: docs/sql.md
        fn = draw(st.sampled_from(["lpad", "rpad"]))
        return E(f"{fn}({s.sql}, {draw(st.integers(0, 7))}, '{pad}')", "string")
    if pick == 5:
        return E(f"repeat({s.sql}, {int_literal(draw(st.integers(-1, 2))).sql})", "string")
    if pick in (6, 7):
        parts = [stringable(draw, depth) for _ in range(draw(st.integers(2, 3)))]
        if any(p is None for p in parts):
            return None
        texts = [p.sql for p in parts if p is not None]
        if pick == 6:
            return E("(" + " || ".join(texts) + ")", "string")
        return E(f"concat({', '.join(texts)})", "string")
    if pick == 8:
        a, b = stringable(draw, depth), stringable(draw, depth)
        if a is None or b is None:
            return None
        return E(f"concat_ws('{draw(st.sampled_from(['-', '', ', ']))}', {a.sql}, {b.sql})", "string")
    if pick == 9:
        a = stringable(draw, depth)
        return None if a is None else E(f"CAST({a.sql} AS STRING)", "string")
    return choice_of(draw, depth, "string")


def date_of(draw: st.DrawFn, depth: int) -> E | None:
    pick = draw(st.integers(0, 4))
    d = expr(draw, "date", depth)
    if pick in (0, 1):
        n = expr(draw, "int", depth)
        if not n.i32 or n.bound > 100_000:  # date + n: INTEGER in both engines (docs/sql.md)
            return None
        if pick == 0:
            return E(f"({d.sql} {draw(st.sampled_from(['+', '-']))} {n.sql})", "date")
        return E(f"date_add({d.sql}, {n.sql})", "date")
    if pick == 2:
        return E(f"last_day({d.sql})", "date")
    if pick == 3:
        return E(f"CAST({expr(draw, 'timestamp', depth).sql} AS DATE)", "date")
    return choice_of(draw, depth, "date")


def timestamp_of(draw: st.DrawFn, depth: int) -> E | None:
    pick = draw(st.integers(0, 3))
    if pick == 0:
        t = expr(draw, "timestamp", depth)
        unit = draw(st.sampled_from(["SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR"]))
        return E(f"({t.sql} {draw(st.sampled_from(['+', '-']))} INTERVAL {draw(st.integers(0, 100))} {unit})",
                 "timestamp")  # fmt: skip
    if pick == 1:
        x = expr(draw, draw(st.sampled_from(TEMPORAL)), depth)
        units = ["year", "quarter", "month", "week", "day"]
        if x.kind == "timestamp":  # of a date, DuckDB's optimizer compares these wrongly: docs/sql.md
            units += ["hour", "minute", "second"]
        return E(f"date_trunc('{draw(st.sampled_from(units))}', {x.sql})", "timestamp")
    if pick == 2:
        return E(f"CAST({expr(draw, 'date', depth).sql} AS TIMESTAMP)", "timestamp")
    return choice_of(draw, depth, "timestamp")


def like_pattern(draw: st.DrawFn) -> tuple[str, bool]:
    """A LIKE pattern and whether it needs ESCAPE '!' (never a backslash: docs/sql.md)."""
    pieces = draw(st.lists(st.sampled_from(["a", "b", "A", "%", "_", " ", "x", "é", "1", "!%", "!_", "!!"]),
                           max_size=4))  # fmt: skip
    text = "".join(pieces)
    return text, "!" in text


def comparable(draw: st.DrawFn, depth: int, *, text: bool = True) -> tuple[E, E]:
    """Two expressions both engines compare the same way (``text``: a date or timestamp may
    meet a string literal, as in comparisons, not in IN lists: docs/sql.md)."""
    groups = ["number", "number", "string", "temporal", "bool"] + (["temporal-text"] if text else [])
    g = draw(st.sampled_from(groups))
    if g == "number":
        return number(draw, depth), number(draw, depth)
    if g == "temporal":
        return (expr(draw, draw(st.sampled_from(TEMPORAL)), depth),
                expr(draw, draw(st.sampled_from(TEMPORAL)), depth))  # fmt: skip
    if g == "temporal-text":  # a date or timestamp against a well-formed string literal
        x = expr(draw, draw(st.sampled_from(TEMPORAL)), depth)
        # a date against text with a time of day: Spark drops the time, DuckDB may not
        text = draw(st.sampled_from(_DATES + (_TIMESTAMPS if x.kind == "timestamp" else [])))
        return x, E(f"'{text}'", "string")
    return expr(draw, g, depth), expr(draw, g, depth)


def bool_of(draw: st.DrawFn, depth: int) -> E | None:
    pick = draw(st.integers(0, 11))
    if pick in (0, 1):
        a, b = comparable(draw, depth)
        op = draw(st.sampled_from(["=", "<>", "!=", "<", "<=", ">", ">="]))
        return E(f"({a.sql} {op} {b.sql})", "bool")
    if pick == 2:
        a, b = comparable(draw, depth)
        return E(f"({a.sql} IS {draw(st.sampled_from(['', 'NOT ']))}DISTINCT FROM {b.sql})", "bool")
    if pick == 3:
        x, first = comparable(draw, depth, text=False)
        items = [first.sql] + [comparable_like(draw, depth, x).sql for _ in range(draw(st.integers(0, 3)))]
        if draw(st.integers(0, 3)) == 0:
            items.append("NULL")
        return E(f"({x.sql} {draw(st.sampled_from(['IN', 'NOT IN']))} ({', '.join(items)}))", "bool")
    if pick == 4:
        x, lo = comparable(draw, depth)
        hi = comparable_like(draw, depth, x)
        return E(f"({x.sql} {draw(st.sampled_from(['BETWEEN', 'NOT BETWEEN']))} {lo.sql} AND {hi.sql})",
                 "bool")  # fmt: skip
    if pick == 5:
        s = expr(draw, "string", depth)
        pattern, escape = like_pattern(draw)
        op = draw(st.sampled_from(["LIKE", "NOT LIKE", "ILIKE"]))
        return E(f"({s.sql} {op} '{pattern}'{' ESCAPE ' + repr('!') if escape else ''})", "bool")
    if pick == 6:
        x = expr(draw, draw(st.sampled_from(["int", "double", "decimal", "string", "date", "timestamp", "bool"])),
                 depth)  # fmt: skip
        return E(f"({x.sql} IS {draw(st.sampled_from(['', 'NOT ']))}NULL)", "bool")
    if pick in (7, 8):
        a, b = expr(draw, "bool", depth), expr(draw, "bool", depth)
        return E(f"({a.sql} {draw(st.sampled_from(['AND', 'OR']))} {b.sql})", "bool")
    if pick == 9:
        a = expr(draw, "bool", depth)
        if draw(st.booleans()):
            return E(f"(NOT {a.sql})", "bool")
        return E(f"({a.sql} IS {draw(st.sampled_from(['TRUE', 'FALSE', 'NOT TRUE', 'NOT FALSE']))})", "bool")
    if pick == 10:
        if draw(st.booleans()):
            return E(
                f"contains({expr(draw, 'string', depth).sql}, '{draw(st.sampled_from(STRINGS))}')", "bool"
            )
        return E(f"CAST({expr(draw, 'int', depth).sql} AS BOOLEAN)", "bool")
    return choice_of(draw, depth, "bool")


def comparable_like(draw: st.DrawFn, depth: int, x: E) -> E:
    """Another expression of ``x``'s group (for IN lists and BETWEEN bounds)."""
    g = group(x.kind)
    if g == "number":
        return number(draw, depth)
    if g == "temporal":
        return expr(draw, draw(st.sampled_from(TEMPORAL)), depth)
    return expr(draw, x.kind, depth)


_MAKERS: dict[str, list[Callable[[st.DrawFn, int], E | None]]] = {
    "int": [
        lambda draw, depth: arith(draw, depth, "int"),
        lambda draw, depth: unary(draw, depth, "int"),
        lambda draw, depth: rounded(draw, depth, "int"),
        int_of,
        lambda draw, depth: choice_of(draw, depth, "int"),
    ],
    "double": [
        lambda draw, depth: arith(draw, depth, "double"),
        divide,
        lambda draw, depth: unary(draw, depth, "double"),
        lambda draw, depth: rounded(draw, depth, "double"),
        lambda draw, depth: ceil_floor(draw, depth, "double"),
        double_of,
        lambda draw, depth: choice_of(draw, depth, "double"),
    ],
    "decimal": [
        lambda draw, depth: arith(draw, depth, "decimal"),
        lambda draw, depth: unary(draw, depth, "decimal"),
        lambda draw, depth: rounded(draw, depth, "decimal"),
        lambda draw, depth: ceil_floor(draw, depth, "decimal"),
        decimal_of,
        lambda draw, depth: choice_of(draw, depth, "decimal"),
    ],
    "string": [string_of],
    "date": [date_of],
    "timestamp": [timestamp_of],
    "bool": [bool_of],
}

KINDS = ("bool", "bool", "bool", "int", "double", "decimal", "string", "date", "timestamp")


@st.composite
def expressions(draw: st.DrawFn, kinds: Sequence[str] = KINDS, depth: int = 3) -> E:
    """One expression of a kind drawn from ``kinds``."""
    return expr(draw, draw(st.sampled_from(list(kinds))), depth)
