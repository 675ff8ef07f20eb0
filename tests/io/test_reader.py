"""read_task / count_task over hand-written Parquet data files, position deletes, DVs and equality deletes.

Every expected row set is worked out by hand from the spec's rules: positions count from 0 over
the whole data file; a position delete names (file_path, pos); an equality delete removes rows
equal on its equality columns, NULL matching NULL.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import struct
import zlib
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delete_files import (
    delete_ref,
    equality_delete_file,
    field,
    position_delete_file,
    write,
)
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField, StringType
from pyroaring import BitMap64

from icemor.exceptions import CorruptFileError, MissingFileError
from icemor.io import cache, read_filter, reader, verdicts
from icemor.io.cache import DELETE_CACHE
from icemor.io.read_plan import BATCH_BYTES, leaf_indices
from icemor.io.read_verdicts import VERDICT, verdict_key
from icemor.io.reader import ReadOptions, count_task, output_schema, read_task
from icemor.spec.files import DataFileRef, DeleteFileRef, FileContent
from icemor.spec.tasks import FileScanTask

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.types import IcebergType


ID = NestedField(1, "id", LongType(), required=True)
CATEGORY = NestedField(2, "category", StringType(), required=False)
NAME = NestedField(3, "name", StringType(), required=False)
SCHEMA = Schema(ID, CATEGORY, NAME)
FIELD_TYPES: dict[int, IcebergType] = {1: LongType(), 2: StringType(), 3: StringType(), 4: IntegerType()}
IO = PyArrowFileIO()


def animals_table() -> pa.Table:
    schema = pa.schema(
        [
            field("id", pa.int64(), 1, nullable=False),
            field("category", pa.string(), 2),
            field("name", pa.string(), 3),
        ]
    )
    return pa.table(
        {
            "id": [1, 2, 3, 4],
            "category": ["marsupial", "toy", None, None],
            "name": ["Koala", "Teddy", "Grizzly", "Polar"],
        },
        schema=schema,
    )


def numbered_table(n: int) -> pa.Table:
    """Rows i = 0..n-1: id = 100 + i, category cycling a/b/NULL, name 'r<i>'."""
    schema = pa.schema(
        [
            field("id", pa.int64(), 1, nullable=False),
            field("category", pa.string(), 2),
            field("name", pa.string(), 3),
        ]
    )
    cats = ["a", "b", None]
    return pa.table(
        {
            "id": [100 + i for i in range(n)],
            "category": [cats[i % 3] for i in range(n)],
            "name": [f"r{i}" for i in range(n)],
        },
        schema=schema,
    )


def data_ref(path: str, *, spec_id: int = 0, partition: tuple[Any, ...] = ()) -> DataFileRef:
    md = pq.read_metadata(path)
    return DataFileRef(
        path=path,
        file_format="PARQUET",
        record_count=md.num_rows,
        file_size_in_bytes=os.path.getsize(path),
        spec_id=spec_id,
        partition=partition,
        data_sequence_number=1,
        split_offsets=tuple(row_group_offsets(path)),
    )


def row_group_offsets(path: str) -> list[int]:
    """Row-group starts as Parquet (and Iceberg's split_offsets) define them: the first column chunk's
    dictionary page when it comes first, else its first data page."""
    md = pq.read_metadata(path)
    out = []
    for i in range(md.num_row_groups):
        col = md.row_group(i).column(0)
        dict_off = col.dictionary_page_offset
        if col.has_dictionary_page and dict_off is not None and dict_off < col.data_page_offset:
            out.append(dict_off)
        else:
            out.append(col.data_page_offset)
    return out


def dv_blob(positions: Sequence[int]) -> bytes:
    body = b"\xd1\xd3\x39\x64" + BitMap64(positions).serialize()
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def dv_file(
    tmp: Path, name: str, data_path: str, positions: Sequence[int], *, offset: int = 17
) -> DeleteFileRef:
    blob = dv_blob(positions)
    path = tmp / name
    path.write_bytes(b"PFA1" + b"\x00" * (offset - 4) + blob + b"trailing footer bytes")
    return delete_ref(
        FileContent.POSITION_DELETES,
        str(path),
        len(set(positions)),
        file_format="PUFFIN",
        referenced_data_file=data_path,
        content_offset=offset,
        content_size_in_bytes=len(blob),
    )


def options(
    projected: Schema | None = None,
    *,
    schema: Schema = SCHEMA,
    row_filter: BooleanExpression | None = None,
    **kw: Any,
) -> ReadOptions:
    extra: dict[str, Any] = {"row_filter": row_filter} if row_filter is not None else {}
    kw.setdefault("field_types", FIELD_TYPES)
    return ReadOptions(
        schema=schema, projected_schema=projected if projected is not None else schema, **extra, **kw
    )


def whole(data: DataFileRef, deletes: Sequence[DeleteFileRef] = ()) -> FileScanTask:
    return FileScanTask(data, tuple(deletes), 0, data.file_size_in_bytes)


def read(task: FileScanTask, opts: ReadOptions | None = None) -> list[dict[str, Any]]:
    opts = opts or options()
    batches = list(read_task(IO, task, opts))
    expected_schema = output_schema(opts)
    for b in batches:
        assert b.schema.equals(expected_schema), (b.schema, expected_schema)
    rows: list[dict[str, Any]] = pa.Table.from_batches(batches, schema=expected_schema).to_pylist()
    assert count_task(IO, task, opts) == len(rows) or opts.include_deleted
    return rows


def ids(rows: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in rows]


# --- the spec's example ---------------------------------------------------------------------


def test_spec_equality_delete_example(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    del_id3 = equality_delete_file(tmp_path, "eq-id.parquet", {"id": (pa.int64(), 1, [3])})
    del_id4_null = equality_delete_file(
        tmp_path, "eq-id-cat.parquet", {"id": (pa.int64(), 1, [4]), "category": (pa.string(), 2, [None])}
    )
    rows = read(whole(data, [del_id3, del_id4_null]))
    assert rows == [
        {"id": 1, "category": "marsupial", "name": "Koala"},
        {"id": 2, "category": "toy", "name": "Teddy"},
    ]


def test_spec_example_full_row_equality_delete(tmp_path: Path) -> None:
    # "3 | NULL | Grizzly" written with equality_ids=[1] (extra columns are ignored)
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    d = equality_delete_file(
        tmp_path,
        "eq-full.parquet",
        {
            "id": (pa.int64(), 1, [3]),
            "category": (pa.string(), 2, [None]),
            "name": (pa.string(), 3, ["Grizzly"]),
        },
    )
    d = dataclasses.replace(d, equality_ids=(1,))
    assert ids(read(whole(data, [d]))) == [1, 2, 4]


def test_equality_delete_without_null_match(tmp_path: Path) -> None:
    # (4, 'bear') does not delete (4, NULL): a value never equals NULL
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    d = equality_delete_file(
        tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [4]), "category": (pa.string(), 2, ["bear"])}
    )
    assert ids(read(whole(data, [d]))) == [1, 2, 3, 4]


def test_equality_delete_null_category(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    d = equality_delete_file(tmp_path, "eq-null.parquet", {"category": (pa.string(), 2, [None, "toy"])})
    assert ids(read(whole(data, [d]))) == [1]


def test_no_deletes(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    assert read(whole(data)) == animals_table().to_pylist()


# --- positions over row groups --------------------------------------------------------------


@pytest.fixture
def ten_rows(tmp_path: Path) -> DataFileRef:
    """Ten rows in four row groups: positions [0-2] [3-5] [6-8] [9]."""
    ref = data_ref(write(tmp_path / "ten.parquet", numbered_table(10), row_group_size=3))
    assert pq.read_metadata(ref.path).num_row_groups == 4
    return ref


def test_positions_over_row_groups(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (1, 4, 8, 9)])
    assert ids(read(whole(ten_rows, [d]))) == [100, 102, 103, 105, 106, 107]


def test_position_deletes_of_other_files_ignored(tmp_path: Path, ten_rows: DataFileRef) -> None:
    other = str(tmp_path / "other.parquet")
    d = position_delete_file(
        tmp_path, "pos.parquet", [(other, 0), (ten_rows.path, 5), (other, 5), (other, 6)]
    )
    assert ids(read(whole(ten_rows, [d]))) == [100, 101, 102, 103, 104, 106, 107, 108, 109]


def test_positions_unsorted_duplicates_and_out_of_range(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d1 = position_delete_file(
        tmp_path, "p1.parquet", [(ten_rows.path, 7), (ten_rows.path, 0), (ten_rows.path, 7)]
    )
    d2 = position_delete_file(tmp_path, "p2.parquet", [(ten_rows.path, 0), (ten_rows.path, 50)])
    assert ids(read(whole(ten_rows, [d1, d2]))) == [101, 102, 103, 104, 105, 106, 108, 109]


def test_task_of_later_row_groups(tmp_path: Path, ten_rows: DataFileRef) -> None:
    offsets = row_group_offsets(ten_rows.path)
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (1, 4, 6, 9)])
    start = offsets[2]  # row groups 2 and 3: positions 6..9
    task = FileScanTask(ten_rows, (d,), start, ten_rows.file_size_in_bytes - start)
    rows = read(task, options(pos_column=True))
    assert [(r["id"], r["_pos"]) for r in rows] == [(107, 7), (108, 8)]


def test_task_of_middle_row_group(tmp_path: Path, ten_rows: DataFileRef) -> None:
    offsets = row_group_offsets(ten_rows.path)
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (2, 3, 5, 6)])
    task = FileScanTask(ten_rows, (d,), offsets[1], offsets[2] - offsets[1])  # positions 3..5
    rows = read(task, options(pos_column=True))
    assert [(r["id"], r["_pos"]) for r in rows] == [(104, 4)]


def test_tasks_partition_the_file(tmp_path: Path, ten_rows: DataFileRef) -> None:
    """Ranges [0, o1), [o1, o3), [o3, end) read each row exactly once, deletes at the right rows."""
    offsets = row_group_offsets(ten_rows.path)
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (0, 3, 9)])
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [105])})
    bounds = [0, offsets[1], offsets[3], ten_rows.file_size_in_bytes]
    got: list[int] = []
    for lo, hi in itertools.pairwise(bounds):
        got += ids(read(FileScanTask(ten_rows, (d, eq), lo, hi - lo)))
    assert got == [101, 102, 104, 106, 107, 108]


def test_batch_size_smaller_than_row_group(tmp_path: Path) -> None:
    ref = data_ref(write(tmp_path / "d.parquet", numbered_table(50), row_group_size=20))
    d = position_delete_file(tmp_path, "pos.parquet", [(ref.path, p) for p in (0, 6, 7, 19, 20, 33, 49)])
    rows = read(whole(ref, [d]), options(batch_size=7, pos_column=True))
    assert [r["_pos"] for r in rows] == [p for p in range(50) if p not in {0, 6, 7, 19, 20, 33, 49}]
    assert ids(rows) == [100 + r["_pos"] for r in rows]


def test_deletion_vector(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = dv_file(tmp_path, "dv.puffin", ten_rows.path, [0, 5, 9])
    assert ids(read(whole(ten_rows, [d]))) == [101, 102, 103, 104, 106, 107, 108]


def test_deletion_vector_on_later_row_groups(tmp_path: Path, ten_rows: DataFileRef) -> None:
    offsets = row_group_offsets(ten_rows.path)
    d = dv_file(tmp_path, "dv.puffin", ten_rows.path, [2, 6, 8], offset=100)
    task = FileScanTask(ten_rows, (d,), offsets[2], ten_rows.file_size_in_bytes - offsets[2])
    assert ids(read(task)) == [107, 109]


def test_deletion_vector_with_equality_deletes(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = dv_file(tmp_path, "dv.puffin", ten_rows.path, [0, 1])
    eq = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, [None])})
    # categories by position: a b NULL a b NULL a b NULL a
    assert ids(read(whole(ten_rows, [d, eq]))) == [103, 104, 106, 107, 109]


# --- the equality verdict cache --------------------------------------------------------------


def verdict(task: FileScanTask) -> list[int] | None:
    value = DELETE_CACHE.peek(VERDICT, verdict_key(task))
    return None if value is None else [int(p) for p in value]


def test_verdict_key_memo_is_keyed_by_the_delete_tuple_itself(
    tmp_path: Path, ten_rows: DataFileRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "_MEMO", {})
    pos = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, 1)])
    eq_b = equality_delete_file(tmp_path, "eq-b.parquet", {"category": (pa.string(), 2, ["b"])})
    eq_a = equality_delete_file(tmp_path, "eq-a.parquet", {"id": (pa.int64(), 1, [100])})
    expected = (
        ten_rows.path,
        ten_rows.file_size_in_bytes,
        10,
        None,
        (  # equality deletes only, sorted by path
            (eq_a.path, (1,), eq_a.file_size_in_bytes, 1),
            (eq_b.path, (2,), eq_b.file_size_in_bytes, 1),
        ),
    )
    deletes = (eq_b, pos, eq_a)
    first = verdict_key(whole(ten_rows, deletes))
    assert first == expected
    # its equality part hashes once, but as the plain tuple does, and prints as it (the
    # on-disk verdict store keys by repr)
    assert hash(first) == hash(expected) and repr(first) == repr(expected)
    import pickle

    assert pickle.loads(pickle.dumps(first)) == expected
    # the entry holds the tuple, so its id cannot be reused by another tuple while it is there
    assert cache._MEMO["verdict-equality-part", id(deletes)][0] is deletes
    again = verdict_key(FileScanTask(ten_rows, deletes, 0, ten_rows.file_size_in_bytes))
    assert again == expected
    assert again is not None and first is not None and again[4] is first[4]  # sorted once per tuple

    # an entry under the same id for another tuple is never taken for this one
    other = (eq_a, pos)
    cache._MEMO["verdict-equality-part", id(other)] = (deletes, expected[4])
    got = verdict_key(whole(ten_rows, other))
    assert got is not None and got[4] == ((eq_a.path, (1,), eq_a.file_size_in_bytes, 1),)
    assert verdict_key(whole(ten_rows, (pos,))) is None


def test_verdict_key_memo_is_cleared_when_full(
    tmp_path: Path, ten_rows: DataFileRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = [(object(),) for _ in range(cache._MEMO_MAX)]
    monkeypatch.setattr(cache, "_MEMO", {("verdict-equality-part", id(t)): (t, ()) for t in held})
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [100])})
    deletes = (eq,)
    key = verdict_key(whole(ten_rows, deletes))
    assert key is not None and key[4] == ((eq.path, (1,), eq.file_size_in_bytes, 1),)
    assert list(cache._MEMO) == [("verdict-equality-part", id(deletes))]


def test_equality_verdict_is_recorded_and_replaces_the_probe(
    tmp_path: Path, ten_rows: DataFileRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    eq_cat = equality_delete_file(tmp_path, "eq-cat.parquet", {"category": (pa.string(), 2, ["a"])})
    eq_id = equality_delete_file(tmp_path, "eq-id.parquet", {"id": (pa.int64(), 1, [105, 999])})
    pos = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, 1)])
    task = whole(ten_rows, [pos, eq_cat, eq_id])
    table = numbered_table(10).to_pylist()
    by_eq = [i for i, r in enumerate(table) if r["category"] == "a" or r["id"] == 105]
    live = [r["id"] for i, r in enumerate(table) if i not in by_eq and i != 1]
    assert verdict(task) is None
    assert ids(read(task)) == live
    # the positions the equality deletes remove, and only those (the position delete is not in it)
    assert verdict(task) == by_eq

    def no_probe(*_: Any, **__: Any) -> Any:
        raise AssertionError("equality deletes probed again")

    monkeypatch.setattr("icemor.io.reader.equality_delete_sets", no_probe)
    assert ids(read(task)) == live
    names = read(task, options(Schema(NAME)))
    assert [r["name"] for r in names] == [f"r{i}" for i in range(10) if 100 + i in live]
    flagged = read(task, options(include_deleted=True))
    assert [(r["id"], r["_deleted"]) for r in flagged] == [(100 + i, 100 + i not in live) for i in range(10)]
    # another set of equality deletes is another verdict
    other = whole(ten_rows, [eq_id])
    with pytest.raises(AssertionError, match="probed again"):
        read(other)


def test_equality_verdict_per_split(tmp_path: Path, ten_rows: DataFileRef) -> None:
    offsets = row_group_offsets(ten_rows.path)
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101, 107])})
    bounds = [0, offsets[2], ten_rows.file_size_in_bytes]
    splits = [FileScanTask(ten_rows, (eq,), lo, hi - lo) for lo, hi in itertools.pairwise(bounds)]
    for _ in range(2):  # recorded, then used
        assert [ids(read(t)) for t in splits] == [[100, 102, 103, 104, 105], [106, 108, 109]]
    assert [verdict(t) for t in splits] == [[1], [7]]
    assert ids(read(whole(ten_rows, [eq]))) == [100, 102, 103, 104, 105, 106, 108, 109]


def test_no_equality_verdict_when_row_groups_were_skipped(tmp_path: Path, ten_rows: DataFileRef) -> None:
    """Row group [3-5] is wholly position-deleted, so it is never probed: a verdict recorded from
    that read would miss row 4, which the equality delete removes when those positions do not."""
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [104, 107])})
    pos = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (3, 4, 5)])
    assert ids(read(whole(ten_rows, [pos, eq]))) == [100, 101, 102, 106, 108, 109]
    assert verdict(whole(ten_rows, [eq])) is None
    assert ids(read(whole(ten_rows, [eq]))) == [100, 101, 102, 103, 105, 106, 108, 109]
    assert verdict(whole(ten_rows, [eq])) == [4, 7]


def test_no_equality_verdict_from_a_read_stopped_early(tmp_path: Path, ten_rows: DataFileRef) -> None:
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [108])})
    task = whole(ten_rows, [eq])
    batches = read_task(IO, task, options())
    assert next(batches).num_rows == 3
    batches.close()
    assert verdict(task) is None


# --- include_deleted, metadata columns, projection -----------------------------------------


def test_include_deleted_marks_rows(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (1, 4)])
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [108])})
    rows = read(whole(ten_rows, [d, eq]), options(include_deleted=True))
    assert [(r["id"], r["_deleted"]) for r in rows] == [(100 + i, i in (1, 4, 8)) for i in range(10)]


def test_include_deleted_without_deletes(tmp_path: Path, ten_rows: DataFileRef) -> None:
    rows = read(whole(ten_rows), options(include_deleted=True))
    assert [r["_deleted"] for r in rows] == [False] * 10


def test_include_deleted_with_row_filter(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (0, 3)])
    rows = read(whole(ten_rows, [d]), options(include_deleted=True, row_filter=EqualTo("category", "a")))
    assert [(r["id"], r["_deleted"]) for r in rows] == [(100, True), (103, True), (106, False), (109, False)]


def test_file_and_pos_columns(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (0, 2, 3)])
    projected = Schema(ID)
    rows = read(whole(ten_rows, [d]), options(projected, file_column=True, pos_column=True))
    assert rows == [{"id": 100 + p, "_file": ten_rows.path, "_pos": p} for p in (1, 4, 5, 6, 7, 8, 9)]


def test_projection_excludes_equality_column(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    d = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["toy"])})
    rows = read(whole(data, [d]), options(Schema(NAME)))
    assert rows == [{"name": "Koala"}, {"name": "Grizzly"}, {"name": "Polar"}]


def test_row_filter_and_deletes(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, 6)])
    eq = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["b"])})
    rows = read(whole(ten_rows, [d, eq]), options(row_filter=GreaterThanOrEqual("id", 104)))
    assert ids(rows) == [105, 108, 109]  # 104, 107 are 'b'; 106 deleted by position


def test_renamed_column(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    renamed = Schema(ID, NestedField(2, "kind", StringType(), required=False), NAME)
    # the delete file still carries the old name; only the field id matters
    d = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["toy"])})
    rows = read(whole(data, [d]), options(schema=renamed))
    assert rows == [
        {"id": 1, "kind": "marsupial", "name": "Koala"},
        {"id": 3, "kind": None, "name": "Grizzly"},
        {"id": 4, "kind": None, "name": "Polar"},
    ]


def test_renamed_column_with_filter_and_projection(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    renamed = Schema(NestedField(1, "key", LongType(), required=True), NestedField(3, "label", StringType()))
    rows = read(
        whole(data), options(Schema(renamed.find_field(3)), schema=renamed, row_filter=EqualTo("key", 2))
    )
    assert rows == [{"label": "Teddy"}]


def test_equality_delete_on_dropped_column(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            field("id", pa.int64(), 1, nullable=False),
            field("name", pa.string(), 3),
            field("score", pa.int32(), 4),
        ]
    )
    table = pa.table(
        {"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"], "score": [10, None, 30, 10]}, schema=schema
    )
    data = data_ref(write(tmp_path / "d.parquet", table))
    current = Schema(ID, NAME)  # "score" (id 4) has been dropped; FIELD_TYPES still knows it
    d = equality_delete_file(tmp_path, "eq.parquet", {"score": (pa.int32(), 4, [10, None])})
    rows = read(whole(data, [d]), options(schema=current))
    assert rows == [{"id": 3, "name": "c"}]


def test_equality_delete_on_column_added_after_the_data_file(tmp_path: Path) -> None:
    # the data file predates field 4: its rows read NULL there, so a non-NULL delete value never matches
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    schema = Schema(ID, CATEGORY, NAME, NestedField(4, "score", IntegerType(), required=False))
    d_val = equality_delete_file(tmp_path, "eq-val.parquet", {"score": (pa.int32(), 4, [0, 7])})
    assert ids(read(whole(data, [d_val]), options(schema=schema))) == [1, 2, 3, 4]


def test_equality_delete_is_null_on_int_column(tmp_path: Path) -> None:
    data = data_ref(write(tmp_path / "animals.parquet", animals_table()))
    schema = Schema(ID, CATEGORY, NAME, NestedField(4, "score", IntegerType(), required=False))
    d_null = equality_delete_file(tmp_path, "eq-null.parquet", {"score": (pa.int32(), 4, [None])})
    assert ids(read(whole(data, [d_null]), options(schema=schema))) == []


def test_equality_delete_on_promoted_column(tmp_path: Path) -> None:
    # an int column promoted to long: data file int32, delete file written after promotion as int64
    schema = pa.schema([field("id", pa.int32(), 1, nullable=False), field("name", pa.string(), 3)])
    data = data_ref(
        write(tmp_path / "d.parquet", pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=schema))
    )
    d = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [2])})
    rows = read(whole(data, [d]), options(schema=Schema(ID, NAME)))
    assert rows == [{"id": 1, "name": "a"}, {"id": 3, "name": "c"}]


def test_equality_delete_on_decimal_column_with_nulls(tmp_path: Path) -> None:
    schema = pa.schema([field("id", pa.int64(), 1, nullable=False), field("price", pa.decimal128(10, 2), 5)])
    prices = [Decimal("1.10"), None, Decimal("2.00"), Decimal("1.10")]
    data = data_ref(
        write(tmp_path / "d.parquet", pa.table({"id": [1, 2, 3, 4], "price": prices}, schema=schema))
    )
    table_schema = Schema(ID, NestedField(5, "price", DecimalType(10, 2), required=False))
    d = equality_delete_file(tmp_path, "eq.parquet", {"price": (pa.decimal128(10, 2), 5, [Decimal("1.10")])})
    opts = options(schema=table_schema, field_types={**FIELD_TYPES, 5: DecimalType(10, 2)})
    assert ids(read(whole(data, [d]), opts)) == [2, 3]


def test_data_file_without_field_ids_read_by_name_mapping(tmp_path: Path) -> None:
    # spec, "Column Projection": files without field ids are read through the table's name mapping
    t = animals_table()
    plain = pa.table({c: t.column(c) for c in t.column_names})  # same data, no field-id metadata
    data = data_ref(write(tmp_path / "noids.parquet", plain))
    d = equality_delete_file(
        tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [4]), "category": (pa.string(), 2, [None])}
    )
    p = position_delete_file(tmp_path, "pos.parquet", [(data.path, 0)])
    rows = read(whole(data, [d, p]), options(name_mapping=create_mapping_from_schema(SCHEMA)))
    assert rows == [
        {"id": 2, "category": "toy", "name": "Teddy"},
        {"id": 3, "category": None, "name": "Grizzly"},
    ]


def test_data_file_without_field_ids_or_name_mapping(tmp_path: Path) -> None:
    t = animals_table()
    data = data_ref(write(tmp_path / "noids.parquet", pa.table({c: t.column(c) for c in t.column_names})))
    with pytest.raises(CorruptFileError, match=re.escape(data.path)):
        list(read_task(IO, whole(data), options()))


# --- identity partition values for columns missing from the data file ---------------------
# spec, "Column Projection": a field id missing from a data file reads the identity partition value.

CATEGORY_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category"), spec_id=1
)


@pytest.fixture
def no_category_file(tmp_path: Path) -> DataFileRef:
    """A data file of partition category='a' that does not store the category column (Hive-style)."""
    schema = pa.schema([field("id", pa.int64(), 1, nullable=False), field("name", pa.string(), 3)])
    table = pa.table({"id": [1, 2, 3], "name": ["x", "y", "z"]}, schema=schema)
    return data_ref(write(tmp_path / "part.parquet", table), spec_id=1, partition=("a",))


def test_identity_partition_value_fills_missing_column(no_category_file: DataFileRef) -> None:
    rows = read(whole(no_category_file), options(specs={1: CATEGORY_SPEC}))
    assert rows == [
        {"id": 1, "category": "a", "name": "x"},
        {"id": 2, "category": "a", "name": "y"},
        {"id": 3, "category": "a", "name": "z"},
    ]


def test_row_filter_on_missing_identity_column(no_category_file: DataFileRef) -> None:
    task = whole(no_category_file)
    opts = options(Schema(ID), specs={1: CATEGORY_SPEC}, row_filter=EqualTo("category", "a"))
    assert count_task(IO, task, opts) == 3
    assert ids(read(task, opts)) == [1, 2, 3]


@pytest.mark.parametrize(("value", "expected"), [("a", []), (None, [1, 2, 3])])
def test_equality_delete_on_missing_identity_column(
    tmp_path: Path, no_category_file: DataFileRef, value: str | None, expected: list[int]
) -> None:
    d = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, [value])})
    assert ids(read(whole(no_category_file, [d]), options(specs={1: CATEGORY_SPEC}))) == expected


def test_equality_delete_other_value_on_missing_identity_column(
    tmp_path: Path, no_category_file: DataFileRef
) -> None:
    d = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["b"])})
    assert ids(read(whole(no_category_file, [d]), options(specs={1: CATEGORY_SPEC}))) == [1, 2, 3]


# --- count ----------------------------------------------------------------------------------


def test_count_task_matches_read(tmp_path: Path, ten_rows: DataFileRef) -> None:
    offsets = row_group_offsets(ten_rows.path)
    pos = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in (1, 4, 8, 9, 12)])
    dv = dv_file(tmp_path, "dv.puffin", ten_rows.path, [0, 4, 7])
    eq = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["a"])})
    cases = [
        (whole(ten_rows), options(), 10),
        (whole(ten_rows, [pos]), options(), 6),
        (whole(ten_rows, [dv]), options(), 7),
        (whole(ten_rows, [pos, eq]), options(), 3),  # left 100 102 103 105 106 107; 'a': 100 103 106
        (whole(ten_rows, [pos]), options(row_filter=EqualTo("category", "b")), 1),  # 101 104 107 -> 107
        (FileScanTask(ten_rows, (pos,), offsets[2], ten_rows.file_size_in_bytes - offsets[2]), options(), 2),
    ]
    for task, opts, expected in cases:
        assert count_task(IO, task, opts) == expected
        assert sum(b.num_rows for b in read_task(IO, task, opts)) == expected


# --- failures -------------------------------------------------------------------------------


def test_missing_data_file(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.parquet")
    ref = DataFileRef(path, "PARQUET", 3, 100, 0, (), 1)
    with pytest.raises(MissingFileError, match=re.escape(path)):
        list(read_task(IO, whole(ref), options()))
    with pytest.raises(MissingFileError, match=re.escape(path)):
        count_task(IO, whole(ref), options(row_filter=EqualTo("id", 1)))


def test_missing_delete_file(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, 1)])
    (tmp_path / "pos.parquet").unlink()
    with pytest.raises(MissingFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [d]), options()))


def test_truncated_data_file(tmp_path: Path) -> None:
    path = tmp_path / "trunc.parquet"
    write(path, numbered_table(1000), row_group_size=100)
    ref = data_ref(str(path))
    path.write_bytes(path.read_bytes()[: ref.file_size_in_bytes // 2])
    with pytest.raises(CorruptFileError, match=re.escape(ref.path)):
        list(read_task(IO, whole(ref), options()))


def test_data_file_with_corrupt_page(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    write(path, numbered_table(1000), row_group_size=1000)
    ref = data_ref(str(path))
    raw = bytearray(path.read_bytes())
    start = row_group_offsets(str(path))[0]
    raw[start + 10 : start + 200] = b"\xff" * 190  # clobber the first pages, keep the footer
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match=re.escape(ref.path)):
        list(read_task(IO, whole(ref), options()))


def test_record_count_mismatch(tmp_path: Path, ten_rows: DataFileRef) -> None:
    ref = dataclasses.replace(ten_rows, record_count=11)
    with pytest.raises(CorruptFileError, match=re.escape(ref.path)):
        list(read_task(IO, whole(ref), options()))


def test_truncated_position_delete_file(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, p) for p in range(10)])
    p = tmp_path / "pos.parquet"
    p.write_bytes(p.read_bytes()[:-30])
    with pytest.raises(CorruptFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [d]), options()))


def test_equality_delete_file_lacking_equality_column(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    wrong = dataclasses.replace(d, equality_ids=(1, 2))
    with pytest.raises(CorruptFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [wrong]), options()))


def test_equality_delete_file_without_field_ids(tmp_path: Path, ten_rows: DataFileRef) -> None:
    path = write(tmp_path / "eq-noids.parquet", pa.table({"id": pa.array([101], pa.int64())}))
    d = delete_ref(FileContent.EQUALITY_DELETES, path, 1, equality_ids=(1,))
    with pytest.raises(CorruptFileError, match=re.escape(path)):
        list(read_task(IO, whole(ten_rows, [d]), options()))


def test_position_delete_file_without_position_schema(tmp_path: Path, ten_rows: DataFileRef) -> None:
    schema = pa.schema([field("file_path", pa.string(), 1), field("pos", pa.int64(), 2)])  # wrong ids
    table = pa.table({"file_path": [ten_rows.path], "pos": [1]}, schema=schema)
    path = write(tmp_path / "pos-bad.parquet", table)
    d = delete_ref(FileContent.POSITION_DELETES, path, 1)
    with pytest.raises(CorruptFileError, match=re.escape(path)):
        list(read_task(IO, whole(ten_rows, [d]), options()))


def test_position_delete_file_not_parquet(tmp_path: Path, ten_rows: DataFileRef) -> None:
    p = tmp_path / "garbage.parquet"
    p.write_bytes(b"this is not a parquet file at all")
    d = delete_ref(FileContent.POSITION_DELETES, str(p), 1)
    with pytest.raises(CorruptFileError, match=re.escape(str(p))):
        list(read_task(IO, whole(ten_rows, [d]), options()))


def test_dv_crc_mismatch(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = dv_file(tmp_path, "dv.puffin", ten_rows.path, [1, 2])
    p = tmp_path / "dv.puffin"
    raw = bytearray(p.read_bytes())
    assert d.content_offset is not None and d.content_size_in_bytes is not None
    raw[d.content_offset + d.content_size_in_bytes - 1] ^= 0x01  # last CRC byte
    p.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [d]), options()))


def test_dv_blob_beyond_end_of_file(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = dv_file(tmp_path, "dv.puffin", ten_rows.path, [1, 2])
    assert d.content_size_in_bytes is not None
    far = dataclasses.replace(d, content_offset=10_000)
    with pytest.raises(CorruptFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [far]), options()))


def test_dv_cardinality_mismatch(tmp_path: Path, ten_rows: DataFileRef) -> None:
    d = dv_file(tmp_path, "dv.puffin", ten_rows.path, [1, 2])
    wrong = dataclasses.replace(d, record_count=3)
    with pytest.raises(CorruptFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [wrong]), options()))


def test_fully_deleted_row_group_is_skipped_and_positions_stay_right(tmp_path: Path) -> None:
    """Row group 1 (rows 4..7) is wholly deleted and never decoded; later positions still count it."""
    from unittest import mock

    data = data_ref(write(tmp_path / "data.parquet", numbered_table(12), row_group_size=4))
    deletes = position_delete_file(tmp_path, "pos.parquet", [(data.path, p) for p in (4, 5, 6, 7, 9)])
    decoded: list[Any] = []
    real = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        decoded.append(kwargs.get("row_groups"))
        return real(self, *args, **kwargs)

    with mock.patch.object(pq.ParquetFile, "iter_batches", spy):
        rows = read(whole(data, [deletes]), options(pos_column=True))
    assert [(r["id"] - 100, r["_pos"]) for r in rows] == [(i, i) for i in (0, 1, 2, 3, 8, 10, 11)]
    assert [rg for rg in decoded if rg is not None] == [[0], [2]]
    # with include_deleted the row group is read: its rows are shown, marked
    marked = read(whole(data, [deletes]), options(include_deleted=True))
    assert [r["id"] - 100 for r in marked if r["_deleted"]] == [4, 5, 6, 7, 9]


def test_duplicate_positions_in_a_delete_file_count_once(tmp_path: Path) -> None:
    """count_task must agree with read_task when a position is listed twice (regression)."""
    data = data_ref(write(tmp_path / "data.parquet", numbered_table(6)))
    dupes = position_delete_file(tmp_path, "pos.parquet", [(data.path, 1), (data.path, 1), (data.path, 4)])
    rows = read(whole(data, [dupes]))  # read() also asserts count_task == len(rows)
    assert [r["id"] - 100 for r in rows] == [0, 2, 3, 5]
    assert count_task(IO, whole(data, [dupes]), options()) == 4


def _flip_in_id_pages(path: Path) -> None:
    """XOR one byte well inside the ``id`` column chunk's pages (not a header, not the footer)."""
    col = pq.read_metadata(path).row_group(0).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    raw = bytearray(path.read_bytes())
    raw[start + col.total_compressed_size * 3 // 4] ^= 0x55
    path.write_bytes(bytes(raw))


def test_byte_flip_in_a_page_with_a_checksum_is_a_corrupt_file(tmp_path: Path) -> None:
    """A flipped byte once gave the right row count with wrong sums; the page CRC catches it."""
    path = tmp_path / "crc.parquet"
    pq.write_table(
        numbered_table(5000), path, write_page_checksum=True, use_dictionary=False, compression="none"
    )
    ref = data_ref(str(path))
    _flip_in_id_pages(path)
    with pytest.raises(CorruptFileError, match=re.escape(ref.path)):
        list(read_task(IO, whole(ref), options()))
    # the equality-delete path reads the same pages through the same reader
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    with pytest.raises(CorruptFileError, match=re.escape(ref.path)):
        count_task(IO, whole(ref, [eq]), options())


def test_byte_flip_in_a_delete_file_with_a_checksum_is_a_corrupt_file(
    tmp_path: Path, ten_rows: DataFileRef
) -> None:
    schema = pa.schema([field("id", pa.int64(), 1)])
    path = tmp_path / "eq.parquet"
    pq.write_table(
        pa.table({"id": list(range(100, 3000))}, schema=schema),
        path,
        write_page_checksum=True,
        use_dictionary=False,
        compression="none",
    )
    d = delete_ref(FileContent.EQUALITY_DELETES, str(path), 2900, equality_ids=(1,))
    _flip_in_id_pages(path)
    with pytest.raises(CorruptFileError, match=re.escape(d.path)):
        list(read_task(IO, whole(ten_rows, [d]), options()))


@pytest.mark.parametrize("damage", ["missing", "truncated", "grown"])
def test_count_without_reading_still_checks_the_data_file_is_there(
    tmp_path: Path, ten_rows: DataFileRef, damage: str
) -> None:
    """count reads no data where only position deletes apply; it once counted a missing file."""
    deletes = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, 1)])
    task = whole(ten_rows, [deletes])
    assert count_task(IO, task, options()) == 9
    path = tmp_path / os.path.basename(ten_rows.path)
    if damage == "missing":
        path.unlink()
        expected: type[Exception] = MissingFileError
    else:
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2] if damage == "truncated" else raw + b"\0")
        expected = CorruptFileError
    with pytest.raises(expected, match=re.escape(ten_rows.path)):
        count_task(IO, task, options())
    with pytest.raises(expected, match=re.escape(ten_rows.path)):
        count_task(IO, whole(ten_rows), options())  # no deletes at all: same check


