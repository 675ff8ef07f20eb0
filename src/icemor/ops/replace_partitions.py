"""Dynamic partition overwrite: the partitions the new rows fall in are replaced whole.

Iceberg's ``ReplacePartitions``, which Spark runs for ``INSERT OVERWRITE`` in dynamic
``spark.sql.sources.partitionOverwriteMode`` and for ``df.writeTo(t).overwritePartitions()``:
the new rows are written first (the partitions come from the files written, so every
transform is the writer's own), then every live data and delete file of the current spec in
one of those partitions is removed and the new files added, in one ``overwrite`` snapshot
(``replace-partitions=true``). Other partitions are untouched; an unpartitioned table is
replaced whole; no rows replace nothing. As Iceberg's runtime without an ``isolation-level``
write option, the commit checks only that the files it removes are still live.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pyiceberg.table.snapshots import Operation

from icemor.commit.files import delete_quietly
from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.io.reader import count_task
from icemor.ops.overwrite import OverwriteMetrics, write_then_commit
from icemor.ops.units import check_writable, write_job
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec.dv import delete_file_removal_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.spec.files import WrittenFile

__all__ = ["replace_partitions"]


def replace_partitions(
    table: PyIcebergTable, data: Any, *, note: Callable[[str], None] | None = None
) -> OverwriteMetrics:
    """Replace the partitions ``data``'s rows fall in with those rows, in one snapshot.

    Args:
        table: The pyiceberg table (refreshed here).
        data: The new rows: what :func:`icemor.ops.append.append_data` takes (an
            :class:`icemor.ops.append.ExternalRows` too).
        note: Told, in one line, how many nanosecond timestamps lost digits (if any did).

    Raises:
        InvalidArgumentError: Rows that do not fit, a v1 or copy-on-write table; nothing is
            committed and no file is left.
        CommitConflictError: A file it replaces was removed concurrently; nothing is committed.
    """
    started = time.monotonic()
    table = table.refresh()
    check_writable(table)
    return write_then_commit(
        table, data, lambda rows, added: _replace(table, rows, added, started), note=note
    )


def _replace(table: PyIcebergTable, rows: int, added: list[WrittenFile], started: float) -> OverwriteMetrics:
    """Remove the live files of ``added``'s partitions and add ``added``; on failure ``added`` is
    removed (unless the catalog may have committed)."""
    if not added:
        return OverwriteMetrics(0, 0, 0, 0, 0, 0, None, time.monotonic() - started)
    try:
        keys = {(f.spec_id, tuple(f.partition)) for f in added}
        job = write_job(prepare_scan(table.metadata, table.io, selected_fields=("_file", "_pos")))
        dropped = {
            p.data_file.path for p in job.live_files() if (p.data_file.spec_id, p.data_file.partition) in keys
        }
        pieces = [t for ct in job.plan_tasks() for t in ct.tasks if t.data_file.path in dropped]
        rows_deleted = sum(count_task(job.io, t, job.options) for t in pieces)
        deletes = [] if job.snapshot is None else live_delete_files(table.io, job.snapshot)
        removed_deletes = {delete_file_removal_key(d) for d in deletes if (d.spec_id, d.partition) in keys}
    except BaseException:
        delete_quietly(table.io, [f.path for f in added])
        raise
    delta = RowDelta(
        table,
        Validation(
            start_snapshot_id=job.snapshot.snapshot_id if job.snapshot is not None else None,
            serializable=False,
        ),
        added_files=added,
        removed_paths=dropped | removed_deletes,
        snapshot_properties={"replace-partitions": "true"},
        operation=Operation.OVERWRITE,
    )
    committed = delta.commit()  # on failure it removes the files it was given
    return OverwriteMetrics(
        rows_deleted=rows_deleted,
        rows_added=rows,
        data_files_added=len(added),
        delete_files_added=0,
        data_files_removed=len(dropped),
        delete_files_removed=len(removed_deletes),
        snapshot_id=committed.snapshot_id,
        seconds=time.monotonic() - started,
    )
