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
losing it only costs the probe again. ``ICEMOR_VERDICT_CACHE=0`` turns it off;
``ICEMOR_VERDICT_CACHE_BYTES`` bounds it (default 256 MiB, ``256MiB``-style sizes accepted;
the least recently used entries go).

Local state is a hint: nothing in the store can change a result. Whatever its
files hold, a read returns what the table's files say, or the error it gives without the store:

* Each entry is named by a digest of its key (the caller's key, which names every file the
  verdict depends on with its modification time, and :data:`FORMAT`) and carries a SHA-256
  over that key and its own bytes: a damaged entry, or one moved to another key's name,
  does not verify. A verified entry must still be a sorted, strictly increasing array inside
  ``[0, record_count)``, no longer than the file's rows. Anything else is "not stored": the
  entry is removed (when it is ours) and the caller probes.
* Only a directory owned by this user and writable by no one else is used, opened without
  following symbolic links, and so is every subdirectory and entry in it (entries 0600,
  directories 0700). A store that fails this, or that cannot be created, is off for the
  process with one warning log line, never an error for the read.
* No home directory, or an unreadable ``ICEMOR_VERDICT_CACHE_BYTES``: the store is off, one
  warning. Writes go to a temporary file, fsynced, then renamed over the entry.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import struct
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["FORMAT", "VerdictStore", "parse_size", "verdict_store"]

_log = logging.getLogger(__name__)

FORMAT = 2
"""The entry layout and what a verdict means. Part of every entry's key, so an entry written
under other rules is never found (format 1 was a bare ``.npy`` array, checked only at its ends)."""

_SUFFIX = ".verdict"
_LEGACY_SUFFIX = ".npy"  # format 1: never read, removed by trim()
_TMP_SUFFIX = ".tmp"
_STALE_TMP_SECONDS = 3600  # a temporary file older than this was left by a crash
_SUBDIR = re.compile(r"[0-9a-f]{2}")
_MAGIC = b"ICEMORVD"
_HEADER = struct.Struct("<8sB7xQ")  # magic, bytes per position (4 or 8), number of positions
_DIGEST_BYTES = 32
_PREFIX = _HEADER.size + _DIGEST_BYTES
_DEFAULT_BYTES = 256 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_SUPPORTED = bool(_NOFOLLOW and hasattr(os, "O_DIRECTORY")) and (
    os.open in os.supports_dir_fd and os.scandir in os.supports_fd
)
"""Whether the platform opens files relative to a directory without following links (POSIX)."""
_OFF = frozenset({"0", "false", "off", "no"})


