"""Parse SQL expressions: one expression or a clear refusal, and its columns.

DuckDB's parser (``json_serialize_sql``) gives the syntax tree without binding anything, so a
condition is parsed once, whatever engine evaluates it; :mod:`icemor.expr.condition` turns what
translates exactly into Iceberg expressions.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyiceberg.expressions as _expressions

from icemor.exceptions import InvalidArgumentError, first_line, shortened

if TYPE_CHECKING:
    from collections.abc import Callable

    import duckdb


# pyiceberg's predicates are pydantic models whose (term, value) constructors mypy cannot see
_E: Any = _expressions

__all__ = [
    "ALLOWED_FUNCTIONS",
    "MAX_NESTING",
    "MAX_TEXT_CHARS",
    "SqlExpression",
    "UnsupportedSqlError",
    "check_size",
    "parse_sql",
    "quote_identifier",
]

_local = threading.local()


def _parser() -> duckdb.DuckDBPyConnection:
    con: duckdb.DuckDBPyConnection | None = getattr(_local, "parser", None)
    if con is None:
        # a scan without a text condition needs no DuckDB (tests/test_import.py)
        import duckdb  # noqa: PLC0415 - cost: duckdb ~100 ms

        con = duckdb.connect()
        _local.parser = con
    return con


@dataclass(frozen=True)
class SqlExpression:
    """One SQL scalar expression: its text and DuckDB's syntax tree of it."""

    text: str
    tree: dict[str, Any] = field(repr=False, compare=False)

    def columns(self) -> set[tuple[str, ...]]:
        """Every column reference, as its dotted parts (``t.id`` is ``("t", "id")``)."""
        out: set[tuple[str, ...]] = set()
        _walk(
            self.tree, lambda n: out.add(tuple(n["column_names"])) if n.get("class") == "COLUMN_REF" else None
        )
        return out


class UnsupportedSqlError(InvalidArgumentError):
    """SQL that parses but uses what icemor refuses: a subquery, a function outside the allow-list, …

    Row filters are tried in pyiceberg's language first; this tells them that the text was
    SQL all along and the refusal, not pyiceberg's parse error, is the message to show.
    """


def parse_sql(text: str, *, what: str = "expression") -> SqlExpression:
    """Parse one SQL scalar expression.

    Args:
        text: The expression, e.g. ``"qty + 1"`` or ``"region = 'EU' AND qty > 3"``.
        what: How errors name it (``condition``, ``SET value of qty``, …).

    Raises:
        InvalidArgumentError: Not exactly one expression (a syntax error, a second statement
            smuggled in with ``;``, two expressions separated by a comma, an empty string),
            text too long or nested too deeply (:func:`check_size`), or text that Spark SQL
            would read otherwise than DuckDB (a double-quoted name, adjacent string literals
            such as ``'it''s'``).
        UnsupportedSqlError: A subquery, a window function, ``*``, a parameter, an aggregate,
            or a function outside :data:`ALLOWED_FUNCTIONS` (qualified names such as
            ``system.main.upper`` included); a string literal whose value holds a backslash
            (``'a\\\\b'``, ``'a\\%'``); an operator outside the list (``//``, ``^``) is a plain
            InvalidArgumentError.

    String literals are read as Spark SQL reads them: a backslash escapes (``'a\\'b'`` is
    ``a'b``, ``'\\u0041'`` is ``A``); the expression's ``text`` then spells such a literal so that
    DuckDB and Spark read the same value (:func:`_spark_strings`).
    """
    if not text or not text.strip():
        msg = f"the {what} is empty"
        raise InvalidArgumentError(msg)
    check_size(text, what=what)
    shown = _shown(text)
    spelled = _spark_strings(text, what=what, shown=shown)
    if spelled != text:
        check_size(spelled, what=what)  # what DuckDB parses: chr(39) calls add a level
    text = spelled
    wrapped = f"{_OPEN}{text}\n)"
    raw: tuple[Any, ...] | None = _parser().execute("SELECT json_serialize_sql($1)", [wrapped]).fetchone()
    tree: dict[str, Any] = json.loads(raw[0]) if raw else {"error": True, "error_message": "no result"}
    if tree.get("error"):
        reason = first_line(str(tree.get("error_message", "")), default="syntax error")
        if "max expression depth" in reason.lower():  # a long flat chain such as 1 + 1 + … + 1
            msg = (
                f"the {what} {shown!r} nests too deeply for the SQL parser (a chain of about 1,000 "
                "operators or more): simplify it"
            )
            raise InvalidArgumentError(msg)
        msg = f"cannot parse the {what} {shown!r}: {reason}"
        raise InvalidArgumentError(msg)
    statements = tree.get("statements", [])
    node = statements[0]["node"] if len(statements) == 1 else {}
    items = node.get("select_list", [])
    simple = (
        node.get("type") == "SELECT_NODE"
        and len(items) == 1
        and node.get("from_table", {}).get("type") == "EMPTY"
        and node.get("where_clause") is None
        and not node.get("group_expressions")
        and not node.get("modifiers")
    )
    if not simple:
        msg = f"the {what} {shown!r} must be one SQL expression"
        raise InvalidArgumentError(msg)
    expr = items[0]
    if expr.get("function_name") == "row" and expr.get("query_location") == len(_OPEN) - 1:
        # "a, b" in our parentheses reads as the row (a, b)
        msg = f"the {what} {shown!r} must be one SQL expression, not a comma-separated list"
        raise InvalidArgumentError(msg)
    nodes: list[dict[str, Any]] = []
    _walk(expr, nodes.append)
    _check_supported(nodes, what, shown)
    problem = _spark_reads_otherwise(wrapped)
    if problem:
        msg = f"the {what} {shown!r} {problem}"
        raise InvalidArgumentError(msg)
    return SqlExpression(text, expr)


