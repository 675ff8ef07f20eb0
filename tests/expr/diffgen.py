"""Generated tables and conditions for the differential test (tests/expr/test_differential.py).

Everything comes from one seed (``random.Random``): the rows of several data files with
different value ranges (so file pruning by column metrics matters), and conditions over them,
as Spark SQL text from the subset docs/sql.md documents and as pyiceberg expression objects.

Columns (an Iceberg schema, created by pyiceberg, written by Iceberg Java): ``id`` (unique,
required), ``i`` int, ``l`` long, ``f`` double, ``r`` float, ``s`` string, ``m`` decimal(10,2),
``w`` decimal(38,10), ``d`` date, ``ts`` timestamp, ``tz`` timestamptz, ``u`` uuid, ``b``
boolean and ``st`` a struct of ``a`` int, ``b`` string, ``c`` double. Every nullable column
holds NULLs; doubles and floats hold NaN, ±0.0 and ±inf; dates and timestamps 0001-01-01 and
9999-12-31; one file has every nullable column NULL, one has only NaN in ``f`` and ``r``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pyiceberg import expressions as E
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
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.expressions import BooleanExpression

UTC = dt.UTC

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "i", IntegerType()),
    NestedField(3, "l", LongType()),
    NestedField(4, "f", DoubleType()),
    NestedField(5, "r", FloatType()),
    NestedField(6, "s", StringType()),
    NestedField(7, "m", DecimalType(10, 2)),
    NestedField(8, "w", DecimalType(38, 10)),
    NestedField(9, "d", DateType()),
    NestedField(10, "ts", TimestampType()),
    NestedField(11, "tz", TimestamptzType()),
    NestedField(12, "u", UUIDType()),
    NestedField(13, "b", BooleanType()),
    NestedField(
        14,
        "st",
        StructType(
            NestedField(15, "a", IntegerType()),
            NestedField(16, "b", StringType()),
            NestedField(17, "c", DoubleType()),
        ),
    ),
)
COLUMNS = [f.name for f in SCHEMA.fields]
# the kind of each scalar a condition can name (nested fields dotted)
KINDS: dict[str, str] = {
    "i": "int", "l": "long", "f": "double", "r": "float", "s": "string", "m": "dec", "w": "wide",
    "d": "date", "ts": "ts", "tz": "tz", "u": "uuid", "b": "bool",
    "st.a": "int", "st.b": "string", "st.c": "double",
}  # fmt: skip
NUMBERS = {"int", "long", "double", "float", "dec", "wide"}

NAN = float("nan")
INF = float("inf")


def f32(x: float) -> float:
    """``x`` rounded to the nearest float32, as a Python float."""
    if math.isnan(x) or math.isinf(x):
        return x
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


# ---- values ---------------------------------------------------------------------------------

STRINGS = ["", " ", "a", "A", "ab", "abc", "aBc", "a%b", "a_b", "b", "ba", "é", "éa", "日本", "zz", "z",
           "100", "10", "x y", "🙂"]  # fmt: skip
DATE_EDGES = [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(1969, 12, 31),
              dt.date(2000, 2, 29), dt.date(1582, 10, 10)]  # fmt: skip
TS_EDGES = [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 2, 29, 12),
            dt.datetime(1582, 10, 10, 1, 2, 3)]  # fmt: skip
DOUBLE_EDGES = [NAN, 0.0, -0.0, INF, -INF, 1e308, -1e-300, 0.1, 1.5]
FLOAT_EDGES = [NAN, 0.0, -0.0, INF, -INF, 3e38, -1e-30, 0.1, 1.5]
INT_EDGES = [0, -1, 1, 2**31 - 1, -(2**31)]
LONG_EDGES = [0, -1, 2**63 - 1, -(2**63), 2**40]
DEC_EDGES = [Decimal("0.00"), Decimal("-0.01"), Decimal("99999999.99"), Decimal("-99999999.99")]
WIDE_EDGES = [Decimal("0E-10"), Decimal("1234567890123456789012345678.1234567890"),
              Decimal("-9999999999999999999999999999.9999999999"), Decimal("0.0000000001")]  # fmt: skip


@dataclass
class FileProfile:
    """How one data file's values are drawn: a base that shifts its ranges, what is special."""

    base: int
    rows: int
    all_null: bool = False  # every nullable column NULL
    only_nan: bool = False  # f and r NaN in every row
    null_rate: float = 0.15
    edge_rate: float = 0.15


