"""Splitting data files at row-group offsets and bin-packing the pieces (Iceberg's TableScanUtil)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from icemor.planning.tasks import (
    READ_SPLIT_LOOKBACK,
    READ_SPLIT_OPEN_FILE_COST,
    READ_SPLIT_TARGET_SIZE,
    SplitOptions,
    plan_tasks,
    split_file,
)
from icemor.spec.files import DataFileRef, DeleteFileRef, FileContent
from icemor.spec.tasks import CombinedScanTask, FileScanTask, PlannedFile

if TYPE_CHECKING:
    from collections.abc import Sequence


def data_file(path: str, size: int, offsets: Sequence[int] | None = None) -> DataFileRef:
    return DataFileRef(
        path=path,
        file_format="PARQUET",
        record_count=100,
        file_size_in_bytes=size,
        spec_id=0,
        partition=(),
        data_sequence_number=1,
        split_offsets=tuple(offsets) if offsets is not None else None,
    )


def pos_delete(path: str, size: int) -> DeleteFileRef:
    return DeleteFileRef(
        content=FileContent.POSITION_DELETES,
        path=path,
        file_format="PARQUET",
        record_count=1,
        file_size_in_bytes=size,
        spec_id=0,
        partition=(),
        data_sequence_number=2,
    )


def dv_delete(path: str, file_size: int, content_size: int) -> DeleteFileRef:
    return DeleteFileRef(
        content=FileContent.POSITION_DELETES,
        path=path,
        file_format="PUFFIN",
        record_count=1,
        file_size_in_bytes=file_size,
        spec_id=0,
        partition=(),
        data_sequence_number=2,
        referenced_data_file="x",
        content_offset=4,
        content_size_in_bytes=content_size,
    )


def planned(
    path: str, size: int, offsets: Sequence[int] | None = None, deletes: Sequence[DeleteFileRef] = ()
) -> PlannedFile:
    return PlannedFile(data_file(path, size, offsets), tuple(deletes))


def row_groups_of(piece: FileScanTask, offsets: Sequence[int]) -> list[int]:
    """Indexes of the row groups (by start offset) a piece reads, as the reader selects them."""
    return [i for i, off in enumerate(offsets) if piece.start <= off < piece.start + piece.length]


def groups(tasks: list[CombinedScanTask]) -> list[list[tuple[str, int]]]:
    return [[(t.data_file.path, t.start) for t in ct.tasks] for ct in tasks]


def check_cover(pieces: list[FileScanTask], size: int, offsets: Sequence[int]) -> None:
    """Pieces are contiguous, cover the whole file, and each row group is read exactly once."""
    assert pieces[0].start == 0 or pieces[0].start == offsets[0]
    for prev, nxt in itertools.pairwise(pieces):
        assert prev.start + prev.length == nxt.start
        assert nxt.start in offsets  # pieces begin at row-group starts
    assert pieces[-1].start + pieces[-1].length == size
    seen = [rg for p in pieces for rg in row_groups_of(p, offsets)]
    assert seen == list(range(len(offsets)))


# --- splitting ------------------------------------------------------------------------------


def test_whole_file_without_offsets() -> None:
    pieces = split_file(planned("a", 1000), target_size=100)
    assert [(p.start, p.length) for p in pieces] == [(0, 1000)]
    assert pieces[0].is_whole_file


def test_whole_file_with_single_offset() -> None:
    assert [(p.start, p.length) for p in split_file(planned("a", 1000, [4]), 100)] == [(0, 1000)]


def test_whole_file_when_smaller_than_target() -> None:
    pieces = split_file(planned("a", 300, [4, 100, 200]), target_size=300)
    assert [(p.start, p.length) for p in pieces] == [(0, 300)]


def test_unsorted_offsets_ignored() -> None:
    # spec: split_offsets "must be sorted ascending"; invalid offsets must not produce overlapping reads
    pieces = split_file(planned("a", 300, [200, 4, 100]), target_size=100)
    assert [(p.start, p.length) for p in pieces] == [(0, 300)]


def test_offsets_outside_file_ignored() -> None:
    pieces = split_file(planned("a", 300, [4, 100, 200, 5000]), target_size=100)
    check_cover(pieces, 300, [4, 100, 200])
    assert [row_groups_of(p, [4, 100, 200]) for p in pieces] == [[0], [1], [2]]


def test_one_piece_per_row_group_when_each_reaches_target() -> None:
    offsets = [4, 100, 200]
    pieces = split_file(planned("a", 300, offsets), target_size=100)
    check_cover(pieces, 300, offsets)
    assert [row_groups_of(p, offsets) for p in pieces] == [[0], [1], [2]]
    assert [p.length for p in pieces[1:]] == [100, 100]


def test_small_row_groups_split_then_combined_by_bin_packing() -> None:
    # ten row groups of 100 bytes, target 250: one piece per row group (as Iceberg Java), and
    # bin packing puts two of them in each task
    offsets = [i * 100 for i in range(10)]
    pieces = split_file(planned("a", 1000, offsets), target_size=250)
    check_cover(pieces, 1000, offsets)
    assert len(pieces) == len(offsets)
    tasks = plan_tasks(
        [planned("a", 1000, offsets)], SplitOptions(target_size=250, open_file_cost=1, lookback=10)
    )
    assert sorted(len(ct.tasks) for ct in tasks) == [2] * 5
    assert all(ct.size_in_bytes() <= 250 for ct in tasks)


def test_large_row_group_alone() -> None:
    offsets = [0, 10, 500, 510]
    pieces = split_file(planned("a", 520, offsets), target_size=100)
    check_cover(pieces, 520, offsets)
    rgs = [row_groups_of(p, offsets) for p in pieces]
    assert [1] in rgs or [0, 1] in rgs  # the 490-byte row group 1 is never combined with row group 2
    assert not any(1 in g and 2 in g for g in rgs)


def test_pieces_carry_the_delete_files() -> None:
    d = pos_delete("del.parquet", 50)
    pieces = split_file(planned("a", 300, [4, 100, 200], [d]), target_size=100)
    assert len(pieces) == 3
    assert all(p.delete_files == (d,) for p in pieces)


def test_pieces_do_not_exceed_target_unless_one_row_group() -> None:
    offsets = [4, 100, 200]  # row groups of 96, 100 and 100 bytes
    pieces = split_file(planned("a", 300, offsets), target_size=250)
    for p in pieces:
        assert p.length <= 250 or len(row_groups_of(p, offsets)) == 1


# --- weights and bin packing ----------------------------------------------------------------


def test_size_in_bytes_counts_delete_files() -> None:
    t = FileScanTask(data_file("a", 100), (pos_delete("d1", 30), pos_delete("d2", 20)), 0, 100)
    assert t.size_in_bytes() == 150


def test_size_in_bytes_uses_dv_content_size() -> None:
    # a DV weighs its blob (content_size_in_bytes), not the whole Puffin file
    t = FileScanTask(data_file("a", 100), (dv_delete("dv.puffin", 10_000, 25),), 0, 100)
    assert t.size_in_bytes() == 125


def test_open_file_cost_dominates() -> None:
    files = [planned(f"f{i}", 10) for i in range(4)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=30, lookback=10))
    # each piece weighs max(10, 30) = 30: three fit in 100
    assert groups(tasks) == [[("f0", 0), ("f1", 0), ("f2", 0)], [("f3", 0)]]


def test_delete_files_count_in_open_cost() -> None:
    files = [planned(f"f{i}", 10, deletes=[pos_delete(f"d{i}", 5)]) for i in range(3)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=30, lookback=10))
    # a delete file of one piece weighs as in Java: max(10 + 5, (1 + 1) * 30) = 60, one per bin
    assert groups(tasks) == [[("f0", 0)], [("f1", 0)], [("f2", 0)]]


def test_a_shared_delete_file_is_shared_out_over_its_pieces() -> None:
    d = pos_delete("d", 5)
    files = [planned(f"f{i}", 10, deletes=[d]) for i in range(3)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=30, lookback=10))
    # decoded once per process: each of its 3 pieces weighs max(10 + 5/3, (1 + 1/3) * 30) = 40
    assert groups(tasks) == [[("f0", 0), ("f1", 0)], [("f2", 0)]]


def test_many_small_files_under_global_equality_deletes_combine_to_the_target() -> None:
    """Issue 41: 50 global equality-delete files made Java's weight (1 + 50) x open cost exceed
    the target, one Spark task per 5 kB file."""
    mib = 1 << 20
    deletes = tuple(
        DeleteFileRef(
            content=FileContent.EQUALITY_DELETES,
            path=f"eq{i}",
            file_format="PARQUET",
            record_count=2000,
            file_size_in_bytes=20_000,
            spec_id=0,
            partition=(),
            data_sequence_number=2 + i,
            equality_ids=(1,),
        )
        for i in range(50)
    )
    files = [PlannedFile(data_file(f"f{i}", 5_000), deletes) for i in range(2_000)]
    tasks = plan_tasks(files, SplitOptions(target_size=128 * mib, open_file_cost=4 * mib, lookback=10))
    pieces = sorted(t.data_file.path for ct in tasks for t in ct.tasks)
    assert pieces == sorted(f"f{i}" for i in range(2_000))
    # each piece weighs a little more than the open cost: 31 of them fill a task
    assert [len(ct.tasks) for ct in tasks] == [31] * 64 + [16]


def test_delete_bytes_count_in_weight() -> None:
    files = [planned("f0", 40, deletes=[pos_delete("d", 30)]), planned("f1", 40)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=1, lookback=10))
    # 70 + 40 > 100
    assert groups(tasks) == [[("f0", 0)], [("f1", 0)]]
    files = [planned("f0", 40, deletes=[pos_delete("d", 20)]), planned("f1", 40)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=1, lookback=10))
    assert groups(tasks) == [[("f0", 0), ("f1", 0)]]


def test_first_fit() -> None:
    files = [planned(f"s{s}", s) for s in (60, 50, 40, 30)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=1, lookback=10))
    # 60 | 50 (110 > 100) | 40 joins 60 (= 100) | 30 joins 50 (80)
    assert groups(tasks) == [[("s60", 0), ("s40", 0)], [("s50", 0), ("s30", 0)]]
    assert all(ct.size_in_bytes() <= 100 for ct in tasks)


def test_bins_respect_target() -> None:
    sizes = [7, 33, 58, 12, 91, 4, 45, 45, 10, 70, 30, 1]
    files = [planned(f"f{i}", s) for i, s in enumerate(sizes)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=5, lookback=3))
    paths = sorted(t.data_file.path for ct in tasks for t in ct.tasks)
    assert paths == sorted(f"f{i}" for i in range(len(sizes)))  # every piece exactly once
    for ct in tasks:
        assert sum(max(t.size_in_bytes(), 5) for t in ct.tasks) <= 100


def test_oversized_piece_gets_its_own_task() -> None:
    files = [planned("small", 10), planned("huge", 500), planned("small2", 10)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=1, lookback=10))
    assert sorted(groups(tasks)) == sorted([[("small", 0), ("small2", 0)], [("huge", 0)]])


def test_split_then_pack() -> None:
    offsets = [4, 100, 200]
    files = [planned("big", 300, offsets), planned("tiny", 20)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=1, lookback=10))
    pieces = [t for ct in tasks for t in ct.tasks]
    assert sorted(t.data_file.path for t in pieces) == ["big", "big", "big", "tiny"]
    big = sorted((t for t in pieces if t.data_file.path == "big"), key=lambda t: t.start)
    check_cover(big, 300, offsets)
    for ct in tasks:
        assert ct.size_in_bytes() <= 100 or len(ct.tasks) == 1


def java_pack(weights: list[int], target: int, lookback: int) -> list[list[int]]:
    """Iceberg Java's BinPacking.PackingIterator with largestBinFirst (TableScanUtil.planTasks)."""
    bins: list[list[int]] = []  # [weight, *item indexes]
    out: list[list[int]] = []
    for i, w in enumerate(weights):
        for b in bins:
            if b[0] + w <= target:
                b[0] += w
                b.append(i)
                break
        else:
            bins.append([w, i])
            if len(bins) > lookback:
                largest = max(range(len(bins)), key=lambda j: bins[j][0])  # first of the heaviest
                out.append(bins.pop(largest)[1:])
    out.extend(b[1:] for b in bins)
    return out


