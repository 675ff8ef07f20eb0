"""Compaction inside a CDC writer: after a batch commits, the writer plans one round of
self-optimizing (:mod:`icemor.maintenance.optimize`) and runs it when the table's debt crosses
its thresholds (the ``icemor.optimize.*`` properties), between its own batches.

The writer is then the table's only committer while it compacts, so the rewrite never races the
stream's own commits (``optimize --watch`` beside a busy writer does). Snapshot expiry and orphan
removal are not run here (they need the catalog's view of every table; ``optimize`` runs them).

The work per batch can be bounded: each action (position-delete compaction, data-file rewrite)
then makes at most ``icemor.cdc.compact.max-groups-per-batch`` of its group commits (an action
spreads its work over ``icemor.optimize.partial-progress.max-commits`` groups, 10), the rest
waiting for the next batches; equality -> position conversion runs whole (its last commit removes
the equality deletes). Unset, a round does all its groups: in ``bench_cdc_compaction.py`` (v2) a
bound of 1 let position-delete files pile up between rounds (late batches 1.70x the early ones,
against 1.39x unbounded in the next run).

``icemor.cdc.compact.enabled`` turns it on (``false`` by default for now: see docs/cdc.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from icemor.exceptions import InvalidArgumentError
from icemor.maintenance.health import inspect_table
from icemor.maintenance.optimize import EXPIRE, ORPHANS, execute_plan, plan_optimize
from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner
    from icemor.maintenance.optimize import OptimizeResult

__all__ = [
    "COMPACT_ENABLED",
    "COMPACT_ENABLED_DEFAULT",
    "COMPACT_MAX_GROUPS",
    "compact_after_batch",
    "compaction_enabled",
]

COMPACT_ENABLED = "icemor.cdc.compact.enabled"
COMPACT_ENABLED_DEFAULT = False
COMPACT_MAX_GROUPS = "icemor.cdc.compact.max-groups-per-batch"


def compaction_enabled(table: PyIcebergTable) -> bool:
    """Whether ``table``'s CDC writers compact between batches (``icemor.cdc.compact.enabled``)."""
    return P.bool_property(table.metadata.properties, COMPACT_ENABLED, COMPACT_ENABLED_DEFAULT)


def compact_after_batch(
    table: PyIcebergTable, *, name: str, run: Runner, note: Callable[[str], None] | None = None
) -> OptimizeResult | None:
    """One round of compaction of ``table`` after a batch committed, when its health report asks
    for any (None: nothing to do); the caller asks :func:`compaction_enabled` first. A conflicting
    action is skipped (the next batch plans again); the batch's own commit stands either way."""
    table = table.refresh()
    plan = plan_optimize(inspect_table(table.metadata, table.io, name=name))
    actions = tuple(a for a in plan.actions if a not in (EXPIRE, ORPHANS))
    if not actions:
        return None
    budget = None
    if COMPACT_MAX_GROUPS in table.metadata.properties:
        budget = P.int_property(table.metadata.properties, COMPACT_MAX_GROUPS, 0)
        if budget < 1:
            msg = f"{COMPACT_MAX_GROUPS} is {budget} but must be >= 1"
            raise InvalidArgumentError(msg)
    return execute_plan(table, replace(plan, actions=actions), run=run, note=note, max_groups=budget)
