"""The one door to the catalog: every metadata change icemor makes is committed by :func:`commit`
(a new table by :func:`create`), the only ``commit_table`` call of icemor (``make lint`` checks it).

:func:`commit` tries a change as ``commit.retry.*`` says (:func:`icemor.commit.retries.attempts`):
each attempt reads the table's current metadata, asks the caller for the change on it
(:class:`Change`: requirements, updates and the files written for this attempt) and sends it with
``AssertTableUUID`` of the table the operation started on. A failed catalog call is classified
(:func:`classify`):

- **lost** (``CommitFailedException``, HTTP 409): a concurrent commit moved the table; this
  attempt's files are removed and the change is tried again on the new head;
- **refused** (any other HTTP 4xx, 501; SQLite refusing the write; any failure before or while a
  metastore catalog writes the new metadata JSON, since its pointer swap comes after): nothing was
  committed; this attempt's files are removed and :class:`CommitFailedError` says why;
- **unknown** (HTTP 5xx, a timeout, a dropped connection, an interrupt after the metadata was
  written): the table is read again and, if the attempt's snapshot id (kept the same across
  attempts) or the metadata file it wrote is in the new head or its metadata log, it committed and
  the commit succeeds; otherwise every file is kept (a committed snapshot may reference them, as
  Iceberg Java keeps them) and :class:`CommitStateUnknownError` says so.

A table dropped and created again under the same name between attempts is an error
(:class:`CommitConflictError`), never a commit to the new table. After a commit, the metadata files
that fell out of the metadata log are deleted when ``write.metadata.delete-after-commit.enabled``
is true (the catalog trims the log to ``write.metadata.previous-versions-max``), as Iceberg Java's
``BaseMetastoreTableOperations.deleteRemovedMetadataFiles``.

The caller's own files (data and delete files) are the caller's: it removes them when the error it
gets is not one that :func:`may_have_committed`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NoReturn

from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, TableAlreadyExistsError
from pyiceberg.exceptions import NoSuchTableError as _NoSuchTable
from pyiceberg.table.update import AssertCreate, AssertTableUUID

from icemor._compat.pyiceberg import (
    metadata_writes,
    record_metadata_writes,
    remember_committed_metadata,
    v3_metadata_json,
)
from icemor.commit.files import delete_quietly
from icemor.commit.retries import attempts, status_checks
from icemor.exceptions import (
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    IcemorError,
    WriteFailedError,
    first_line,  # re-exported: the redacted first line of an error (other modules import it here)
)
from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.table import CommitTableResponse, StagedTable
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableRequirement, TableUpdate

    from icemor._compat.pyiceberg import MetadataWrite

__all__ = [
    "Change",
    "Committed",
    "Outcome",
    "classify",
    "commit",
    "create",
    "delete_removed_metadata",
    "fail",
    "first_line",
    "http_status",
    "may_have_committed",
]


@dataclass(frozen=True)
class Change:
    """What one attempt asks the catalog to do."""

    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]
    written: Sequence[str] = ()
    """Files written for this attempt only (manifests, a manifest list): removed when the attempt
    certainly did not commit."""


@dataclass(frozen=True)
class Committed:
    """The result of :func:`commit`."""

    base: TableMetadata
    """The metadata the committed attempt was made on (``metadata`` when nothing was to do)."""
    metadata: TableMetadata
    """The table's metadata after the commit."""
    changed: bool
    """False when the caller found nothing to do (nothing was committed)."""


class Outcome(Enum):
    """What a failed catalog call did."""

    LOST = "lost"
    """Certainly refused because of a concurrent writer: try again on the new head."""
    REFUSED = "refused"
    """Certainly refused for good: trying again will not help."""
    UNKNOWN = "unknown"
    """May have committed: keep every file."""


# SQLite's refusals (the statement failed: its transaction did not commit), by message
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
_SQLITE_REFUSED = (
    "readonly database",
    "read-only",
    "constraint failed",
    "database or disk is full",
    "unable to open database file",
)
_MARK = "_icemor_may_have_committed"


def may_have_committed(e: BaseException) -> bool:
    """Whether a failure raised through :func:`commit` leaves the commit possibly made: then no
    file written for it may be removed."""
    return isinstance(e, CommitStateUnknownError) or bool(getattr(e, _MARK, False))


