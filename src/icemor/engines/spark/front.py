"""``icemor.spark.attach``: a session's SQL and ``spark.table`` know icemor's tables.

Spark keeps its catalogs on the JVM; a Python library cannot add a ``TableCatalog`` there. So
``attach`` stands in front of the session's ``sql`` and ``table`` (and ``spark.read.table``),
as it documents, until ``detach``:

- The statement is parsed once (:func:`icemor.expr.statements.parse_any`, sqlglot's Spark
  dialect). A name of two or more parts is icemor's when it starts with the attached catalog's
  name (``icemor.shop.orders``) or when the attached catalog has that table (``shop.orders``),
  with a metadata table (``shop.orders.snapshots``), a branch or tag (``shop.orders.branch_dev``)
  or time travel (``VERSION AS OF``, ``TIMESTAMP AS OF``, ``FOR SYSTEM_VERSION AS OF``). Any
  other name is Spark's, and a statement naming no icemor table is Spark's, untouched.
- Reads: each icemor reference becomes a temporary view of ``icemor.spark.read``'s DataFrame
  (deletes applied on the executors), written into the statement at the characters the parser
  read for the reference; Spark then parses, resolves and plans the statement itself.
- Writes to an icemor table (``INSERT``, ``MERGE`` / ``UPDATE`` / ``DELETE``, ``CREATE`` /
  ``DROP``): the query part runs as above; icemor writes and commits (:class:`FrontServices`,
  given by the facade).

A form icemor does not run on an icemor table is refused in one line naming it, before
anything runs.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from sqlglot import exp

from icemor.engines.spark import front_patches as patches
from icemor.engines.spark.front_services import METADATA_TABLES, PROCEDURES, FrontServices, small_frame
from icemor.engines.spark.session_kind import is_connect
from icemor.exceptions import InvalidArgumentError, NoSuchTableError
from icemor.expr.ddl import alter_action, extension_action
from icemor.expr.sql import quote_identifier
from icemor.expr.statements import (
    ParsedStatement,
    TableReference,
    command_words,
    dotted,
    parse_any,
    referenced_names,
    spliced,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "METADATA_TABLES",
    "PROCEDURES",
    "Attached",
    "FrontServices",
    "attach",
    "attached",
    "detach",
    "small_frame",
]


@dataclass(frozen=True)
class _Target:
    identifier: str
    options: Mapping[str, Any]
    metadata: str | None = None


@dataclass
class Attached:
    """A session with icemor's catalog attached under ``name``."""

    spark: SparkSession
    name: str
    services: FrontServices
    sql: Callable[..., DataFrame]
    table: Callable[[str], DataFrame]
    views: list[str] = field(default_factory=list)
    _counter: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, text: str, args: Any = None, **kwargs: Any) -> DataFrame:
        """``spark.sql(text)`` with icemor's tables known (the statement kinds: module doc)."""
        if args is not None or kwargs or not isinstance(text, str):
            # parameter markers: Spark's own (its parser substitutes them); icemor's names in
            # such statements are not seen
            return self.sql(text, args, **kwargs) if args is not None else self.sql(text, **kwargs)
        statement = parse_any(text)
        kind = statement.kind
        if kind == "command":
            handled = self._command(statement)
            return self.sql(text) if handled is None else handled
        refs = [(r, self._target(r)) for r in statement.references()]
        ours = [(r, t) for r, t in refs if t is not None]
        if not ours and not self._names_attached(statement) and not self._creates_here(statement):
            return self.sql(text)
        missing = [r for r, t in refs if t is None and r.parts[0].lower() == self.name.lower()]
        if missing and not (kind in ("create", "drop") and missing[0] is refs[0][0]):
            msg = f"no icemor table {'.'.join(missing[0].parts[1:])} in the attached catalog {self.name}"
            raise NoSuchTableError(msg)
        if kind == "select":
            return self._select(statement, ours)
        if kind == "insert":
            return self._insert(statement, ours)
        if kind in ("merge", "update", "delete"):
            return self._dml(statement, ours)
        if kind == "create":
            return self._create(statement, ours)
        if kind == "drop":
            return self._drop(statement, ours)
        if kind == "describe" and ours:
            return self._describe(statement, ours[0][1])
        if kind == "alter" and ours:
            return self._alter(statement, ours[0][1])
        what = _form(statement)
        msg = f"{what} on an icemor table is not supported through attach (docs/spark.md lists what runs)"
        raise InvalidArgumentError(msg)

    def read_table(
        self,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        spark_table: Callable[[], DataFrame] | None = None,
    ) -> DataFrame:
        """``spark.table(name)`` / ``spark.read.options(...).table(name)``; a table that is not
        icemor's is ``spark_table()`` (the reader's own) or else the session's ``table``."""
        parts = _name_parts(name)
        target = self._resolve(parts) if parts is not None and len(parts) >= 2 else None
        if target is None:
            if parts is not None and len(parts) >= 3 and parts[0].lower() == self.name.lower():
                msg = f"no icemor table {'.'.join(parts[1:])} in the attached catalog {self.name}"
                raise NoSuchTableError(msg)
            return spark_table() if spark_table is not None else self.table(name)
        given = dict(options or {})
        if given and target.metadata is not None:
            msg = f"read options are for a table, not the metadata table {name}"
            raise InvalidArgumentError(msg)
        return self._frame(target, given)

    def stored(self, df: DataFrame, identifier: str) -> DataFrame:
        """``df``'s columns cast by name to the table's types, as Spark's V2 writes store them."""
        types = dict(self.services.columns(identifier))
        return df.select(*(_stored(F.col(quote_identifier(c)), types.get(c), c) for c in df.columns))

    def writer_target(self, name: str) -> tuple[str, bool] | None:
        """``df.writeTo(name)``: the icemor table (``namespace.table``, and whether it exists),
        or None when the name is Spark's."""
        parts = _name_parts(name)
        if parts is None or len(parts) < 2:
            return None
        target = self._resolve(parts)
        if target is not None:
            if target.metadata is not None or target.options:
                msg = f"df.writeTo({name}): a metadata table, a branch or a tag is not writable"
                raise InvalidArgumentError(msg)
            return target.identifier, True
        if len(parts) == 3 and parts[0].lower() == self.name.lower():
            return ".".join(parts[1:]), False
        return None

    # ---- statement kinds ---------------------------------------------------------------------

    def _select(
        self, statement: ParsedStatement, ours: Sequence[tuple[TableReference, _Target]]
    ) -> DataFrame:
        with self._views(ours, statement) as edits:
            return self._spark_sql(spliced(statement.text, edits))

    def _insert(
        self, statement: ParsedStatement, ours: Sequence[tuple[TableReference, _Target]]
    ) -> DataFrame:
        tree = statement.tree
        target_node = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        target = next((t for r, t in ours if _is_node(r, target_node)), None)
        if target is None:  # Spark's table, icemor's tables in the query
            return self._select(statement, ours)
        if target.metadata is not None or target.options:
            msg = "INSERT into a metadata table, a branch, a tag or a snapshot is not supported"
            raise InvalidArgumentError(msg)
        if tree.args.get("with_") is not None:
            msg = "WITH … INSERT INTO an icemor table is not supported: put the WITH inside the query"
            raise InvalidArgumentError(msg)
        query = statement.query_text()
        query_node = tree.args.get("expression")
        span = query_node.meta.get("query_span") if isinstance(query_node, exp.Expr) else None
        if query is None or span is None:
            msg = "INSERT INTO an icemor table needs a query or VALUES"
            raise InvalidArgumentError(msg)
        partition = target_node.args.get("partition") if isinstance(target_node, exp.Table) else None
        fixed = _static_partition(partition)
        inner = [(r, t) for r, t in ours if r.start >= span[0] and r.end <= span[1]]
        types = dict(self.services.columns(target.identifier))
        if isinstance(tree.this, exp.Schema):
            named = [c.name for c in tree.this.expressions]
        else:
            named = [c for c in types if c not in fixed]
        overwrite = bool(tree.args.get("overwrite"))
        where: str | None = None
        mode = "overwrite" if overwrite else "append"
        if overwrite:
            dynamic = str(self.spark.conf.get("spark.sql.sources.partitionOverwriteMode", "static")).lower()
            # dynamic when some partition column has no static value (Spark's ResolveInsertInto) or
            # none has one (Iceberg's write builder takes a whole-table overwrite as dynamic then)
            if dynamic == "dynamic" and (
                not fixed or self.services.partition_fields(target.identifier) > len(fixed)
            ):
                mode = "replace-partitions"  # the partitions the rows fall in (Iceberg's ReplacePartitions)
            else:
                where = " AND ".join(f"{quote_identifier(c)} = {v}" for c, v in fixed.items()) or None
        with self._views(inner, statement) as edits:
            body = spliced(statement.text, edits)[span[0] : span[1] + _shift(edits, span)]
            df = self._spark_sql(body)
            if len(df.columns) != len(named):
                msg = (
                    f"cannot write to {target.identifier}: the query gives {len(df.columns)} columns, "
                    f"the table takes {len(named)} ({', '.join(named)})"
                )
                raise InvalidArgumentError(msg)
            # by position, cast to the table's types as Spark's INSERT stores them
            given = [
                F.col(quote_identifier(c)).cast(types[n]).alias(n)
                if n in types
                else F.col(quote_identifier(c))
                for c, n in zip(df.columns, named, strict=True)
            ]
            df = df.select(*given, *(F.expr(v).cast(types[c]).alias(c) for c, v in fixed.items()))
            self.services.write(df, target.identifier, mode, where)
        return self._empty()

    def _dml(self, statement: ParsedStatement, ours: Sequence[tuple[TableReference, _Target]]) -> DataFrame:
        tree = statement.tree
        target = next((t for r, t in ours if _is_node(r, tree.this)), None)
        if target is None:
            what = _form(statement)
            msg = f"{what} of a Spark table that reads icemor tables is not supported through attach"
            raise InvalidArgumentError(msg)
        if target.metadata is not None or target.options:
            msg = f"{_form(statement)} of a metadata table, a branch, a tag or a snapshot is not supported"
            raise InvalidArgumentError(msg)
        target_ref = next(r for r, t in ours if t is target)
        others = [(r, t) for r, t in ours if r is not target_ref]
        with self._views(others, statement) as edits:
            name = ".".join(quote_identifier(p) for p in target.identifier.split("."))
            text = spliced(statement.text, [*edits, (target_ref.start, target_ref.end, name)])
            self.services.dml(self.spark, text)
        return self._empty()

    def _create(
        self, statement: ParsedStatement, ours: Sequence[tuple[TableReference, _Target]]
    ) -> DataFrame:
        tree = statement.tree
        kind = str(tree.args.get("kind") or "").upper()
        schema = tree.this
        table = schema.this if isinstance(schema, exp.Schema) else schema
        ref = next((r for r, _ in ours if _is_node(r, table)), None)
        parts = tuple(p.name for p in table.parts) if isinstance(table, exp.Table) else ()
        named_here = bool(parts) and parts[0].lower() == self.name.lower()
        if kind != "TABLE" or (ref is None and not named_here and not self._creates_here(statement)):
            return self._select(statement, ours)  # a Spark table or view, maybe reading icemor's
        if tree.args.get("replace"):
            msg = "CREATE OR REPLACE / REPLACE TABLE of an icemor table is not supported yet"
            raise InvalidArgumentError(msg)
        identifier = ".".join(parts[1:] if named_here and len(parts) >= 3 else parts)
        if ref is not None and not tree.args.get("exists"):
            msg = f"Table {identifier} already exists"
            raise InvalidArgumentError(msg)
        props = tree.args.get("properties")
        partition_by: list[str] = []
        properties: dict[str, str] = {}
        for prop in props.expressions if isinstance(props, exp.Properties) else []:
            if isinstance(prop, exp.PartitionedByProperty):
                fields = prop.this.expressions if isinstance(prop.this, exp.Schema) else [prop.this]
                partition_by += [f.sql(dialect="spark") for f in fields]
            elif isinstance(prop, exp.Property):
                properties[prop.name] = prop.text("value")
            elif isinstance(prop, exp.FileFormatProperty | exp.LocationProperty):
                continue
        query = tree.expression
        if isinstance(query, exp.Query):
            body = query.meta.get("query_span")
            text = statement.query_text() if body is None else statement.text[body[0] : body[1]]
            inner = [(r, t) for r, t in ours if r is not ref]
            with self._views(inner, statement) as edits:
                start = body[0] if body else 0
                end = body[1] + _shift(edits, body) if body else len(statement.text)
                df = self._spark_sql(spliced(statement.text, edits)[start:end] if body else text or "")
                self.services.create(identifier, df, partition_by, properties, bool(tree.args.get("exists")))
            return self._empty()
        if not isinstance(schema, exp.Schema):
            msg = f"CREATE TABLE {identifier} needs its columns or AS SELECT"
            raise InvalidArgumentError(msg)
        ddl = ", ".join(c.sql(dialect="spark") for c in schema.expressions)
        empty = self.spark.createDataFrame([], ddl)
        self.services.create(identifier, empty, partition_by, properties, bool(tree.args.get("exists")))
        return self._empty()

    def _drop(self, statement: ParsedStatement, ours: Sequence[tuple[TableReference, _Target]]) -> DataFrame:
        tree = statement.tree
        if str(tree.args.get("kind") or "").upper() != "TABLE":
            return self.sql(statement.text)
        if not ours:
            if tree.args.get("exists"):
                return self._empty()
            refs = statement.references()
            shown = ".".join(refs[0].parts[1:]) if refs else statement.text
            msg = f"no icemor table {shown} in the attached catalog {self.name}"
            raise NoSuchTableError(msg)
        self.services.drop(ours[0][1].identifier, bool(tree.args.get("purge")))
        return self._empty()

    def _describe(self, statement: ParsedStatement, target: _Target) -> DataFrame:
        if target.metadata is not None or target.options:
            return self._select(statement, [(statement.references()[0], target)])
        extended = bool(statement.tree.args.get("style")) or "EXTENDED" in statement.text.upper().split()[:3]
        rows = self.services.describe(target.identifier, extended)
        return self.spark.createDataFrame(rows, "col_name string, data_type string, comment string")

    def _command(self, statement: ParsedStatement) -> DataFrame | None:
        """CALL, SHOW TABLES, SHOW TBLPROPERTIES (sqlglot keeps them as commands); None: Spark's."""
        words = command_words(statement)
        upper = [w.upper() for w in words]
        if upper[:1] == ["CALL"]:
            return self._call(statement)
        if upper[:2] == ["SHOW", "TBLPROPERTIES"] and len(words) >= 3:
            name, after = dotted(words, 2)
            parts = _name_parts(name)
            target = self._resolve(parts) if parts is not None and len(parts) >= 2 else None
            if target is None:
                return None
            rows = self.services.properties(target.identifier)
            if len(words) > after:  # ('key')
                key = parse_any(f"SELECT {' '.join(words[after:])}").tree
                wanted = [n.this for n in key.find_all(exp.Literal) if n.is_string]
                rows = [r for r in rows if r[0] in wanted] or [
                    (k, f"Table {target.identifier} does not have property: {k}") for k in wanted
                ]
            return self.spark.createDataFrame(rows, "key string, value string")
        if upper[:2] == ["SHOW", "TABLES"] and len(words) >= 4 and upper[2] in ("IN", "FROM"):
            name, after = dotted(words, 3)
            parts = _name_parts(name)
            if parts is None:
                return None
            ours = parts[0].lower() == self.name.lower() and len(parts) >= 2
            namespace = ".".join(parts[1:] if ours else parts)
            names = self.services.tables(namespace)
            if names is None:
                if ours:
                    msg = f"no namespace {namespace} in the attached catalog {self.name}"
                    raise NoSuchTableError(msg)
                return None
            if len(words) > after:
                pattern = words[-1].strip("'\"")
                names = [n for n in names if _like(pattern, n)]
            listed = [(namespace, n, False) for n in sorted(names)]
            schema = "namespace string, tableName string, isTemporary boolean"
            return self.spark.createDataFrame(listed, schema)
        if upper[:2] == ["ALTER", "TABLE"] and len(words) >= 3:
            name, after = dotted(words, 2)
            parts = _name_parts(name)
            target = self._resolve(parts) if parts is not None and len(parts) >= 2 else None
            if target is not None:
                if target.metadata is not None or target.options:
                    msg = "ALTER TABLE of a metadata table, a branch or a tag is not supported"
                    raise InvalidArgumentError(msg)
                self.services.alter(target.identifier, [extension_action(words[after:])])
                return self._empty()
        return None

    def _call(self, statement: ParsedStatement) -> DataFrame | None:
        body = statement.text.strip().rstrip(";")[len("CALL") :].strip()
        tree = parse_any(f"SELECT {body}").tree
        call = tree.selects[0] if isinstance(tree, exp.Select) and len(tree.selects) == 1 else None
        names: list[str] = []
        while isinstance(call, exp.Dot):
            if not isinstance(call.this, exp.Identifier | exp.Dot):
                break
            names += [i.name for i in call.this.find_all(exp.Identifier)] if not names else []
            call = call.expression
        if not isinstance(call, exp.Anonymous) or len(names) != 2:
            return None
        if names[0].lower() != self.name.lower():
            return None  # another catalog's procedure: Spark's
        if names[1].lower() != "system":
            msg = (
                f"no procedure namespace {names[1]} in {self.name}: procedures are {self.name}.system.<name>"
            )
            raise InvalidArgumentError(msg)
        procedure = str(call.this).lower()
        arguments = self._arguments(procedure, call.expressions, f"SELECT {body}")
        schema, rows = self.services.call(self.spark, procedure, arguments)
        return self.spark.createDataFrame(rows, schema)

    def _arguments(self, procedure: str, given: Sequence[exp.Expr], text: str) -> dict[str, Any]:
        """A CALL's arguments (named ``a => v`` or positional), each evaluated by Spark."""
        params = PROCEDURES.get(procedure)
        if params is None:
            known = ", ".join(sorted(PROCEDURES))
            msg = f"no procedure {self.name}.system.{procedure}: {self.name} runs {known}"
            raise InvalidArgumentError(msg)
        named: dict[str, str] = {}
        for i, arg in enumerate(given):
            value = arg.expression if isinstance(arg, exp.Kwarg) else arg
            name = (
                arg.this.name.lower()
                if isinstance(arg, exp.Kwarg)
                else params[i]
                if i < len(params)
                else None
            )
            if name is None or name not in params:
                msg = f"{procedure} takes {', '.join(params)}; not {name or f'argument {i + 1}'}"
                raise InvalidArgumentError(msg)
            if name in named:
                msg = f"{procedure}: argument {name} is given twice"
                raise InvalidArgumentError(msg)
            span = value.meta.get("span") or _token_span(value)
            if span is None:
                msg = f"{procedure}: cannot read the value of argument {name}"
                raise InvalidArgumentError(msg)
            piece = text[span[0] : span[1] + 1]
            named[name] = (
                f"unix_millis(CAST(({piece}) AS TIMESTAMP))" if name in _TIMESTAMP_ARGUMENTS else f"({piece})"
            )
        if "table" not in named:
            msg = f"{procedure} needs its table argument"
            raise InvalidArgumentError(msg)
        row = self._spark_sql("SELECT " + ", ".join(f"{v} AS `{k}`" for k, v in named.items())).collect()[0]
        values = row.asDict(recursive=True)
        parts = _name_parts(str(values["table"]))
        if parts is None:
            msg = f"{procedure}: not a table name: {values['table']!r}"
            raise InvalidArgumentError(msg)
        target = self._resolve(parts)
        if target is None or target.metadata is not None or target.options:
            msg = f"{procedure}: no icemor table {values['table']} in the attached catalog {self.name}"
            raise NoSuchTableError(msg)
        values["table"] = target.identifier
        return values

    def _alter(self, statement: ParsedStatement, target: _Target) -> DataFrame:
        if target.metadata is not None or target.options:
            msg = "ALTER TABLE of a metadata table, a branch or a tag is not supported"
            raise InvalidArgumentError(msg)
        actions = [alter_action(a) for a in statement.tree.args.get("actions") or []]
        if not actions:
            msg = f"cannot read the ALTER TABLE statement: {_form(statement)}"
            raise InvalidArgumentError(msg)
        self.services.alter(target.identifier, actions)
        return self._empty()

    # ---- names -----------------------------------------------------------------------------

    def _creates_here(self, statement: ParsedStatement) -> bool:
        """``CREATE TABLE ns.t … USING iceberg|icemor``: a bare two-part name is the attached
        catalog's (as if it were the current one) when the table is an Iceberg table; another
        provider (parquet, delta, …) is Spark's own."""
        tree = statement.tree
        if statement.kind != "create" or str(tree.args.get("kind") or "").upper() != "TABLE":
            return False
        table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        props = tree.args.get("properties")
        formats = [p for p in props.expressions if isinstance(p, exp.FileFormatProperty)] if props else []
        iceberg = bool(formats) and all(p.name.lower() in ("iceberg", "icemor") for p in formats)
        return isinstance(table, exp.Table) and len(table.parts) == 2 and iceberg

    def _names_attached(self, statement: ParsedStatement) -> bool:
        return any(r.parts[0].lower() == self.name.lower() for r in statement.references())

    def _target(self, ref: TableReference) -> _Target | None:
        target = self._resolve(ref.parts)
        if target is not None and ref.version is not None:
            if target.metadata is not None or target.options:
                msg = f"time travel on {'.'.join(ref.parts)} is not supported"
                raise InvalidArgumentError(msg)
            target = _Target(target.identifier, self._version(ref.version))
        return target

    def _resolve(self, parts: Sequence[str]) -> _Target | None:
        """The icemor table (or metadata table, branch, tag) ``parts`` names, or None."""
        ours = parts[0].lower() == self.name.lower() and len(parts) >= 3
        rest = tuple(parts[1:]) if ours else tuple(parts)
        found = self.services.identifier(rest) if len(rest) >= 2 else None
        if found is not None:
            return _Target(found, {})
        if len(rest) >= 3 and (base := self.services.identifier(rest[:-1])) is not None:
            last = rest[-1]
            low = last.lower()
            if low in METADATA_TABLES:
                return _Target(base, {}, metadata=low)
            if low.startswith("branch_") and len(last) > 7:
                return _Target(base, {"branch": last[7:]})
            if low.startswith("tag_") and len(last) > 4:
                return _Target(base, {"tag": last[4:]})
        return None

    def _version(self, version: tuple[str, str]) -> dict[str, Any]:
        kind, text = version
        if kind == "TIMESTAMP":
            row = self._spark_sql(f"SELECT unix_millis(CAST(({text}) AS TIMESTAMP)) AS ms").collect()[0]
            return {"as-of-timestamp": int(row[0])}
        tree = parse_any(f"SELECT {text}").tree
        node = tree.selects[0] if isinstance(tree, exp.Select) else None
        if isinstance(node, exp.Literal) and not node.is_string:
            return {"snapshot-id": int(node.this)}
        if isinstance(node, exp.Literal):
            value = node.this
            return {"snapshot-id": int(value)} if value.isdigit() else {"ref": value}
        msg = f"VERSION AS OF takes a snapshot id or a branch or tag name, not {text}"
        raise InvalidArgumentError(msg)

    # ---- views ---------------------------------------------------------------------------------

    def _frame(self, target: _Target, options: Mapping[str, Any] | None = None) -> DataFrame:
        if target.metadata is not None:
            return self.services.metadata(self.spark, target.identifier, target.metadata)
        return self.services.read(self.spark, target.identifier, {**target.options, **(options or {})})

    def _views(
        self, ours: Sequence[tuple[TableReference, _Target]], statement: ParsedStatement
    ) -> _ViewScope:
        return _ViewScope(self, ours, referenced_names(statement.tree))

    def _pruned(self, target: _Target, names: frozenset[str] | None) -> _Target:
        """``target`` read with only the columns ``names`` may mean: Spark cannot prune through
        icemor's reads of files with equality deletes, so a narrow query must ask for less."""
        if names is None or target.metadata is not None or target.options:
            return target  # an older snapshot may have columns the table no longer has
        columns = [c for c, _ in self.services.columns(target.identifier)]
        kept = [c for c in columns if c.lower() in names] or columns[:1]  # count(*): any one column
        return target if len(kept) == len(columns) else replace(target, options={"columns": kept})

    def _spark_sql(self, text: str) -> DataFrame:
        return self.sql(text)

    def _empty(self) -> DataFrame:
        return self.spark.range(0).select()