def _shown(text: str) -> str:
    return shortened(text, 80)


def _check_supported(nodes: list[dict[str, Any]], what: str, shown: str) -> None:
    """Refuse the node kinds, functions and operators outside the subset."""
    classes = {n["class"] for n in nodes}
    for cls, why in _REFUSED_NODES.items():
        if cls in classes:
            msg = f"the {what} {shown!r} uses {why}, which is not supported"
            raise UnsupportedSqlError(msg)
    functions = [n for n in nodes if n.get("class") == "FUNCTION"]
    aggregates = sorted({str(n["function_name"]).lower() for n in functions} & _AGGREGATES)
    if aggregates:
        msg = (
            f"the {what} {shown!r} uses the aggregate {aggregates[0]}(), which has no meaning per row: "
            "row-level expressions take one row's values"
        )
        raise UnsupportedSqlError(msg)
    # operators raise plain InvalidArgumentError: in a row filter (id >> 4) a typo is likelier,
    # and the filter language's message says where it went wrong
    for op in ("^", "**"):
        if any(n.get("function_name") == op for n in functions):
            msg = f"the {what} {shown!r} uses {op}, which Spark SQL reads otherwise: write power(x, y)"
            raise InvalidArgumentError(msg)
    # in the order written, so the message names the first one
    for n in sorted(functions, key=lambda n: int(n.get("query_location") or 0)):
        name = str(n["function_name"]).lower()
        qualified = ".".join(p for p in (n.get("catalog"), n.get("schema")) if p)
        if qualified:
            msg = (
                f"function {qualified}.{name}() is not allowed in the {what} {shown!r}: write functions "
                "without a schema or catalog; allowed: see docs/sql.md"
            )
            raise UnsupportedSqlError(msg)
        if name not in ALLOWED_FUNCTIONS and n.get("is_operator"):
            msg = f"operator {name} is not allowed in the {what} {shown!r}; allowed: see docs/sql.md"
            raise InvalidArgumentError(msg)
        if name not in ALLOWED_FUNCTIONS:
            msg = f"function {name}() is not allowed in the {what} {shown!r}; allowed: see docs/sql.md"
            raise UnsupportedSqlError(msg)


MAX_TEXT_CHARS = 1_000_000
"""The longest condition, value or row filter text accepted (a literal IN list of ~100,000 values)."""
MAX_NESTING = 100
"""The deepest nesting accepted: levels of parentheses and CASE, plus a run of NOTs or signs."""


