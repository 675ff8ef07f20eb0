"""Spark SQL's ``MERGE INTO``, ``UPDATE`` and ``DELETE FROM`` read into the arguments of icemor's builders.

The statement is parsed with sqlglot's Spark dialect (a real parser, no grammar of ours); each
condition and value is then written back as Spark SQL text from its parse tree, names and
qualifiers as written, for the builders to run (:func:`icemor.spark.sql`). What Spark refuses
in a statement's shape (an unconditional clause before another of its kind, two assignments to
one column, a value list of the wrong length) is refused with Spark's reason; what Spark
accepts but icemor's builders cannot do (``WHEN NOT MATCHED BY SOURCE``, a CTE, ``DELETE …
USING``, time travel on the target, …) is refused naming it. Every refusal is one
:class:`~icemor.exceptions.InvalidArgumentError` line, raised before anything runs.

This module imports only sqlglot and :mod:`icemor.exceptions`: it says what to run, the facade runs
it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import strposition_sql
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.generators.spark import SparkGenerator
from sqlglot.tokenizer_core import TokenType

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from sqlglot.tokenizer_core import Token

__all__ = ["Clause", "Delete", "Merge", "Statement", "Update", "parse_statement"]

NO_SOURCE_ALIAS = "__source"
"""The source's name in the builder's SQL when a subquery source has no alias (Spark gives it none:
its columns are then referenced unqualified)."""

SUPPORTED = "icemor.spark.sql runs one MERGE INTO, UPDATE or DELETE FROM statement"


@dataclass(frozen=True)
class Clause:
    """One ``WHEN [NOT] MATCHED [AND condition] THEN …`` clause, as the MERGE builder takes it."""

    kind: Literal["update", "delete", "insert"]
    condition: str | None
    values: dict[str, str] | None
    """Column -> Spark SQL value; None: ``UPDATE SET *`` / ``INSERT *``; empty for DELETE."""


@dataclass(frozen=True)
class Merge:
    """``MERGE INTO target USING source ON … WHEN …``: the builder's arguments."""

    target: str
    target_alias: str
    source_alias: str
    on: str
    clauses: tuple[Clause, ...]
    source_table: str | None = None
    """A table or view Spark knows, as Spark SQL names it (for ``spark.table``)."""
    source_query: str | None = None
    """Else a query for ``spark.sql``."""
    source_columns: tuple[str, ...] | None = None
    """Column names given with the source's alias (``AS s(a, b)``)."""


@dataclass(frozen=True)
class Update:
    """``UPDATE target SET … [WHERE …]``: the builder's arguments."""

    target: str
    set: dict[str, str]
    where: str | None


@dataclass(frozen=True)
class Delete:
    """``DELETE FROM target [WHERE …]``: the builder's arguments."""

    target: str
    where: str | None


@dataclass(frozen=True)
class Statement:
    """A statement parsed and checked, before the target table's columns are known."""

    kind: Literal["MERGE", "UPDATE", "DELETE"]
    target: str
    """The target's name as icemor's catalog names it (``db.t``)."""
    tree: exp.Expr = field(repr=False, compare=False)

    def translate(self, columns: Collection[str]) -> Merge | Update | Delete:
        """The builder's arguments. ``columns``: the target table's top-level column names (an
        UPDATE or DELETE reads ``t.x`` as the column ``x`` only when ``x`` is one, as Spark does)."""
        if isinstance(self.tree, exp.Merge):
            return _merge(self.tree, self.target)
        table = self.tree.this
        assert isinstance(table, exp.Table)
        qualifiers = _qualifiers(table)
        names = {c.lower() for c in columns}
        where_node = self.tree.args.get("where")
        where = _text(where_node.this, qualifiers, names) if where_node is not None else None
        if isinstance(self.tree, exp.Delete):
            return Delete(self.target, where)
        assignments = _assignments(self.tree.expressions, qualifiers, names, qualifiers, names, what="UPDATE")
        return Update(self.target, assignments, where)


