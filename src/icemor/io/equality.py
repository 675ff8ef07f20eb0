"""Equality-delete probing: is a data row equal, on the equality columns, to any delete row?

NULL-safe throughout (a NULL delete value matches a NULL data value). Velox's design (its
equality-delete reader) is the guide: the delete set is built once per process and probed per batch without
per-row Python. Strategies, chosen per equality-id set when it is built:

- one integer-like column over a dense range: a direct-mapped boolean table (a 10 M-row
  batch probes in tens of milliseconds);
- anything else (strings, binary, decimals, floats, sparse integers, several columns,
  nested-field indicators): a hash index built once. Each key row gets a 64-bit hash computed
  with numpy over the Arrow buffers (strings: 8-byte words read straight from the data
  buffer); the distinct keys are stored sorted by hash, with a bit filter and a bucket
  directory on the hash's top bits. A batch is hashed the same way, filtered, looked up in its
  bucket, and every hash match is verified by comparing the actual values, so collisions cost
  time, never correctness;
- key types numpy cannot hash (none Iceberg allows today): Arrow's hash join, as before.

A first read in a new process pays the build and the probe of every row, so both
are kept lean: the dense table is built without sorting; long string/binary keys are hashed on
the few 8-byte words that tell them apart (chosen on a sample, checked on every key; whole
values otherwise) and stay in their per-file chunks; buckets are scanned slot by slot instead of
expanding (row, key) pairs. Per 1 M rows of 72-character keys against 1 M keys: probe
~80 -> 45 ms, warm; build 0.17-0.4 -> 0.08-0.25 s in a new process.

Why (measured with 1 M 72-char string keys, 128k-row batches with 10 % hits, 2 busy cores):
Arrow's join rebuilds its hash table from the 1 M keys for every batch (1.4 s a batch), and so
does ``pc.is_in``/``pc.index_in`` with a value set (0.29 s a batch; passing the same
``SetLookupOptions`` again caches nothing). pyiceberg-core's murmur3 ``bucket`` transform hashes
a batch in 30 ms; numpy over the buffers in 2-3 ms (a strided matrix product when all strings
have one length). Looking the hashes up: ``np.searchsorted`` in the 1 M sorted hashes 27 ms,
the bit filter + buckets 1-2 ms. Whole probe: 7-10 ms a batch (0.6-0.8 s for 10 M rows, was
~100 s), build 0.1-0.2 s (the join's group-by 2 s), 94 MiB of which the key strings are 80.
A sorted array with binary search, formerly used for one sparse integer or float column, took
5-28 ms a batch against 3-4 ms. polars/duckdb (not dependencies) were not tried: numpy
already leaves the probe a fraction of Parquet decoding. ``benchmarks/bench_equality.py``
measures this.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

__all__ = ["EqualityDeleteSet"]

_DENSE_MAX_RANGE = 1 << 28  # 256 MiB of booleans at most
_ROW = "__icemor_row"

_U64 = np.uint64
_M1 = _U64(0x9E3779B97F4A7C15)  # odd multipliers (golden ratio, murmur3's fmix64)
_M2 = _U64(0xFF51AFD7ED558CCD)
_M3 = _U64(0xC4CEB9FE1A85EC53)
_NULL_HASH = _U64(0x5BD1E9955BD1E995)  # the per-column hash of a NULL: any constant will do
_WORD_CAP = 32  # words of a string hashed one numpy pass each; longer tails are hashed in one go
# byte masks for the last, partial word of a string: _TAIL_MASK[r] keeps its first r bytes
_TAIL_MASK = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], dtype=np.uint64)

# Test hook: AND-ed into every row hash when set, to force collisions (0 makes all rows collide).
_HASH_MASK: int | None = None


_INT_LIKE = (
    pa.types.is_integer,
    pa.types.is_date,
    pa.types.is_timestamp,
    pa.types.is_time,
    pa.types.is_duration,
)
# variable-width binary or string (any offset width): hashed and compared by their bytes
_BYTES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)


def _int_like(t: pa.DataType) -> bool:
    return any(is_kind(t) for is_kind in _INT_LIKE)


def _is_bytes(t: pa.DataType) -> bool:
    return any(is_kind(t) for is_kind in _BYTES)


def _is_bytes_or_view(t: pa.DataType) -> bool:
    return _is_bytes(t) or bool(pa.types.is_string_view(t) or pa.types.is_binary_view(t))


def _as_int64(arr: pa.Array) -> npt.NDArray[np.int64]:
    """Non-null values of an integer-like or float array as int64 (floats: canonical bits)."""
    t = arr.type
    if pa.types.is_floating(t):
        f = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
        f = np.where(np.isnan(f), np.float64("nan"), f)  # canonical NaN, like doubleToLongBits
        return np.asarray(f.view(np.int64))
    if pa.types.is_integer(t):
        return np.asarray(arr.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    as_int = arr.view(pa.int64() if t.bit_width == 64 else pa.int32()).cast(pa.int64())
    return np.asarray(as_int.to_numpy(zero_copy_only=False), dtype=np.int64)


class EqualityDeleteSet:
    """The union of delete rows of equality delete files sharing one set of equality ids."""

    def __init__(self, keys: Sequence[pa.ChunkedArray | pa.Array]) -> None:
        """Build from key columns (one per equality id, same length), duplicates allowed."""
        self.width = len(keys)
        self.num_rows = len(keys[0]) if keys else 0
        self._mode = "empty" if self.num_rows == 0 else "hash"
        self._types = [c.type for c in keys]
        if self._mode != "empty" and self.width == 1 and _int_like(keys[0].type):
            self._try_dense(keys[0])
        if self._mode == "hash":
            # string/binary keys stay in their chunks (one per delete file): joining 1 M
            # 72-character keys into one array was a fifth of building the set in a new process
            cols = [
                c.combine_chunks() if isinstance(c, pa.ChunkedArray) and not _is_bytes(c.type) else c
                for c in keys
            ]
            encoded = [_encode(c) for c in cols]
            if any(e is None for e in encoded):
                self._mode = "join"
                self._keys = self._join_table(cols)
                self.nbytes = self._keys.nbytes
            else:
                self._index = _HashIndex([e for e in encoded if e is not None], self.num_rows)
                self.nbytes = self._index.nbytes
        if self._mode == "empty":
            self.nbytes = 0

    def _try_dense(self, col: pa.Array | pa.ChunkedArray) -> None:
        """Build the direct-mapped table when the non-NULL keys span a range small enough.

        No sort, no np.unique (0.1-1 s for 1 M keys) and no joined copy: the chunks' minima and
        maxima decide, duplicates count as keys in the size bound (at most 16 bytes a key row).
        """
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        parts = [v for v in (_as_int64(c.drop_null()) for c in chunks) if len(v)]
        if not parts:
            return
        lo = min(int(v.min()) for v in parts)
        hi = max(int(v.max()) for v in parts)
        if hi - lo >= min(_DENSE_MAX_RANGE, max(1 << 16, 16 * sum(len(v) for v in parts))):
            return
        self._mode = "dense"
        self._match_null = col.null_count > 0
        self._lo = lo
        # one False slot past the range: where every value outside the range looks
        self._table = np.zeros(hi - lo + 2, dtype=bool)
        for v in parts:
            self._table[v - lo] = True
        self.nbytes = self._table.nbytes

    @staticmethod
    def _join_table(cols: Sequence[pa.Array]) -> pa.Table:
        """Distinct delete keys, null-safe, ready to be the build side of a semi join."""
        data: dict[str, pa.Array] = {}
        for i, c in enumerate(cols):
            data[f"k{i}"], data[f"n{i}"] = _null_safe(c)
        return pa.table(data).group_by(list(data)).aggregate([])

    def matches(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> npt.NDArray[np.bool_]:
        """Boolean mask: True where the row equals some delete row on every equality column."""
        n = len(columns[0]) if columns else 0
        if self._mode == "empty" or n == 0:
            return np.zeros(n, dtype=bool)
        cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
        if self._mode == "dense":
            col = cols[0]
            valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else None
            # below the range wraps to a huge unsigned offset: both sides clip to the False slot
            idx = (_as_int64(col.fill_null(0) if valid is not None else col) - self._lo).view(np.uint64)
            np.minimum(idx, _U64(len(self._table) - 1), out=idx)
            hit = self._table[idx.view(np.int64)]
            if valid is not None:
                hit &= valid
                if self._match_null:
                    hit |= ~valid
            return hit
        if self._mode == "hash":
            probe = [_encode(_like(c, t)) for c, t in zip(cols, self._types, strict=True)]
            if any(e is None for e in probe):
                return np.zeros(n, dtype=bool)  # a type no key column can equal
            return self._index.matches([e for e in probe if e is not None], n)
        return self._join_matches(cols, n)

    def _join_matches(self, cols: Sequence[pa.Array], n: int) -> npt.NDArray[np.bool_]:
        probe: dict[str, pa.Array] = {}
        for i, c in enumerate(cols):
            probe[f"k{i}"], probe[f"n{i}"] = _null_safe(
                c if c.type == self._types[i] else c.cast(self._types[i])
            )
        probe[_ROW] = pa.array(np.arange(n, dtype=np.int64))
        keys = [f"k{i}" for i in range(self.width)] + [f"n{i}" for i in range(self.width)]
        matched = pa.table(probe).join(self._keys, keys=keys, join_type="left semi", use_threads=False)
        hit = np.zeros(n, dtype=bool)
        hit[matched.column(_ROW).to_numpy()] = True
        return hit


# --- column encodings -------------------------------------------------------------------------


class _Encoded:
    """One key column ready to hash and compare: fixed-width values as uint64 words, or bytes.

    ``words`` (n, k): the canonical value of each row (integers widened to int64, floats as
    Java's doubleToLongBits, decimals and fixed binary as little-endian words), 0 where NULL.
    ``values``: a binary/string array (hashed from its buffers, compared with Arrow).
    """

    __slots__ = ("valid", "values", "words")

    def __init__(
        self,
        valid: npt.NDArray[np.bool_] | None,
        words: npt.NDArray[np.uint64] | None = None,
        values: pa.Array | None = None,
    ) -> None:
        self.valid = valid  # None: no NULLs
        self.words = words
        self.values = values

    def take(self, rows: npt.NDArray[np.int64]) -> _Encoded:
        return _Encoded(
            None if self.valid is None else self.valid[rows],
            None if self.words is None else self.words[rows],
            None if self.values is None else _take(self.values, rows),
        )

    def slice(self, start: int, stop: int) -> _Encoded:
        """Rows ``start:stop`` without copying."""
        return _Encoded(
            None if self.valid is None else self.valid[start:stop],
            None if self.words is None else self.words[start:stop],
            None if self.values is None else self.values.slice(start, stop - start),
        )

    @property
    def nbytes(self) -> int:
        return int(
            (0 if self.valid is None else self.valid.nbytes)
            + (0 if self.words is None else self.words.nbytes)
            + (0 if self.values is None else self.values.nbytes)
        )


def _by_chunk(
    values: pa.Array | pa.ChunkedArray, rows: npt.NDArray[np.int64]
) -> list[tuple[npt.NDArray[np.int64] | slice, pa.Array, npt.NDArray[np.int64]]]:
    """``rows`` of ``values`` grouped by chunk: (which of ``rows``, the chunk, rows within it)."""
    if not isinstance(values, pa.ChunkedArray):
        return [(slice(None), values, rows)]
    if values.num_chunks == 1:
        return [(slice(None), values.chunk(0), rows)]
    lengths = np.array([len(c) for c in values.chunks], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    chunk_of = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(chunk_of, kind="stable").astype(np.int64)
    bounds = np.searchsorted(chunk_of[order], np.arange(values.num_chunks + 1))
    groups: list[tuple[npt.NDArray[np.int64] | slice, pa.Array, npt.NDArray[np.int64]]] = []
    for c in range(values.num_chunks):
        if bounds[c + 1] > bounds[c]:
            pairs = order[bounds[c] : bounds[c + 1]]
            groups.append((pairs, values.chunk(c), rows[pairs] - starts[c]))
    return groups


def _take(values: pa.Array | pa.ChunkedArray, rows: npt.NDArray[np.int64]) -> pa.Array:
    """``values[rows]`` as one array. A chunked array is taken from chunk by chunk: pyarrow's own
    ``ChunkedArray.take`` joined the chunks first (12 ms for 20k of 1 M 72-character keys)."""
    groups = _by_chunk(values, rows)
    if len(groups) == 1 and isinstance(groups[0][0], slice):
        return groups[0][1].take(pa.array(groups[0][2]))
    if not groups:
        return pa.array([], type=values.type)
    grouped = pa.concat_arrays([chunk.take(pa.array(local)) for _, chunk, local in groups])
    back = np.empty(len(rows), dtype=np.int64)
    back[np.concatenate([pairs for pairs, _, _ in groups])] = np.arange(len(rows), dtype=np.int64)
    return grouped.take(pa.array(back))


def _like(col: pa.Array, key_type: pa.DataType) -> pa.Array:
    """``col`` cast to the key column's type unless both already share one canonical form."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    same = (
        t == key_type
        or (pa.types.is_integer(t) and pa.types.is_integer(key_type))
        or (pa.types.is_floating(t) and pa.types.is_floating(key_type))
        or (_is_bytes_or_view(t) and _is_bytes_or_view(key_type))
        or (pa.types.is_timestamp(t) and pa.types.is_timestamp(key_type) and t.unit == key_type.unit)
    )
    return col if same else col.cast(key_type)