@pytest.mark.parametrize(
    "row_filter",
    [
        "not (category = 'a' or id > 105 or id < 101) or name = 'r3'",
        "category != 'b' and not (category is null) and id != 104 and id != 102",
        "not (category = 'a' and (id = 100 or name = 'r4' or id > 108))",
    ],
)
def test_filter_evaluated_in_pieces_keeps_kleene_logic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row_filter: str
) -> None:
    """Filters beyond MAX_ARROW_PREDICATES are split (a 10,000-term one crashed Arrow); NULLs and
    NOT must give exactly what one Arrow expression gives."""
    from icemor.expr.condition import parse_condition

    data = data_ref(write(tmp_path / "data.parquet", numbered_table(12), row_group_size=5))
    opts = options(row_filter=parse_condition(row_filter, SCHEMA).row_filter)
    whole_expr = ids(read(whole(data), opts))
    monkeypatch.setattr(read_filter, "MAX_ARROW_PREDICATES", 1)
    from pyiceberg.expressions.visitors import bind

    split = read_filter.arrow_filter(bind(SCHEMA, opts.row_filter, case_sensitive=True), SCHEMA)
    assert isinstance(split, tuple)
    assert ids(read(whole(data), opts)) == whole_expr
    assert 0 < len(whole_expr) < 12


