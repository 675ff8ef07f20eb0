"""icemor: Apache Iceberg row-level deletes (merge-on-read) for Python and PySpark.

`import icemor` stays light: pyspark is only imported by `icemor.engines.spark`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_catalog", "load_table"]

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from icemor.table import Table


def load_catalog(name: str | None = None, **properties: str) -> Catalog:
    """Load a catalog: icemor's embedded SQLite catalog by default, else a pyiceberg catalog by name."""
    from icemor.catalog import load_catalog as _load

    return _load(name, **properties)


def load_table(identifier: str, *, catalog: Catalog | str | None = None, **kwargs: Any) -> Table:
    """Load a table for merge-on-read scans and row-level writes.

    Args:
        identifier: ``namespace.table``.
        catalog: A pyiceberg catalog, a catalog name, or None for the embedded catalog.
        **kwargs: Passed to :meth:`icemor.table.Table.load`.
    """
    from icemor.table import Table

    return Table.load(identifier, catalog=catalog, **kwargs)
