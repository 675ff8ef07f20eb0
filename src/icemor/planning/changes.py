"""Plan a change feed: the snapshots of a range and, per snapshot, the data files whose rows changed.

Semantics (docs/cdc.md, "Change feed"):

* The range ``(start, end]`` is the main ancestry of ``end``: start exclusive, end inclusive, as
  Iceberg Java's ``start-snapshot-id``/``end-snapshot-id``; timestamps pick the snapshots
  committed in ``(start_timestamp, end_timestamp]``. A start that is not an ancestor of the end
  is an error.
* A row's identity is (data file, position). Per snapshot S with parent P, a row is *inserted*
  when it is live at S and not at P, *deleted* when live at P and not at S: a delete file added
  in S applies to it (position delete, DV, or equality delete with the sequence-number rules),
  or S removed its data file without rewriting it.
* ``replace`` snapshots (compaction, equality -> position conversion, delete-file compaction)
  only move rows: they produce no changes.
* Only data files whose state differs between P and S are read: added or removed by S, or whose
  set of applicable delete files changed. The states come from icemor's own scan planning, so
  every delete rule is the read path's.
* A snapshot whose parent (or the start) was expired cannot be diffed: an error names the
  oldest snapshot that can still be a start. Nothing is silently skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError
from icemor.io.changes import (
    DELETE,
    INSERT,
    FileChange,
    change_schema,
    net_changes,
    read_snapshot,
    row_sets,
    snapshot_rows,
)
from icemor.planning.manifest_reader import read_manifest_list
from icemor.planning.planner import plan_files
from icemor.planning.scan_job import prepare_scan
from icemor.spec.describe import iso_time

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.io.changes import RowSet
    from icemor.io.reader import ReadOptions
    from icemor.spec.files import DeleteFileRef
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "ChangeJob",
    "FileChange",
    "SnapshotChange",
    "change_batches",
    "plan_changes",
    "prepare_changes",
    "snapshot_changes",
    "snapshot_range",
]

REPLACE = "replace"


@dataclass(frozen=True, slots=True)
class SnapshotChange:
    """One snapshot of the range: its ordinal in the range and the files to read."""

    snapshot_id: int
    ordinal: int
    operation: str
    files: tuple[FileChange, ...] = field(default=())


def _operation(snapshot: Snapshot) -> str:
    summary = snapshot.summary
    if summary is None:
        return "append"
    op = summary.operation
    return str(getattr(op, "value", op))


def _ancestry(metadata: TableMetadata, io: FileIO, end: Snapshot) -> tuple[list[Snapshot], bool]:
    """``end`` and its ancestors, newest first, and whether older history was expired.

    Expiry may leave a dangling parent id, or (pyiceberg) clear it: then the oldest snapshot
    still lists manifests that older snapshots added, which a table's first snapshot cannot.
    """
    chain = [end]
    while chain[-1].parent_snapshot_id is not None:
        parent = metadata.snapshot_by_id(chain[-1].parent_snapshot_id)
        if parent is None:
            return chain, True
        chain.append(parent)
    oldest = chain[-1]
    inherited = any(
        m.added_snapshot_id not in (None, oldest.snapshot_id) for m in read_manifest_list(io, oldest)
    )
    return chain, inherited


def _expired(what: str, oldest: Snapshot) -> NoSuchSnapshotError:
    msg = (
        f"cannot compute changes {what}: that history was expired; "
        f"the oldest snapshot that can be read (and used as the start) is {oldest.snapshot_id}"
    )
    return NoSuchSnapshotError(msg)


def snapshot_range(
    metadata: TableMetadata,
    io: FileIO,
    start_snapshot_id: int | None = None,
    end_snapshot_id: int | None = None,
    *,
    start_timestamp: int | None = None,
    end_timestamp: int | None = None,
) -> list[Snapshot]:
    """The snapshots of ``(start, end]`` on the main ancestry of ``end``, oldest first.

    Args:
        start_snapshot_id: Exclusive start; None (and no ``start_timestamp``): the table's first snapshot.
        end_snapshot_id: Inclusive end; None (and no ``end_timestamp``): the current snapshot.
        start_timestamp: Exclusive: the snapshots committed after this time (ms since the epoch).
        end_timestamp: Inclusive: the snapshots committed at or before this time.

    Raises:
        InvalidArgumentError: Both an id and a timestamp for one bound; a start that is not an
            ancestor of the end; a start after the end; a start timestamp not before the end
            timestamp (as Java's changelog scan).
        NoSuchSnapshotError: An unknown snapshot, or a range reaching into expired history.
    """
    if start_snapshot_id is not None and start_timestamp is not None:
        msg = "give start_snapshot_id or start_timestamp, not both"
        raise InvalidArgumentError(msg)
    if end_snapshot_id is not None and end_timestamp is not None:
        msg = "give end_snapshot_id or end_timestamp, not both"
        raise InvalidArgumentError(msg)
    if start_timestamp is not None and end_timestamp is not None and start_timestamp >= end_timestamp:
        # as Java's changelog scan (start-timestamp must be before end-timestamp), and as
        # reversed snapshot ids are refused: not an empty feed
        msg = (
            f"the start timestamp {iso_time(start_timestamp)} ({start_timestamp} ms) is not before the end "
            f"timestamp {iso_time(end_timestamp)} ({end_timestamp} ms): the feed runs from start "
            "(exclusive) to end (inclusive)"
        )
        raise InvalidArgumentError(msg)
    current = metadata.current_snapshot()
    if end_snapshot_id is not None:
        end = metadata.snapshot_by_id(end_snapshot_id)
        if end is None:
            msg = f"snapshot {end_snapshot_id} does not exist (never, or expired)"
            raise NoSuchSnapshotError(msg)
    elif end_timestamp is not None and current is not None:
        chain, _ = _ancestry(metadata, io, current)
        end = next((s for s in chain if s.timestamp_ms <= end_timestamp), None)
        if end is None:
            return []
    else:
        end = current
    if end is None:  # an empty table
        if start_snapshot_id is not None:
            msg = f"snapshot {start_snapshot_id} is not an ancestor of the table's current state (empty)"
            raise InvalidArgumentError(msg)
        return []
    chain, truncated = _ancestry(metadata, io, end)
    if start_snapshot_id is not None:
        index = next((i for i, s in enumerate(chain) if s.snapshot_id == start_snapshot_id), None)
        if index is None:
            start = metadata.snapshot_by_id(start_snapshot_id)
            if truncated and (start is None or start.timestamp_ms < chain[-1].timestamp_ms):
                raise _expired(f"since snapshot {start_snapshot_id}", chain[-1])
            if start is None:
                msg = f"snapshot {start_snapshot_id} does not exist"
                raise NoSuchSnapshotError(msg)
            msg = f"snapshot {start_snapshot_id} is not an ancestor of snapshot {end.snapshot_id}"
            raise InvalidArgumentError(msg)
        newest_first = chain[:index]
    elif start_timestamp is not None:
        newest_first = [s for s in chain if s.timestamp_ms > start_timestamp]
        if len(newest_first) == len(chain) and truncated:
            raise _expired(f"since timestamp {start_timestamp}", chain[-1])
    else:
        if truncated:
            raise _expired("since the table's first snapshot", chain[-1])
        newest_first = chain
    return newest_first[::-1]


def _planned(
    metadata: TableMetadata,
    io: FileIO,
    snapshot: Snapshot | None,
    schema: Schema,
    row_filter: BooleanExpression,
    case_sensitive: bool,
) -> dict[str, PlannedFile]:
    files = plan_files(
        metadata, io, snapshot, schema=schema, row_filter=row_filter, case_sensitive=case_sensitive
    )
    return {p.data_file.path: p for p in files}


def _delete_set(deletes: tuple[DeleteFileRef, ...]) -> frozenset[tuple[str, int | None]]:
    return frozenset((d.path, d.content_offset) for d in deletes)


def plan_changes(
    metadata: TableMetadata,
    io: FileIO,
    snapshots: list[Snapshot],
    *,
    schema: Schema,
    row_filter: BooleanExpression,
    case_sensitive: bool = True,
) -> list[SnapshotChange]:
    """Per snapshot of the range (oldest first), the data files whose live rows changed.

    Each snapshot's state is the scan plan of that snapshot (pruned by ``row_filter``, which
    prunes a file alike in both states), compared with its parent's plan.
    """
    out: list[SnapshotChange] = []
    previous: tuple[int | None, dict[str, PlannedFile]] | None = None
    for ordinal, snapshot in enumerate(snapshots):
        operation = _operation(snapshot)
        parent_id = snapshot.parent_snapshot_id
        if operation == REPLACE:
            out.append(SnapshotChange(snapshot.snapshot_id, ordinal, operation))
            previous = None
            continue
        if previous is not None and previous[0] == parent_id:
            before = previous[1]
        else:
            parent = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
            if parent_id is not None and parent is None:  # snapshot_range checked the chain
                msg = f"parent {parent_id} of snapshot {snapshot.snapshot_id} was expired"
                raise NoSuchSnapshotError(msg)
            before = _planned(metadata, io, parent, schema, row_filter, case_sensitive)
        after = _planned(metadata, io, snapshot, schema, row_filter, case_sensitive)
        changes = []
        for path in sorted(before.keys() | after.keys()):
            b, a = before.get(path), after.get(path)
            if b is not None and a is not None and _delete_set(b.delete_files) == _delete_set(a.delete_files):
                continue
            changes.append(
                FileChange(
                    (a or b).data_file,  # type: ignore[union-attr]
                    None if b is None else b.delete_files,
                    None if a is None else a.delete_files,
                )
            )
        out.append(SnapshotChange(snapshot.snapshot_id, ordinal, operation, tuple(changes)))
        previous = (snapshot.snapshot_id, after)
    return out


@dataclass
class ChangeJob:
    """A change feed as a plan: the range, the read options and (lazily) each snapshot's files."""

    metadata: TableMetadata
    io: FileIO
    snapshots: list[Snapshot]
    options: ReadOptions
    """The projection read when a snapshot has only deletes or only inserts."""
    residual: str | None
    output_names: tuple[str, ...]
    """The table columns the feed yields (before the change columns)."""
    key: tuple[str, ...] | None
    net: bool

    @cached_property
    def planned(self) -> list[SnapshotChange]:
        return plan_changes(
            self.metadata,
            self.io,
            self.snapshots,
            schema=self.options.schema,
            row_filter=self.options.row_filter,
            case_sensitive=self.options.case_sensitive,
        )

    @property
    def full_options(self) -> ReadOptions:
        """Every column: carry-overs compare whole rows, updates need the key."""
        return replace(self.options, projected_schema=self.options.schema)

    @property
    def arrow_schema(self) -> pa.Schema:
        read = self.options.arrow_schema
        return change_schema(pa.schema([read.field(n) for n in self.output_names]))