# --- batch sizing -------------------------------------------------------------------------------


def test_default_batches_are_sized_by_bytes(tmp_path: Path) -> None:
    n = 40_000
    wide_name = pa.array([f"{i:08d}" + "x" * 1016 for i in range(n)])  # 1 KiB a row
    table = pa.table(
        {"id": pa.array(range(n), pa.int64()), "category": pa.nulls(n, pa.string()), "name": wide_name},
        schema=numbered_table(1).schema,
    )
    ref = data_ref(write(tmp_path / "wide.parquet", table))
    narrow = list(read_task(IO, whole(ref), options(Schema(ID))))
    assert [b.num_rows for b in narrow] == [n]  # 320 KB of ids: one batch
    wide = list(read_task(IO, whole(ref), options()))
    assert sum(b.num_rows for b in wide) == n
    assert len(wide) >= 2 and max(b.nbytes for b in wide) <= 2 * BATCH_BYTES
    assert ids(read(whole(ref), options(batch_size=7_000))) == list(range(n))


def test_leaf_indices_follow_parquet_leaf_order(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.int32()),
            pa.field("s", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.list_(pa.string()))])),
            pa.field(
                "m", pa.map_(pa.string(), pa.struct([pa.field("p", pa.int64()), pa.field("q", pa.bool_())]))
            ),
            pa.field("z.dot", pa.string()),
        ]
    )
    path = write(tmp_path / "nested.parquet", schema.empty_table())
    parquet_schema = pq.ParquetFile(path).schema
    leaves = [parquet_schema.column(i).path for i in range(len(parquet_schema))]
    for columns in (["a"], ["s"], ["m"], ["z.dot"], ["a", "z.dot"], ["m", "s"]):
        got = [leaves[i] for i in leaf_indices(schema, columns)]
        # a leaf path starts with its top-level column's name and a dot (or is that name)
        want = [p for p in leaves if any(p == c or p.startswith(c + ".") for c in columns)]
        assert got == want, columns