def check_size(text: str, *, what: str, spark: bool = False) -> None:
    """Refuse text too long or nested too deeply, before any parser sees it.

    A parser's time and recursion grow with the nesting (a 50,000-level filter once took 127 s);
    this is at most one linear pass over the text's tokens (string literals, quoted names and
    comments are one token each), ending as soon as the limit is passed.

    Args:
        text: The text.
        what: How errors name it (``condition``, ``statement``, …).
        spark: Read string literals as Spark SQL's lexer does (a backslash escapes the next
            character, ``"…"`` is a string, ``r'…'`` a raw one): a whole Spark SQL statement.
            Otherwise they are DuckDB's and pyiceberg's (``''`` is a quote, ``E'…'``, ``$$…$$``).

    Raises:
        InvalidArgumentError: More than :data:`MAX_TEXT_CHARS` characters, or more than
            :data:`MAX_NESTING` levels.
    """
    if len(text) > MAX_TEXT_CHARS:
        msg = (
            f"the {what} is too long ({len(text):,} characters, at most {MAX_TEXT_CHARS:,}): "
            "filter on fewer values, or in several operations"
        )
        raise InvalidArgumentError(msg)
    if _nesting(text, stop=MAX_NESTING, lexer=_SPARK_TOKEN if spark else _TOKEN) > MAX_NESTING:
        msg = (
            f"the {what} {_shown(text)!r} nests too deeply (more than {MAX_NESTING} levels of "
            "parentheses, CASE, NOT or signs): simplify it"
        )
        raise InvalidArgumentError(msg)


# One token of SQL (or of pyiceberg's filter language) for counting nesting: what can hide a
# parenthesis (string literals of every quoting, quoted names, comments) is one token.
_TOKEN = re.compile(
    r"""[eE]'(?:[^'\\]|\\.|'')*'?      # E'...' (backslash escapes)
    | '(?:[^']|'')*'?                   # '...'
    | "(?:[^"]|"")*"?                   # "name"
    | `(?:[^`]|``)*`?                   # `name`
    | \$(\w*)\$.*?(?:\$\1\$|\Z)         # $$...$$, $tag$...$tag$
    | --[^\n]*                          # a comment to the end of the line
    | /\*.*?(?:\*/|\Z)                  # /* a comment */
    | \w+                               # a word or a number
    | \S                                # anything else, one character
    """,
    re.VERBOSE | re.DOTALL,
)
# The same, by Spark SQL's lexer: a backslash escapes in '...' and "..." (both strings), r'...' is
# raw, no E'...' or $$...$$. Nested /* /* */ */ comments end early here: counted too deep at worst.
_SPARK_TOKEN = re.compile(
    r"""r'[^']*'? | r"[^"]*"?             # r'raw', r"raw"
    | '(?:[^'\\]|\\.)*'?                 # 'a\'b'
    | "(?:[^"\\]|\\.)*"?                 # "a\"b"
    | `(?:[^`]|``)*`?                   # `name`
    | --[^\n]*                          # a comment to the end of the line
    | /\*.*?(?:\*/|\Z)                  # /* a comment */
    | \w+                               # a word or a number
    | \S                                # anything else, one character
    """,
    re.VERBOSE | re.DOTALL,
)
# words after which a sign is unary (AND -x), unlike after an operand (a - x)
_BEFORE_OPERAND = {"and", "or", "then", "when", "else", "in", "is", "between", "like", "ilike", "escape",
                   "as", "from", "for", "select", "where", "interval", "distinct", "exists"}  # fmt: skip


def _nesting(text: str, *, stop: int, lexer: re.Pattern[str] = _TOKEN) -> int:
    """The deepest nesting in ``text``: open parentheses and CASEs, plus the current run of
    NOTs and unary signs (``NOT NOT x``, ``- - x`` nest without parentheses).

    One lazy pass that stops once past ``stop`` (a 50,000-level filter is refused after its
    first hundred tokens); text with fewer openers than ``stop`` is not scanned at all.
    """
    lowered = text.lower()
    bound = sum(text.count(c) for c in "(-+") + lowered.count("not") + lowered.count("case")
    if bound <= stop:  # cannot nest deeper than it has openers
        return bound
    depth = run = deepest = 0
    operand_before = False  # whether a + or - here is binary
    for m in lexer.finditer(lowered):
        token = m.group()
        if token.startswith(("--", "/*")):
            continue
        if token in ("(", "case"):
            depth += 1
            operand_before = False
        elif token in (")", "end"):
            depth = max(depth - 1, 0)
            run = 0
            operand_before = True
        elif token == "not" or (token in ("-", "+") and not operand_before):
            run += 1
            operand_before = False
        else:
            run = 0
            operand_before = (token[0].isalnum() or token[0] in "_'\"`$") and token not in _BEFORE_OPERAND
        deepest = max(deepest, depth + run)
        if deepest > stop:
            break
    return deepest


