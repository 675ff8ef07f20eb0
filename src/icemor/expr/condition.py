"""Row conditions with one meaning each: text as Spark SQL means it, expressions as Iceberg's evaluator.

A condition given as **text** (a scan's row filter, DELETE's, UPDATE's and MERGE's conditions,
compaction's ``where``, ``overwrite(where=)``) selects the rows where it is TRUE in Spark SQL's
three-valued logic: ``NULL NOT IN (1, 10)`` is unknown, so neither selected nor deleted; NaN equals
NaN and is greater than every other double; ``isnan(NULL)`` is false. A **pyiceberg expression**
(``NotIn("id", {1, 10})``) means what Iceberg's row evaluator (pyiceberg's ``expression_evaluator``)
means: two-valued, a NULL fails every positive predicate (=, <, IN, starts-with, is-NaN) and passes
its negation (!=, NOT IN, not-starts-with, not-NaN), ``Not`` is the complement, and comparisons
follow IEEE (NaN compares false). docs/sql.md states both.

Both are compiled once, here, into Iceberg expressions in *negation normal form* under that
two-valued meaning (:func:`normalize`): no ``Not`` is left, so pyiceberg's pruning evaluators
(which rewrite ``Not`` by flipping comparisons, ignoring NULLs) agree with the row evaluators of
both engines (:mod:`icemor.io.filters`, and the Spark engine's column translation). Text is
translated by its truth table (:class:`_Truth`): for each part, the rows where it is TRUE and the
rows where it is FALSE, so ``NOT`` swaps them and an unknown part is in neither. What does not
translate exactly is evaluated as SQL (DuckDB locally, Spark SQL on Spark), after pruning by the
parts that do.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, cast

import pyiceberg.expressions as _expressions
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
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from icemor.exceptions import InvalidArgumentError, shortened
from icemor.exceptions import first_line as _first_line
from icemor.expr.sql import SqlExpression, UnsupportedSqlError, check_size, parse_sql

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

# pyiceberg's predicates are pydantic models whose (term, value) constructors mypy cannot see
_E: Any = _expressions

__all__ = ["Condition", "implied_filter", "normalize", "parse_condition", "sql_columns"]

_TRUE: BooleanExpression = AlwaysTrue()
_FALSE: BooleanExpression = AlwaysFalse()


@dataclass(frozen=True)
class Condition:
    """A row condition, compiled.

    ``exact`` and ``implied`` are Iceberg expressions in negation normal form, meant two-valued
    (see the module docstring) and bound against nothing yet.
    """

    text: str | None
    """The text the condition was given as; None for a pyiceberg expression."""
    sql: SqlExpression | None
    """The text as SQL, when it is SQL (None for pyiceberg's filter language, e.g. ``x IS NAN``)."""
    exact: BooleanExpression | None
    """Selects exactly the rows the condition selects; None when the condition does not translate
    (then ``sql`` is evaluated on every row that ``implied`` keeps)."""
    implied: BooleanExpression
    """Keeps at least every row the condition selects: for pruning files and for conflict checks."""

    @property
    def row_filter(self) -> BooleanExpression:
        """The Iceberg expression rows are filtered by: ``exact``, else ``implied``."""
        return self.exact if self.exact is not None else self.implied

    @property
    def residual(self) -> str | None:
        """SQL every row read must still satisfy; None when ``exact`` says it all. The SQL's text,
        which spells a literal with a backslash escape the way both engines read it (``'a\\'b'``
        as ``concat('a', chr(39), 'b')``), not the text as given."""
        if self.exact is not None:
            return None
        return self.sql.text if self.sql is not None else self.text


def parse_condition(
    condition: str | BooleanExpression | None, schema: Schema, *, case_sensitive: bool = True
) -> Condition:
    """Compile a condition given as text or as a pyiceberg expression against ``schema``.

    Text is SQL (the subset of docs/sql.md, names case-insensitive as in Spark SQL); text that is
    not SQL but pyiceberg's filter language (``x IS NAN``, ``"x" = 1``) is read in that language and
    then given SQL's meaning too. ``case_sensitive`` applies to pyiceberg expressions only.

    Raises:
        InvalidArgumentError: Text in neither language (the message says where it went wrong),
            too long or too deeply nested, an unknown column, or a condition that is not boolean.
    """
    if condition is None:
        return Condition(None, None, _TRUE, _TRUE)
    if not isinstance(condition, str):
        from icemor.expr.filters import flatten_filter

        try:
            # flat first (normalize recurses along the tree), then flat again to merge what it made
            expr = normalize(flatten_filter(condition), schema, case_sensitive=case_sensitive)
            expr = flatten_filter(expr)
            bind(schema, expr, case_sensitive=case_sensitive)
        except RecursionError as e:
            msg = f"row filter {_shown_expr(condition)} nests too deeply: simplify it"
            raise InvalidArgumentError(msg) from e
        except ValueError as e:
            msg = f"invalid row filter {_shown_expr(condition)}: {_first_line(e)}"
            raise InvalidArgumentError(msg) from e
        return Condition(None, None, expr, expr)
    check_size(condition, what="row filter")
    try:
        sql = parse_sql(condition, what="row filter")
    except UnsupportedSqlError:
        raise
    except InvalidArgumentError as sql_error:
        return _filter_language(condition, schema, sql_error)
    sql_columns(sql, schema)
    truth = _Truth(schema, qualifier=None)
    exact = truth.true(sql.tree)
    return Condition(condition, sql, exact, exact if exact is not None else truth.implied(sql.tree))


def implied_filter(
    sql: SqlExpression | None, schema: Schema, *, qualifier: str | None = None
) -> BooleanExpression:
    """An Iceberg expression every row satisfying ``sql`` satisfies (pruning; AlwaysTrue if none).

    Args:
        sql: The condition (None: no condition).
        schema: The table schema its names resolve against (case-insensitively, as SQL).
        qualifier: Only column references with this prefix (``t`` in ``t.id``) or none are
            table columns; others (a MERGE source's) make their part untranslatable.
    """
    if sql is None:
        return _TRUE
    return _Truth(schema, qualifier=qualifier).implied(sql.tree)


def sql_columns(sql: SqlExpression, schema: Schema, *, what: str = "row filter") -> list[str]:
    """The table's top-level columns ``sql`` reads (SQL names are case-insensitive).

    Raises:
        InvalidArgumentError: A name that is no column of ``schema``.
    """
    by_lower = {f.name.lower(): f.name for f in schema.fields}
    out = []
    for parts in sorted(sql.columns()):
        name = by_lower.get(parts[0].lower())
        if name is None:
            shown = ".".join(parts)
            msg = f"invalid {what} {_shown(sql.text)!r}: unknown column {shown!r}"
            if re.search(rf"[=<>]\s*{re.escape(shown)}\b", sql.text):
                msg += f"; strings need quotes: '{shown}'"
            raise InvalidArgumentError(msg)
        if name not in out:
            out.append(name)
    return out


def _shown(text: str) -> str:
    return shortened(text, 80)


def _shown_expr(expr: BooleanExpression) -> str:
    try:
        text = str(expr)
    except RecursionError:  # str() of a too-deep expression recurses as deeply
        text = type(expr).__name__
    return text if len(text) <= 200 else f"{text[:200]}… ({len(text)} characters)"


# ---- pyiceberg's filter language, given SQL's meaning -------------------------------------------


def _filter_language(text: str, schema: Schema, sql_error: InvalidArgumentError) -> Condition:
    """Text that is not SQL, read in pyiceberg's filter language (``IS NAN``, double-quoted names)."""
    from pyiceberg.expressions import parser

    from icemor.expr.filters import dates_as_midnight, explain_parse_error, flatten_filter

    try:
        parsed = parser.parse(text)
    except RecursionError as e:
        msg = f"row filter {_shown(text)!r} nests too deeply: simplify its parentheses or NOTs"
        raise InvalidArgumentError(msg) from e
    except Exception as e:  # pyparsing's ParseException family
        raise _both(InvalidArgumentError(explain_parse_error(text)), sql_error) from e
    try:
        expr = dates_as_midnight(flatten_filter(parsed), schema, case_sensitive=False)
        exact = _Truth(schema, qualifier=None).true_of_iceberg(expr)
    except RecursionError as e:
        msg = f"row filter {_shown(text)!r} nests too deeply: simplify its parentheses or NOTs"
        raise InvalidArgumentError(msg) from e
    except ValueError as e:
        msg = f"invalid row filter {_shown(text)!r}: {_first_line(e)}"
        raise InvalidArgumentError(msg) from e
    return Condition(text, None, exact, exact)


def _both(error: InvalidArgumentError, sql_error: InvalidArgumentError) -> InvalidArgumentError:
    """Neither language takes the filter: the filter language's explanation, then SQL's, in one line."""
    tail = f"; as SQL: {sql_error}"
    head = re.sub(r" \([^()]*\)", "", str(error))  # drop the grammar's long lists of alternatives
    if len(head) + len(tail) > 180:
        tail = tail[: max(40, 180 - len(head))]
        head = head[: 180 - len(tail)]
    return InvalidArgumentError(head + tail)


# ---- negation normal form under the two-valued meaning -----------------------------------------


def normalize(expr: BooleanExpression, schema: Schema, *, case_sensitive: bool = True) -> BooleanExpression:
    """``expr`` without ``Not``, meaning the same two-valued: each ``Not`` pushed to the leaves.

    ``Not(x < 5)`` holds for a NULL ``x`` (the complement of a predicate NULL fails) and for NaN,
    so it becomes ``x IS NULL OR x IS NAN OR x >= 5``, not pyiceberg's ``x >= 5``.
    """
    return _nnf(expr, schema, case_sensitive, negate=False)


def _nnf(expr: BooleanExpression, schema: Schema, cs: bool, *, negate: bool) -> BooleanExpression:
    if isinstance(expr, Not):
        return _nnf(expr.child, schema, cs, negate=not negate)
    if isinstance(expr, And | Or):
        left = _nnf(expr.left, schema, cs, negate=negate)
        right = _nnf(expr.right, schema, cs, negate=negate)
        conj = isinstance(expr, And) != negate
        return And(left, right) if conj else Or(left, right)
    if not negate:
        return expr
    if isinstance(expr, AlwaysTrue):
        return _FALSE
    if isinstance(expr, AlwaysFalse):
        return _TRUE
    if not isinstance(expr, UnboundPredicate):
        return Not(expr)  # a bound expression: keep it as given
    flipped = _COMPLEMENT.get(type(expr))
    if flipped is not None:
        return _rebuild(flipped, expr)
    opposite = _OPPOSITE_ORDER.get(type(expr))
    if opposite is None:
        return Not(expr)
    name = expr.term.name if isinstance(expr.term, Reference) else None
    out: BooleanExpression = _rebuild(opposite, expr)
    if name is not None:
        try:
            field_type = schema.find_type(name, case_sensitive=cs)
        except ValueError:
            field_type = None
        if isinstance(field_type, FloatType | DoubleType):
            out = Or(_E.IsNaN(name), out)
    return Or(_E.IsNull(expr.term), out)


def _rebuild(kind: type, expr: Any) -> BooleanExpression:
    if hasattr(expr, "literals"):
        return cast("BooleanExpression", kind(expr.term, set(expr.literals)))
    if hasattr(expr, "literal"):
        return cast("BooleanExpression", kind(expr.term, expr.literal))
    return cast("BooleanExpression", kind(expr.term))


_COMPLEMENT: dict[type, type] = {
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
_OPPOSITE_ORDER: dict[type, type] = {
    LessThan: GreaterThanOrEqual,
    LessThanOrEqual: GreaterThan,
    GreaterThan: LessThanOrEqual,
    GreaterThanOrEqual: LessThan,
}


# ---- text: the truth table -------------------------------------------------------------------


class _Untranslatable(Exception):
    pass


def _and(a: BooleanExpression, b: BooleanExpression) -> BooleanExpression:
    return And(a, b)


def _or(a: BooleanExpression, b: BooleanExpression) -> BooleanExpression:
    return Or(a, b)


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


class _Truth:
    """For a condition's parts, the rows where each is TRUE and where it is FALSE (Spark SQL).

    A comparison of a column with a constant is NULL where the column is NULL: in neither set.
    A double or float NaN is equal to NaN and greater than any other value, as in Spark SQL.
    """

    def __init__(self, schema: Schema, qualifier: str | None) -> None:
        self.schema = schema
        self.qualifier = qualifier

    # -- entry points

    def true(self, node: dict[str, Any]) -> BooleanExpression | None:
        """The rows where the SQL ``node`` is TRUE, or None when it does not translate exactly."""
        from icemor.expr.filters import flatten_filter

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
        return terms[0] if len(terms) == 1 else And(*terms)

    def true_of_iceberg(self, expr: BooleanExpression) -> BooleanExpression:
        """The rows where pyiceberg's parse of a text filter is TRUE, read with SQL's meaning.

        Raises:
            ValueError: An unknown column, or a literal that does not convert to its column's type.
        """
        from icemor.expr.filters import flatten_filter

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
                return _fold(_and, trues), _fold(_or, falses)
            return _fold(_or, trues), _fold(_and, falses)
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
            if not isinstance(field_type, FloatType | DoubleType):
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
            if not isinstance(field_type, BooleanType):
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
            if type_name == "DATE" and isinstance(field_type, DateType):
                return _date_text(text)
            if type_name == "DATE" and isinstance(field_type, TimestampType | TimestamptzType):
                return _timestamp_text(_date_text(text))
            if type_name == "TIMESTAMP" and isinstance(field_type, TimestampType | TimestamptzType):
                return _timestamp_text(text)
            raise _Untranslatable
        if node.get("class") != "CONSTANT":
            raise _Untranslatable
        kind, text = node["literal"]["kind"], node["literal"]["text"]
        if kind == "NULL_LITERAL":
            return None
        if kind in ("INTEGER", "BIGINT", "HUGEINT", "SMALLINT", "TINYINT"):
            value = int(text)
            if isinstance(field_type, IntegerType) and -(1 << 31) <= value < (1 << 31):
                return value
            if isinstance(field_type, LongType) and -(1 << 63) <= value < (1 << 63):
                return value
            if isinstance(field_type, DoubleType) and abs(value) <= 1 << 53:
                return float(value)
            if isinstance(field_type, FloatType) and abs(value) <= 1 << 24:
                return float(value)
            if isinstance(field_type, DecimalType):
                return _decimal(Decimal(value), field_type)
            raise _Untranslatable
        if kind in ("NUMERIC", "DECIMAL"):
            if isinstance(field_type, DoubleType):  # Spark casts the decimal to double
                return float(text)
            if isinstance(field_type, DecimalType):
                return _decimal(Decimal(text), field_type)
            raise _Untranslatable  # an int column against 1.5 compares as decimal; a float widens
        if kind in ("DOUBLE", "FLOAT"):
            if isinstance(field_type, DoubleType):
                number = float(text)
                if math.isnan(number):
                    raise _Untranslatable
                return number
            raise _Untranslatable
        if kind in ("STRING", "VARCHAR"):
            if isinstance(field_type, StringType):
                return text
            if isinstance(field_type, DateType):
                if not _DATE.fullmatch(text):
                    raise _Untranslatable  # Spark drops a time part: not the same comparison
                return _date_text(text)
            if isinstance(field_type, TimestampType | TimestamptzType):
                return _timestamp_text(text)
            if isinstance(field_type, UUIDType):
                # Spark reads a uuid as its lowercase text: only that text equals it, and text
                # order is byte order only for that form
                parsed = uuid.UUID(text)
                if str(parsed) != text:
                    raise _Untranslatable
                return parsed
            raise _Untranslatable
        if kind == "BOOLEAN" and isinstance(field_type, BooleanType):
            return text.lower() == "true"
        raise _Untranslatable

    def _prefix_pattern(self, node: dict[str, Any], field_type: IcebergType) -> str:
        """``'abc%'`` as ``abc``: a LIKE pattern that is a plain prefix (no other wildcard)."""
        if not isinstance(field_type, StringType) or node.get("class") != "CONSTANT":
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
            return kind(term), _COMPLEMENT[kind](term)
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


def _fold(
    op: Any, parts: list[BooleanExpression]
) -> BooleanExpression:  # pyiceberg balances three or more operands
    if len(parts) == 1:
        return parts[0]
    return cast("BooleanExpression", (And if op is _and else Or)(*parts))


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
    floating = isinstance(field_type, FloatType | DoubleType)
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
    if isinstance(field_type, FloatType | DoubleType) and any(v == 0 for v in present):
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


def _decimal(value: Decimal, field_type: DecimalType) -> Decimal:
    """``value`` if a ``field_type`` column holds it exactly (else SQL compares it otherwise)."""
    if not value.is_finite():
        raise _Untranslatable
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > field_type.scale:
        raise _Untranslatable  # more digits than the column: no value of it equals this
    if abs(value) >= Decimal(10) ** (field_type.precision - field_type.scale):
        raise _Untranslatable
    return value.quantize(Decimal(1).scaleb(-field_type.scale))
