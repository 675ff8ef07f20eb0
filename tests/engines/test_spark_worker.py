"""Executor-side helpers of the Spark engine, run in this process (no JVM)."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from icemor.engines.spark import worker

if TYPE_CHECKING:
    from pathlib import Path


def test_a_task_leaves_its_survivors_out_of_later_full_collections(home: Path) -> None:
    """PySpark's worker runs gc.collect() after every task: over a warm worker's heap (the delete
    cache, verdicts, memos) that was most of a small task's time."""
    from icemor.catalog import load_catalog

    cat = load_catalog()
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", pa.schema([pa.field("x", pa.int64())]))
    for i in range(3):
        t.append(pa.table({"x": [i, i + 10]}))
    icemor.load_table("ns.t").delete("x = 11")
    job = icemor.load_table("ns.t").scan().job
    spec = worker.io_spec(job.io, job.metadata.location)
    blobs = [worker.task_blob(spec, ct, job.options) for ct in job.plan_tasks()]
    target = pa.schema([pa.field("x", pa.int64())])
    gc.unfreeze()
    try:
        out = list(worker.read_partition(iter([pa.record_batch([pa.array(blobs)], names=["task"])]), target))
        assert sorted(v for b in out for v in b.column("x").to_pylist()) == [0, 1, 2, 10, 12]
        assert gc.get_freeze_count() > 0
        held = gc.get_freeze_count()
        # what the task left is frozen: a full collection no longer walks it
        assert len(gc.get_objects()) < held
    finally:
        gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_frozen_cycles_are_collected_once_peak_memory_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference cycle alive at a freeze and dropped later would never be collected while frozen:
    once the peak memory exceeds twice its value at the last full collection (plus a slack),
    everything is thawed and collected in full."""
    import weakref

    peak = [1_000]
    monkeypatch.setattr(worker, "_peak_memory", lambda: peak[0])
    monkeypatch.setattr(worker, "MEMORY_SLACK", 100)
    monkeypatch.setattr(worker, "_PEAK_AT_FULL", [0])
    gc.unfreeze()
    try:
        worker.freeze_survivors()  # the first task: a full collection, its peak noted
        assert worker._PEAK_AT_FULL[0] == 1_000
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        probe = weakref.ref(a)
        worker.freeze_survivors()  # the cycle is alive: frozen with the rest
        del a, b
        peak[0] = 2_100  # within twice the peak plus the slack
        worker.freeze_survivors(collect=False)
        assert probe() is not None  # frozen garbage: not collected yet
        peak[0] = 2_101
        worker.freeze_survivors(collect=False)  # beyond: thawed, collected
        assert probe() is None
        assert worker._PEAK_AT_FULL[0] == 2_101
    finally:
        gc.unfreeze()


def test_without_a_peak_memory_a_full_collection_comes_every_few_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import weakref

    monkeypatch.setattr(worker, "_peak_memory", lambda: 0)
    monkeypatch.setattr(worker, "TASKS_PER_FULL", 3)
    monkeypatch.setattr(worker, "_TASKS_SINCE_FULL", [0])
    gc.unfreeze()
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        probe = weakref.ref(a)
        worker.freeze_survivors()
        del a, b
        worker.freeze_survivors(collect=False)
        assert probe() is not None
        worker.freeze_survivors(collect=False)  # the third task: a full collection
        assert probe() is None
    finally:
        gc.unfreeze()


def test_a_task_does_not_count_the_frozen_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gc.get_freeze_count`` walks every frozen object: 57 ms a task over a worker that had read
    20,000 small files, 90% of the scan. The end of a task must not call it."""

    def walk() -> int:
        raise AssertionError("gc.get_freeze_count called at the end of a task")

    monkeypatch.setattr(gc, "get_freeze_count", walk)
    gc.unfreeze()
    try:
        for _ in range(3):
            worker.freeze_survivors()
        assert worker._peak_memory() > 0  # (Linux, here: the cheap signal is there)
    finally:
        gc.unfreeze()