class VerdictStore:
    """Sorted file positions per verdict key, one checksummed entry file each (int32 when they fit).

    Every file operation goes through directory descriptors opened with ``O_NOFOLLOW`` and
    checked with ``fstat``: a directory swapped for a link or another user's between the
    check and the use is never written to or read from.
    """

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.refused: str | None = None
        """Why this process does not use the store (logged once), or None."""
        self._lock = threading.Lock()
        self._written = 0  # bytes written since the last size check

    def load(self, key: tuple[Any, ...], record_count: int) -> npt.NDArray[np.int64] | None:
        """The stored verdict of ``key``, or None (absent, refused, or not verifiably this key's)."""
        name, sub, key_bytes = _locate(key)
        root = self._open_root(create=False)
        if root is None:
            return None
        try:
            sub_fd = self._open_sub(root, sub, create=False)
            if sub_fd is None:
                return None
            try:
                return _read_entry(sub_fd, name, key_bytes, record_count)
            finally:
                os.close(sub_fd)
        finally:
            os.close(root)

    def save(self, key: tuple[Any, ...], positions: npt.NDArray[np.int64], record_count: int) -> None:
        """Store ``positions`` (sorted, unique) atomically; failures only cost the cache."""
        if not _valid(positions, record_count):
            return  # never store what load() would refuse
        name, sub, key_bytes = _locate(key)
        data = _encode(key_bytes, positions, record_count)
        if len(data) > self.max_bytes:
            return
        root = self._open_root(create=True)
        if root is None:
            return
        try:
            sub_fd = self._open_sub(root, sub, create=True)
            if sub_fd is None:
                return
            try:
                written = _write_entry(sub_fd, name, data)
            finally:
                os.close(sub_fd)
        finally:
            os.close(root)
        if not written:
            return
        with self._lock:
            self._written += len(data)
            check = self._written > self.max_bytes // 8
            if check:
                self._written = 0
        if check:
            self.trim()

    def trim(self) -> None:
        """Remove the least recently used entries until the store fits its byte bound.

        Lists with ``os.scandir`` and ``lstat`` only: a symbolic link (to a directory or an
        entry) is never followed, so nothing outside the store is ever removed. Format-1
        entries go first; temporary files a crash left behind go once they are an hour old.
        """
        root = self._open_root(create=False)
        if root is None:
            return
        try:
            with os.scandir(root) as it:
                subs = [e.name for e in it if _SUBDIR.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
            entries: list[tuple[float, int, str, str]] = []
            doomed: dict[str, list[str]] = {}
            now = time.time()
            for sub in subs:
                for name, st in _listing(root, sub):
                    if name.endswith(_SUFFIX):
                        entries.append((st.st_mtime, st.st_size, sub, name))
                    elif name.endswith(_LEGACY_SUFFIX):
                        entries.append((float("-inf"), st.st_size, sub, name))
                    elif name.endswith(_TMP_SUFFIX) and now - st.st_mtime > _STALE_TMP_SECONDS:
                        doomed.setdefault(sub, []).append(name)
            total = sum(size for _, size, _, _ in entries)
            for mtime, size, sub, name in sorted(entries):
                if total <= self.max_bytes and mtime != float("-inf"):
                    break
                doomed.setdefault(sub, []).append(name)
                total -= size
            for sub, names in doomed.items():
                _unlink_all(root, sub, names)
        except OSError:
            return
        finally:
            os.close(root)

    def _refuse(self, why: str) -> None:
        with self._lock:
            if self.refused is not None:
                return
            self.refused = why
        _log.warning(
            "equality verdict store %s is not used by this process: %s (make it a directory only "
            "you can write, or set ICEMOR_VERDICT_DIR to one; ICEMOR_VERDICT_CACHE=0 turns it off)",
            self.root,
            why,
        )

    def _open_root(self, *, create: bool) -> int | None:
        """A descriptor of the root, checked private; None when absent (and not created) or refused."""
        if self.refused is not None:
            return None
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            try:
                self.root.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.root, 0o700)
                fd = os.open(self.root, _DIR_FLAGS)
            except OSError as e:
                self._refuse(f"cannot create it ({e.strerror or e})")
                return None
        except OSError as e:
            self._refuse(_open_problem(e))
            return None
        return self._checked(fd, "the directory")

    def _open_sub(self, root: int, sub: str, *, create: bool) -> int | None:
        try:
            fd = os.open(sub, _DIR_FLAGS, dir_fd=root)
        except FileNotFoundError:
            if not create:
                return None
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(sub, 0o700, dir_fd=root)
                fd = os.open(sub, _DIR_FLAGS, dir_fd=root)
            except OSError:
                return None  # e.g. disk full: costs this entry only
        except OSError as e:
            self._refuse(f"subdirectory {sub}: {_open_problem(e)}")
            return None
        return self._checked(fd, f"subdirectory {sub}")

    def _checked(self, fd: int, what: str) -> int | None:
        try:
            problem = _not_private(os.fstat(fd), directory=True)
        except OSError as e:
            problem = str(e)
        if problem is None:
            return fd
        os.close(fd)
        self._refuse(f"{what} {problem}")
        return None


def _open_problem(e: OSError) -> str:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return "it is a symbolic link or not a directory"
    return e.strerror or str(e)


def _not_private(st: os.stat_result, *, directory: bool) -> str | None:
    """Why a file or directory is not trusted, or None: it must be this user's, writable by no other."""
    if directory and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _locate(key: tuple[Any, ...]) -> tuple[str, str, bytes]:
    """(entry name, subdirectory, key bytes the checksum covers) of ``key``."""
    key_bytes = repr(("icemor-equality-verdict", FORMAT, key)).encode()
    digest = hashlib.sha256(key_bytes).hexdigest()
    return f"{digest}{_SUFFIX}", digest[:2], key_bytes


def _checksum(key_bytes: bytes, header: bytes | memoryview, payload: bytes | memoryview) -> bytes:
    h = hashlib.sha256(len(key_bytes).to_bytes(8, "little"))
    h.update(key_bytes)
    h.update(header)
    h.update(payload)
    return h.digest()


def _encode(key_bytes: bytes, positions: npt.NDArray[np.int64], record_count: int) -> bytes:
    """Header, checksum over key, header and payload, then the positions (little-endian)."""
    width = 4 if record_count < (1 << 31) else 8
    payload = positions.astype("<i4" if width == 4 else "<i8").tobytes()
    header = _HEADER.pack(_MAGIC, width, len(positions))
    return header + _checksum(key_bytes, header, payload) + payload


def _decode(data: bytes, key_bytes: bytes, record_count: int) -> npt.NDArray[np.int64] | None:
    """The positions an entry holds for ``key_bytes``; None unless every check passes."""
    if len(data) < _PREFIX:
        return None
    magic, width, count = _HEADER.unpack_from(data)
    if magic != _MAGIC or width not in (4, 8) or count > record_count or len(data) != _PREFIX + count * width:
        return None
    view = memoryview(data)
    expected = _checksum(key_bytes, view[: _HEADER.size], view[_PREFIX:])
    if not hmac.compare_digest(expected, data[_HEADER.size : _PREFIX]):
        return None
    raw = np.frombuffer(data, dtype="<i4" if width == 4 else "<i8", count=count, offset=_PREFIX)
    values: npt.NDArray[np.int64] = raw.astype(np.int64)  # a copy: owned and writable
    return values if _valid(values, record_count) else None


def _valid(values: npt.NDArray[np.int64], record_count: int) -> bool:
    """Sorted, strictly increasing, inside ``[0, record_count)``: what a verdict can be."""
    if values.ndim != 1 or values.dtype.kind != "i" or len(values) > record_count:
        return False
    if not len(values):
        return True
    return bool(values[0] >= 0 and values[-1] < record_count and np.all(values[1:] > values[:-1]))