def test_projection_memo_across_files_and_projections(tmp_path: Path) -> None:
    """Files written alike share the remembered projection; each projection has its own."""
    a = data_ref(write(tmp_path / "a.parquet", numbered_table(5)))
    b_table = numbered_table(5).set_column(
        0, numbered_table(5).schema.field("id"), pa.array(range(5), pa.int64())
    )
    b = data_ref(write(tmp_path / "b.parquet", b_table))
    reordered = Schema(NAME, ID)
    for _ in range(2):  # the first read of each remembers, the second uses it
        assert read(whole(a), options(reordered)) == [{"name": f"r{i}", "id": 100 + i} for i in range(5)]
        assert read(whole(b), options(reordered)) == [{"name": f"r{i}", "id": i} for i in range(5)]
        assert read(whole(b), options(Schema(CATEGORY))) == [
            {"category": c} for c in ["a", "b", None, "a", "b"]
        ]


def test_decoding_on_the_reading_thread_reads_the_same_rows(tmp_path: Path) -> None:
    ref = data_ref(write(tmp_path / "d.parquet", numbered_table(50), row_group_size=20))
    d = position_delete_file(tmp_path, "pos.parquet", [(ref.path, p) for p in (0, 7, 19, 20, 49)])
    threaded = read(whole(ref, [d]), options(batch_size=7))
    assert read(whole(ref, [d]), options(batch_size=7, decode_threads=False)) == threaded
    assert ids(threaded) == [100 + p for p in range(50) if p not in {0, 7, 19, 20, 49}]