PROFILES = [
    FileProfile(base=-300, rows=34),
    FileProfile(base=0, rows=34),
    FileProfile(base=300, rows=34),
    FileProfile(base=600, rows=30, edge_rate=0.5),
    FileProfile(base=0, rows=16, all_null=True),
    FileProfile(base=100, rows=18, only_nan=True),
    FileProfile(base=-20, rows=30, edge_rate=0.4),  # NaN beside small values and ±0.0
    FileProfile(base=900, rows=30),
]
LATE_PROFILE = FileProfile(base=50, rows=24, edge_rate=0.3)
"""Appended after the equality deletes: they do not apply to it (its sequence number is higher)."""


def generate_rows(rng: random.Random, profile: FileProfile, first_id: int) -> list[dict[str, Any]]:
    """One data file's rows (Python values: ``ts`` naive, ``tz`` in UTC, ``u`` a UUID)."""
    rows = []
    for k in range(profile.rows):
        row: dict[str, Any] = {"id": first_id + k}
        for name in COLUMNS[1:]:
            if profile.all_null or rng.random() < profile.null_rate:
                row[name] = None
            else:
                row[name] = _value(rng, name, profile)
        if profile.only_nan:
            row["f"], row["r"] = NAN, NAN
        rows.append(row)
    return rows


