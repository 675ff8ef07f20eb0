"""Any Spark SQL statement read once, with where each table reference and query is written.

``icemor.spark.attach`` routes a session's statements (:mod:`icemor.engines.spark.front`): it
needs the statement's kind, the tables it names (with time travel) and, for ``INSERT``, the
text of its query. All of it comes from one parse with the same sqlglot Spark dialect as
:mod:`icemor.expr.dml` (whose parser notes the spans of conditions and values); this parser
notes the spans of table references, time-travel clauses and queries too, so that the router
replaces a reference by a view name at the characters the parser read, never by a pattern.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from icemor.exceptions import InvalidArgumentError, first_line
from icemor.expr.dml import IcemorSpark, _Parser
from icemor.expr.recursion import deep
from icemor.expr.sql import check_size

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "ParsedStatement",
    "TableReference",
    "command_words",
    "dotted",
    "parse_any",
    "referenced_names",
    "spliced",
]


@dataclass(frozen=True)
class TableReference:
    """A table named in a statement: its parts as written and the characters to replace.

    Attributes:
        parts: The name's parts, unquoted (``("icemor", "shop", "orders")``).
        start: The first character of the name.
        end: One past the last character of the name and its time-travel clause.
        version: ``("VERSION" | "TIMESTAMP", expression text)`` of ``AS OF``, or None.
        alias: The alias written after it, or None.
    """

    parts: tuple[str, ...]
    start: int
    end: int
    version: tuple[str, str] | None
    alias: str | None


@dataclass(frozen=True)
class ParsedStatement:
    """One statement: its text, its sqlglot tree and its kind (``select``, ``insert``, ...)."""

    text: str
    tree: exp.Expr
    kind: str

    def references(self) -> list[TableReference]:
        """The tables the statement names with two or more parts (one-part names are Spark's:
        temporary views and CTEs), in the order written."""
        return sorted(_references(self.tree), key=lambda r: r.start)

    def query_text(self) -> str | None:
        """The text of an INSERT's query (``SELECT …``, ``VALUES …``), or None."""
        query = self.tree.args.get("expression")
        span = query.meta.get("query_span") if isinstance(query, exp.Expr) else None
        return None if span is None else self.text[span[0] : span[1]]


_KINDS: tuple[tuple[type[exp.Expr], str], ...] = (
    (exp.Merge, "merge"),
    (exp.Update, "update"),
    (exp.Delete, "delete"),
    (exp.Insert, "insert"),
    (exp.Create, "create"),
    (exp.Drop, "drop"),
    (exp.Describe, "describe"),
    (exp.Alter, "alter"),
    (exp.Query, "select"),
)


def parse_any(text: str) -> ParsedStatement:
    """Parse one Spark SQL statement of any kind (sqlglot's Spark dialect).

    Raises:
        InvalidArgumentError: Not one statement, or text sqlglot cannot read (one line).
    """
    check_size(text, what="statement", spark=True)
    try:
        tokens = _DIALECT.tokenize(text)
        if _is_extension(tokens):
            # Iceberg's ALTER TABLE extensions are not Spark's grammar (nor sqlglot's): the
            # front reads them from their words (icemor.expr.ddl.extension_action)
            command = exp.Command(this="ALTER", expression=exp.Literal.string(text.strip()[5:].strip()))
            return ParsedStatement(text, command, "command")
        parsed = deep(lambda: _DIALECT.parser().parse(tokens, text))
    except (ParseError, TokenError) as e:
        msg = f"cannot read the statement: {first_line(e)}"
        raise InvalidArgumentError(msg) from e
    trees = [t for t in parsed if t is not None and not isinstance(t, exp.Semicolon)]
    if len(trees) != 1:
        msg = f"the text holds {len(trees)} statements: give one at a time"
        raise InvalidArgumentError(msg)
    tree = trees[0]
    kind = next((k for cls, k in _KINDS if isinstance(tree, cls)), "other")
    if isinstance(tree, exp.Command):
        kind = "command"
    return ParsedStatement(text, tree, kind)


_EXTENSIONS = (
    ("CREATE", "BRANCH"),
    ("CREATE", "TAG"),
    ("CREATE", "OR"),
    ("REPLACE", "BRANCH"),
    ("REPLACE", "TAG"),
    ("DROP", "BRANCH"),
    ("DROP", "TAG"),
    ("ADD", "PARTITION"),
    ("DROP", "PARTITION"),
    ("REPLACE", "PARTITION"),
    ("SET", "IDENTIFIER"),
    ("DROP", "IDENTIFIER"),
    ("WRITE", "ORDERED"),
    ("WRITE", "LOCALLY"),
    ("WRITE", "DISTRIBUTED"),
    ("WRITE", "UNORDERED"),
    ("UNSET", "TBLPROPERTIES"),
)


def _is_extension(tokens: Sequence[Any]) -> bool:
    """``ALTER TABLE <name> <one of Iceberg's extension forms>`` (``ADD PARTITION FIELD``, …)."""
    words = [t.text.upper() for t in tokens]
    if words[:2] != ["ALTER", "TABLE"] or len(words) < 5:
        return False
    i = 3
    while i + 1 < len(words) and words[i] == ".":
        i += 2
    pair = tuple(words[i : i + 2])
    if pair in (("ADD", "PARTITION"), ("DROP", "PARTITION"), ("REPLACE", "PARTITION")):
        return words[i + 2 : i + 3] == ["FIELD"]
    return pair in _EXTENSIONS


