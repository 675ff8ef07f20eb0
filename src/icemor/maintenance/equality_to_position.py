"""Equality -> position conversion: rewrite equality deletes as position deletes, one commit.

For every live data file that equality deletes apply to, the positions of all its deleted
rows (the read path's own verdict: position deletes, DVs and equality deletes, with the
sequence-number rules) become a position-delete file of its partition; the data file's older
file-scoped position deletes are folded in and removed, and a data file with no live row
left is removed instead. Then every equality-delete file of the snapshot is removed.

The sequence-number trap: the new position deletes get this commit's sequence number, which
is higher than every data file's, so they could apply to any data file; they name positions
of one data file each (file-scoped), and only of rows that were already deleted. Data files
added after an equality delete were never affected by it and are not touched; equality
deletes are removed only when every data file they apply to was converted, which holds
because every live data file with an applicable equality delete is converted in this commit.
A concurrent commit that removes a converted data file (compaction) is a conflict; new
equality deletes committed concurrently are not in this commit's removal set and stay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation
from icemor.ops.units import check_writable, delete_units, run_units
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner

__all__ = ["ConversionMetrics", "rewrite_equality_deletes"]


@dataclass(frozen=True)
class ConversionMetrics:
    """What an equality -> position conversion did."""

    data_files_converted: int
    positions_written: int
    position_delete_files_added: int
    equality_delete_files_removed: int
    position_delete_files_removed: int
    data_files_removed: int
    snapshot_id: int | None
    """None when the table had no equality delete (nothing committed)."""
    seconds: float


def rewrite_equality_deletes(table: PyIcebergTable, *, run: Runner) -> ConversionMetrics:
    """Convert every equality delete of the current snapshot into position deletes (one commit).

    Raises:
        InvalidArgumentError: A v1 or copy-on-write table.
        CommitConflictError: A concurrent commit removed a data file being converted.
    """
    started = time.monotonic()
    table = table.refresh()
    check_writable(table)
    job = prepare_scan(table.metadata, table.io, selected_fields=("_pos",))
    snapshot = job.snapshot
    nothing = ConversionMetrics(0, 0, 0, 0, 0, 0, None, 0.0)
    if snapshot is None:
        return replace(nothing, seconds=time.monotonic() - started)
    equality = {
        d.path for d in live_delete_files(table.io, snapshot) if d.content == FileContent.EQUALITY_DELETES
    }
    if not equality:
        return replace(nothing, seconds=time.monotonic() - started)
    affected = [
        p for p in job.planned if any(d.content == FileContent.EQUALITY_DELETES for d in p.delete_files)
    ]
    opts = replace(job.options, projected_schema=Schema())
    results = run_units(table, delete_units(table, affected, opts, convert=True), run)
    written = [w for r in results for w in r.written]
    removed_data = sum(r.removed_data_files for r in results)
    removed_other = {p for r in results for p in r.removed}
    delta = RowDelta(
        table,
        Validation(
            start_snapshot_id=snapshot.snapshot_id,
            serializable=False,  # rows do not change: new data cannot conflict
            referenced_data_files={p for r in results for p in r.referenced},
            removed_data_files=removed_other,
        ),
        added_files=written,
        removed_paths=removed_other | equality,
        operation=Operation.REPLACE,
    )
    committed = delta.commit()
    return ConversionMetrics(
        data_files_converted=sum(len(r.referenced) for r in results) + removed_data,
        positions_written=sum(w.record_count for w in written),
        position_delete_files_added=len(written),
        equality_delete_files_removed=len(equality),
        position_delete_files_removed=len(removed_other) - removed_data,
        data_files_removed=removed_data,
        snapshot_id=committed.snapshot_id,
        seconds=time.monotonic() - started,
    )