class _ViewScope:
    """Temporary views for a statement's icemor references, and the edits naming them.

    A classic session resolves a view when ``spark.sql`` returns (the DataFrame holds its
    plan), so the views are dropped then; a Connect session resolves the statement again at
    each action, so its views live until ``detach``.
    """

    def __init__(
        self,
        front: Attached,
        ours: Sequence[tuple[TableReference, _Target]],
        names: frozenset[str] | None,
    ) -> None:
        self.front = front
        self.ours = ours
        self.names = names
        self.made: list[str] = []

    def __enter__(self) -> list[tuple[int, int, str]]:
        edits = []
        suffix = uuid.uuid4().hex[:8]
        for ref, target in self.ours:
            view = f"__icemor_{next(self.front._counter)}_{suffix}"
            self.front._frame(self.front._pruned(target, self.names)).createOrReplaceTempView(view)
            self.made.append(view)
            alias = ref.alias is None
            edits.append(
                (ref.start, ref.end, f"{view} AS {quote_identifier(ref.parts[-1])}" if alias else view)
            )
        return edits

    def __exit__(self, *exc: object) -> None:
        if is_connect(self.front.spark):
            self.front.views.extend(self.made)
            return
        for view in self.made:
            self.front.spark.catalog.dropTempView(view)


def _stored(column: Any, spark_type: Any, name: str) -> Any:
    """``column`` as INSERT stores it in the table's column ``name`` (cast to its type)."""
    return (column if spark_type is None else column.cast(spark_type)).alias(name)


