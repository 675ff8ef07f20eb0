"""What the rewriting maintenance actions share: the table check, units of work that never lose
files, and the partial-progress loop that commits their groups.

A unit of work runs on a local thread or a Spark executor and writes files. If one unit fails
while others succeed, a runner that raises would drop the successful units' results, and with
them the only record of the files they wrote. So each unit runs guarded: an error is returned,
not raised (after the unit removed what it wrote itself), the driver sees every result,
removes the files of the successful units and raises the first error.

With partial progress (Java's ``partial-progress.*``), the groups of a rewrite are committed one
by one (:func:`commit_groups`); a group a commit since touched is planned again on the head, and
one that keeps conflicting is given up while the others stand.
"""

from __future__ import annotations

import pickle
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pyiceberg.typedef import Record

from icemor.commit.files import delete_quietly
from icemor.commit.validation import Validation, validate
from icemor.exceptions import (
    CommitConflictError,
    CommitFailedError,
    IcemorError,
    InvalidArgumentError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.files import DataFileRef
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "GroupCommits",
    "PartialProgress",
    "PlannedGroup",
    "ScanBatch",
    "backoff",
    "check_rewritable",
    "commit_groups",
    "partition_directory",
    "raise_if_none_committed",
    "run_guarded",
    "spread",
    "touched_since",
]

R = TypeVar("R")
T = TypeVar("T")
C = TypeVar("C")


def check_rewritable(table: PyIcebergTable) -> None:
    """Refuse tables whose files icemor cannot rewrite: v1 (no sequence numbers) and versions above 3.
    Copy-on-write tables are fine: a rewrite changes no row."""
    version = table.metadata.format_version
    if version < 2:
        msg = (
            f"{'.'.join(table.name())} is a format-version 1 table: rewrites keep data sequence numbers, "
            "which need format version 2 (set the table property format-version=2)"
        )
        raise InvalidArgumentError(msg)
    if version > 3:
        msg = f"rewriting format-version {version} tables is not supported (icemor writes up to 3)"
        raise UnsupportedFeatureError(msg)


def partition_directory(table: PyIcebergTable, spec_id: int, partition: tuple[Any, ...]) -> str:
    """The data directory of a partition as the table lays it out (``write.data.path`` etc.)."""
    data_dir = table.location_provider().new_data_location("x").rsplit("/", 1)[0]
    spec = table.metadata.specs()[spec_id]
    if spec.is_unpartitioned():
        return data_dir
    return f"{data_dir}/{spec.partition_to_path(Record(*partition), table.metadata.schema())}"


def touched_since(
    metadata: TableMetadata,
    io: FileIO,
    start_snapshot_id: int,
    data_files: Mapping[str, DataFileRef],
    *,
    ignore_equality_deletes: bool = False,
) -> bool:
    """Whether a commit after ``start_snapshot_id`` removed one of ``data_files`` or added deletes
    that apply to one (the checks a rewrite of them would fail): reads only those commits' own
    manifests, so a group of a partial-progress run is planned again only when it has to be."""
    paths = set(data_files)
    check = Validation(
        start_snapshot_id,
        serializable=False,
        removed_data_files=paths,
        no_new_deletes_for=paths,
        data_files=data_files,
        ignore_equality_deletes=ignore_equality_deletes,
    )
    try:
        validate(metadata, io, check)
    except CommitConflictError:
        return True
    return False


@dataclass(frozen=True)
class _Failed:
    error: BaseException


