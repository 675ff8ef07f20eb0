"""icemor: Apache Iceberg row-level deletes (merge-on-read) for Python and PySpark.

`import icemor` stays light: pyspark is only imported by `icemor.engines.spark`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "drop_table", "list_namespaces", "list_tables", "load_catalog", "load_table"]

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from icemor.table import Table


def load_catalog(name: str | None = None, **properties: str) -> Catalog:
    """Load a catalog: icemor's embedded SQLite catalog by default, else a pyiceberg catalog by name."""
    from icemor.catalog import load_catalog as _load

    return _load(name, **properties)


def list_namespaces(*, catalog: Catalog | str | None = None) -> list[str]:
    """Every namespace of the catalog (embedded catalog when None), dotted, sorted."""
    from icemor.catalog import list_namespaces as _list

    return _list(_catalog(catalog))


def list_tables(namespace: str | None = None, *, catalog: Catalog | str | None = None) -> list[str]:
    """The tables of ``namespace`` (every namespace when None) as ``namespace.table``, sorted."""
    from icemor.catalog import list_tables as _list

    return _list(_catalog(catalog), namespace)


def drop_table(identifier: str, *, catalog: Catalog | str | None = None, purge: bool = False) -> None:
    """Remove a table from the catalog; ``purge`` also deletes its data, delete and metadata files."""
    from icemor.ops.drop import drop_table as _drop

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
    from icemor.table import Table

    return Table.load(identifier, catalog=catalog, **kwargs)
