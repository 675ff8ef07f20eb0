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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from icemor.exceptions import CommitConflictError, CommitFailedError, UnsupportedFeatureError

# the modules, not their functions: each action is looked up as it runs (a test replaces one)
from icemor.maintenance import data_files, equality_to_position, position_deletes
from icemor.maintenance._units import PartialProgress
from icemor.maintenance.health import inspect_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner
    from icemor.maintenance._run_metrics import RunMetrics
    from icemor.maintenance.health import HealthReport, PartitionHealth, Thresholds

__all__ = [
    "ActionResult",
    "OptimizePlan",
    "OptimizeResult",
    "PartitionPlan",
    "RoundResult",
    "WatchState",
    "describe_action",
    "describe_round",
    "execute_plan",
    "optimize",
    "plan_optimize",
    "watch_round",
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
    minor_only: bool = False
    """Planned with ``major=False`` (a busy table between its major rounds)."""


@dataclass(frozen=True)
class ActionResult:
    """One action run: its snapshot (None: nothing to commit), seconds, or why it was skipped."""

    action: str
    snapshot_id: int | None
    seconds: float
    skipped: str | None = None
    partitions: tuple[str, ...] = ()
    commits: int = 0
    """Snapshots the action committed (one per group of partitions: partial progress)."""
    failed: tuple[str, ...] = ()
    """Why each group commit given up after its attempts failed (the other groups' stand)."""
    stopped: int = 0
    """Group commits not attempted because the run was asked to stop."""


@dataclass(frozen=True)
class OptimizeResult:
    """A round of optimizing: its plan, what each action did, and the score after it."""

    plan: OptimizePlan
    actions: tuple[ActionResult, ...]
    score_after: float | None
    """None for a dry run (nothing ran)."""
    seconds: float


def _partition_plan(p: PartitionHealth, t: Thresholds, *, major: bool = True) -> PartitionPlan | None:
    """A partition's plan: full when enabled, else major (which applies every delete too, so it
    replaces minor, as in Amoro), else minor; ``major=False``: minor at most."""
    if major and t.full_enabled and p.data_files:
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
    if major and (p.delete_ratio >= t.major_delete_ratio or p.small_files >= t.major_fragment_count):
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


def plan_optimize(report: HealthReport, *, major: bool = True) -> OptimizePlan:
    """Plan from a health report: per partition, then the table-wide actions in their order.
    ``major=False``: minor optimizing only (no data-file rewrite)."""
    t = report.thresholds
    plans = tuple(pp for p in report.partitions if (pp := _partition_plan(p, t, major=major)) is not None)
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
        minor_only=not major,
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
    partial: PartialProgress,
) -> list[ActionResult]:
    """Run ``actions`` of ``plan`` in order, each committing per group of partitions (``partial``);
    an action none of whose groups could commit is skipped this round. Equality -> position
    conversion is never cut short (its last commit removes the equality deletes)."""
    t = plan.report.thresholds
    fragmented = any(
        p.small_files >= t.major_fragment_count
        for p in plan.report.partitions
        if p.delete_ratio < t.major_delete_ratio
    )
    results: list[ActionResult] = []
    for action in actions:
        if partial.stopping():
            break
        asking = tuple(pp.partition or "(unpartitioned)" for pp in plan.partitions if action in pp.actions)
        began = time.monotonic()
        m: RunMetrics | None = None
        try:
            if action == EQ_TO_POS:
                whole = replace(partial, max_groups=None)
                m = equality_to_position.rewrite_equality_deletes(table, run=run, partial=whole)
            elif action == POSITION_COMPACTION:
                m = position_deletes.rewrite_position_deletes(table, run=run, partial=partial)
            elif action in (DATA_REWRITE, FULL_REWRITE):
                m = data_files.rewrite_data_files(
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
                    partial=partial,
                )
            elif action == EXPIRE and expire is not None:
                expire()
            elif action == ORPHANS and remove_orphans is not None:
                remove_orphans()
        except (CommitConflictError, CommitFailedError) as e:
            # every group conflicted (or lost every swap to other writers): nothing was committed;
            # the next round plans again
            result = ActionResult(action, None, time.monotonic() - began, f"conflict: {e}", asking)
        except UnsupportedFeatureError as e:  # e.g. an action that does not write v3 tables yet
            result = ActionResult(action, None, time.monotonic() - began, f"not supported: {e}", asking)
        else:
            result = ActionResult(
                action,
                None if m is None else m.snapshot_id,
                time.monotonic() - began,
                None,
                asking,
                commits=0 if m is None else m.commits,
                failed=() if m is None else m.failed_commits,
                stopped=0 if m is None else m.stopped_commits,
            )
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
    stop: Callable[[], bool] | None = None,
    max_groups: int | None = None,
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
        stop: Asked between group commits: True ends the round there (what committed stays).
        max_groups: At most this many group commits per action (not the equality -> position
            conversion's); the rest is left for a later round.
    """
    started = time.monotonic()
    partial = PartialProgress(
        enabled=True, max_commits=plan.report.thresholds.max_commits, stop=stop, max_groups=max_groups
    )

    def run_actions(p: OptimizePlan, actions: tuple[str, ...]) -> list[ActionResult]:
        return _run_actions(
            table,
            p,
            actions,
            run=run,
            expire=expire,
            remove_orphans=remove_orphans,
            note=note,
            partial=partial,
        )

    results: list[ActionResult] = []
    rest, rest_plan = plan.actions, plan
    if EQ_TO_POS in plan.actions:
        results += run_actions(plan, (EQ_TO_POS,))
        rest_plan = plan_optimize(  # (a minor-only plan stays minor)
            inspect_table(table.metadata, table.io, name=plan.table_name), major=not plan.minor_only
        )
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
    if r.commits > 1:
        done = f"{r.commits} commits, the last snapshot {r.snapshot_id}"
    if r.failed:
        done += f"; {len(r.failed)} group commit(s) given up (conflict: {r.failed[0]})"
    if r.stopped:
        done += f"; {r.stopped} group commit(s) not started (stopping)"
    return f"{r.action}{where}: {done} ({r.seconds:.3f} s)"


@dataclass
class WatchState:
    """What ``optimize --watch`` remembers between rounds."""

    rounds: int = 0
    seen_snapshot_id: int | None = None
    """The head after the previous round (None: no round yet)."""
    last_major: float | None = None
    """``time.monotonic()`` of the last round whose data-file rewrite committed."""
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class RoundResult:
    """One round of the service: its level, what ran, what was skipped and why, the scores."""

    number: int
    level: str
    """``idle``, ``minor``, ``major`` or ``full``."""
    writer_commits: int
    """Snapshots other than optimize's own committed since the previous round."""
    result: OptimizeResult
    skipped: tuple[str, ...]
    """Actions not run this round, each with why."""


def _writer_commits(table: PyIcebergTable, since: int | None) -> int:
    """Snapshots committed on the main branch after ``since`` that are not maintenance's (``replace``)."""
    n = 0
    snapshot = table.metadata.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != since:
        op = snapshot.summary.operation if snapshot.summary is not None else None
        n += op is not None and op.value != "replace"
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return n if since is not None else 0


def watch_round(
    table: PyIcebergTable,
    state: WatchState,
    *,
    name: str,
    run: Runner,
    expire: Callable[[], object] | None = None,
    remove_orphans: Callable[[], object] | None = None,
    stop: Callable[[], bool] | None = None,
) -> RoundResult:
    """One round of ``optimize --watch``: decide the level, run it, report.

    As Amoro schedules self-optimizing: minor optimizing (equality -> position, delete-file
    compaction: cheap, and what keeps reads of a streamed table fast) whenever the health report
    asks for it; major (data-file rewrite) and full too, except on a busy table (writers
    committed since the last round) whose score is still at least ``busy.major-score`` and whose
    last major commit is less than ``busy.major-interval-seconds`` old: a rewrite there would
    mostly race the writers (and rewrite what the next minutes' deletes touch again). Every
    action commits per group of partitions and never waits for a writer: it loses a conflict and
    tries that group again, planned anew.
    """
    table = table.refresh()
    state.rounds += 1
    head = table.metadata.current_snapshot()
    writers = _writer_commits(table, state.seen_snapshot_id)
    report = inspect_table(table.metadata, table.io, name=name)
    t = report.thresholds
    plan = plan_optimize(report)
    skipped: list[str] = []
    majors = [a for a in plan.actions if a in (DATA_REWRITE, FULL_REWRITE)]
    now = time.monotonic()
    since_major = now - (state.last_major if state.last_major is not None else state.started)
    if (
        majors
        and writers
        and report.table.score >= t.busy_major_score
        and since_major < t.busy_major_interval_seconds
    ):
        plan = plan_optimize(report, major=False)
        skipped.append(
            f"{'/'.join(majors)} (busy: {writers} writer commits since the last round, score "
            f"{report.table.score} >= {t.busy_major_score:g}, last major {since_major:.0f} s ago "
            f"< {t.busy_major_interval_seconds:g} s)"
        )
    result = execute_plan(table, plan, run=run, expire=expire, remove_orphans=remove_orphans, stop=stop)
    if any(a.action in (DATA_REWRITE, FULL_REWRITE) and a.commits for a in result.actions):
        state.last_major = time.monotonic()
    for a in result.actions:
        if a.skipped is not None:
            skipped.append(f"{a.action} ({a.skipped})")
    ran = {a.action for a in result.actions}
    skipped.extend(
        f"{a} (stopping)" for a in result.plan.actions if a not in ran and stop is not None and stop()
    )
    level = "full" if FULL_REWRITE in plan.actions else "major" if DATA_REWRITE in plan.actions else "minor"
    if not plan.actions:
        level = "idle"
    current = table.refresh().metadata.current_snapshot() or head
    state.seen_snapshot_id = current.snapshot_id if current is not None else None
    return RoundResult(state.rounds, level, writers, result, tuple(skipped))


def describe_round(r: RoundResult) -> str:
    """The round in one line: level, what each action did, what was skipped and why, the scores."""
    res = r.result
    done = []
    for a in res.actions:
        if a.skipped is not None:
            continue
        what = "nothing to commit" if not a.commits else f"{a.commits} commit{'s' if a.commits > 1 else ''}"
        if a.failed:
            what += f", {len(a.failed)} group(s) given up (conflict: {a.failed[0]})"
        if a.stopped:
            what += f", {a.stopped} group(s) not started (stopping)"
        done.append(f"{a.action}: {what}")
    after = res.score_after if res.score_after is not None else res.plan.score_before
    parts = [
        f"round {r.number}: {r.level}",
        "; ".join(done) if done else "nothing run",
    ]
    if r.skipped:
        parts.append("skipped " + "; ".join(r.skipped))
    parts.append(
        f"score {res.plan.score_before} -> {after} in {res.seconds:.2f} s "
        f"({r.writer_commits} writer commits since the last round)"
    )
    return " | ".join(parts)
