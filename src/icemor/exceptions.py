"""All errors icemor raises on purpose; each carries a one-line message fit for a user."""

from __future__ import annotations

__all__ = [
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
    """The catalog refused the commit after every retry; nothing was committed."""


class CommitStateUnknownError(IcemorError):
    """The catalog call failed after it may have committed; files are kept, check the table."""