def _encode(col: pa.Array) -> _Encoded | None:
    """The canonical form of a key column, or None for a type this module cannot hash."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    n = len(col)
    valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else None
    if pa.types.is_null(t):
        return _Encoded(np.zeros(n, dtype=bool), words=np.zeros((n, 1), dtype=np.uint64))
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        col = col.cast(pa.large_binary())  # hashed from offsets + data, which views do not have
        t = col.type
    if _is_bytes(t):
        return _Encoded(valid, values=col)
    if _int_like(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        if pa.types.is_boolean(t):
            filled = col.fill_null(False) if valid is not None else col
            ints = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int64)
        else:
            ints = _as_int64(col.fill_null(0) if valid is not None else col)
        words = ints.view(np.uint64).reshape(n, 1)
    elif pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        width = t.byte_width
        raw = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=n * width, offset=col.offset * width)
        k = (width + 7) // 8
        padded = np.zeros((n, k * 8), dtype=np.uint8)
        padded[:, :width] = raw.reshape(n, width)
        words = padded.view(np.uint64)
    else:
        return None
    if valid is not None:
        words = np.where(valid[:, None], words, _U64(0))
    return _Encoded(valid, words=np.ascontiguousarray(words, dtype=np.uint64))


# --- hashing --------------------------------------------------------------------------------


def _step(h: npt.NDArray[np.uint64], w: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Fold one word into running hashes (in place): a bijection of h for a fixed w and of w
    for a fixed h, so two inputs differing in one word never collide."""
    h ^= w
    h *= _M1
    h ^= h >> _U64(29)
    return h


