"""Key index: per data file, its key values sorted, each with its row position.

What position-mode CDC (:mod:`icemor.ops.key_lookup`) asks of a data file is "at which positions
are these keys?", for a few thousand keys of a batch against a file of millions of rows. Reading
the file's key column for every batch costs a Parquet decode of the whole column per file per
batch; the index answers with two binary searches per key:

- one integer-like key column without NULLs (long, int, date, time, timestamp): the values,
  sorted, and the positions in that order; a lookup is ``np.searchsorted`` (exact);
- anything else (strings, decimals, binary, UUIDs, several columns, NULLs, floats): a 64-bit
  hash per row (:func:`icemor.io.equality.hash_keys`, the equality probe's hash), sorted, with
  the positions and the key values in that order; every hash match is checked against the
  values, so a collision costs time, never a wrong position.

**Sidecar.** An index is built once from the file's key columns and stored next to the data
file as a hidden Parquet file (``.<data file name>.k<key ids>.icemor-keys.parquet``: the key
values and ``pos``, in index order). It is not part of the table: no metadata names it, Iceberg
readers never list directories, and hidden names are skipped by Java's and icemor's orphan
removal (icemor's removes a sidecar once its data file is gone). CDC writes the sidecars of the
files it writes (their rows are in memory); any other data file gets its sidecar the first time
a lookup needs it, if it lies under the table's location (a file registered where it lies, with
add-files, is never written beside: its index is kept in the process only).

**Nothing read from a sidecar can change a result unchecked.** Its key-value metadata names the
data file (path, size, row count), the key field ids, the format version, and a SHA-256 of the
data file's Parquet footer (its schema, row groups, column chunk offsets, sizes and statistics);
on load the data file's footer is read again (one small read) and must hash alike, the row
count must match, the positions must be a permutation of ``0 .. rows - 1``, and the sidecar's
own pages carry CRCs. An index that fails any check, or cannot be read, is rebuilt from the data
file (and stored again). A sidecar that passes describes this very file, short of a file
rewritten in place with the same footer byte for byte (the same row groups, sizes and statistics),
which no Iceberg writer does: data files are immutable. In a process the index is kept in
:data:`icemor.io.cache.DELETE_CACHE` (kind ``key-index``), keyed by path, size and row count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import pyarrow_to_schema

from icemor.exceptions import CorruptFileError, IcemorError
from icemor.io.cache import DELETE_CACHE
from icemor.io.columns import equality_key_columns
from icemor.io.deletes import open_parquet, reaching
from icemor.io.equality import encode_keys, equal_keys, hash_keys, int_key, take_keys

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.types import IcebergType

    from icemor.io.equality import KeyColumns

__all__ = [
    "FORMAT",
    "IndexedFile",
    "KeyIndex",
    "MergedKeyIndex",
    "build_key_index",
    "data_path_of",
    "footer_digest",
    "key_index",
    "remember_key_index",
    "save_key_index",
    "sidecar_path",
]

_log = logging.getLogger(__name__)

FORMAT = 1
"""The sidecar's layout and meaning; an index of another format is rebuilt, never read."""
SIDECAR_SUFFIX = ".icemor-keys.parquet"
_META = b"icemor.key-index"
_POS = "pos"


