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


def _numbered(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(start, start + n), pa.int64())})


def test_a_run_of_small_pieces_is_joined_in_order_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "read_run", lambda _io, run, _opts: (b for task in run for b in task))
    monkeypatch.setattr(local, "COALESCE_ROWS", 10)
    # pieces' batches: small ones, one at the row limit between them, small ones again
    sizes = [[3, 4], [2], [12], [5], [6, 1], [9]]
    run, at = [], 0
    for piece in sizes:
        run.append([_numbered(at + sum(piece[:i]), n) for i, n in enumerate(piece)])
        at += sum(piece)
    out = list(local._coalesced(None, run, None))  # type: ignore[arg-type]
    assert [v for b in out for v in b.column("x").to_pylist()] == list(range(at))
    # 3+4+2 held when the 12-row batch comes: they go first; then 5+6 reach the limit; 1+9 ends it
    assert [b.num_rows for b in out] == [9, 12, 11, 10]

    monkeypatch.setattr(local, "COALESCE_BYTES", 8 * 4)  # four int64 values
    out = list(local._coalesced(None, [[_numbered(0, 3)], [_numbered(3, 3)], [_numbered(6, 1)]], None))  # type: ignore[arg-type]
    assert [b.num_rows for b in out] == [6, 1]


def test_many_small_files_read_in_runs_keep_the_order_of_reading_them_one_by_one(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icemor.catalog import load_catalog

    cat = load_catalog()
    cat.create_namespace("ns")
    t = cat.create_table(
        "ns.t",
        pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())]),
        properties={"format-version": "2", "write.delete.mode": "merge-on-read"},
    )
    for i in range(40):  # files of 30..69 rows
        n = 30 + i
        t.append(pa.table({"x": range(i * 100, i * 100 + n), "s": [f"f{i}"] * n}))
    icemor.load_table("ns.t").delete("x % 7 = 0 OR x % 100 >= 60")  # files of fewer rows than others
    job = icemor.load_table("ns.t").scan().job

    def rows() -> list[int]:
        return [v for b in local.read_batches(job, workers=1) for v in b.column("x").to_pylist()]

    monkeypatch.setattr(local, "SMALL_PIECES", 1000)
    one_by_one = rows()
    assert sorted(one_by_one) == [
        x for i in range(40) for x in range(i * 100, i * 100 + min(30 + i, 60)) if x % 7
    ]
    monkeypatch.setattr(local, "SMALL_PIECES", 2)
    monkeypatch.setattr(local, "COALESCE_ROWS", 45)
    joined = list(local.read_batches(job, workers=1))
    assert len(joined) < 40
    assert [v for b in joined for v in b.column("x").to_pylist()] == one_by_one
    assert local.count_rows(job, workers=1) == len(one_by_one)  # counted in runs of 20 pieces
    monkeypatch.setattr(local, "SMALL_PIECES", 1)
    assert sorted(r for b in local.read_batches(job, workers=2) for r in b.column("x").to_pylist()) == sorted(
        one_by_one
    )
