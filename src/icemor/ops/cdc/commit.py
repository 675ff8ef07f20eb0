"""The commit of a CDC batch, once its units have written: one RowDelta with the new data files
and the equality deletes (:func:`commit_changes`, equality mode) or with the deletes of the
positions the units found (position mode: DELETE's per-file units write them first); and batch
idempotence: a batch an app already committed is skipped (:func:`already_committed`), a batch
committed concurrently refused."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import DoubleType, FloatType

from icemor.commit.row_delta import RowDelta
from icemor.commit.schema import add_unpartitioned_spec, set_identifier_fields
from icemor.commit.validation import Validation
from icemor.exceptions import CommitConflictError, InvalidArgumentError
from icemor.ops.cdc.cleanup import WrittenFiles
from icemor.ops.cdc.types import (
    APP_ID_PROPERTY,
    BATCH_ID_PROPERTY,
    POSITION,
    UNSET_SPEC,
    ChangeContext,
    ChangeMetrics,
    ChangeUnitResult,
)
from icemor.ops.key_lookup import KeyConflicts
from icemor.ops.units import delete_units, run_units
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.ops.cdc.options import ChangeOptions
    from icemor.spec.files import WrittenFile

__all__ = ["already_committed", "commit_changes", "last_committed_batch", "skipped"]


def last_committed_batch(metadata: TableMetadata, app_id: str) -> int | None:
    """The newest ``batch_id`` that ``app_id`` committed on the main branch's history, if any."""
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        batch = _batch_of(snapshot, app_id)
        if batch is not None:
            return batch
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return None


def _batch_of(snapshot: Snapshot, app_id: str) -> int | None:
    summary = snapshot.summary
    if summary is None or summary.additional_properties.get(APP_ID_PROPERTY) != app_id:
        return None
    raw = summary.additional_properties.get(BATCH_ID_PROPERTY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def already_committed(table: PyIcebergTable, options: ChangeOptions) -> bool:
    """The batch of ``options`` (an app id and batch id) is, or is older than, one its app committed."""
    if options.app_id is None or options.batch_id is None:
        return False
    done = last_committed_batch(table.metadata, options.app_id)
    return done is not None and options.batch_id <= done


def skipped(started: float) -> ChangeMetrics:
    """The metrics of a batch skipped as already committed."""
    return ChangeMetrics(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None, True, time.monotonic() - started)


def commit_changes(
    table: PyIcebergTable,
    ctx: ChangeContext,
    results: Sequence[ChangeUnitResult],
    options: ChangeOptions,
    *,
    start_snapshot_id: int | None,
    started: float,
    run: Runner,
) -> ChangeMetrics:
    """Commit what the units wrote as one snapshot (none when they wrote nothing).

    Whatever fails, every file the units wrote is removed (unless the commit may have happened).

    Raises:
        InvalidArgumentError: A unit found bad input (the first one's error).
        CommitConflictError: The batch was committed concurrently by the same app, or (position
            mode) a concurrent commit added a row with one of its updated or deleted keys.
    """
    with WrittenFiles(table.io) as files:
        files.add_results(results)
        errors = [r.error for r in results if r.error is not None]
        if errors:
            raise InvalidArgumentError(errors[0])
        if ctx.delete_mode == POSITION:
            return _commit_positions(
                table,
                ctx,
                results,
                options,
                files,
                start_snapshot_id=start_snapshot_id,
                started=started,
                run=run,
            )
        written = list(files.files)
        if not written:
            return _metrics(results, [], None, started)
        global_spec = _prepare_table(table, ctx, any(w.spec_id == UNSET_SPEC for w in written))
        written = [replace(w, spec_id=global_spec) if w.spec_id == UNSET_SPEC else w for w in written]
        props, once = _batch_record(options)
        delta = RowDelta(
            table,
            Validation(start_snapshot_id=start_snapshot_id, serializable=False, history_check=once),
            added_files=written,
            snapshot_properties=props,
            operation=Operation.OVERWRITE
            if any(w.content != FileContent.DATA for w in written)
            else Operation.APPEND,
            base_is_current=True,  # refreshed when the batch began
        )
        snapshot = files.commit(delta)
    return _metrics(results, written, snapshot.snapshot_id, started)


def _commit_positions(
    table: PyIcebergTable,
    ctx: ChangeContext,
    results: Sequence[ChangeUnitResult],
    options: ChangeOptions,
    files: WrittenFiles,
    *,
    start_snapshot_id: int | None,
    started: float,
    run: Runner,
) -> ChangeMetrics:
    """Position mode: DELETE's per-file units write the positions the units found (a DV per data
    file on v3, file-scoped position deletes on v2, older deletes merged, a data file with no live
    row left removed), then one RowDelta commits them with the new data files. ``files`` holds
    what the units wrote; the caller removes it if this fails."""
    io = table.io
    data = [w for r in results for w in r.written]
    lookup = ctx.lookup
    assert lookup is not None
    keys = (
        pa.concat_tables([r.keys for r in results if r.keys is not None])
        if any(r.keys is not None for r in results)
        else None
    )
    found: dict[str, list[npt.NDArray[np.int64]]] = {}
    for r in results:
        for path, part in r.positions:
            found.setdefault(path, []).append(part)
    # units own disjoint keys, so each row is found by one unit: the union is a concatenation
    by_file = {
        p: np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0] for p, parts in found.items()
    }
    planned = [p for p, _ in lookup.files if p.data_file.path in by_file]
    units = (
        delete_units(table, planned, lookup.options, positions=by_file, dvs_per_partition=True)
        if planned
        else []
    )
    unit_results = run_units(table, units, run)  # removes what every unit wrote if one fails
    deletes = [w for r in unit_results for w in r.written]
    files.add(deletes)
    removed = {p for r in unit_results for p in r.removed}
    removed_data = sum(r.removed_data_files for r in unit_results)
    deleted = sum(r.deleted_rows for r in unit_results)
    extra = {
        "delete_mode": POSITION,
        "data_files_removed": removed_data,
        "delete_files_removed": len(removed) - removed_data,
        "files_searched": sum(r.files_searched for r in results),
        "lookup_seconds": sum(r.lookup_seconds for r in results),
    }
    if not data and not deletes and not removed:
        files.remove()  # the sidecars of no data file
        return replace(_metrics(results, [], None, started), **extra)  # type: ignore[arg-type]
    added = [*data, *deletes]
    _prepare_table(table, ctx, False)
    props, once = _batch_record(options)
    conflicts = KeyConflicts(io, table.metadata, lookup, keys) if keys is not None else None
    delta = RowDelta(
        table,
        Validation(
            start_snapshot_id=start_snapshot_id,
            serializable=False,
            referenced_data_files={p for r in unit_results for p in r.referenced},
            removed_data_files={p for r in unit_results for p in r.removed},
            history_check=_combined(once, conflicts),
        ),
        added_files=added,
        removed_paths=removed,
        snapshot_properties=props,
        operation=Operation.APPEND if not deletes and not removed else None,
        base_is_current=True,  # refreshed when the batch began
    )
    snapshot = files.commit(delta)
    metrics = _metrics(results, added, snapshot.snapshot_id, started)
    return replace(metrics, position_deletes=deleted, **extra)  # type: ignore[arg-type]