def prepare_changes(
    metadata: TableMetadata,
    io: FileIO,
    snapshots: list[Snapshot],
    *,
    row_filter: str | BooleanExpression | None = None,
    selected_fields: Sequence[str] = ("*",),
    net: bool = False,
    key: Sequence[str] | None = None,
    case_sensitive: bool = True,
) -> ChangeJob:
    """Resolve the filter and the projection of a change feed (the current schema) over
    ``snapshots`` (:func:`snapshot_range`).

    Raises:
        InvalidArgumentError: Bad filter or column; an unknown key column.
    """
    fields = [f for f in selected_fields if not f.startswith("_")] or ["*"]
    if len(fields) != len(selected_fields):
        msg = f"a change feed has no metadata columns: {[f for f in selected_fields if f.startswith('_')]}"
        raise InvalidArgumentError(msg)
    scan = prepare_scan(
        metadata, io, row_filter=row_filter, selected_fields=fields, case_sensitive=case_sensitive
    )
    schema = scan.options.schema
    names = scan.output_names or tuple(scan.options.arrow_schema.names)
    if key is not None:
        keys = tuple(key)
        known = {f.name for f in schema.fields}
        if unknown := [k for k in keys if k not in known]:
            msg = f"unknown key column(s) {unknown}; the table's columns are {sorted(known)}"
            raise InvalidArgumentError(msg)
    else:  # the identifier fields, in field-id order
        keys = tuple(sorted(schema.identifier_field_names(), key=lambda n: schema.find_field(n).field_id))
    return ChangeJob(metadata, io, snapshots, scan.options, scan.residual, tuple(names), keys or None, net)


