"""Drop a table from its catalog, optionally deleting its files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.exceptions import InvalidArgumentError, NoSuchTableError

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
    from pyiceberg.exceptions import NoSuchNamespaceError
    from pyiceberg.exceptions import NoSuchTableError as _PyIcebergNoSuchTable

    try:
        if purge:
            catalog.purge_table(identifier)
        else:
            catalog.drop_table(identifier)
    except (_PyIcebergNoSuchTable, NoSuchNamespaceError) as e:
        msg = f"table {identifier!r} does not exist in catalog {catalog.name!r}"
        raise NoSuchTableError(msg) from e
    except ValueError as e:
        msg = f"invalid table identifier {identifier!r}: {e}"
        raise InvalidArgumentError(msg) from e