@dataclass(frozen=True)
class KeyIndex:
    """The rows of one data file by key: sorted values (or hashes) and their positions."""

    exact: bool
    """Integer mode: ``values`` are the keys themselves (no check needed)."""
    values: npt.NDArray[np.int64] | npt.NDArray[np.uint64]
    """Sorted: the int64 keys (exact) or the 64-bit key hashes."""
    positions: npt.NDArray[np.int64] | None
    """The row position of each entry of ``values``; None: entry i is position i (a file sorted by
    its key: the index is then just its key column, 8 bytes a row)."""
    keys: KeyColumns | None
    """Hash mode: the key values of each entry, for the exact check."""
    types: tuple[pa.DataType, ...]
    """The Arrow types of the key columns (a lookup casts its keys alike)."""
    columns: pa.Table | None
    """The key columns and positions in index order (what the sidecar stores); None once stored."""
    rows: int
    """The file's row count."""
    unique: bool = False
    """No value repeats (a key in one row at most, hashes all distinct): one binary search a key."""

    @property
    def nbytes(self) -> int:
        held = 0 if self.keys is None else sum(k.nbytes for k in self.keys)
        return int(self.values.nbytes + (0 if self.positions is None else self.positions.nbytes) + held)

    def lean(self) -> KeyIndex:
        """This index without the columns kept for its sidecar (what a process keeps in memory)."""
        return replace(self, columns=None)

    def lookup_sorted_ints(self, q: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
        """:meth:`lookup` of one integer key given as sorted int64 values (an exact index only)."""
        assert self.exact
        if not len(q) or not len(self.values):
            none = np.zeros(0, dtype=np.int64)
            return none, none
        return _sorted_ranges(np.asarray(self.values, dtype=np.int64), q, self.positions, self.unique)

    def lookup(self, keys: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[npt.NDArray[np.int64], ...]:
        """Every (key row, position) pair where a row of the file equals key row ``keys[i]``.

        ``keys``: one array per key column (the index's column order), any number of rows,
        duplicates allowed. Returns ``(key_rows, positions)``, both int64, in no particular order.
        """
        n = len(keys[0]) if keys else 0
        none = np.zeros(0, dtype=np.int64)
        if n == 0 or len(self.values) == 0:
            return none, none
        if self.exact:
            q = int_key(keys[0].cast(self.types[0]) if keys[0].type != self.types[0] else keys[0])
            if q is None:  # NULL keys: this file has none (else it would be hash-indexed)
                arr = keys[0].combine_chunks() if isinstance(keys[0], pa.ChunkedArray) else keys[0]
                valid = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
                rows, pos = self.lookup([arr.take(pa.array(valid))])
                return valid[rows].astype(np.int64), pos
            return _ranges(np.asarray(self.values, dtype=np.int64), q, self.positions, unique=self.unique)
        encoded = encode_keys(keys, self.types)
        if encoded is None:
            return none, none
        assert self.keys is not None
        rows, at = _ranges(
            np.asarray(self.values, dtype=np.uint64), hash_keys(encoded, n), None, unique=self.unique
        )
        if not len(rows):
            return none, none
        same = equal_keys(encoded, rows, self.keys, at)
        at = at[same]
        return rows[same], at if self.positions is None else self.positions[at]


def _sorted_ranges(
    values: npt.NDArray[np.int64],
    q: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64] | None,
    unique: bool,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`_ranges` for a sorted query, searching the shorter side in the longer one."""
    if len(q) <= len(values):
        return _ranges(values, q, positions, unique=unique)
    # each entry's query rows; the query is sorted, so whether a key repeats in it is one pass
    entries, rows = _ranges(q, values, None, unique=not bool((q[1:] == q[:-1]).any()))
    return rows, entries if positions is None else positions[entries]


def _ranges(
    values: npt.NDArray[Any],
    q: npt.NDArray[Any],
    positions: npt.NDArray[np.int64] | None,
    *,
    unique: bool = False,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(query row, entry) pairs where ``values[entry] == q[row]``; entries as positions if given.
    ``unique``: no value repeats in ``values`` (one search per query row instead of two)."""
    if unique:
        at = np.searchsorted(values, q, side="left")
        inside = at < len(values)
        rows = np.flatnonzero(inside)
        at = at[rows]
        same = values[at] == q[rows]
        rows, entries = rows[same].astype(np.int64), at[same].astype(np.int64)
        return rows, entries if positions is None else positions[entries]
    lo = np.searchsorted(values, q, side="left")
    hi = np.searchsorted(values, q, side="right")
    counts = (hi - lo).astype(np.int64)
    hit = np.flatnonzero(counts)
    if not len(hit):
        none = np.zeros(0, dtype=np.int64)
        return none, none
    counts = counts[hit]
    rows = np.repeat(hit.astype(np.int64), counts)
    # the entries lo[r], lo[r] + 1, ... for each hit row r, without a Python loop
    starts = np.repeat(lo[hit].astype(np.int64) - (np.cumsum(counts) - counts), counts)
    entries = starts + np.arange(len(rows), dtype=np.int64)
    return rows, entries if positions is None else positions[entries]


@dataclass(frozen=True)
class _Merged:
    """One immutable state of a :class:`MergedKeyIndex` (replaced, never changed, so that a
    search may run on it while another thread merges)."""

    values: npt.NDArray[np.int64]
    """Every entry's key, sorted."""
    files: npt.NDArray[np.int32]
    """Each entry's file number (``numbers``)."""
    positions: npt.NDArray[np.int64]
    """Each entry's row position in its file."""
    numbers: Mapping[tuple[Any, ...], int]
    """File identity (path, size, rows, key ids) to its number."""
    next_number: int = 0


_EMPTY_MERGED = _Merged(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64), {})


class MergedKeyIndex:
    """The exact (single integer key) indexes of many small data files merged into one sorted
    array: a batch's keys are searched in it once, not once per file.

    Why: every CDC batch writes a file whose keys span the whole key range (updates hit keys
    everywhere), so no file is pruned by its bounds, and each batch searched every earlier
    batch's file: work growing with the square of the batches (240 searches a batch after 100).
    A file joins the merged index once, from its verified :func:`key_index` (nothing else is
    read); entries of files no longer asked for are dropped once they outnumber the others.
    A search's answer is exactly the per-file lookups' (every entry equal to a key, per file).
    """

    MAX_FILE_ROWS = 1 << 17
    """Files with more rows are searched on their own (one search each is then worth it)."""
    MAX_ENTRIES = 1 << 21
    """Entries held at most (20 bytes each: ~40 MB); files beyond are searched on their own."""
    DROP_AFTER = 1 << 17
    """Entries held before those of files no longer asked for are dropped."""

    def __init__(self) -> None:
        self._state = _EMPTY_MERGED
        self._lock = threading.Lock()

    def lookup_sorted_ints(
        self, files: Sequence[tuple[tuple[Any, ...], Callable[[], KeyIndex]]], q: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], list[int]]:
        """Search sorted int64 keys ``q`` in ``files`` (identity, loader of its key index).

        Returns ``(query rows, file slots, positions, not merged)``: every (row of ``q``, slot in
        ``files``, position) where the file's row at that position holds ``q[row]``, and the slots
        of files this index does not hold (not exact, or too big): search those on their own.
        """
        state, slots, outside = self._admit(files)
        none = np.zeros(0, dtype=np.int64)
        if not len(q) or not len(state.values):
            return none, none, none, outside
        rows, entries = _ranges(state.values, q, None)
        slot = slots[state.files[entries]]
        keep = slot >= 0
        return rows[keep], slot[keep].astype(np.int64), state.positions[entries[keep]], outside

    def _admit(
        self, files: Sequence[tuple[tuple[Any, ...], Callable[[], KeyIndex]]]
    ) -> tuple[_Merged, npt.NDArray[np.int64], list[int]]:
        """The state holding every mergeable file of ``files``, each file number's slot in
        ``files`` (-1: not asked for), and the slots not merged."""
        with self._lock:
            state = self._state
            outside: list[int] = []
            new: list[tuple[int, tuple[Any, ...], KeyIndex]] = []
            size = len(state.values)
            for slot, (ident, load) in enumerate(files):
                if ident in state.numbers:
                    continue
                index = load()
                if not index.exact or index.rows > self.MAX_FILE_ROWS or size + index.rows > self.MAX_ENTRIES:
                    outside.append(slot)
                    continue
                new.append((slot, ident, index))
                size += len(index.values)
            asked = {ident for ident, _ in files}
            stale = sum(1 for ident in state.numbers if ident not in asked)
            if stale and stale * 2 > len(state.numbers) and len(state.values) > self.DROP_AFTER:
                state = _without(state, asked)
            if new:
                state = _merged_with(state, [(ident, index) for _, ident, index in new])
            self._state = state
        slots = np.full(state.next_number, -1, dtype=np.int64)
        for slot, (ident, _) in enumerate(files):
            number = state.numbers.get(ident)
            if number is not None:
                slots[number] = slot
        return state, slots, outside


