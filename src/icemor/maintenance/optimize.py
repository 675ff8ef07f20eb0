"""Self-optimizing maintenance (``icemor optimize``): plan per partition from the health report, run the
existing maintenance actions it chose, report the score before and after.

Planned as Apache Amoro plans self-optimizing, per partition, with the thresholds of
:class:`icemor.maintenance.health.Thresholds` (``icemor.optimize.*`` table properties; Amoro's
equivalents in docs/health.md):

* **minor**: equality-delete files -> equality -> position conversion; a data file with
  ``minor.delete-file-count`` or more delete files, or dangling deletes -> position-delete
  compaction;
* **major**: a deleted fraction of ``major.delete-ratio`` or more, or ``major.fragment-count``
  fragments (files under target / ``fragment-ratio``) -> data-file rewrite (bin-packing to
  ``target-size-bytes``), which also applies and drops the deletes, so it replaces the
  partition's minor actions (as Amoro's major does);
* **full**: every data file with a delete (and every one off the target size) rewritten, only
  with ``full.enabled``;
* snapshot expiry and orphan removal only with ``expire.enabled`` / ``orphans.enabled``.

The actions commit table-wide (each at most one snapshot) and each validates against concurrent
commits as it always does, so a concurrent writer never loses data; a conflict (or a swap that
lost every retry to other writers) skips that action (for the partitions that planned it) this
round and says so; ``watch`` plans again next round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from icemor.exceptions import CommitConflictError, CommitFailedError, UnsupportedFeatureError
from icemor.maintenance.health import inspect_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner
    from icemor.maintenance.health import HealthReport, PartitionHealth, Thresholds

__all__ = [
    "ActionResult",
    "OptimizePlan",
    "OptimizeResult",
    "PartitionPlan",
    "describe_action",
    "execute_plan",
    "optimize",
    "plan_optimize",
]

EQ_TO_POS = "equality-to-position"
POSITION_COMPACTION = "compact-position-deletes"
DATA_REWRITE = "rewrite-data-files"
FULL_REWRITE = "full-rewrite"
EXPIRE = "expire-snapshots"
ORPHANS = "remove-orphan-files"
_ORDER = (EQ_TO_POS, POSITION_COMPACTION, DATA_REWRITE, FULL_REWRITE, EXPIRE, ORPHANS)


@dataclass(frozen=True)
class PartitionPlan:
    """What one partition needs: ``minor`` / ``major`` / ``full`` actions and why."""

    partition: str
    spec_id: int | None
    score: float
    level: str
    """``minor``, ``major`` or ``full``."""
    actions: tuple[str, ...]
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class OptimizePlan:
    """The actions to run (table-wide, in order), the partitions asking for them, the scores."""

    table_name: str
    score_before: float
    score_expected: float
    actions: tuple[str, ...]
    partitions: tuple[PartitionPlan, ...]
    report: HealthReport = field(repr=False)


@dataclass(frozen=True)
class ActionResult:
    """One action run: its snapshot (None: nothing to commit), seconds, or why it was skipped."""

    action: str
    snapshot_id: int | None
    seconds: float
    skipped: str | None = None
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class OptimizeResult:
    """A round of optimizing: its plan, what each action did, and the score after it."""

    plan: OptimizePlan
    actions: tuple[ActionResult, ...]
    score_after: float | None
    """None for a dry run (nothing ran)."""
    seconds: float


def _partition_plan(p: PartitionHealth, t: Thresholds) -> PartitionPlan | None:
    """A partition's plan: full when enabled, else major (which applies every delete too, so it
    replaces minor, as in Amoro), else minor."""
    if t.full_enabled and p.data_files:
        return PartitionPlan(
            p.partition, p.spec_id, p.score, "full", (FULL_REWRITE,), ("full optimizing enabled",)
        )
    minor: list[str] = []
    reasons: list[str] = []
    if p.live_equality_keys:
        minor.append(EQ_TO_POS)
        reasons.append(f"{p.live_equality_keys} live equality-delete keys")
    if p.read_amplification.max >= t.minor_delete_file_count or p.dangling_delete_files:
        minor.append(POSITION_COMPACTION)
        if p.read_amplification.max >= t.minor_delete_file_count:
            reasons.append(f"up to {p.read_amplification.max:g} delete files per data file")
        if p.dangling_delete_files:
            reasons.append(f"{p.dangling_delete_files} dangling delete files")
    if p.delete_ratio >= t.major_delete_ratio or p.small_files >= t.major_fragment_count:
        if p.delete_ratio >= t.major_delete_ratio:
            reasons.insert(0, f"deleted fraction {p.delete_ratio:.3f} >= {t.major_delete_ratio}")
        if p.small_files >= t.major_fragment_count:
            reasons.insert(0, f"{p.small_files} fragments >= {t.major_fragment_count}")
        return PartitionPlan(p.partition, p.spec_id, p.score, "major", (DATA_REWRITE,), tuple(reasons))
    if not minor:
        return None
    return PartitionPlan(p.partition, p.spec_id, p.score, "minor", tuple(minor), tuple(reasons))


def _expected(p: PartitionHealth, actions: tuple[str, ...]) -> float:
    """The partition's score once its actions ran (each removes the penalties it addresses)."""
    lost = dict(p.penalties)
    if EQ_TO_POS in actions or DATA_REWRITE in actions or FULL_REWRITE in actions:
        lost["equality_deletes"] = 0.0
    if POSITION_COMPACTION in actions or DATA_REWRITE in actions or FULL_REWRITE in actions:
        lost["read_amplification"] = 0.0
        lost["dangling_deletes"] = 0.0
    if DATA_REWRITE in actions or FULL_REWRITE in actions:
        lost["delete_ratio"] = 0.0
        lost["small_files"] = 0.0
    return round(max(0.0, 100.0 - sum(lost.values())), 1)