# --- the equality verdict stored on disk (icemor.io.verdicts) ---------------------------------


@pytest.fixture
def verdict_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "verdicts"
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(directory))
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE_BYTES", raising=False)
    new_process(monkeypatch)
    return directory


def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts with: no verdict or stat in memory, no store refused yet."""
    DELETE_CACHE.clear()
    monkeypatch.setattr(verdicts, "_STORES", {})
    monkeypatch.setattr(verdicts, "_WARNED", set())


def stored(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*/*") if p.is_file() and not p.name.startswith("."))


def no_probe(*_: Any, **__: Any) -> Any:
    raise AssertionError("equality deletes probed again")


def stored_keys(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The keys the store is asked to save under, as they are saved."""
    keys: list[tuple[Any, ...]] = []
    real = verdicts.VerdictStore.save

    def save(self: verdicts.VerdictStore, key: tuple[Any, ...], *args: Any) -> None:
        keys.append(key)
        real(self, key, *args)

    monkeypatch.setattr(verdicts.VerdictStore, "save", save)
    return keys


def test_stored_verdict_serves_a_new_process(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eq = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["b"])})
    task = whole(ten_rows, [eq])
    live = [r["id"] for r in numbered_table(10).to_pylist() if r["category"] != "b"]
    assert ids(read(task)) == live
    assert len(stored(verdict_dir)) == 1
    new_process(monkeypatch)
    monkeypatch.setattr("icemor.io.reader.equality_delete_sets", no_probe)
    assert ids(read(task)) == live
    assert verdict(task) == [i for i, r in enumerate(numbered_table(10).to_pylist()) if r["category"] == "b"]
    new_process(monkeypatch)
    assert count_task(IO, task, options()) == len(live)  # a count uses it too
    # another delete file set is another entry: it is probed
    other = equality_delete_file(tmp_path, "eq2.parquet", {"category": (pa.string(), 2, ["a"])})
    with pytest.raises(AssertionError, match="probed again"):
        read(whole(ten_rows, [eq, other]))


