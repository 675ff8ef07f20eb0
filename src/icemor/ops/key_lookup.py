"""Position-mode CDC: resolve a batch's keys to the positions of their live rows, at write time.

For the keys a batch updates or deletes, :func:`find_positions` returns, per data file of the
snapshot the batch started from, the positions of the rows holding those keys that are still
live there; DELETE's per-file units (:mod:`icemor.ops.units`) then write them as deletion
vectors (v3) or file-scoped position deletes (v2). What narrows the work, per data file:

1. **partition**: when every field of the file's spec is a transform of key columns, only the
   keys whose partition is the file's can be in it;
2. **column statistics**: a key outside the file's key bounds (lower/upper, NULL counts, from
   the manifest) cannot be in it (integer-like and string keys; other types are not pruned);
3. **the key index** (:mod:`icemor.io.key_index`): the remaining keys are looked up in the
   file's sorted keys (two binary searches per key); the file itself is not read;
4. **what is already deleted**: positions its position deletes and DVs remove are dropped;
   where equality deletes apply (older equality-mode batches, Flink), a row whose key they
   delete is dropped, checked on the keys found (equality ids on the key columns) or, for
   equality deletes on other columns, by the read path's verdict for the file.

:class:`KeyConflicts` is the commit's validation: a concurrent commit that added a data file
holding a row with one of the batch's updated or deleted keys is a conflict (an equality delete
would have removed that row; positions found before it existed cannot).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    DateType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from icemor.exceptions import CommitConflictError
from icemor.io.columns import column_by_path
from icemor.io.deletes import deleted_positions, equality_delete_sets
from icemor.io.equality import int_key
from icemor.io.key_index import IndexedFile, MergedKeyIndex, key_index
from icemor.ops.units import dead_positions
from icemor.planning.manifest_reader import read_manifest_entries, read_manifest_list
from icemor.spec.files import FileContent
from icemor.spec.identifiers import location_within
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.types import IcebergType

    from icemor.io.reader import ReadOptions
    from icemor.spec.tasks import PlannedFile

__all__ = ["KeyConflicts", "KeyLookup", "LookupResult", "find_positions", "partition_rows", "plan_lookup"]

_INT_TYPES = (IntegerType, LongType, DateType, TimeType, TimestampType, TimestamptzType)


@dataclass(frozen=True)
class _FileKeys:
    """A data file and what prunes the keys it may hold: partition and key-column bounds."""

    indexed: IndexedFile
    spec_id: int
    partition: tuple[Any, ...]
    lower: tuple[Any, ...]
    """Per key column: the lower bound (int or str), or None where unknown or not prunable."""
    upper: tuple[Any, ...]
    nulls: tuple[bool, ...]
    """Per key column: whether the file may hold a NULL there."""


@dataclass(frozen=True)
class KeyLookup:
    """Everything a lookup needs (picklable for Spark executors): the live data files of the
    batch's start snapshot with their delete files, and the key's fields."""

    files: tuple[tuple[PlannedFile, _FileKeys], ...]
    key_names: tuple[str, ...]
    key_ids: tuple[int, ...]
    schema: Schema
    specs: Mapping[int, PartitionSpec]
    field_types: Mapping[int, IcebergType]
    field_parents: Mapping[int, tuple[int, ...]]
    name_mapping: NameMapping | None
    options: ReadOptions
    """The start snapshot's read options (no columns): the verdict of equality deletes on
    other columns than the key."""
    location: str = ""
    """The table's location: the scope of the process's merged index of its small files."""


@dataclass
class LookupResult:
    """Live positions per data file path, and what the lookup cost."""

    positions: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    files_searched: int = 0
    seconds: float = 0.0


def plan_lookup(
    metadata: TableMetadata,
    io: FileIO,
    planned: Sequence[PlannedFile],
    *,
    key_names: Sequence[str],
    key_ids: Sequence[int],
    options: ReadOptions,
) -> KeyLookup:
    """The lookup over ``planned`` (the live files of the start snapshot), with their key bounds
    from the snapshot's manifests (decoded once per process)."""
    snapshot = metadata.current_snapshot()
    entries: dict[str, tuple[DataFile, int]] = {}
    if snapshot is not None and planned:
        for m in read_manifest_list(io, snapshot):
            if m.content == ManifestContent.DATA:
                for e in read_manifest_entries(io, m):
                    entries[e.data_file.file_path] = (e.data_file, e.spec_id)
    schema = metadata.schema()
    specs = metadata.specs()
    field_types = options.field_types
    files = []
    for p in planned:
        found = entries.get(p.data_file.path)
        keys = (
            _file_keys(found[0], found[1], key_ids, field_types, specs, metadata.location)
            if found is not None
            else _unknown(p, key_ids, metadata.location)
        )
        files.append((p, keys))
    return KeyLookup(
        files=tuple(files),
        key_names=tuple(key_names),
        key_ids=tuple(key_ids),
        schema=schema,
        specs=specs,
        field_types=field_types,
        field_parents=options.field_parents,
        name_mapping=options.name_mapping,
        options=options,
        location=metadata.location,
    )


