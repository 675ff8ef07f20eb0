"""A data-file rewrite that races a DELETE, an UPDATE and a position-mode CDC batch carries their
position deletes onto its new files and commits, instead of failing (in process, deterministic; the
Java and DuckDB reads of the same race are in ``test_data_files_oracle.py``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.exceptions import CommitConflictError
from icemor.maintenance._units import PartialProgress
from icemor.maintenance.data_files import rewrite_data_files
from racing import meanwhile

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"r{i}" for i in range(lo, hi)]})


def _changes(ids: list[int], values: list[str | None], ops: list[str]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()), "op": ops})


def _rows_of(t: icemor.Table, snapshot_id: int | None = None) -> dict[int, str]:
    got = t.refresh().scan(snapshot_id=snapshot_id).to_arrow()
    ids, values = got.column("id").to_pylist(), got.column("v").to_pylist()
    assert len(ids) == len(set(ids)), "a row is there twice"
    return dict(zip(ids, values, strict=True))


def _table(name: str, version: int) -> tuple[icemor.Table, dict[int, str]]:
    """Three data files with position deletes (DVs on v3) and an equality delete at the start."""
    t = icemor.create_table(
        name, _rows(0, 100), identifier_fields=["id"], properties={"format-version": str(version)}
    )
    t.append(_rows(100, 200))
    t.append(_rows(200, 300))
    t.delete("id % 10 = 3")
    t.apply_changes(_changes([5, 105, 205], [None] * 3, ["D"] * 3), key=["id"], deletes="equality")
    model = {i: f"r{i}" for i in range(300) if i % 10 != 3 and i not in (5, 105, 205)}
    assert _rows_of(t) == model
    return t, model


def _writers(
    name: str, model: dict[int, str], snapshots: list[tuple[int, dict[int, str]]]
) -> Callable[[], None]:
    """A DELETE, an UPDATE and a position-mode CDC batch, each a commit; the model follows them."""

    def go() -> None:
        w = icemor.load_table(name)
        w.delete("id IN (7, 107, 250, 13)")  # 13 was deleted at the start already
        for i in (7, 107, 250):
            del model[i]
        snapshots.append((w.refresh().metadata.current_snapshot_id, dict(model)))
        w.update({"v": "'u'"}, "id % 50 = 1")
        model.update(dict.fromkeys((1, 51, 101, 151, 201, 251), "u"))
        snapshots.append((w.refresh().metadata.current_snapshot_id, dict(model)))
        w.apply_changes(
            _changes([20, 120, 1000, 151], ["c20", None, "new", "c151"], ["U", "D", "I", "U"]),
            key=["id"],
            deletes="position",
        )
        model.update({20: "c20", 1000: "new", 151: "c151"})
        del model[120]
        snapshots.append((w.refresh().metadata.current_snapshot_id, dict(model)))

    return go


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("partial", [False, True])
def test_a_rewrite_carries_the_deletes_committed_while_it_ran(
    home: Path, version: int, partial: bool
) -> None:
    t, model = _table("db.c", version)
    snapshots: list[tuple[int, dict[int, str]]] = []
    m = rewrite_data_files(
        t.refresh().pyiceberg,
        run=meanwhile(t.io, _writers("db.c", model, snapshots)),
        delete_file_threshold=1,
        partial=PartialProgress(enabled=partial),
    )
    # 3 deleted + 6 updated + 2 (CDC update, delete) old rows of the rewritten files; 151's update
    # by CDC deletes a row of the UPDATE's new file, not of a rewritten one
    assert (m.commits, m.failed_commits, m.data_files_rewritten) == (1, (), 3)
    assert m.position_deletes_carried == 11
    assert _rows_of(t) == model
    for snapshot_id, expected in snapshots:  # every racing commit still reads as it did
        assert _rows_of(t, snapshot_id) == expected
    # the rewritten files are gone with every delete that named them
    old = {p.data_file.path for p in icemor.load_table("db.c").scan(snapshot_id=snapshots[0][0]).plan_files()}
    plan = t.scan().plan_files()
    assert not old & {p.data_file.path for p in plan}
    live_deletes = {d.path for p in plan for d in p.delete_files}
    assert all(d.referenced_data_file not in old for p in plan for d in p.delete_files), live_deletes


@pytest.mark.parametrize("version", [2, 3])
def test_deletes_landing_between_commit_attempts_are_carried_again(home: Path, version: int) -> None:
    """A second writer commits after the rewrite carried the first one's deletes (the carried file is
    written again, with every position; the first carry's files are removed)."""
    t, model = _table("db.d", version)
    w = icemor.load_table("db.d")
    calls = [0]
    from icemor.maintenance import carry_over

    original = carry_over.CarryOver.__call__

    def carry_then_race(self: carry_over.CarryOver, head: Any) -> Any:
        out = original(self, head)
        calls[0] += 1
        if calls[0] == 1:  # another DELETE lands before this attempt commits
            w.refresh().delete("id IN (8, 108)")
            del model[8], model[108]
        return out

    def first() -> None:
        w.delete("id IN (9, 109)")
        del model[9], model[109]

    mp = pytest.MonkeyPatch()
    mp.setattr(carry_over.CarryOver, "__call__", carry_then_race)
    try:
        m = rewrite_data_files(t.refresh().pyiceberg, run=meanwhile(t.io, first), delete_file_threshold=1)
    finally:
        mp.undo()
    assert calls[0] == 2 and m.position_deletes_carried == 4
    assert _rows_of(t) == model
    data = t.metadata.location.removeprefix("file://") + "/data"
    on_disk = {os.path.join(d, f) for d, _, fs in os.walk(data) for f in fs if "carry" in f}
    referenced = {d.path.removeprefix("file://") for p in t.scan().plan_files() for d in p.delete_files}
    assert on_disk and on_disk <= referenced, sorted(on_disk - referenced)  # the first carry's are gone


def test_equality_deletes_without_the_starting_sequence_number_still_conflict(home: Path) -> None:
    """Only positions are carried: a CDC equality delete with the new files at a new sequence number
    would not apply to them, so the rewrite still refuses (and leaves no file)."""
    t, model = _table("db.e", 2)

    def cdc() -> None:
        icemor.load_table("db.e").apply_changes(_changes([6], [None], ["D"]), key=["id"], deletes="equality")
        del model[6]

    before = set(os.listdir(t.metadata.location.removeprefix("file://") + "/data"))
    with pytest.raises(CommitConflictError, match="added delete file"):
        rewrite_data_files(
            t.refresh().pyiceberg,
            run=meanwhile(t.io, cdc),
            delete_file_threshold=1,
            use_starting_sequence_number=False,
        )
    assert _rows_of(t) == model
    after = set(os.listdir(t.metadata.location.removeprefix("file://") + "/data"))
    assert not [p for p in after - before if "rewrite" in p]  # the rewrite's files are gone