@pytest.mark.parametrize("fault", ["deleted", "truncated"])
def test_stored_verdict_still_needs_its_delete_files(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    task = whole(ten_rows, [eq])
    assert 101 not in ids(read(task))
    assert stored(verdict_dir)
    new_process(monkeypatch)
    path = eq.path.removeprefix("file://")
    if fault == "deleted":
        os.remove(path)
        with pytest.raises(MissingFileError, match="equality delete file not found"):
            read(task)
    else:
        with open(path, "r+b") as f:
            f.truncate(eq.file_size_in_bytes - 10)
        with pytest.raises(CorruptFileError, match="truncated or replaced"):
            list(read_task(IO, task, options()))


def test_count_of_a_stored_verdict_stats_the_data_file_once(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store key's modification time comes from the stat the count makes anyway."""

    class CountingFS:
        def __init__(self, fs: Any) -> None:
            self.fs, self.infos = fs, []

        def get_file_info(self, path: str) -> Any:
            self.infos.append(path)
            return self.fs.get_file_info(path)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fs, name)

    io = PyArrowFileIO()
    fs = CountingFS(io.fs_by_scheme("file", None))
    io.fs_by_scheme = lambda *_: fs  # type: ignore[method-assign]
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101, 105])})
    task = whole(ten_rows, [eq])
    assert count_task(io, task, options()) == 8  # probed, stored
    new_process(monkeypatch)
    monkeypatch.setattr("icemor.io.reader.equality_delete_sets", no_probe)
    fs.infos.clear()
    assert count_task(io, task, options()) == 8
    assert fs.infos.count(ten_rows.path) == 1
    assert fs.infos.count(eq.path) == 1