def _picklable(e: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return IcemorError(f"{type(e).__name__}: {e}")
    return e


def guarded(io: FileIO, item: tuple[Callable[[FileIO, Any], Any], Any]) -> Any:
    """Run ``fn(io, unit)``; return its error instead of raising it (module level: Spark pickles it)."""
    fn, unit = item
    try:
        return fn(io, unit)
    except Exception as e:
        return _Failed(_picklable(e))


def run_guarded(
    io: FileIO,
    run: Runner,
    fn: Callable[[FileIO, Any], R],
    units: Sequence[Any],
    written: Callable[[R], Iterable[str]],
    *,
    lost: Callable[[], None] | None = None,
) -> list[R]:
    """Run every unit; if any failed, remove what the others wrote and raise the first error.

    ``fn`` must remove what it wrote itself before it raises. If the runner itself fails (a
    Spark job lost), the results are gone: ``lost`` removes what it can find, best effort.
    """
    try:
        outcomes = run(guarded, [(fn, u) for u in units])
    except BaseException:
        if lost is not None:
            lost()
        raise
    failed = [o.error for o in outcomes if isinstance(o, _Failed)]
    if failed:
        delete_quietly(io, [p for o in outcomes if not isinstance(o, _Failed) for p in written(o)])
        raise failed[0]
    return outcomes


def raise_if_none_committed(failed: Sequence[str], done: Sequence[object]) -> None:
    """With partial progress, a run whose every group commit failed is a conflict (naming the
    first failure); a run that committed some groups returns them, its failures in the metrics.

    Raises:
        CommitConflictError: ``failed`` holds failures and ``done`` no commit.
    """
    if failed and not done:
        msg = failed[0] if len(failed) == 1 else f"{failed[0]} (and {len(failed) - 1} more commits)"
        raise CommitConflictError(msg)


@dataclass(frozen=True)
class PartialProgress:
    """How a rewrite commits its groups: Java's ``partial-progress.*`` options, and icemor's own.

    Without ``enabled``, one commit (a conflict fails the whole rewrite, as Java's). With it, the
    groups are committed in at most ``max_commits`` commits, each validated on its own, so a
    conflict loses only that commit's groups; such a commit is planned again on the new head,
    after a backoff, up to ``max_group_attempts`` times.

    Raises:
        InvalidArgumentError: ``max_commits`` or ``max_group_attempts`` below 1.
    """

    enabled: bool = False
    """Java's ``partial-progress.enabled``."""
    max_commits: int = 10
    """Java's ``partial-progress.max-commits``."""
    max_group_attempts: int = 3
    """Attempts of each commit (re-planned after a conflict)."""
    stop: Callable[[], bool] | None = None
    """Asked before each commit's work: True ends the rewrite there (the commits made stay;
    nothing else is written)."""
    max_groups: int | None = None
    """At most this many commits' work is started; the rest is left for a later run (counted as
    ``stopped_commits``): bounded work, for a writer that compacts between its batches."""

    def __post_init__(self) -> None:
        if self.max_commits < 1 or self.max_group_attempts < 1:
            msg = "partial_progress_max_commits and max_group_attempts must be >= 1"
            raise InvalidArgumentError(msg)
        if self.max_groups is not None and self.max_groups < 1:
            msg = f"max_groups is {self.max_groups} but must be >= 1"
            raise InvalidArgumentError(msg)

    def stopping(self) -> bool:
        return self.stop is not None and self.stop()


def spread(items: Sequence[T], max_commits: int) -> list[Sequence[T]]:
    """``items`` spread evenly over at most ``max_commits`` commits, in order (as Java's
    ``RewriteDataFilesCommitManager``); no commit when there are no items."""
    per_commit = max(1, -(-len(items) // max_commits))
    return [items[i : i + per_commit] for i in range(0, len(items), per_commit)]


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` of a group: 0.1 s doubling to 2 s, jittered
    (writers that collided once should not collide again in step)."""
    delay: float = min(2.0, 0.1 * 2.0**attempt)
    return delay * random.uniform(0.5, 1.0)


class PlannedGroup(Protocol):
    """A group of one commit as planned: the snapshot it was planned on and the data files it rewrites."""

    @property
    def snapshot_id(self) -> int: ...

    @property
    def data_files(self) -> Mapping[str, DataFileRef]: ...


G = TypeVar("G", bound=PlannedGroup)


@dataclass(frozen=True)
class ScanBatch(Generic[T]):
    """The work of one commit, ``items``, as planned by ``job`` over ``data_files``."""

    job: ScanJob
    items: Sequence[T]
    data_files: Mapping[str, DataFileRef]

    @classmethod
    def of(cls, job: ScanJob, items: Sequence[T], planned: Iterable[PlannedFile]) -> ScanBatch[T]:
        return cls(job, items, {p.data_file.path: p.data_file for p in planned})

    @property
    def snapshot_id(self) -> int:
        assert self.job.snapshot is not None
        return self.job.snapshot.snapshot_id


@dataclass
class GroupCommits(Generic[C]):
    """What the group commits of a partial-progress run did, so far."""

    done: list[C] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Why each commit that kept conflicting was given up."""
    stopped: int = 0
    """Commits not attempted because ``stop`` asked to end."""


def commit_groups(
    table: PyIcebergTable,
    groups: Sequence[G],
    *,
    replan: Callable[[int, G, Snapshot], G | None],
    commit: Callable[[int, G, GroupCommits[C]], C],
    partial: PartialProgress,
    ignore_equality_deletes: bool = False,
) -> GroupCommits[C]:
    """Commit ``groups`` one by one, each validated from the snapshot it was planned on.

    Before each attempt, when the head moved on: after a conflict, or when a commit since touched
    the group's data files (:func:`touched_since`), ``replan(n, group, head)`` plans group ``n``
    (as first planned) again on the head, rather than rewrite into a conflict; None: nothing left
    to do for it. A group whose ``commit`` keeps failing (a conflict, or every swap lost to other
    writers) is given up after ``partial.max_group_attempts`` attempts, with a backoff between;
    ``partial.stop`` is asked before each group.

    Raises:
        CommitConflictError: Every commit made failed (:func:`raise_if_none_committed`).
    """
    out: GroupCommits[C] = GroupCommits()
    for n, planned in enumerate(groups):
        if partial.stopping() or (partial.max_groups is not None and n >= partial.max_groups):
            out.stopped = len(groups) - n
            break
        group = planned
        for attempt in range(partial.max_group_attempts):
            head = table.refresh().metadata.current_snapshot()
            if (
                head is not None
                and head.snapshot_id != group.snapshot_id
                and (
                    attempt
                    or touched_since(
                        table.metadata,
                        table.io,
                        group.snapshot_id,
                        group.data_files,
                        ignore_equality_deletes=ignore_equality_deletes,
                    )
                )
            ):
                again = replan(n, planned, head)
                if again is None:
                    break
                group = again
            try:
                out.done.append(commit(n, group, out))
                break
            except (CommitConflictError, CommitFailedError) as e:
                if attempt + 1 == partial.max_group_attempts:
                    out.failed.append(str(e))
                    break
                time.sleep(backoff(attempt))
    raise_if_none_committed(out.failed, out.done)
    return out
