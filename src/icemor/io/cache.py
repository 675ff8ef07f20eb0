"""A process-wide, bounded cache of decoded delete files (and other immutable-file decodes).

Each delete file is read and decoded once per process (one Spark executor's Python worker,
or the local engine's threads) and shared by every task that needs it. Concurrent requests
for the same key wait for the one load in flight instead of decoding twice.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    import pyarrow as pa

__all__ = ["DELETE_CACHE", "DeleteCache", "cached_file_schema", "memo", "memo_get", "memo_put"]

T = TypeVar("T")


class DeleteCache:
    """LRU by approximate bytes; ``loads`` counts decodes per kind (tests assert on it)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._inflight: dict[Hashable, threading.Event] = {}
        self.loads: Counter[str] = Counter()

    def get_or_load(self, kind: str, key: Hashable, load: Callable[[], tuple[T, int]]) -> T:
        """Return the cached value for ``(kind, key)``, calling ``load`` -> (value, nbytes) once."""
        full_key = (kind, key)
        while True:
            with self._lock:
                hit = self._entries.get(full_key)
                if hit is not None:
                    self._entries.move_to_end(full_key)
                    return hit[0]  # type: ignore[no-any-return]
                event = self._inflight.get(full_key)
                if event is None:
                    event = threading.Event()
                    self._inflight[full_key] = event
                    break
            event.wait()
        try:
            value, nbytes = load()
            _log_load(kind, key)
            with self._lock:
                self._store(kind, full_key, value, nbytes)
            return value
        finally:
            with self._lock:
                self._inflight.pop(full_key, None)
            event.set()

    def peek(self, kind: str, key: Hashable) -> Any:
        """The cached value for ``(kind, key)``, or None; never loads."""
        with self._lock:
            hit = self._entries.get((kind, key))
            if hit is None:
                return None
            self._entries.move_to_end((kind, key))
            return hit[0]

    def put(self, kind: str, key: Hashable, value: Any, nbytes: int) -> None:
        """Store a value computed elsewhere (a by-product of a read), evicting LRU entries."""
        with self._lock:
            if (kind, key) not in self._entries:
                self._store(kind, (kind, key), value, nbytes)

    def _store(self, kind: str, full_key: Hashable, value: Any, nbytes: int) -> None:
        """Insert and evict least recently used entries; the caller holds the lock."""
        self.loads[kind] += 1
        if nbytes > self.max_bytes:
            return
        self._entries[full_key] = (value, nbytes)
        self._bytes += nbytes
        while self._bytes > self.max_bytes and self._entries:
            _, (_, size) = self._entries.popitem(last=False)
            self._bytes -= size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.loads.clear()


def _log_load(kind: str, key: Hashable) -> None:
    """With ``ICEMOR_DELETE_LOAD_LOG=<dir>``, record each decode in ``<dir>/<pid>.log``.

    Lets a test prove that a Spark executor's Python process decodes each delete file once.
    """
    log_dir = os.environ.get("ICEMOR_DELETE_LOAD_LOG")
    if log_dir:
        with open(os.path.join(log_dir, f"{os.getpid()}.log"), "a", encoding="utf-8") as f:
            f.write(f"{kind}\t{key!r}".replace("\n", "\\n") + "\n")  # one line per load


DELETE_CACHE = DeleteCache(int(os.environ.get("ICEMOR_DELETE_CACHE_BYTES", str(4 << 30))))


_MEMO: dict[tuple[Any, ...], tuple[object, Any]] = {}
_MEMO_MAX = 4096


def memo(key: tuple[Any, ...], owner: object, compute: Callable[[], T]) -> T:
    """Per-process memo of work derived from ``owner`` (a shared, immutable object such as a
    cached Schema or the planner's delete-file tuple), keyed by ``key``, which holds its id."""
    hit = memo_get(key, owner)
    if hit is not None:
        return cast("T", hit)
    value = compute()
    memo_put(key, owner, value)
    return value


def memo_get(key: tuple[Any, ...], owner: object) -> Any:
    """The memoised value, or None. An entry holds its owner, so the id in ``key`` cannot be
    reused by another object while the entry lives; one whose owner is not ``owner`` misses."""
    hit = _MEMO.get(key)
    return hit[1] if hit is not None and hit[0] is owner else None


def memo_put(key: tuple[Any, ...], owner: object, value: Any) -> None:
    """Memoise ``value`` for ``key`` and ``owner`` (all entries go once there are too many)."""
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = (owner, value)


_RECENT_SCHEMAS: tuple[tuple[pa.Schema, Hashable, Any], ...] = ()
"""The last few (Arrow schema, context, file Schema) converted, newest first."""


def cached_file_schema(arrow_schema: pa.Schema, context: Hashable, convert: Callable[[], T]) -> T:
    """``convert()``, the Iceberg schema of a Parquet file's ``arrow_schema``, once per process.

    A pure function of the Arrow schema (field ids are in its field metadata) and ``context``
    (what else the conversion depends on: name mapping, timestamp downcast): files written
    alike share one result. pyiceberg's conversion costs ~1 ms a file: 20,000 small data files
    of one writer, or a v2 table's 100 position delete files, paid it once each. A recently
    converted schema is found by one native comparison; the cache's key hashes it in Python.
    """
    for known, ctx, schema in _RECENT_SCHEMAS:  # (a snapshot: replaced whole, never changed)
        if ctx == context and known.equals(arrow_schema, check_metadata=True):
            return cast("T", schema)
    key = (_SchemaKey(arrow_schema), context)
    schema = DELETE_CACHE.get_or_load("file-schema", key, lambda: (convert(), 4096))
    _remember(arrow_schema, context, schema)
    return schema


def _remember(arrow_schema: pa.Schema, context: Hashable, schema: Any) -> None:
    global _RECENT_SCHEMAS  # noqa: PLW0603 (replaced whole: readers in other threads see a snapshot)
    _RECENT_SCHEMAS = ((arrow_schema, context, schema), *_RECENT_SCHEMAS[:7])


class _SchemaKey:
    """An Arrow schema as a dict key that tells field metadata apart.

    ``pa.Schema``'s own ``==`` and hash ignore field metadata, where the Iceberg field ids are:
    two files with a column of one name and type under different ids (dropped and added
    again) compared equal, and the second file was read with the first one's ids.
    """

    __slots__ = ("_hash", "schema")

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._hash = hash(schema)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SchemaKey) and self.schema.equals(other.schema, check_metadata=True)
