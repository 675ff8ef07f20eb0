"""Create a table from the schema of a Parquet file."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, schema_to_pyarrow
from pyiceberg.schema import Schema, assign_fresh_schema_ids

from icemor._compat.pyiceberg import arrow_schema_to_iceberg_without_ids
from icemor.commit.create import create_table as commit_create_table
from icemor.exceptions import InvalidArgumentError, first_line
from icemor.ops.alter import with_identifier_fields
from icemor.ops.append import downcast_ns_timestamps
from icemor.ops.inputs import new_table_schema
from icemor.spec.identifiers import LOCATION_PROPERTIES, check_table_identifier, location_within
from icemor.spec.partitioning import parse_partition_spec
from icemor.spec.v3_types import describe_unwritable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["create_table"]

SUPPORTED_FORMAT_VERSIONS = (2, 3)


def create_table(
    catalog: Catalog,
    identifier: str,
    *,
    schema_from: Path | pa.Schema | Schema,
    partition_by: Sequence[str] = (),
    identifier_fields: Sequence[str] = (),
    format_version: int = 2,
    properties: dict[str, str] | None = None,
    tables: Callable[[], Mapping[str, Sequence[str]]],
    note: Callable[[str], None] | None = None,
    what: str | None = None,
    then: Callable[[PyIcebergTable], object] | None = None,
) -> PyIcebergTable:
    """Create ``identifier`` with the schema of a Parquet file (its namespace too, if missing).

    ``timestamp[ns]`` columns (pandas' default) become microsecond timestamps: format version 2
    has no nanoseconds. ``note`` is then told which columns, in one line. The other input types
    map as appends convert them (:func:`icemor.ops.inputs.new_table_schema`: zoned timestamps
    -> ``timestamptz``, unsigned integers, decimals up to 38 digits; durations, empty names and
    names equal ignoring case are refused).

    The name is checked (:mod:`icemor.spec.identifiers`) before anything is written, and the
    table's location (and ``write.data.path``, ...) may neither lie inside another table's
    locations nor contain one (the outer table's orphan removal would take the inner one's
    files for its own orphans).

    Args:
        catalog: Where to create it.
        identifier: ``namespace.table``.
        schema_from: A Parquet file whose schema the table takes, an Arrow schema, or an
            Iceberg schema (its field ids are assigned afresh).
        partition_by: Partition fields (``col``, ``bucket(16,col)``, ``day(ts)``, ...).
        identifier_fields: The row key's columns (made required; Iceberg's identifier fields).
        format_version: 2 or 3 (v3 metadata is written by :mod:`icemor.commit.v3`).
        properties: Table properties.
        tables: Every table the catalog knows with its locations
            (:func:`icemor.catalog.table_locations`).
        note: Told in one line when nanosecond timestamps are stored as microseconds.
        what: How errors name the schema's origin (default: the file, or "the schema").
        then: Run on the new table (the first append of ``icemor.create_table``); if it fails,
            the table is dropped with every file and directory it made and the namespace made
            for it, and the error raised.

    Raises:
        InvalidArgumentError: A bad table name, unreadable schema file, a column type Iceberg
            cannot hold, bad partition field, bad format version, a location inside (or around)
            another table's, or the table exists already; nothing is created then (a namespace
            created for it is removed again).
    """
    parts = check_table_identifier(identifier)
    if format_version not in SUPPORTED_FORMAT_VERSIONS:
        msg = f"--format-version must be 2 or 3, got {format_version}"
        raise InvalidArgumentError(msg)

    nanos: list[str] = []
    if isinstance(schema_from, Schema):
        _check_names(schema_from, identifier, what or "the schema")
        schema = assign_fresh_schema_ids(schema_from)
    else:
        try:
            arrow_schema = schema_from if isinstance(schema_from, pa.Schema) else pq.read_schema(schema_from)
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read a Parquet schema from {schema_from}: {e}"
            raise InvalidArgumentError(msg) from e
        source = what or (str(schema_from) if isinstance(schema_from, Path) else "the schema")
        try:
            arrow_schema = new_table_schema(arrow_schema, what=source)
        except InvalidArgumentError as e:
            msg = f"cannot create {identifier}: {e}"
            raise InvalidArgumentError(msg) from e
        # Downcast here rather than by pyiceberg's flag, which logs a warning per column.
        downcast = downcast_ns_timestamps(arrow_schema)
        nanos = [f.name for f, d in zip(arrow_schema, downcast, strict=True) if f.type != d.type]
        schema = _iceberg_schema(downcast, identifier)
    if (unwritable := describe_unwritable(schema)) is not None:
        msg = f"cannot create {identifier}: {unwritable}"
        raise InvalidArgumentError(msg)
    if identifier_fields:
        schema = with_identifier_fields(schema, identifier_fields)
    spec = parse_partition_spec(partition_by, schema)
    namespace = ".".join(parts[:-1])
    props = {"format-version": str(format_version), **(properties or {})}
    known = tables()
    if identifier in known:
        msg = f"table {identifier!r} already exists"
        raise InvalidArgumentError(msg)

    new_dirs = _NewDirectories()

    def check(location: str) -> None:
        paths = [location, *(props[p] for p in LOCATION_PROPERTIES if props.get(p))]
        for path in paths:
            _check_location(identifier, path, known)
        new_dirs.note(paths)

    made_namespace = _create_namespace(catalog, namespace)
    try:
        created = commit_create_table(
            catalog, identifier, parts, schema=schema, partition_spec=spec, properties=props, check=check
        )
    except TableAlreadyExistsError as e:
        _drop_namespace(catalog, namespace, made_namespace)
        msg = f"table {identifier!r} already exists"
        raise InvalidArgumentError(msg) from e
    except BaseException:
        _drop_namespace(catalog, namespace, made_namespace)
        new_dirs.remove()
        raise
    if then is not None:
        try:
            then(created)
        except BaseException:
            _undo_create(catalog, identifier)
            _drop_namespace(catalog, namespace, made_namespace)
            new_dirs.remove()
            raise
    if nanos and note is not None:
        note(
            f"nanosecond timestamps stored as microseconds (icemor writes microsecond timestamps): "
            f"{', '.join(nanos)}"
        )
    return created


def _check_names(schema: Schema, identifier: str, what: str) -> None:
    """Refuse the empty names and names equal ignoring case of a pyiceberg schema, at any depth."""
    try:
        new_table_schema(schema_to_pyarrow(schema, include_field_ids=False), what=what)
    except InvalidArgumentError as e:
        msg = f"cannot create {identifier}: {e}"
        raise InvalidArgumentError(msg) from e


def _iceberg_schema(arrow_schema: pa.Schema, identifier: str) -> Schema:
    """The Iceberg schema (fresh ids) of an Arrow schema, with a one-line error naming the column
    for a type Iceberg has no counterpart of (``time32``, ``date64``, ...)."""
    try:
        return assign_fresh_schema_ids(
            arrow_schema_to_iceberg_without_ids(arrow_schema, downcast_ns_timestamp_to_us=False)
        )
    except (ValueError, TypeError, UnsupportedPyArrowTypeException) as e:
        text = str(e)
        if "Null type" in text and (found := re.search(r"Field: ([^.]+)\.", text)) is not None:
            # a type icemor cannot write (v3's unknown for NULL-typed columns)
            msg = (
                f"cannot create {identifier}: column {found.group(1)} has Arrow's null type; give it a "
                "concrete type (icemor does not write Iceberg's v3 unknown type yet)"
            )
        else:
            column = getattr(e, "field", None)
            where = f"column {column.name!r}: " if isinstance(column, pa.Field) else ""
            msg = f"cannot create {identifier}: {where}{first_line(e)}"
        raise InvalidArgumentError(msg) from e


def _undo_create(catalog: Catalog, identifier: str) -> None:
    """Drop a table created by this call, deleting its files; a failure here leaves the first
    error to be reported (the caller re-raises it)."""
    with contextlib.suppress(Exception):  # the error that made us undo is the one to report
        catalog.purge_table(identifier)


class _NewDirectories:
    """The local directories a create is about to make (a table location and its path
    properties, up to the first that exists), removed again, when empty, if the create is undone.

    Object stores have no directories: only ``file:`` and plain paths are noted.
    """

    def __init__(self) -> None:
        self._dirs: list[Path] = []

    def note(self, locations: Sequence[str]) -> None:
        for location in locations:
            path = _local_path(location)
            while path is not None and not path.exists() and path.parent != path:
                self._dirs.append(path)
                path = path.parent

    def remove(self) -> None:
        """Remove the noted directories that exist and are empty (deepest first, with the
        empty directories made inside them)."""
        for top in sorted(set(self._dirs), key=lambda p: len(p.parts), reverse=True):
            if not top.is_dir():
                continue
            inner = sorted(
                (d for d in top.rglob("*") if d.is_dir()), key=lambda p: len(p.parts), reverse=True
            )
            for d in [*inner, top]:
                try:
                    d.rmdir()  # only an empty directory: a file left means it is not ours to remove
                except OSError:
                    continue


def _local_path(location: str) -> Path | None:
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if not parsed.scheme or (len(parsed.scheme) == 1 and location[1:2] == ":"):  # a drive letter
        return Path(location)
    return None


def _create_namespace(catalog: Catalog, namespace: str) -> bool:
    """Create ``namespace`` unless it exists; True when this call created it."""
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        return False
    return True


def _drop_namespace(catalog: Catalog, namespace: str, made: bool) -> None:
    """Remove a namespace this create made, so that a refused create leaves nothing behind."""
    if not made:
        return
    try:
        catalog.drop_namespace(namespace)
    except Exception:  # e.g. a table created in it meanwhile: then it stays, as it should
        return


def _check_location(identifier: str, location: str, known: Mapping[str, Sequence[str]]) -> None:
    """Refuse a location (or ``write.data.path``, ...) inside another table's locations, at one,
    or around one."""
    for other, locations in sorted(known.items()):
        inside = location_within(location, locations)
        around = next((loc for loc in locations if location_within(loc, [location])), None)
        if inside is not None or around is not None:
            where = f"inside {other!r}'s {inside}" if inside else f"around {other!r}'s {around}"
            msg = (
                f"cannot create {identifier!r}: {location} lies {where}, and a table's orphan "
                "removal would delete the files of a table nested in it"
            )
            raise InvalidArgumentError(msg)
