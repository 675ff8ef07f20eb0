"""The metrics of a rewrite that commits once or in groups (partial progress): its commits'
counters added up, and how the run went.

Each commit of a rewrite returns the rewrite's metrics class filled in for that one commit; every
field but the run's own (:data:`RUN_FIELDS`) is a count, and the run's count is the sum of its
commits'. One rule for every rewrite, whether it committed once, in groups, or not at all.
"""

from __future__ import annotations

import time
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence
    from dataclasses import Field

__all__ = ["RUN_FIELDS", "run_metrics"]

RUN_FIELDS = frozenset({"snapshot_id", "seconds", "commits", "failed_commits", "stopped_commits"})
"""The fields that say how a run went rather than count what its commits did."""


class _RunMetrics(Protocol):
    """A rewrite's metrics dataclass: counts, then :data:`RUN_FIELDS`."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None: ...

    @property
    def snapshot_id(self) -> int | None: ...


M = TypeVar("M", bound=_RunMetrics)


def run_metrics(
    kind: type[M],
    done: Sequence[M],
    started: float,
    *,
    failed: Sequence[str] = (),
    stopped: int = 0,
    **run_counts: int,
) -> M:
    """The metrics of a whole run from those of the commits it made.

    Args:
        kind: The rewrite's metrics class.
        done: The metrics of each commit made, in order (empty: nothing committed).
        started: ``time.monotonic()`` when the run began.
        failed: With partial progress, why each commit given up failed.
        stopped: With partial progress, the commits not attempted because ``stop`` asked to end.
        run_counts: Counts of the run as a whole rather than of its commits (taken as given).

    Returns:
        Each count summed over ``done``, the last commit's snapshot (None without a commit),
        the seconds since ``started``, and the number of commits made.
    """
    counts = {
        f.name: sum(getattr(m, f.name) for m in done)
        for f in fields(kind)
        if f.name not in RUN_FIELDS and f.name not in run_counts
    }
    return kind(
        **counts,
        **run_counts,
        snapshot_id=done[-1].snapshot_id if done else None,
        seconds=time.monotonic() - started,
        commits=len(done),
        failed_commits=tuple(failed),
        stopped_commits=stopped,
    )
