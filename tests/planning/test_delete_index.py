"""Which delete files apply to which data file (spec, "Scan Planning"; Java's DeleteFileIndex)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
)

from icemor.exceptions import CorruptFileError
from icemor.planning import delete_index
from icemor.planning.delete_index import DeleteFileIndex
from icemor.planning.manifest_reader import ManifestFileEntry
from icemor.spec.files import DeleteFileRef, FileContent
from icemor.spec.rules import DELETE_FILE_PATH_FIELD_ID, DELETE_FILE_POS_FIELD_ID, file_path_bounds_contain

if TYPE_CHECKING:
    from collections.abc import Mapping

ID, NAME, SCORE, CODE = 1, 2, 3, 4
FIELD_TYPES: dict[int, PrimitiveType] = {
    ID: LongType(),
    NAME: StringType(),
    SCORE: DoubleType(),
    CODE: IntegerType(),
    DELETE_FILE_PATH_FIELD_ID: StringType(),
    DELETE_FILE_POS_FIELD_ID: LongType(),
}
UNPARTITIONED = 0  # spec 0 is unpartitioned in every test; 1 and 2 are partitioned


def entry(
    content: DataFileContent,
    path: str,
    seq: int,
    *,
    spec_id: int = UNPARTITIONED,
    partition: tuple[Any, ...] = (),
    file_format: FileFormat = FileFormat.PARQUET,
    equality_ids: list[int] | None = None,
    referenced_data_file: str | None = None,
    lower: dict[int, bytes] | None = None,
    upper: dict[int, bytes] | None = None,
    null_counts: dict[int, int] | None = None,
    value_counts: dict[int, int] | None = None,
    content_offset: int | None = None,
    content_size: int | None = None,
) -> ManifestFileEntry:
    df = DataFile.from_args(
        _table_format_version=3,
        content=content,
        file_path=path,
        file_format=file_format,
        partition=Record(*partition),
        record_count=10,
        file_size_in_bytes=1000,
        equality_ids=equality_ids,
        lower_bounds=lower,
        upper_bounds=upper,
        null_value_counts=null_counts,
        value_counts=value_counts,
        referenced_data_file=referenced_data_file,
        content_offset=content_offset,
        content_size_in_bytes=content_size,
    )
    df.spec_id = spec_id
    return ManifestFileEntry(
        data_file=df,
        data_sequence_number=seq,
        file_sequence_number=seq,
        spec_id=spec_id,
        referenced_data_file=referenced_data_file,
        content_offset=content_offset,
        content_size_in_bytes=content_size,
    )


def dv(path: str, seq: int, referenced: str, **kw: Any) -> ManifestFileEntry:
    return entry(
        DataFileContent.POSITION_DELETES,
        path,
        seq,
        file_format=FileFormat.PUFFIN,
        referenced_data_file=referenced,
        content_offset=4,
        content_size=40,
        **kw,
    )


def pos(path: str, seq: int, **kw: Any) -> ManifestFileEntry:
    return entry(DataFileContent.POSITION_DELETES, path, seq, **kw)


def eq(path: str, seq: int, ids: list[int], **kw: Any) -> ManifestFileEntry:
    return entry(DataFileContent.EQUALITY_DELETES, path, seq, equality_ids=ids, **kw)


def index(*entries: ManifestFileEntry) -> DeleteFileIndex:
    return DeleteFileIndex(entries, unpartitioned_spec_ids={UNPARTITIONED}, field_types=FIELD_TYPES)


def applied(
    idx: DeleteFileIndex,
    path: str,
    seq: int,
    *,
    spec_id: int = UNPARTITIONED,
    partition: tuple[Any, ...] = (),
    **stats: Any,
) -> set[str]:
    refs = idx.for_data_file(path, seq, spec_id, partition, **stats)
    paths = [r.path for r in refs]
    assert len(paths) == len(set(paths)), f"a delete file was returned twice: {paths}"
    return set(paths)


def b(ftype: PrimitiveType, value: Any) -> bytes:
    return to_bytes(ftype, value)


A = "s3://bucket/data/a.parquet"
B = "s3://bucket/data/b.parquet"


# --- deletion vectors -----------------------------------------------------------------------


def test_empty_index() -> None:
    idx = index()
    assert not idx
    assert applied(idx, A, 1) == set()


@pytest.mark.parametrize(("data_seq", "expected"), [(1, True), (3, True), (4, False)])
def test_dv_sequence_rule(data_seq: int, expected: bool) -> None:
    idx = index(dv("dv-a.puffin", 3, A))
    assert ("dv-a.puffin" in applied(idx, A, data_seq)) is expected


def test_dv_only_for_its_referenced_file() -> None:
    idx = index(dv("dv-a.puffin", 3, A))
    assert applied(idx, B, 1) == set()


def test_dv_replaces_position_delete_files() -> None:
    idx = index(
        dv("dv-a.puffin", 3, A),
        pos("pos-a-ref.parquet", 3, referenced_data_file=A),
        pos("pos-partition.parquet", 3),
        pos(
            "pos-a-bounds.parquet",
            3,
            lower={DELETE_FILE_PATH_FIELD_ID: A.encode()},
            upper={DELETE_FILE_PATH_FIELD_ID: A.encode()},
        ),
    )
    # with the DV applicable, position delete files are not applied to A
    assert applied(idx, A, 2) == {"dv-a.puffin"}
    # B has no DV: its position delete files apply
    assert applied(idx, B, 2) == {"pos-partition.parquet"}


def test_dv_with_equality_deletes() -> None:
    idx = index(dv("dv-a.puffin", 3, A), pos("pos-partition.parquet", 3), eq("eq.parquet", 3, [ID]))
    assert applied(idx, A, 2) == {"dv-a.puffin", "eq.parquet"}


def test_dv_without_referenced_data_file_is_corrupt() -> None:
    bad = dv("dv.puffin", 3, A)
    bad.referenced_data_file = None
    with pytest.raises(CorruptFileError, match=r"dv\.puffin"):
        index(bad)


def test_two_dvs_for_one_data_file_rejected() -> None:
    with pytest.raises(CorruptFileError):
        idx = index(dv("dv-1.puffin", 3, A), dv("dv-2.puffin", 4, A))
        idx.for_data_file(A, 1, UNPARTITIONED, ())


# --- position delete files ------------------------------------------------------------------


@pytest.mark.parametrize(("data_seq", "expected"), [(1, True), (5, True), (6, False)])
def test_position_file_sequence_rule(data_seq: int, expected: bool) -> None:
    idx = index(pos("pos.parquet", 5))
    assert ("pos.parquet" in applied(idx, A, data_seq)) is expected


def test_position_file_with_referenced_data_file() -> None:
    idx = index(pos("pos-a.parquet", 5, referenced_data_file=A))
    assert applied(idx, A, 5) == {"pos-a.parquet"}
    assert applied(idx, A, 6) == set()
    assert applied(idx, B, 1) == set()


def test_position_file_scoped_by_equal_path_bounds() -> None:
    bounds = {DELETE_FILE_PATH_FIELD_ID: A.encode()}
    idx = index(pos("pos-a.parquet", 5, spec_id=1, partition=(1,), lower=bounds, upper=bounds))
    assert applied(idx, A, 2, spec_id=1, partition=(1,)) == {"pos-a.parquet"}
    assert applied(idx, B, 2, spec_id=1, partition=(1,)) == set()  # same partition, other file
    assert applied(idx, A, 6, spec_id=1, partition=(1,)) == set()


def test_partition_scoped_position_file_pruned_by_path_bounds() -> None:
    idx = index(
        pos(
            "pos.parquet",
            5,
            spec_id=1,
            partition=(1,),
            lower={DELETE_FILE_PATH_FIELD_ID: b"s3://bucket/data/file-1.parquet"},
            upper={DELETE_FILE_PATH_FIELD_ID: b"s3://bucket/data/file-5.parquet"},
        )
    )
    inside = "s3://bucket/data/file-3.parquet"
    assert applied(idx, inside, 2, spec_id=1, partition=(1,)) == {"pos.parquet"}
    assert applied(idx, "s3://bucket/data/file-1.parquet", 2, spec_id=1, partition=(1,)) == {"pos.parquet"}
    assert applied(idx, "s3://bucket/data/file-5.parquet", 2, spec_id=1, partition=(1,)) == {"pos.parquet"}
    # outside the path bounds
    assert applied(idx, "s3://bucket/data/file-9.parquet", 2, spec_id=1, partition=(1,)) == set()
    assert applied(idx, "s3://bucket/data/file-0.parquet", 2, spec_id=1, partition=(1,)) == set()
    # other partition / other spec
    assert applied(idx, inside, 2, spec_id=1, partition=(2,)) == set()
    assert applied(idx, inside, 2, spec_id=2, partition=(1,)) == set()


def test_partition_scoped_position_file_without_bounds() -> None:
    idx = index(pos("pos.parquet", 5, spec_id=1, partition=("x",)))
    assert applied(idx, A, 5, spec_id=1, partition=("x",)) == {"pos.parquet"}
    assert applied(idx, B, 1, spec_id=1, partition=("x",)) == {"pos.parquet"}
    assert applied(idx, A, 5, spec_id=1, partition=("y",)) == set()


def test_many_position_files_sequence_cut() -> None:
    idx = index(*(pos(f"pos-{s}.parquet", s) for s in (7, 1, 5, 3, 9)))
    assert applied(idx, A, 4) == {"pos-5.parquet", "pos-7.parquet", "pos-9.parquet"}
    assert applied(idx, A, 5) == {"pos-5.parquet", "pos-7.parquet", "pos-9.parquet"}
    assert applied(idx, A, 10) == set()


# --- equality delete files ------------------------------------------------------------------


@pytest.mark.parametrize(("data_seq", "expected"), [(1, True), (4, True), (5, False), (6, False)])
def test_equality_strictly_less(data_seq: int, expected: bool) -> None:
    idx = index(eq("eq.parquet", 5, [ID]))
    assert ("eq.parquet" in applied(idx, A, data_seq)) is expected


def test_many_equality_files_sequence_cut() -> None:
    idx = index(*(eq(f"eq-{s}.parquet", s, [ID]) for s in (7, 1, 5, 3, 9)))
    assert applied(idx, A, 5) == {"eq-7.parquet", "eq-9.parquet"}
    assert applied(idx, A, 0) == {f"eq-{s}.parquet" for s in (1, 3, 5, 7, 9)}


def test_unpartitioned_equality_delete_is_global() -> None:
    idx = index(eq("eq-global.parquet", 5, [ID], spec_id=UNPARTITIONED))
    assert applied(idx, A, 1, spec_id=1, partition=(7,)) == {"eq-global.parquet"}
    assert applied(idx, B, 1, spec_id=2, partition=("z", 3)) == {"eq-global.parquet"}
    assert applied(idx, B, 1) == {"eq-global.parquet"}


def test_partitioned_equality_delete_same_spec_and_partition_only() -> None:
    idx = index(eq("eq-p7.parquet", 5, [ID], spec_id=1, partition=(7,)))
    assert applied(idx, A, 1, spec_id=1, partition=(7,)) == {"eq-p7.parquet"}
    assert applied(idx, A, 1, spec_id=1, partition=(8,)) == set()
    assert applied(idx, A, 1, spec_id=2, partition=(7,)) == set()
    assert applied(idx, A, 1) == set()


def test_partition_with_null_value() -> None:
    idx = index(eq("eq-null.parquet", 5, [ID], spec_id=1, partition=(None,)))
    assert applied(idx, A, 1, spec_id=1, partition=(None,)) == {"eq-null.parquet"}
    assert applied(idx, A, 1, spec_id=1, partition=(0,)) == set()


def long_stats(lo: int, hi: int, nulls: int = 0, values: int = 10) -> dict[str, Any]:
    return {
        "lower_bounds": {ID: b(LongType(), lo)},
        "upper_bounds": {ID: b(LongType(), hi)},
        "null_counts": {ID: nulls},
        "value_counts": {ID: values},
    }


def eq_long(lo: int, hi: int, nulls: int = 0, values: int = 10) -> ManifestFileEntry:
    return eq(
        "eq.parquet",
        5,
        [ID],
        lower={ID: b(LongType(), lo)},
        upper={ID: b(LongType(), hi)},
        null_counts={ID: nulls},
        value_counts={ID: values},
    )


@pytest.mark.parametrize(
    ("data_lo", "data_hi", "expected"),
    [
        (0, 50, False),  # entirely below the deletes
        (0, 99, False),
        (0, 100, True),  # touches the lower bound
        (150, 160, True),  # inside
        (0, 1000, True),  # covers
        (200, 300, True),  # touches the upper bound
        (201, 300, False),  # entirely above
        (-(2**62), -1, False),  # negative values order numerically, not by their bytes
    ],
)
def test_equality_pruned_by_value_bounds(data_lo: int, data_hi: int, expected: bool) -> None:
    idx = index(eq_long(100, 200))
    assert ("eq.parquet" in applied(idx, A, 1, **long_stats(data_lo, data_hi))) is expected


def test_equality_negative_bounds_overlap() -> None:
    # little-endian byte comparison would order -5 after 3; numeric order says they overlap
    idx = index(eq_long(-5, -1))
    assert applied(idx, A, 1, **long_stats(-10, 3)) == {"eq.parquet"}
    assert applied(idx, A, 1, **long_stats(0, 3)) == set()


def test_equality_not_pruned_when_both_sides_may_hold_nulls() -> None:
    idx = index(eq_long(100, 200, nulls=1))
    assert applied(idx, A, 1, **long_stats(0, 50, nulls=2)) == {"eq.parquet"}


def test_equality_pruned_when_only_data_has_nulls() -> None:
    # NULL data never matches a non-NULL delete value, so the disjoint ranges still prove no match
    idx = index(eq_long(100, 200, nulls=0))
    assert applied(idx, A, 1, **long_stats(0, 50, nulls=3)) == set()


def test_equality_pruned_when_only_deletes_have_nulls() -> None:
    idx = index(eq_long(100, 200, nulls=2))
    assert applied(idx, A, 1, **long_stats(0, 50, nulls=0)) == set()


def test_equality_null_counts_unknown_means_may_hold_nulls() -> None:
    entry_ = eq("eq.parquet", 5, [ID], lower={ID: b(LongType(), 100)}, upper={ID: b(LongType(), 200)})
    idx = index(entry_)
    stats: dict[str, Any] = {"lower_bounds": {ID: b(LongType(), 0)}, "upper_bounds": {ID: b(LongType(), 50)}}
    assert applied(idx, A, 1, **stats) == {"eq.parquet"}


def test_equality_all_null_deletes_vs_data_without_nulls() -> None:
    idx = index(eq("eq.parquet", 5, [ID], null_counts={ID: 4}, value_counts={ID: 4}))
    assert applied(idx, A, 1, **long_stats(0, 50, nulls=0)) == set()
    assert applied(idx, A, 1, **long_stats(0, 50, nulls=1)) == {"eq.parquet"}


def test_equality_all_null_data_vs_deletes_without_nulls() -> None:
    idx = index(eq_long(0, 50, nulls=0))
    stats: dict[str, Any] = {"null_counts": {ID: 10}, "value_counts": {ID: 10}}
    assert applied(idx, A, 1, **stats) == set()


def test_equality_without_bounds_not_pruned() -> None:
    idx = index(eq("eq.parquet", 5, [ID]))
    assert applied(idx, A, 1, **long_stats(0, 50)) == {"eq.parquet"}
    idx = index(eq_long(100, 200))
    assert applied(idx, A, 1) == {"eq.parquet"}


def test_equality_string_bounds() -> None:
    s = StringType()
    idx = index(
        eq(
            "eq.parquet",
            5,
            [NAME],
            lower={NAME: b(s, "m")},
            upper={NAME: b(s, "p")},
            null_counts={NAME: 0},
            value_counts={NAME: 3},
        )
    )

    def stats(lo: str, hi: str) -> dict[str, Any]:
        return {
            "lower_bounds": {NAME: b(s, lo)},
            "upper_bounds": {NAME: b(s, hi)},
            "null_counts": {NAME: 0},
            "value_counts": {NAME: 3},
        }

    assert applied(idx, A, 1, **stats("a", "c")) == set()
    assert applied(idx, A, 1, **stats("q", "z")) == set()
    assert applied(idx, A, 1, **stats("n", "o")) == {"eq.parquet"}
    assert applied(idx, A, 1, **stats("a", "mango")) == {"eq.parquet"}


def test_equality_multi_column_pruned_if_any_column_disjoint() -> None:
    lt, it = LongType(), IntegerType()
    idx = index(
        eq(
            "eq.parquet",
            5,
            [ID, CODE],
            lower={ID: b(lt, 0), CODE: b(it, 10)},
            upper={ID: b(lt, 100), CODE: b(it, 20)},
            null_counts={ID: 0, CODE: 0},
            value_counts={ID: 5, CODE: 5},
        )
    )

    def stats(code_lo: int, code_hi: int) -> dict[str, Any]:
        return {
            "lower_bounds": {ID: b(lt, 50), CODE: b(it, code_lo)},
            "upper_bounds": {ID: b(lt, 60), CODE: b(it, code_hi)},
            "null_counts": {ID: 0, CODE: 0},
            "value_counts": {ID: 5, CODE: 5},
        }

    assert applied(idx, A, 1, **stats(15, 30)) == {"eq.parquet"}
    assert applied(idx, A, 1, **stats(21, 30)) == set()


def test_equality_pruning_does_not_cross_partitions() -> None:
    # pruning never adds files: a partitioned delete stays out of other partitions whatever the bounds
    idx = index(
        eq(
            "eq.parquet",
            5,
            [ID],
            spec_id=1,
            partition=(1,),
            lower={ID: b(LongType(), 0)},
            upper={ID: b(LongType(), 100)},
        )
    )
    assert applied(idx, A, 1, spec_id=1, partition=(2,), **long_stats(0, 100)) == set()


def test_position_and_equality_together() -> None:
    idx = index(
        pos("pos.parquet", 4),
        pos("pos-a.parquet", 4, referenced_data_file=A),
        eq("eq-old.parquet", 3, [ID]),
        eq("eq-new.parquet", 6, [ID]),
    )
    assert applied(idx, A, 3) == {"pos.parquet", "pos-a.parquet", "eq-new.parquet"}
    assert applied(idx, B, 3) == {"pos.parquet", "eq-new.parquet"}
    assert applied(idx, B, 2) == {"pos.parquet", "eq-old.parquet", "eq-new.parquet"}
    assert applied(idx, A, 5) == {"eq-new.parquet"}
    assert len(idx.delete_files) == 4


def test_one_tuple_per_set_of_applying_delete_files() -> None:
    idx = index(
        pos("pos-a.parquet", 4, referenced_data_file=A),
        eq("eq-old.parquet", 3, [ID]),
        eq("eq-new.parquet", 6, [ID]),
    )
    b_new = idx.for_data_file(B, 3, UNPARTITIONED, ())
    c_new = idx.for_data_file("s3://bucket/data/c.parquet", 4, UNPARTITIONED, ())
    assert [r.path for r in b_new] == ["eq-new.parquet"]
    assert c_new is b_new  # readers memoise what they derive from a set by this object
    b_both = idx.for_data_file(B, 2, UNPARTITIONED, ())
    assert [r.path for r in b_both] == ["eq-old.parquet", "eq-new.parquet"]
    a_all = idx.for_data_file(A, 2, UNPARTITIONED, ())
    assert [r.path for r in a_all] == ["pos-a.parquet", "eq-old.parquet", "eq-new.parquet"]
    assert idx.for_data_file(B, 2, UNPARTITIONED, ()) is b_both
    assert idx.for_data_file(A, 7, UNPARTITIONED, ()) == ()
    # another index's equal set is its own tuple: nothing outlives the index it came from
    other = index(eq("eq-new.parquet", 6, [ID]))
    assert other.for_data_file(B, 3, UNPARTITIONED, ()) is not b_new


# --- the batch API against the per-file rules -------------------------------------------------
#
# A reference copy of the per-file logic the index had before it decided a batch of data files
# at once with arrays: each delete entry judged on its own, bucket by bucket, in the order a data
# file gets its deletes (DV; else position files by path, then by partition; then global
# equality files, then its partition's; each by sequence number, ties in entry order).

DEC, DAY = 5, 6
BATCH_TYPES: dict[int, PrimitiveType] = {
    **FIELD_TYPES,
    DEC: DecimalType(9, 2),
    DAY: DateType(),
}
ORDERED = (IntegerType, LongType, DateType, StringType, DecimalType)
DATA_PATHS = [f"s3://bucket/data/f{i}.parquet" for i in range(6)]


def _ref_bound(bounds: Mapping[int, bytes] | None, fid: int, ftype: PrimitiveType) -> Any:
    if not bounds or fid not in bounds:
        return None
    try:
        return from_bytes(ftype, bounds[fid])
    except Exception:
        return None


def _ref_side(
    fid: int,
    lower: Mapping[int, bytes] | None,
    upper: Mapping[int, bytes] | None,
    nulls: Mapping[int, int] | None,
    values: Mapping[int, int] | None,
) -> tuple[bool | None, bool, Any, Any] | None:
    ftype = BATCH_TYPES.get(fid)
    if not isinstance(ftype, ORDERED):
        return None
    has_nulls = None if nulls is None or fid not in nulls else nulls[fid] > 0
    all_null = False
    if nulls and values:
        n, v = nulls.get(fid), values.get(fid)
        all_null = n is not None and v is not None and n == v
    return has_nulls, all_null, _ref_bound(lower, fid, ftype), _ref_bound(upper, fid, ftype)


def _ref_may_overlap(delete: DataFile, data: dict[str, Any]) -> bool:
    for fid in delete.equality_ids or ():
        d = _ref_side(
            fid, delete.lower_bounds, delete.upper_bounds, delete.null_value_counts, delete.value_counts
        )
        if d is None:
            continue
        f = _ref_side(
            fid, data["lower_bounds"], data["upper_bounds"], data["null_counts"], data["value_counts"]
        )
        assert f is not None
        d_nulls, d_all_null, d_lower, d_upper = d
        f_nulls, f_all_null, f_lower, f_upper = f
        if d_nulls is not False and f_nulls is not False:
            continue
        if d_all_null and f_nulls is False:
            return False
        if f_all_null and d_nulls is False:
            return False
        if d_lower is not None and f_upper is not None and d_lower > f_upper:
            return False
        if d_upper is not None and f_lower is not None and d_upper < f_lower:
            return False
    return True


def reference_applied(
    entries: list[ManifestFileEntry],
    path: str,
    seq: int,
    spec_id: int,
    partition: tuple[Any, ...],
    data: dict[str, Any],
) -> list[str]:
    refs = sorted(((e, e.to_delete_ref()) for e in entries), key=lambda er: er[1].data_sequence_number)
    out = [
        r.path
        for _, r in refs
        if r.is_deletion_vector and r.referenced_data_file == path and seq <= r.data_sequence_number
    ]
    position = [
        (e, r) for e, r in refs if r.content == FileContent.POSITION_DELETES and not r.is_deletion_vector
    ]
    if not out:
        out += [
            r.path for _, r in position if r.referenced_data_file == path and seq <= r.data_sequence_number
        ]
        out += [
            r.path
            for e, r in position
            if r.referenced_data_file is None
            and (r.spec_id, r.partition) == (spec_id, partition)
            and seq <= r.data_sequence_number
            and file_path_bounds_contain(path, e.data_file.lower_bounds, e.data_file.upper_bounds)
        ]
    equality = [
        (e, r) for e, r in refs if r.content == FileContent.EQUALITY_DELETES and seq < r.data_sequence_number
    ]
    out += [r.path for e, r in equality if r.spec_id == UNPARTITIONED and _ref_may_overlap(e.data_file, data)]
    out += [
        r.path
        for e, r in equality
        if r.spec_id != UNPARTITIONED
        and (r.spec_id, r.partition) == (spec_id, partition)
        and _ref_may_overlap(e.data_file, data)
    ]
    return out


_VALUES: dict[int, st.SearchStrategy[Any]] = {
    ID: st.integers(-4, 4),
    CODE: st.integers(-4, 4),
    DAY: st.integers(-4, 4),
    NAME: st.text("abz", max_size=2),
    DEC: st.integers(-400, 400).map(lambda n: Decimal(n).scaleb(-2)),
    SCORE: st.floats(-4, 4),
}


@st.composite
def column_stats(draw: st.DrawFn, fields: list[int]) -> dict[str, Any]:
    """Random statistics of some of ``fields``: bounds (in any order, maybe malformed), counts."""
    stats: dict[str, dict[int, Any] | None] = {}
    for name in ("lower_bounds", "upper_bounds", "null_counts", "value_counts"):
        stats[name] = None if draw(st.integers(0, 5)) == 0 else {}
    for fid in fields:
        for name in ("lower_bounds", "upper_bounds"):
            target = stats[name]
            if target is not None and draw(st.booleans()):
                kind = draw(st.integers(0, 9))
                # a malformed bound (wrong width, not UTF-8) must not prune
                target[fid] = b"\xff" if kind == 0 else to_bytes(BATCH_TYPES[fid], draw(_VALUES[fid]))
        values, nulls = stats["value_counts"], stats["null_counts"]
        count = draw(st.integers(0, 3))
        if values is not None and draw(st.integers(0, 3)) > 0:
            values[fid] = count
        if nulls is not None and draw(st.integers(0, 3)) > 0:
            nulls[fid] = draw(st.sampled_from([0, count, 1]))
    return stats


@st.composite
def delete_entries(draw: st.DrawFn) -> list[ManifestFileEntry]:
    entries: list[ManifestFileEntry] = []
    for k in range(draw(st.integers(0, 8))):
        fields = draw(st.lists(st.sampled_from(list(_VALUES)), min_size=1, max_size=3, unique=True))
        stats = draw(column_stats(fields))
        partitioned = draw(st.booleans())
        entries.append(
            eq(
                f"eq-{k}.parquet",
                draw(st.integers(1, 6)),
                fields,
                spec_id=1 if partitioned else UNPARTITIONED,
                partition=(draw(st.integers(0, 1)),) if partitioned else (),
                lower=stats["lower_bounds"],
                upper=stats["upper_bounds"],
                null_counts=stats["null_counts"],
                value_counts=stats["value_counts"],
            )
        )
    for k in range(draw(st.integers(0, 3))):
        scope = draw(st.sampled_from(["path", "partition", "bounds"]))
        seq = draw(st.integers(1, 6))
        if scope == "path":
            entries.append(
                pos(f"pos-{k}.parquet", seq, referenced_data_file=draw(st.sampled_from(DATA_PATHS)))
            )
        else:
            lo, hi = sorted(draw(st.lists(st.sampled_from(DATA_PATHS), min_size=2, max_size=2)))
            bounds = scope == "bounds"
            entries.append(
                pos(
                    f"pos-{k}.parquet",
                    seq,
                    spec_id=1,
                    partition=(draw(st.integers(0, 1)),),
                    lower={DELETE_FILE_PATH_FIELD_ID: lo.encode()} if bounds else None,
                    upper={DELETE_FILE_PATH_FIELD_ID: hi.encode()} if bounds else None,
                )
            )
    for k, target in enumerate(draw(st.lists(st.sampled_from(DATA_PATHS), max_size=2, unique=True))):
        entries.append(dv(f"dv-{k}.puffin", draw(st.integers(1, 6)), target))
    return draw(st.permutations(entries))


@st.composite
def data_files(draw: st.DrawFn) -> list[tuple[str, int, int, tuple[Any, ...], dict[str, Any]]]:
    files = []
    for _ in range(draw(st.integers(1, 12))):
        partitioned = draw(st.booleans())
        files.append(
            (
                draw(st.sampled_from(DATA_PATHS)),
                draw(st.integers(0, 6)),
                1 if partitioned else UNPARTITIONED,
                (draw(st.integers(0, 1)),) if partitioned else (),
                draw(column_stats(list(_VALUES))),
            )
        )
    return files


@settings(max_examples=300, deadline=None)
@given(entries=delete_entries(), files=data_files(), small_chunks=st.booleans())
def test_batch_is_the_per_file_rule(
    entries: list[ManifestFileEntry],
    files: list[tuple[str, int, int, tuple[Any, ...], dict[str, Any]]],
    small_chunks: bool,
) -> None:
    idx = DeleteFileIndex(entries, unpartitioned_spec_ids={UNPARTITIONED}, field_types=BATCH_TYPES)
    stats = [
        DataFile.from_args(
            file_path=path,
            lower_bounds=s["lower_bounds"],
            upper_bounds=s["upper_bounds"],
            null_value_counts=s["null_counts"],
            value_counts=s["value_counts"],
        )
        for path, _, _, _, s in files
    ]
    # a few rows per array: the batch is decided in several pieces
    with mock.patch.object(delete_index, "_MATRIX_CELLS", 3 if small_chunks else delete_index._MATRIX_CELLS):
        got = idx.for_data_files(
            stats,
            sequence_numbers=[f[1] for f in files],
            spec_ids=[f[2] for f in files],
            partitions=[f[3] for f in files],
        )
    assert len(got) == len(files)
    by_paths: dict[tuple[str, ...], tuple[DeleteFileRef, ...]] = {}
    for (path, seq, spec_id, partition, s), deletes in zip(files, got, strict=True):
        paths = tuple(r.path for r in deletes)
        assert list(paths) == reference_applied(entries, path, seq, spec_id, partition, s)
        assert by_paths.setdefault(paths, deletes) is deletes  # one tuple object per set
        assert idx.for_data_file(path, seq, spec_id, partition, **s) is deletes