def _unknown(p: PlannedFile, key_ids: Sequence[int], location: str) -> _FileKeys:
    f = p.data_file
    none = (None,) * len(key_ids)
    return _FileKeys(
        IndexedFile(f.path, f.file_size_in_bytes, f.record_count, {}, _inside(f.path, location)),
        f.spec_id,
        f.partition,
        none,
        none,
        (True,) * len(key_ids),
    )


def _file_keys(
    f: DataFile,
    spec_id: int,
    key_ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    specs: Mapping[int, PartitionSpec],
    location: str,
) -> _FileKeys:
    partition = tuple(f.partition[i] for i in range(len(f.partition))) if f.partition is not None else ()
    lower, upper, nulls = [], [], []
    for fid in key_ids:
        t = field_types[fid]
        lo = (f.lower_bounds or {}).get(fid)
        hi = (f.upper_bounds or {}).get(fid)
        usable = isinstance(t, (*_INT_TYPES, StringType)) and lo is not None and hi is not None
        lower.append(from_bytes(t, lo) if usable else None)  # type: ignore[arg-type]
        upper.append(from_bytes(t, hi) if usable else None)  # type: ignore[arg-type]
        count = (f.null_value_counts or {}).get(fid)
        nulls.append(count is None or count > 0)
    constants = {}
    spec = specs.get(spec_id)
    if spec is not None:
        for i, pf in enumerate(spec.fields):
            if isinstance(pf.transform, IdentityTransform) and pf.source_id in key_ids and i < len(partition):
                constants[pf.source_id] = partition[i]
    return _FileKeys(
        IndexedFile(
            f.file_path, f.file_size_in_bytes, f.record_count, constants, _inside(f.file_path, location)
        ),
        spec_id,
        partition,
        tuple(lower),
        tuple(upper),
        tuple(nulls),
    )


@functools.lru_cache(maxsize=1 << 16)
def _inside(path: str, location: str) -> bool:
    """Whether ``path`` lies under the table's location (where its key-index sidecar may go).
    Remembered: every batch asks it of every live file (two URL parses each, ~3 ms a batch)."""
    return location_within(path, [location]) is not None


# ------------------------------------------------------------------------------------ pruning