def parse_statement(text: str) -> Statement:
    """Parse one Spark SQL ``MERGE INTO``, ``UPDATE`` or ``DELETE FROM`` statement.

    Raises:
        InvalidArgumentError: Not exactly one statement; a statement of another kind; text that
            does not parse; a form Spark refuses or icemor does not run (the message names it).
    """
    if not isinstance(text, str) or not text.strip():
        msg = f"the statement is empty: {SUPPORTED}"
        raise InvalidArgumentError(msg)
    try:
        tokens = _DIALECT.tokenize(text)
    except TokenError as e:
        msg = f"cannot read the statement: {_first_line(str(e))}"
        raise InvalidArgumentError(msg) from e
    words = [t.text.upper() for t in tokens]
    if words[:2] == ["MERGE", "WITH"]:
        msg = "MERGE WITH SCHEMA EVOLUTION is not supported: change the schema first (table.update_schema())"
        raise InvalidArgumentError(msg)
    if words[:1] == ["MERGE"] and "WHEN" not in words:  # Spark's words (its parser's check)
        msg = "There must be at least one WHEN clause in a MERGE statement"
        raise InvalidArgumentError(msg)
    try:
        trees = [t for t in sqlglot.parse(text, dialect=_DIALECT) if t is not None]
    except ParseError as e:
        raise InvalidArgumentError(_parse_error(e)) from e
    if len(trees) != 1:
        msg = f"the text holds {len(trees)} statements: {SUPPORTED} at a time"
        raise InvalidArgumentError(msg)
    tree = trees[0]
    _mark_typed_literals(tree, tokens)
    if isinstance(tree, exp.Merge):
        _check_merge(tree)
        kind: Literal["MERGE", "UPDATE", "DELETE"] = "MERGE"
    elif isinstance(tree, exp.Update):
        _check_args(tree, {"this", "expressions", "where"}, "UPDATE")
        kind = "UPDATE"
    elif isinstance(tree, exp.Delete):
        _check_args(tree, {"this", "where"}, "DELETE")
        kind = "DELETE"
    else:
        msg = f"{_statement_name(tree, tokens)} is not supported: {SUPPORTED}"
        if isinstance(tree, exp.Insert):
            msg += " (append rows with table.append(df))"
        raise InvalidArgumentError(msg)
    target = tree.this
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        msg = f"the {kind} target must be a table name, not {_shown(target)}"
        raise InvalidArgumentError(msg)
    _check_table(target, f"the {kind} target")
    return Statement(kind, _icemor_name(target), tree)


# ---- checks ----------------------------------------------------------------------------------

# What an argument of sqlglot's tree is called in a refusal.
_ARG_NAMES = {
    "with_": "a WITH clause (CTE)",
    "returning": "RETURNING",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "from_": "UPDATE … FROM",
    "using": "DELETE … USING",
    "tables": "DELETE of several tables",
    "cluster": "CLUSTER",
    "options": "OPTION (…)",
    "hint": "a hint",
    "using_cond": "USING (columns)",
    "version": "time travel (VERSION/TIMESTAMP AS OF)",
    "system_time": "time travel (FOR SYSTEM_TIME)",
    "sample": "TABLESAMPLE",
    "partition": "PARTITION (…)",
    "joins": "a join",
    "laterals": "LATERAL VIEW",
    "pivots": "PIVOT",
    "hints": "a hint",
    "changes": "CHANGES",
    "when": "time travel",
}


def _check_args(node: exp.Expr, allowed: set[str], where: str) -> None:
    for name, value in node.args.items():
        if name in allowed or value is None or value is False or value == []:
            continue
        what = _ARG_NAMES.get(name, name.rstrip("_").upper())
        if name == "with_":
            msg = f"{what} is not supported in {where}" + (
                ": write the query in USING (…)" if where == "MERGE" else ""
            )
        elif name in _INSTEAD:
            msg = f"{what} is not supported: {_INSTEAD[name]}"
        else:
            msg = f"{what} in {where} is not supported"
        raise InvalidArgumentError(msg)


_INSTEAD = {
    "from_": "write it as MERGE INTO … USING … WHEN MATCHED THEN UPDATE SET …",
    "using": "write it as MERGE INTO … USING … WHEN MATCHED THEN DELETE",
}


def _check_table(table: exp.Table, what: str) -> None:
    for name, value in table.args.items():
        if name in ("this", "db", "catalog", "alias") or value is None or value is False or value == []:
            continue
        msg = f"{_ARG_NAMES.get(name, name.upper())} on {what} is not supported"
        raise InvalidArgumentError(msg)
    alias = table.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns and what.endswith("target"):
        msg = f"column names after the alias of {what} are not supported"
        raise InvalidArgumentError(msg)