def test_java_pack_model_sanity() -> None:
    assert java_pack([60, 50, 40, 30], 100, 10) == [[0, 2], [1, 3]]
    assert java_pack([10, 95, 80], 100, 1) == [[1], [0, 2]]


def test_lookback_eviction_as_java() -> None:
    sizes = [10, 95, 80]
    files = [planned(f"f{i}", s) for i, s in enumerate(sizes)]
    tasks = plan_tasks(files, SplitOptions(target_size=100, open_file_cost=1, lookback=1))
    got = sorted(sorted(int(t.data_file.path[1:]) for t in ct.tasks) for ct in tasks)
    assert got == sorted(java_pack(sizes, 100, 1))  # [[0, 2], [1]]: two tasks, not three


def test_split_options_from_properties() -> None:
    props = {READ_SPLIT_TARGET_SIZE: "1000", READ_SPLIT_OPEN_FILE_COST: "7", READ_SPLIT_LOOKBACK: "3"}
    assert SplitOptions.from_properties(props) == SplitOptions(1000, 7, 3)
    assert SplitOptions.from_properties(props, target_size=5, lookback=None) == SplitOptions(5, 7, 3)
    # Iceberg Java's defaults: 128 MiB, 4 MiB, 10
    assert SplitOptions.from_properties({}) == SplitOptions(128 * 1024 * 1024, 4 * 1024 * 1024, 10)


def test_split_false_keeps_every_file_whole_and_still_packs_small_ones() -> None:
    # a write that clusters by file in the scan's tasks needs each file in one task, from row 0
    offsets = [i * 100 for i in range(10)]
    files = [planned("big", 1000, offsets), planned("s1", 40), planned("s2", 40)]
    options = SplitOptions(target_size=250, open_file_cost=1, lookback=10)
    split = plan_tasks(files, options)
    assert sum(t.data_file.path == "big" for ct in split for t in ct.tasks) == 10  # default: pieces
    whole = plan_tasks(files, options, split=False)
    pieces = [t for ct in whole for t in ct.tasks]
    assert sorted(t.data_file.path for t in pieces) == ["big", "s1", "s2"]
    big = next(t for t in pieces if t.data_file.path == "big")
    assert (big.start, big.length) == (0, 1000)
    assert len(whole) == 2  # the two small files still share a task