def _mark(e: BaseException) -> None:
    with contextlib.suppress(AttributeError):  # an exception class with __slots__: nothing to mark
        setattr(e, _MARK, True)


def http_status(e: BaseException) -> int | None:
    """The HTTP status a REST catalog answered, when ``e`` comes from one (pyiceberg raises its
    errors ``from`` the HTTP error, which carries the response)."""
    err: BaseException | None = e
    for _ in range(8):  # a short cause chain; never loop
        if err is None:
            return None
        status = getattr(getattr(err, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        err = err.__cause__
    return None


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


def _is_sql_catalog(catalog: Catalog) -> bool:
    return any(
        c.__name__ == "SqlCatalog" and c.__module__ == "pyiceberg.catalog.sql" for c in type(catalog).__mro__
    )


def classify(catalog: Catalog, e: BaseException, writes: list[MetadataWrite] | None) -> Outcome:
    """What a failed ``commit_table`` call of ``catalog`` did.

    Args:
        catalog: The catalog called.
        e: What the call raised.
        writes: The metadata files the call began to write; None when they could not be
            recorded (then the write-phase rules do not apply).
    """
    if isinstance(e, CommitFailedException):
        return Outcome.LOST
    if isinstance(e, CommitStateUnknownException):  # the catalog says so itself
        return Outcome.UNKNOWN
    status = http_status(e)
    if status is not None:
        # the REST spec: 409 a conflict (retry); other 4xx refused; 5xx "the commit state is
        # unknown". 501 Not Implemented: the server did not perform the request (Java too).
        if status == 409:
            return Outcome.LOST
        if 400 <= status < 500 or status == 501:
            return Outcome.REFUSED
        return Outcome.UNKNOWN
    if isinstance(e, TableAlreadyExistsError):  # a create's insert refused by the database
        return Outcome.REFUSED
    refusal = _sqlite_refusal(e)  # "database is locked": a concurrent writer, as a lost swap
    if refusal is not None:
        return refusal
    if writes is not None:
        if writes and not writes[-1].done:
            return Outcome.REFUSED  # failed while writing the new metadata: the swap comes after
        if not writes and _is_sql_catalog(catalog):
            return Outcome.REFUSED  # pyiceberg's SqlCatalog writes the metadata before the database
    return Outcome.UNKNOWN


class _Failed(Exception):
    """The catalog call failed; ``error`` is what it raised (or the WriteFailedError for it)."""

    def __init__(self, outcome: Outcome, error: BaseException, metadata_paths: list[str]) -> None:
        super().__init__(first_line(error))
        self.outcome = outcome
        self.error = error
        self.metadata_paths = metadata_paths
        """Metadata files the call wrote completely (one may now be the table's)."""


def _swap(
    table: PyIcebergTable, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
) -> CommitTableResponse:
    """The catalog's ``commit_table``: icemor's only call of it. A certainly refused call leaves
    no metadata JSON behind.

    Raises:
        _Failed: The call failed, with its :class:`Outcome`.
    """
    catalog = table.catalog
    recorded = record_metadata_writes(catalog)
    # v3 metadata serialises only inside v3_metadata_json (pyiceberg 0.12 refuses it elsewhere)
    with metadata_writes() as writes, v3_metadata_json():
        try:
            return catalog.commit_table(table, requirements, updates)
        except BaseException as e:
            outcome = classify(catalog, e, writes if recorded else None)
            if outcome is Outcome.UNKNOWN:
                raise _Failed(outcome, e, [w.path for w in writes if w.done]) from e
            delete_quietly(table.io, [w.path for w in writes])
            partial = next((w for w in writes if not w.done), None)
            error: BaseException = e
            if partial is not None and isinstance(e, OSError):
                error = WriteFailedError.of(partial.path, e)
            raise _Failed(outcome, error, []) from e


def _raise_refused(error: BaseException, what: str) -> NoReturn:
    if not isinstance(error, Exception) or isinstance(error, IcemorError):
        raise error from error.__cause__
    status = http_status(error)
    how = f" (HTTP {status})" if status is not None else ""
    msg = f"the catalog refused {what}{how}: {first_line(error)}"
    raise CommitFailedError(msg) from error


def _raise_unknown(error: BaseException, what: str) -> NoReturn:
    if not isinstance(error, Exception):
        _mark(error)
        raise error from error.__cause__
    status = http_status(error)
    how = f" (HTTP {status})" if status is not None else ""
    msg = f"{what} may or may not have happened{how}: {first_line(error)}; every file written for it is kept"
    raise CommitStateUnknownError(msg) from error


def fail(outcome: Outcome, error: BaseException, what: str) -> NoReturn:
    """Raise ``error``, raised by a catalog call with ``outcome``, as icemor's one-line error:
    :class:`CommitStateUnknownError` when unknown, else :class:`CommitFailedError` (an error of
    icemor's, or an interrupt, as it is)."""
    if outcome is Outcome.UNKNOWN:
        _raise_unknown(error, what)
    _raise_refused(error, what)


def _reload(table: PyIcebergTable, table_uuid: object) -> PyIcebergTable:
    """The table as the catalog has it now; ``table`` follows it when it is still the same table
    (pyiceberg's ``refresh`` raises a ValueError for another one)."""
    fresh = table.catalog.load_table(table.name())
    if fresh.metadata.table_uuid == table_uuid:
        table.metadata, table.metadata_location = fresh.metadata, fresh.metadata_location
        table.io, table.config = fresh.io, fresh.config
    return fresh


def _current(table: PyIcebergTable, what: str, table_uuid: object) -> TableMetadata:
    """The table's current metadata, refused when the table is gone or is another one now."""
    name = ".".join(table.name())
    try:
        metadata = _reload(table, table_uuid).metadata
    except _NoSuchTable as e:
        msg = f"{what} failed: {name} no longer exists"
        raise CommitFailedError(msg) from e
    if metadata.table_uuid != table_uuid:
        msg = (
            f"{what} failed: {name} was dropped and created again meanwhile (table uuid {table_uuid}, "
            f"now {metadata.table_uuid}); nothing was committed to the new table"
        )
        raise CommitConflictError(msg)
    return metadata


def _landed(
    table: PyIcebergTable, table_uuid: object, snapshot_id: int | None, metadata_paths: list[str]
) -> TableMetadata | None:
    """The table's metadata if the attempt that failed in an unknown state committed, else None.

    It did when its snapshot id is in the table, or the metadata file it wrote is the table's
    current one or in its metadata log (a later commit may have followed it).
    """
    for _ in status_checks(table.metadata.properties):
        try:
            fresh = _reload(table, table_uuid)
        except Exception:  # the catalog cannot be read now: look again (Java's status checks)
            continue
        metadata = fresh.metadata
        if metadata.table_uuid != table_uuid:
            return None
        if snapshot_id is not None and metadata.snapshot_by_id(snapshot_id) is not None:
            return metadata
        known = {fresh.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
        return metadata if any(p in known for p in metadata_paths) else None
    return None


def delete_removed_metadata(io: FileIO, base: TableMetadata, metadata: TableMetadata) -> list[str]:
    """After a commit from ``base`` to ``metadata``: when ``write.metadata.delete-after-commit.enabled``
    is true, delete the metadata files of ``base``'s metadata log that ``metadata``'s no longer
    lists (Iceberg Java's ``deleteRemovedMetadataFiles``), best effort. Returns the files deleted."""
    if not P.bool_property(
        metadata.properties,
        P.METADATA_DELETE_AFTER_COMMIT_ENABLED,
        P.METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT,
    ):
        return []
    kept = {entry.metadata_file for entry in metadata.metadata_log}
    removed = sorted({entry.metadata_file for entry in base.metadata_log} - kept)
    failed = set(delete_quietly(io, removed))
    return [p for p in removed if p not in failed]


def commit(
    table: PyIcebergTable,
    prepare: Callable[[TableMetadata, int], Change | None],
    *,
    what: str,
    snapshot_id: int | None = None,
    current: TableMetadata | None = None,
) -> Committed:
    """Commit ``prepare(current metadata, attempt number)``, tried again after a lost swap.

    ``prepare`` returns None when there is nothing (left) to do; an error it raises ends the
    commit (nothing committed). ``table`` is left at the metadata after the commit.

    Args:
        table: The table; the operation started on its current metadata (its table uuid).
        prepare: The change on given metadata. It removes what it wrote if it raises.
        what: The change in a few words for messages, e.g. ``"the commit to db.t"``.
        snapshot_id: The id of the snapshot the change adds, the same in every attempt: how an
            attempt that failed in an unknown state is recognised when it committed.
        current: The table's metadata as the caller has just read it from the catalog for this
            operation: the first attempt is made on it without reading the table again (one
            metadata parse fewer per commit). The catalog's compare-and-swap proves it current;
            if it was not (a lost swap), the table is read and the change tried again at once,
            not counted as a retry: the retries are the same as without it.

    Raises:
        CommitFailedError: Every attempt lost its swap, the catalog refused the change, or the
            table no longer exists (nothing committed).
        CommitConflictError: The table was dropped and created again meanwhile.
        WriteFailedError: The new metadata file could not be written (nothing committed).
        CommitStateUnknownError: The catalog call failed in a way that leaves unknown whether it
            committed, and the table does not show that it did; every file is kept.
    """
    table_uuid = table.metadata.table_uuid
    last: BaseException | None = None
    tried = 0
    given = current if current is not None and current.table_uuid == table_uuid else None
    for attempt in attempts(table.metadata.properties):
        tried = attempt + 1
        optimistic, given = given, None
        base = optimistic if optimistic is not None else _current(table, what, table_uuid)
        if snapshot_id is not None and base.snapshot_by_id(snapshot_id) is not None:
            return Committed(base, base, changed=True)  # an earlier attempt committed after all
        change = prepare(base, attempt)
        if change is None:
            return Committed(base, base, changed=False)
        requirements = (
            AssertTableUUID(uuid=table_uuid),
            *(r for r in change.requirements if not isinstance(r, AssertTableUUID)),
        )
        response: CommitTableResponse | None = None
        try:
            response = _swap(table, requirements, change.updates)
        except _Failed as failed:
            if failed.outcome is not Outcome.UNKNOWN:
                delete_quietly(table.io, change.written)  # the catalog refused: nothing references these
                if failed.outcome is Outcome.LOST:
                    last = failed.error
                    if optimistic is not None:
                        # the caller's metadata was stale: read the table and try again at once
                        return commit(table, prepare, what=what, snapshot_id=snapshot_id)
                    continue
                _raise_refused(failed.error, what)
            try:
                landed = _landed(table, table_uuid, snapshot_id, failed.metadata_paths)
            except BaseException as e:  # (an interrupt while looking) it may have committed
                _mark(e)
                raise
            if landed is None:
                _raise_unknown(failed.error, what)
        try:  # committed: whatever fails now (an interrupt), every file is the table's
            if response is not None:
                table.metadata, table.metadata_location = response.metadata, response.metadata_location
                if isinstance(table.catalog, MetastoreCatalog):  # it wrote that file from this model
                    remember_committed_metadata(response.metadata_location, response.metadata, table.io)
            after = table.metadata
            delete_removed_metadata(table.io, base, after)
        except BaseException as e:
            _mark(e)
            raise
        return Committed(base, after, changed=True)
    reason = first_line(last) if last is not None else "no attempt was made (commit.retry.total-timeout-ms)"
    msg = f"{what} failed after {tried} attempt(s): {reason}"
    raise CommitFailedError(msg)


def create(catalog: Catalog, staged: StagedTable, updates: tuple[TableUpdate, ...], *, what: str) -> None:
    """Commit a staged create (``AssertCreate`` and the staged table's updates).

    Raises:
        TableAlreadyExistsError: The table exists (created concurrently): nothing committed.
        CommitFailedError: The catalog refused the create (nothing committed).
        CommitStateUnknownError: The call failed in a way that leaves unknown whether the table
            was created, and no table with the staged table's uuid exists now.
    """
    try:
        _swap(staged, (AssertCreate(),), updates)
    except _Failed as failed:
        error = failed.error
        if failed.outcome is Outcome.UNKNOWN:
            if _created(catalog, staged):
                return
            _raise_unknown(error, what)
        if failed.outcome is Outcome.LOST or isinstance(error, TableAlreadyExistsError):
            msg = f"{'.'.join(staged.name())} already exists"
            raise TableAlreadyExistsError(msg) from error
        _raise_refused(error, what)


def _created(catalog: Catalog, staged: StagedTable) -> bool:
    """Whether the table a create in an unknown state staged is in the catalog (its uuid)."""
    for _ in status_checks(staged.metadata.properties):
        try:
            current = catalog.load_table(staged.name())
        except _NoSuchTable:
            return False
        except Exception:  # the catalog cannot be read now: look again
            continue
        return current.metadata.table_uuid == staged.metadata.table_uuid
    return False
