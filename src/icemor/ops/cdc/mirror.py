"""A CDC target made when a stream first writes to it (the sink's create-if-missing).

A stream of icemor's change feed names its source table (the feed's ``_change_type`` column
carries it, :data:`icemor.engines.spark.datasource.batch.FEED_SOURCE`): the mirror then takes the
source's column types, partition spec and format version for the columns the stream writes.
Any other stream gives only its columns: an unpartitioned v2 table of their Arrow types. The key
becomes the mirror's identifier fields either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.transforms import VoidTransform

from icemor.io.changes import CHANGE_COLUMNS
from icemor.ops.create import create_table
from icemor.spec.partitioning import partition_field_text

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["create_mirror"]


def create_mirror(
    catalog: Catalog,
    identifier: str,
    columns: pa.Schema,
    *,
    key: Sequence[str],
    source: PyIcebergTable | None,
    tables: Callable[[], Mapping[str, Sequence[str]]],
    partition_by: Sequence[str] | None = None,
    format_version: int | None = None,
) -> PyIcebergTable:
    """Create ``identifier`` for a stream of ``columns`` keyed on ``key``, like ``source`` where
    given (see the module); ``partition_by`` and ``format_version``, where given, instead of the
    source's (or of an unpartitioned v2 table).

    Raises:
        InvalidArgumentError: As :func:`icemor.ops.create.create_table` (the table exists, a
            column type Iceberg cannot hold, ...).
    """
    names = [n for n in columns.names if n not in CHANGE_COLUMNS]
    if source is not None and _has_columns(source.schema(), names):
        schema = source.schema().select(*names)
        return create_table(
            catalog,
            identifier,
            schema_from=schema,
            partition_by=list(partition_by) if partition_by is not None else _partition_over(source, names),
            identifier_fields=list(key),
            format_version=format_version or source.metadata.format_version,
            tables=tables,
            what="the stream's columns",
        )
    return create_table(
        catalog,
        identifier,
        schema_from=pa.schema([columns.field(n) for n in names]),
        partition_by=list(partition_by or ()),
        identifier_fields=list(key),
        format_version=format_version or 2,
        tables=tables,
        what="the stream's columns",
    )


def _partition_over(source: PyIcebergTable, names: Sequence[str]) -> list[str]:
    """The source's partition fields over ``names`` (one over another column, or void, is left out)."""
    schema = source.schema()
    return [
        partition_field_text(schema, f)
        for f in source.spec().fields
        if schema.find_column_name(f.source_id) in names and not isinstance(f.transform, VoidTransform)
    ]


def _has_columns(schema: Schema, names: Sequence[str]) -> bool:
    top = {f.name for f in schema.fields}
    return all(n in top for n in names)