def _shift(edits: Sequence[tuple[int, int, str]], span: tuple[int, int]) -> int:
    """How far the end of ``span`` moves when ``edits`` inside it are applied."""
    return sum(len(new) - (end - start) for start, end, new in edits if start >= span[0] and end <= span[1])


def _is_node(ref: TableReference, node: object) -> bool:
    span = node.meta.get("name_span") if isinstance(node, exp.Table) else None
    return span is not None and span[0] == ref.start


def _static_partition(partition: object) -> dict[str, str]:
    """``PARTITION (p = 'a', q = 1)``: column -> the value's SQL text; a column with no value
    (a dynamic partition column) is refused."""
    if not isinstance(partition, exp.Partition):
        return {}
    fixed: dict[str, str] = {}
    for item in partition.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.expression, exp.Literal):
            msg = f"PARTITION ({item.sql(dialect='spark')}): give each partition column a literal value"
            raise InvalidArgumentError(msg)
        fixed[item.this.name] = item.expression.sql(dialect="spark")
    return fixed


def _name_parts(name: str) -> tuple[str, ...] | None:
    try:
        tree = parse_any(f"SELECT * FROM {name}").tree
    except InvalidArgumentError:
        return None
    tables = list(tree.find_all(exp.Table))
    return tuple(p.name for p in tables[0].parts) if len(tables) == 1 else None


