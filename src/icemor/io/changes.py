"""Read a change feed: the changed rows of one snapshot's files, carry-overs removed, updates paired.

A :class:`FileChange` names a data file and the delete files that apply to it before and after
the snapshot. Its changed rows are found with icemor's reader:

* an added file: its live rows after (every delete rule applied) are inserts;
* a removed file: its live rows before are deletes;
* a kept file: the positions deleted before and after are compared. Where only position
  deletes and DVs apply, these come from the delete files alone; with equality deletes the
  reader marks each row (``include_deleted``, key columns only). Then only the rows at the
  changed positions are taken (positions found by binary search, counted when nothing filters).

Per snapshot, a deleted row and an inserted row with equal values in every column cancel
(*carry-over*: a row rewritten unchanged, Iceberg Java's ``RemoveCarryoverIterator``). With a
key, a snapshot's one deleted and one inserted row of a key become ``UPDATE_BEFORE`` and
``UPDATE_AFTER`` (Java's ``compute_updates``). Both compare rows as Python tuples: their cost is
per changed row of snapshots that both delete and insert, never per table row. NaN equals
nothing there (Python's float rule), so a NaN row rewritten unchanged stays a delete and an insert.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.schema import Schema

from icemor.io.deletes import deleted_positions
from icemor.io.reader import read_task
from icemor.spec.files import FileContent
from icemor.spec.metadata_columns import DELETED, ROW_POSITION
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO

    from icemor.io.reader import ReadOptions
    from icemor.spec.files import DataFileRef, DeleteFileRef

__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_ORDINAL",
    "CHANGE_TYPE",
    "COMMIT_SNAPSHOT_ID",
    "DELETE",
    "INSERT",
    "UPDATE_AFTER",
    "UPDATE_BEFORE",
    "FileChange",
    "RowSet",
    "change_schema",
    "net_changes",
    "read_rows",
    "read_snapshot",
    "row_sets",
    "snapshot_rows",
]

# the values of Iceberg Java's ChangelogOperation, as its changelog view shows them
INSERT = "INSERT"
DELETE = "DELETE"
UPDATE_BEFORE = "UPDATE_BEFORE"
UPDATE_AFTER = "UPDATE_AFTER"
CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
CHANGE_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID)
"""Iceberg Java's changelog view's columns, in its order, after the table's columns."""


@dataclass(frozen=True, slots=True)
class FileChange:
    """One data file whose rows changed in a snapshot: the delete files that apply before and after.

    ``before`` is None when the file is not in the parent (added), ``after`` None when the
    snapshot removed it. Picklable: Spark executors read them.
    """

    data_file: DataFileRef
    before: tuple[DeleteFileRef, ...] | None
    after: tuple[DeleteFileRef, ...] | None


@dataclass(frozen=True, slots=True)
class RowSet:
    """Rows of one data file that changed: read with ``deletes`` applied, keep ``positions`` only.

    ``positions`` None keeps every live row. Picklable (Spark executors read them).
    """

    data_file: DataFileRef
    deletes: tuple[DeleteFileRef, ...]
    positions: npt.NDArray[np.int64] | None
    kind: str  # INSERT or DELETE


def change_schema(read_schema: pa.Schema) -> pa.Schema:
    return (
        read_schema.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
        .append(pa.field(CHANGE_ORDINAL, pa.int32(), nullable=False))
        .append(pa.field(COMMIT_SNAPSHOT_ID, pa.int64(), nullable=False))
    )


def _has_equality(deletes: tuple[DeleteFileRef, ...]) -> bool:
    return any(d.content == FileContent.EQUALITY_DELETES for d in deletes)


def _whole(data_file: DataFileRef, deletes: tuple[DeleteFileRef, ...]) -> FileScanTask:
    return FileScanTask(data_file, deletes, 0, data_file.file_size_in_bytes)


def _deleted_at(
    io: FileIO, data_file: DataFileRef, deletes: tuple[DeleteFileRef, ...], opts: ReadOptions
) -> npt.NDArray[np.int64]:
    """Sorted positions of ``data_file`` that ``deletes`` remove (every delete kind)."""
    if not _has_equality(deletes):
        return deleted_positions(io, data_file.path, deletes)
    # the reader's own verdict, reading the equality keys only (and caching it)
    marks = replace(
        opts,
        projected_schema=Schema(),
        row_filter=AlwaysTrue(),
        file_column=False,
        pos_column=True,
        include_deleted=True,
    )
    parts = []
    for batch in read_task(io, _whole(data_file, deletes), marks):
        pos = batch.column(ROW_POSITION.name).to_numpy()
        parts.append(pos[batch.column(DELETED.name).to_numpy(zero_copy_only=False)])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def row_sets(io: FileIO, change: FileChange, opts: ReadOptions) -> list[RowSet]:
    """What to read of one changed file: its inserted and its deleted rows."""
    f = change.data_file
    if change.before is None:
        return [RowSet(f, change.after or (), None, INSERT)]
    if change.after is None:
        return [RowSet(f, change.before, None, DELETE)]
    before = _deleted_at(io, f, change.before, opts)
    after = _deleted_at(io, f, change.after, opts)
    out = []
    gone = np.setdiff1d(after, before, assume_unique=True)
    if gone.size:
        out.append(RowSet(f, (), gone, DELETE))
    back = np.setdiff1d(before, after, assume_unique=True)  # a delete file dropped: rows live again
    if back.size:
        out.append(RowSet(f, (), back, INSERT))
    return out