def _read_entry(sub_fd: int, name: str, key_bytes: bytes, record_count: int) -> npt.NDArray[np.int64] | None:
    try:
        # O_NONBLOCK: a FIFO put in an entry's place must not hang the open
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=sub_fd)
    except FileNotFoundError:
        return None
    except OSError:  # a symbolic link (ELOOP), unreadable: not stored
        _drop(sub_fd, name)
        return None
    try:
        st = os.fstat(fd)
        values = None
        if _not_private(st, directory=False) is None and st.st_size <= _PREFIX + 8 * record_count:
            with open(fd, "rb", closefd=False) as f:
                values = _decode(f.read(st.st_size + 1), key_bytes, record_count)
        if values is None:
            _drop(sub_fd, name)
            return None
        with contextlib.suppress(OSError):
            os.utime(fd)  # recently used: evicted last
        return values
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_entry(sub_fd: int, name: str, data: bytes) -> bool:
    """Write ``data`` to a new private file, fsync it, rename it over ``name``; False on failure."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}{_TMP_SUFFIX}"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=sub_fd
        )
    except OSError:
        return False
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)  # a crash after the rename must not leave an empty or partial entry
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=sub_fd, dst_dir_fd=sub_fd)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=sub_fd)
        if isinstance(e, OSError):
            return False
        raise
    return True


def _drop(sub_fd: int, name: str) -> None:
    """Remove an entry that is not usable, if it is this user's (a link is removed, never followed)."""
    with contextlib.suppress(OSError):
        if os.stat(name, dir_fd=sub_fd, follow_symlinks=False).st_uid == os.geteuid():
            os.unlink(name, dir_fd=sub_fd)


def _listing(root: int, sub: str) -> list[tuple[str, os.stat_result]]:
    """Regular files of a private subdirectory with their lstat; empty when it is not one."""
    try:
        fd = os.open(sub, _DIR_FLAGS, dir_fd=root)
    except OSError:
        return []
    try:
        if _not_private(os.fstat(fd), directory=True) is not None:
            return []
        out = []
        with os.scandir(fd) as it:
            for e in it:
                if e.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        out.append((e.name, e.stat(follow_symlinks=False)))
        return out
    except OSError:
        return []
    finally:
        os.close(fd)


def _unlink_all(root: int, sub: str, names: list[str]) -> None:
    try:
        fd = os.open(sub, _DIR_FLAGS, dir_fd=root)
    except OSError:
        return
    try:
        for name in names:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


_SIZE = re.compile(r"(\d+(?:\.\d*)?)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_size(text: str) -> int | None:
    """Bytes of ``268435456``, ``256MiB``, ``256M``, ``256 MB``, ``1.5g`` (binary units), else None."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        return None
    return int(float(m.group(1)) * (1 << _UNITS[(m.group(2) or "").lower()]))


_WARNED: set[str] = set()
_STORES: dict[Path, VerdictStore] = {}
_STORES_LOCK = threading.Lock()


def _warn_once(message: str) -> None:
    with _STORES_LOCK:
        if message in _WARNED:
            return
        _WARNED.add(message)
    _log.warning("%s", message)


def _root() -> Path | None:
    explicit = os.environ.get("ICEMOR_VERDICT_DIR")
    if explicit:
        return Path(os.path.abspath(explicit))
    home = os.environ.get("ICEMOR_HOME")
    if home:
        return Path(os.path.abspath(home)) / "cache" / "equality-verdicts"
    try:
        base = Path.home()
    except (RuntimeError, KeyError, OSError) as e:
        _warn_once(
            f"equality verdict store off: no home directory ({e}); set ICEMOR_VERDICT_DIR or ICEMOR_HOME"
        )
        return None
    return base / ".icemor" / "cache" / "equality-verdicts"


def verdict_store() -> VerdictStore | None:
    """The store for the current environment, or None when turned off or refused.

    Read from the environment at each call: tests and long-lived processes may change
    ``ICEMOR_HOME`` between reads.
    """
    if os.environ.get("ICEMOR_VERDICT_CACHE", "1").strip().lower() in _OFF:
        return None
    if not _SUPPORTED:
        _warn_once("equality verdict store off: this platform cannot open files without following links")
        return None
    setting = os.environ.get("ICEMOR_VERDICT_CACHE_BYTES")
    max_bytes = _DEFAULT_BYTES if setting is None else parse_size(setting)
    if max_bytes is None:
        _warn_once(
            f"equality verdict store off: ICEMOR_VERDICT_CACHE_BYTES={setting!r} is not a size "
            "(bytes, or e.g. 256MiB)"
        )
        return None
    if max_bytes <= 0:
        return None
    root = _root()
    if root is None:
        return None
    with _STORES_LOCK:
        store = _STORES.get(root)
        if store is None:
            store = _STORES[root] = VerdictStore(root, max_bytes)
        store.max_bytes = max_bytes
    return None if store.refused is not None else store
