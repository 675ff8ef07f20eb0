"""icemor: Apache Iceberg row-level deletes (merge-on-read) for Python and PySpark.

`import icemor` stays light: pyspark is only imported by `icemor.engines.spark`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icemor.dependencies import is_spark_dataframe

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "create_table",
    "drop_table",
    "list_namespaces",
    "list_tables",
    "load_catalog",
    "load_table",
]

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.table import Table


def load_catalog(name: str | None = None, **properties: str) -> Catalog:
    """Load a catalog: icemor's embedded SQLite catalog by default, else a pyiceberg catalog by name."""
    from icemor.catalog import load_catalog as _load  # noqa: PLC0415 - cost: icemor.catalog ~25 ms on import icemor

    return _load(name, **properties)


def list_namespaces(*, catalog: Catalog | str | None = None) -> list[str]:
    """Every namespace of the catalog (embedded catalog when None), dotted, sorted."""
    from icemor.catalog import list_namespaces as _list  # noqa: PLC0415 - cost: icemor.catalog ~25 ms on import icemor

    return _list(_catalog(catalog))


def list_tables(namespace: str | None = None, *, catalog: Catalog | str | None = None) -> list[str]:
    """The tables of ``namespace`` (every namespace when None) as ``namespace.table``, sorted."""
    from icemor.catalog import list_tables as _list  # noqa: PLC0415 - cost: icemor.catalog ~25 ms on import icemor

    return _list(_catalog(catalog), namespace)


def drop_table(identifier: str, *, catalog: Catalog | str | None = None, purge: bool = False) -> None:
    """Remove a table from the catalog; ``purge`` also deletes its data, delete and metadata files."""
    from icemor.ops.drop import drop_table as _drop  # noqa: PLC0415 - cost: icemor.ops.drop ~10 ms on import icemor

    _drop(_catalog(catalog), identifier, purge=purge)


def _catalog(catalog: Catalog | str | None) -> Catalog:
    if catalog is not None and not isinstance(catalog, str):
        return catalog
    return load_catalog(catalog)


def load_table(identifier: str, *, catalog: Catalog | str | None = None, **kwargs: Any) -> Table:
    """Load a table for merge-on-read scans, appends and merge-on-read DELETE.

    Args:
        identifier: ``namespace.table``.
        catalog: A pyiceberg catalog, a catalog name, or None for the embedded catalog.
        **kwargs: Passed to :meth:`icemor.table.Table.load`.
    """
    from icemor.table import Table  # noqa: PLC0415 - cost: icemor.table ~150 ms on import icemor

    return Table.load(identifier, catalog=catalog, **kwargs)


def create_table(
    identifier: str,
    schema_or_data: Any,
    *,
    partition_by: Sequence[str] | None = None,
    identifier_fields: Sequence[str] | None = None,
    properties: Mapping[str, str] | None = None,
    format_version: int = 2,
    catalog: Catalog | str | None = None,
    note: Callable[[str], None] | None = None,
) -> Table:
    """Create a table (and its namespace if missing) from a schema, or from data that is appended.

    ``icemor.create_table("shop.orders", df, partition_by=["day(ts)"], identifier_fields=["id"])``

    Args:
        identifier: ``namespace.table``.
        schema_or_data: A pyiceberg ``Schema``, an Arrow schema, or data whose schema the table
            takes and whose rows become its first snapshot: an Arrow table, batch or
            RecordBatchReader, a pandas or polars DataFrame, Parquet file path(s), or a Spark
            DataFrame (its Spark schema, every column optional as in Spark's CREATE TABLE AS
            SELECT; its rows written on the executors). Nanosecond timestamps become microsecond
            columns; columns are optional unless identifier fields.
        partition_by: Partition fields: ``"region"``, ``"day(ts)"``, ``"bucket(16, id)"``,
            ``"truncate(4, s)"``, ``year|month|hour(col)``.
        identifier_fields: The row key (Iceberg's identifier fields): these columns become
            required (NOT NULL), so CDC and the change feed key on them without options.
        properties: Table properties.
        format_version: Iceberg format version.
        catalog: A pyiceberg catalog, a catalog name, or None for the embedded catalog.
        note: Told in one line how many nanosecond timestamps lost digits when the data is
            appended (default: a warning on the ``icemor`` logger).

    Raises:
        InvalidArgumentError: A bad name, partition field or identifier field, an existing table,
            a column of unknown type (all NULL), rows that do not fit (NULL in an identifier
            field); nothing is left behind (a table created for data that failed is dropped).
    """
    from icemor.catalog import table_locations  # noqa: PLC0415 - cost: icemor.catalog ~25 ms on import icemor
    from icemor.ops.create import create_table as _create  # noqa: PLC0415 - cost: ~1 s on import icemor
    from icemor.ops.inputs import schema_of  # noqa: PLC0415 - cost: ~1 s on import icemor
    from icemor.table import Table  # noqa: PLC0415 - cost: icemor.table ~150 ms on import icemor

    cat = _catalog(catalog)
    if is_spark_dataframe(schema_or_data):  # its Spark schema; its rows written on the executors
        from icemor.engines.spark.table_writes import dataframe_rows, new_table_schema_of  # noqa: PLC0415 - optional: pyspark

        schema, data = new_table_schema_of(schema_or_data), dataframe_rows(schema_or_data)
    else:
        schema, data = schema_of(schema_or_data, what="the data")

    def append(created: PyIcebergTable) -> None:
        Table(created, cat).append(data, note=note)

    created = _create(
        cat,
        identifier,
        schema_from=schema,
        partition_by=list(partition_by or ()),
        identifier_fields=list(identifier_fields or ()),
        format_version=format_version,
        properties=dict(properties or {}),
        tables=lambda: table_locations(cat, strict=False),
        what="the data" if data is not None else None,
        then=append if data is not None else None,  # undone (nothing left) if the append fails
    )
    return Table(created, cat)
