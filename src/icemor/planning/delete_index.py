"""The delete-file index: which delete files apply to which data file.

Built once per scan from the live delete entries (spec, "Scan Planning"; Iceberg Java's
DeleteFileIndex follows the same rules):

- deletion vectors are keyed by their referenced data file; when one applies, position
  delete files are not applied to that data file;
- position delete files that reference one data file (``referenced_data_file`` or equal
  ``file_path`` bounds) are keyed by that path, the others by (spec id, partition), pruned
  per data file by their ``file_path`` bounds;
- equality delete files of an unpartitioned spec are global, the others keyed by
  (spec id, partition); each is pruned per data file when its value bounds cannot overlap;
- sequence numbers: position deletes and DVs apply when data_seq <= delete_seq, equality
  deletes when data_seq < delete_seq. Buckets are sorted by sequence number so each lookup is
  a binary search.

Equality deletes are matched against a whole batch of data files at once
(:meth:`DeleteFileIndex.for_data_files`): each delete file's bounds are compared with arrays of
the data files' decoded statistics, so 20,000 files under 50 global equality deletes are 50
array comparisons, not a million Python calls.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pyiceberg.conversions import from_bytes
from pyiceberg.types import (
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from icemor.exceptions import CorruptFileError, InvalidArgumentError
from icemor.spec.files import DeleteFileRef, FileContent
from icemor.spec.rules import equality_delete_applies, file_path_bounds_contain, position_delete_applies

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    import numpy.typing as npt

    from icemor.planning.manifest_reader import ManifestFileEntry

__all__ = ["DataFileStats", "DeleteFileIndex"]

# Types whose serialized bounds order the same way their values do (floats are left out:
# NaN and -0.0 make bound comparisons unsafe).
_ORDERED_TYPES = (
    IntegerType,
    LongType,
    DateType,
    TimeType,
    TimestampType,
    TimestamptzType,
    StringType,
    DecimalType,
)
# Of those, the types whose bounds decode to ints of at most 64 bits: compared as int64 arrays.
# Strings and decimals are compared as object arrays (Python's own comparisons).
_INT64_TYPES = (IntegerType, LongType, DateType, TimeType, TimestampType, TimestamptzType)

# Rows of data files x equality delete files decided in one array: bounds the batch's memory
# (a few MiB) however many files and deletes a table has.
_MATRIX_CELLS = 1 << 22


class DataFileStats(Protocol):
    """What the index reads of a data file: its path and column statistics (as pyiceberg's DataFile)."""

    @property
    def file_path(self) -> str: ...

    @property
    def lower_bounds(self) -> Mapping[int, bytes] | None: ...

    @property
    def upper_bounds(self) -> Mapping[int, bytes] | None: ...

    @property
    def null_value_counts(self) -> Mapping[int, int] | None: ...

    @property
    def value_counts(self) -> Mapping[int, int] | None: ...


@dataclass(slots=True, frozen=True)
class _FileStats:
    file_path: str
    lower_bounds: Mapping[int, bytes] | None
    upper_bounds: Mapping[int, bytes] | None
    null_value_counts: Mapping[int, int] | None
    value_counts: Mapping[int, int] | None


@dataclass(slots=True)
class _Stats:
    lower: Mapping[int, bytes] | None
    upper: Mapping[int, bytes] | None
    null_counts: Mapping[int, int] | None
    value_counts: Mapping[int, int] | None


@dataclass(slots=True, frozen=True)
class _Side:
    """One column's statistics of one delete file, decoded once: what the overlap test compares."""

    has_nulls: bool | None
    all_null: bool
    lower: Any
    upper: Any


@dataclass(slots=True)
class _Column:
    """One column's statistics of a batch of data files, decoded once, as arrays.

    ``has_nulls`` is -1 where the null count is unknown, else 0 or 1; ``lower``/``upper`` hold
    a value only where ``lower_ok``/``upper_ok`` (int64, or objects for strings and decimals).
    """

    has_nulls: npt.NDArray[np.int8]
    all_null: npt.NDArray[np.bool_]
    lower: npt.NDArray[Any]
    lower_ok: npt.NDArray[np.bool_]
    upper: npt.NDArray[Any]
    upper_ok: npt.NDArray[np.bool_]

    def take(self, at: npt.NDArray[np.intp] | slice) -> _Column:
        return _Column(
            self.has_nulls[at],
            self.all_null[at],
            self.lower[at],
            self.lower_ok[at],
            self.upper[at],
            self.upper_ok[at],
        )


@dataclass(slots=True)
class _Indexed:
    ref: DeleteFileRef
    stats: _Stats
    sides: dict[int, _Side] | None = None
    """The decoded statistics of the equality fields (computed once, on first use)."""


@dataclass(slots=True)
class _SeqBucket:
    """Delete files sorted by data sequence number for binary search."""

    items: list[_Indexed] = field(default_factory=list)
    _seqs: list[int] | None = None

    def add(self, item: _Indexed) -> None:
        self.items.append(item)
        self._seqs = None

    def _sorted_seqs(self) -> list[int]:
        if self._seqs is None:
            self.items.sort(key=lambda i: i.ref.data_sequence_number)
            self._seqs = [i.ref.data_sequence_number for i in self.items]
        return self._seqs

    def start(self, data_seq: int, applies: Callable[[int, int], bool]) -> int:
        """Index in ``items`` (then sorted) of the first file for which ``applies(data_seq, delete_seq)``.

        ``applies`` is one of the spec's rules (:mod:`icemor.spec.rules`); both are monotone in
        the delete sequence number, so the applicable files are a suffix of the sorted bucket.
        """
        return bisect.bisect_left(self._sorted_seqs(), True, key=lambda d: applies(data_seq, d))

    def applicable(self, data_seq: int, applies: Callable[[int, int], bool]) -> list[_Indexed]:
        """Files for which ``applies(data_seq, delete_seq)`` holds, by binary search."""
        start = self.start(data_seq, applies)
        return self.items[start:]

    def starts(
        self, data_seqs: npt.NDArray[np.int64], applies: Callable[[int, int], bool]
    ) -> npt.NDArray[np.intp]:
        """:meth:`start` for each of ``data_seqs`` (a binary search per distinct number); sorts ``items``."""
        self._sorted_seqs()
        distinct, inverse = np.unique(data_seqs, return_inverse=True)
        firsts = np.array([self.start(int(s), applies) for s in distinct], dtype=np.intp)
        return firsts[inverse.reshape(-1)]


class DeleteFileIndex:
    """Answers "which delete files apply to this data file" for one scan."""

    def __init__(
        self,
        entries: Iterable[ManifestFileEntry],
        *,
        unpartitioned_spec_ids: set[int],
        field_types: Mapping[int, PrimitiveType],
    ) -> None:
        """Index the live delete entries of a snapshot.

        Args:
            entries: Live delete-file entries (position, DV, equality).
            unpartitioned_spec_ids: Ids of the table's unpartitioned specs (global equality deletes).
            field_types: Primitive type of every field id ever in the table, for bound decoding.
        """
        self._field_types = field_types
        self._dvs: dict[str, list[DeleteFileRef]] = defaultdict(list)
        self._pos_by_path: dict[str, _SeqBucket] = defaultdict(_SeqBucket)
        self._pos_by_partition: dict[tuple[int, tuple[Any, ...]], _SeqBucket] = defaultdict(_SeqBucket)
        self._eq_global = _SeqBucket()
        self._eq_by_partition: dict[tuple[int, tuple[Any, ...]], _SeqBucket] = defaultdict(_SeqBucket)
        self.delete_files: list[DeleteFileRef] = []
        # one tuple object per distinct set of applying delete files: readers memoise what they
        # derive from a set (its verdict key, its decoded deletes) by that object
        self._interned: dict[tuple[int, ...], tuple[DeleteFileRef, ...]] = {}

        for entry in entries:
            ref = entry.to_delete_ref()
            self.delete_files.append(ref)
            f = entry.data_file
            item = _Indexed(ref, _Stats(f.lower_bounds, f.upper_bounds, f.null_value_counts, f.value_counts))
            key = (ref.spec_id, ref.partition)
            if ref.content == FileContent.POSITION_DELETES:
                if ref.is_deletion_vector:
                    if ref.referenced_data_file is None:
                        msg = f"deletion vector {ref.path} has no referenced_data_file"
                        raise CorruptFileError(msg)
                    if self._dvs.get(ref.referenced_data_file):
                        other = self._dvs[ref.referenced_data_file][0].path
                        msg = (
                            f"two deletion vectors for data file {ref.referenced_data_file} "
                            f"({other} and {ref.path}); the spec allows one per data file"
                        )
                        raise CorruptFileError(msg)
                    self._dvs[ref.referenced_data_file].append(ref)
                elif (path := ref.referenced_data_file) is not None:
                    self._pos_by_path[path].add(item)
                else:
                    self._pos_by_partition[key].add(item)
            elif ref.content == FileContent.EQUALITY_DELETES:
                if ref.spec_id in unpartitioned_spec_ids:
                    self._eq_global.add(item)
                else:
                    self._eq_by_partition[key].add(item)

    def __bool__(self) -> bool:
        return bool(self.delete_files)

    def for_data_file(
        self,
        path: str,
        data_sequence_number: int,
        spec_id: int,
        partition: tuple[Any, ...],
        *,
        lower_bounds: Mapping[int, bytes] | None = None,
        upper_bounds: Mapping[int, bytes] | None = None,
        null_counts: Mapping[int, int] | None = None,
        value_counts: Mapping[int, int] | None = None,
    ) -> tuple[DeleteFileRef, ...]:
        """Return the delete files that apply to one data file, DVs and position files first."""
        stats = _FileStats(path, lower_bounds, upper_bounds, null_counts, value_counts)
        return self.for_data_files(
            [stats], sequence_numbers=[data_sequence_number], spec_ids=[spec_id], partitions=[partition]
        )[0]

    def for_data_files(
        self,
        files: Sequence[DataFileStats],
        *,
        sequence_numbers: Sequence[int],
        spec_ids: Sequence[int],
        partitions: Sequence[tuple[Any, ...]],
    ) -> list[tuple[DeleteFileRef, ...]]:
        """The delete files that apply to each data file, DVs and position files first.

        The i-th data file is ``files[i]`` with ``sequence_numbers[i]``, ``spec_ids[i]`` and
        ``partitions[i]``. Equal sets of delete files are one tuple object (also across calls).

        Raises:
            InvalidArgumentError: The sequences are not all of one length.
        """
        n = len(files)
        if not len(sequence_numbers) == len(spec_ids) == len(partitions) == n:
            msg = "for_data_files: files, sequence_numbers, spec_ids and partitions differ in length"
            raise InvalidArgumentError(msg)
        out = self._equality_deletes(files, sequence_numbers, list(zip(spec_ids, partitions, strict=True)))
        if self._dvs or self._pos_by_path or self._pos_by_partition:
            for i, f in enumerate(files):
                refs = self._position_deletes(f.file_path, sequence_numbers[i], spec_ids[i], partitions[i])
                if refs:
                    refs.extend(out[i])
                    out[i] = self._intern(refs)
        return out

    def _intern(self, refs: list[DeleteFileRef]) -> tuple[DeleteFileRef, ...]:
        if not refs:
            return ()
        return self._interned.setdefault(tuple(id(r) for r in refs), tuple(refs))

    def _position_deletes(
        self, path: str, seq: int, spec_id: int, partition: tuple[Any, ...]
    ) -> list[DeleteFileRef]:
        out: list[DeleteFileRef] = [
            dv for dv in self._dvs.get(path, ()) if position_delete_applies(seq, dv.data_sequence_number)
        ]
        if not out:
            if path in self._pos_by_path:
                out.extend(i.ref for i in self._pos_by_path[path].applicable(seq, position_delete_applies))
            bucket = self._pos_by_partition.get((spec_id, partition))
            if bucket is not None:
                out.extend(
                    i.ref
                    for i in bucket.applicable(seq, position_delete_applies)
                    if file_path_bounds_contain(path, i.stats.lower, i.stats.upper)
                )
        return out

    def _equality_deletes(
        self,
        files: Sequence[DataFileStats],
        sequence_numbers: Sequence[int],
        partition_keys: Sequence[tuple[int, tuple[Any, ...]]],
    ) -> list[tuple[DeleteFileRef, ...]]:
        """Per data file, the applying equality deletes: global ones, then its partition's.

        Decided as a matrix of data files x candidates: column ``c < G`` is the c-th global delete
        file (by sequence number), column ``G + j`` the j-th of the data file's own partition
        bucket. Each column is one array comparison over the data files, whatever the number of
        partitions; a file's tuple is interned by its row's bytes (with its bucket).
        """
        n = len(files)
        out: list[tuple[DeleteFileRef, ...]] = [()] * n
        if not self._eq_global.items and not self._eq_by_partition:
            return out
        seqs = np.fromiter(sequence_numbers, dtype=np.int64, count=n)
        global_items = self._eq_global.items
        global_start = (
            self._eq_global.starts(seqs, equality_delete_applies)
            if global_items
            else np.zeros(n, dtype=np.intp)
        )
        buckets: list[_SeqBucket] = []
        bucket_of = np.full(n, -1, dtype=np.int64)
        bucket_start = np.zeros(n, dtype=np.intp)
        bucket_size = np.zeros(n, dtype=np.intp)
        if self._eq_by_partition:
            numbers: dict[tuple[int, tuple[Any, ...]], int] = {}
            firsts: dict[tuple[int, int], int] = {}  # (bucket, data seq) -> first applying item
            for i, key in enumerate(partition_keys):
                bucket = self._eq_by_partition.get(key)
                if bucket is None:
                    continue
                number = numbers.setdefault(key, len(numbers))
                if number == len(buckets):
                    buckets.append(bucket)
                seq = sequence_numbers[i]
                first = firsts.get((number, seq))
                if first is None:
                    first = firsts[number, seq] = bucket.start(seq, equality_delete_applies)
                bucket_of[i], bucket_start[i], bucket_size[i] = number, first, len(bucket.items)
        need = (global_start < len(global_items)) | (bucket_start < bucket_size)
        rows = np.flatnonzero(need)
        if not len(rows):
            return out
        # largest buckets first: the rows a partition column concerns are then a prefix
        rows = rows[np.argsort(-bucket_size[rows], kind="stable")]
        candidates = [*global_items, *(i for bucket in buckets for i in bucket.items)]
        # where each bucket's items start in candidates (one extra entry: never indexed out of range)
        bucket_base = np.cumsum([len(global_items)] + [len(b.items) for b in buckets])
        row_base = np.where(bucket_of[rows] >= 0, bucket_base[np.maximum(bucket_of[rows], 0)], 0)
        fields = sorted({fid for item in candidates for fid in self._sides(item)})
        data = {fid: self._decode_column(files, rows, fid) for fid in fields}
        deletes = {fid: self._delete_column(candidates, fid) for fid in fields}
        width = len(global_items) + int(bucket_size[rows].max())
        interned: dict[bytes, tuple[DeleteFileRef, ...]] = {}
        step = max(1, _MATRIX_CELLS // width)
        for lo in range(0, len(rows), step):
            hi = min(lo + step, len(rows))
            chunk = rows[lo:hi]
            matrix = np.zeros((hi - lo, width), dtype=bool)
            for col in range(width):
                if col < len(global_items):
                    k = hi - lo
                    applies = global_start[chunk] <= col
                    at: npt.NDArray[np.intp] | slice = slice(col, col + 1)  # broadcast over the rows
                else:
                    j = col - len(global_items)
                    k = int(np.count_nonzero(bucket_size[chunk] > j))
                    applies = bucket_start[chunk[:k]] <= j
                    at = row_base[lo : lo + k] + j
                for fid in fields:
                    if not applies.any():
                        break
                    applies &= ~_pruned(deletes[fid].take(at), data[fid].take(slice(lo, lo + k)))
                matrix[:k, col] = applies
            keys = np.hstack(
                [np.packbits(matrix, axis=1), bucket_of[chunk].astype("<i8").view(np.uint8).reshape(-1, 8)]
            )
            distinct, first_at, inverse = np.unique(
                np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1]))).reshape(-1),
                return_index=True,
                return_inverse=True,
            )
            tuples = []
            for key, k in zip(distinct.tolist(), first_at.tolist(), strict=True):
                found = interned.get(key)
                if found is None:
                    cols = np.flatnonzero(matrix[k]).tolist()
                    base = int(row_base[lo + k]) - len(global_items)
                    refs = [candidates[c if c < len(global_items) else base + c].ref for c in cols]
                    found = interned[key] = self._intern(refs)
                tuples.append(found)
            for row, u in zip(chunk.tolist(), inverse.reshape(-1).tolist(), strict=True):
                out[row] = tuples[u]
        return out

    def _delete_column(self, items: list[_Indexed], field_id: int) -> _Column:
        """The decoded statistics of ``field_id`` of each of ``items``, as arrays.

        A delete file without that equality field gets unknown statistics (unknown NULLs, no
        bounds), which never prune.
        """
        sides = [self._sides(i).get(field_id) for i in items]
        numeric = isinstance(self._field_types[field_id], _INT64_TYPES)
        lower, lower_ok = _bound_array([None if d is None else d.lower for d in sides], numeric=numeric)
        upper, upper_ok = _bound_array([None if d is None else d.upper for d in sides], numeric=numeric)
        return _Column(
            np.array(
                [-1 if d is None or d.has_nulls is None else int(d.has_nulls) for d in sides], dtype=np.int8
            ),
            np.array([d is not None and d.all_null for d in sides], dtype=bool),
            lower,
            lower_ok,
            upper,
            upper_ok,
        )

    def _sides(self, eq: _Indexed) -> dict[int, _Side]:
        """A delete file's decoded statistics of its equality fields whose types order."""
        if eq.sides is None:
            eq.sides = {}
            for fid in eq.ref.equality_ids:
                ftype = self._field_types.get(fid)
                if isinstance(ftype, _ORDERED_TYPES):
                    stats = eq.stats
                    decode: Callable[[PrimitiveType, bytes], Any] = from_bytes.dispatch(type(ftype))
                    eq.sides[fid] = _Side(
                        _has_nulls(stats.null_counts, fid),
                        _all_null(stats.null_counts, stats.value_counts, fid),
                        _bound(stats.lower, fid, ftype, decode),
                        _bound(stats.upper, fid, ftype, decode),
                    )
        return eq.sides

    def _decode_column(
        self, files: Sequence[DataFileStats], rows: npt.NDArray[np.intp], field_id: int
    ) -> _Column:
        """The statistics of ``field_id`` (an ordered type) of ``files[rows]``, decoded."""
        ftype = self._field_types[field_id]
        # the converter from_bytes would pick, picked once: not one dispatch per bound
        decode: Callable[[PrimitiveType, bytes], Any] = from_bytes.dispatch(type(ftype))
        has_nulls: list[int] = []
        all_null: list[bool] = []
        lower: list[Any] = []
        upper: list[Any] = []
        for i in rows.tolist():
            f = files[i]
            nulls = f.null_value_counts
            known = _has_nulls(nulls, field_id)
            has_nulls.append(-1 if known is None else int(known))
            all_null.append(_all_null(nulls, f.value_counts, field_id))
            lower.append(_bound(f.lower_bounds, field_id, ftype, decode))
            upper.append(_bound(f.upper_bounds, field_id, ftype, decode))
        lower_values, lower_ok = _bound_array(lower, numeric=isinstance(ftype, _INT64_TYPES))
        upper_values, upper_ok = _bound_array(upper, numeric=isinstance(ftype, _INT64_TYPES))
        return _Column(
            np.array(has_nulls, dtype=np.int8),
            np.array(all_null, dtype=bool),
            lower_values,
            lower_ok,
            upper_values,
            upper_ok,
        )