def _merged_with(state: _Merged, added: Sequence[tuple[tuple[Any, ...], KeyIndex]]) -> _Merged:
    """``state`` with the entries of ``added`` merged in (sorted inserts, no full re-sort)."""
    numbers = dict(state.numbers)
    values, files, positions = [], [], []
    number = state.next_number
    for ident, index in added:
        numbers[ident] = number
        n = len(index.values)
        values.append(np.asarray(index.values, dtype=np.int64))
        files.append(np.full(n, number, dtype=np.int32))
        positions.append(np.arange(n, dtype=np.int64) if index.positions is None else index.positions)
        number += 1
    v, f, p = np.concatenate(values), np.concatenate(files), np.concatenate(positions)
    if len(added) > 1:
        order = np.argsort(v, kind="stable")
        v, f, p = v[order], f[order], p[order]
    at = np.searchsorted(state.values, v, side="right")
    return _Merged(
        np.insert(state.values, at, v),
        np.insert(state.files, at, f),
        np.insert(state.positions, at, p),
        numbers,
        number,
    )


def _without(state: _Merged, kept: set[tuple[Any, ...]]) -> _Merged:
    """``state`` holding only the files ``kept`` (a filter keeps the entries sorted)."""
    numbers = {ident: n for ident, n in state.numbers.items() if ident in kept}
    live = np.zeros(state.next_number, dtype=bool)
    live[list(numbers.values())] = True
    keep = live[state.files]
    return _Merged(state.values[keep], state.files[keep], state.positions[keep], numbers, state.next_number)


