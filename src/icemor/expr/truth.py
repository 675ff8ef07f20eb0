"""Text conditions by their truth table: the rows where each part is TRUE, and where it is FALSE.

A condition given as text means what Spark SQL means, three-valued (:mod:`icemor.expr.condition`).
Each part of its syntax tree (DuckDB's, :mod:`icemor.expr.sql`) is translated into two Iceberg
expressions under the two-valued meaning: the rows where the part is TRUE and the rows where it
is FALSE, so ``NOT`` swaps them and a part that is unknown for a row (a comparison with NULL) is
in neither. A part that does not translate exactly (arithmetic, a function, a column against a
column, a literal that Spark would compare otherwise) is left to SQL: the condition is then
evaluated as SQL, after pruning by its top-level conjuncts that do translate.
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import pyiceberg.expressions as _expressions
from pyiceberg import types as T
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNaN,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    NotIn,
    NotNaN,
    NotNull,
    NotStartsWith,
    Or,
    Reference,
    StartsWith,
    UnboundPredicate,
)
from pyiceberg.expressions.visitors import bind

from icemor.expr.filters import flatten_filter

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

# pyiceberg's predicates are pydantic models whose (term, value) constructors mypy cannot see
_E: Any = _expressions

__all__ = ["COMPLEMENT", "TruthTable"]

_TRUE: BooleanExpression = AlwaysTrue()
_FALSE: BooleanExpression = AlwaysFalse()

# The predicate true exactly where each is false, two-valued (NULL fails both sides of none)
COMPLEMENT: dict[type, type] = {
    EqualTo: NotEqualTo,
    NotEqualTo: EqualTo,
    In: NotIn,
    NotIn: In,
    IsNull: NotNull,
    NotNull: IsNull,
    IsNaN: NotNaN,
    NotNaN: IsNaN,
    StartsWith: NotStartsWith,
    NotStartsWith: StartsWith,
}


class _Untranslatable(Exception):
    pass


_SQL_ORDER = {
    "COMPARE_EQUAL": "=",
    "COMPARE_NOTEQUAL": "!=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
_ICEBERG_OPS: dict[type, str] = {
    EqualTo: "=",
    NotEqualTo: "!=",
    LessThan: "<",
    LessThanOrEqual: "<=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
}


class TruthTable:
    """For a condition's parts, the rows where each is TRUE and where it is FALSE (Spark SQL).

    A comparison of a column with a constant is NULL where the column is NULL: in neither set.
    A double or float NaN is equal to NaN and greater than any other value, as in Spark SQL.
    """

    def __init__(self, schema: Schema, qualifier: str | None) -> None:
        self.schema = schema
        self.qualifier = qualifier

    # -- entry points

    def true(self, node: dict[str, Any]) -> BooleanExpression | None:
        """The rows where the SQL ``node`` is TRUE, or None when it does not translate exactly.

        What translates is bound to the schema here, once (a literal that does not convert to its
        column's type leaves the part to SQL); the result is flat (:func:`flatten_filter`)."""
        try:
            out = flatten_filter(self._sets(node)[0])
            bind(self.schema, out, case_sensitive=True)  # literals that do not convert: SQL decides
        except (_Untranslatable, ValueError, TypeError, InvalidOperation, RecursionError):
            return None
        return out

    def implied(self, node: dict[str, Any]) -> BooleanExpression:
        """The conjunction of the top-level ``AND`` terms that translate: implied by ``node``."""
        terms = [t for c in _conjuncts(node) if (t := self.true(c)) is not None]
        if not terms:
            return _TRUE
        return terms[0] if len(terms) == 1 else flatten_filter(And(*terms))

    def true_of_iceberg(self, expr: BooleanExpression) -> BooleanExpression:
        """The rows where pyiceberg's parse of a text filter is TRUE, read with SQL's meaning.

        Raises:
            ValueError: An unknown column, or a literal that does not convert to its column's type.
        """
        out = flatten_filter(self._iceberg_sets(expr)[0])
        bind(self.schema, out, case_sensitive=True)
        return out

    # -- SQL trees

    def _sets(self, node: dict[str, Any]) -> tuple[BooleanExpression, BooleanExpression]:
        kind = node.get("type")
        cls = node.get("class")
        if kind in ("CONJUNCTION_AND", "CONJUNCTION_OR"):
            parts = [self._sets(c) for c in node["children"]]
            trues, falses = [p[0] for p in parts], [p[1] for p in parts]
            if kind == "CONJUNCTION_AND":
                return _fold(And, trues), _fold(Or, falses)
            return _fold(Or, trues), _fold(And, falses)
        if kind == "OPERATOR_NOT":
            t, f = self._sets(node["children"][0])
            return f, t
        if kind in _SQL_ORDER:
            left, right, op = node["left"], node["right"], _SQL_ORDER[kind]
            if left.get("class") != "COLUMN_REF":
                left, right, op = right, left, _MIRRORED[op]
            name, field_type = self._column(left)
            value = self._constant(right, field_type)
            if value is None:  # x = NULL is NULL for every row
                return _FALSE, _FALSE
            return _compare(op, name, value, field_type)
        if kind in ("COMPARE_IN", "COMPARE_NOT_IN"):
            column, *items = node["children"]
            name, field_type = self._column(column)
            t, f = _in_list(name, [self._constant(v, field_type) for v in items], field_type)
            return (f, t) if kind == "COMPARE_NOT_IN" else (t, f)
        if kind == "COMPARE_BETWEEN":
            name, field_type = self._column(node["input"])
            low, high = self._constant(node["lower"], field_type), self._constant(node["upper"], field_type)
            if low is None or high is None:
                raise _Untranslatable  # NULL bounds: unknown or false, row by row
            t1, f1 = _compare(">=", name, low, field_type)
            t2, f2 = _compare("<=", name, high, field_type)
            return And(t1, t2), Or(f1, f2)
        if kind in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            name, _ = self._column(node["children"][0])
            null, not_null = _E.IsNull(name), _E.NotNull(name)
            return (null, not_null) if kind == "OPERATOR_IS_NULL" else (not_null, null)
        if cls == "FUNCTION" and str(node.get("function_name")).lower() == "isnan":
            (arg,) = _arguments(node)
            name, field_type = self._column(arg)
            if not isinstance(field_type, T.FloatType | T.DoubleType):
                raise _Untranslatable
            return _E.IsNaN(name), _E.NotNaN(name)  # isnan(NULL) is false: NOT isnan(NULL) true
        if cls == "FUNCTION" and node.get("function_name") in ("~~", "!~~") and not node.get("catalog"):
            column, pattern = _arguments(node)
            name, field_type = self._column(column)
            prefix = self._prefix_pattern(pattern, field_type)
            t, f = _E.StartsWith(name, prefix), And(_E.NotNull(name), _E.NotStartsWith(name, prefix))
            return (f, t) if node["function_name"] == "!~~" else (t, f)
        if cls == "CONSTANT":
            lit = node["literal"]
            if lit["kind"] == "NULL_LITERAL":
                return _FALSE, _FALSE
            if lit["kind"] == "BOOLEAN":
                value = lit["text"].lower() == "true"
                return (_TRUE, _FALSE) if value else (_FALSE, _TRUE)
            raise _Untranslatable
        if cls == "COLUMN_REF":
            name, field_type = self._column(node)
            if not isinstance(field_type, T.BooleanType):
                raise _Untranslatable
            return _E.EqualTo(name, True), _E.EqualTo(name, False)
        raise _Untranslatable

    def _column(self, node: dict[str, Any]) -> tuple[str, IcebergType]:
        if node.get("class") != "COLUMN_REF":
            raise _Untranslatable
        parts = list(node["column_names"])
        if self.qualifier is not None and len(parts) > 1 and parts[0].lower() == self.qualifier.lower():
            parts = parts[1:]
        try:
            field = self.schema.find_field(".".join(parts), case_sensitive=False)
        except ValueError as e:
            raise _Untranslatable from e
        name = self.schema.find_column_name(field.field_id)
        if name is None or not field.field_type.is_primitive:
            raise _Untranslatable
        return name, field.field_type

    def _constant(self, node: dict[str, Any], field_type: IcebergType) -> Any:
        """The constant's value for a comparison with a ``field_type`` column, exactly as Spark
        SQL compares them; None for NULL. Untranslatable where Spark's comparison differs from
        Iceberg's comparison of the converted value (a wider type, a cast that rounds, …)."""
        if node.get("class") == "CAST":  # DATE '…', TIMESTAMP '…'
            type_name = str(node["type_expr"].get("type_name", "")).upper()
            child = node["child"]
            if child.get("class") != "CONSTANT" or child["literal"]["kind"] not in ("STRING", "VARCHAR"):
                raise _Untranslatable
            text = child["literal"]["text"]
            if type_name == "DATE" and isinstance(field_type, T.DateType):
                return _date_text(text)
            if type_name == "DATE" and isinstance(field_type, T.TimestampType | T.TimestamptzType):
                return _timestamp_text(_date_text(text))
            if type_name == "TIMESTAMP" and isinstance(field_type, T.TimestampType | T.TimestamptzType):
                return _timestamp_text(text)
            raise _Untranslatable
        if node.get("class") != "CONSTANT":
            raise _Untranslatable
        kind, text = node["literal"]["kind"], node["literal"]["text"]
        if kind == "NULL_LITERAL":
            return None
        if kind in ("INTEGER", "BIGINT", "HUGEINT", "SMALLINT", "TINYINT"):
            value = int(text)
            if isinstance(field_type, T.IntegerType) and -(1 << 31) <= value < (1 << 31):
                return value
            if isinstance(field_type, T.LongType) and -(1 << 63) <= value < (1 << 63):
                return value
            if isinstance(field_type, T.DoubleType) and abs(value) <= 1 << 53:
                return float(value)
            if isinstance(field_type, T.FloatType) and abs(value) <= 1 << 24:
                return float(value)
            if isinstance(field_type, T.DecimalType):
                return _decimal(Decimal(value), field_type)
            raise _Untranslatable
        if kind in ("NUMERIC", "DECIMAL"):
            if isinstance(field_type, T.DoubleType):  # Spark casts the decimal to double
                return float(text)
            if isinstance(field_type, T.DecimalType):
                return _decimal(Decimal(text), field_type)
            raise _Untranslatable  # an int column against 1.5 compares as decimal; a float widens
        if kind in ("DOUBLE", "FLOAT"):
            if isinstance(field_type, T.DoubleType):
                number = float(text)
                if math.isnan(number):
                    raise _Untranslatable
                return number
            raise _Untranslatable
        if kind in ("STRING", "VARCHAR"):
            if isinstance(field_type, T.StringType):
                return text
            if isinstance(field_type, T.DateType):
                if not _DATE.fullmatch(text):
                    raise _Untranslatable  # Spark drops a time part: not the same comparison
                return _date_text(text)
            if isinstance(field_type, T.TimestampType | T.TimestamptzType):
                return _timestamp_text(text)
            if isinstance(field_type, T.UUIDType):
                # Spark reads a uuid as its lowercase text: only that text equals it, and text
                # order is byte order only for that form
                parsed = uuid.UUID(text)
                if str(parsed) != text:
                    raise _Untranslatable
                return parsed
            raise _Untranslatable
        if kind == "BOOLEAN" and isinstance(field_type, T.BooleanType):
            return text.lower() == "true"
        raise _Untranslatable

    def _prefix_pattern(self, node: dict[str, Any], field_type: IcebergType) -> str:
        """``'abc%'`` as ``abc``: a LIKE pattern that is a plain prefix (no other wildcard)."""
        if not isinstance(field_type, T.StringType) or node.get("class") != "CONSTANT":
            raise _Untranslatable
        if node["literal"]["kind"] not in ("STRING", "VARCHAR"):
            raise _Untranslatable
        text = str(node["literal"]["text"])
        if not text.endswith("%") or any(c in text[:-1] for c in "%_\\"):
            raise _Untranslatable
        return text[:-1]

    # -- pyiceberg's parse of text

    def _iceberg_sets(self, expr: BooleanExpression) -> tuple[BooleanExpression, BooleanExpression]:
        if isinstance(expr, And | Or):
            lt, lf = self._iceberg_sets(expr.left)
            rt, rf = self._iceberg_sets(expr.right)
            return (And(lt, rt), Or(lf, rf)) if isinstance(expr, And) else (Or(lt, rt), And(lf, rf))
        if isinstance(expr, Not):
            t, f = self._iceberg_sets(expr.child)
            return f, t
        if isinstance(expr, AlwaysTrue):
            return _TRUE, _FALSE
        if isinstance(expr, AlwaysFalse):
            return _FALSE, _TRUE
        if not isinstance(expr, UnboundPredicate) or not isinstance(expr.term, Reference):
            msg = f"cannot read {expr!r} as a condition"
            raise ValueError(msg)
        field = self.schema.find_field(expr.term.name, case_sensitive=False)
        name = self.schema.find_column_name(field.field_id) or expr.term.name
        field_type = field.field_type
        term = Reference(name)
        if isinstance(expr, IsNull | NotNull | IsNaN | NotNaN):
            kind: Any = type(expr)
            return kind(term), COMPLEMENT[kind](term)
        if isinstance(expr, In | NotIn):
            values = [lit.value for lit in expr.literals]
            t, f = _in_list(name, values, field_type)
            return (f, t) if isinstance(expr, NotIn) else (t, f)
        if isinstance(expr, StartsWith | NotStartsWith):
            prefix = expr.literal.value
            t, f = _E.StartsWith(name, prefix), And(_E.NotNull(name), _E.NotStartsWith(name, prefix))
            return (f, t) if isinstance(expr, NotStartsWith) else (t, f)
        op = _ICEBERG_OPS.get(type(expr))
        if op is None:
            msg = f"cannot read {expr!r} as a condition"
            raise ValueError(msg)
        literal = expr.literal  # type: ignore[attr-defined]
        return _compare(op, name, literal, field_type)


def _fold(op: type[And] | type[Or], parts: list[BooleanExpression]) -> BooleanExpression:
    """``op`` of ``parts`` (pyiceberg balances three or more operands)."""
    return parts[0] if len(parts) == 1 else op(*parts)


def _arguments(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A function call's argument expressions (DuckDB's tree keeps them under ``arguments``)."""
    if "arguments" in node:
        return [a["expression"] for a in node["arguments"]]
    return list(node.get("children", []))


def _conjuncts(node: dict[str, Any]) -> list[dict[str, Any]]:
    if node.get("type") == "CONJUNCTION_AND":
        return [c for child in node["children"] for c in _conjuncts(child)]
    return [node]


def _compare(
    op: str, name: str, value: Any, field_type: IcebergType
) -> tuple[BooleanExpression, BooleanExpression]:
    """(TRUE rows, FALSE rows) of ``name op value`` for a non-NULL constant ``value``.

    Two-valued predicates already fail NULL; a double's NaN, which fails every two-valued
    comparison, is equal to itself and greater than everything in SQL, so it joins the sets of
    ``>``, ``>=``, ``!=`` and the FALSE sets of ``<``, ``<=``, ``=``.
    """
    floating = isinstance(field_type, T.FloatType | T.DoubleType)
    nan: BooleanExpression = _E.IsNaN(name) if floating else _FALSE
    not_null: BooleanExpression = _E.NotNull(name)

    def with_nan(e: BooleanExpression) -> BooleanExpression:
        return Or(e, nan) if floating else e

    if op == "=":
        return _E.EqualTo(name, value), And(not_null, _E.NotEqualTo(name, value))
    if op == "!=":
        return And(not_null, _E.NotEqualTo(name, value)), _E.EqualTo(name, value)
    if op == "<":
        return _E.LessThan(name, value), with_nan(_E.GreaterThanOrEqual(name, value))
    if op == "<=":
        return _E.LessThanOrEqual(name, value), with_nan(_E.GreaterThan(name, value))
    if op == ">":
        return with_nan(_E.GreaterThan(name, value)), _E.LessThanOrEqual(name, value)
    if op == ">=":
        return with_nan(_E.GreaterThanOrEqual(name, value)), _E.LessThan(name, value)
    raise _Untranslatable


def _in_list(
    name: str, values: list[Any], field_type: IcebergType
) -> tuple[BooleanExpression, BooleanExpression]:
    """(TRUE rows, FALSE rows) of ``name IN (values)``; a NULL among them makes no row FALSE."""
    present = [v for v in values if v is not None]
    has_null = len(present) != len(values)
    if isinstance(field_type, T.FloatType | T.DoubleType) and any(v == 0 for v in present):
        raise _Untranslatable  # SQL's -0.0 IN (0) is true; a hash set keeps them apart
    if not present:
        return _FALSE, _FALSE
    inside: BooleanExpression = _E.In(name, set(present))
    outside: BooleanExpression = _FALSE if has_null else And(_E.NotNull(name), _E.NotIn(name, set(present)))
    return inside, outside


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[ T](\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?))?")


def _date_text(text: str) -> str:
    if not _DATE.fullmatch(text):
        raise _Untranslatable
    date.fromisoformat(text)  # ValueError: not a date
    return text


def _timestamp_text(text: str) -> int:
    """Microseconds since the epoch of a zone-less timestamp text, read in UTC (icemor's session
    time zone, for ``timestamptz``; a ``timestamp`` has no zone)."""
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        raise _Untranslatable  # zones, other forms: SQL compares them
    day, clock = m.group(1), m.group(2) or "00:00"
    value = datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=UTC)
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _decimal(value: Decimal, field_type: T.DecimalType) -> Decimal:
    """``value`` if a ``field_type`` column holds it exactly (else SQL compares it otherwise)."""
    if not value.is_finite():
        raise _Untranslatable
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > field_type.scale:
        raise _Untranslatable  # more digits than the column: no value of it equals this
    if abs(value) >= Decimal(10) ** (field_type.precision - field_type.scale):
        raise _Untranslatable
    return value.quantize(Decimal(1).scaleb(-field_type.scale))