def plan_optimize(report: HealthReport) -> OptimizePlan:
    """Plan from a health report: per partition, then the table-wide actions in their order."""
    t = report.thresholds
    plans = tuple(pp for p in report.partitions if (pp := _partition_plan(p, t)) is not None)
    chosen = {a for pp in plans for a in pp.actions}
    if t.expire_enabled:
        chosen.add(EXPIRE)
    if t.orphans_enabled:
        chosen.add(ORPHANS)
    # the table's expected score: each partition's, weighted by its rows (a table's penalties
    # are row- or file-weighted sums of its partitions')
    by_name = {(pp.spec_id, pp.partition): pp.actions for pp in plans}
    rows = sum(p.data_rows for p in report.partitions) or 1
    if report.partitions and report.table.data_rows:
        expected = (
            sum(
                _expected(p, by_name.get((p.spec_id, p.partition), ())) * max(p.data_rows, 0)
                for p in report.partitions
            )
            / rows
        )
        expected = min(100.0, round(expected, 1))
    else:
        expected = report.table.score
    return OptimizePlan(
        table_name=report.table_name,
        score_before=report.table.score,
        score_expected=expected,
        actions=tuple(a for a in _ORDER if a in chosen),
        partitions=plans,
        report=report,
    )


def _run_actions(
    table: PyIcebergTable,
    plan: OptimizePlan,
    actions: tuple[str, ...],
    *,
    run: Runner,
    expire: Callable[[], object] | None,
    remove_orphans: Callable[[], object] | None,
    note: Callable[[str], None] | None,
) -> list[ActionResult]:
    """Run ``actions`` of ``plan`` in order; a commit conflict skips that action this round."""
    from icemor.maintenance.data_files import rewrite_data_files
    from icemor.maintenance.equality_to_position import rewrite_equality_deletes
    from icemor.maintenance.position_deletes import rewrite_position_deletes

    t = plan.report.thresholds
    fragmented = any(
        p.small_files >= t.major_fragment_count
        for p in plan.report.partitions
        if p.delete_ratio < t.major_delete_ratio
    )
    results: list[ActionResult] = []
    for action in actions:
        asking = tuple(pp.partition or "(unpartitioned)" for pp in plan.partitions if action in pp.actions)
        began = time.monotonic()
        snapshot_id: int | None = None
        try:
            if action == EQ_TO_POS:
                snapshot_id = rewrite_equality_deletes(table, run=run).snapshot_id
            elif action == POSITION_COMPACTION:
                snapshot_id = rewrite_position_deletes(table, run=run).snapshot_id
            elif action in (DATA_REWRITE, FULL_REWRITE):
                snapshot_id = rewrite_data_files(
                    table,
                    run=run,
                    # full: every file with a delete (and, as always, every file off the target size)
                    delete_ratio_threshold=1e-9 if action == FULL_REWRITE else t.major_delete_ratio,
                    # fragments alone do not start a rewrite of fewer than 5 files (Java's
                    # min-input-files): any delete in such a partition does, here
                    delete_file_threshold=1
                    if action == FULL_REWRITE or fragmented
                    else t.minor_delete_file_count,
                    target_file_size_bytes=t.target_file_size_bytes,
                ).snapshot_id
            elif action == EXPIRE and expire is not None:
                expire()
            elif action == ORPHANS and remove_orphans is not None:
                remove_orphans()
        except (CommitConflictError, CommitFailedError) as e:
            # a conflicting commit, or every retry of the swap lost to other writers: nothing was
            # committed; the next round plans again
            result = ActionResult(action, None, time.monotonic() - began, f"conflict: {e}", asking)
        except UnsupportedFeatureError as e:  # e.g. an action that does not write v3 tables yet
            result = ActionResult(action, None, time.monotonic() - began, f"not supported: {e}", asking)
        else:
            result = ActionResult(action, snapshot_id, time.monotonic() - began, None, asking)
        table.refresh()
        results.append(result)
        if note is not None:
            note(describe_action(result))
    return results