def _value(rng: random.Random, name: str, p: FileProfile) -> Any:
    edge = rng.random() < p.edge_rate
    b = p.base
    if name == "i":
        return rng.choice(INT_EDGES) if edge else b + rng.randint(0, 99)
    if name == "l":
        return rng.choice(LONG_EDGES) if edge else (b + rng.randint(0, 99)) * 1_000_003
    if name == "f":
        return rng.choice(DOUBLE_EDGES) if edge else b + rng.randint(0, 400) / 4
    if name == "r":
        return f32(rng.choice(FLOAT_EDGES)) if edge else f32(b / 10 + rng.randint(0, 40) / 8)
    if name == "s":
        if edge:
            return rng.choice(STRINGS)
        return chr(ord("c") + (b // 100 + 3) % 20) + rng.choice(STRINGS)
    if name == "m":
        return rng.choice(DEC_EDGES) if edge else Decimal(b * 100 + rng.randint(0, 9999)).scaleb(-2)
    if name == "w":
        if edge:
            return rng.choice(WIDE_EDGES)
        return Decimal(b * 10**12 + rng.randint(0, 10**12)).scaleb(-10).quantize(Decimal("1E-10"))
    if name == "d":
        if edge:
            return rng.choice(DATE_EDGES)
        return dt.date(2000, 1, 1) + dt.timedelta(days=b * 10 + rng.randint(0, 200))
    if name in ("ts", "tz"):
        if edge:
            t = rng.choice(TS_EDGES)
        else:
            t = dt.datetime(2000, 1, 1) + dt.timedelta(
                days=b * 10 + rng.randint(0, 200), seconds=rng.choice([0, 1, 3600, 86399]),
                microseconds=rng.choice([0, 0, 1, 999999]),
            )  # fmt: skip
        return t if name == "ts" else t.replace(tzinfo=UTC)
    if name == "u":
        return uuid.UUID(int=rng.getrandbits(128))
    if name == "b":
        return rng.random() < 0.5
    assert name == "st"
    if rng.random() < 0.2:  # every field NULL, the struct itself not
        return {"a": None, "b": None, "c": None}
    return {
        "a": None if rng.random() < 0.2 else b + rng.randint(0, 99),
        "b": None if rng.random() < 0.2 else rng.choice(STRINGS),
        "c": None if rng.random() < 0.2 else (rng.choice(DOUBLE_EDGES) if edge else rng.randint(0, 40) / 4),
    }


# ---- Spark SQL literals (for INSERT and for conditions) ------------------------------------


def sql_double(x: float, kind: str = "double") -> str:
    typ = "FLOAT" if kind == "float" else "DOUBLE"
    if math.isnan(x):
        return f"CAST('NaN' AS {typ})"
    if math.isinf(x):
        return f"CAST('{'-' if x < 0 else ''}Infinity' AS {typ})"
    return f"CAST('{x!r}' AS {typ})"


def sql_value(name: str, v: Any) -> str:
    """A row value as a Spark SQL literal of the column's type (for ``INSERT``)."""
    types = {"i": "INT", "l": "BIGINT", "f": "DOUBLE", "r": "FLOAT", "s": "STRING", "m": "DECIMAL(10,2)",
             "w": "DECIMAL(38,10)", "d": "DATE", "ts": "TIMESTAMP_NTZ", "tz": "TIMESTAMP", "u": "STRING",
             "b": "BOOLEAN", "st": "STRUCT<a: INT, b: STRING, c: DOUBLE>"}  # fmt: skip
    if v is None:
        return f"CAST(NULL AS {types[name]})"
    if name in ("i", "l"):
        return f"CAST({v} AS {types[name]})" if v >= 0 else f"CAST('{v}' AS {types[name]})"
    if name in ("f", "r"):
        return sql_double(v, "float" if name == "r" else "double")
    if name in ("s", "u"):
        return f"'{v}'"
    if name in ("m", "w"):
        return f"CAST('{v:f}' AS {types[name]})"
    if name == "d":
        return f"DATE '{v.isoformat()}'"
    if name == "ts":
        return f"TIMESTAMP_NTZ '{_ts_text(v)}'"
    if name == "tz":
        return f"TIMESTAMP '{_ts_text(v.replace(tzinfo=None))}'"
    if name == "b":
        return "TRUE" if v else "FALSE"
    assert name == "st"
    return (f"named_struct('a', {sql_value('i', v['a'])}, 'b', {sql_value('s', v['b'])}, "
            f"'c', {sql_value('f', v['c'])})")  # fmt: skip


def _ts_text(t: dt.datetime) -> str:
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}" + (
        f".{t.microsecond:06d}" if t.microsecond else ""
    )


def insert_sql(table: str, rows: list[dict[str, Any]]) -> str:
    """One ``INSERT`` writing ``rows`` as one data file."""
    values = ",\n".join("(" + ", ".join([str(r["id"])] + [sql_value(c, r[c]) for c in COLUMNS[1:]]) + ")"
                        for r in rows)  # fmt: skip
    return (f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ * FROM VALUES {values} "
            f"AS v({', '.join(COLUMNS)})")  # fmt: skip


# ---- conditions ------------------------------------------------------------------------------


@dataclass
class Case:
    """One generated condition: Spark SQL text, or a pyiceberg expression object."""

    number: int
    text: str | None = None
    expr: BooleanExpression | None = None
    columns: set[str] = field(default_factory=set)

    @property
    def shown(self) -> str:
        return self.text if self.text is not None else repr(self.expr)


