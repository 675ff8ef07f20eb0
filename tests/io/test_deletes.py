"""Delete-file loading: equality sets per id set, shared by tasks, with subsumption."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delete_files import equality_delete_file, position_delete_file
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.types import LongType, StringType

from icemor.exceptions import MissingFileError
from icemor.io.cache import DELETE_CACHE
from icemor.io.deletes import equality_delete_sets, union_sorted
from icemor.spec.files import DeleteFileRef

TYPES = {1: LongType(), 2: StringType()}


def _eq_file(tmp_path: Path, name: str, ids: tuple[int, ...], data: dict[str, list[object]]) -> DeleteFileRef:
    types = {"id": (pa.int64(), 1), "cat": (pa.string(), 2)}
    ref = equality_delete_file(tmp_path, name, {c: (*types[c], v) for c, v in data.items()})
    assert ref.equality_ids == ids
    return ref


def test_multi_column_rows_covered_by_single_column_delete_are_dropped(tmp_path: Path) -> None:
    DELETE_CACHE.clear()
    single = _eq_file(tmp_path, "single.parquet", (1,), {"id": [1, None]})
    multi = _eq_file(tmp_path, "multi.parquet", (1, 2), {"id": [1, 2, None, 3], "cat": ["a", "b", "c", None]})
    sets = dict(equality_delete_sets(PyArrowFileIO(), [multi, single], TYPES))
    assert set(sets) == {(1,), (1, 2)}
    # (1, a) and (NULL, c) are covered by the single-column deletes of id 1 and id NULL
    assert sets[(1, 2)].num_rows == 2
    # the remaining multi-column keys still match exactly as before, NULL-safe
    ids = pa.array([2, 2, 3, 3, 1], pa.int64())
    cats = pa.array(["b", "x", None, "y", "zzz"], pa.string())
    assert sets[(1, 2)].matches([ids, cats]).tolist() == [True, False, True, False, False]
    assert sets[(1,)].matches([ids]).tolist() == [False, False, False, False, True]


def test_sets_are_shared_between_tasks(tmp_path: Path) -> None:
    DELETE_CACHE.clear()
    ref = _eq_file(tmp_path, "d.parquet", (1,), {"id": [7]})
    first = equality_delete_sets(PyArrowFileIO(), [ref], TYPES)
    second = equality_delete_sets(PyArrowFileIO(), [ref], TYPES)
    assert first[0][1] is second[0][1]
    assert DELETE_CACHE.loads["equality"] == 1
    assert DELETE_CACHE.loads["equality-set"] == 1


def _pos_file(tmp_path: Path, name: str, rows: list[tuple[str, int]]) -> DeleteFileRef:
    return position_delete_file(tmp_path, name, rows)


def test_fully_deleted_counts_distinct_positions_within_the_file(tmp_path: Path) -> None:
    from icemor.io.deletes import fully_deleted
    from icemor.spec.files import DataFileRef

    DELETE_CACHE.clear()
    data = DataFileRef("file:/d.parquet", "PARQUET", 4, 100, 0, (), 1)
    every = _pos_file(tmp_path, "all.parquet", [(data.path, p) for p in (0, 1, 2, 3)])
    dupes = _pos_file(tmp_path, "dupes.parquet", [(data.path, p) for p in (0, 1, 1, 3)])
    beyond = _pos_file(tmp_path, "beyond.parquet", [(data.path, p) for p in (0, 1, 2, 9)])
    few = _pos_file(tmp_path, "few.parquet", [(data.path, 0)])
    other = _pos_file(tmp_path, "other.parquet", [("file:/x.parquet", p) for p in range(4)])
    io = PyArrowFileIO()
    assert fully_deleted(io, data, [every])
    assert not fully_deleted(io, data, [dupes])  # 4 rows, 3 distinct positions
    assert not fully_deleted(io, data, [beyond])  # position 9 is not a row of this file
    assert fully_deleted(io, data, [dupes, few, beyond])  # together: 0, 1, 2, 3
    assert not fully_deleted(io, data, [other])
    assert DELETE_CACHE.loads["position"] == 5
    assert not fully_deleted(io, data, [few]) and DELETE_CACHE.loads["position"] == 5  # pre-check: no decode


def test_only_local_files_of_pyarrows_file_io_are_memory_mapped(tmp_path: Path) -> None:
    from pyiceberg.io.fsspec import FsspecFileIO

    from icemor.io.deletes import local_path, open_parquet

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    io = PyArrowFileIO()
    assert local_path(io, f"file:{path}") == str(path)
    assert local_path(io, str(path)) == str(path)
    assert local_path(io, "s3://bucket/d.parquet") is None
    assert local_path(io, "file://host/d.parquet") is None  # a remote host's file
    # the shortcut for file:/// paths gives what pyiceberg's parse_location does
    for uri in (
        f"file://{path}",
        "file:///a/b%20c.parquet",
        "file:///a/b.parquet?x=1#f",
        "file:///a;p/b",
        "/a/b#c",
        "//h/a/../b",
    ):
        assert local_path(io, uri) == PyArrowFileIO.parse_location(uri)[2], uri
    assert local_path(FsspecFileIO({}), f"file:{path}") is None  # another FileIO: its own reads
    mapped = open_parquet(io, f"file:{path}", memory_map=True)
    assert mapped.read().column("x").to_pylist() == [1, 2, 3]
    mapped.close()
    with pytest.raises(MissingFileError, match="not found"):
        open_parquet(io, f"file:{tmp_path / 'gone.parquet'}", memory_map=True)
    for memory_map in (True, False):  # local files are opened directly, mapped or read
        opened = open_parquet(io, f"file:{path}", memory_map=memory_map)
        assert opened.read().column("x").to_pylist() == [1, 2, 3]
        opened.close()
        with pytest.raises(MissingFileError, match="not found"):
            open_parquet(io, f"file:{tmp_path / 'gone.parquet'}", memory_map=memory_map)


def test_a_subclass_of_pyarrows_file_io_does_its_own_opens(tmp_path: Path) -> None:
    from pyiceberg.io import InputFile

    from icemor.io.deletes import local_path, open_parquet

    opened: list[str] = []

    class CountingIO(PyArrowFileIO):
        def new_input(self, location: str) -> InputFile:
            opened.append(location)
            return super().new_input(location)

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    io = CountingIO()
    assert local_path(io, f"file:{path}") is None
    for memory_map in (True, False):
        pf = open_parquet(io, f"file:{path}", memory_map=memory_map)
        assert pf.read().column("x").to_pylist() == [1, 2, 3]
        pf.close()
    assert opened == [f"file:{path}"] * 2


def test_sorted_unique_matches_numpy_unique() -> None:
    import numpy as np

    from icemor.io.deletes import sorted_unique

    rng = np.random.default_rng(7)
    cases = [
        np.zeros(0, np.int64),
        np.array([5], np.int64),
        np.arange(0, 1000, 3, dtype=np.int64),  # already strictly increasing: returned as is
        np.array([1, 1, 2, 9, 9, 9], np.int64),  # sorted with repeats
        rng.integers(0, 500, 2000).astype(np.int64),  # unsorted with repeats
    ]
    for a in cases:
        assert np.array_equal(sorted_unique(a), np.unique(a))
    increasing = np.arange(10, dtype=np.int64)
    assert sorted_unique(increasing) is increasing


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60)), st.sets(st.integers(0, 60)))
def test_union_sorted_is_the_union(a: set[int], b: set[int]) -> None:
    x, y = np.array(sorted(a), np.int64), np.array(sorted(b), np.int64)
    assert union_sorted(x, y).tolist() == sorted(a | b)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from(["a", "b", "file:///w/c.parquet", "é"]), st.integers(0, 40))),
    row_group_size=st.integers(1, 8),
    dictionary=st.booleans(),
    path_name=st.sampled_from(["file_path", "path"]),
)
def test_position_file_decodes_every_path_and_position(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[str, int]],
    row_group_size: int,
    dictionary: bool,
    path_name: str,
) -> None:
    """Any order of paths, row groups with their own dictionaries or plain-encoded paths, another
    column name for the path's field id: the positions of each path, sorted and unique."""
    from delete_files import PATH_ID, POS_ID, delete_ref, field

    from icemor.io.deletes import deleted_positions
    from icemor.spec.files import FileContent

    DELETE_CACHE.clear()
    schema = pa.schema(
        [field(path_name, pa.string(), PATH_ID, False), field("pos", pa.int64(), POS_ID, False)]
    )
    table = pa.table({path_name: [r[0] for r in rows], "pos": [r[1] for r in rows]}, schema=schema)
    path = tmp_path_factory.mktemp("pos") / "d.parquet"
    pq.write_table(table, path, row_group_size=row_group_size, use_dictionary=dictionary)
    ref = delete_ref(FileContent.POSITION_DELETES, str(path), len(rows))
    for data_path in ("a", "b", "file:///w/c.parquet", "é", "absent"):
        want = sorted({pos for p, pos in rows if p == data_path})
        assert deleted_positions(PyArrowFileIO(), data_path, (ref,)).tolist() == want


def test_position_file_with_a_null_is_corrupt(tmp_path: Path) -> None:
    from delete_files import PATH_ID, POS_ID, delete_ref, field

    from icemor.exceptions import CorruptFileError
    from icemor.io.deletes import deleted_positions
    from icemor.spec.files import FileContent

    DELETE_CACHE.clear()
    schema = pa.schema([field("file_path", pa.string(), PATH_ID), field("pos", pa.int64(), POS_ID)])
    for paths, positions in ((["a", None], [1, 2]), (["a", "a"], [1, None])):
        pq.write_table(
            pa.table({"file_path": paths, "pos": positions}, schema=schema), tmp_path / "n.parquet"
        )
        ref = delete_ref(FileContent.POSITION_DELETES, str(tmp_path / "n.parquet"), 2)
        with pytest.raises(CorruptFileError, match="NULL"):
            deleted_positions(PyArrowFileIO(), "a", (ref,))
        DELETE_CACHE.clear()