def expected_reads(task: FileScanTask, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], int]:
    """The rows and count of ``task`` with the store off: what the files say."""
    with monkeypatch.context() as m:
        m.setenv("ICEMOR_VERDICT_CACHE", "0")
        DELETE_CACHE.clear()
        rows = read(task, options(pos_column=True))
        DELETE_CACHE.clear()
        count = count_task(IO, task, options())
        DELETE_CACHE.clear()
        return rows, count


def test_every_damaged_stored_verdict_reads_the_right_rows(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each byte of the entry flipped in turn, and the entry cut at every length: the rows are
    those the files give with the store off, or an error; never other rows."""
    eq = equality_delete_file(tmp_path, "eq.parquet", {"category": (pa.string(), 2, ["b"])})
    pos = position_delete_file(tmp_path, "pos.parquet", [(ten_rows.path, 0)])
    task = whole(ten_rows, [pos, eq])
    rows, count = expected_reads(task, monkeypatch)
    assert [r["_pos"] for r in rows] == [2, 3, 5, 6, 8, 9]
    read(task)
    (entry,) = stored(verdict_dir)
    intact = entry.read_bytes()
    damaged = [intact[:n] for n in range(len(intact))]
    for i in range(len(intact)):
        data = bytearray(intact)
        data[i] ^= 0xFF
        damaged.append(bytes(data))
        data[i] ^= 0xFE  # one bit only
        damaged.append(bytes(data))
    outcomes: list[str] = []
    for data in damaged:
        for what in ("scan", "count"):
            new_process(monkeypatch)
            entry.write_bytes(data)
            try:
                got = (
                    read(task, options(pos_column=True))
                    if what == "scan"
                    else count_task(IO, task, options())
                )
            except (CorruptFileError, MissingFileError) as e:
                outcomes.append(f"error: {e}")
                continue
            outcomes.append("right" if got == (rows if what == "scan" else count) else f"WRONG {what}: {got}")
    assert [o for o in outcomes if o != "right"] == []
    assert len(outcomes) == 2 * 3 * len(intact)
    new_process(monkeypatch)
    monkeypatch.setattr("icemor.io.reader.equality_delete_sets", no_probe)
    assert read(task, options(pos_column=True)) == rows  # and the last probe stored it anew


@pytest.mark.parametrize("how", ["0777", "owned by another user"])
def test_entries_planted_where_others_can_write_are_not_trusted(
    tmp_path: Path,
    ten_rows: DataFileRef,
    verdict_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    """A well-formed entry saying "nothing deleted", planted by whoever can write the directory,
    brought the deleted rows back (7,000 rows instead of 6,000)."""
    if how != "0777" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101, 104, 107])})
    task = whole(ten_rows, [eq])
    rows, count = expected_reads(task, monkeypatch)
    keys = stored_keys(monkeypatch)
    assert read(task, options(pos_column=True)) == rows
    (key,) = keys
    store = verdicts.verdict_store()
    assert store is not None
    store.save(key, np.zeros(0, dtype=np.int64), 10)  # the planted entry
    if how == "0777":
        verdict_dir.chmod(0o777)
    else:
        os.chown(verdict_dir, 65534, 65534)
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    new_process(monkeypatch)
    assert read(task, options(pos_column=True)) == rows
    DELETE_CACHE.clear()
    assert count_task(IO, task, options()) == count
    assert len([r for r in caplog.records if r.name == "icemor.io.verdicts"]) == 1  # once a process


def test_data_file_rewritten_in_place_does_not_reuse_its_verdict(
    tmp_path: Path, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same path, size and row count (add-files of a rewritten file): another verdict."""
    schema = pa.schema([field("id", pa.int64(), 1, nullable=False)])

    def plain(values: list[int]) -> bytes:
        path = tmp_path / "staging.parquet"
        pq.write_table(
            pa.table({"id": values}, schema=schema),
            path,
            compression="NONE",
            use_dictionary=False,
            write_statistics=False,
        )
        return path.read_bytes()

    before, after = plain(list(range(100, 110))), plain(list(range(200, 210))[::-1])
    assert len(before) == len(after) and before != after
    path = tmp_path / "data.parquet"
    path.write_bytes(before)
    ref = data_ref(str(path))
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101, 203])})
    task = whole(ref, [eq])
    id_only = options(Schema(ID), schema=Schema(ID))
    assert ids(read(task, id_only)) == [i for i in range(100, 110) if i != 101]
    assert stored(verdict_dir)
    new_process(monkeypatch)
    with open(path, "r+b") as f:  # in place: same inode, path, size and rows
        f.write(after)
    later = path.stat().st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(later, later))
    assert data_ref(str(path)) == ref
    expected = [i for i in range(209, 199, -1) if i != 203]
    assert ids(read(task, id_only)) == expected
    new_process(monkeypatch)
    assert count_task(IO, task, id_only) == len(expected)


