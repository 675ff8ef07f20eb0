"""The key index of one data file: its key values sorted, each with its row position, and lookups.

Built from the file's key columns (:func:`build_key_index`), or from a verified sidecar
(:mod:`icemor.io.key_index_verify`); the modes, exact and hashed, are described in
:mod:`icemor.io.key_index`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from icemor.exceptions import CorruptFileError
from icemor.io.equality import encode_keys, equal_keys, hash_keys, int_key, take_keys

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.schema import Schema

    from icemor.io.equality import KeyColumns

__all__ = ["POS", "IndexedFile", "KeyIndex", "build_key_index", "indexed", "key_names", "ranges"]

POS = "pos"
"""The positions' column of an index's table (what its sidecar stores), after the key columns ``k0``..."""


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
            return ranges(np.asarray(self.values, dtype=np.int64), q, self.positions, unique=self.unique)
        encoded = encode_keys(keys, self.types)
        if encoded is None:
            return none, none
        assert self.keys is not None
        rows, at = ranges(
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
    """:func:`ranges` for a sorted query, searching the shorter side in the longer one."""
    if len(q) <= len(values):
        return ranges(values, q, positions, unique=unique)
    # each entry's query rows; the query is sorted, so whether a key repeats in it is one pass
    entries, rows = ranges(q, values, None, unique=not bool((q[1:] == q[:-1]).any()))
    return rows, entries if positions is None else positions[entries]


def ranges(
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


def build_key_index(columns: Sequence[pa.Array | pa.ChunkedArray]) -> KeyIndex:
    """The index of key columns given in file row order (row i is position i)."""
    cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    n = len(cols[0])
    positions = np.arange(n, dtype=np.int64)
    return indexed(cols, positions)


def indexed(cols: list[pa.Array], positions: npt.NDArray[np.int64]) -> KeyIndex:
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
    return pa.table({**{f"k{i}": c for i, c in enumerate(cols)}, POS: pa.array(positions, pa.int64())})


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


def key_names(file_schema: Schema, ids: Sequence[int]) -> list[str]:
    """The data file's top-level columns that hold key fields ``ids`` (in the file's order)."""
    names = {file_schema.find_field(i).name for i in ids if i in file_schema.field_ids}
    return [f.name for f in file_schema.fields if f.name in names]