def _pruned(d: _Column, f: _Column) -> npt.NDArray[np.bool_]:
    """Per pair of a delete file's (``d``) and a data file's (``f``) statistics of one column:
    whether they prove no data row equals a delete row.

    As Iceberg's rules for one pair: never when both sides may hold NULLs (a NULL delete value
    can match a NULL data value); else when one side is all NULL and the other has none, or
    when the bounds are disjoint (``d.lower > f.upper`` or ``d.upper < f.lower``).
    """
    pruned: npt.NDArray[np.bool_] = (d.all_null & (f.has_nulls == 0)) | (f.all_null & (d.has_nulls == 0))
    pruned |= _less(f.upper, f.upper_ok, d.lower, d.lower_ok)
    pruned |= _less(d.upper, d.upper_ok, f.lower, f.lower_ok)
    pruned &= (d.has_nulls == 0) | (f.has_nulls == 0)
    return pruned


def _less(
    a: npt.NDArray[Any], a_ok: npt.NDArray[np.bool_], b: npt.NDArray[Any], b_ok: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """``a < b`` where both are known, else False (objects compared only where known)."""
    known = a_ok & b_ok
    if a.dtype != object:
        less: npt.NDArray[np.bool_] = known & (a < b)
        return less
    out = np.zeros(len(known), dtype=bool)
    at = np.flatnonzero(known)
    if len(at):
        out[at] = np.broadcast_to(a, known.shape)[at] < np.broadcast_to(b, known.shape)[at]
    return out


def _bound_array(values: list[Any], *, numeric: bool) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    ok = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    if numeric:
        return np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=len(values)), ok
    return np.fromiter(values, dtype=object, count=len(values)), ok


def _bound(
    bounds: Mapping[int, bytes] | None,
    field_id: int,
    ftype: PrimitiveType,
    decode: Callable[[PrimitiveType, bytes], Any],
) -> Any:
    if not bounds or field_id not in bounds:
        return None
    try:
        return decode(ftype, bounds[field_id])
    except Exception:  # a promoted type's old-width bound, or a malformed one: no pruning
        return None


def _has_nulls(null_counts: Mapping[int, int] | None, field_id: int) -> bool | None:
    if null_counts is None or field_id not in null_counts:
        return None
    return null_counts[field_id] > 0


def _all_null(
    null_counts: Mapping[int, int] | None, value_counts: Mapping[int, int] | None, field_id: int
) -> bool:
    if not null_counts or not value_counts:
        return False
    nulls, values = null_counts.get(field_id), value_counts.get(field_id)
    return nulls is not None and values is not None and nulls == values
