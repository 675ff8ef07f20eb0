"""Equality verdicts persisted on local disk, so a new process's first read skips the probe.

A task's equality verdict (the file positions its equality delete files remove) depends only
on immutable files: the data file (or its split) and the exact set of equality delete files
that apply to it. The in-process cache (:data:`icemor.io.cache.DELETE_CACHE`) keeps it for the
life of a process; this store keeps it across processes (a CLI call, a Spark executor's Python
worker, a new job), so only the first read anywhere on a host pays the key-column scan and the
probe.

The store is a private cache, never part of the table: it lives outside the warehouse
(``$ICEMOR_VERDICT_DIR``, else ``$ICEMOR_HOME/cache/equality-verdicts``, else
``~/.icemor/cache/equality-verdicts``), no catalog, manifest or other reader ever sees it, and
losing it only costs the probe again. Each entry is named by a digest of everything the
verdict depends on: the data file's path, size and row count, the split, and each equality
delete file's path, size and equality ids. An entry that does not decode, or names a position
outside the data file, is ignored and removed. ``ICEMOR_VERDICT_CACHE=0`` turns it off;
``ICEMOR_VERDICT_CACHE_BYTES`` bounds it (default 256 MiB; the least recently used entries go).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["VerdictStore", "verdict_store"]

_SUFFIX = ".npy"
_DEFAULT_BYTES = 256 << 20


class VerdictStore:
    """Sorted int positions per verdict key, one ``.npy`` file each (int32 when they fit)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._written = 0  # bytes written since the last size check

    def _path(self, key: tuple[Any, ...]) -> Path:
        digest = hashlib.sha256(repr(key).encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}{_SUFFIX}"

    def load(self, key: tuple[Any, ...], record_count: int) -> npt.NDArray[np.int64] | None:
        """The stored verdict of ``key``, or None (absent, unreadable or not this file's)."""
        path = self._path(key)
        try:
            values = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            _remove(path)
            return None
        if (
            values.ndim != 1
            or values.dtype.kind != "i"
            or (len(values) and (int(values[0]) < 0 or int(values[-1]) >= record_count))
            or len(values) > record_count
        ):
            _remove(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: evicted last
        out: npt.NDArray[np.int64] = values.astype(np.int64, copy=False)
        return out

    def save(self, key: tuple[Any, ...], positions: npt.NDArray[np.int64], record_count: int) -> None:
        """Store ``positions`` (sorted, unique) atomically; failures only cost the cache."""
        path = self._path(key)
        small = record_count < (1 << 31)
        values = positions.astype(np.int32) if small else positions
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    np.save(f, values, allow_pickle=False)
                os.replace(tmp, path)
            except BaseException:
                _remove(Path(tmp))
                raise
        except OSError:
            return
        with self._lock:
            self._written += int(values.nbytes)
            check = self._written > self.max_bytes // 8
            if check:
                self._written = 0
        if check:
            self.trim()

    def trim(self) -> None:
        """Remove the least recently used entries until the store fits its byte bound."""
        entries = []
        for path in self.root.glob(f"*/*{_SUFFIX}"):
            with contextlib.suppress(OSError):
                st = path.stat()
                entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            _remove(path)
            total -= size


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _root() -> Path:
    explicit = os.environ.get("ICEMOR_VERDICT_DIR")
    if explicit:
        return Path(explicit)
    home = os.environ.get("ICEMOR_HOME")
    base = Path(home) if home else Path.home() / ".icemor"
    return base / "cache" / "equality-verdicts"


_STORES: dict[tuple[Path, int], VerdictStore] = {}
_STORES_LOCK = threading.Lock()


def verdict_store() -> VerdictStore | None:
    """The store for the current environment, or None when turned off.

    Read from the environment at each call: tests and long-lived processes may change
    ``ICEMOR_HOME`` between reads.
    """
    if os.environ.get("ICEMOR_VERDICT_CACHE", "1").strip().lower() in {"0", "false", "off", "no"}:
        return None
    max_bytes = int(os.environ.get("ICEMOR_VERDICT_CACHE_BYTES", str(_DEFAULT_BYTES)))
    if max_bytes <= 0:
        return None
    key = (_root(), max_bytes)
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = VerdictStore(key[0], max_bytes)
        return store