def build_key_index(columns: Sequence[pa.Array | pa.ChunkedArray]) -> KeyIndex:
    """The index of key columns given in file row order (row i is position i)."""
    cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    n = len(cols[0])
    positions = np.arange(n, dtype=np.int64)
    return _indexed(cols, positions)


def _indexed(cols: list[pa.Array], positions: npt.NDArray[np.int64]) -> KeyIndex:
    """Index key rows ``cols`` whose positions are ``positions``. Rows already in index order (a
    sidecar's, a file sorted by its key) cost one pass to check it, not a sort."""
    types = tuple(c.type for c in cols)
    n = len(positions)
    ints = int_key(cols[0]) if len(cols) == 1 else None
    if ints is not None:
        if not _nondecreasing(ints):
            order = np.argsort(ints, kind="stable")
            ints, positions, cols = ints[order], positions[order], [cols[0].take(pa.array(order))]
        table = _table(cols, positions)
        return KeyIndex(True, ints, _unless_identity(positions), None, types, table, n, _distinct(ints))
    encoded = encode_keys(cols)
    if encoded is None:
        names = ", ".join(str(t) for t in types)
        msg = f"key columns of type {names} cannot be indexed"
        raise CorruptFileError(msg)
    hashes = hash_keys(encoded, n)
    if not _nondecreasing(hashes):
        order = np.argsort(hashes, kind="stable")
        taken = pa.array(order)
        hashes, positions = hashes[order], positions[order]
        cols, encoded = [c.take(taken) for c in cols], take_keys(encoded, order)
    table = _table(cols, positions)
    return KeyIndex(False, hashes, _unless_identity(positions), encoded, types, table, n, _distinct(hashes))


def _distinct(sorted_values: npt.NDArray[Any]) -> bool:
    return not bool((sorted_values[1:] == sorted_values[:-1]).any())


