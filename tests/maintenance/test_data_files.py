"""`rewrite_data_files` against commits made while it rewrites (in process, deterministic): the
starting sequence number and what a concurrent equality -> position conversion does to it, and
partial progress (one commit per file group; a conflicting group is planned again)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.engines.local import runner
from icemor.exceptions import CommitConflictError
from icemor.maintenance._units import PartialProgress
from icemor.maintenance.data_files import rewrite_data_files
from icemor.maintenance.equality_to_position import rewrite_equality_deletes
from racing import meanwhile

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


def _cdc_delete(t: icemor.Table, ids: list[int]) -> None:
    icemor.load_table(t.name).apply_changes(
        pa.table({"id": pa.array(ids, pa.int64()), "v": [None] * len(ids), "op": ["D"] * len(ids)}),
        key=["id"],
    )


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("partial", [False, True])
def test_a_concurrent_conversion_of_an_equality_delete_committed_after_the_start(
    home: Path, version: int, partial: bool
) -> None:
    """The rewrite keeps the starting sequence number, so a CDC delete committed meanwhile goes on
    applying to the new files; a conversion that then turns it into position deletes of the old
    file (and removes it) must make the rewrite conflict, or the row comes back. Without partial
    progress the rewrite fails; with it, the group is planned again and commits."""
    t = icemor.create_table(
        "db.r", _rows(0, 100), identifier_fields=["id"], properties={"format-version": str(version)}
    )
    t.append(_rows(100, 200))
    t.delete("id = 5")  # the first file gets a position delete: the rewrite's candidate

    def cdc_then_convert() -> None:
        _cdc_delete(t, [7, 150])  # a global equality delete, after the rewrite's start
        converted = rewrite_equality_deletes(icemor.load_table("db.r").pyiceberg, run=runner(t.io))
        assert converted.equality_delete_files_removed == 1

    expected = set(range(200)) - {5, 7, 150}
    run = meanwhile(t.io, cdc_then_convert)
    kwargs = {"delete_file_threshold": 1, "where": "id < 100", "partial": PartialProgress(enabled=partial)}
    if not partial:
        with pytest.raises(
            CommitConflictError, match=r"removed equality delete file .* rows would come back"
        ):
            rewrite_data_files(t.refresh().pyiceberg, run=run, **kwargs)  # type: ignore[arg-type]
    else:
        m = rewrite_data_files(t.refresh().pyiceberg, run=run, **kwargs)  # type: ignore[arg-type]
        assert m.commits == 1 and m.failed_commits == () and m.data_files_rewritten == 1
    assert _ids(t) == expected


def test_an_equality_delete_committed_meanwhile_is_no_conflict_and_still_applies(home: Path) -> None:
    t = icemor.create_table("db.s", _rows(0, 100), identifier_fields=["id"])
    t.append(_rows(100, 200))
    t.delete("id = 5")
    m = rewrite_data_files(
        t.pyiceberg,
        run=meanwhile(t.io, lambda: _cdc_delete(t, [7])),
        delete_file_threshold=1,
        where="id < 100",
    )
    assert m.snapshot_id is not None and m.data_files_rewritten == 1
    assert _ids(t) == set(range(200)) - {5, 7}


def test_partial_progress_commits_each_group_and_replans_the_one_that_conflicted(home: Path) -> None:
    """Four partitions, four commits; a DELETE on one partition's file while the first group is
    rewritten makes that group conflict once: it is planned again (the new delete applied) and
    commits; the other groups' commits are not touched."""
    t = icemor.create_table(
        "db.p", _rows(0, 100), partition_by=["truncate(100,id)"], properties={"format-version": "2"}
    )
    for lo in (100, 200, 300):
        t.append(_rows(lo, lo + 100))
    t.delete("id % 10 = 0")  # every file gets a position delete
    conflicted = []

    def delete_in_the_first_group() -> None:
        m = icemor.load_table("db.p").delete("id = 1 or id = 201")
        conflicted.append(m.snapshot_id)

    m = rewrite_data_files(
        t.refresh().pyiceberg,
        run=meanwhile(t.io, delete_in_the_first_group),
        delete_file_threshold=1,
        partial=PartialProgress(enabled=True, max_commits=4),
    )
    assert conflicted and conflicted[0] is not None
    assert m.commits == 4 and m.failed_commits == () and m.data_files_rewritten == 4
    assert _ids(t) == {i for i in range(400) if i % 10 and i not in (1, 201)}
    summaries = [s.summary.operation.value for s in t.metadata.snapshots[-5:] if s.summary is not None]
    assert summaries == ["delete", "replace", "replace", "replace", "replace"], summaries
    assert not any(p.delete_files for p in t.scan().plan_files())  # every delete applied and gone


def test_partial_progress_gives_up_a_group_after_its_attempts_and_keeps_the_others(home: Path) -> None:
    t = icemor.create_table(
        "db.q",
        _rows(0, 100),
        partition_by=["truncate(100,id)"],
        identifier_fields=["id"],
        properties={"format-version": "2"},
    )
    t.append(_rows(100, 200))
    t.delete("id % 10 = 0")
    local = runner(t.io)
    calls = [0]

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        out = local(fn, items)
        calls[0] += 1
        # both attempts of the first group (whichever partition it is) meet a new equality delete of
        # its rows, which new files at a new sequence number would lose (positions are carried over)
        if calls[0] <= 2:
            _cdc_delete(icemor.load_table("db.q"), [calls[0], 100 + calls[0]])
        return out

    m = rewrite_data_files(
        t.refresh().pyiceberg,
        run=run,
        delete_file_threshold=1,
        use_starting_sequence_number=False,
        partial=PartialProgress(enabled=True, max_commits=2, max_group_attempts=2),
    )
    assert m.commits == 1 and len(m.failed_commits) == 1 and m.data_files_rewritten == 1
    assert "added delete file" in m.failed_commits[0]
    assert _ids(t) == {i for i in range(200) if i % 10 and i not in (1, 2, 101, 102)}
