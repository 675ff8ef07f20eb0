"""A CDC batch on the local engine: the changes read into one Arrow table, written by one unit,
committed once (:func:`apply_changes`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icemor.engines.local import runner
from icemor.ops.cdc.commit import already_committed, commit_changes, skipped
from icemor.ops.cdc.prepare import prepare_changes
from icemor.ops.cdc.units import change_unit
from icemor.ops.inputs import TableRows, read_arrow

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner
    from icemor.ops.cdc.options import ChangeOptions
    from icemor.ops.cdc.types import ChangeMetrics

__all__ = ["apply_changes"]


def apply_changes(
    table: PyIcebergTable,
    changes: Any,
    options: ChangeOptions,
    *,
    note: Callable[[str], None] | None = None,
    run: Runner | None = None,
) -> ChangeMetrics:
    """Apply one batch of changes on the local engine, as one commit.

    The table is refreshed once, here; a batch its app already committed is skipped before the
    changes are read. The changes are read once, here, their table columns converted by the
    rules of every write (:class:`icemor.ops.inputs.TableRows`).

    Args:
        table: The pyiceberg table (refreshed here).
        changes: An Arrow table (or record batch / reader, or pandas DataFrame), or Parquet
            file paths; columns: the table's (missing optional ones are NULL), the op column,
            and ``order_by`` if given.
        options: The key, op column, order, app and batch ids, delete mode.
        note: Told in one line how many nanosecond timestamps lost digits (when any did).
        run: Position mode: runs the per-file delete units (default: the local thread pool).

    Raises:
        InvalidArgumentError: Bad table, key, schema or rows; nothing is committed.
        CommitConflictError: The batch was committed concurrently by the same app, or (position
            mode) a concurrent commit added a row with one of its updated or deleted keys.
    """
    started = time.monotonic()
    table = table.refresh()
    if already_committed(table, options):
        return skipped(started)
    convert = TableRows(table.metadata.schema(), table=".".join(table.name()), strict=False)
    rows = read_arrow(changes, what="the changes", convert=convert)
    if rows.num_rows == 0:
        # nothing to apply; an empty pandas frame's dtypes say nothing (object -> Arrow's null
        # type, [] -> float64): only the names are checked, and nothing is committed
        rows = pa.table({name: pa.nulls(0) for name in rows.column_names})
    ctx = prepare_changes(table, rows.schema, options, rows=rows)
    start = table.metadata.current_snapshot()
    result = change_unit(table.io, ctx, rows, 0)
    metrics = commit_changes(
        table,
        ctx,
        [result],
        options,
        start_snapshot_id=start.snapshot_id if start else None,
        started=started,
        run=run if run is not None else runner(table.io),
    )
    if note is not None and (text := convert.summary()) is not None:
        note(text)
    return metrics
