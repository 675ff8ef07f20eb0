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


def test_frozen_cycles_are_collected_once_the_frozen_heap_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference cycle alive at a freeze and dropped later would never be collected while frozen:
    once the frozen objects outnumber twice the last full collection's survivors (plus a slack),
    they are thawed and collected in full."""
    import weakref

    gc.unfreeze()
    try:
        monkeypatch.setattr(worker, "FREEZE_SLACK", 0)
        monkeypatch.setattr(worker, "_FROZEN_AT_FULL", [0])
        worker.freeze_survivors()  # a full collection: survivors counted
        base = gc.get_freeze_count()
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        probe = weakref.ref(a)
        worker.freeze_survivors()  # the cycle is alive: frozen with the rest
        del a, b
        worker.freeze_survivors(collect=False)
        assert probe() is not None  # frozen garbage: not collected while the heap is small
        monkeypatch.setattr(worker, "_FROZEN_AT_FULL", [base // 4])
        worker.freeze_survivors(collect=False)  # frozen > 2 x survivors: thawed, collected
        assert probe() is None
        assert worker._FROZEN_AT_FULL[0] > 0  # survivors of that full collection counted
    finally:
        gc.unfreeze()
