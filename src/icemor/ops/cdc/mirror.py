"""A CDC target made when a stream first writes to it (the sink's create-if-missing).

A stream of icemor's change feed names its source table (the feed's ``_change_type`` column
carries it, :data:`icemor.engines.spark.datasource.batch.FEED_SOURCE`): the mirror then takes the
source's column types, partition spec and format version for the columns the stream writes.
Any other stream gives only its columns: an unpartitioned v2 table of their Arrow types. The key
becomes the mirror's identifier fields either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.io.changes import CHANGE_COLUMNS
from icemor.ops.create import create_table

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PartitionField
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["create_mirror", "partition_texts"]


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
            partition_by=list(partition_by)
            if partition_by is not None
            else partition_texts(source.schema(), source.spec().fields, names),
            identifier_fields=list(key),
            format_version=format_version or source.metadata.format_version,
            tables=tables,
            what="the stream's columns",
        )
    import pyarrow as pa  # noqa: PLC0415 - typing only above

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


def partition_texts(schema: Schema, fields: Sequence[PartitionField], names: Sequence[str]) -> list[str]:
    """The partition fields over ``names`` as ``create_table`` spells them (``col``,
    ``bucket(16, col)``, ``day(ts)``); a field over another column, or void, is left out."""
    out = []
    for f in fields:
        column = schema.find_column_name(f.source_id)
        transform = str(f.transform)  # identity, bucket[16], truncate[4], day, void
        name, _, arg = transform.partition("[")
        if column not in names or name == "void":
            continue
        if name == "identity":
            out.append(str(column))
        elif arg:
            out.append(f"{name}({arg.rstrip(']')}, {column})")
        else:
            out.append(f"{name}({column})")
    return out


def _has_columns(schema: Schema, names: Sequence[str]) -> bool:
    top = {f.name for f in schema.fields}
    return all(n in top for n in names)
