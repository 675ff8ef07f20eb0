"""`Table.check` / `icemor check`: one injected fault at a time, each found by its name (then the
file is restored and the table is clean again); Java-written tables (position deletes, equality
deletes, v3 DVs) come out clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run
from icemor.planning.manifest_reader import live_delete_files

if TYPE_CHECKING:
    from collections.abc import Callable

    from oracle import IcebergJava


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://").removeprefix("file:"))


def _names(table: str) -> set[str]:
    return {f.name for f in icemor.load_table(table).check().findings}


def _fault(path: Path, change: Callable[[bytes], bytes | None]) -> Callable[[], None]:
    """Apply ``change`` to the file (None: remove it); return the function that restores it."""
    original = path.read_bytes()
    changed = change(original)
    if changed is None:
        path.unlink()
    else:
        path.write_bytes(changed)
    return lambda: path.write_bytes(original)


@pytest.fixture
def local_table(home: Path, tmp_path: Path) -> str:
    """db.c (icemor-written, v2): 2 data files, a DELETE (position deletes), a CDC delete (equality)."""
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "v": [str(i) for i in range(100)]})
    first = tmp_path / "a.parquet"
    pq.write_table(rows.slice(0, 50), first)
    pq.write_table(rows.slice(50), tmp_path / "b.parquet")
    assert run(["create-table", "db.c", "--schema-from", str(first)]) == 0
    t = icemor.load_table("db.c")
    t.append_files([first])
    t.append_files([tmp_path / "b.parquet"])
    t.delete("id % 10 = 0")
    t.apply_changes(
        pa.table({"id": pa.array([1, 51], pa.int64()), "v": ["", ""], "op": ["D", "D"]}),
        key=["id"],
        allow_nullable_key=True,
    )
    return "db.c"


def test_local_table_faults_one_at_a_time(local_table: str, capsys: pytest.CaptureFixture[str]) -> None:
    t = icemor.load_table(local_table)
    assert t.check().findings == ()
    assert run(["check", local_table]) == 0
    assert "0 errors, 0 warnings" in capsys.readouterr().out
    snapshot = t.metadata.current_snapshot()
    assert snapshot is not None
    deletes = live_delete_files(t.io, snapshot)
    pos = _local(next(d.path for d in deletes if d.kind == "position"))
    data = _local(t.scan().plan_files()[0].data_file.path)

    for path, change, expected in (
        (data, lambda b: None, {"missing-file"}),
        (data, lambda b: b + b"x", {"size-mismatch"}),  # data files are not decoded: size alone
        (pos, lambda b: b[: len(b) // 2], {"size-mismatch", "corrupt-file"}),
    ):
        restore = _fault(path, change)
        assert _names(local_table) == expected
        assert run(["check", local_table, "--json"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert doc["clean"] is False and {f["name"] for f in doc["findings"]} == expected
        restore()
        assert _names(local_table) == set()

    # pyiceberg's copy-on-write delete drops the first data file whole: its deletes dangle (a warning)
    t.pyiceberg.delete("id < 50")
    report = t.refresh().check()
    assert {f.name for f in report.findings} == {"position-dangling"} and report.clean
    assert run(["check", local_table]) == 0


@pytest.mark.oracle
def test_java_tables_are_clean_and_faults_are_found(
    oracle: IcebergJava, ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # v2, partitioned: Spark's position deletes, then Java-written equality deletes
    v2 = f"{ns}.v2"
    oracle.create_table(v2, "id BIGINT, data STRING, p INT", partitioned_by="p")
    oracle.sql(f"INSERT INTO {v2} VALUES (1, 'a', 0), (2, 'b', 0), (3, 'c', 1), (4, 'd', 1), (5, 'e', 1)")
    oracle.sql(f"DELETE FROM {v2} WHERE id IN (2, 4)")
    ids = oracle.field_ids(v2)
    oracle.write_equality_deletes(v2, pa.table({"data": ["e"]}), [ids["data"]], partition_path="p=1")
    # v3: deletion vectors, two DELETEs (Java merges them into one DV per data file)
    v3 = f"{ns}.v3"
    oracle.create_table(v3, "id BIGINT, data STRING", format_version=3)
    oracle.sql(f"INSERT INTO {v3} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    oracle.sql(f"DELETE FROM {v3} WHERE id = 1")
    oracle.sql(f"DELETE FROM {v3} WHERE id = 3")
    # partition evolution: a partition-scoped and a global (unpartitioned spec) equality delete
    evolved = f"{ns}.evolved"
    oracle.create_table(evolved, "id BIGINT, category STRING, qty INT")
    oracle.sql(f"INSERT INTO {evolved} VALUES (1, 'a', 1), (2, 'b', 1), (3, 'b', 2)")
    oracle.sql(f"ALTER TABLE {oracle.qualified(evolved)} ADD PARTITION FIELD category")
    oracle.sql(f"INSERT INTO {evolved} VALUES (4, 'a', 1), (5, 'b', 1), (6, 'b', 2)")
    qty = [oracle.field_ids(evolved)["qty"]]
    oracle.write_equality_deletes(
        evolved, pa.table({"qty": pa.array([2], pa.int32())}), qty, partition_path="category=b"
    )
    oracle.commit_row_delta(
        evolved,
        delete_files=[
            oracle.write_equality_delete_file(
                evolved, pa.table({"qty": pa.array([1], pa.int32())}), qty, spec_id=0
            )
        ],
    )
    for name in (v2, v3, evolved):
        assert icemor.load_table(name).check().findings == (), name
        assert run(["check", name]) == 0

    # faults in the Puffin file of the v3 table, one at a time
    t = icemor.load_table(v3)
    snapshot = t.metadata.current_snapshot()
    assert snapshot is not None
    dv = live_delete_files(t.io, snapshot)[0]
    assert dv.kind == "dv" and dv.content_offset is not None and dv.content_size_in_bytes is not None
    puffin = _local(dv.path)
    in_bitmap = dv.content_offset + dv.content_size_in_bytes - 6  # a byte of the bitmap, before the CRC

    def flip(at: int) -> Callable[[bytes], bytes]:
        return lambda b: b[:at] + bytes([b[at] ^ 0xFF]) + b[at + 1 :]

    for fault, expected in (
        (flip(in_bitmap), {"puffin-crc"}),
        (flip(0), {"puffin-footer"}),  # the leading magic
        (flip(-20), {"puffin-footer"}),  # inside the footer's JSON
    ):
        restore = _fault(puffin, fault)
        assert _names(v3) == expected
        assert run(["check", v3]) == 1
        restore()
    assert _names(v3) == set()
    capsys.readouterr()

    # a second live DV for the same data file, and a DV for a data file the table never had:
    # Java's RowDelta commits both when told to validate from the current snapshot (the blob is
    # the first DV's own, so its CRC is fine)
    iceberg = oracle.spark.sparkContext._jvm.org.apache.iceberg
    java_table = oracle.java_table(v3)

    def commit_dv(referenced: str) -> None:
        builder = iceberg.FileMetadata.deleteFileBuilder(java_table.spec()).ofPositionDeletes()
        built = (
            builder.withFormat(iceberg.FileFormat.PUFFIN)
            .withPath(dv.path)
            .withFileSizeInBytes(dv.file_size_in_bytes)
            .withRecordCount(dv.record_count)
            .withReferencedDataFile(referenced)
            .withContentOffset(dv.content_offset)
            .withContentSizeInBytes(dv.content_size_in_bytes)
            .build()
        )
        # validating from the current snapshot skips Java's check for an earlier DV of the file
        java_table.newRowDelta().validateFromSnapshot(java_table.currentSnapshot().snapshotId()).addDeletes(
            built
        ).commit()
        java_table.refresh()

    commit_dv(str(dv.referenced_data_file))
    assert _names(v3) == {"duplicate-dv"}
    commit_dv("file:/nowhere/gone.parquet")
    # dangling; and the footer says the blob belongs to another data file
    assert _names(v3) == {"duplicate-dv", "dv-dangling", "puffin-footer"}
    assert run(["check", v3]) == 1

    # a column named by an equality delete dropped: a warning, still clean (the delete applies)
    oracle.sql(f"ALTER TABLE {oracle.qualified(v2)} DROP COLUMN data")
    report = icemor.load_table(v2).check()
    assert {f.name for f in report.findings} == {"equality-field-dropped"} and report.clean

    # Java's RowDelta commits whatever positions it is given: out of range, and older than the data
    pos = f"{ns}.pos"
    oracle.create_table(pos, "id BIGINT")
    oracle.sql(f"INSERT INTO {pos} VALUES (1), (2)")
    data_path = icemor.load_table(pos).scan().plan_files()[0].data_file.path
    oracle.commit_row_delta(pos, delete_files=[oracle.write_position_delete_file(pos, [(data_path, 7)])])
    assert _names(pos) == {"position-out-of-range"}
    late = oracle.write_data_file(pos, pa.table({"id": pa.array([3], pa.int64())}))
    late_path = str(late.location())
    oracle.commit_row_delta(pos, delete_files=[oracle.write_position_delete_file(pos, [(late_path, 0)])])
    assert "position-dangling" in _names(pos)  # names a file not (yet) in the table
    oracle.commit_row_delta(pos, data_files=[late])
    assert _names(pos) == {"position-out-of-range", "sequence-order"}
    assert run(["check", pos]) == 1
