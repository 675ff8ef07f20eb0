"""All errors icemor raises on purpose; each carries a one-line message fit for a user."""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "NO_ROOM_ERRNOS",
    "CommitConflictError",
    "CommitFailedError",
    "CommitStateUnknownError",
    "CorruptFileError",
    "IcemorError",
    "InvalidArgumentError",
    "MissingFileError",
    "NoSuchSnapshotError",
    "NoSuchTableError",
    "UnsupportedFeatureError",
    "WriteFailedError",
    "table_lookup_errors",
]


class IcemorError(Exception):
    """Base class of every error icemor raises deliberately (CLI exit code 2)."""


class InvalidArgumentError(IcemorError, ValueError):
    """A user-supplied argument (column, expression, option) is not valid for this table."""


class NoSuchTableError(IcemorError):
    """The table does not exist in the catalog."""


class NoSuchSnapshotError(IcemorError):
    """The requested snapshot, timestamp or ref does not exist."""


class MissingFileError(IcemorError):
    """A data or delete file referenced by table metadata cannot be opened."""


class CorruptFileError(IcemorError):
    """A data or delete file is unreadable or inconsistent with its metadata (CRC, schema, truncation)."""


class UnsupportedFeatureError(IcemorError):
    """The table uses a feature icemor does not implement; failing beats returning wrong rows."""


class CommitConflictError(IcemorError):
    """A concurrent commit conflicts with this one (Iceberg's ValidationException); nothing was committed."""


class CommitFailedError(IcemorError):
    """The catalog refused the commit (every retry lost, or it refused to write: a read-only
    catalog); nothing was committed."""


class CommitStateUnknownError(IcemorError):
    """The catalog call failed after it may have committed; files are kept, check the table."""


# errors that only a write can meet: no room left, or a file system that takes no writes
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


class WriteFailedError(IcemorError):
    """A file could not be written (disk full, permission denied, read-only file system, ...).

    Nothing was committed, and the files written for the operation were removed.
    """

    @classmethod
    def of(cls, path: str, error: OSError) -> WriteFailedError:
        """The error for ``error`` raised while writing ``path``: names the path and the reason."""
        return cls(f"cannot write {path}: {os_reason(error)}")


def os_reason(error: OSError) -> str:
    """The reason of an OSError in a few words (``No space left on device``), without its path.

    pyarrow's errors carry the errno with a longer text (``Error writing bytes to file.
    Detail: [errno 28] ...``): the errno's standard text is what a user needs.
    """
    if error.errno:
        return os.strerror(error.errno)
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


@contextmanager
def table_lookup_errors(identifier: str, catalog_name: str) -> Iterator[None]:
    """Map the catalog's errors for a table that is missing or misnamed to one clear error each."""
    from pyiceberg.exceptions import NoSuchNamespaceError
    from pyiceberg.exceptions import NoSuchTableError as _PyIcebergNoSuchTable

    try:
        yield
    except (_PyIcebergNoSuchTable, NoSuchNamespaceError) as e:
        msg = f"table {identifier!r} does not exist in catalog {catalog_name!r}"
        raise NoSuchTableError(msg) from e
    except ValueError as e:
        msg = f"invalid table identifier {identifier!r}: {e}"
        raise InvalidArgumentError(msg) from e
