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
translated by its truth table (:mod:`icemor.expr.truth`). What does not translate exactly is
evaluated as SQL (DuckDB locally, Spark SQL on Spark), after pruning by the parts that do.

An operation parses and binds each text condition once (:func:`parse_condition`) and passes the
:class:`Condition` down: the scan it plans takes that as it is, never the text again.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyiceberg.expressions as _expressions
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
    Not,
    Or,
    Reference,
    UnboundPredicate,
    parser,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.types import DoubleType, FloatType

from icemor.exceptions import InvalidArgumentError, shortened
from icemor.exceptions import first_line as _first_line
from icemor.expr.filters import dates_as_midnight, explain_parse_error, flatten_filter
from icemor.expr.sql import SqlExpression, UnsupportedSqlError, check_size, parse_sql
from icemor.expr.truth import COMPLEMENT, TruthTable

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema

# pyiceberg's predicates are pydantic models whose (term, value) constructors mypy cannot see
_E: Any = _expressions

__all__ = ["Condition", "implied_filter", "normalize", "parse_condition", "sql_columns"]

_TRUE: BooleanExpression = AlwaysTrue()
_FALSE: BooleanExpression = AlwaysFalse()


@dataclass(frozen=True)
class Condition:
    """A row condition, parsed and bound once: what an operation passes down instead of its text.

    ``exact`` and ``implied`` are Iceberg expressions in negation normal form, meant two-valued
    (see the module docstring), checked to bind to the table schema and kept unbound (each
    planner and reader binds them to what it reads).
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
    columns: tuple[str, ...] = ()
    """A row filter's SQL: the table's top-level columns it reads (a scan reads them for it)."""

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

    def pruning(self, also: BooleanExpression | None = None) -> Condition:
        """A scan filter that only prunes: the rows ``implied`` keeps, no SQL left for the scan
        (UPDATE and MERGE evaluate their whole condition in their own SQL).

        Args:
            also: An expression the rows kept satisfy too, in negation normal form and built
                from the schema's own names and types (MERGE's key range): taken as it is.
        """
        expr = self.implied if also is None else flatten_filter(And(self.implied, also))
        return Condition(None, None, expr, expr)


def parse_condition(
    condition: str | BooleanExpression | Condition | None,
    schema: Schema,
    *,
    case_sensitive: bool = True,
    sql_only: bool = False,
    what: str = "row filter",
    qualifier: str | None = None,
    prune: bool = True,
) -> Condition:
    """Parse and bind a condition, given as text or as a pyiceberg expression, against ``schema``.

    Text is SQL (the subset of docs/sql.md, names case-insensitive as in Spark SQL); a row
    filter's text that is not SQL but pyiceberg's filter language (``x IS NAN``, ``"x" = 1``) is
    read in that language and then given SQL's meaning too. A :class:`Condition` is taken as it
    is: it was parsed already, against the same schema.

    Args:
        condition: The condition; None selects every row.
        schema: The table schema its names resolve against.
        case_sensitive: Name matching of a pyiceberg expression (SQL's names are case-insensitive).
        sql_only: SQL alone, its columns left to the SQL binder: UPDATE's and MERGE's conditions,
            whose SQL runs whole (a MERGE's names are qualified by its aliases).
        what: How errors name the condition (``condition``, ``ON condition``, ...).
        qualifier: Column references with this prefix (``t`` in ``t.id``) or none are the table's;
            others (a MERGE source's) leave their part to SQL.
        prune: Translate the parts that prune; False for a MERGE clause's condition, which
            chooses among matched rows and prunes none (``implied`` is then AlwaysTrue).

    Raises:
        InvalidArgumentError: Text in neither language (the message says where it went wrong),
            too long or too deeply nested, or a row filter's unknown column (whether SQL is
            boolean, and a ``sql_only`` condition's columns, the SQL binder checks).
    """
    if isinstance(condition, Condition):
        return condition
    if condition is None:
        return Condition(None, None, _TRUE, _TRUE)
    if not isinstance(condition, str):
        with _refused(_shown_expr(condition), simplify="simplify it"):
            # flat first (normalize recurses along the tree), then flat again to merge what it made
            expr = normalize(flatten_filter(condition), schema, case_sensitive=case_sensitive)
            expr = flatten_filter(expr)
            bind(schema, expr, case_sensitive=case_sensitive)
        return Condition(None, None, expr, expr)
    columns: tuple[str, ...] = ()
    if sql_only:
        sql = parse_sql(condition, what=what)
    else:
        check_size(condition, what=what)  # before either language's parser sees it
        try:
            sql = parse_sql(condition, what=what)
        except UnsupportedSqlError:
            raise  # SQL all along: its refusal is the message
        except InvalidArgumentError as sql_error:
            return _filter_language(condition, schema, sql_error)
        columns = tuple(sql_columns(sql, schema, what=what))
    if not prune:
        return Condition(condition, sql, None, _TRUE, columns)
    truth = TruthTable(schema, qualifier=qualifier)
    exact = truth.true(sql.tree)
    implied = exact if exact is not None else truth.implied(sql.tree)
    return Condition(condition, sql, exact, implied, columns)


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
    return TruthTable(schema, qualifier=qualifier).implied(sql.tree)


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
    with _refused(repr(_shown(text)), simplify="simplify its parentheses or NOTs"):
        try:
            parsed = parser.parse(text)
        except RecursionError:
            raise
        except Exception as e:  # pyparsing's ParseException family
            raise _both(InvalidArgumentError(explain_parse_error(text)), sql_error) from e
        expr = dates_as_midnight(flatten_filter(parsed), schema, case_sensitive=False)
        exact = TruthTable(schema, qualifier=None).true_of_iceberg(expr)
    return Condition(text, None, exact, exact)


@contextmanager
def _refused(shown: str, *, simplify: str) -> Iterator[None]:
    """A filter nested too deeply for the recursion, or one that does not bind, as one line."""
    try:
        yield
    except InvalidArgumentError:
        raise
    except RecursionError as e:
        msg = f"row filter {shown} nests too deeply: {simplify}"
        raise InvalidArgumentError(msg) from e
    except ValueError as e:
        msg = f"invalid row filter {shown}: {_first_line(e)}"
        raise InvalidArgumentError(msg) from e


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
    constant = _bound_constant(expr, schema, cs)
    if constant is not None:
        return _FALSE if constant else _TRUE
    flipped = COMPLEMENT.get(type(expr))
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


def _bound_constant(expr: UnboundPredicate, schema: Schema, cs: bool) -> bool | None:
    """True or False when pyiceberg binds ``expr`` to a constant, NULL rows included (a literal
    beyond the column type's range: ``float_col <= 1e300`` is AlwaysTrue); its negation is then
    the other constant, as pyiceberg's evaluator has it, not the complement with NULL and NaN."""
    try:
        bound = expr.bind(schema, case_sensitive=cs)
    except (ValueError, TypeError):
        return None  # refused later, where the expression is bound for use
    if isinstance(bound, AlwaysTrue):
        return True
    if isinstance(bound, AlwaysFalse):
        return False
    return None


def _rebuild(kind: type, expr: Any) -> BooleanExpression:
    if hasattr(expr, "literals"):
        return cast("BooleanExpression", kind(expr.term, set(expr.literals)))
    if hasattr(expr, "literal"):
        return cast("BooleanExpression", kind(expr.term, expr.literal))
    return cast("BooleanExpression", kind(expr.term))


_OPPOSITE_ORDER: dict[type, type] = {
    LessThan: GreaterThanOrEqual,
    LessThanOrEqual: GreaterThan,
    GreaterThan: LessThanOrEqual,
    GreaterThanOrEqual: LessThan,
}
