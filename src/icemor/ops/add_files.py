"""Register existing Parquet files as data files of a table, without copying them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException

from icemor.commit.append import commit_add_files
from icemor.exceptions import CommitFailedError, InvalidArgumentError
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
    import pyarrow.parquet as pq

    if not files:
        return 0
    uris = []
    rows = 0
    for f in files:
        uri, local = _uri(f)
        if local is not None:
            if not local.is_file():
                msg = f"no such file: {f}" if not local.exists() else f"{f} is not a file"
                raise InvalidArgumentError(msg)
            try:
                rows += pq.read_metadata(local).num_rows
            except (OSError, pa.ArrowInvalid) as e:
                msg = f"cannot read Parquet file {f}: {e}"
                raise InvalidArgumentError(msg) from e
        uris.append(uri)
    if len(set(uris)) != len(uris):
        msg = "a file is given more than once"
        raise InvalidArgumentError(msg)
    name = ".".join(table.name())
    try:
        # pyiceberg prints its schema-mismatch table to stdout too; the error keeps it.
        with contextlib.redirect_stdout(io.StringIO()):
            commit_add_files(table, uris)
    except ValueError as e:
        text = str(e)
        if "Mismatch in fields" in text or "more columns" in text:
            msg = f"the files do not match the schema of {name}: {schema_mismatch_message(e)}"
        else:
            msg = f"cannot add files to {name}: {text.splitlines()[0]}"
        raise InvalidArgumentError(msg) from e
    except CommitFailedException as e:
        msg = f"the catalog refused adding files to {name}: {str(e).splitlines()[0]}"
        raise CommitFailedError(msg) from e
    except (OSError, pa.ArrowInvalid) as e:
        msg = f"cannot read a file to add to {name}: {str(e).splitlines()[0]}"
        raise InvalidArgumentError(msg) from e
    return rows


def _uri(f: Path | str) -> tuple[str, Path | None]:
    text = str(f)
    if "://" in text and not text.startswith("file:"):
        return text, None  # an object-store URI, read through the table's FileIO
    if text.startswith("file:"):
        from urllib.parse import unquote, urlparse

        local = Path(unquote(urlparse(text).path))
    else:
        local = Path(text).expanduser().resolve()
    return str(local), local
