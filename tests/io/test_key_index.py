"""The key index of a data file: lookups against a plain scan of the keys, and the sidecar's checks."""

from __future__ import annotations

import shutil
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.types import LongType, StringType

from icemor.io import key_index as ki
from icemor.io.cache import DELETE_CACHE

if TYPE_CHECKING:
    from pathlib import Path


def _expected(columns: list[list[Any]], queries: list[list[Any]]) -> set[tuple[int, int]]:
    """(query row, position) pairs by brute force: NULL equals NULL, as equality deletes compare."""
    where = defaultdict(list)
    for pos, row in enumerate(zip(*columns, strict=True)):
        where[row].append(pos)
    return {(q, pos) for q, row in enumerate(zip(*queries, strict=True)) for pos in where.get(row, [])}


def _got(index: ki.KeyIndex, queries: list[pa.Array]) -> set[tuple[int, int]]:
    rows, positions = index.lookup(queries)
    return set(zip(rows.tolist(), positions.tolist(), strict=True))


ints = st.lists(st.integers(-5, 40), min_size=0, max_size=60)


@settings(max_examples=60, deadline=None)
@given(values=ints, queries=st.lists(st.integers(-8, 45), max_size=20))
def test_integer_keys_unsorted_with_duplicates(values: list[int], queries: list[int]) -> None:
    index = ki.build_key_index([pa.array(values, pa.int64())])
    assert index.exact
    assert _got(index, [pa.array(queries, pa.int64())]) == _expected([values], [queries])
    # a narrower integer type in the batch is the same key
    assert _got(index, [pa.array(queries, pa.int32())]) == _expected([values], [queries])
    # sorted int64 queries (either side may be the shorter one searched in the other)
    q = sorted(queries)
    rows, positions = index.lookup_sorted_ints(np.array(q, dtype=np.int64))
    assert set(zip(rows.tolist(), positions.tolist(), strict=True)) == _expected([values], [q])


text = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "a" * 30, "é", "a" * 30 + "b"]))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(text, st.one_of(st.none(), st.integers(0, 3))), max_size=40),
    queries=st.lists(st.tuples(text, st.one_of(st.none(), st.integers(0, 3))), max_size=15),
)
def test_composite_keys_with_nulls(rows: list[tuple[Any, Any]], queries: list[tuple[Any, Any]]) -> None:
    cols = [[r[0] for r in rows], [r[1] for r in rows]]
    qcols = [[q[0] for q in queries], [q[1] for q in queries]]
    index = ki.build_key_index([pa.array(cols[0], pa.string()), pa.array(cols[1], pa.int64())])
    assert not index.exact
    got = _got(index, [pa.array(qcols[0], pa.string()), pa.array(qcols[1], pa.int64())])
    assert got == _expected(cols, qcols)


def test_integer_keys_with_nulls_and_null_queries() -> None:
    index = ki.build_key_index([pa.array([5, None, 5, 7], pa.int64())])
    assert not index.exact  # NULLs: hashed, and NULL matches NULL
    assert _got(index, [pa.array([5, None, 9], pa.int64())]) == {(0, 0), (0, 2), (1, 1)}
    exact = ki.build_key_index([pa.array([3, 1, 2], pa.int64())])
    assert _got(exact, [pa.array([None, 1], pa.int64())]) == {(1, 1)}  # no NULL in the file


def test_hash_collisions_cost_time_not_correctness(monkeypatch: pytest.MonkeyPatch) -> None:
    from icemor.io import equality

    monkeypatch.setattr(equality, "_HASH_MASK", 0)  # every key hashes alike
    values = ["x", "y", "z", "y"]
    index = ki.build_key_index([pa.array(values)])
    assert _got(index, [pa.array(["y", "w", "z"])]) == {(0, 1), (0, 3), (2, 2)}


# ------------------------------------------------------------------------------------ sidecars


FIELD_TYPES = {1: LongType(), 2: StringType()}


def _data_file(path: Path, ids: list[int], *, plain: bool = False) -> ki.IndexedFile:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"}),
            pa.field("v", pa.string(), metadata={b"PARQUET:field_id": b"2"}),
        ]
    )
    table = pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=schema)
    if plain:  # every value stored as is: files of equal row counts have equal sizes
        pq.write_table(table, path, compression="none", use_dictionary=False)
    else:
        pq.write_table(table, path)
    return ki.IndexedFile(str(path), path.stat().st_size, len(ids), {})


def _positions(f: ki.IndexedFile, keys: list[int]) -> list[int]:
    _, positions = ki.key_index(PyArrowFileIO(), f, (1,), FIELD_TYPES).lookup([pa.array(keys, pa.int64())])
    return sorted(positions.tolist())


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    DELETE_CACHE.clear()


def test_the_sidecar_is_stored_beside_the_file_and_used_by_a_new_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = _data_file(tmp_path / "d.parquet", [30, 10, 20, 10])
    assert _positions(f, [10, 20, 99]) == [1, 2, 3]
    sidecar = tmp_path / ".d.parquet.k1.icemor-keys.parquet"
    assert sidecar.is_file() and ki.sidecar_path(f.path, [1]) == str(sidecar)
    assert ki.data_path_of(str(sidecar)) == f.path
    assert ki.data_path_of(str(tmp_path / "d.parquet")) is None
    # a new process: the sidecar answers, the data file's columns are not read
    DELETE_CACHE.clear()

    def no_read(*args: Any) -> Any:
        raise AssertionError("the data file was read")

    monkeypatch.setattr(ki, "_build_from_file", no_read)
    assert _positions(f, [10, 30]) == [0, 1, 3]