def command_words(statement: ParsedStatement) -> list[str]:
    """The words of a statement sqlglot keeps as a command (``CALL``, ``SHOW …``): its tokens'
    texts, string literals quoted again."""
    text = statement.text.strip()
    first = text.split(None, 1)[0]
    rest = text[len(first) :]
    # the tokenizer keeps what follows a command's keyword as one string: the rest on its own
    tokens = _DIALECT.tokenize(rest)
    return [first, *(rest[t.start : t.end + 1] for t in tokens if t.text != ";")]


def dotted(words: Sequence[str], i: int) -> tuple[str, int]:
    """The dotted name starting at ``words[i]`` (``a . b . c`` -> ``a.b.c``), and the index after it."""
    j = i + 1
    while j + 1 < len(words) and words[j] == ".":
        j += 2
    return "".join(words[i:j]), j


def spliced(text: str, edits: Sequence[tuple[int, int, str]]) -> str:
    """``text`` with each ``(start, end, new)`` span replaced (spans must not overlap)."""
    out = text
    for start, end, new in sorted(edits, reverse=True):
        out = out[:start] + new + out[end:]
    return out


def referenced_names(tree: exp.Expr) -> frozenset[str] | None:
    """Every name (lower case) the statement may use for a column, or None when it may use any.

    A superset: each identifier counts (tables, aliases and lambda variables too), so a read of
    the statement's tables may keep only the columns named here. None where columns are used
    without being named: a star other than ``count(*)``, a ``NATURAL`` join, a ``PIVOT`` (which
    groups by the columns it does not name).
    """
    if any(not isinstance(star.parent, exp.Count) for star in tree.find_all(exp.Star)):
        return None
    if any(str(j.args.get("method") or "").upper() == "NATURAL" for j in tree.find_all(exp.Join)):
        return None
    if next(tree.find_all(exp.Pivot), None) is not None:
        return None
    return frozenset(i.name.lower() for i in tree.find_all(exp.Identifier))


def _references(tree: exp.Expr) -> Iterator[TableReference]:
    for table in tree.find_all(exp.Table):
        span = table.meta.get("name_span")
        if span is None or len(table.parts) < 2:
            continue
        end = span[1]
        version = table.args.get("version")
        shown = None
        if isinstance(version, exp.Version):
            vspan = version.meta.get("span")
            if vspan is None or not isinstance(version.expression, exp.Expr):
                continue
            end = vspan[1]
            espan = version.expression.meta.get("expression_span")
            shown = (str(version.this).upper(), "" if espan is None else tree_text(tree, espan))
        alias = table.args.get("alias")
        yield TableReference(
            tuple(p.name for p in table.parts),
            span[0],
            end,
            shown,
            alias.name if isinstance(alias, exp.TableAlias) and alias.name else None,
        )


def tree_text(tree: exp.Expr, span: tuple[int, int]) -> str:
    """The statement's text at ``span`` (the root's ``meta["text"]``)."""
    root = tree.root()
    return str(root.meta.get("text", ""))[span[0] : span[1]]


class _StatementParser(_Parser):
    """Spark's parser noting the spans (start, one past the end) of table names
    (``meta["name_span"]``), time-travel clauses (``meta["span"]`` of the Version, and
    ``meta["expression_span"]`` of its expression) and of INSERT's query (``meta["query_span"]``)."""

    VERSION_PHRASES = {**_Parser.VERSION_PHRASES, ("FOR", "SYSTEM_VERSION"): "VERSION"}  # noqa: RUF012

    def _spanned(self, key: str, parse: object) -> exp.Expr | None:
        first = self._curr
        node = parse()  # type: ignore[operator]
        if isinstance(node, exp.Expr) and first is not None and self._prev is not None:
            node.meta[key] = (first.start, self._prev.end + 1)
        return node  # type: ignore[no-any-return]

    def _parse_table_parts(self, *args: object, **kwargs: object) -> exp.Table | exp.Dot | None:
        first = self._curr
        node = super()._parse_table_parts(*args, **kwargs)  # type: ignore[arg-type]
        if isinstance(node, exp.Table) and first is not None:
            # the parts end where the last identifier ends, before CHANGES/AT/pivots
            ends = [e for p in node.parts if isinstance(e := p.meta.get("end"), int)]
            if ends and len(ends) == len(node.parts):
                node.meta["name_span"] = (first.start, max(ends) + 1)
        return node

    def _parse_version(self) -> exp.Version | None:
        first = self._index
        node = super()._parse_version()
        if node is not None and self._prev is not None:
            node.meta["span"] = (self._tokens[first].start, self._prev.end + 1)
            expression = node.expression
            words = [t.text.upper() for t in self._tokens[first : self._index]]
            if isinstance(expression, exp.Expr) and "OF" in words:
                # AS OF <expr>: the expression is the tokens after the first OF
                start = self._tokens[first + words.index("OF") + 1].start
                expression.meta["expression_span"] = (start, self._prev.end + 1)
        return node

    def _parse_ddl_select(self, *args: object, **kwargs: object) -> exp.Expr | None:
        parse = super()._parse_ddl_select
        return self._spanned("query_span", lambda: parse(*args, **kwargs))

    def _parse_derived_table_values(self, *args: object, **kwargs: object) -> exp.Values | None:
        return self._spanned(  # type: ignore[return-value]
            "query_span",
            lambda: super(_StatementParser, self)._parse_derived_table_values(*args, **kwargs),  # type: ignore[arg-type]
        )

    def parse(self, raw_tokens: list[object], sql: str | None = None) -> list[exp.Expr | None]:  # type: ignore[override]
        trees = super().parse(raw_tokens, sql)  # type: ignore[arg-type]
        for tree in trees:
            if tree is not None:
                tree.meta["text"] = sql or ""
        return trees


class _StatementDialect(IcemorSpark):
    Parser = _StatementParser


_DIALECT = _StatementDialect()
