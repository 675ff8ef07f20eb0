"""A task's equality verdict (the file positions its equality deletes remove): its key, and where
this process finds it: its cache (:data:`icemor.io.cache.DELETE_CACHE`) or the on-disk store
(:mod:`icemor.io.verdicts`). When verdicts are used, and by which reads: :mod:`icemor.io.reader`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from icemor.exceptions import CorruptFileError, MissingFileError
from icemor.io.cache import DELETE_CACHE, memo
from icemor.io.read_plan import check_present
from icemor.io.verdicts import verdict_store
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy.typing as npt
    from pyiceberg.io import FileIO

    from icemor.spec.files import DeleteFileRef
    from icemor.spec.tasks import FileScanTask

__all__ = ["VERDICT", "VERDICT_COMPUTED", "Known", "known_verdict", "remember_verdict", "verdict_key"]

VERDICT = "equality-verdict"
"""Cache kind of a task's equality verdict: the sorted file positions its equality deletes remove."""
VERDICT_COMPUTED = "equality-verdict-computed"
"""Cache kind of a verdict this process computed while :data:`VERDICT` holds a stored one for
the same key (the cache never replaces an entry): what a read from the files only then uses."""

Known: TypeAlias = "tuple[npt.NDArray[np.int64] | None, tuple[Any, ...] | None]"
"""What :func:`known_verdict` answers: (the verdict or None, the on-disk key to store one under or None)."""


class _StoredVerdict(np.ndarray[Any, np.dtype[np.int64]]):
    """A verdict loaded from the on-disk store (a view of it, no copy). Cached under
    :data:`VERDICT` as a computed one is, but its origin stays with it: a read with
    ``verdict_store=False`` never takes it for one computed from the table's files."""


def _cached_verdict(key: tuple[Any, ...], *, stored: bool) -> npt.NDArray[np.int64] | None:
    """This process's verdict of ``key``; ``stored=False``: only one it computed from the files."""
    verdict: npt.NDArray[np.int64] | None = DELETE_CACHE.peek(VERDICT, key)
    if stored or not isinstance(verdict, _StoredVerdict):
        return verdict
    computed: npt.NDArray[np.int64] | None = DELETE_CACHE.peek(VERDICT_COMPUTED, key)
    return computed


def remember_verdict(key: tuple[Any, ...], verdict: npt.NDArray[np.int64]) -> None:
    """Cache a verdict computed from the files, where both kinds of read find it."""
    DELETE_CACHE.put(VERDICT, key, verdict, verdict.nbytes + 64)
    if isinstance(DELETE_CACHE.peek(VERDICT, key), _StoredVerdict):
        DELETE_CACHE.put(VERDICT_COMPUTED, key, verdict, verdict.nbytes + 64)


class _HashedTuple(tuple):  # type: ignore[type-arg]
    """A tuple that hashes its items once: a verdict key's equality-delete part (50 files of
    4 fields) was hashed again for each of 20,000 files' cache lookups. Equal to, hashed,
    printed (the on-disk store keys by ``repr``) and compared exactly as the plain tuple."""

    _hash: int

    def __new__(cls, items: Iterable[Any]) -> _HashedTuple:
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash


def verdict_key(task: FileScanTask) -> tuple[Any, ...] | None:
    """What the equality verdict of a task depends on; None when no equality delete applies.

    Data and delete files are immutable, so the rows a fixed set of equality delete files
    removes from a fixed slice of a data file never change: the verdict is computed once.
    """
    deletes = task.delete_files
    # the planner gives files with the same delete set one tuple object: sorted once per set
    # (an entry holds its tuple, so the id cannot be reused while it lives)
    eq: tuple[Any, ...] = memo(
        ("verdict-equality-part", id(deletes)),
        deletes,
        lambda: _HashedTuple(
            sorted(
                (d.path, tuple(sorted(d.equality_ids)), d.file_size_in_bytes, d.record_count)
                for d in deletes
                if d.content == FileContent.EQUALITY_DELETES
            )
        ),
    )
    if not eq:
        return None
    f = task.data_file
    split = None if task.is_whole_file else (task.start, task.length)
    return (f.path, f.file_size_in_bytes, f.record_count, split, eq)


def known_verdict(
    io: FileIO,
    task: FileScanTask,
    key: tuple[Any, ...],
    *,
    stored: bool,
    stat_data: bool = True,
    data_mtime: int | None = None,
) -> tuple[npt.NDArray[np.int64] | None, tuple[Any, ...] | None]:
    """(the task's verdict or None, the on-disk key to store a new one under or None).

    The verdict comes from this process's cache, else from the on-disk store. A
    stored one was computed by another process, so its key names the modification time of
    every file it depends on (:func:`_stored_key`): a data file rewritten in place at the same
    path, size and row count is another key. ``stat_data=False``: the caller has just stat'ed
    the data file (a count does) and passes its ``data_mtime``: no second stat.
    ``stored=False`` (a write's read, ``ReadOptions.verdict_store``): the store is neither
    loaded nor saved, and only verdicts this process computed count.
    """
    verdict = _cached_verdict(key, stored=stored)
    if verdict is not None:
        return verdict, None
    if not stored:
        return None, None
    store = verdict_store()
    if store is None:
        return None, None
    if stat_data:
        try:
            data_mtime = check_present(io, task.data_file)
        except (MissingFileError, CorruptFileError):
            return None, None  # the read reports it, as it does without the store
    stored_key = _stored_key(io, task, key, data_mtime)
    if stored_key is None:
        return None, None
    loaded = store.load(stored_key, task.data_file.record_count)
    if loaded is None:
        return None, stored_key
    verdict = loaded.view(_StoredVerdict)
    DELETE_CACHE.put(VERDICT, key, verdict, verdict.nbytes + 64)
    return verdict, None


def _stored_key(
    io: FileIO, task: FileScanTask, key: tuple[Any, ...], data_mtime: int | None
) -> tuple[Any, ...] | None:
    """``key`` plus the modification time of the data file and of each equality delete file.

    None when one is unknown (a FileIO that does not tell): nothing is then stored or loaded.
    The equality delete files are stat'ed once per process, before they are decoded (or
    instead of it, when a stored verdict stands for them): a lost or truncated one fails here
    as when it is decoded, so a stored verdict never hides it.

    Raises:
        MissingFileError: An equality delete file does not exist.
        CorruptFileError: Its size differs from its manifest entry's.
    """
    if data_mtime is None:
        return None
    stamps = []
    for d in task.delete_files:
        if d.content == FileContent.EQUALITY_DELETES:

            def stat(d: DeleteFileRef = d) -> tuple[int | None, int]:
                return check_present(io, d, "equality delete file"), 64

            stamps.append((d.path, DELETE_CACHE.get_or_load("stamp", (d.path, d.file_size_in_bytes), stat)))
    if any(mtime is None for _, mtime in stamps):
        return None
    return (*key, data_mtime, tuple(sorted(stamps)))