def read_rows(io: FileIO, rows: RowSet, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The rows of ``rows`` in ``opts``' projection (whose ``_pos`` is added and dropped here)."""
    if rows.positions is None:
        yield from read_task(io, _whole(rows.data_file, rows.deletes), opts)
        return
    # without deletes or a filter every row comes, in order: positions are counted, not read
    counted = not rows.deletes and isinstance(opts.row_filter, AlwaysTrue)
    read = opts if opts.pos_column or counted else replace(opts, pos_column=True)
    names = opts.arrow_schema.names
    wanted = rows.positions
    first = 0
    for batch in read_task(io, _whole(rows.data_file, rows.deletes), read):
        n = batch.num_rows
        if counted:
            lo, hi = np.searchsorted(wanted, [first, first + n])
            hit = wanted[lo:hi] - first
            first += n
        else:
            # both sorted: the wanted positions inside this batch's range, by binary search
            # (np.isin sorts both sides again: ~10x slower on 1 M-row batches)
            pos = batch.column(ROW_POSITION.name).to_numpy()
            if not pos.size:
                continue
            lo, hi = np.searchsorted(wanted, [pos[0], pos[-1] + 1])
            candidates = wanted[lo:hi]
            at = np.searchsorted(pos, candidates)
            hit = at[pos[np.minimum(at, len(pos) - 1)] == candidates]
        if not hit.size:
            continue
        out = batch.take(pa.array(hit))
        yield out if out.schema.names == names else out.select(names)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


def _row_keys(table: pa.Table, names: Sequence[str]) -> list[tuple[Any, ...]]:
    columns = [table.column(n).to_pylist() for n in names]
    return [tuple(_hashable(v) for v in row) for row in zip(*columns, strict=True)]


def _cancel_pairs(deletes: pa.Table, inserts: pa.Table, names: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """Drop equal (delete, insert) pairs, compared on ``names``, as a multiset."""
    if not deletes.num_rows or not inserts.num_rows:
        return deletes, inserts
    inserted = Counter(_row_keys(inserts, names))
    drop_delete = []
    for i, k in enumerate(_row_keys(deletes, names)):
        if inserted[k] > 0:
            inserted[k] -= 1
            drop_delete.append(i)
    if not drop_delete:
        return deletes, inserts
    deleted = Counter(_row_keys(deletes.take(drop_delete), names))
    drop_insert = []
    for i, k in enumerate(_row_keys(inserts, names)):
        if deleted[k] > 0:
            deleted[k] -= 1
            drop_insert.append(i)
    return _without(deletes, drop_delete), _without(inserts, drop_insert)


def _without(table: pa.Table, rows: list[int]) -> pa.Table:
    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = False
    return table.filter(pa.array(keep))


def _typed(table: pa.Table, kind: str | pa.Array) -> pa.Table:
    column = kind if isinstance(kind, pa.Array) else pa.repeat(pa.scalar(kind, pa.string()), table.num_rows)
    return table.append_column(pa.field(CHANGE_TYPE, pa.string(), nullable=False), column)


def _pair_updates(
    deletes: pa.Table, inserts: pa.Table, key: Sequence[str]
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(deletes, update pairs interleaved before/after, inserts); a key with exactly one delete
    and one insert is an update."""
    by_key_d: dict[Any, list[int]] = defaultdict(list)
    by_key_i: dict[Any, list[int]] = defaultdict(list)
    for i, k in enumerate(_row_keys(deletes, key)):
        by_key_d[k].append(i)
    for i, k in enumerate(_row_keys(inserts, key)):
        by_key_i[k].append(i)
    pairs = [
        (d[0], by_key_i[k][0]) for k, d in by_key_d.items() if len(d) == 1 and len(by_key_i.get(k, ())) == 1
    ]
    if not pairs:
        return _typed(deletes, DELETE), _typed(deletes.slice(0, 0), DELETE), _typed(inserts, INSERT)
    before = deletes.take([d for d, _ in pairs])
    after = inserts.take([i for _, i in pairs])
    interleaved = pa.concat_tables([before, after]).take(
        np.column_stack([np.arange(len(pairs)), np.arange(len(pairs)) + len(pairs)]).ravel()
    )
    kinds = pa.array([UPDATE_BEFORE, UPDATE_AFTER] * len(pairs), pa.string())
    return (
        _typed(_without(deletes, [d for d, _ in pairs]), DELETE),
        _typed(interleaved, kinds),
        _typed(_without(inserts, [i for _, i in pairs]), INSERT),
    )


def snapshot_rows(
    deletes: pa.Table,
    inserts: pa.Table,
    *,
    snapshot_id: int,
    ordinal: int,
    compare: Sequence[str],
    key: Sequence[str] | None,
) -> pa.Table:
    """One snapshot's changes: carry-overs removed (compared on ``compare``), updates paired on
    ``key``; deletes first, then update pairs (before, after), then inserts."""
    deletes, inserts = _cancel_pairs(deletes, inserts, compare)
    if key and deletes.num_rows and inserts.num_rows:
        parts: tuple[pa.Table, ...] = _pair_updates(deletes, inserts, key)
    else:
        parts = (_typed(deletes, DELETE), _typed(inserts, INSERT))
    table = pa.concat_tables(parts)
    n = table.num_rows
    table = table.append_column(
        pa.field(CHANGE_ORDINAL, pa.int32(), nullable=False), pa.array(np.full(n, ordinal, np.int32))
    )
    return table.append_column(
        pa.field(COMMIT_SNAPSHOT_ID, pa.int64(), nullable=False), pa.array(np.full(n, snapshot_id, np.int64))
    )


def net_changes(changes: pa.Table, compare: Sequence[str], key: Sequence[str] | None) -> pa.Table:
    """The net effect of a range's changes, by row values (identities change under compaction).

    For each distinct row (equal in ``compare``), inserts minus deletes over the range: the last
    inserts or the first deletes that remain, each with its own snapshot and ordinal. Then, with
    ``key``, a key's one remaining delete and one remaining insert become an update pair.
    """
    if not changes.num_rows:
        return changes
    kinds = changes.column(CHANGE_TYPE).to_pylist()
    is_insert = [k in (INSERT, UPDATE_AFTER) for k in kinds]
    balance: Counter[tuple[Any, ...]] = Counter()
    keys = _row_keys(changes, compare)
    for k, ins in zip(keys, is_insert, strict=True):
        balance[k] += 1 if ins else -1
    # inserts that remain are the last ones, deletes the first ones
    keep = np.zeros(changes.num_rows, dtype=bool)
    seen: Counter[tuple[Any, ...]] = Counter()
    for i in range(changes.num_rows - 1, -1, -1):
        k = keys[i]
        if is_insert[i] and balance[k] > 0 and seen[k] < balance[k]:
            keep[i] = True
            seen[k] += 1
    seen.clear()
    for i in range(changes.num_rows):
        k = keys[i]
        if not is_insert[i] and balance[k] < 0 and seen[k] < -balance[k]:
            keep[i] = True
            seen[k] += 1
    kept = changes.filter(pa.array(keep))
    ins_mask = np.array(
        [k in (INSERT, UPDATE_AFTER) for k in kept.column(CHANGE_TYPE).to_pylist()], dtype=bool
    )
    deletes = kept.filter(pa.array(~ins_mask)).drop_columns([CHANGE_TYPE])
    inserts = kept.filter(pa.array(ins_mask)).drop_columns([CHANGE_TYPE])
    if key and deletes.num_rows and inserts.num_rows:
        parts: tuple[pa.Table, ...] = _pair_updates(deletes, inserts, key)
    else:
        parts = (_typed(deletes, DELETE), _typed(inserts, INSERT))
    names = changes.schema.names
    return pa.concat_tables([p.select(names) for p in parts])


def read_snapshot(
    io: FileIO,
    sets: Sequence[RowSet],
    opts: ReadOptions,
    run: Callable[[Callable[[RowSet], pa.Table], Sequence[RowSet]], list[pa.Table]],
) -> tuple[pa.Table, pa.Table]:
    """(deleted rows, inserted rows) of one snapshot's row sets, read in ``opts``' projection."""
    schema = opts.arrow_schema
    if len(sets) >= 2 * (os.cpu_count() or 1):
        # a file per core keeps the cores busy: decoding a file's columns in parallel on Arrow's
        # pool only adds hand-offs (as the scan's local engine)
        opts = replace(opts, decode_threads=False)

    def one(rows: RowSet) -> pa.Table:
        return pa.Table.from_batches(list(read_rows(io, rows, opts)), schema=schema)

    tables = run(one, sets)
    deletes = [t for t, s in zip(tables, sets, strict=True) if s.kind == DELETE]
    inserts = [t for t, s in zip(tables, sets, strict=True) if s.kind == INSERT]
    empty = schema.empty_table()
    return (
        pa.concat_tables(deletes) if deletes else empty,
        pa.concat_tables(inserts) if inserts else empty,
    )
