"""Create a table from the schema of a Parquet file."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pyarrow as pa

from icemor._compat.pyiceberg import arrow_schema_to_iceberg_without_ids
from icemor.commit.create import create_table as commit_create_table
from icemor.exceptions import InvalidArgumentError
from icemor.ops.append import downcast_ns_timestamps
from icemor.spec.identifiers import LOCATION_PROPERTIES, check_table_identifier, location_within
from icemor.spec.partitioning import parse_partition_spec
from icemor.spec.v3_types import describe_unwritable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
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
) -> PyIcebergTable:
    """Create ``identifier`` with the schema of a Parquet file (its namespace too, if missing).

    ``timestamp[ns]`` columns (pandas' default) become microsecond timestamps: format version 2
    has no nanoseconds. ``note`` is then told which columns, in one line.

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

    Raises:
        InvalidArgumentError: A bad table name, unreadable schema file, bad partition field, bad
            format version, a location inside (or around) another table's, or the table exists
            already; nothing is created then (a namespace created for it is removed again).
    """
    import pyarrow.parquet as pq
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.schema import assign_fresh_schema_ids

    parts = check_table_identifier(identifier)
    if format_version not in SUPPORTED_FORMAT_VERSIONS:
        msg = f"--format-version must be 2 or 3, got {format_version}"
        raise InvalidArgumentError(msg)
    from pyiceberg.schema import Schema as IcebergSchema

    from icemor.ops.alter import with_identifier_fields

    nanos: list[str] = []
    if isinstance(schema_from, IcebergSchema):
        schema = assign_fresh_schema_ids(schema_from)
    else:
        try:
            arrow_schema = schema_from if isinstance(schema_from, pa.Schema) else pq.read_schema(schema_from)
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read a Parquet schema from {schema_from}: {e}"
            raise InvalidArgumentError(msg) from e
        # Downcast here rather than by pyiceberg's flag, which logs a warning per column.
        downcast = downcast_ns_timestamps(arrow_schema)
        nanos = [f.name for f, d in zip(arrow_schema, downcast, strict=True) if f.type != d.type]
        try:
            schema = assign_fresh_schema_ids(
                arrow_schema_to_iceberg_without_ids(downcast, downcast_ns_timestamp_to_us=False)
            )
        except ValueError as e:  # a type icemor cannot write (v3's unknown for NULL-typed columns)
            found = re.search(r"Field: ([^.]+)\.", str(e))
            if "Null type" not in str(e) or found is None:
                raise
            msg = (
                f"cannot create {identifier}: column {found.group(1)} has Arrow's null type; give it a "
                "concrete type (icemor does not write Iceberg's v3 unknown type yet)"
            )
            raise InvalidArgumentError(msg) from e
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

    def check(location: str) -> None:
        for path in [location, *(props[p] for p in LOCATION_PROPERTIES if props.get(p))]:
            _check_location(identifier, path, known)

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
        raise
    if nanos and note is not None:
        note(
            f"nanosecond timestamps stored as microseconds (icemor writes microsecond timestamps): "
            f"{', '.join(nanos)}"
        )
    return created


def _create_namespace(catalog: Catalog, namespace: str) -> bool:
    """Create ``namespace`` unless it exists; True when this call created it."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

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