def _check_merge(tree: exp.Merge) -> None:
    _check_args(tree, {"this", "using", "on", "whens"}, "MERGE")
    whens = tree.args.get("whens")
    clauses = list(whens.expressions) if isinstance(whens, exp.Whens) else []
    if not clauses:  # Spark's words (its parser's check)
        msg = "There must be at least one WHEN clause in a MERGE statement"
        raise InvalidArgumentError(msg)
    for when in clauses:
        if when.args.get("source"):
            msg = "WHEN NOT MATCHED BY SOURCE is not supported by icemor's MERGE"
            raise InvalidArgumentError(msg)
    # Spark's parser: only the last clause of a kind may omit its condition (same words)
    for matched, name in ((True, "MATCHED"), (False, "NOT MATCHED [BY TARGET]")):
        group = [w for w in clauses if bool(w.args.get("matched")) is matched]
        if any(w.args.get("condition") is None for w in group[:-1]):
            msg = (
                f"When there are more than one {name} clauses in a MERGE statement, only the last "
                f"{name} clause can omit the condition"
            )
            raise InvalidArgumentError(msg)


# ---- MERGE -----------------------------------------------------------------------------------


def _merge(tree: exp.Merge, target_name: str) -> Merge:
    target = tree.this
    assert isinstance(target, exp.Table)
    target_alias = target.alias or target.name
    # a name without an alias may be qualified by its longer forms (db.t.id): written as t.id
    renames: _Qualifiers = {
        q: (target_alias,) for q in _qualifiers(target) if len(q) > 1 and not target.alias
    }
    source = tree.args["using"]
    source_table = source_query = None
    columns: tuple[str, ...] | None = None
    alias = source.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        columns = tuple(c.name for c in alias.columns)
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        _check_table(source, "the MERGE source")
        source_table = _sql(
            exp.Table(this=source.this, db=source.args.get("db"), catalog=source.args.get("catalog"))
        )
        source_alias = source.alias or source.name
        if not source.alias:
            renames.update({q: (source_alias,) for q in _qualifiers(source) if len(q) > 1})
    elif isinstance(source, exp.Subquery):
        _check_args(source, {"this", "alias"}, "the MERGE source")
        source_query = _sql(source.this)
        source_alias = source.alias or NO_SOURCE_ALIAS
    elif isinstance(source, exp.Values):  # (VALUES (…), (…)) AS s(a, b)
        source_query = "SELECT * FROM " + _sql(exp.Values(expressions=source.expressions))
        source_alias = source.alias or NO_SOURCE_ALIAS
    else:
        msg = f"the MERGE source must be a table, a view or a (query), not {_shown(source)}"
        raise InvalidArgumentError(msg)
    on = _text(tree.args["on"], renames)
    if _is_name(on):  # the builder reads a bare name as a key column
        on = f"({on})"
    out = []
    for i, when in enumerate(tree.args["whens"].expressions):
        out.append(_clause(when, i + 1, renames, target_alias))
    return Merge(
        target=target_name,
        target_alias=target_alias,
        source_alias=source_alias,
        on=on,
        clauses=tuple(out),
        source_table=source_table,
        source_query=source_query,
        source_columns=columns,
    )


def _clause(when: exp.When, number: int, renames: _Qualifiers, target_alias: str) -> Clause:
    matched = bool(when.args.get("matched"))
    head = "WHEN MATCHED" if matched else "WHEN NOT MATCHED"
    condition_node = when.args.get("condition")
    condition = _text(condition_node, renames) if condition_node is not None else None
    then = when.args.get("then")
    keys: _Qualifiers = {(target_alias.lower(),): ()}  # SET t.x, INSERT (t.x): the target's column x
    what = f"clause {number} ({head})"
    if matched and isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        return Clause("delete", condition, {})
    if matched and isinstance(then, exp.Update):
        items = then.expressions
        if len(items) == 1 and isinstance(items[0], exp.Star):
            return Clause("update", condition, None)
        return Clause("update", condition, _assignments(items, keys, None, renames, None, what=what))
    if not matched and isinstance(then, exp.Insert):
        if isinstance(then.this, exp.Star):
            return Clause("insert", condition, None)
        if not isinstance(then.this, exp.Tuple) or not isinstance(then.expression, exp.Tuple):
            msg = f"{what} needs a column list: INSERT (a, b) VALUES (…), or INSERT *"
            raise InvalidArgumentError(msg)
        names, values = then.this.expressions, then.expression.expressions
        if len(names) != len(values):  # Spark's words
            msg = f"The number of inserted values cannot match the fields ({what} THEN INSERT)"
            raise InvalidArgumentError(msg)
        pairs = [exp.EQ(this=n, expression=v) for n, v in zip(names, values, strict=True)]
        return Clause("insert", condition, _assignments(pairs, keys, None, renames, None, what=what))
    action = _action_name(then)
    takes = "UPDATE SET … or DELETE" if matched else "INSERT (…) VALUES (…) or INSERT *"
    msg = f"{what} THEN {action} is not a MERGE action: {head} takes {takes}"
    raise InvalidArgumentError(msg)