def _unless_identity(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
    """None when entry i is position i (nothing to store), else ``positions``."""
    n = len(positions)
    if n and int(positions[0]) == 0 and int(positions[-1]) == n - 1 and _increasing(positions):
        return None
    return positions


def _increasing(values: npt.NDArray[Any]) -> bool:
    return len(values) < 2 or bool((values[1:] > values[:-1]).all())


def _nondecreasing(values: npt.NDArray[Any]) -> bool:
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def _table(cols: Sequence[pa.Array], positions: npt.NDArray[np.int64]) -> pa.Table:
    return pa.table({**{f"k{i}": c for i, c in enumerate(cols)}, _POS: pa.array(positions, pa.int64())})


# --------------------------------------------------------------------------------- the sidecar


def sidecar_path(data_path: str, key_ids: Sequence[int]) -> str:
    """Where the key index of ``data_path`` on ``key_ids`` is stored: beside it, hidden."""
    directory, _, name = data_path.rpartition("/")
    return f"{directory}/.{name}.k{'-'.join(str(i) for i in key_ids)}{SIDECAR_SUFFIX}"


def data_path_of(sidecar: str) -> str | None:
    """The data file a sidecar path belongs to, or None when ``sidecar`` is not one."""
    directory, _, name = sidecar.rpartition("/")
    if not (name.startswith(".") and name.endswith(SIDECAR_SUFFIX)):
        return None
    stem = name[1 : -len(SIDECAR_SUFFIX)]
    base, dot, ids = stem.rpartition(".k")
    if not dot or not base or not all(part.isdigit() for part in ids.split("-")):
        return None
    return f"{directory}/{base}"


def footer_digest(io: FileIO, path: str, size: int) -> str:
    """SHA-256 of the Parquet footer of ``path`` (its file metadata), read from the file's end.

    Raises:
        MissingFileError: The file cannot be opened.
        CorruptFileError: It does not end like a Parquet file of ``size`` bytes.
    """
    with reaching("data file", path), io.new_input(path).open() as f:
        f.seek(size - 8)
        tail = f.read(8)
        if len(tail) != 8 or tail[4:] != b"PAR1":
            msg = f"data file {path} does not end as a Parquet file of {size} bytes"
            raise CorruptFileError(msg)
        length = int.from_bytes(tail[:4], "little")
        if length <= 0 or length > size - 12:
            msg = f"data file {path} has a footer length of {length} bytes in {size}"
            raise CorruptFileError(msg)
        f.seek(size - 8 - length)
        footer = f.read(length)
    if len(footer) != length:
        msg = f"data file {path} is truncated (its footer is incomplete)"
        raise CorruptFileError(msg)
    return hashlib.sha256(footer).hexdigest()


def _identity(path: str, size: int, rows: int, key_ids: Sequence[int], digest: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "data-file": path,
        "size": size,
        "rows": rows,
        "key-ids": list(key_ids),
        "footer-sha256": digest,
    }


def save_key_index(
    io: FileIO, path: str, size: int, key_ids: Sequence[int], index: KeyIndex, *, digest: str | None = None
) -> str | None:
    """Store ``index`` as the sidecar of data file ``path``; returns its path, or None if it could
    not be written (only the next lookup's time is lost; what was written of it is removed)."""
    rows = index.rows
    location = sidecar_path(path, key_ids)
    try:
        digest = digest or footer_digest(io, path, size)
        meta = json.dumps(_identity(path, size, rows, key_ids, digest), sort_keys=True).encode()
        assert index.columns is not None
        table = index.columns.replace_schema_metadata({_META: meta})
        deltas = [
            name
            for name, t in zip(table.column_names, table.schema.types, strict=True)
            if pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)
        ]
        with io.new_output(location).create(overwrite=True) as out:
            pq.write_table(
                table,
                out,
                compression="zstd",
                # sorted integers and positions: deltas of a few bits each
                use_dictionary=[c for c in table.column_names if c not in deltas],
                column_encoding=dict.fromkeys(deltas, "DELTA_BINARY_PACKED"),
                write_page_checksum=True,
            )
    except (OSError, pa.ArrowException, IcemorError) as e:
        _log.debug("key index of %s not stored: %s", path, e)
        with contextlib.suppress(OSError):
            io.delete(location)
        return None
    return location


