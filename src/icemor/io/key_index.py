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
data file (path, size, row count), the key field ids, the format version, a SHA-256 of the
data file's Parquet footer (its schema, row groups, column chunk offsets, sizes and statistics)
and a SHA-256 of its own rows (keys and positions in index order). On load the data file's
footer is read again (one small read) and must hash alike, the row count must match, the
positions must be a permutation of ``0 .. rows - 1``, the rows must hash to the recorded
digest, and the sidecar's own pages carry CRCs; then it is checked against the data file
itself, cheaply: for one integer-like key, its least and greatest keys must be the footer's
statistics of the key column, and the keys of a slice of the file's rows (up to
:data:`_SAMPLE_ROWS` at the start of a row group chosen at random) must be at those positions
in the index. ``icemor check`` checks every row (:func:`verify_sidecar`). An index that fails
any check, or cannot be read, is rebuilt from the data file (and stored again), with one
warning. A sidecar edited with its metadata kept fails the digest; one forged whole (digest
recomputed) with shifted keys fails the bounds or the slice. A file rewritten in place with
the same footer byte for byte (the same row groups, sizes and statistics), which no Iceberg
writer does, is caught by the slice only where it differs there. In a process the index is
kept in :data:`icemor.io.cache.DELETE_CACHE` (kind ``key-index``), keyed by path, size and row
count.

**Sidecar files are opened with care.** On a local disk, only a regular file at a sidecar's
path is read (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``): a symlink there
is never followed, a FIFO or device never opened for reading (a FIFO would block forever);
such a file is not used, and is replaced by the rebuilt sidecar. A sidecar is written into a
new temporary file beside it (``O_CREAT | O_EXCL | O_NOFOLLOW``), flushed to disk and renamed
over the sidecar's path: a rename replaces a symlink (or FIFO) itself, never its target, and a
reader sees the old sidecar or the new one, whole. On object stores (no symlinks, no FIFOs)
a sidecar is one object, written from memory in one piece.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import re
import secrets
import stat
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO, pyarrow_to_schema

from icemor.exceptions import CorruptFileError, IcemorError
from icemor.io.cache import DELETE_CACHE
from icemor.io.columns import equality_key_columns
from icemor.io.deletes import local_path, open_parquet, reaching
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
    "sidecar_key_ids",
    "sidecar_path",
    "verify_sidecar",
]

_log = logging.getLogger(__name__)

FORMAT = 2
"""The sidecar's layout and meaning; an index of another format is rebuilt, never read (2: the
SHA-256 of its rows is recorded, ``keys-sha256``)."""
SIDECAR_SUFFIX = ".icemor-keys.parquet"
_TEMP_TAIL = re.compile(r"\.[0-9a-f]{16}\.tmp$")
"""What a sidecar's temporary file adds to its name (:func:`_replace_local`)."""
_SAMPLE_ROWS = 4096
"""Rows of the data file whose keys are checked against a sidecar loaded (one slice)."""
_RANDOM = random.Random()  # which row group is sampled: not predictable by whoever writes a sidecar
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
    """The data file a sidecar path belongs to, or None when ``sidecar`` is not one.

    A sidecar's temporary file (``<sidecar>.<16 hex digits>.tmp``, left by a process killed while
    writing it) belongs to the data file too: expiry and orphan removal take it with the file.
    """
    parsed = _parse_sidecar(_TEMP_TAIL.sub("", sidecar))
    return None if parsed is None else parsed[0]


def sidecar_key_ids(sidecar: str) -> tuple[int, ...] | None:
    """The key field ids of a sidecar path (not of a temporary file), or None when it is not one."""
    parsed = _parse_sidecar(sidecar)
    return None if parsed is None else parsed[1]


def _parse_sidecar(sidecar: str) -> tuple[str, tuple[int, ...]] | None:
    directory, _, name = sidecar.rpartition("/")
    if not (name.startswith(".") and name.endswith(SIDECAR_SUFFIX)):
        return None
    stem = name[1 : -len(SIDECAR_SUFFIX)]
    base, dot, ids = stem.rpartition(".k")
    parts = ids.split("-")
    if not dot or not base or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return f"{directory}/{base}", tuple(int(p) for p in parts)


