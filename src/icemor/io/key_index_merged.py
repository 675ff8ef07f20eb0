"""Many small data files' exact key indexes merged into one sorted array, searched once a batch."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from icemor.io.key_index_core import ranges

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy.typing as npt

    from icemor.io.key_index_core import KeyIndex

__all__ = ["MergedKeyIndex"]


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
    A file joins the merged index once, from its verified :func:`icemor.io.key_index.key_index`
    (nothing else is read); entries of files no longer asked for are dropped once they
    outnumber the others.
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
        rows, entries = ranges(state.values, q, None)
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
