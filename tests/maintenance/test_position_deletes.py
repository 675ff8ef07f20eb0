"""Minor compaction with partial progress (in process): each partition group its own commit, and
a group a concurrent compaction already compacted is planned again and found done; and the
metrics of the three rewrites, field by field, alike whether they commit once or in groups."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.engines.local import runner
from icemor.maintenance._units import PartialProgress
from icemor.maintenance.data_files import rewrite_data_files
from icemor.maintenance.equality_to_position import rewrite_equality_deletes
from icemor.maintenance.position_deletes import rewrite_position_deletes

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from pyiceberg.io import FileIO


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"r{i}" for i in range(lo, hi)]})


def _table(name: str) -> icemor.Table:
    """Two partitions, each with two partition-scoped position-delete files."""
    t = icemor.create_table(
        name,
        _rows(0, 100),
        partition_by=["truncate(100,id)"],
        properties={"format-version": "2", "write.delete.granularity": "partition"},
    )
    t.append(_rows(100, 200))
    t.delete("id = 1 or id = 101")
    t.delete("id = 2 or id = 102")
    return t.refresh()


def _ids(t: icemor.Table) -> set[int]:
    ids = t.refresh().scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids))
    return set(ids)


def _position_files(t: icemor.Table) -> int:
    return sum(len(p.delete_files) for p in t.refresh().scan().plan_files())


def test_each_partition_group_commits_on_its_own(home: Path) -> None:
    t = _table("db.a")
    assert _position_files(t) == 4
    m = rewrite_position_deletes(
        t.pyiceberg, run=runner(t.io), partial=PartialProgress(enabled=True, max_commits=10)
    )
    assert m.commits == 2 and m.delete_files_rewritten == 4 and m.delete_files_added == 2
    assert _position_files(t) == 2
    assert _ids(t) == set(range(200)) - {1, 2, 101, 102}


def test_a_group_compacted_meanwhile_is_planned_again_and_found_done(home: Path) -> None:
    t = _table("db.b")
    local = runner(t.io)
    pending = [True]

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        out = local(fn, items)
        if pending:
            pending.clear()
            done = rewrite_position_deletes(icemor.load_table("db.b").pyiceberg, run=local)
            assert done.commits == 1 and done.delete_files_rewritten == 4
        return out

    m = rewrite_position_deletes(t.pyiceberg, run=run, partial=PartialProgress(enabled=True))
    assert m.commits == 0 and m.failed_commits == ()
    assert _position_files(t) == 2
    assert _ids(t) == set(range(200)) - {1, 2, 101, 102}


def _timeless(m: Any) -> dict[str, Any]:
    out = dataclasses.asdict(m)
    assert out.pop("seconds") >= 0 and out.pop("snapshot_id") is not None
    return out


@pytest.mark.parametrize("partial", [False, True])
def test_each_rewrite_reports_every_field_alike_once_or_in_groups(home: Path, partial: bool) -> None:
    t = _table(f"db.m{int(partial)}")
    run = runner(t.io)
    groups = 2 if partial else 1
    m = rewrite_position_deletes(t.pyiceberg, run=run, partial=PartialProgress(enabled=partial))
    assert _timeless(m) == {
        "delete_files_rewritten": 4,
        "dangling_delete_files_removed": 0,
        "delete_files_added": 2,
        "positions_before": 4,
        "positions_written": 4,
        "data_files_removed": 0,
        "commits": groups,
        "failed_commits": (),
        "stopped_commits": 0,
    }
    t.refresh().apply_changes(
        pa.table({"id": pa.array([3, 150], pa.int64()), "v": [None, None], "op": ["D", "D"]}),
        key=["id"],
        allow_nullable_key=True,  # _table's id is optional
    )
    c = rewrite_equality_deletes(t.refresh().pyiceberg, run=run, partial=PartialProgress(enabled=partial))
    assert _timeless(c) == {
        "data_files_converted": 2,
        "positions_written": 6,
        "position_delete_files_added": 2,
        "equality_delete_files_removed": 2,
        "position_delete_files_removed": 2,
        "data_files_removed": 0,
        "commits": groups,
        "failed_commits": (),
        "stopped_commits": 0,
    }
    d = rewrite_data_files(
        t.refresh().pyiceberg, run=run, delete_file_threshold=1, partial=PartialProgress(enabled=partial)
    )
    rewritten = _timeless(d)
    assert rewritten.pop("bytes_rewritten") > 0 and rewritten.pop("bytes_added") > 0
    assert rewritten == {
        "data_files_rewritten": 2,
        "data_files_added": 2,
        "delete_files_removed": 2,
        "rows_written": 194,
        "position_deletes_carried": 0,
        "commits": groups,
        "failed_commits": (),
        "stopped_commits": 0,
    }
    assert _ids(t) == set(range(200)) - {1, 2, 3, 101, 102, 150}
