"""Equality -> position conversion against commits made while it converts (in process): the data
sequence numbers of the new position deletes, partial progress per partition group, and the
equality deletes kept when a group could not be converted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.engines.local import runner
from icemor.maintenance._units import PartialProgress
from icemor.maintenance.equality_to_position import rewrite_equality_deletes
from icemor.planning.manifest_reader import live_delete_files
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from pyiceberg.io import FileIO


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"r{i}" for i in range(lo, hi)]})


def _ids(t: icemor.Table) -> set[int]:
    ids = t.refresh().scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids))
    return set(ids)


def _cdc_delete(name: str, ids: list[int]) -> None:
    icemor.load_table(name).apply_changes(
        pa.table({"id": pa.array(ids, pa.int64()), "v": [None] * len(ids), "op": ["D"] * len(ids)}),
        key=["id"],
    )


def _table(name: str, version: int) -> icemor.Table:
    t = icemor.create_table(
        name,
        _rows(0, 100),
        partition_by=["truncate(100,id)"],
        identifier_fields=["id"],
        properties={"format-version": str(version)},
    )
    t.append(_rows(100, 200))
    return t


def _deletes(t: icemor.Table) -> list[Any]:
    snapshot = t.refresh().metadata.current_snapshot()
    assert snapshot is not None
    return list(live_delete_files(t.io, snapshot))


@pytest.mark.parametrize("version", [2, 3])
def test_new_position_deletes_keep_the_sequence_number_of_the_deletes_they_replace(
    home: Path, version: int
) -> None:
    t = _table("db.e", version)
    _cdc_delete("db.e", [3, 150])
    eq = _deletes(t)  # one per partition, of one commit
    assert len(eq) == 2 and len({d.data_sequence_number for d in eq}) == 1
    t.append(_rows(1000, 1010))  # the table moves on: the conversion's commit is two numbers later
    m = rewrite_equality_deletes(t.refresh().pyiceberg, run=runner(t.io))
    assert m.equality_delete_files_removed == 2 and m.commits == 1
    new = _deletes(t)
    assert {d.content for d in new} == {FileContent.POSITION_DELETES}
    assert len(new) == 2
    # each still applies to its data file (sequence number >= the data file's), not later
    assert {d.data_sequence_number for d in new} == {eq[0].data_sequence_number}
    current = t.metadata.current_snapshot()
    assert current is not None and current.sequence_number == eq[0].data_sequence_number + 2
    assert _ids(t) == (set(range(200)) | set(range(1000, 1010))) - {3, 150}


@pytest.mark.parametrize("version", [2, 3])
def test_partial_progress_replans_a_group_a_writer_touched_and_then_drops_the_equality_deletes(
    home: Path, version: int
) -> None:
    """A DELETE of a row in each partition lands while the first group converts: on v3 its new
    deletion vector conflicts with the group's; on v2 it replaced the position-delete file the
    group folds in. The group is planned again and commits; the last commit drops the equality
    deletes."""
    t = _table("db.g", version)
    t.delete("id = 10 or id = 110")  # a position delete per file, which the conversion folds in
    _cdc_delete("db.g", [3, 150])
    local = runner(t.io)
    calls = [0]

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        out = local(fn, items)
        calls[0] += 1
        if calls[0] == 1:
            icemor.load_table("db.g").delete("id = 20 or id = 120")
        return out

    m = rewrite_equality_deletes(
        t.refresh().pyiceberg, run=run, partial=PartialProgress(enabled=True, max_commits=2)
    )
    assert m.commits == 2 and m.failed_commits == () and m.equality_delete_files_removed == 2
    assert calls[0] == 3  # the first group twice
    assert all(d.content != FileContent.EQUALITY_DELETES for d in _deletes(t))
    assert _ids(t) == set(range(200)) - {3, 150, 10, 110, 20, 120}


def test_equality_deletes_stay_when_a_group_gives_up(home: Path) -> None:
    t = _table("db.h", 3)
    _cdc_delete("db.h", [3, 150])
    local = runner(t.io)
    calls = [0]

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        out = local(fn, items)
        calls[0] += 1
        if calls[0] <= 2:  # both attempts of the first group meet a DELETE of its rows
            icemor.load_table("db.h").delete(f"id = {20 + calls[0]} or id = {120 + calls[0]}")
        return out

    m = rewrite_equality_deletes(
        t.refresh().pyiceberg,
        run=run,
        partial=PartialProgress(enabled=True, max_commits=2, max_group_attempts=2),
    )
    assert m.commits == 1 and len(m.failed_commits) == 1 and m.equality_delete_files_removed == 0
    assert any(d.content == FileContent.EQUALITY_DELETES for d in _deletes(t))
    assert _ids(t) == set(range(200)) - {3, 150, 21, 121, 22, 122}


@pytest.mark.parametrize("partial", [False, True])
def test_equality_deletes_that_apply_to_no_data_file_are_removed(home: Path, partial: bool) -> None:
    t = _table("db.n", 2)
    _cdc_delete("db.n", [3])
    t.delete("id < 100")  # the only data file the equality delete applied to goes
    m = rewrite_equality_deletes(
        t.refresh().pyiceberg, run=runner(t.io), partial=PartialProgress(enabled=partial)
    )
    assert m.commits == 1 and m.equality_delete_files_removed == 1 and m.positions_written == 0
    assert _deletes(t) == []
    assert _ids(t) == set(range(100, 200))
