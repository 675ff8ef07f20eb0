"""The metrics of a rewrite that commits once or in groups (partial progress): its commits'
counters added up, and how the run went.

Each rewrite's metrics class is a :class:`RunMetrics`: its own counts (positional), and the
run's fields (:data:`RUN_FIELDS`, by keyword). Each commit of a rewrite returns that class filled
in for that one commit; the run's count is the sum of its commits'. One rule for every rewrite,
whether it committed once, in groups, or not at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["RUN_FIELDS", "RunMetrics", "run_metrics"]


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    """How a rewrite's run went; a rewrite's metrics class adds its counts (positional) before these.

    Keyword-only, so that a subclass's own count fields, declared after them, stay positional and
    come first in ``__init__``.
    """

    snapshot_id: int | None
    """None when there was nothing to rewrite (nothing committed); else the last commit's."""
    seconds: float
    commits: int = 0
    """Snapshots committed (more than one only with partial progress)."""
    failed_commits: tuple[str, ...] = ()
    """With partial progress: why each commit that kept conflicting was given up (its groups
    were not rewritten; the other commits stand)."""
    stopped_commits: int = 0
    """With partial progress: commits not attempted because ``stop`` asked to end."""


RUN_FIELDS = frozenset(f.name for f in fields(RunMetrics))
"""The fields that say how a run went rather than count what its commits did."""

M = TypeVar("M", bound=RunMetrics)


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
