"""Register existing Parquet files as data files of a table, without copying them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException

from icemor._compat.pyiceberg import check_arrow_schema_compatible
from icemor.commit.append import commit_add_files
from icemor.exceptions import CommitFailedError, InvalidArgumentError, first_line
from icemor.ops.append import schema_mismatch_message

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["add_files"]


def add_files(table: PyIcebergTable, files: Sequence[Path | str]) -> int:
    """Add Parquet files to ``table`` as they are, in one snapshot (pyiceberg's ``add_files``).

    The table then references the files where they lie: they must stay there, and a purge of
    the table deletes them. Local paths are stored as absolute ``file:`` paths; URIs as given.

    Returns:
        The number of rows added.

    Raises:
        InvalidArgumentError: A missing or unreadable file, a schema that does not fit the table,
            a file given twice or already in the table, a file spanning several partitions.
    """
    if not files:
        return 0
    uris = []
    rows = 0
    name = ".".join(table.name())
    checked: set[pa.Schema] = set()
    for f in files:
        uri, local = _uri(f)
        if local is not None and not local.is_file():
            msg = f"no such file: {f}" if not local.exists() else f"{f} is not a file"
            raise InvalidArgumentError(msg)
        try:
            if local is not None:
                footer = pq.read_metadata(local)
            else:
                with table.io.new_input(uri).open() as stream:
                    footer = pq.read_metadata(stream)
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {f}: {first_line(e)}"
            raise InvalidArgumentError(msg) from e
        rows += footer.num_rows
        # each file's schema from its footer, checked once per distinct schema and in order, so
        # the first file that does not fit is named (pyiceberg checks them all in threads and
        # prints its comparison table per file)
        schema = footer.schema.to_arrow_schema()
        if schema not in checked:
            _check_schema(table, schema, f"{f}", name)
            checked.add(schema)
        uris.append(uri)
    if len(set(uris)) != len(uris):
        msg = "a file is given more than once"
        raise InvalidArgumentError(msg)
    try:
        # pyiceberg prints its schema-mismatch table to stdout too; the error keeps it.
        with contextlib.redirect_stdout(io.StringIO()):
            commit_add_files(table, uris)
    except ValueError as e:
        text = str(e)
        if "Mismatch in fields" in text or "more columns" in text:
            msg = f"the files do not match the schema of {name}: {schema_mismatch_message(e)}"
        else:
            msg = f"cannot add files to {name}: {first_line(text)}"
        raise InvalidArgumentError(msg) from e
    except CommitFailedException as e:
        msg = f"the catalog refused adding files to {name}: {first_line(e)}"
        raise CommitFailedError(msg) from e
    except (OSError, pa.ArrowInvalid) as e:
        msg = f"cannot read a file to add to {name}: {first_line(e)}"
        raise InvalidArgumentError(msg) from e
    return rows


def _check_schema(table: PyIcebergTable, schema: pa.Schema, file: str, name: str) -> None:
    """Refuse a file whose schema pyiceberg's ``add_files`` would refuse, in one line naming it."""
    try:
        check_arrow_schema_compatible(
            table.metadata.schema(), schema, format_version=table.metadata.format_version
        )
    except ValueError as e:
        msg = f"the files do not match the schema of {name}: {file} differs: {schema_mismatch_message(e)}"
        raise InvalidArgumentError(msg) from e


def _uri(f: Path | str) -> tuple[str, Path | None]:
    text = str(f)
    if "://" in text and not text.startswith("file:"):
        return text, None  # an object-store URI, read through the table's FileIO
    if text.startswith("file:"):
        local = Path(unquote(urlparse(text).path))
    else:
        local = Path(text).expanduser().resolve()
    return str(local), local
