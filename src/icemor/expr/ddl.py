"""ALTER TABLE read into actions: Spark's own grammar (parsed by sqlglot) and Iceberg's extensions.

:mod:`icemor.engines.spark.front` hands each action, as ``(kind, *arguments)``, to the services
that commit it. Spark's forms (SET TBLPROPERTIES, ADD / RENAME / DROP COLUMN, ALTER COLUMN TYPE,
RENAME TO) come from sqlglot's tree; Iceberg's extensions (IcebergSqlExtensions: UNSET
TBLPROPERTIES, branches and tags, partition fields, identifier fields), which sqlglot keeps as a
command, from the statement's tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ALTER_ACTIONS", "alter_action", "extension_action"]


ALTER_ACTIONS = (
    "set_properties",
    "unset_properties",
    "add_columns",
    "rename_column",
    "drop_columns",
    "alter_type",
    "drop_not_null",
    "rename_table",
    "create_ref",
    "drop_ref",
    "add_partition_field",
    "drop_partition_field",
    "set_identifier_fields",
    "drop_identifier_fields",
)
"""The kinds of ALTER TABLE action the front hands the services, in Spark's and Iceberg's grammar."""


def alter_action(action: exp.Expr) -> tuple[Any, ...]:
    """One action of an ALTER TABLE sqlglot parsed (Spark's own grammar) as ``(kind, *arguments)``.

    Raises:
        InvalidArgumentError: A form the front does not run (named).
    """
    if isinstance(action, exp.AlterSet):
        props = action.find(exp.Properties)
        values = {p.this.name: p.text("value") for p in props.expressions} if props is not None else {}
        return ("set_properties", values)
    if isinstance(action, exp.Schema | exp.ColumnDef):
        defs = action.expressions if isinstance(action, exp.Schema) else [action]
        return ("add_columns", [_column_def(d) for d in defs])
    if isinstance(action, exp.RenameColumn):
        return ("rename_column", action.this.name, action.args["to"].name)
    if isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() in ("COLUMN", "COLUMNS"):
        names = [
            i.name
            for t in action.args.get("tables") or []
            for i in (t.expressions if isinstance(t, exp.Schema) else [t])
        ]
        return ("drop_columns", names)
    if isinstance(action, exp.AlterColumn):
        if action.args.get("dtype") is not None:
            return ("alter_type", action.this.name, action.args["dtype"].sql(dialect="spark"))
        if action.args.get("drop") and action.args.get("allow_null"):
            return ("drop_not_null", action.this.name)
    if isinstance(action, exp.AlterRename) and isinstance(action.this, exp.Table):
        return ("rename_table", ".".join(p.name for p in action.this.parts))
    msg = f"ALTER TABLE … {action.sql(dialect='spark')[:60]} is not supported through attach"
    raise InvalidArgumentError(msg)


def _column_def(node: exp.Expr) -> tuple[str, str, str | None]:
    if not isinstance(node, exp.ColumnDef) or node.args.get("kind") is None:
        msg = f"ADD COLUMNS: cannot read {node.sql(dialect='spark')}"
        raise InvalidArgumentError(msg)
    comment = next(
        (c.kind.this.name for c in node.constraints if isinstance(c.kind, exp.CommentColumnConstraint)), None
    )
    others = [c for c in node.constraints if not isinstance(c.kind, exp.CommentColumnConstraint)]
    if others or node.args.get("position") is not None:
        msg = f"ADD COLUMNS: {node.sql(dialect='spark')}: only a name, a type and a COMMENT are supported"
        raise InvalidArgumentError(msg)
    return (node.name, node.args["kind"].sql(dialect="spark"), comment)


def extension_action(words: Sequence[str]) -> tuple[Any, ...]:
    """One of Iceberg's ALTER TABLE extensions (its IcebergSqlExtensions grammar) after the
    table name, read from its words: UNSET TBLPROPERTIES, CREATE / REPLACE / DROP BRANCH and
    TAG, ADD / DROP PARTITION FIELD, SET / DROP IDENTIFIER FIELDS.

    Raises:
        InvalidArgumentError: Any other form (named).
    """
    up = [w.upper() for w in words]

    def strings(rest: Sequence[str]) -> list[str]:
        return [w[1:-1].replace("''", "'") for w in rest if len(w) >= 2 and w[0] == w[-1] and w[0] in "'\""]

    if up[:2] == ["UNSET", "TBLPROPERTIES"]:
        if_exists = up[2:4] == ["IF", "EXISTS"]
        return ("unset_properties", strings(words[4 if if_exists else 2 :]), if_exists)
    if up[:1] in (["CREATE"], ["REPLACE"]) or up[:3] in (["CREATE", "OR", "REPLACE"],):
        replace = up[0] == "REPLACE" or up[:3] == ["CREATE", "OR", "REPLACE"]
        create = up[0] == "CREATE"
        i = 3 if up[:3] == ["CREATE", "OR", "REPLACE"] else 1
        if i < len(up) and up[i] in ("BRANCH", "TAG"):
            kind = up[i].lower()
            i += 1
            if_not_exists = up[i : i + 3] == ["IF", "NOT", "EXISTS"]
            i += 3 if if_not_exists else 0
            name = _unquoted(words[i])
            i += 1
            snapshot: int | None = None
            retain_ms: int | None = None
            while i < len(up):
                if up[i : i + 3] == ["AS", "OF", "VERSION"] and i + 3 < len(up):
                    snapshot = int(words[i + 3])
                    i += 4
                elif up[i] == "RETAIN" and i + 2 < len(up) and up[i + 2] in _UNITS:
                    retain_ms = int(words[i + 1]) * _UNITS[up[i + 2]]
                    i += 3
                else:
                    rest = " ".join(words[i:])
                    msg = f"ALTER TABLE … {' '.join(up[:2])}: {rest} is not supported through attach"
                    raise InvalidArgumentError(msg)
            return ("create_ref", kind, name, snapshot, create, replace, if_not_exists, retain_ms)
    if up[:1] == ["DROP"] and len(up) >= 3 and up[1] in ("BRANCH", "TAG"):
        if_exists = up[2:4] == ["IF", "EXISTS"]
        return ("drop_ref", up[1].lower(), _unquoted(words[4 if if_exists else 2]), if_exists)
    if up[:3] == ["ADD", "PARTITION", "FIELD"]:
        if "AS" in up[3:]:
            msg = "ADD PARTITION FIELD … AS <name> is not supported through attach: icemor names the field"
            raise InvalidArgumentError(msg)
        return ("add_partition_field", "".join(words[3:]))
    if up[:3] == ["DROP", "PARTITION", "FIELD"]:
        return ("drop_partition_field", "".join(words[3:]))
    if up[:3] == ["SET", "IDENTIFIER", "FIELDS"]:
        return ("set_identifier_fields", [w for w in words[3:] if w != ","])
    if up[:3] == ["DROP", "IDENTIFIER", "FIELDS"]:
        return ("drop_identifier_fields", [w for w in words[3:] if w != ","])
    msg = f"ALTER TABLE … {' '.join(up[:3])} on an icemor table is not supported through attach"
    raise InvalidArgumentError(msg)


_UNITS = {"DAYS": 86_400_000, "HOURS": 3_600_000, "MINUTES": 60_000}


def _unquoted(word: str) -> str:
    return word[1:-1] if len(word) >= 2 and word[0] == word[-1] == "`" else word
