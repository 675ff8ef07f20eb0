"""The pieces under the rewrites: the rolling data-file writer, and units that never strand files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icemor.engines.local import runner
from icemor.exceptions import InvalidArgumentError
from icemor.io.data_writer import DataFileTarget
from icemor.maintenance._units import PartialProgress, run_guarded
from icemor.maintenance.data_files import write_streamed

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
)


def _batches(n: int, size: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch(
            {"id": pa.array(range(i * size, (i + 1) * size), pa.int64()), "s": [f"v{j}" for j in range(size)]}
        )
        for i in range(n)
    ]


def _target(tmp_path: Path, prefix: str, size: int) -> DataFileTarget:
    return DataFileTarget(str(tmp_path), prefix, 0, (), target_file_size=size, row_group_rows=1000)


def write_data_rows(io: Any, target: DataFileTarget, batches: Any) -> Any:
    return write_streamed(io, target, iter(batches), SCHEMA, {}, format_version=2)


def test_data_files_roll_at_the_target_size_with_metrics(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    target = _target(tmp_path, "u", 1)  # every row group is too big
    written = write_data_rows(io, target, _batches(10, 500))
    assert [w.record_count for w in written] == [1000] * 5
    assert [w.path for w in written] == [target.location(i) for i in range(5)]
    for i, w in enumerate(written):
        pf = pq.ParquetFile(w.path)
        assert pf.metadata.num_row_groups == 1
        assert [f.metadata[b"PARQUET:field_id"] for f in pf.schema_arrow] == [b"1", b"2"]
        assert w.file_size_in_bytes == (tmp_path / w.path.rsplit("/", 1)[1]).stat().st_size
        assert from_bytes(LongType(), w.lower_bounds[1]) == 1000 * i
        assert from_bytes(LongType(), w.upper_bounds[1]) == 1000 * i + 999
        assert w.value_counts[2] == 1000 and w.null_value_counts[2] == 0
    big = _target(tmp_path, "big", 1 << 30)
    (one,) = write_data_rows(io, big, _batches(10, 500))
    assert one.record_count == 5000 and pq.ParquetFile(one.path).metadata.num_row_groups == 5
    # batches that do not add up to the limit: full row groups all the same, the rest last
    odd = _target(tmp_path, "odd", 1 << 30)
    (one,) = write_data_rows(io, odd, _batches(7, 700))
    md = pq.ParquetFile(one.path).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [1000, 1000, 1000, 1000, 900]
    ids = pq.read_table(one.path).column("id").to_pylist()
    assert ids == list(range(4900))


def test_a_failed_write_removes_its_files(tmp_path: Path) -> None:
    def batches() -> Any:
        yield from _batches(3, 1000)
        raise RuntimeError("reader failed")

    with pytest.raises(RuntimeError, match="reader failed"):
        write_data_rows(PyArrowFileIO(), _target(tmp_path, "u", 1), batches())
    assert list(tmp_path.iterdir()) == []


def _unit(io: Any, unit: tuple[str, bool]) -> list[str]:
    path, fail = unit
    with open(path, "w") as f:
        f.write("x")
    if fail:
        import os

        os.remove(path)  # a unit removes its own files before it raises
        msg = f"unit {path} failed"
        raise ValueError(msg)
    return [path]


def test_one_failing_unit_leaves_no_file_of_the_others(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    units = [(str(tmp_path / f"f{i}"), i == 2) for i in range(4)]
    with pytest.raises(ValueError, match="f2 failed"):
        run_guarded(io, runner(io, workers=2), _unit, units, lambda r: r)
    assert list(tmp_path.iterdir()) == []
    ok = run_guarded(io, runner(io), _unit, units[:2], lambda r: r)
    assert ok == [[units[0][0]], [units[1][0]]]


@pytest.mark.parametrize(("max_commits", "attempts"), [(0, 3), (10, 0), (-1, -1)])
def test_partial_progress_below_one_commit_or_attempt_is_refused(max_commits: int, attempts: int) -> None:
    with pytest.raises(InvalidArgumentError, match="must be >= 1"):
        PartialProgress(enabled=True, max_commits=max_commits, max_group_attempts=attempts)


def test_partial_progress_stops_when_asked() -> None:
    asked = [False]
    partial = PartialProgress(enabled=True, stop=lambda: asked[0])
    assert not partial.stopping() and not PartialProgress().stopping()
    asked[0] = True
    assert partial.stopping()
