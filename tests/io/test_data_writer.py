"""The data-file writer of CDC batches: row order kept, rolled by size, positions known, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
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

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from oracle import IcebergJava

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


# ------------------------------------------------------------------------------ TableDataWriter


def _day_table(catalog: SqlCatalog, ns: str, name: str, **properties: str) -> Table:
    """A table partitioned by day(ts), with the writer-related ``properties``."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import TimestampType

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", DoubleType(), required=False),
        NestedField(3, "ts", TimestampType(), required=False),
    )
    spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "ts_day"))
    return catalog.create_table(f"{ns}.{name}", schema=schema, partition_spec=spec, properties=properties)


def _pandas_days(n: int, days: int, *, seed: int = 0) -> pd.DataFrame:
    """``n`` rows spread over ``days`` days of 2024 (pandas: ``datetime64[ns]``)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    return pd.DataFrame(
        {
            "id": ids,
            "v": rng.random(n),
            "ts": pd.Timestamp("2024-01-01")
            + pd.to_timedelta(ids % days, unit="D")
            + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s"),
        }
    )


def _commit(table: Table, files: list[DataFile]) -> Table:
    """Commit data files with pyiceberg's fast append (the writer is tested, not icemor's commit)."""
    tx = table.transaction()
    with tx.update_snapshot().fast_append() as append:
        for f in files:
            append.append_data_file(f)
    tx.commit_transaction()
    return table.refresh()


def test_three_million_pandas_rows_over_30_days_make_30_files(catalog: SqlCatalog, ns: str) -> None:
    # 3 M rows appended in 1 Mi-row batches once became 90 files (a file per batch and day)
    df = _pandas_days(3_000_000, 30)
    table = _day_table(catalog, ns, "t")
    writer = data_writer.TableDataWriter(table.metadata, table.io)
    batches = pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=1 << 20)
    assert len(batches) == 3
    for batch in batches:
        writer.write(batch)
    files = writer.close()
    assert len(files) == 30
    # each file holds its day's rows and only those (a pandas model of the partitioning)
    expected = df.groupby(df["ts"].dt.normalize())["id"].count()
    epoch = pd.Timestamp("1970-01-01")
    for f in files:
        got = pq.read_table(f.file_path.removeprefix("file://"), columns=["id", "ts"])
        day = epoch + pd.Timedelta(days=f.partition[0])
        assert f.record_count == got.num_rows == expected[day]
        days = pc.unique(pc.floor_temporal(got.column("ts"), unit="day")).to_pylist()
        assert days == [day.to_pydatetime()]
    assert sorted(writer.written_paths) == sorted(f.file_path for f in files)
    read = _commit(table, files).scan(selected_fields=("id",)).to_arrow()
    assert sorted(read.column("id").to_pylist()) == df["id"].tolist()


def test_files_roll_within_the_target_size(catalog: SqlCatalog, ns: str) -> None:
    target = 256 * 1024
    table = _day_table(
        catalog,
        ns,
        "t",
        **{"write.target-file-size-bytes": str(target), "write.parquet.row-group-limit": "20000"},
    )
    df = _pandas_days(400_000, 2, seed=1)
    writer = data_writer.TableDataWriter(table.metadata, table.io)
    for batch in pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=50_000):
        writer.write(batch)
    files = writer.close()
    per_day: dict[object, list[int]] = {}
    for f in files:
        per_day.setdefault(f.partition[0], []).append(f.file_size_in_bytes)
    assert len(per_day) == 2
    for sizes in per_day.values():
        total = sum(sizes)
        # rolled: as few files as the target allows, none over it by more than a footer's slack,
        # and every file but the last near it
        assert len(sizes) <= -(-total // int(target * 0.8))
        assert max(sizes) <= target * 1.05
        assert all(s >= target * 0.85 for s in sorted(sizes)[1:])
    assert sum(f.record_count for f in files) == 400_000
    assert sum(pq.read_metadata(f.file_path.removeprefix("file://")).num_rows for f in files) == 400_000


def test_the_memory_budget_writes_out_buffers_and_closes_the_largest_files(
    catalog: SqlCatalog, ns: str
) -> None:
    table = _day_table(catalog, ns, "t")
    df = _pandas_days(200_000, 100, seed=2)
    budget = 4 * 1024 * 1024  # 16 open local files' cost: fewer than the 100 partitions
    writer = data_writer.TableDataWriter(table.metadata, table.io, memory_budget_bytes=budget)
    for batch in pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=20_000):
        writer.write(batch)
        assert writer.memory_bytes <= budget
    files = writer.close()
    # over budget, files closed early: more than one per partition, every row once
    assert len(files) > 100
    assert sum(f.record_count for f in files) == 200_000
    ids = pa.concat_tables(
        [pq.read_table(f.file_path.removeprefix("file://"), columns=["id"]) for f in files]
    )
    assert sorted(ids.column("id").to_pylist()) == list(range(200_000))
    # the default budget keeps every partition's file open: one file each
    roomy = data_writer.TableDataWriter(table.metadata, table.io)
    for batch in pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=20_000):
        roomy.write(batch)
    assert len(roomy.close()) == 100


def test_abort_removes_closed_and_open_files(catalog: SqlCatalog, ns: str, tmp_path: Path) -> None:
    table = _day_table(
        catalog,
        ns,
        "t",
        **{"write.target-file-size-bytes": "65536", "write.parquet.row-group-limit": "10000"},
    )
    writer = data_writer.TableDataWriter(table.metadata, table.io)
    df = _pandas_days(200_000, 3, seed=3)
    for batch in pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=100_000):
        writer.write(batch)
    started = writer.written_paths
    assert len(started) > 3  # some rolled (closed), three open
    on_disk = [p for p in started if Path(p.removeprefix("file://")).exists()]
    assert on_disk == started
    writer.abort()
    writer.abort()  # idempotent
    assert not any(Path(p.removeprefix("file://")).exists() for p in started)
    data_dir = Path(table.location().removeprefix("file://")) / "data"
    assert not data_dir.exists() or not any(p.is_file() for p in data_dir.rglob("*"))


@pytest.mark.oracle
def test_java_reads_the_files_and_an_update_adds_one_data_and_delete_file_per_partition(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    import icemor

    # 30 days, one data file each, written by TableDataWriter (rolled files too: a small target)
    df = _pandas_days(300_000, 30, seed=4)
    table = _day_table(catalog, ns, "t")
    writer = data_writer.TableDataWriter(table.metadata, table.io)
    for batch in pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=100_000):
        writer.write(batch)
    files = writer.close()
    assert len(files) == 30
    _commit(table, files)
    rolled = _day_table(
        catalog,
        ns,
        "rolled",
        **{"write.target-file-size-bytes": "16384", "write.parquet.row-group-limit": "500"},
    )
    rolling = data_writer.TableDataWriter(rolled.metadata, rolled.io)
    rolling.write(pa.Table.from_pandas(df.head(50_000), preserve_index=False))
    rolled_files = rolling.close()
    assert len(rolled_files) > 30
    _commit(rolled, rolled_files)

    def model(frame: pd.DataFrame) -> list[tuple[int, float]]:
        return sorted(zip(frame["id"].tolist(), frame["v"].round(6).tolist(), strict=True))

    def java(name: str) -> list[tuple[int, float]]:
        return sorted((int(i), round(float(v), 6)) for i, v in oracle.rows(name, columns=["id", "v"]))

    assert java(f"{ns}.rolled") == model(df.head(50_000))
    # Java's view of the metrics: every file's row count and id bounds match its rows
    stats = oracle.sql(
        f"SELECT record_count, readable_metrics.id.lower_bound, readable_metrics.id.upper_bound, file_path"
        f" FROM {oracle.qualified(ns + '.rolled')}.data_files"
    )
    for count, low, high, path in stats:
        ids = pq.read_table(path.removeprefix("file:"), columns=["id"]).column("id")
        assert (count, low, high) == (len(ids), pc.min(ids).as_py(), pc.max(ids).as_py())

    # an UPDATE of ~2,500 rows over every day adds at most one data file
    # and one delete file per touched partition (one data file per day before it)
    m = icemor.load_table(f"{ns}.t", catalog=catalog).update({"v": "v + 1"}, where="id % 119 = 7")
    assert m.rows_updated == int((df["id"] % 119 == 7).sum()) == 2_521
    touched = df.loc[df["id"] % 119 == 7, "ts"].dt.normalize().nunique()
    assert touched == 30
    assert m.data_files_added <= touched
    assert m.delete_files_added <= touched
    expected = df.copy()
    expected.loc[expected["id"] % 119 == 7, "v"] += 1
    assert java(f"{ns}.t") == model(expected)


def test_a_date_past_year_9999_is_one_line_and_leaves_no_file(home: Path) -> None:
    """Iceberg allows it; pyiceberg's statistics raised a bare OverflowError from the writer."""
    import datetime as dt

    import icemor
    from icemor.exceptions import UnsupportedFeatureError

    table = icemor.create_table("db.d", pa.table({"d": pa.array([dt.date(9999, 12, 31)], pa.date32())}))
    before = sorted(p.name for p in home.rglob("*.parquet"))
    far = pa.table({"d": pa.array([2_932_897 + 10], pa.int32()).cast(pa.date32())})  # 10000-01-10
    with pytest.raises(UnsupportedFeatureError, match="after 9999-12-31"):
        table.append(far)
    assert sorted(p.name for p in home.rglob("*.parquet")) == before
    assert table.scan().count() == 1