def test_reads_work_without_a_home_directory(
    tmp_path: Path, ten_rows: DataFileRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every scan of an equality-deleted table raised "Could not determine home directory"."""

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    for name in ("ICEMOR_VERDICT_DIR", "ICEMOR_HOME", "ICEMOR_VERDICT_CACHE", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    new_process(monkeypatch)
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    task = whole(ten_rows, [eq])
    assert ids(read(task)) == [i for i in range(100, 110) if i != 101]
    new_process(monkeypatch)
    assert count_task(IO, task, options()) == 9


@pytest.mark.parametrize("setting", ["256MiB", "1.5 GB", "lots", "-1"])
def test_reads_work_whatever_the_cache_size_setting(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    """``ICEMOR_VERDICT_CACHE_BYTES=256MiB`` was a ValueError on every scan."""
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE_BYTES", setting)
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    task = whole(ten_rows, [eq])
    assert ids(read(task)) == [i for i in range(100, 110) if i != 101]
    new_process(monkeypatch)
    assert count_task(IO, task, options()) == 9
    assert bool(stored(verdict_dir)) == (setting in {"256MiB", "1.5 GB"})  # a size, or the store off


def test_unusable_stored_verdict_is_dropped_and_probed(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [103, 104])})
    task = whole(ten_rows, [eq])
    live = [100 + i for i in range(10) if i not in (3, 4)]
    keys = stored_keys(monkeypatch)
    assert ids(read(task)) == live
    (entry,) = stored(verdict_dir)
    key = keys[0]
    _, _, key_bytes = verdicts._locate(key)
    checksummed_but_past_the_end = verdicts._encode(key_bytes, np.array([3, 10], dtype=np.int64), 10)
    for bad in (b"", b"not a verdict", checksummed_but_past_the_end):
        new_process(monkeypatch)
        entry.write_bytes(bad)
        assert ids(read(task)) == live  # probed again, not trusted
        store = verdicts.verdict_store()
        assert store is not None
        again = store.load(key, 10)
        assert again is not None and again.tolist() == [3, 4]  # and stored anew


def test_verdict_store_can_be_turned_off(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE", "0")
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    assert 101 not in ids(read(whole(ten_rows, [eq])))
    assert not verdict_dir.exists()


def test_no_store_through_a_fileio_that_gives_no_modification_time(
    tmp_path: Path, ten_rows: DataFileRef, verdict_dir: Path
) -> None:
    """Without the data file's time an in-place rewrite could not be told apart: nothing stored."""
    from pyiceberg.io import FileIO

    class Plain(FileIO):
        def new_input(self, location: str) -> Any:
            return IO.new_input(location)

        def new_output(self, location: str) -> Any:
            return IO.new_output(location)

        def delete(self, location: Any) -> None:
            IO.delete(location)

    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [101])})
    task = whole(ten_rows, [eq])
    rows = pa.Table.from_batches(list(read_task(Plain(), task, options()))).to_pylist()
    assert ids(rows) == [i for i in range(100, 110) if i != 101]
    assert count_task(Plain(), task, options()) == 9
    assert not verdict_dir.exists()


def test_files_differing_only_in_field_ids_are_read_by_their_own_ids(tmp_path: Path) -> None:
    """Column ``qty`` (id 2) renamed ``qty_old``, and a new ``qty`` (id 5) added: old files hold
    id 2 under the name ``qty``, new files id 5.

    pyarrow's Schema equality and hash ignore field metadata (where the ids are), so a cache of
    file schemas keyed by the Arrow schema gave the second file the first file's ids."""

    def qty_file(name: str, qty_id: int, values: list[int]) -> DataFileRef:
        schema = pa.schema([field("id", pa.int64(), 1, nullable=False), field("qty", pa.int64(), qty_id)])
        return data_ref(write(tmp_path / name, pa.table({"id": [1, 2], "qty": values}, schema=schema)))

    old, new = qty_file("old.parquet", 2, [10, 20]), qty_file("new.parquet", 5, [30, 40])
    current = Schema(ID, NestedField(2, "qty_old", LongType()), NestedField(5, "qty", LongType()))
    opts = options(schema=current, field_types={1: LongType(), 2: LongType(), 5: LongType()})
    expected = {
        old.path: [{"id": 1, "qty_old": 10, "qty": None}, {"id": 2, "qty_old": 20, "qty": None}],
        new.path: [{"id": 1, "qty_old": None, "qty": 30}, {"id": 2, "qty_old": None, "qty": 40}],
    }
    for first, second in ((old, new), (new, old)):
        DELETE_CACHE.clear()
        assert {f.path: read(whole(f), opts) for f in (first, second)} == expected
        # read in one run, their batches are not joined as if they were of one layout
        batches = reader.read_run(IO, [whole(first), whole(second)], opts)
        got = pa.Table.from_batches(list(batches), output_schema(opts)).to_pylist()
        assert got == expected[first.path] + expected[second.path]


@pytest.mark.parametrize("run_rows", [15, 1000])
def test_a_run_of_small_files_reads_what_each_file_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_rows: int
) -> None:
    """read_run applies the deletes, filter and projection of many small files at once."""
    monkeypatch.setattr(reader, "RUN_ROWS", run_rows)  # 15: flushed inside files too
    DELETE_CACHE.clear()
    files: list[DataFileRef] = []
    for i in range(6):
        t = numbered_table(10)
        t = t.set_column(0, t.schema.field(0), pa.array(range(10 * i, 10 * i + 10), pa.int64()))
        if i == 3:  # a file of another layout (an added column, field 4): a group of its own
            t = t.append_column(field("score", pa.int32(), 4), pa.array(range(10), pa.int32()))
        files.append(data_ref(write(tmp_path / f"f{i}.parquet", t)))
    # positions: the first and last row of f1, row 3 of f4, every row of f5
    pos = position_delete_file(
        tmp_path,
        "pos.parquet",
        [(files[1].path, 0), (files[1].path, 9), (files[4].path, 3)]
        + [(files[5].path, p) for p in range(10)],
    )
    eq = equality_delete_file(tmp_path, "eq.parquet", {"id": (pa.int64(), 1, [25, 47, 31])})
    deletes = (pos, eq)
    tasks = [whole(f, deletes) for f in files]
    gone = {10, 19, 43, *range(50, 60), 25, 47, 31}
    schema = Schema(ID, CATEGORY, NAME, NestedField(4, "score", IntegerType(), required=False))
    cats = ["a", "b", None]

    def expected(keep: Callable[[int], bool]) -> list[dict[str, Any]]:
        return [
            {"name": f"r{i % 10}", "score": (i % 10 if 30 <= i < 40 else None)}
            for i in range(60)
            if i not in gone and keep(i)
        ]

    def rows(opts: ReadOptions) -> list[dict[str, Any]]:
        out = list(reader.read_run(IO, tasks, opts))
        for b in out:
            assert b.schema.equals(output_schema(opts))
        return pa.Table.from_batches(out, output_schema(opts)).to_pylist()

    projected = Schema(NAME, schema.find_field(4))
    for _ in range(2):  # the first run probes the equality deletes, the second knows their verdicts
        assert rows(options(projected, schema=schema)) == expected(lambda _: True)
    filtered = options(projected, schema=schema, row_filter=GreaterThanOrEqual("id", 15))
    assert rows(filtered) == expected(lambda i: i >= 15)
    by_category = options(projected, schema=schema, row_filter=EqualTo("category", "b"))
    assert rows(by_category) == expected(lambda i: cats[(i % 10) % 3] == "b")
    # an asked-for batch size stays a bound on the joined batches
    small = options(projected, schema=schema, batch_size=7)
    assert all(b.num_rows <= 7 for b in reader.read_run(IO, tasks, small))
    assert rows(small) == expected(lambda _: True)
    # no columns (a count on Spark), with and without a filter
    assert len(rows(options(Schema(), schema=schema))) == len(expected(lambda _: True))
    counted = options(Schema(), schema=schema, row_filter=GreaterThanOrEqual("id", 15))
    assert len(rows(counted)) == len(expected(lambda i: i >= 15))