_OPEN = "SELECT ("
_AGGREGATES = {
    "sum", "avg", "mean", "count", "min", "max", "any_value", "first", "last", "first_value",
    "last_value", "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp",
    "collect_list", "collect_set", "array_agg", "list", "string_agg", "listagg", "bool_and",
    "bool_or", "every", "some", "median", "percentile", "approx_count_distinct", "count_if", "count_star",
}  # fmt: skip
_REFUSED_NODES = {
    "SUBQUERY": "a subquery",
    "WINDOW": "a window function",
    "STAR": "*",
    "PARAMETER": "a parameter placeholder",
    "POSITIONAL_REFERENCE": "a positional reference (#n)",
}

# The one allow-list of functions a condition or value may call (docs/sql.md lists the same,
# tests/expr/test_sql.py checks both agree). Deterministic scalar functions, and now() (one instant
# per statement on both engines); nothing that reads the session, the catalog, files, settings or
# the query (current_setting, current_query, getvariable, …). DuckDB's parser lowercases names
# and spells operators and some syntax as functions: those names are here too, or that syntax
# could not be written.
ALLOWED_FUNCTIONS: frozenset[str] = frozenset({
    # arithmetic
    "+", "-", "*", "/", "%", "abs", "round", "ceil", "floor", "sign", "power", "sqrt", "ln",
    # NULL handling (coalesce and ifnull are no function calls in DuckDB's tree)
    "nullif", "if", "greatest", "least", "isnan",
    # strings; LIKE, NOT LIKE, ILIKE, NOT ILIKE, with ESCAPE; position(sub IN s)
    "||", "concat", "concat_ws", "length", "upper", "lower", "trim", "ltrim", "rtrim", "substring",
    "substr", "left", "right", "replace", "lpad", "rpad", "repeat", "reverse", "instr", "position",
    "contains", "chr", "~~", "!~~", "~~*", "!~~*", "like_escape", "ilike_escape",
    # dates and times; extract(f FROM x) is date_part, INTERVAL n UNIT is to_<unit>s(trunc(n))
    "year", "month", "day", "dayofmonth", "quarter", "dayofyear", "weekofyear", "dayofweek", "hour",
    "minute", "second", "date_part", "last_day", "date_add", "date_trunc", "make_date", "now",
    "to_seconds", "to_minutes", "to_hours", "to_days", "to_months", "to_years", "trunc",
    # a row value: (a, b) IN ((1, 2), (3, 4))
    "row",
})  # fmt: skip


def _spark_reads_otherwise(sql: str) -> str | None:
    """What in ``sql`` Spark SQL reads otherwise than DuckDB, if anything (docs/sql.md).

    A double-quoted name is a string literal in Spark (``"qty"`` is the text qty); in a
    string literal Spark ends the literal at ``''`` (``'it''s'`` is its) and takes ``\\``
    as an escape (``'a\\nb'`` holds a newline). Silently different results: refused.
    """
    import duckdb  # noqa: PLC0415 - cost: duckdb ~100 ms

    tokens = duckdb.tokenize(sql)
    raw = sql.encode()  # DuckDB's token positions are UTF-8 byte offsets
    for k, (start, kind) in enumerate(tokens):
        end = tokens[k + 1][0] if k + 1 < len(tokens) else len(raw)
        token = raw[start:end].decode(errors="replace").rstrip()
        if kind == duckdb.token_type.identifier and token.startswith('"'):
            return (
                f"quotes a name with double quotes ({token}), which Spark SQL reads as a string: "
                "quote names with backquotes (`name`)"
            )
        if kind == duckdb.token_type.string_const and ("''" in token[1:-1] or "\\" in token):
            return (
                f"has a string literal with a quote or backslash in it ({token}), which Spark SQL "
                "reads otherwise: write them as chr(39) and chr(92), e.g. concat('it', chr(39), 's')"
            )
    return None


# Where Spark SQL takes only a string literal, not an expression such as concat(…)
_LITERAL_ONLY = {"ESCAPE", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "INTERVAL"}


