"""Equality-delete files as icemor writes them for CDC: key columns only, ids, full metrics, readable."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icemor._compat.pyiceberg import to_file_schema
from icemor.io.cache import DELETE_CACHE
from icemor.io.deletes import equality_delete_sets
from icemor.io.equality_writer import write_equality_deletes
from icemor.io.writers import DeleteFileTarget
from icemor.spec.files import DeleteFileRef, FileContent

TABLE = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=True),
    NestedField(3, "v", StringType(), required=False),
)
KEY = Schema(TABLE.find_field(2), TABLE.find_field(1))  # key order: name, id


def _target(tmp_path: Path, size: int = 1 << 30) -> DeleteFileTarget:
    return DeleteFileTarget(
        directory=str(tmp_path), prefix="u-eq", spec_id=0, partition=(), target_file_size=size
    )


def _keys() -> pa.Table:
    long = "k" * 40  # longer than the default truncate(16) of string bounds
    data = pa.table({"name": ["a", "b", long], "id": pa.array([3, 1, 2], pa.int64())})
    return to_file_schema(TABLE, KEY, data, format_version=2)


def test_key_columns_only_with_ids_and_full_bounds(tmp_path: Path) -> None:
    [f] = write_equality_deletes(PyArrowFileIO(), _target(tmp_path), _keys(), KEY, (2, 1))
    assert f.content == FileContent.EQUALITY_DELETES and f.equality_ids == (2, 1)
    assert f.record_count == 3 and f.path.endswith("u-eq-00000-deletes.parquet")
    schema = pq.read_schema(f.path)
    assert schema.names == ["name", "id"]
    assert [fl.metadata[b"PARQUET:field_id"] for fl in schema] == [b"2", b"1"]
    # full metrics: the 40-character bound is not truncated, so pruning by it is exact
    assert f.upper_bounds[2] == b"k" * 40 and f.lower_bounds[2] == b"a"
    assert f.lower_bounds[1] == (1).to_bytes(8, "little") and f.null_value_counts == {1: 0, 2: 0}


def test_icemor_reads_what_it_wrote(tmp_path: Path) -> None:
    [f] = write_equality_deletes(PyArrowFileIO(), _target(tmp_path), _keys(), KEY, (2, 1))
    ref = DeleteFileRef(
        content=FileContent.EQUALITY_DELETES,
        path=f.path,
        file_format="PARQUET",
        record_count=f.record_count,
        file_size_in_bytes=f.file_size_in_bytes,
        spec_id=0,
        partition=(),
        data_sequence_number=2,
        equality_ids=f.equality_ids,
    )
    DELETE_CACHE.clear()
    sets = dict(equality_delete_sets(PyArrowFileIO(), [ref], {1: LongType(), 2: StringType()}))
    [(ids, eq)] = sets.items()
    assert ids == (1, 2)
    got = eq.matches([pa.array([3, 3, 1], pa.int64()), pa.array(["a", "b", "b"])])
    assert got.tolist() == [True, False, True]


def test_rolls_at_the_target_size(tmp_path: Path) -> None:
    keys = to_file_schema(
        TABLE,
        KEY,
        pa.table({"name": [f"n{i:06d}" for i in range(3000)], "id": pa.array(range(3000), pa.int64())}),
        format_version=2,
    )
    import icemor.io.equality_writer as ew

    old = ew._ROWS_PER_GROUP
    ew._ROWS_PER_GROUP = 1000
    try:
        files = write_equality_deletes(PyArrowFileIO(), _target(tmp_path, size=1), keys, KEY, (2, 1))
    finally:
        ew._ROWS_PER_GROUP = old
    assert [f.record_count for f in files] == [1000, 1000, 1000]
    assert len({f.path for f in files}) == 3
