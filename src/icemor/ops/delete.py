"""DELETE as merge-on-read: position-delete files for the matching rows, one RowDelta commit.

The rows to delete are the live rows of the current snapshot that match the condition: they
are found with icemor's own scan (``_pos`` of each matching row, every existing delete
applied), so a row already deleted is not deleted again. Per data file:

- no matching row: nothing;
- every live row matches: the data file is removed (with the delete files scoped to it
  alone) instead of writing a position for each row (as Impala's Iceberg writer does when a
  DELETE removes every row: no delete file listing every position);
- otherwise its positions go to a position-delete file of its partition, ``write.delete.
  granularity`` = ``file`` (default: one file per data file, merging the data file's older
  file-scoped deletes into it, as Iceberg's Spark writer does since 1.8) or ``partition``.

The per-file work (:func:`icemor.ops.units.delete_unit`) runs on the local engine's threads or
on Spark executors; only the written files' metadata comes back, and the driver commits once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.engines.local import count_rows
from icemor.ops.units import (
    check_writable,
    delete_matches,
    deleted_concurrently,
    isolation_level,
    row_validation,
    write_job,
)
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table as PyIcebergTable
    from pyspark.sql import SparkSession

    from icemor.engines import Runner
    from icemor.io.reader import ReadOptions
    from icemor.ops.units import UnitResult
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.files import WrittenFile
    from icemor.spec.tasks import PlannedFile

__all__ = ["DeleteMetrics", "delete_rows"]


@dataclass(frozen=True)
class DeleteMetrics:
    """What a DELETE did."""

    deleted_rows: int
    delete_files_added: int
    data_files_removed: int
    delete_files_removed: int
    snapshot_id: int | None
    """The new snapshot; None when nothing matched (nothing was committed)."""
    seconds: float


def delete_rows(
    table: PyIcebergTable,
    where: str | BooleanExpression | None,
    *,
    run: Runner,
    spark: SparkSession | None = None,
) -> DeleteMetrics:
    """Delete the rows matching ``where`` (all rows when None) as one merge-on-read snapshot.

    Args:
        table: The pyiceberg table (refreshed here).
        where: A filter in the scan language, or a pyiceberg expression; None deletes every row.
        run: The scheduler of the per-unit work: ``run(fn, units)`` returns ``fn(io, unit)``
            for each unit (the local thread pool or Spark executors).
        spark: Evaluate a SQL condition (one outside pyiceberg's filter language) as Spark SQL
            on this session, instead of DuckDB locally.

    Raises:
        InvalidArgumentError: Unknown column, bad condition, v1 table, copy-on-write table.
        CommitConflictError: A concurrent commit conflicts; nothing is committed.
    """
    started = time.monotonic()
    table = table.refresh()
    check_writable(table)
    # what it deletes and counts comes from the table's files, never the local verdict store
    job = write_job(
        prepare_scan(table.metadata, table.io, row_filter=where, selected_fields=("_file", "_pos"))
    )
    # no columns but the position: the filter's columns are read for the filter only
    opts = replace(job.options, projected_schema=Schema(), file_column=False)
    if job.snapshot is None:
        return DeleteMetrics(0, 0, 0, 0, None, time.monotonic() - started)
    if where is None:
        return _delete_everything(table, job, started)
    if job.residual is not None and spark is not None:
        return _delete_on_spark(table, job, opts, spark, started)
    results = delete_matches(table, job, opts, run)
    return _commit(table, job, opts, results, started)


def _commit(
    table: PyIcebergTable, job: ScanJob, opts: ReadOptions, results: Sequence[UnitResult], started: float
) -> DeleteMetrics:
    """Commit the units' delete files and removals as one RowDelta; the metrics."""
    snapshot = job.snapshot
    assert snapshot is not None
    isolation = isolation_level(table, P.DELETE_ISOLATION_LEVEL)
    written = [w for r in results for w in r.written]
    removed = {p for r in results for p in r.removed}
    deleted = sum(r.deleted_rows for r in results)
    if not written and not removed:
        return DeleteMetrics(0, 0, 0, 0, None, time.monotonic() - started)
    delta = RowDelta(
        table,
        row_validation(
            job, isolation, referenced={p for r in results for p in r.referenced}, removed=removed
        ),
        added_files=written,
        removed_paths=removed,
    )
    committed = delta.commit()
    removed_data = sum(r.removed_data_files for r in results)
    by_path = {p.data_file.path: p for p in job.planned}
    touched: list[tuple[PlannedFile, Sequence[WrittenFile] | None]] = []
    for r in results:
        touched += [(by_path[path], r.written) for path in r.referenced]
        touched += [(by_path[path], None) for path in r.removed if path in by_path]
    deleted -= deleted_concurrently(table, snapshot, committed, touched, opts)
    return DeleteMetrics(
        deleted_rows=deleted,
        delete_files_added=len(written),
        data_files_removed=removed_data,
        delete_files_removed=len(removed) - removed_data,
        snapshot_id=committed.snapshot_id,
        seconds=time.monotonic() - started,
    )


def _delete_on_spark(
    table: PyIcebergTable, job: ScanJob, opts: ReadOptions, spark: SparkSession, started: float
) -> DeleteMetrics:
    """A SQL condition on Spark: the scan finds the positions, executor tasks write their deletes
    (sorted by data file and position); the positions never come to the driver."""
    from icemor.engines.spark import scan_to_dataframe  # noqa: PLC0415 - optional: pyspark

    # ops.rowlevel imports DuckDB, which a plain delete does not need (tests/test_import.py)
    from icemor.ops.rowlevel import RowLevelResult, write_and_commit_on_spark  # noqa: PLC0415 - cost: duckdb ~100 ms

    outcome: list[DeleteMetrics] = []
    job.whole_files = True  # the write runs in the scan's tasks (clustered=True below)

    def commit(results: Sequence[UnitResult], data: Sequence[WrittenFile]) -> RowLevelResult:
        assert not data  # a DELETE writes no rows
        metrics = _commit(table, job, opts, results, started)
        outcome.append(metrics)
        return RowLevelResult(None, 0, 0, 0, 0)

    write_and_commit_on_spark(
        table,
        job,
        scan_to_dataframe(job, spark).select("_file", "_pos"),
        isolation_property=P.DELETE_ISOLATION_LEVEL,
        options=opts,
        commit=commit,
        clustered=True,
    )
    return outcome[0]


def _delete_everything(table: PyIcebergTable, job: ScanJob, started: float) -> DeleteMetrics:
    """No condition: one snapshot that removes every data and delete file (no row is read)."""
    assert job.snapshot is not None
    deleted = count_rows(job)
    data = {p.data_file.path for p in job.planned}
    deletes = {d.path for d in live_delete_files(table.io, job.snapshot)}
    if not data and not deletes:
        return DeleteMetrics(0, 0, 0, 0, None, time.monotonic() - started)
    delta = RowDelta(
        table,
        Validation(start_snapshot_id=job.snapshot.snapshot_id, removed_data_files=data),
        removed_paths=data | deletes,
        operation=Operation.DELETE,
    )
    committed = delta.commit()
    deleted -= deleted_concurrently(
        table, job.snapshot, committed, [(p, None) for p in job.planned], job.options
    )
    return DeleteMetrics(
        deleted, 0, len(data), len(deletes), committed.snapshot_id, time.monotonic() - started
    )