def _spark_strings(text: str, *, what: str, shown: str) -> str:
    """``text`` with each string literal that has a backslash in it spelled so that DuckDB and
    Spark SQL read the value Spark SQL reads (``'a\\'b'``: ``concat('a', chr(39), 'b')``).

    Spark SQL (``spark.sql.parser.escapedStringLiterals=false``, its default) takes a backslash
    in a string literal as an escape (``\\'``, ``\\"``, ``\\n``, ``\\t``, ``\\u0041``, …; ``\\%`` and
    ``\\_`` keep theirs), DuckDB as a plain character, so ``'a\\'b'`` does not even end where Spark
    ends it. sqlglot's Spark tokenizer reads literals as Spark does (tests/faults/test_sql_input.py
    holds it against Spark); the value is written back without escapes, a quote in it as
    ``chr(39)``. A value still holding a backslash is refused: a LIKE pattern reads it as an
    escape on Spark only. Text without a backslash reads the same on both and is not tokenized.

    Raises:
        InvalidArgumentError: Text Spark SQL's lexer cannot read (``'a\\'`` is unterminated).
        UnsupportedSqlError: A literal whose value holds a backslash (or a lone UTF-16
            surrogate), or a quote where Spark takes only a literal (``ESCAPE``, ``DATE '…'``).
    """
    if "\\" not in text:
        return text
    from sqlglot.dialects.spark import Spark  # noqa: PLC0415 - cost: sqlglot ~200 ms
    from sqlglot.errors import TokenError  # noqa: PLC0415 - cost: sqlglot ~200 ms
    from sqlglot.tokenizer_core import TokenType  # noqa: PLC0415 - cost: sqlglot ~200 ms

    try:
        tokens = Spark().tokenize(text)
    except TokenError as e:
        reason = first_line(e, default="syntax error")
        msg = (
            f"cannot read the {what} {shown!r} as Spark SQL reads it (a backslash in a string "
            f"escapes the next character): {reason}"
        )
        raise InvalidArgumentError(msg) from e
    out: list[str] = []
    done = 0
    for k, token in enumerate(tokens):
        source = text[token.start : token.end + 1]
        if token.token_type != TokenType.STRING or not source.startswith("'") or "\\" not in source:
            continue  # "..." stays for _spark_reads_otherwise to refuse as a name
        value = token.text  # sqlglot joins \\uD83D\\uDE00 and replaces a lone surrogate, as Spark does
        before = tokens[k - 1].text.upper() if k > 0 else ""
        if any("\ud800" <= c <= "\udfff" for c in value):  # no UTF-8 spells it
            problem = "holds a lone UTF-16 surrogate: write the character itself"
        elif "\\" in value:
            problem = "holds a backslash (LIKE reads it as an escape on Spark only): write chr(92)"
        elif "'" in value and before in _LITERAL_ONLY:
            problem = f"holds a quote after {before}, where Spark SQL takes only a literal"
        else:
            out += [text[done : token.start], _portable_string(value)]
            done = token.end + 1
            continue
        msg = f"the {what} {shown!r} has a string literal with a quote or backslash in it: {source} {problem}"
        raise UnsupportedSqlError(msg)
    return "".join([*out, text[done:]])


def _portable_string(value: str) -> str:
    """A string expression DuckDB and Spark SQL both read as ``value`` (no backslash in it): a
    literal, with each quote and control character but tab and newlines as ``chr(n)``."""
    parts: list[str] = []
    run: list[str] = []
    for c in value:
        if c == "'" or (c < " " and c not in "\t\n\r"):
            if run:
                parts.append("'" + "".join(run) + "'")
                run = []
            parts.append(f"chr({ord(c)})")
        else:
            run.append(c)
    if run or not parts:
        parts.append("'" + "".join(run) + "'")
    return parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"


def quote_identifier(name: str) -> str:
    """``name`` as a backquoted SQL identifier, which DuckDB and Spark SQL both read as one.

    Not double quotes: Spark SQL (unless ``spark.sql.ansi.doubleQuotedIdentifiers``) reads
    ``"id"`` as a string literal and ``"t"."id"`` as a syntax error.
    """
    return "`" + name.replace("`", "``") + "`"


def _walk(node: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if "class" in n:
                visit(n)
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