def partition_rows(
    spec: PartitionSpec, schema: Schema, rows: pa.Table
) -> list[tuple[tuple[Any, ...], npt.NDArray[np.int64]]]:
    """The rows of each partition of ``spec``: (partition tuple, row indices in order)."""
    n = rows.num_rows
    if spec.is_unpartitioned() or n == 0:
        return [((), np.arange(n, dtype=np.int64))] if n else []
    columns = {}
    for i, pf in enumerate(spec.fields):
        source = schema.find_field(pf.source_id)
        name = schema.find_column_name(pf.source_id)
        assert name is not None
        values = column_by_path(rows, name)
        columns[f"p{i}"] = pf.transform.pyarrow_transform(source.field_type)(values)
    parts = pa.table(columns)
    order = pc.sort_indices(parts, sort_keys=[(c, "ascending") for c in columns])
    order_np = order.to_numpy().astype(np.int64)
    sorted_parts = parts.take(order)
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for c in sorted_parts.columns:
        new[1:] |= ~same_as_previous(c.combine_chunks())[1:]
    starts = np.flatnonzero(new)
    out = []
    for s, e in zip(starts, [*starts[1:], n], strict=True):
        values = [
            PartitionFieldValue(pf, sorted_parts.column(i)[int(s)].as_py())
            for i, pf in enumerate(spec.fields)
        ]
        record = PartitionKey(field_values=values, partition_spec=spec, schema=schema).partition
        out.append((tuple(record[i] for i in range(len(record))), order_np[s:e]))
    return out


def same_as_previous(arr: pa.Array) -> npt.NDArray[np.bool_]:
    """Whether each value equals the one before it, NULL-safe and NaN-safe (the first: False)."""
    n = len(arr)
    out = np.zeros(n, dtype=bool)
    if n < 2:
        return out
    a, b = arr.slice(1), arr.slice(0, n - 1)
    eq = pc.fill_null(pc.equal(a, b), False)
    if arr.null_count:
        eq = pc.or_(eq, pc.and_(pc.is_null(a), pc.is_null(b)))
    if pa.types.is_floating(arr.type):
        eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    out[1:] = eq.to_numpy(zero_copy_only=False)
    return out