def _batch_record(options: ChangeOptions) -> tuple[dict[str, str], _NotYetCommitted | None]:
    """The snapshot properties recording the batch of an app, and the check that no concurrent
    commit recorded it first (none without an app id)."""
    if options.app_id is None or options.batch_id is None:
        return {}, None
    props = {APP_ID_PROPERTY: options.app_id, BATCH_ID_PROPERTY: str(options.batch_id)}
    return props, _NotYetCommitted(options.app_id, options.batch_id)


@dataclass(frozen=True)
class _NotYetCommitted:
    """Validation of every commit attempt: no snapshot since the batch began holds this batch."""

    app_id: str
    batch_id: int

    def __call__(self, snapshots: Sequence[Snapshot]) -> None:
        for s in snapshots:
            done = _batch_of(s, self.app_id)
            if done is not None and done >= self.batch_id:
                msg = (
                    f"batch {self.batch_id} of app {self.app_id!r} was committed concurrently "
                    f"(snapshot {s.snapshot_id} holds batch {done})"
                )
                raise CommitConflictError(msg)


def _combined(
    *checks: Callable[[Sequence[Snapshot]], None] | None,
) -> Callable[[Sequence[Snapshot]], None] | None:
    """One history check running every given one, in order."""
    given = [c for c in checks if c is not None]
    if not given:
        return None

    def check(snapshots: Sequence[Snapshot]) -> None:
        for c in given:
            c(snapshots)

    return check


def _metrics(
    results: Sequence[ChangeUnitResult],
    written: Sequence[WrittenFile],
    snapshot_id: int | None,
    started: float,
) -> ChangeMetrics:
    def count(content: FileContent) -> int:
        return sum(1 for w in written if w.content == content)

    return ChangeMetrics(
        changes=sum(r.changes for r in results),
        inserts=sum(r.inserts for r in results),
        updates=sum(r.updates for r in results),
        deletes=sum(r.deletes for r in results),
        ignored=sum(r.ignored for r in results),
        rows_written=sum(r.rows_written for r in results),
        equality_deletes=sum(r.equality_deletes for r in results),
        position_deletes=sum(r.position_deletes for r in results),
        data_files_added=count(FileContent.DATA),
        equality_delete_files_added=count(FileContent.EQUALITY_DELETES),
        position_delete_files_added=count(FileContent.POSITION_DELETES),
        snapshot_id=snapshot_id,
        skipped=False,
        seconds=time.monotonic() - started,
    )


def _prepare_table(table: PyIcebergTable, ctx: ChangeContext, needs_global_spec: bool) -> int:
    """Set the identifier fields from the key if unset; add an unpartitioned spec if one is needed.

    Both are metadata changes without a snapshot, made once per table. Returns the spec id
    for global equality deletes (``UNSET_SPEC`` when none is needed).
    """
    schema = table.metadata.schema()
    fields = [schema.find_field(i) for i in ctx.key_ids]
    # the spec's identifier-field rules: required, not float/double
    eligible = all(f.required and not isinstance(f.field_type, FloatType | DoubleType) for f in fields)
    if not schema.identifier_field_ids and eligible:
        set_identifier_fields(table, ctx.key)
    if not needs_global_spec:
        return UNSET_SPEC
    return add_unpartitioned_spec(table)