def _rebuilt(f: ki.IndexedFile, keys: list[int], monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], int]:
    """The positions of ``keys`` in a new process, and how many times the index was built from the file."""
    DELETE_CACHE.clear()
    builds = []
    real = ki._build_from_file

    def counted(*args: Any) -> Any:
        builds.append(1)
        return real(*args)

    monkeypatch.setattr(ki, "_build_from_file", counted)
    got = _positions(f, keys)
    monkeypatch.setattr(ki, "_build_from_file", real)
    return got, len(builds)


def test_a_file_rewritten_in_place_with_the_same_size_is_not_described_by_its_old_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.parquet"
    f = _data_file(path, [1, 2, 3, 4], plain=True)
    assert _positions(f, [4]) == [3]
    # same path, size and row count, other keys: only the footer digest tells them apart
    other = _data_file(tmp_path / "other.parquet", [4, 3, 2, 9], plain=True)
    assert other.size == f.size
    shutil.copyfile(other.path, path)
    assert _rebuilt(f, [4, 9], monkeypatch) == ([0, 3], 1)
    assert _rebuilt(f, [4, 9], monkeypatch) == ([0, 3], 0)  # stored again, for the new content


def test_a_sidecar_of_another_file_or_damaged_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _data_file(tmp_path / "a.parquet", [1, 2, 3])
    b = _data_file(tmp_path / "b.parquet", [3, 2, 1])
    assert _positions(a, [1]) == [0] and _positions(b, [1]) == [2]
    sidecar_a, sidecar_b = (tmp_path / f".{n}.parquet.k1.icemor-keys.parquet" for n in "ab")
    shutil.copyfile(sidecar_a, sidecar_b)  # a's index under b's name
    assert _rebuilt(b, [1], monkeypatch) == ([2], 1)
    raw = bytearray(sidecar_b.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # a flipped byte in a page
    sidecar_b.write_bytes(bytes(raw))
    assert _rebuilt(b, [1, 3], monkeypatch) == ([0, 2], 1)
    sidecar_b.write_bytes(b"PAR1 not a parquet file")
    assert _rebuilt(b, [2], monkeypatch) == ([1], 1)


def test_a_sidecar_with_positions_that_are_not_a_permutation_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = _data_file(tmp_path / "d.parquet", [5, 6, 7])
    assert _positions(f, [7]) == [2]
    sidecar = tmp_path / ".d.parquet.k1.icemor-keys.parquet"
    stored = pq.read_table(sidecar)
    forged = stored.set_column(1, "pos", pa.array([0, 0, 1], pa.int64()))
    pq.write_table(forged.replace_schema_metadata(stored.schema.metadata), sidecar)
    assert _rebuilt(f, [7], monkeypatch) == ([2], 1)


def test_a_sidecar_that_cannot_be_written_only_costs_time(tmp_path: Path) -> None:
    f = _data_file(tmp_path / "d.parquet", [1, 2])
    (tmp_path / ".d.parquet.k1.icemor-keys.parquet").mkdir()  # the sidecar's name is taken
    index = ki.build_key_index([pa.array([1, 2], pa.int64())])
    assert ki.save_key_index(PyArrowFileIO(), f.path, f.size, [1], index) is None
    assert _positions(f, [2]) == [1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(-5, 40), min_size=0, max_size=30), min_size=1, max_size=6),
    st.lists(st.integers(-8, 45), min_size=0, max_size=40),
    st.lists(st.lists(st.integers(0, 5), max_size=6), min_size=1, max_size=4),
)
def test_merged_index_finds_what_each_file_holds(
    files: list[list[int]], queries: list[int], rounds: list[list[int]]
) -> None:
    """The merged index over many small files answers, in each round (a subset of the files asked
    for, files joining, leaving and coming back, stale ones dropped), exactly the (key, file,
    position) triples a brute-force scan of the asked files' keys gives."""
    merged = ki.MergedKeyIndex()
    merged.DROP_AFTER = 0  # type: ignore[misc]  # drop stale files as soon as they are half
    q = np.sort(np.asarray(queries, dtype=np.int64))
    indexes = [ki.build_key_index([pa.array(v, pa.int64())]) for v in files]

    def loader(i: int) -> Any:
        return lambda: indexes[i]

    for asked in rounds:
        chosen = sorted({i % len(files) for i in asked})
        given_files = [((f"f{i}", len(files[i]), len(files[i]), (1,)), loader(i)) for i in chosen]
        rows, slots, positions, outside = merged.lookup_sorted_ints(given_files, q)
        assert outside == []
        got = set(zip(q[rows].tolist(), [chosen[s] for s in slots.tolist()], positions.tolist(), strict=True))
        expected = {
            (int(k), i, pos) for i in chosen for pos, v in enumerate(files[i]) for k in q.tolist() if k == v
        }
        assert got == expected


def test_merged_index_leaves_hashed_and_big_files_to_be_searched_alone() -> None:
    merged = ki.MergedKeyIndex()
    merged.MAX_FILE_ROWS = 3  # type: ignore[misc]
    small = ki.build_key_index([pa.array([3, 1, 2], pa.int64())])
    big = ki.build_key_index([pa.array([1, 2, 3, 4], pa.int64())])
    hashed = ki.build_key_index([pa.array(["a", "b"])])
    files = [
        (("s", 1, 3, (1,)), lambda: small),
        (("b", 1, 4, (1,)), lambda: big),
        (("h", 1, 2, (1,)), lambda: hashed),
    ]
    rows, slots, positions, outside = merged.lookup_sorted_ints(files, np.array([1, 3], dtype=np.int64))
    assert outside == [1, 2]
    assert sorted(zip(rows.tolist(), slots.tolist(), positions.tolist(), strict=True)) == [
        (0, 0, 1),
        (1, 0, 0),
    ]
