"""The local engine: scheduling of scan tasks on threads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

import icemor
from icemor.engines import local

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from icemor.io.reader import ReadOptions


def test_columns_are_decoded_in_parallel_only_when_files_are_fewer_than_twice_the_workers(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icemor.catalog import load_catalog

    cat = load_catalog()
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", pa.schema([pa.field("x", pa.int64())]))
    for i in range(4):
        t.append(pa.table({"x": [i]}))
    seen: list[bool] = []
    read_task = local.read_task

    def spy(io: Any, task: Any, opts: ReadOptions) -> Any:
        seen.append(opts.decode_threads)
        return read_task(io, task, opts)

    monkeypatch.setattr(local, "read_task", spy)
    job = icemor.load_table("ns.t").scan().job
    rows = [r for b in local.read_batches(job, workers=2) for r in b.column("x").to_pylist()]
    assert sorted(rows) == [0, 1, 2, 3]
    assert seen == [False] * 4  # 4 files, 2 workers: one file per worker at a time
    seen.clear()
    rows = [r for b in local.read_batches(job, workers=3) for r in b.column("x").to_pylist()]
    assert sorted(rows) == [0, 1, 2, 3]
    assert seen == [True] * 4