def footer_digest(io: FileIO, path: str, size: int) -> str:
    """SHA-256 of the Parquet footer of ``path`` (its file metadata), read from the file's end.

    Raises:
        MissingFileError: The file cannot be opened.
        CorruptFileError: It does not end like a Parquet file of ``size`` bytes.
    """
    return hashlib.sha256(_footer(io, path, size)).hexdigest()


def _footer(io: FileIO, path: str, size: int) -> bytes:
    """The Parquet footer (file metadata) of ``path``, read from the file's end."""
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
        footer: bytes = f.read(length)
    if len(footer) != length:
        msg = f"data file {path} is truncated (its footer is incomplete)"
        raise CorruptFileError(msg)
    return footer


def _identity(path: str, size: int, rows: int, key_ids: Sequence[int], digest: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "data-file": path,
        "size": size,
        "rows": rows,
        "key-ids": list(key_ids),
        "footer-sha256": digest,
    }


def _keys_digest(table: pa.Table) -> str:
    """SHA-256 of a sidecar's rows (each key column, then ``pos``, in index order), over their
    canonical form (:func:`icemor.io.equality.encode_keys`): alike for the columns written and
    the columns read back, whatever their chunks, offsets or NULL slots hold."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(f"{name}:{col.type}:{len(col)}:{col.null_count};".encode())
        encoded = encode_keys([col])
        if encoded is None:
            msg = f"key column of type {col.type} cannot be indexed"
            raise CorruptFileError(msg)
        e = encoded[0]
        if e.valid is not None:
            h.update(np.packbits(e.valid).tobytes())
        if e.words is not None:
            h.update(np.ascontiguousarray(e.words).data)
            continue
        assert e.values is not None
        values = e.values.cast(pa.large_binary())
        if values.null_count:
            values = values.fill_null(pa.scalar(b"", pa.large_binary()))
        buffers = values.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64, count=len(values) + 1, offset=values.offset * 8)
        start, stop = int(offsets[0]), int(offsets[-1])
        h.update((offsets - start).data)
        if buffers[2] is not None:
            h.update(memoryview(buffers[2])[start:stop])
    return h.hexdigest()


def save_key_index(
    io: FileIO, path: str, size: int, key_ids: Sequence[int], index: KeyIndex, *, digest: str | None = None
) -> str | None:
    """Store ``index`` as the sidecar of data file ``path``; returns its path, or None if it could
    not be written (only the next lookup's time is lost; nothing of it is left behind).

    The file is written whole or not at all: on a local disk into a new temporary file beside it,
    then renamed over the sidecar's path (a rename replaces a symlink, FIFO or device found
    there, never what it points to); elsewhere (object stores) as one object.
    """
    rows = index.rows
    location = sidecar_path(path, key_ids)
    local = _local(io, location)
    try:
        digest = digest or footer_digest(io, path, size)
        assert index.columns is not None
        identity = {
            **_identity(path, size, rows, key_ids, digest),
            "keys-sha256": _keys_digest(index.columns),
        }
        table = index.columns.replace_schema_metadata({_META: json.dumps(identity, sort_keys=True).encode()})
        deltas = [
            name
            for name, t in zip(table.column_names, table.schema.types, strict=True)
            if pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)
        ]
        sink = pa.BufferOutputStream()
        pq.write_table(
            table,
            sink,
            compression="zstd",
            # sorted integers and positions: deltas of a few bits each
            use_dictionary=[c for c in table.column_names if c not in deltas],
            column_encoding=dict.fromkeys(deltas, "DELTA_BINARY_PACKED"),
            write_page_checksum=True,
        )
        data = sink.getvalue()
        if local is not None:
            _replace_local(local, data)
        else:
            with io.new_output(location).create(overwrite=True) as out:
                out.write(data)
    except (OSError, pa.ArrowException, IcemorError) as e:
        _log.debug("key index of %s not stored: %s", path, e)
        if local is None:
            with contextlib.suppress(OSError):
                io.delete(location)
        return None
    return location


def _local(io: FileIO, path: str) -> str | None:
    """The local path of ``path`` when ``io`` keeps it on the local disk (pyarrow's or fsspec's
    FileIO, a ``file:`` or plain path), where symlinks, FIFOs and devices exist; else None."""
    local = local_path(io, path)
    if local is None and (isinstance(io, PyArrowFileIO) or type(io).__module__ == "pyiceberg.io.fsspec"):
        scheme, netloc, where = PyArrowFileIO.parse_location(path)
        local = where if scheme == "file" and not netloc else None
    return local


def _replace_local(local: str, data: pa.Buffer) -> None:
    """Write ``data`` to a new file beside ``local`` (never an existing one: ``O_EXCL``, no
    symlink followed), then rename it over ``local``; on failure remove it."""
    temp = f"{local}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # no fsync: a sidecar torn by a crash fails its digest on load and is rebuilt, and a
            # CDC batch writes one per new data file
        finally:
            os.close(fd)
        os.replace(temp, local)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _read_local(local: str) -> bytes | None:
    """The bytes of the regular file at ``local``; None when there is none.

    Raises:
        _Unfit: Something else is there (a symlink, FIFO, device, directory): never followed,
            never read (a FIFO would block the read forever).
    """
    try:
        mode = os.lstat(local).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        msg = "it is not a regular file (a symlink, FIFO, device or directory): not followed or read"
        raise _Unfit(msg)
    # a file swapped for a symlink or FIFO since: O_NOFOLLOW fails, O_NONBLOCK does not wait
    fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            msg = "it is not a regular file: not read"
            raise _Unfit(msg)
        chunks = []
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _Unfit(Exception):
    """A sidecar found at its path, naming its data file or not readable, that is not used: it
    does not describe the data file (forged, damaged, or not a regular file)."""

    def __str__(self) -> str:
        return " ".join(super().__str__().split())  # one line (pyarrow's messages may have more)


class _DataUnreadable(Exception):
    """The data file cannot be read to check its sidecar (a problem of the data file, not the
    sidecar's: the build from the data file reports it)."""


def _open_sidecar(io: FileIO, location: str) -> pq.ParquetFile | None:
    """The sidecar at ``location`` opened (read whole, from a regular file if local), or None."""
    local = _local(io, location)
    if local is None:
        if not io.new_input(location).exists():
            return None
        return open_parquet(io, location, what="key index")
    raw = _read_local(local)
    if raw is None:
        return None
    return pq.ParquetFile(pa.BufferReader(raw), page_checksum_verification=True)


def _load_sidecar(
    io: FileIO,
    f: IndexedFile,
    key_ids: Sequence[int],
    types: Sequence[pa.DataType],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None,
    *,
    full: bool = False,
) -> KeyIndex | None:
    """The stored index of ``f`` if it verifies against the data file (see the module).

    ``full``: every row of the data file is checked against it (``icemor check``), not a sample.
    Returns None when there is no sidecar of this very file (none, of another format, naming
    another file or another footer: harmless, rebuilt); raises :class:`_Unfit` for one naming
    this file that does not verify.
    """
    location = sidecar_path(f.path, key_ids)
    try:
        pf = _open_sidecar(io, location)
        if pf is None:
            return None
        try:
            stored = json.loads((pf.metadata.metadata or {}).get(_META, b"{}"))
            if not isinstance(stored, dict):
                return None
            keys_digest = stored.pop("keys-sha256", None)
            footer_sha = stored.get("footer-sha256", "")
            if stored != _identity(f.path, f.size, f.rows, key_ids, footer_sha):
                return None
            try:
                footer = _footer(io, f.path, f.size)
            except IcemorError as e:  # the data file's own problem: the build says it
                _log.debug("key index %s not used: %s", location, e)
                return None
            if footer_sha != hashlib.sha256(footer).hexdigest():
                return None
            table = pf.read(use_threads=False)
        finally:
            pf.close()
    except _Unfit:
        raise
    except (OSError, pa.ArrowException, IcemorError, ValueError) as e:
        msg = f"it cannot be read: {e}"
        raise _Unfit(msg) from e
    names = [f"k{i}" for i in range(len(key_ids))]
    if table.num_rows != f.rows or table.column_names != [*names, _POS]:
        msg = f"it has {table.num_rows} rows of columns {table.column_names}, not the data file's"
        raise _Unfit(msg)
    positions = np.asarray(table.column(_POS).to_numpy(), dtype=np.int64)
    if not _permutation(positions, f.rows):
        msg = "its positions are not a permutation of the data file's rows"
        raise _Unfit(msg)
    cols = []
    for name, t in zip(names, types, strict=True):
        c = table.column(name).combine_chunks()
        if c.type != t:
            msg = f"its key column {name} is of type {c.type}, not {t}"
            raise _Unfit(msg)
        cols.append(c)
    try:
        if keys_digest != _keys_digest(table):
            msg = "its rows do not hash to the SHA-256 of the keys it records"
            raise _Unfit(msg)
        index = _indexed(cols, positions)
    except (pa.ArrowException, IcemorError, ValueError) as e:
        msg = f"its keys cannot be indexed: {e}"
        raise _Unfit(msg) from e
    _verify_against(io, f, key_ids, field_types, name_mapping, index, footer, full=full)
    return index


def _verify_against(
    io: FileIO,
    f: IndexedFile,
    ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None,
    index: KeyIndex,
    footer: bytes,
    *,
    full: bool,
) -> None:
    """Check ``index`` against the data file ``f`` (whose Parquet footer is ``footer``): its key
    bounds against the footer's statistics (one integer-like key), and the keys at a slice of
    positions (up to :data:`_SAMPLE_ROWS` at the start of a row group chosen at random; every
    position when ``full``) against the data file's.

    Raises:
        _Unfit: The index does not describe the data file.
        _DataUnreadable: The data file cannot be read (the build says why).
    """
    try:
        metadata = pq.read_metadata(
            pa.BufferReader(b"PAR1" + footer + len(footer).to_bytes(4, "little") + b"PAR1")
        )
        with reaching("data file", f.path):
            stream = io.new_input(f.path).open()
        try:
            pf = pq.ParquetFile(stream, metadata=metadata, page_checksum_verification=True)
            try:
                file_schema = pyarrow_to_schema(
                    pf.schema_arrow, name_mapping, downcast_ns_timestamp_to_us=True
                )
            except ValueError as e:
                msg = f"data file {f.path} has no Iceberg field ids and the table has no name mapping: {e}"
                raise CorruptFileError(msg) from e
            names = _key_names(pf, file_schema, ids)
            if index.exact and len(names) == 1:
                _check_bounds(metadata, pf.schema_arrow.field(names[0]).type, names[0], index)
            start = 0
            if full:
                table: pa.Table | pa.RecordBatch = pf.read(columns=names, use_threads=False)
            elif metadata.num_row_groups:
                group = _RANDOM.randrange(metadata.num_row_groups)
                start = sum(metadata.row_group(g).num_rows for g in range(group))
                batches = pf.iter_batches(
                    batch_size=_SAMPLE_ROWS, row_groups=[group], columns=names, use_threads=False
                )
                table = next(iter(batches), pa.table({}))
            else:
                return
        finally:
            stream.close()
        cols = equality_key_columns(table, file_schema, ids, field_types, {}, f.constants)
    except (OSError, pa.ArrowException, IcemorError, ValueError, KeyError) as e:
        msg = f"data file {f.path} could not be read to check its key index: {e}"
        raise _DataUnreadable(msg) from e
    bad = _mismatches(index, cols, start)
    if bad is not None:
        msg = f"it maps the key of position {bad} of the data file elsewhere (the key is not the file's)"
        raise _Unfit(msg)


def _key_names(pf: pq.ParquetFile, file_schema: Any, ids: Sequence[int]) -> list[str]:
    """The data file's top-level columns that hold key fields ``ids`` (in the file's order)."""
    names = {file_schema.find_field(i).name for i in ids if i in file_schema.field_ids}
    return [n for n in pf.schema_arrow.names if n in names]


def _check_bounds(metadata: pq.FileMetaData, file_type: pa.DataType, name: str, index: KeyIndex) -> None:
    """The least and greatest keys of an exact index are the data file's column bounds (its
    footer's statistics), where the file has statistics of the column as stored in the index."""
    t = index.types[0]
    if not len(index.values) or not (
        file_type == t or (pa.types.is_signed_integer(file_type) and pa.types.is_signed_integer(t))
    ):
        return
    column = next((j for j in range(metadata.num_columns) if metadata.schema.column(j).path == name), None)
    if column is None:
        return
    lo: int | None = None
    hi: int | None = None
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if not group.num_rows:
            continue
        s = group.column(column).statistics
        if s is None or not s.has_min_max or not isinstance(s.min_raw, int) or not isinstance(s.max_raw, int):
            return  # no bounds to compare with: the sample still checks
        lo = s.min_raw if lo is None else min(lo, s.min_raw)
        hi = s.max_raw if hi is None else max(hi, s.max_raw)
    least, greatest = int(index.values[0]), int(index.values[-1])
    if lo is not None and hi is not None and (lo, hi) != (least, greatest):
        msg = f"its keys span [{least}, {greatest}], the data file's statistics say [{lo}, {hi}]"
        raise _Unfit(msg)


def _mismatches(index: KeyIndex, cols: Sequence[pa.Array | pa.ChunkedArray], start: int) -> int | None:
    """The first position in ``start .. start + len(cols[0])`` whose key in the data file
    (``cols``, those rows) is not the index's at that position, or None when all are."""
    n = len(cols[0]) if cols else 0
    if not n:
        return None
    stop = start + n
    if stop > index.rows:  # more rows than the manifest entry says: not this index's file
        return index.rows
    if index.positions is None:
        entries = np.arange(start, stop, dtype=np.int64)
    else:  # the entry holding each position (the positions are a permutation)
        inside = np.flatnonzero((index.positions >= start) & (index.positions < stop))
        entries = np.empty(n, dtype=np.int64)
        entries[index.positions[inside] - start] = inside
    if index.exact:
        col = cols[0]
        q = int_key(col.cast(index.types[0]) if col.type != index.types[0] else col)
        if q is None:  # NULLs in the file: it cannot be exact
            return start
        same = np.asarray(index.values, dtype=np.int64)[entries] == q
    else:
        encoded = encode_keys(cols, index.types)
        if encoded is None or index.keys is None:
            return start
        same = equal_keys(encoded, np.arange(n, dtype=np.int64), index.keys, entries)
    wrong = np.flatnonzero(~same)
    return int(start + wrong[0]) if len(wrong) else None


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
    ids = tuple(key_ids)
    types = _arrow_types(field_types, ids)

    def load() -> tuple[KeyIndex, int]:
        stored = None
        if f.store:
            try:
                stored = _load_sidecar(io, f, ids, types, field_types, name_mapping)
            except _Unfit as e:
                _log.warning(
                    "key index %s not used, rebuilt from its data file: %s", sidecar_path(f.path, ids), e
                )
            except _DataUnreadable as e:
                _log.debug("key index of %s not checked: %s", f.path, e)
        if stored is None:
            built, digest = _build_from_file(io, f, ids, field_types, name_mapping)
            if f.store:
                save_key_index(io, f.path, f.size, ids, built, digest=digest)
            stored = built
        index = stored.lean()
        return index, index.nbytes

    return DELETE_CACHE.get_or_load("key-index", (f.path, f.size, f.rows, ids), load)


def verify_sidecar(
    io: FileIO,
    f: IndexedFile,
    key_ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None = None,
) -> str | None:
    """Check the sidecar of ``f`` on ``key_ids`` fully, every key against the data file (``icemor
    check``): what is wrong with it, or None when it verifies or a lookup would not use it
    anyway (there is none, or it is of another format or names another file or footer)."""
    ids = tuple(key_ids)
    try:
        _load_sidecar(io, f, ids, _arrow_types(field_types, ids), field_types, name_mapping, full=True)
    except _Unfit as e:
        return str(e)
    except _DataUnreadable:
        return None  # the data file's own problem: the check reports it as such
    return None


def _arrow_types(field_types: Mapping[int, IcebergType], ids: Sequence[int]) -> tuple[pa.DataType, ...]:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return tuple(schema_to_pyarrow(field_types[i], include_field_ids=False) for i in ids)


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
        table = pf.read(columns=_key_names(pf, file_schema, ids), use_threads=False)
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