def _form(statement: ParsedStatement) -> str:
    words = statement.text.split()
    return " ".join(words[:2]).upper() if words else "the statement"


_TIMESTAMP_ARGUMENTS = frozenset({"older_than", "timestamp"})


def _token_span(node: exp.Expr) -> tuple[int, int] | None:
    """Where a node the parser noted no span for is written: from its first token to its last."""
    starts = [n.meta["start"] for n in node.walk() if isinstance(n.meta.get("start"), int)]
    ends = [n.meta["end"] for n in node.walk() if isinstance(n.meta.get("end"), int)]
    return (min(starts), max(ends)) if starts and ends else None


def _like(pattern: str, name: str) -> bool:
    """SHOW TABLES' pattern: ``*`` any characters, ``|`` alternatives (Spark's rules)."""
    return any(fnmatch.fnmatchcase(name.lower(), p.strip().lower()) for p in pattern.split("|"))


_ATTACHED: dict[int, Attached] = {}
_PATCH_LOCK = threading.Lock()


def attached(spark: SparkSession) -> Attached | None:
    """The session's attachment, or None."""
    return _ATTACHED.get(id(spark))


def attach(spark: SparkSession, name: str, services: FrontServices) -> Attached:
    """Stand in front of ``spark.sql``, ``spark.table`` and ``spark.read.table`` (module doc)."""
    with _PATCH_LOCK:
        if (old := _ATTACHED.get(id(spark))) is not None:
            _restore(old)
        front = Attached(spark, name, services, spark.sql, spark.table)
        spark.sql = front.run  # type: ignore[method-assign,assignment]
        spark.table = front.read_table  # type: ignore[method-assign,assignment]
        _ATTACHED[id(spark)] = front
        patches.patch(attached)
    return front


def detach(spark: SparkSession) -> bool:
    """Undo :func:`attach`; True if the session was attached."""
    with _PATCH_LOCK:
        front = _ATTACHED.pop(id(spark), None)
        if front is None:
            return False
        _restore(front)
        for view in front.views:
            front.spark.catalog.dropTempView(view)
        if not _ATTACHED:
            patches.unpatch()
    return True


def _restore(front: Attached) -> None:
    for attr in ("sql", "table"):
        front.spark.__dict__.pop(attr, None)