Runner = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]
"""Runs a function over items (in parallel), results in item order."""


def change_batches(job: ChangeJob, run: Runner) -> Iterator[pa.RecordBatch]:
    """The feed's rows, snapshot after snapshot (ordinal order), in ``job.arrow_schema``.

    Within a snapshot: deletes, then update pairs (before, after), then inserts. With ``net``,
    every snapshot's changes are held in memory and netted at the end.
    """
    out_schema = job.arrow_schema
    compare = [f.name for f in job.options.schema.fields]
    netted: list[pa.Table] = []
    for step in job.planned:
        rows = snapshot_changes(
            job.io, step, run, options=job.options, residual=job.residual, key=job.key, every_column=job.net
        )
        if rows is None:
            continue
        if job.net:
            netted.append(rows)
            continue
        yield from rows.select(out_schema.names).cast(out_schema).to_batches()
    if job.net and netted:
        rows = net_changes(pa.concat_tables(netted), compare, job.key)
        yield from rows.select(out_schema.names).cast(out_schema).to_batches()


def snapshot_changes(
    io: FileIO,
    step: SnapshotChange,
    run: Runner,
    *,
    options: ReadOptions,
    residual: str | None,
    key: tuple[str, ...] | None,
    every_column: bool = False,
) -> pa.Table | None:
    """One snapshot's change rows (of ``step.files``: all of its changed files, or any subset
    that cannot both delete and insert rows), or None when none changed.

    Columns: ``options``' projection (every column when the snapshot both deletes and inserts,
    or with ``every_column``), then the change columns. Picklable arguments only: Spark
    executors run it for one snapshot (the streaming source).
    """
    sets: list[RowSet] = [s for group in run(lambda c: row_sets(io, c, options), step.files) for s in group]
    if not sets:
        return None
    both = any(s.kind == DELETE for s in sets) and any(s.kind == INSERT for s in sets)
    opts = replace(options, projected_schema=options.schema) if both or every_column else options
    deletes, inserts = read_snapshot(io, sets, opts, run)
    if residual is not None:
        deletes, inserts = _where(deletes, residual), _where(inserts, residual)
    return snapshot_rows(
        deletes,
        inserts,
        snapshot_id=step.snapshot_id,
        ordinal=step.ordinal,
        compare=[f.name for f in options.schema.fields] if both else (),
        key=key,
    )


def _where(table: pa.Table, condition: str) -> pa.Table:
    if not table.num_rows:
        return table
    from icemor.expr.duck import filter_batches  # noqa: PLC0415 - cost: duckdb ~100 ms

    batches = list(filter_batches(iter(table.to_batches()), condition, table.schema.names))
    return pa.Table.from_batches(batches, schema=table.schema)
