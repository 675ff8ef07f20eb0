"""Create a table from the schema of a Parquet file."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from icemor._compat.pyiceberg import arrow_schema_to_iceberg_without_ids
from icemor.exceptions import InvalidArgumentError, UnsupportedFeatureError
from icemor.ops.append import downcast_ns_timestamps
from icemor.spec.partitioning import parse_partition_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["create_table"]

SUPPORTED_FORMAT_VERSIONS = (2,)


def create_table(
    catalog: Catalog,
    identifier: str,
    *,
    schema_from: Path,
    partition_by: Sequence[str] = (),
    format_version: int = 2,
    properties: dict[str, str] | None = None,
    note: Callable[[str], None] | None = None,
) -> PyIcebergTable:
    """Create ``identifier`` with the schema of a Parquet file (its namespace too, if missing).

    ``timestamp[ns]`` columns (pandas' default) become microsecond timestamps: format version 2
    has no nanoseconds. ``note`` is then told which columns, in one line.

    Raises:
        InvalidArgumentError: Unreadable schema file, bad partition field, bad format version,
            or the table exists already.
        UnsupportedFeatureError: A format version icemor cannot write yet (3).
    """
    import pyarrow.parquet as pq
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.schema import assign_fresh_schema_ids

    if format_version == 3:
        # pyiceberg 0.12 cannot serialise v3 table metadata; fail before anything is created
        msg = (
            "creating format-version 3 tables is not supported yet (pyiceberg 0.12 cannot write v3 "
            "metadata); create it with Iceberg Java, icemor reads it"
        )
        raise UnsupportedFeatureError(msg)
    if format_version not in SUPPORTED_FORMAT_VERSIONS:
        msg = f"--format-version must be 2 (or 3, not yet supported), got {format_version}"
        raise InvalidArgumentError(msg)
    try:
        arrow_schema = pq.read_schema(schema_from)
    except (OSError, pa.ArrowInvalid) as e:
        msg = f"cannot read a Parquet schema from {schema_from}: {e}"
        raise InvalidArgumentError(msg) from e
    # Downcast here rather than by pyiceberg's flag, which logs a warning per column.
    downcast = downcast_ns_timestamps(arrow_schema)
    nanos = [f.name for f, d in zip(arrow_schema, downcast, strict=True) if f.type != d.type]
    schema = assign_fresh_schema_ids(
        arrow_schema_to_iceberg_without_ids(downcast, downcast_ns_timestamp_to_us=False)
    )
    spec = parse_partition_spec(partition_by, schema)
    namespace, _, name = identifier.rpartition(".")
    if not namespace or not name:
        msg = f"table name must be namespace.table, got {identifier!r}"
        raise InvalidArgumentError(msg)
    catalog.create_namespace_if_not_exists(namespace)
    props = {"format-version": str(format_version), **(properties or {})}
    try:
        created = catalog.create_table(identifier, schema=schema, partition_spec=spec, properties=props)
    except TableAlreadyExistsError as e:
        msg = f"table {identifier!r} already exists"
        raise InvalidArgumentError(msg) from e
    if nanos and note is not None:
        note(
            f"nanosecond timestamps stored as microseconds (format-version {format_version} has no "
            f"nanoseconds): {', '.join(nanos)}"
        )
    return created