class Literals:
    """Literals for conditions: values present in the table (so equalities hit), values between
    and beyond them (so file ranges prune), the edges."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.present: dict[str, list[Any]] = {}
        for col in KINDS:
            vals = [_get(r, col) for r in rows]
            self.present[col] = [v for v in vals if v is not None]

    def pick(self, rng: random.Random, col: str) -> Any:
        kind = KINDS[col]
        present = self.present[col]
        if present and rng.random() < 0.6:
            return rng.choice(present)
        return _fresh(rng, kind)


def _get(row: dict[str, Any], col: str) -> Any:
    if "." in col:
        parent, child = col.split(".")
        s = row[parent]
        return None if s is None else s[child]
    return row[col]


def _fresh(rng: random.Random, kind: str) -> Any:
    if kind == "int":
        return rng.choice([*INT_EDGES, rng.randint(-400, 1100)])
    if kind == "long":
        return rng.choice([*LONG_EDGES, rng.randint(-400, 1100) * 1_000_003])
    if kind == "double":
        return rng.choice(
            [0.0, -0.0, 1e308, 0.1, 1.5, float(rng.randint(-400, 1100)), rng.randint(-40, 40) / 4]
        )
    if kind == "float":
        return f32(rng.choice([0.0, -0.0, 0.1, 1.5, 3e38, float(rng.randint(-40, 120))]))
    if kind == "string":
        return rng.choice([*STRINGS, "c", "d", "m", "ca", "zzz"])
    if kind == "dec":
        return rng.choice([*DEC_EDGES, Decimal(rng.randint(-40000, 110000)).scaleb(-2)])
    if kind == "wide":
        return rng.choice([*WIDE_EDGES, Decimal(rng.randint(-400, 1100) * 10**12).scaleb(-10)])
    if kind == "date":
        return rng.choice([*DATE_EDGES, dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(-4000, 11000))])
    if kind in ("ts", "tz"):
        t = rng.choice([*TS_EDGES, dt.datetime(2000, 1, 1) + dt.timedelta(days=rng.randint(-4000, 11000))])
        return t if kind == "ts" else t.replace(tzinfo=UTC)
    if kind == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    assert kind == "bool"
    return rng.random() < 0.5


def text_literal(rng: random.Random, kind: str, v: Any, *, in_list: bool = False) -> str:
    """``v`` as Spark SQL text, in one of the spellings docs/sql.md documents for ``kind``."""
    if kind in ("int", "long"):
        return str(v)
    if kind in ("double", "float"):
        if math.isnan(v) or math.isinf(v):  # no NaN or infinite literal in the subset
            return "1e308" if v > 0 else "-1e308"
        if v == 0 and math.copysign(1, v) < 0:
            return rng.choice(["-0.0", "-0.0e0", "-0"])
        if v == int(v) and abs(v) < 1e15:
            return rng.choice([str(int(v)), f"{v!r}", f"{v!r}e0" if "e" not in repr(v) else repr(v)])
        return rng.choice([repr(v), f"{v!r}e0" if "e" not in repr(v) else repr(v)])
    if kind in ("dec", "wide"):
        if v == v.to_integral_value() and rng.random() < 0.5:
            return str(int(v))
        return format(v, "f")
    if kind == "string":
        return f"'{v}'"
    if kind == "uuid":
        return f"'{v}'"
    if kind == "date":
        text = v.isoformat()
        if in_list:
            return f"DATE '{text}'"
        return rng.choice([f"DATE '{text}'", f"'{text}'"])
    if kind in ("ts", "tz"):
        naive = v.replace(tzinfo=None)
        text = _ts_text(naive)
        if in_list:
            return f"TIMESTAMP '{text}'"
        forms = [f"TIMESTAMP '{text}'", f"'{text}'"]
        if naive.time() == dt.time(0):
            forms.append(f"'{text[:10]}'")  # a date against a timestamp: midnight
            forms.append(f"DATE '{text[:10]}'")
        return rng.choice(forms)
    assert kind == "bool"
    return "TRUE" if v else "FALSE"


TEXT_OPS = ["=", "<>", "!=", "<", "<=", ">", ">="]
LIKE_PATTERNS = ["a%", "%b", "a_c", "", "%", "é%", "c%", "_", "ab", "%a%", "a!%b", "a!_b", "z%", "日%"]


class TextGen:
    """Spark SQL conditions from the subset docs/sql.md documents, nested up to ``depth``."""

    def __init__(self, rng: random.Random, literals: Literals) -> None:
        self.rng = rng
        self.lit = literals

    def condition(self, depth: int) -> tuple[str, set[str]]:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.4:
            return self.atom()
        pick = rng.random()
        if pick < 0.4:
            (a, ca), (b, cb) = self.condition(depth - 1), self.condition(depth - 1)
            return f"({a} AND {b})", ca | cb
        if pick < 0.8:
            (a, ca), (b, cb) = self.condition(depth - 1), self.condition(depth - 1)
            return f"({a} OR {b})", ca | cb
        a, ca = self.condition(depth - 1)
        if rng.random() < 0.8:
            return f"NOT ({a})", ca
        return f"(({a}) IS {rng.choice(['TRUE', 'FALSE', 'NOT TRUE', 'NOT FALSE'])})", ca

    def atom(self) -> tuple[str, set[str]]:
        rng = self.rng
        col = rng.choice(list(KINDS))
        kind = KINDS[col]
        top = {col.split(".")[0]}
        lit = lambda: text_literal(rng, kind, self.lit.pick(rng, col))  # noqa: E731
        pick = rng.random()
        if kind == "bool" and pick < 0.3:
            return rng.choice([col, f"NOT {col}", f"{col} = TRUE", f"{col} <> FALSE", f"{col} IS TRUE",
                               f"{col} IS NOT FALSE"]), top  # fmt: skip
        if kind in ("double", "float") and pick < 0.15:
            return rng.choice([f"isnan({col})", f"NOT isnan({col})", f"isnan({col}) = FALSE"]), top
        if kind == "string" and pick < 0.2:
            pattern = rng.choice(LIKE_PATTERNS)
            op = rng.choice(["LIKE", "NOT LIKE", "ILIKE"])
            escape = " ESCAPE '!'" if "!" in pattern else ""
            return f"{col} {op} '{pattern}'{escape}", top
        if pick < 0.45:
            op = rng.choice(TEXT_OPS)
            if rng.random() < 0.2:  # the literal first
                return f"{lit()} {op} {col}", top
            return f"{col} {op} {lit()}", top
        if pick < 0.6:
            items = [text_literal(rng, kind, self.lit.pick(rng, col), in_list=True)
                     for _ in range(rng.randint(1, 4))]  # fmt: skip
            if rng.random() < 0.35:
                items.insert(rng.randint(0, len(items)), "NULL")
            return f"{col} {rng.choice(['IN', 'NOT IN'])} ({', '.join(items)})", top
        if pick < 0.7:
            return f"{col} IS {rng.choice(['', 'NOT '])}NULL", top
        if pick < 0.8 and kind != "bool":
            lo, hi = sorted([self.lit.pick(rng, col), self.lit.pick(rng, col)], key=_order_key)
            if rng.random() < 0.15:
                lo, hi = hi, lo  # an empty range
            op = rng.choice(["BETWEEN", "BETWEEN", "NOT BETWEEN"])
            return f"{col} {op} {text_literal(rng, kind, lo)} AND {text_literal(rng, kind, hi)}", top
        if pick < 0.9:
            other = [c for c, k in KINDS.items() if _group(k) == _group(kind) and c != col]
            if other:
                c2 = rng.choice(other)
                op = rng.choice([*TEXT_OPS, "IS DISTINCT FROM", "IS NOT DISTINCT FROM"])
                return f"{col} {op} {c2}", top | {c2.split(".")[0]}
        op = rng.choice(["IS DISTINCT FROM", "IS NOT DISTINCT FROM"])
        return f"{col} {op} {lit()}", top


def _group(kind: str) -> str:
    if kind in NUMBERS:
        return "number"
    if kind in ("date", "ts", "tz"):
        return "temporal"
    return kind


def _order_key(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return (1, 0.0)
    if isinstance(v, dt.datetime):
        return (0, v.replace(tzinfo=None))
    if isinstance(v, uuid.UUID):
        return (0, str(v))
    return (0, v)


# ---- pyiceberg expression objects ----------------------------------------------------------


def object_literal(rng: random.Random, kind: str, v: Any) -> Any:
    """``v`` as a Python value pyiceberg binds to a column of ``kind``."""
    if kind in ("double", "float"):
        if math.isnan(v):
            return 1.5
        return v
    if kind == "date":
        return v.isoformat()
    if kind in ("ts", "tz"):
        naive = v.replace(tzinfo=None)
        text = _ts_text(naive).replace(" ", "T")
        return text + "+00:00" if kind == "tz" else text
    if kind == "uuid":
        return str(v) if rng.random() < 0.5 else v
    return v


class ObjectGen:
    """pyiceberg expression objects (two-valued: pyiceberg's row evaluator is their meaning)."""

    def __init__(self, rng: random.Random, literals: Literals) -> None:
        self.rng = rng
        self.lit = literals

    def condition(self, depth: int) -> tuple[BooleanExpression, set[str]]:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.4:
            return self.atom()
        pick = rng.random()
        if pick < 0.4:
            (a, ca), (b, cb) = self.condition(depth - 1), self.condition(depth - 1)
            return E.And(a, b), ca | cb
        if pick < 0.8:
            (a, ca), (b, cb) = self.condition(depth - 1), self.condition(depth - 1)
            return E.Or(a, b), ca | cb
        a, ca = self.condition(depth - 1)
        return E.Not(a), ca

    def atom(self) -> tuple[BooleanExpression, set[str]]:
        rng = self.rng
        col = rng.choice(list(KINDS))
        kind = KINDS[col]
        top = {col.split(".")[0]}
        lit: Callable[[], Any] = lambda: object_literal(rng, kind, self.lit.pick(rng, col))  # noqa: E731
        pick = rng.random()
        if kind in ("double", "float") and pick < 0.2:
            return (E.IsNaN(col) if rng.random() < 0.5 else E.NotNaN(col)), top
        if kind == "string" and pick < 0.2:
            prefix = rng.choice(["a", "c", "é", "", "ab", "z", "日"])
            return (E.StartsWith(col, prefix) if rng.random() < 0.5 else E.NotStartsWith(col, prefix)), top
        if pick < 0.55:
            cls = rng.choice([E.EqualTo, E.NotEqualTo, E.LessThan, E.LessThanOrEqual, E.GreaterThan,
                              E.GreaterThanOrEqual])  # fmt: skip
            if kind in ("bool", "uuid") and cls not in (E.EqualTo, E.NotEqualTo):
                cls = E.EqualTo
            return cls(col, lit()), top
        if pick < 0.75:
            values = {lit() for _ in range(rng.randint(1, 4))}
            return (E.In(col, values) if rng.random() < 0.5 else E.NotIn(col, values)), top
        return (E.IsNull(col) if rng.random() < 0.5 else E.NotNull(col)), top


def generate_cases(
    rng: random.Random, rows: list[dict[str, Any]], *, texts: int, objects: int, depth: int = 3
) -> list[Case]:
    """``texts`` Spark SQL conditions, then ``objects`` pyiceberg expressions, each distinct."""
    lits = Literals(rows)
    tg, og = TextGen(rng, lits), ObjectGen(rng, lits)
    cases: list[Case] = []
    seen: set[str] = set()
    while len(cases) < texts:
        text, cols = tg.condition(depth)
        if text not in seen:
            seen.add(text)
            cases.append(Case(len(cases), text=text, columns=cols))
    while len(cases) < texts + objects:
        expr, cols = og.condition(depth)
        key = repr(expr)
        if key not in seen:
            seen.add(key)
            cases.append(Case(len(cases), expr=expr, columns=cols))
    return cases
