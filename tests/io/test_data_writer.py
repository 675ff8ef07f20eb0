"""The data-file writer of CDC batches: row order kept, rolled by size, positions known, metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from icemor._compat.pyiceberg import to_file_schema
from icemor.io import data_writer
from icemor.io.data_writer import DataFileTarget, file_positions, write_data_files_in_order
from icemor.spec.files import FileContent

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    NestedField(3, "x", DoubleType(), required=False),
)


def _target(tmp_path: Path, **kw: object) -> DataFileTarget:
    args: dict[str, object] = {
        "directory": str(tmp_path),
        "prefix": "t",
        "spec_id": 0,
        "partition": (),
        "target_file_size": 1 << 30,
        "row_group_rows": 1 << 20,
    }
    args.update(kw)
    return DataFileTarget(**args)  # type: ignore[arg-type]


def _rows(n: int) -> pa.Table:
    data = pa.table(
        {
            "id": pa.array(range(n, 0, -1), pa.int64()),
            "v": [None if i % 3 == 0 else f"v{i}" for i in range(n)],
            "x": [float("nan") if i == 1 else i / 2 for i in range(n)],
        }
    )
    return to_file_schema(SCHEMA, SCHEMA, data, format_version=2)


def test_rows_keep_their_order_with_field_ids_and_metrics(tmp_path: Path) -> None:
    rows = _rows(10)
    [f] = write_data_files_in_order(PyArrowFileIO(), _target(tmp_path), rows, SCHEMA, {})
    assert f.content == FileContent.DATA and f.record_count == 10
    read = pq.read_table(f.path)
    assert read.column("id").to_pylist() == list(range(10, 0, -1))  # not re-sorted
    assert [fl.metadata[b"PARQUET:field_id"] for fl in pq.read_schema(f.path)] == [b"1", b"2", b"3"]
    assert from_bytes(LongType(), f.lower_bounds[1]) == 1 and from_bytes(LongType(), f.upper_bounds[1]) == 10
    assert f.null_value_counts[2] == 4 and f.value_counts[1] == 10
    assert pq.ParquetFile(f.path).metadata.row_group(0).column(0).statistics is not None


def test_files_roll_at_the_target_size_and_positions_map_back(tmp_path: Path) -> None:
    rows = _rows(10)
    files = write_data_files_in_order(
        PyArrowFileIO(), _target(tmp_path, target_file_size=1, row_group_rows=4), rows, SCHEMA, {}
    )
    assert [f.record_count for f in files] == [4, 4, 2]  # a new file after every row group
    assert len({f.path for f in files}) == 3
    wanted = np.array([0, 3, 4, 9], np.int64)
    mapped = file_positions(files, wanted)
    assert [(p, pos.tolist()) for p, pos in mapped] == [
        (files[0].path, [0, 3]),
        (files[1].path, [0]),
        (files[2].path, [1]),
    ]
    # the positions name the rows asked for
    for path, pos in mapped:
        got = pq.read_table(path).column("id").take(pa.array(pos)).to_pylist()
        assert set(got) <= {10 - int(i) for i in wanted}


def test_a_failure_removes_every_file_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = data_writer.ParquetOutput.write

    def failing(self: data_writer.ParquetOutput, rows: pa.Table) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            msg = "disk full"
            raise OSError(msg)
        real(self, rows)

    monkeypatch.setattr(data_writer.ParquetOutput, "write", failing)
    with pytest.raises(OSError, match="disk full"):
        write_data_files_in_order(
            PyArrowFileIO(), _target(tmp_path, target_file_size=1, row_group_rows=4), _rows(10), SCHEMA, {}
        )
    assert list(tmp_path.iterdir()) == []
