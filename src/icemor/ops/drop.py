"""Drop a table from its catalog, optionally deleting its files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.exceptions import table_lookup_errors

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = ["drop_table"]


def drop_table(catalog: Catalog, identifier: str, *, purge: bool = False) -> None:
    """Remove ``identifier`` from ``catalog``; with ``purge`` also delete its data, delete and metadata files.

    Without ``purge`` the files stay where they are (the table can be registered again). A purge
    deletes every file the table references, including files registered with ``add_files``.

    Raises:
        NoSuchTableError: The table does not exist.
    """
    with table_lookup_errors(identifier, catalog.name):
        if purge:
            catalog.purge_table(identifier)
        else:
            catalog.drop_table(identifier)