class _Keys:
    """The batch's keys, cast to the table's types, with what pruning needs computed once."""

    def __init__(self, lookup: KeyLookup, keys: pa.Table) -> None:
        self.n = keys.num_rows
        self.columns: list[pa.Array] = []
        for name, fid in zip(lookup.key_names, lookup.key_ids, strict=True):
            col = keys.column(name).combine_chunks()
            target = schema_to_pyarrow(lookup.field_types[fid], include_field_ids=False)
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            self.columns.append(col if col.type == target else col.cast(target))
        self.table = pa.table(dict(zip(lookup.key_names, self.columns, strict=True)))
        self._lookup = lookup
        # one integer-like key without NULLs: sorted once, each file's keys are then a slice
        self.sorted: npt.NDArray[np.int64] | None = None
        self.order: npt.NDArray[np.int64] | None = None
        ints = int_key(self.columns[0]) if len(self.columns) == 1 else None
        if ints is not None:
            self.order = np.argsort(ints, kind="stable").astype(np.int64)
            self.sorted = ints[self.order]
            self.rank = np.empty(self.n, dtype=np.int64)  # each row's place in key order
            self.rank[self.order] = np.arange(self.n, dtype=np.int64)
        self._ints: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]] = {}
        self._by_partition: dict[int, dict[str, npt.NDArray[np.int64]] | None] = {}

    def _int_values(self, i: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Column ``i`` as int64 (NULLs as 0) and its validity."""
        if i not in self._ints:
            col = self.columns[i]
            valid = col.is_valid().to_numpy(zero_copy_only=False)
            filled = col.fill_null(0) if col.null_count else col
            ints = (
                filled.cast(pa.int64())
                if pa.types.is_integer(filled.type)
                else filled.view(pa.int64() if filled.type.bit_width == 64 else pa.int32()).cast(pa.int64())
            )
            self._ints[i] = (np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64), valid)
        return self._ints[i]

    def partition_of(self, spec_id: int, partition: tuple[Any, ...]) -> npt.NDArray[np.int64] | None:
        """The rows whose keys map to ``partition`` of spec ``spec_id``; None: every row may (the
        spec has fields that are not transforms of the key)."""
        if spec_id not in self._by_partition:
            self._by_partition[spec_id] = self._group(spec_id)
        groups = self._by_partition[spec_id]
        if groups is None:
            return None
        path = _partition_path(self._lookup, spec_id, partition)
        if path is None:
            return None
        return groups.get(path, np.zeros(0, dtype=np.int64))

    def _group(self, spec_id: int) -> dict[str, npt.NDArray[np.int64]] | None:
        spec = self._lookup.specs.get(spec_id)
        if spec is None or spec.is_unpartitioned():
            return None
        if not all(pf.source_id in self._lookup.key_ids for pf in spec.fields):
            return None
        try:
            out = {}
            for partition, rows in partition_rows(spec, self._lookup.schema, self.table):
                path = _partition_path(self._lookup, spec_id, partition)
                if path is None:
                    return None
                out[path] = rows
        except (ValueError, TypeError, pa.ArrowException):
            return None  # a transform this path cannot compute: no partition pruning
        return out

    def within(self, f: _FileKeys, rows: npt.NDArray[np.int64] | None) -> npt.NDArray[np.int64]:
        """Of ``rows`` (None: all), those whose every key column lies within ``f``'s bounds."""
        if self.sorted is not None and self.order is not None and isinstance(f.lower[0], int):
            # sorted keys: the ones within [lower, upper] are one slice (two binary searches)
            a, b = (
                np.searchsorted(self.sorted, [f.lower[0], f.upper[0]], side="left")[0],
                np.searchsorted(self.sorted, f.upper[0], side="right"),
            )
            inside = self.order[a:b]
            return inside if rows is None else np.intersect1d(inside, rows)
        keep = np.ones(self.n, dtype=bool) if rows is None else np.zeros(self.n, dtype=bool)
        if rows is not None:
            keep[rows] = True
        for i in range(len(self._lookup.key_ids)):
            lo, hi = f.lower[i], f.upper[i]
            col = self.columns[i]
            if lo is not None and hi is not None:
                if isinstance(lo, int):
                    ints, valid = self._int_values(i)
                    inside = (ints >= lo) & (ints <= hi) & valid
                else:
                    both = pc.and_(pc.greater_equal(col, pa.scalar(lo)), pc.less_equal(col, pa.scalar(hi)))
                    inside = pc.fill_null(both, False).to_numpy(zero_copy_only=False)
                if f.nulls[i] and col.null_count:
                    inside = inside | ~col.is_valid().to_numpy(zero_copy_only=False)
                keep &= inside
            elif not f.nulls[i] and col.null_count:
                keep &= col.is_valid().to_numpy(zero_copy_only=False)
        return np.flatnonzero(keep).astype(np.int64)


def _partition_path(lookup: KeyLookup, spec_id: int, partition: tuple[Any, ...]) -> str | None:
    """A partition's text as Iceberg lays it out: the same for the keys' and the file's values."""
    spec = lookup.specs[spec_id]
    try:
        return spec.partition_to_path(Record(*partition), lookup.schema)
    except (ValueError, TypeError, AttributeError):
        return None


def _candidates(keys: _Keys, files: Sequence[_FileKeys]) -> list[tuple[int, npt.NDArray[np.int64]]]:
    """(index into ``files``, key rows that may be in it) for each file some key may be in."""
    out = []
    for n, f in enumerate(files):
        rows = keys.partition_of(f.spec_id, f.partition)
        if rows is not None and not len(rows):
            continue
        rows = keys.within(f, rows)
        if len(rows):
            out.append((n, rows))
    return out


# ------------------------------------------------------------------------------------- lookup


def find_positions(io: FileIO, lookup: KeyLookup, keys: pa.Table) -> LookupResult:
    """The live positions, per data file, of the rows whose key is a row of ``keys``.

    Raises:
        MissingFileError, CorruptFileError: A data or delete file cannot be read.
    """
    started = time.monotonic()
    result = LookupResult()
    if not keys.num_rows or not lookup.files:
        return result
    batch = _Keys(lookup, keys)
    files = [k for _, k in lookup.files]
    candidates = _candidates(batch, files)
    if batch.sorted is not None and batch.order is not None:
        candidates = _search_merged(io, lookup, batch, candidates, result)
    for n, rows in candidates:
        planned, fk = lookup.files[n]
        index = key_index(io, fk.indexed, lookup.key_ids, lookup.field_types, lookup.name_mapping)
        result.files_searched += 1
        if index.exact and batch.sorted is not None and batch.order is not None:
            # int keys: numpy all the way (the rows in key order are a sorted query)
            ranks = np.sort(batch.rank[rows])
            local, positions = index.lookup_sorted_ints(batch.sorted[ranks])
            found_rows = batch.order[ranks[local]]
        else:
            local, positions = index.lookup([c.take(pa.array(rows)) for c in batch.columns])
            found_rows = rows[local]
        if not len(positions):
            continue
        live = _live(io, lookup, planned, positions, batch, found_rows)
        if len(live):
            result.positions[planned.data_file.path] = live
    result.seconds = time.monotonic() - started
    return result


_MERGED: dict[tuple[str, tuple[int, ...]], MergedKeyIndex] = {}
_MERGED_LOCK = threading.Lock()


def _merged_index(lookup: KeyLookup) -> MergedKeyIndex:
    """The process's merged index of the small files of ``lookup``'s table and key."""
    scope = (lookup.location, lookup.key_ids)
    with _MERGED_LOCK:
        merged = _MERGED.get(scope)
        if merged is None:
            if len(_MERGED) >= 4:  # many tables in one process: keep the latest few (memory)
                _MERGED.pop(next(iter(_MERGED)))
            merged = _MERGED[scope] = MergedKeyIndex()
        return merged


def _search_merged(
    io: FileIO,
    lookup: KeyLookup,
    batch: _Keys,
    candidates: list[tuple[int, npt.NDArray[np.int64]]],
    result: LookupResult,
) -> list[tuple[int, npt.NDArray[np.int64]]]:
    """Search the candidate files of up to :attr:`MergedKeyIndex.MAX_FILE_ROWS` rows through the
    merged index (one search for all of them); returns the candidates left to search one by one.

    A key equal to an entry of file F is in F, hence within F's bounds and partition: the merged
    search finds exactly what the per-file searches of the candidates find.
    """
    assert batch.sorted is not None and batch.order is not None
    small = [
        (n, rows)
        for n, rows in candidates
        if lookup.files[n][1].indexed.rows <= MergedKeyIndex.MAX_FILE_ROWS
        and not lookup.files[n][1].indexed.constants
    ]
    if len(small) < 2:
        return candidates
    ids = lookup.key_ids

    def loader(f: IndexedFile) -> Any:
        return lambda: key_index(io, f, ids, lookup.field_types, lookup.name_mapping)

    files = [
        ((fk.indexed.path, fk.indexed.size, fk.indexed.rows, ids), loader(fk.indexed))
        for fk in (lookup.files[n][1] for n, _ in small)
    ]
    ranks, slots, positions, outside = _merged_index(lookup).lookup_sorted_ints(files, batch.sorted)
    apart = {small[i][0] for i in outside}
    merged = {n for n, _ in small} - apart
    result.files_searched += len(merged)
    if len(slots):
        order = np.argsort(slots, kind="stable")
        slots, ranks, positions = slots[order], ranks[order], positions[order]
        bounds = np.flatnonzero(np.diff(slots)) + 1
        for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(slots)], strict=True):
            planned = lookup.files[small[int(slots[lo])][0]][0]
            found_rows = batch.order[ranks[lo:hi]]
            live = _live(io, lookup, planned, positions[lo:hi], batch, found_rows)
            if len(live):
                result.positions[planned.data_file.path] = live
    return [(n, rows) for n, rows in candidates if n not in merged]