def _fmix(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """murmur3's 64-bit finaliser (in place): every input bit reaches every output bit."""
    h ^= h >> _U64(33)
    h *= _M2
    h ^= h >> _U64(33)
    h *= _M3
    h ^= h >> _U64(33)
    return h


def _bytes_buffers(arr: pa.Array) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32 | np.int64]]:
    """(data bytes, offsets of the n rows and the end, int32 or int64 as stored) of a binary/string array."""
    n = len(arr)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    otype = np.int64 if large else np.int32
    bufs = arr.buffers()
    raw: npt.NDArray[np.int32 | np.int64] = np.frombuffer(
        bufs[1], dtype=otype, count=n + 1, offset=arr.offset * otype().itemsize
    )
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, raw


def _same_length(off: npt.NDArray[np.int32 | np.int64]) -> int | None:
    """The length shared by every row of these offsets (rows back to back), or None."""
    n = len(off) - 1
    if n <= 0:
        return None
    length = int(off[1] - off[0])
    if int(off[-1] - off[0]) != n * length or not bool((np.diff(off) == length).all()):
        return None
    return length


def _hash_same_length(
    data: npt.NDArray[np.uint8], first: int, n: int, length: int, words: tuple[int, ...]
) -> npt.NDArray[np.uint64]:
    """:func:`_hash_words` of ``n`` rows of ``length`` bytes back to back from ``first``, ``words`` only
    (each starting inside a row and ending inside the data), each word a strided view: no
    gather, no per-row length."""
    seed = (np.array([length], dtype=np.uint64) * _M2)[0]  # an array op: a scalar's overflow warns
    if not words:
        return np.full(n, seed, dtype=np.uint64)
    windows = np.ndarray((data.size - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    h: npt.NDArray[np.uint64] | None = None
    for j in words:
        view = windows[first + 8 * j :: length][:n]
        # one strided read into a new array, then in place (reading the view twice cost a third more)
        w = view & _TAIL_MASK[length - 8 * j] if 8 * (j + 1) > length else view.copy()
        w = _premix(w)
        w *= _KEYS[j]
        if h is None:
            h = w
        else:
            h += w
    assert h is not None
    h += seed
    return h


def _hash_bytes(arr: pa.Array, words: tuple[int, ...] | None = None) -> npt.NDArray[np.uint64]:
    """Per-row hash of a binary/string array's bytes (not finalised), from its raw buffers.

    ``words``: hash only these 8-byte words of each value (and its length); None: all.
    """
    if isinstance(arr, pa.ChunkedArray):
        parts = [_hash_bytes(chunk, words) for chunk in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    data, raw = _bytes_buffers(arr)
    n = len(arr)
    length = None if words is None else _same_length(raw)
    if words is not None and length is not None:
        inside = [j for j in words if 8 * j < length]  # words past every row's end add nothing
        # a word may run past its row's end (zero-masked), but the last one not past the buffer
        if not inside or int(raw[0]) + (n - 1) * length + 8 * max(inside) + 8 <= data.size:
            return _hash_same_length(data, int(raw[0]), n, length, tuple(inside))
    off = raw.astype(np.int64)
    # words are read 8 bytes at a time, past a string's end: rows ending in the buffer's last
    # 7 bytes are read from a padded copy of their (small) tail instead of copying everything
    safe = int(np.searchsorted(off[1:], data.size - 7, side="right"))
    if safe == n:
        return _hash_words(data, off[:-1], np.diff(off), words)
    tail = np.zeros(int(off[-1] - off[safe]) + 8, dtype=np.uint8)
    tail[: len(tail) - 8] = data[off[safe] : off[-1]]
    return np.concatenate(
        [
            _hash_words(data, off[:safe], np.diff(off[: safe + 1]), words),
            _hash_words(tail, off[safe:-1] - off[safe], np.diff(off[safe:]), words),
        ]
    )


def _position_keys(count: int) -> npt.NDArray[np.uint64]:
    """The odd multiplier of each word position 0..count-1 (a fixed pseudo-random sequence)."""
    k = np.arange(count, dtype=np.uint64) + _M1
    return _fmix(k) | _U64(1)


_KEYS = _position_keys(_WORD_CAP)


def _premix(w: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Fold a word's high half into its low half (in place): a bijection, so that a product
    with an odd multiplier depends on the high bits too."""
    w ^= w >> _U64(32)
    return w


def _hash_words(
    data: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    words: tuple[int, ...] | None = None,
) -> npt.NDArray[np.uint64]:
    """Hash rows ``data[start:start+length]``; ``data`` is readable 7 bytes past every row end.

    Multilinear over 8-byte little-endian words (the last one zero-padded), seeded by the
    length: ``len * M + sum_j premix(word_j) * K_j mod 2**64``, the sum over all words or over
    ``words`` only. Rows differing in one hashed word never collide (premix is a bijection,
    K_j is odd). Every path below computes this same function, so a value hashes alike in the
    delete set and in any batch.
    """
    n = len(start)
    h = length.astype(np.uint64) * _M2
    if n == 0 or data.size < 8:
        return h
    # every 8-byte window of the data as one (overlapping, unaligned) uint64
    windows = np.ndarray((data.size - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    lo_len, hi_len = int(length.min()), int(length.max())
    nwords = (length + 7) >> 3
    # equal lengths (hashes, UUIDs, codes), back to back: word j of every row is a strided view
    regular = lo_len == hi_len > 0 and int(start[-1] - start[0]) == (n - 1) * hi_len
    if regular and words is None and hi_len <= 8 * _WORD_CAP:
        # all words: the rows are a strided (n, words) matrix
        k = int(nwords[0])
        w = np.lib.stride_tricks.as_strided(windows[int(start[0]) :], shape=(n, k), strides=(hi_len, 8))
        w, raw = w >> _U64(32), w
        w ^= raw  # _premix, into one new array instead of two
        if hi_len % 8:
            last = windows[int(start[0]) + 8 * (k - 1) :: hi_len][:n]
            w[:, -1] = _premix(last & _TAIL_MASK[hi_len % 8])
        h += w @ _KEYS[:k]
        return h
    every = range(min((hi_len + 7) >> 3, _WORD_CAP))
    for j in every if words is None else [j for j in words if 8 * j < hi_len]:
        rows: slice | npt.NDArray[np.intp] = slice(None)
        if regular:
            w = windows[int(start[0]) + 8 * j :: hi_len][:n]  # a view: not modified in place
        else:
            if 8 * j >= lo_len:
                rows = np.flatnonzero(nwords > j)  # rows this word is not past the end of
            w = windows[start[rows] + 8 * j]
        if 8 * (j + 1) > lo_len:
            w = w & _TAIL_MASK[np.minimum(length[rows] - 8 * j, 8)]
        raw, w = w, w >> _U64(32)
        w ^= raw  # _premix, into a new array
        w *= _KEYS[j]
        h[rows] += w
    long_rows = np.flatnonzero(nwords > _WORD_CAP) if words is None else nwords[:0]
    if len(long_rows):
        # the words past _WORD_CAP of long strings, all at once: one (row, word) pair each
        counts = nwords[long_rows] - _WORD_CAP
        seg = np.cumsum(counts) - counts
        j = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(seg, counts) + _WORD_CAP
        w = windows[np.repeat(start[long_rows], counts) + 8 * j]
        w &= _TAIL_MASK[np.minimum(np.repeat(length[long_rows], counts) - 8 * j, 8)]
        w = _premix(w)
        w *= _position_keys(int(j.max()) + 1)[j]
        h[long_rows] += np.add.reduceat(w, seg)
    return h


def _row_hash(
    cols: Sequence[_Encoded], words: Sequence[tuple[int, ...] | None] | None = None
) -> npt.NDArray[np.uint64]:
    """One finalised 64-bit hash per row over all key columns, NULL-aware.

    ``words``: per column, the 8-byte words of a string/binary value that are hashed (None: all).
    """
    h: npt.NDArray[np.uint64] | None = None
    for i, c in enumerate(cols):
        if c.values is not None:
            part = _hash_bytes(c.values, None if words is None else words[i])
            if c.valid is not None:
                part[~c.valid] = _NULL_HASH
            h = part if h is None else _step(h, part)  # part is a new array
        else:
            assert c.words is not None
            for k in range(c.words.shape[1]):
                part = c.words[:, k]
                h = np.array(part, dtype=np.uint64) if h is None else _step(h, part)
        if c.values is None and c.valid is not None:
            assert h is not None  # NULL rows only, so a column without NULLs hashes alike
            h[~c.valid] ^= _NULL_HASH
    assert h is not None
    _fmix(h)
    if _HASH_MASK is not None:
        h &= _U64(_HASH_MASK)
    return h


def _equal(
    a: Sequence[_Encoded],
    a_rows: npt.NDArray[np.int64],
    b: Sequence[_Encoded],
    b_rows: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Exact NULL-safe equality of rows ``a_rows`` of ``a`` and ``b_rows`` of ``b``, pairwise."""
    eq = np.ones(len(a_rows), dtype=bool)
    if not len(a_rows):
        return eq
    for ca, cb in zip(a, b, strict=True):
        if not eq.any():
            break
        va = np.ones(len(a_rows), bool) if ca.valid is None else ca.valid[a_rows]
        vb = np.ones(len(b_rows), bool) if cb.valid is None else cb.valid[b_rows]
        if ca.words is not None and cb.words is not None:
            same = (ca.words[a_rows] == cb.words[b_rows]).all(axis=1)
        else:
            assert ca.values is not None and cb.values is not None
            # the pairs grouped by the chunk of their b row: one take from each chunk
            groups = _by_chunk(cb.values, b_rows)
            xa_all = _take(ca.values, np.concatenate([a_rows[pairs] for pairs, _, _ in groups]))
            xa_all = xa_all.cast(pa.large_binary())
            same = np.zeros(len(a_rows), dtype=bool)
            at = 0
            for pairs, chunk, rows in groups:
                xa = xa_all.slice(at, len(rows))
                at += len(rows)
                xb = chunk.take(pa.array(rows)).cast(pa.large_binary())
                same[pairs] = pc.fill_null(pc.equal(xa, xb), False).to_numpy(zero_copy_only=False)
        eq &= (va & vb & same) | (~va & ~vb)
    return eq


_CHUNK = 1 << 16  # key rows hashed at a time: small temporaries, reused instead of page-faulted


def _chunked_row_hash(
    cols: Sequence[_Encoded], n: int, words: Sequence[tuple[int, ...] | None] | None = None
) -> npt.NDArray[np.uint64]:
    """:func:`_row_hash` of all ``n`` rows, a chunk at a time (the same values)."""
    if n <= _CHUNK:
        return _row_hash(cols, words)
    out = np.empty(n, dtype=np.uint64)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        out[lo:hi] = _row_hash([c.slice(lo, hi) for c in cols], words)
    return out


_SOME_WORDS_MIN_BYTES = 16  # mean key length from which hashing only some of its words pays
_WORD_SAMPLE = 4096
_MAX_WORDS = 3


def _telling_words(key: _Encoded) -> tuple[int, ...] | None:
    """The few 8-byte words of a string/binary key column that tell its values apart, or None.

    Hashing all nine words of a 72-character value was most of a probe's cost; for keys like
    ``'comment-' || sha256`` one word (bytes 8-15) already tells them apart, the shared prefix
    none. Chosen greedily on a sample of the keys (at most ``_MAX_WORDS``, while each adds
    distinct values); None when the values are short or no such words tell the sample apart.
    :class:`_HashIndex` checks the choice on every key.
    """
    values = key.values
    if values is None or len(values) == 0:
        return None
    if key.valid is not None:
        values = values.filter(pa.array(key.valid))
    n = len(values)
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    total = 0
    for chunk in chunks:
        _, off = _bytes_buffers(chunk)
        total += int(off[-1] - off[0]) if len(chunk) else 0
    if n == 0 or total < _SOME_WORDS_MIN_BYTES * n:
        return None
    sample = _take(values, np.linspace(0, n - 1, min(n, _WORD_SAMPLE)).astype(np.int64))
    target = len(pc.unique(sample))
    _, soff = _bytes_buffers(sample)
    base = np.diff(soff).astype(np.uint64) * _M2  # the length's part, in every word's hash
    longest = int(np.diff(soff).max())
    per_word = [_hash_bytes(sample, (j,)) - base for j in range(min((longest + 7) // 8, _WORD_CAP))]
    chosen: list[int] = []
    current = base
    for _ in range(_MAX_WORDS):
        best, best_j = -1, -1
        for j, part in enumerate(per_word):
            if j not in chosen:
                distinct = len(np.unique(current + part))
                if distinct > best:
                    best, best_j = distinct, j
        if best_j < 0:
            return None
        chosen.append(best_j)
        current = current + per_word[best_j]
        if best == target:
            return tuple(sorted(chosen))
    return None


_BUCKET_SCAN = 16  # buckets up to this size are scanned slot by slot


class _HashIndex:
    """The distinct key rows sorted by hash, a bit filter and a bucket directory over the hash."""

    def __init__(self, cols: Sequence[_Encoded], n: int) -> None:
        # long string keys: hash only the words that tell them apart, if they do for every key
        self._words: list[tuple[int, ...] | None] | None = [_telling_words(c) for c in cols]
        if not any(self._words):
            self._words = None
        while True:
            h = _chunked_row_hash(cols, n, self._words)
            order = np.argsort(h)  # the order among equal hashes does not matter
            hashes = h[order]
            # exact duplicates share a hash, so they sit next to each other: keep the first of each
            same = np.flatnonzero(hashes[1:] == hashes[:-1]) + 1
            dup = same[_equal(cols, order[same], cols, order[same - 1])] if len(same) else same
            # distinct keys sharing a hash cost every probe row with that hash an exact check:
            # beyond a handful, the chosen words do not tell the keys apart after all
            if self._words is None or len(same) - len(dup) <= max(16, n >> 12):
                break
            self._words = None
        if len(same):
            keep = np.ones(n, dtype=bool)
            keep[dup] = False
            order, hashes = order[keep], hashes[keep]
        # key rows stay where they are (reordering 1 M strings takes 0.1 s) unless many are
        # duplicates: then the distinct ones are copied out in hash order
        self._row_of: npt.NDArray[np.int32 | np.int64] | None = None
        if len(order) < n - n // 4:
            self._cols = [c.take(order) for c in cols]
        else:
            self._cols = list(cols)
            self._row_of = order.astype(np.int32) if n < 2**31 else order
        self._hashes = hashes
        m = len(hashes)
        # about 16 filter bits per key: ~6 % of non-matching rows get past the filter
        self._filter_bits = min(max(int(m).bit_length() + 4, 10), 34)
        top = (hashes >> _U64(64 - self._filter_bits)).astype(np.intp)
        bits = np.zeros(1 << self._filter_bits, dtype=bool)
        bits[top] = True
        self._filter = np.packbits(bits, bitorder="little")
        # about one key per bucket: the bucket of hash h is its top bits, the keys in it a range
        self._bucket_bits = min(max(int(m).bit_length(), 1), 32)
        counts = np.bincount(
            (hashes >> _U64(64 - self._bucket_bits)).astype(np.intp), minlength=1 << self._bucket_bits
        )
        self._starts: npt.NDArray[np.int32 | np.int64] = np.zeros(
            len(counts) + 1, dtype=np.int32 if m < 2**31 else np.int64
        )
        np.cumsum(counts, out=self._starts[1:])
        self.nbytes = (
            sum(c.nbytes for c in self._cols)
            + hashes.nbytes
            + self._filter.nbytes
            + self._starts.nbytes
            + (0 if self._row_of is None else self._row_of.nbytes)
        )

    def matches(self, cols: Sequence[_Encoded], n: int) -> npt.NDArray[np.bool_]:
        h = _row_hash(cols, self._words)
        top = h >> _U64(64 - self._filter_bits)
        byte = self._filter[(top >> _U64(3)).astype(np.intp)]
        cand = np.flatnonzero((byte >> (top & _U64(7)).astype(np.uint8)) & 1)
        hit = np.zeros(n, dtype=bool)
        if len(cand) == 0:
            return hit
        hc = h[cand]
        bucket = (hc >> _U64(64 - self._bucket_bits)).astype(np.intp)
        lo = self._starts[bucket].astype(np.int64)
        counts = self._starts[bucket + 1] - lo
        # every (row, key) pair in the row's bucket whose hashes are equal, then exact checks
        if int(counts.max()) <= _BUCKET_SCAN:
            # buckets hold about one key: look at the k-th key of each bucket that has one, k = 0, 1, ...
            # (np.repeat over the pairs was a fifth of a probe)
            found_rows: list[npt.NDArray[np.int64]] = []
            found_pos: list[npt.NDArray[np.int64]] = []
            live = np.flatnonzero(counts)
            k = 0
            while len(live):
                at = lo[live] + k
                same = self._hashes[at] == hc[live]
                found_rows.append(cand[live[same]])
                found_pos.append(at[same])
                k += 1
                live = live[counts[live] > k]
            rows = np.concatenate(found_rows) if found_rows else cand[:0]
            pos = np.concatenate(found_pos) if found_pos else lo[:0]
        else:
            rows = np.repeat(cand, counts)
            seg = np.cumsum(counts) - counts
            pos = np.repeat(lo - seg, counts) + np.arange(len(rows), dtype=np.int64)
            same = self._hashes[pos] == h[rows]
            rows, pos = rows[same], pos[same]
        if len(rows):
            keys = pos if self._row_of is None else self._row_of[pos].astype(np.int64)
            hit[rows[_equal(cols, rows, self._cols, keys)]] = True
        return hit


def _null_safe(col: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(join-ready values, is-null indicator): NULLs get a filler, floats become canonical bits.

    Floats join by bit pattern with NaN canonicalised, which is Java's ``Double.equals``:
    every NaN equals every NaN, and -0.0 differs from 0.0.
    """
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    is_null = col.is_null()
    if pa.types.is_floating(col.type):
        bits = _as_int64(col.fill_null(0) if col.null_count else col)
        return pa.array(bits, type=pa.int64()), is_null
    if col.null_count == 0:
        return col, is_null
    return pc.if_else(is_null, _filler(col.type), col), is_null


def _filler(t: pa.DataType) -> pa.Scalar:
    """Any valid value of type ``t``: the null indicator, not this value, carries NULL-ness."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_fixed_size_binary(t):
        return pa.scalar(b"\0" * t.byte_width, t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(b"", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False)
    if pa.types.is_decimal(t):
        return pa.scalar(Decimal(0), t)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.array([0], pa.int32()).cast(t)[0]
    return pa.array([0], pa.int64()).cast(t)[0]


# --- shared with the key index (icemor.io.key_index): the same canonical form, hash and equality ---

KeyColumns = list[_Encoded]
"""Key columns in their canonical form (see :func:`encode_keys`)."""


def encode_keys(
    columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[pa.DataType] | None = None
) -> KeyColumns | None:
    """The canonical form of key columns (cast like ``types`` first when given), or None when a
    column has a type this module cannot hash."""
    out: KeyColumns = []
    for i, c in enumerate(columns):
        arr = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
        if types is not None:
            arr = _like(arr, types[i])
        encoded = _encode(arr)
        if encoded is None:
            return None
        out.append(encoded)
    return out


def hash_keys(keys: KeyColumns, n: int) -> npt.NDArray[np.uint64]:
    """One 64-bit hash per key row (every byte of every column hashed; NULL-aware)."""
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    return _chunked_row_hash(keys, n)


def take_keys(keys: KeyColumns, rows: npt.NDArray[np.int64]) -> KeyColumns:
    """Rows ``rows`` of ``keys``."""
    return [k.take(rows) for k in keys]


def equal_keys(
    a: KeyColumns, a_rows: npt.NDArray[np.int64], b: KeyColumns, b_rows: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Exact NULL-safe equality of rows ``a_rows`` of ``a`` and ``b_rows`` of ``b``, pairwise
    (floats by Java's ``Double.equals``, as equality deletes compare)."""
    return _equal(a, a_rows, b, b_rows)


def int_key(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64] | None:
    """An integer-like key column without NULLs as int64 (dates, times and timestamps by their
    stored integer), or None for any other column."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.null_count or not _int_like(arr.type):
        return None
    return _as_int64(arr)
