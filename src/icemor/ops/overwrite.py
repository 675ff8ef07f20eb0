"""Overwrite: delete the rows matching a condition (every row when none) and add new rows, one snapshot.

The new rows are streamed into data files first (:func:`icemor.ops.append.write_rows`: the
input rules of :class:`icemor.ops.inputs.TableRows`); the rows they replace are deleted as a
merge-on-read DELETE deletes them (position-delete files, or a data file removed when every
live row of it matches; with no condition every data and delete file is removed); then one
``overwrite`` snapshot adds both, validated as a DELETE (``write.delete.isolation-level``).
Whatever fails, nothing is committed and every file written is removed (unless the catalog
may have committed). The new rows may also be written by another engine
(:class:`icemor.ops.append.ExternalRows`: a Spark DataFrame on its executors), by the same rules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor.commit.data_file_struct import from_data_file
from icemor.commit.door import may_have_committed
from icemor.commit.files import delete_quietly
from icemor.commit.row_delta import RowDelta
from icemor.engines.local import count_rows
from icemor.ops.append import ExternalRows, write_rows
from icemor.ops.inputs import TableRows
from icemor.ops.units import check_writable, delete_matches, isolation_level, row_validation, write_job
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.files import WrittenFile

__all__ = ["OverwriteMetrics", "check_overwrite", "overwrite_rows", "write_then_commit"]


@dataclass(frozen=True)
class OverwriteMetrics:
    """What an overwrite did."""

    rows_deleted: int
    rows_added: int
    data_files_added: int
    delete_files_added: int
    data_files_removed: int
    delete_files_removed: int
    snapshot_id: int | None
    """The new snapshot; None when nothing was deleted or added (nothing committed)."""
    seconds: float


def overwrite_rows(
    table: PyIcebergTable,
    data: Any,
    where: str | BooleanExpression | None,
    *,
    run: Runner,
    note: Callable[[str], None] | None = None,
) -> OverwriteMetrics:
    """Replace the rows matching ``where`` (every row when None) with ``data``, in one snapshot.

    Args:
        table: The pyiceberg table (refreshed here).
        data: The new rows: what :func:`icemor.ops.append.append_data` takes (an
            :class:`icemor.ops.append.ExternalRows` too).
        where: A filter in the scan language (SQL-like string) or a pyiceberg expression.
        run: The scheduler of the per-file delete work.
        note: Told, in one line, how many nanosecond timestamps lost digits (if any did).

    Raises:
        InvalidArgumentError: Bad condition or column, rows that do not fit, a v1 or
            copy-on-write table; nothing is committed.
        CommitConflictError: A concurrent commit conflicts; nothing is committed.
    """
    started = time.monotonic()
    table = table.refresh()
    # the condition is checked before anything is written
    job = check_overwrite(table, where)
    return write_then_commit(
        table,
        data,
        lambda rows, added: _overwrite(table, job, where, run, rows, added, started),
        note=note,
    )


def write_then_commit(
    table: PyIcebergTable,
    data: Any,
    commit: Callable[[int, list[WrittenFile]], OverwriteMetrics],
    *,
    note: Callable[[str], None] | None = None,
) -> OverwriteMetrics:
    """Write ``data`` into data files of ``table``'s current spec, then ``commit(rows, files)``.

    ``commit`` removes the files when it fails (unless the catalog may have committed); files
    another engine wrote (:class:`icemor.ops.append.ExternalRows`) are settled here as well:
    kept when committed or maybe committed, else removed. ``note`` is told of nanosecond
    timestamps that lost digits.
    """
    if isinstance(data, ExternalRows):
        convert = TableRows(table.metadata.schema(), table=".".join(table.name()))
        written = data.write(table, convert)  # removes what it wrote if it fails
        keep: list[str] = []
        try:
            metrics = commit(written.rows, list(written.files))
            keep = [f.path for f in written.files]
        except BaseException as e:
            if may_have_committed(e):
                keep = [f.path for f in written.files]  # the catalog may have committed them
            raise
        finally:
            written.finish(keep)
    else:
        rows, data_files, convert = write_rows(table, table.io, data, what="the data")
        spec_id = table.metadata.default_spec_id
        metrics = commit(rows, [from_data_file(f, spec_id) for f in data_files])
    if note is not None and metrics.snapshot_id is not None and (text := convert.summary()):
        note(text)
    return metrics


def check_overwrite(table: PyIcebergTable, where: str | BooleanExpression | None) -> ScanJob:
    """Refuse an overwrite of ``table`` before any row is written: a v1 or copy-on-write table, a
    bad condition or column. Returns the scan of the rows it replaces (on the current snapshot).

    Raises:
        InvalidArgumentError: As :func:`overwrite_rows`.
    """
    check_writable(table)
    # what it replaces comes from the table's files, never the local verdict store
    return write_job(
        prepare_scan(table.metadata, table.io, row_filter=where, selected_fields=("_file", "_pos"))
    )


def _overwrite(
    table: PyIcebergTable,
    job: ScanJob,
    where: str | BooleanExpression | None,
    run: Runner,
    rows: int,
    added: list[WrittenFile],
    started: float,
) -> OverwriteMetrics:
    """Delete what ``job`` matches and add ``added`` (written), in one snapshot; on failure the
    added files are removed (unless the catalog may have committed)."""
    try:
        removal = _removal(table, job, where, run)
    except BaseException:
        delete_quietly(table.io, [f.path for f in added])
        raise
    if not added and not removal.deletes and not removal.removed:
        return OverwriteMetrics(0, 0, 0, 0, 0, 0, None, time.monotonic() - started)
    isolation = isolation_level(table, P.DELETE_ISOLATION_LEVEL)
    delta = RowDelta(
        table,
        row_validation(job, isolation, referenced=removal.referenced, removed=removal.removed),
        added_files=[*removal.deletes, *added],
        removed_paths=removal.removed,
        operation=Operation.OVERWRITE,
    )
    committed = delta.commit()  # on failure it removes the files it was given
    return OverwriteMetrics(
        rows_deleted=removal.rows,
        rows_added=rows,
        data_files_added=len(added),
        delete_files_added=len(removal.deletes),
        data_files_removed=removal.data_files_removed,
        delete_files_removed=len(removal.removed) - removal.data_files_removed,
        snapshot_id=committed.snapshot_id,
        seconds=time.monotonic() - started,
    )


@dataclass
class _Removal:
    rows: int
    deletes: list[WrittenFile]
    removed: set[str]
    """Data files whose every live row matched, and the delete files only they used."""
    data_files_removed: int
    referenced: set[str]


def _removal(table: PyIcebergTable, job: ScanJob, where: object, run: Runner) -> _Removal:
    """The delete files to add and the files to remove for the rows ``job`` matches (as DELETE)."""
    if job.snapshot is None:
        return _Removal(0, [], set(), 0, set())
    if where is None:
        data = {p.data_file.path for p in job.planned}
        deletes = {d.path for d in live_delete_files(table.io, job.snapshot)}
        return _Removal(count_rows(job), [], data | deletes, len(data), set())
    # no columns but the position: the filter's columns are read for the filter only
    opts = replace(job.options, projected_schema=Schema(), file_column=False)
    results = delete_matches(table, job, opts, run)
    return _Removal(
        rows=sum(r.deleted_rows for r in results),
        deletes=[w for r in results for w in r.written],
        removed={p for r in results for p in r.removed},
        data_files_removed=sum(r.removed_data_files for r in results),
        referenced={p for r in results for p in r.referenced},
    )
