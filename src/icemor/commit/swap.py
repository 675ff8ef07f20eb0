"""The catalog's compare-and-swap, and the line between "refused" and "may have committed".

A catalog call that fails either certainly changed nothing, or may have committed. Only in
the first case may the files written for the commit be removed; in the second every one of
them must stay (a committed snapshot may reference them), as Iceberg Java does. Certainly
refused:

- ``CommitFailedException``: the swap lost against a concurrent commit (Iceberg's meaning of it);
- any failure before or while a metastore catalog writes the new metadata JSON (the pointer
  swap comes after it), e.g. a disk full or a read-only file system;
- SQLite refusing the write: ``database is locked`` (a concurrent writer: retried, like a lost
  swap), ``attempt to write a readonly database``, ``constraint failed``, ``database or disk is
  full``: the statement failed, so its transaction never committed.

Anything else (a timeout, a dropped connection, an interrupt after the metadata was written)
may have committed.

Every catalog used through :func:`tracked_swaps` is hooked once so that each of its
``commit_table`` calls, also those pyiceberg makes itself (``Transaction``), removes its own
metadata JSON when certainly refused: a lost swap never leaves one behind.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException

from icemor._compat.pyiceberg import metadata_writes, record_metadata_writes, v3_metadata_json
from icemor.commit.manifest_writer import delete_quietly
from icemor.exceptions import WriteFailedError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.update import TableRequirement, TableUpdate

    from icemor._compat.pyiceberg import MetadataWrite

__all__ = ["Outcome", "SwapCalls", "SwapError", "failed_outcome", "first_line", "swap", "tracked_swaps"]


class Outcome(Enum):
    """What a failed catalog call did."""

    LOST = "lost"
    """Certainly refused because of a concurrent writer: try again on the new head."""
    REFUSED = "refused"
    """Certainly refused for good (read-only, disk full, constraint): trying again will not help."""
    UNKNOWN = "unknown"
    """May have committed: keep every file."""


class SwapError(Exception):
    """A catalog call of :func:`swap` failed; ``error`` is what the catalog raised."""

    def __init__(self, outcome: Outcome, error: BaseException) -> None:
        super().__init__(first_line(error))
        self.outcome = outcome
        self.error = error


@dataclass
class SwapCalls:
    """What the ``commit_table`` calls inside :func:`tracked_swaps` did."""

    hooked: bool = True
    """False: the catalog could not be hooked, and the fields below are not kept."""
    committed: bool = False
    """A call returned: a commit happened."""
    unknown: BaseException | None = None
    """A call failed in a way that may have committed (its error)."""


_CALLS: ContextVar[SwapCalls | None] = ContextVar("icemor_swap_calls", default=None)
_LOCK = threading.Lock()

# SQLite's refusals (the statement failed: its transaction did not commit), by message
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
_SQLITE_REFUSED = (
    "readonly database",
    "read-only",
    "constraint failed",
    "database or disk is full",
    "unable to open database file",
)


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _sqlite_refusal(e: BaseException) -> Outcome | None:
    # SQLAlchemy wraps the driver's error (``orig``); a driver error may also come bare
    for err in (e, getattr(e, "orig", None)):
        if err is None or type(err).__name__ not in ("OperationalError", "IntegrityError", "DatabaseError"):
            continue
        text = str(err).lower()
        if any(m in text for m in _SQLITE_BUSY):
            return Outcome.LOST
        if type(err).__name__ == "IntegrityError" or any(m in text for m in _SQLITE_REFUSED):
            return Outcome.REFUSED
    return None


def classify(catalog: Catalog, e: BaseException, writes: list[MetadataWrite]) -> Outcome:
    """What a failed ``commit_table`` call of ``catalog`` did, given the metadata files it wrote."""
    if isinstance(e, CommitFailedException):
        return Outcome.LOST
    if writes and not writes[-1].done:
        return Outcome.REFUSED  # failed while writing the new metadata: the swap comes after
    if not writes and _is_sql_catalog(catalog):
        # pyiceberg's SqlCatalog writes the metadata file before it touches the database
        return Outcome.REFUSED
    return _sqlite_refusal(e) or Outcome.UNKNOWN


def _is_sql_catalog(catalog: Catalog) -> bool:
    return any(
        c.__name__ == "SqlCatalog" and c.__module__ == "pyiceberg.catalog.sql" for c in type(catalog).__mro__
    )


def _install(catalog: Catalog) -> bool:
    """Hook ``catalog.commit_table`` (this object only, once): a refused call removes its metadata JSON.

    Returns False when the catalog cannot be hooked (then nothing tells what a failed call did).
    """
    if not record_metadata_writes(catalog) and _is_sql_catalog(catalog):
        return False  # the phase rules above need the record of the metadata write
    with _LOCK:
        if getattr(catalog, "_icemor_swap_hook", False):
            return True

        def commit_table(table: PyIcebergTable, requirements: Any, updates: Any) -> Any:
            calls = _CALLS.get()
            with metadata_writes() as writes:
                try:
                    # the class's method, looked up per call (tests patch the class)
                    response = type(catalog).commit_table(catalog, table, requirements, updates)
                except BaseException as e:
                    outcome = classify(catalog, e, writes)
                    if outcome == Outcome.UNKNOWN:
                        if calls is not None:
                            calls.unknown = e
                        raise
                    delete_quietly(table.io, [w.path for w in writes])
                    partial = next((w for w in writes if not w.done), None)
                    if partial is not None and isinstance(e, OSError):
                        raise WriteFailedError.of(partial.path, e) from e
                    raise
            if calls is not None:
                calls.committed = True
            return response

        try:
            catalog.commit_table = commit_table  # type: ignore[method-assign]
            catalog._icemor_swap_hook = True  # type: ignore[attr-defined]
        except AttributeError:
            return False
    return True


@contextmanager
def tracked_swaps(catalog: Catalog) -> Iterator[SwapCalls]:
    """Whether the catalog calls in this block committed, or may have: see :class:`SwapCalls`.

    Hooks ``catalog`` (once) so that a certainly refused call removes its metadata JSON. A
    catalog that cannot be hooked counts every failed call as one that may have committed.
    """
    hooked = _install(catalog)
    calls = SwapCalls(hooked=hooked)
    token = _CALLS.set(calls)
    try:
        yield calls
    finally:
        _CALLS.reset(token)


def swap(
    table: PyIcebergTable, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
) -> None:
    """``commit_table`` of the table's catalog; a refused call leaves no metadata JSON.

    Raises:
        SwapError: The call failed; ``outcome`` says whether it may have committed.
    """
    # v3 metadata serialises only inside v3_metadata_json (pyiceberg 0.12 refuses it elsewhere)
    with tracked_swaps(table.catalog) as calls, v3_metadata_json():
        try:
            table.catalog.commit_table(table, requirements, updates)
        except BaseException as e:
            raise SwapError(failed_outcome(calls, e), e) from e


def failed_outcome(calls: SwapCalls, e: BaseException) -> Outcome:
    """What the failed catalog calls of a :func:`tracked_swaps` block did, ``e`` the error raised."""
    if calls.unknown is not None or calls.committed:
        return Outcome.UNKNOWN  # a call may have committed, or did
    if isinstance(e, CommitFailedException):
        return Outcome.LOST
    refusal = _sqlite_refusal(e)
    if not calls.hooked:
        return refusal or Outcome.UNKNOWN
    # no catalog call may have committed: whatever failed (a write, an interrupt) changed nothing
    return refusal or Outcome.REFUSED