# ---- shared ----------------------------------------------------------------------------------

_Qualifiers = dict[tuple[str, ...], tuple[str, ...]]
"""Lowercase qualifier parts -> the parts written instead (none: the column alone)."""


def _assignments(
    items: Sequence[exp.Expr],
    keys: _Qualifiers,
    key_columns: Collection[str] | None,
    values: _Qualifiers,
    value_columns: Collection[str] | None,
    *,
    what: str,
) -> dict[str, str]:
    """``col = value`` items as column -> value text; the column unqualified (``t.x`` is ``x``),
    a nested one dotted (the builder refuses it)."""
    out: dict[str, str] = {}
    given: dict[str, list[str]] = {}
    for item in items:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column | exp.Dot):
            msg = f"{what}: {_shown(item)} is not an assignment column = value"
            raise InvalidArgumentError(msg)
        identifiers = _requalified(_identifiers(item.this), keys, key_columns)
        name = ".".join(i.name for i in identifiers)
        if isinstance(item.expression, exp.Column) and _identifiers(item.expression)[0].sql() == "DEFAULT":
            msg = f"{what}: {name} = DEFAULT (the column's default value) is not supported"
            raise InvalidArgumentError(msg)
        value = _text(item.expression, values, value_columns)
        given.setdefault(name.lower(), []).append(value)
        out[name] = value
    for name, texts in given.items():
        if len(texts) > 1:  # Spark's words
            msg = f"Multiple assignments for '{name}': {', '.join(texts)}"
            raise InvalidArgumentError(msg)
    return out


def _text(node: exp.Expr, qualifiers: _Qualifiers, columns: Collection[str] | None = None) -> str:
    """Spark SQL text of ``node``, each column's qualifier rewritten by ``qualifiers`` (with
    ``columns``: only where the next part is a column of the table, as Spark resolves names)."""
    node = node.copy()
    for column in list(node.find_all(exp.Column)):
        identifiers = _identifiers(column)
        new = _requalified(identifiers, qualifiers, columns)
        if new is not identifiers:
            replacement = _column(new)
            if column is node:
                node = replacement
            else:
                column.replace(replacement)
    return _sql(node)


def _requalified(
    identifiers: list[exp.Identifier], qualifiers: _Qualifiers, columns: Collection[str] | None
) -> list[exp.Identifier]:
    """``identifiers`` with a qualifier rewritten (the same list when none applies)."""
    lowered = tuple(i.name.lower() for i in identifiers)
    for size in range(len(lowered) - 1, 0, -1):  # the longest qualifier first, as Spark matches
        replacement = qualifiers.get(lowered[:size])
        if replacement is None:
            continue
        if columns is not None and lowered[size] not in columns:
            continue  # not a column of the table: Spark reads the name as a nested field
        return [exp.to_identifier(r) for r in replacement] + identifiers[size:]
    return identifiers


def _column(identifiers: list[exp.Identifier]) -> exp.Expr:
    head, rest = identifiers[:4], identifiers[4:]
    keys = ("this", "table", "db", "catalog")
    node: exp.Expr = exp.Column(**dict(zip(keys, reversed(head), strict=False)))
    for ident in rest:
        node = exp.Dot(this=node, expression=ident)
    return node


def _identifiers(node: exp.Expr) -> list[exp.Identifier]:
    if isinstance(node, exp.Dot):
        return [*_identifiers(node.this), *_identifiers(node.expression)]
    if isinstance(node, exp.Column):
        return [p for p in node.parts if isinstance(p, exp.Identifier)]
    if isinstance(node, exp.Identifier):
        return [node]
    msg = f"{_shown(node)} is not a column name"
    raise InvalidArgumentError(msg)