def _live(
    io: FileIO,
    lookup: KeyLookup,
    planned: PlannedFile,
    positions: npt.NDArray[np.int64],
    batch: _Keys,
    found_rows: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """``positions`` (of the rows holding keys ``found_rows`` of ``batch``) minus those a delete
    already removes; sorted."""
    deletes = planned.delete_files
    order = np.argsort(positions, kind="stable")
    positions = positions[order]
    keep = np.ones(len(positions), dtype=bool)
    if deletes:
        equality = [d for d in deletes if d.content == FileContent.EQUALITY_DELETES]
        on_key = all(sorted(d.equality_ids) == sorted(lookup.key_ids) for d in equality)
        if equality and not on_key:
            # deletes on other columns: the read path's own verdict for the whole file
            f = planned.data_file
            gone = dead_positions(io, FileScanTask(f, deletes, 0, f.file_size_in_bytes), lookup.options)
            keep &= ~_member(positions, gone)
        else:
            gone = deleted_positions(io, planned.data_file.path, deletes)
            keep &= ~_member(positions, gone)
            if equality:
                taken = pa.array(found_rows[order])
                by_id = {i: c.take(taken) for i, c in zip(lookup.key_ids, batch.columns, strict=True)}
                for ids, eq in equality_delete_sets(io, equality, lookup.field_types, lookup.field_parents):
                    keep &= ~eq.matches([by_id[i] for i in ids])
    out = positions[keep]
    if len(out) > 1 and not bool((out[1:] > out[:-1]).all()):
        out = np.unique(out)
    return out


def _member(values: npt.NDArray[np.int64], sorted_set: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Whether each of ``values`` is in ``sorted_set`` (sorted, unique)."""
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_set, values)
    at[at == len(sorted_set)] = 0
    return np.asarray(sorted_set[at] == values)


# --------------------------------------------------------------------------------- validation


@dataclass
class KeyConflicts:
    """Commit validation of a position-mode batch: no concurrent data file holds a row with one
    of its updated or deleted keys (called with the snapshots committed since its start).

    As Java's ``validateNoConflictingDataFiles`` with the batch's keys as the conflict filter,
    but exact: a concurrent ``append``/``overwrite``'s new data files are pruned by partition
    and key bounds, then looked up in their key index; only a file that really holds such a key
    conflicts (a row of it deleted again since still counts). Files already checked are not
    looked up again on a retry.
    """

    io: FileIO
    metadata: TableMetadata
    lookup: KeyLookup
    keys: pa.Table
    checked: set[str] = field(default_factory=set)

    def __call__(self, snapshots: Sequence[Snapshot]) -> None:
        if not self.keys.num_rows:
            return
        batch = _Keys(self.lookup, self.keys)
        specs = self.metadata.specs()
        for snap in snapshots:
            op = snap.summary.operation if snap.summary is not None else None
            if op not in (Operation.APPEND, Operation.OVERWRITE):
                continue
            added = [f for f in _added_data_files(self.io, snap) if f[0].file_path not in self.checked]
            files = [
                _file_keys(
                    f, spec_id, self.lookup.key_ids, self.lookup.field_types, specs, self.metadata.location
                )
                for f, spec_id in added
            ]
            for n, rows in _candidates(batch, files):
                fk = files[n]
                index = key_index(
                    self.io,
                    fk.indexed,
                    self.lookup.key_ids,
                    self.lookup.field_types,
                    self.lookup.name_mapping,
                )
                hit_rows, _ = index.lookup([c.take(pa.array(rows)) for c in batch.columns])
                if len(hit_rows):
                    row = int(rows[hit_rows[0]])
                    key = ", ".join(
                        f"{k}={batch.columns[i][row].as_py()!r}" for i, k in enumerate(self.lookup.key_names)
                    )
                    msg = (
                        f"concurrent snapshot {snap.snapshot_id} ({op}) added data file {fk.indexed.path} "
                        f"holding key ({key}), which this batch updates or deletes by position"
                    )
                    raise CommitConflictError(msg)
            self.checked.update(f.file_path for f, _ in added)


def _added_data_files(io: FileIO, snap: Snapshot) -> list[tuple[DataFile, int]]:
    """The data files ``snap`` itself added, with their spec ids."""
    out = []
    for m in snap.manifests(io):
        if m.content != ManifestContent.DATA or m.added_snapshot_id != snap.snapshot_id:
            continue
        for e in m.fetch_manifest_entry(io, discard_deleted=False):
            if e.status == ManifestEntryStatus.ADDED and e.snapshot_id == snap.snapshot_id:
                out.append((e.data_file, m.partition_spec_id))
    return out