def execute_plan(
    table: PyIcebergTable,
    plan: OptimizePlan,
    *,
    run: Runner,
    expire: Callable[[], object] | None = None,
    remove_orphans: Callable[[], object] | None = None,
    note: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Run the plan's actions in order, then report the score.

    Equality -> position conversion runs first and alone: it makes the rows equality deletes
    remove countable from metadata, so the rest is planned again, exactly, from a new report
    (a table of equality deletes over the major threshold is then rewritten in the same round).

    Args:
        table: The pyiceberg table.
        plan: From :func:`plan_optimize`.
        run: Where the per-file work runs (local threads or Spark executors).
        expire: Runs snapshot expiry (the facade's, with the table's defaults).
        remove_orphans: Runs orphan removal (the facade's: it needs the catalog's tables).
        note: Called with one line per action as it finishes.
    """
    started = time.monotonic()

    def run_actions(p: OptimizePlan, actions: tuple[str, ...]) -> list[ActionResult]:
        return _run_actions(
            table, p, actions, run=run, expire=expire, remove_orphans=remove_orphans, note=note
        )

    results: list[ActionResult] = []
    rest, rest_plan = plan.actions, plan
    if EQ_TO_POS in plan.actions:
        results += run_actions(plan, (EQ_TO_POS,))
        rest_plan = plan_optimize(inspect_table(table.metadata, table.io, name=plan.table_name))
        rest = tuple(a for a in rest_plan.actions if a != EQ_TO_POS)
    results += run_actions(rest_plan, rest)
    after = inspect_table(table.metadata, table.io, name=plan.table_name)
    return OptimizeResult(plan, tuple(results), after.table.score, time.monotonic() - started)


def optimize(
    table: PyIcebergTable,
    *,
    name: str,
    run: Runner,
    dry_run: bool = False,
    expire: Callable[[], object] | None = None,
    remove_orphans: Callable[[], object] | None = None,
    note: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Plan one round from the table's health report and (unless ``dry_run``) run it."""
    table = table.refresh()
    plan = plan_optimize(inspect_table(table.metadata, table.io, name=name))
    if dry_run:
        return OptimizeResult(plan, (), None, 0.0)
    return execute_plan(table, plan, run=run, expire=expire, remove_orphans=remove_orphans, note=note)


def describe_action(r: ActionResult) -> str:
    """One line for an action's outcome."""
    where = f" for {', '.join(r.partitions)}" if r.partitions else ""
    if r.skipped is not None:
        return f"{r.action}{where}: skipped this round ({r.skipped})"
    done = f"snapshot {r.snapshot_id}" if r.snapshot_id is not None else "nothing to commit"
    return f"{r.action}{where}: {done} ({r.seconds:.3f} s)"