def _load_sidecar(
    io: FileIO, path: str, size: int, rows: int, key_ids: Sequence[int], types: Sequence[pa.DataType]
) -> KeyIndex | None:
    """The stored index of ``path`` if it verifies against the data file (see the module); else None."""
    location = sidecar_path(path, key_ids)
    try:
        if not io.new_input(location).exists():
            return None
        pf = open_parquet(io, location, what="key index")
        try:
            stored = json.loads((pf.metadata.metadata or {}).get(_META, b"{}"))
            expected = _identity(path, size, rows, key_ids, stored.get("footer-sha256", ""))
            if stored != expected or stored["footer-sha256"] != footer_digest(io, path, size):
                return None
            table = pf.read(use_threads=False)
        finally:
            pf.close()
    except (OSError, pa.ArrowException, IcemorError, ValueError) as e:
        _log.debug("key index %s not used: %s", location, e)
        return None
    names = [f"k{i}" for i in range(len(key_ids))]
    if table.num_rows != rows or table.column_names != [*names, _POS]:
        return None
    positions = np.asarray(table.column(_POS).to_numpy(), dtype=np.int64)
    if not _permutation(positions, rows):
        return None
    cols = []
    for name, t in zip(names, types, strict=True):
        c = table.column(name).combine_chunks()
        if c.type != t:
            return None
        cols.append(c)
    return _indexed(cols, positions)


def _permutation(positions: npt.NDArray[np.int64], rows: int) -> bool:
    if len(positions) != rows:
        return False
    if rows == 0:
        return True
    if int(positions.min()) < 0 or int(positions.max()) >= rows:
        return False
    seen = np.zeros(rows, dtype=bool)
    seen[positions] = True
    return bool(seen.all())


# ------------------------------------------------------------------------------ build or load


@dataclass(frozen=True)
class IndexedFile:
    """What indexing a data file needs (picklable for executors)."""

    path: str
    size: int
    rows: int
    constants: Mapping[int, Any]
    """Identity-partition values of key fields, for files that do not store the column."""
    store: bool = True
    """Store the index as a sidecar; False for a file outside the table's location (registered
    with add-files): icemor never writes there, so its index lives in the process only."""


def key_index(
    io: FileIO,
    f: IndexedFile,
    key_ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None = None,
) -> KeyIndex:
    """The key index of data file ``f``: from this process's cache, its verified sidecar, or built
    from the file's key columns (and then stored as its sidecar).

    Raises:
        MissingFileError, CorruptFileError: The data file cannot be read.
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    ids = tuple(key_ids)
    types = tuple(schema_to_pyarrow(field_types[i], include_field_ids=False) for i in ids)

    def load() -> tuple[KeyIndex, int]:
        stored = _load_sidecar(io, f.path, f.size, f.rows, ids, types) if f.store else None
        if stored is None:
            built, digest = _build_from_file(io, f, ids, field_types, name_mapping)
            if f.store:
                save_key_index(io, f.path, f.size, ids, built, digest=digest)
            stored = built
        index = stored.lean()
        return index, index.nbytes

    return DELETE_CACHE.get_or_load("key-index", (f.path, f.size, f.rows, ids), load)


def remember_key_index(path: str, size: int, key_ids: Sequence[int], index: KeyIndex) -> None:
    """Keep an index this process built itself (for a file it wrote) in the process cache."""
    lean = index.lean()
    DELETE_CACHE.put("key-index", (path, size, index.rows, tuple(key_ids)), lean, lean.nbytes)


def _build_from_file(
    io: FileIO,
    f: IndexedFile,
    ids: tuple[int, ...],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None,
) -> tuple[KeyIndex, str]:
    digest = footer_digest(io, f.path, f.size)
    pf = open_parquet(io, f.path)
    try:
        try:
            file_schema = pyarrow_to_schema(pf.schema_arrow, name_mapping, downcast_ns_timestamp_to_us=True)
        except ValueError as e:
            msg = f"data file {f.path} has no Iceberg field ids and the table has no name mapping: {e}"
            raise CorruptFileError(msg) from e
        names = {file_schema.find_field(i).name for i in ids if i in file_schema.field_ids}
        table = pf.read(columns=[n for n in pf.schema_arrow.names if n in names], use_threads=False)
    except (pa.ArrowInvalid, OSError) as e:
        msg = f"data file {f.path} is truncated or corrupt: {e}"
        raise CorruptFileError(msg) from e
    finally:
        pf.close()
    if table.num_rows != f.rows:
        msg = f"data file {f.path} has {table.num_rows} rows, its manifest entry says {f.rows}"
        raise CorruptFileError(msg)
    cols = equality_key_columns(table, file_schema, ids, field_types, {}, f.constants)
    return build_key_index(cols), digest