def _qualifiers(table: exp.Table) -> _Qualifiers:
    """What qualifies the table's columns, each mapped to nothing: its alias, else its name and
    the name's longer forms (``t``, ``db.t``, ``cat.db.t``), as Spark resolves them."""
    if table.alias:
        return {(table.alias.lower(),): ()}
    parts = [p.name.lower() for p in table.parts if isinstance(p, exp.Identifier)]
    return {tuple(parts[i:]): () for i in range(len(parts))}


def _icemor_name(table: exp.Table) -> str:
    parts = [p.name for p in table.parts if isinstance(p, exp.Identifier)]
    if any("." in p or not p for p in parts):
        msg = f"the table name {_sql(table)} has a part with a dot in it: icemor names tables namespace.table"
        raise InvalidArgumentError(msg)
    return ".".join(parts)


def _is_name(text: str) -> bool:
    return text.replace("_", "a").isalnum() and not text[0].isdigit()


def _statement_name(tree: exp.Expr, tokens: Sequence[Token]) -> str:
    words = [t.text.upper() for t in tokens[:2]]
    if words in (["INSERT", "INTO"], ["INSERT", "OVERWRITE"]):
        return " ".join(words)
    return f"a {words[0] if words else type(tree).__name__.upper()} statement"


def _action_name(node: exp.Expr | None) -> str:
    if isinstance(node, exp.Insert):
        return "INSERT"
    if isinstance(node, exp.Update):
        return "UPDATE"
    return _shown(node) if node is not None else "nothing"


def _shown(node: exp.Expr | None) -> str:
    text = _sql(node) if node is not None else ""
    return text if len(text) <= 60 else text[:57] + "..."


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "syntax error"


def _parse_error(e: ParseError) -> str:
    errors: list[dict[str, Any]] = list(getattr(e, "errors", []) or [])
    if errors:
        first = errors[0]
        where = f" (line {first.get('line')}, column {first.get('col')})" if first.get("line") else ""
        return f"cannot parse the statement: {first.get('description', 'syntax error')}{where}"
    return f"cannot parse the statement: {_first_line(str(e))}"


# ---- Spark SQL text from the tree --------------------------------------------------------------


def _mark_typed_literals(tree: exp.Expr, tokens: Sequence[Token]) -> None:
    """``DATE '…'``, ``TIMESTAMP '…'``: sqlglot reads them as CASTs; mark them to be written back as
    written (Spark refuses a malformed typed literal where its CAST gives NULL)."""
    starts = {t.start: i for i, t in enumerate(tokens)}
    for cast in tree.find_all(exp.Cast):
        literal = cast.this
        if not isinstance(literal, exp.Literal) or not literal.is_string:
            continue
        i = starts.get(literal.meta.get("start", -1))
        if i is not None and i > 0 and tokens[i - 1].token_type != TokenType.L_PAREN:
            cast.meta["typed_literal"] = True


def _instr_sql(self: SparkGenerator, e: exp.StrPosition) -> str:
    """``instr(s, sub)`` / ``position(sub IN s)`` as ``instr``: sqlglot writes ``LOCATE``, outside the
    functions the builders accept (docs/sql.md); all three mean the same in Spark."""
    if e.args.get("position") is not None or e.args.get("occurrence") is not None:
        return strposition_sql(self, e, func_name="LOCATE", supports_position=True)
    return self.func("instr", e.this, e.args.get("substr"))


class _Generator(SparkGenerator):
    TRANSFORMS: ClassVar[dict[type[exp.Expr], Callable[..., str]]] = {
        **SparkGenerator.TRANSFORMS,
        exp.StrPosition: _instr_sql,
    }

    def cast_sql(self, expression: exp.Cast, safe_prefix: str | None = None) -> str:
        if expression.meta.get("typed_literal"):
            return f"{self.sql(expression, 'to')} {self.sql(expression, 'this')}"
        return str(super().cast_sql(expression, safe_prefix))


class IcemorSpark(Spark):
    """Spark's dialect, writing back the subset of docs/sql.md as the builders accept it."""

    Generator = _Generator


_DIALECT = IcemorSpark()


def _sql(node: exp.Expr) -> str:
    return str(node.sql(dialect=_DIALECT))
