"""Schema evolution for the common cases: add, rename, widen, drop, make required, identifier fields.

Each change is computed by pyiceberg's ``UpdateSchema`` (Iceberg's rules: new columns are
optional, widening is ``int -> long``, ``float -> double`` or a larger decimal precision, names
stay unique) and committed through :func:`icemor.commit.schema.commit_schema_update` as one
metadata change (no snapshot). Making a column required is an incompatible change that
pyiceberg allows only on request: it is done only after a scan found no live row NULL in it,
and the commit is pinned to the snapshot that scan read, so a concurrent write of a NULL
makes it try again (and check again) rather than commit a lie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg import expressions
from pyiceberg.exceptions import ResolveError, ValidationError
from pyiceberg.schema import Schema
from pyiceberg.table import Table as PyIcebergTable
from pyiceberg.types import DoubleType, FloatType, NestedField, PrimitiveType

from icemor.commit.schema import commit_schema_update
from icemor.engines.local import count_rows
from icemor.exceptions import IcemorError, InvalidArgumentError, first_line
from icemor.ops.units import write_job
from icemor.planning.scan_job import prepare_scan

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update.schema import UpdateSchema
    from pyiceberg.types import IcebergType

__all__ = ["SchemaChange", "parse_type", "with_identifier_fields"]

# Spark SQL's and Arrow's names for Iceberg's types (``long`` is Iceberg's, ``bigint`` Spark's).
_ALIASES = {
    "bigint": "long",
    "int64": "long",
    "integer": "int",
    "int32": "int",
    "bool": "boolean",
    "float64": "double",
    "float32": "float",
    "str": "string",
    "varchar": "string",
}


def parse_type(text: str) -> IcebergType:
    """An Iceberg primitive type from its name: ``long``, ``double``, ``decimal(10,2)``, ...

    Raises:
        InvalidArgumentError: Not a primitive type name.
    """
    name = text.strip().lower()
    try:
        field_type = NestedField(0, "x", _ALIASES.get(name, name)).field_type
    except (ValueError, TypeError):
        field_type = None
    if not isinstance(field_type, PrimitiveType):
        msg = (
            f"unknown type {text!r}: use an Iceberg primitive type (boolean, int, long, float, double, "
            "decimal(P,S), date, time, timestamp, timestamptz, string, uuid, binary, fixed[N])"
        )
        raise InvalidArgumentError(msg)
    return field_type


def with_identifier_fields(schema: Schema, names: Sequence[str]) -> Schema:
    """``schema`` with ``names`` as its identifier fields, each made required (a new table's).

    Raises:
        InvalidArgumentError: An unknown, nested, non-primitive or float/double column.
    """
    ids = [_identifier_field(schema, n).field_id for n in names]
    fields = [f if f.field_id not in ids else _required(f) for f in schema.fields]
    return Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=ids)


def _required(field: NestedField) -> NestedField:
    return NestedField(field.field_id, field.name, field.field_type, required=True, doc=field.doc)


def _identifier_field(schema: Schema, name: str) -> NestedField:
    top = {f.name: f for f in schema.fields}
    field = top.get(name)
    if field is None:
        msg = f"identifier field {name!r} is not a top-level column (columns: {', '.join(top)})"
        raise InvalidArgumentError(msg)
    kind = field.field_type
    if not isinstance(kind, PrimitiveType) or isinstance(kind, FloatType | DoubleType):
        msg = f"identifier field {name!r} is a {kind}: identifier fields are primitive, not float/double"
        raise InvalidArgumentError(msg)
    return field


@dataclass
class _Step:
    what: str
    apply: Callable[[UpdateSchema], Any]


class SchemaChange:
    """A schema change built step by step and committed once (:meth:`commit`).

    Column names refer to the schema before the change (as in Iceberg's ``UpdateSchema``): a
    column renamed and widened in one change is widened by its old name.

    ``table.update_schema().add_column("note", "string").rename_column("qty", "quantity")
    .widen_column("id", "long").require_column("id").set_identifier_fields("id").commit()``
    """

    def __init__(self, table: Any) -> None:
        # an icemor.table.Table (the facade layer is above this one) or a pyiceberg table
        self._table = table
        self._py: PyIcebergTable = table if isinstance(table, PyIcebergTable) else table.pyiceberg
        self._name = ".".join(self._py.name())
        self._steps: list[_Step] = []
        self._require: list[str] = []
        self._identifiers: list[str] = []

    def add_column(self, name: str, field_type: str | IcebergType, *, doc: str | None = None) -> SchemaChange:
        """Add an optional top-level column (NULL in every existing row)."""
        t = parse_type(field_type) if isinstance(field_type, str) else field_type
        self._steps.append(_Step(f"adding column {name!r}", lambda u: u.add_column(name, t, doc=doc)))
        return self

    def rename_column(self, old: str, new: str) -> SchemaChange:
        """Rename a column (data files are read by field id: nothing is rewritten)."""
        self._steps.append(_Step(f"renaming {old!r} to {new!r}", lambda u: u.rename_column(old, new)))
        return self

    def widen_column(self, name: str, field_type: str | IcebergType) -> SchemaChange:
        """Promote a column's type: ``int -> long``, ``float -> double``, a larger decimal precision."""
        t = parse_type(field_type) if isinstance(field_type, str) else field_type
        if not isinstance(t, PrimitiveType):
            msg = f"cannot widen {name!r} to {t}: only primitive types widen"
            raise InvalidArgumentError(msg)
        self._steps.append(_Step(f"widening {name!r} to {t}", lambda u: u.update_column(name, field_type=t)))
        return self

    def drop_column(self, name: str) -> SchemaChange:
        """Drop a column (``a.b`` for a nested one); its data stays in the files, unread.

        Refused for an identifier field, and for the source of a field of the current partition
        spec or sort order (Iceberg Java's check: drop the partition field first).
        """

        def drop(update: UpdateSchema) -> None:
            metadata = self._py.metadata  # the attempt's (the commit reloads the table first)
            field_id = metadata.schema().find_field(name).field_id
            used = [f"partition field {f.name!r}" for f in metadata.spec().fields if f.source_id == field_id]
            if any(f.source_id == field_id for f in metadata.sort_order().fields):
                used.append("the sort order")
            if used:
                msg = f"it is the source of {' and '.join(used)} (drop that first)"
                raise ValueError(msg)
            update.delete_column(name)

        self._steps.append(_Step(f"dropping column {name!r}", drop))
        return self

    def require_column(self, name: str) -> SchemaChange:
        """Make a column required (NOT NULL); refused if any live row holds NULL in it."""
        self._require.append(name)
        self._steps.append(_required_step(name))
        return self

    def set_identifier_fields(self, *names: str) -> SchemaChange:
        """Make ``names`` the identifier fields (the row key); optional ones are made required first,
        as :meth:`require_column` does."""
        self._identifiers = list(names)
        self._steps.append(
            _Step(f"setting identifier fields {', '.join(names)}", lambda u: u.set_identifier_fields(*names))
        )
        return self

    def commit(self) -> Schema:
        """Commit every step as one schema change (no snapshot); returns the new schema.

        Raises:
            InvalidArgumentError: A step Iceberg refuses (unknown column, a name taken, a type
                change that is not a promotion), or NULLs in a column to make required.
            CommitFailedError, CommitStateUnknownError: As every metadata commit.
        """
        py = self._py
        current = py.metadata.schema()
        for name in self._identifiers:
            field = _identifier_field(current, name)
            if not field.required and name not in self._require:
                self._require.append(name)
                self._steps.insert(0, _required_step(name))

        def build(update: UpdateSchema) -> None:
            for step in self._steps:
                try:
                    step.apply(update)
                except (ValueError, ResolveError, ValidationError) as e:
                    msg = f"{step.what} in {self._name}: {_first_line(e)}"
                    raise InvalidArgumentError(msg) from e

        def check(metadata: TableMetadata) -> None:
            for name in self._require:
                nulls = _null_count(metadata, py.io, name)
                if nulls:
                    msg = (
                        f"cannot make {name!r} of {self._name} required: {nulls} live row(s) hold NULL "
                        "in it (delete or update them first)"
                    )
                    raise InvalidArgumentError(msg)

        try:
            metadata = commit_schema_update(
                py,
                build,
                allow_incompatible_changes=bool(self._require),
                check=check if self._require else None,
            )
        except IcemorError:
            raise
        except (ValueError, ResolveError, ValidationError) as e:
            # pyiceberg validates the new schema as a whole when it builds it
            msg = f"the schema change of {self._name} is invalid: {_first_line(e)}"
            raise InvalidArgumentError(msg) from e
        if self._table is not py:
            self._table.refresh()  # the facade's (the commit left the pyiceberg table current)
        return metadata.schema()


def _required_step(name: str) -> _Step:
    return _Step(f"making {name!r} required", lambda u: u.update_column(name, required=True))


def _null_count(metadata: TableMetadata, io: FileIO, name: str) -> int:
    """Live rows of the current snapshot whose column ``name`` is NULL (0 when it is unknown)."""
    if name not in {f.name for f in metadata.schema().fields} or metadata.current_snapshot() is None:
        return 0  # unknown: pyiceberg's update names it
    is_null: Any = expressions.IsNull  # pydantic: mypy cannot see its (term) constructor
    # a schema change decided from the table's files, never the local verdict store
    job = write_job(prepare_scan(metadata, io, row_filter=is_null(name), selected_fields=(name,)))
    return count_rows(job)


def _first_line(e: BaseException) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors) and errors():  # pydantic's: the first problem, not its headline
        return str(errors()[0].get("msg", e)).removeprefix("Value error, ")
    return first_line(e)
