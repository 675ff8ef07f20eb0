"""A rewrite's metrics from its commits' (:mod:`icemor.maintenance._run_metrics`): the counts
summed, the run's own fields (snapshot, commits, failures) the run's. The metrics of real rewrites,
once or in groups: ``test_position_deletes.py``."""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Any

import pytest

from icemor.maintenance._run_metrics import RUN_FIELDS, RunMetrics, run_metrics
from icemor.maintenance.data_files import DataRewriteMetrics
from icemor.maintenance.equality_to_position import ConversionMetrics
from icemor.maintenance.position_deletes import PositionDeleteMetrics


def test_counts_are_summed_and_the_run_fields_are_the_runs() -> None:
    started = time.monotonic()
    one = PositionDeleteMetrics(2, 1, 1, 0, 5, 0, snapshot_id=11, seconds=0.0, commits=1)
    two = PositionDeleteMetrics(3, 0, 2, 0, 7, 1, snapshot_id=12, seconds=0.0, commits=1)
    m = run_metrics(
        PositionDeleteMetrics, [one, two], started, failed=["lost"], stopped=1, positions_before=40
    )
    assert m.seconds >= 0
    assert m == PositionDeleteMetrics(
        5,
        1,
        3,
        40,
        12,
        1,
        snapshot_id=12,
        seconds=m.seconds,
        commits=2,
        failed_commits=("lost",),
        stopped_commits=1,
    )


@pytest.mark.parametrize("kind", [DataRewriteMetrics, ConversionMetrics, PositionDeleteMetrics])
def test_no_commit_is_all_zero(kind: type[Any]) -> None:
    m = run_metrics(kind, (), time.monotonic())
    counts = [f.name for f in dataclasses.fields(kind) if f.name not in RUN_FIELDS]
    assert counts and all(getattr(m, name) == 0 for name in counts)
    assert (m.snapshot_id, m.commits, m.failed_commits, m.stopped_commits) == (None, 0, (), 0)


@pytest.mark.parametrize("kind", [DataRewriteMetrics, ConversionMetrics, PositionDeleteMetrics])
def test_the_run_fields_are_declared_once_keyword_only_after_the_counts(kind: type[Any]) -> None:
    assert issubclass(kind, RunMetrics)
    params = inspect.signature(kind).parameters.values()
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY} == RUN_FIELDS
    assert positional == [f.name for f in dataclasses.fields(kind) if f.name not in RUN_FIELDS]
