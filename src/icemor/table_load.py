"""Opening a table from its catalog, each failure one line naming what is wrong.

No such table or namespace, and a bad identifier, are the catalog's answers
(:func:`icemor.exceptions.table_lookup_errors`); a metadata file that is missing, truncated or
corrupt is the table's own problem, told apart from those first (its decode errors are
ValueErrors too) and named by its path where the catalog records it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.exceptions import ValidationError as _PyIcebergValidationError

from icemor.catalog import load_catalog, metadata_location
from icemor.exceptions import CorruptFileError, MissingFileError, table_lookup_errors

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["open_table"]


def open_table(identifier: str, catalog: Catalog | str | None) -> tuple[PyIcebergTable, Catalog]:
    """The pyiceberg table ``identifier`` of ``catalog`` (a catalog, its name, or None for the
    embedded one), and that catalog.

    Raises:
        NoSuchTableError: The table or its namespace does not exist.
        InvalidArgumentError: A malformed identifier.
        MissingFileError: The current metadata file is missing (the message names it).
        CorruptFileError: The current metadata file is truncated or corrupt (names it and why).
    """
    cat = catalog if catalog is not None and not isinstance(catalog, str) else load_catalog(catalog)
    # the metadata file's own problems first: its decode errors are ValueErrors too
    with table_lookup_errors(identifier, cat.name):
        try:
            return cat.load_table(identifier), cat
        except FileNotFoundError as e:
            msg = f"metadata file of table {identifier!r} not found: {_metadata_file(cat, identifier, e)}"
            raise MissingFileError(msg) from e
        except (_PyIcebergValidationError, PydanticValidationError, UnicodeDecodeError) as e:
            # unparsable metadata JSON (truncated, damaged): pydantic's message names no file
            msg = (
                f"metadata file of table {identifier!r} is truncated or corrupt: "
                f"{_metadata_file(cat, identifier, e)} ({_first_problem(e)})"
            )
            raise CorruptFileError(msg) from e


def _metadata_file(catalog: Catalog, identifier: str, error: Exception) -> str:
    location = metadata_location(catalog, identifier)
    if location is not None:
        return location
    return getattr(error, "filename", None) or "(location unknown to this catalog)"


def _first_problem(e: BaseException) -> str:
    if isinstance(e, _PyIcebergValidationError) and e.__cause__ is not None:
        return _first_problem(e.__cause__)  # pyiceberg wraps pydantic's error
    if isinstance(e, PydanticValidationError) and e.errors():
        return str(e.errors()[0]["msg"])
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
