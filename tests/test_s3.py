"""Every operation on a warehouse in S3: moto's S3 server on 127.0.0.1, started by the tests.

The embedded catalog keeps its SQLite file locally and its warehouse at ``s3://<bucket>/<test>``;
pyiceberg's PyArrowFileIO reaches the server through the ``s3.*`` properties. After every
operation the bucket is listed with boto3 (not through pyiceberg or pyarrow) and must hold
exactly the files the table's metadata references: nothing a write, a refused commit or a
crashed write made is left behind, and nothing referenced is missing. The rows are checked
against a model kept in the test.

The Spark engine runs on S3 through its Python workers, which open the files with the table's
FileIO; its native path (Spark's own Parquet reader, which would need the S3A connector, not
installable here: docs/rest-s3.md) declines s3:// files and makes no local links.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import PyArrowFile

import icemor
from icemor.exceptions import CommitFailedError, InvalidArgumentError
from s3 import S3Server, referenced_keys, split

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from icemor.table import Table

pytestmark = pytest.mark.s3

BUCKET = "icemor-warehouse"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string()), ("v", pa.int64())])
Model = dict[int, tuple[str, int]]  # id -> (k, v)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    server.client().create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


@pytest.fixture
def warehouse(request: pytest.FixtureRequest) -> str:
    """A prefix of the bucket of the test's own."""
    return f"s3://{BUCKET}/" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")


@pytest.fixture
def s3_catalog(s3: S3Server, home: Path, warehouse: str) -> Catalog:
    """icemor's embedded catalog (SQLite in the test's home) with its warehouse in S3."""
    return icemor.load_catalog(warehouse=warehouse, **s3.properties())


def rows(model: Model) -> pa.Table:
    ids = sorted(model)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "k": [model[i][0] for i in ids], "v": [model[i][1] for i in ids]},
        schema=SCHEMA,
    )


def create(
    catalog: Catalog, name: str, batches: list[range], *, partitioned: bool = True, **properties: str
) -> tuple[Table, Model]:
    """``name`` (k = 'k' + id % 3, v = id), partitioned by ``k`` unless told, one append per id range."""
    catalog.create_namespace_if_not_exists(name.split(".", maxsplit=1)[0])
    t = catalog.create_table(name, schema=SCHEMA, properties={"format-version": "2", **properties})
    if partitioned:
        with t.update_spec() as spec:
            spec.add_identity("k")
    model: Model = {}
    for ids in batches:
        batch: Model = {i: (f"k{i % 3}", i) for i in ids}
        t.append(rows(batch))
        model |= batch
    assert t.location().startswith("s3://")
    return icemor.load_table(name, catalog=catalog), model


def read(table: Table) -> Model:
    got = table.refresh().scan().to_arrow().to_pylist()
    model = {r["id"]: (r["k"], r["v"]) for r in got}
    assert len(model) == len(got), "a row read twice"
    return model


def table_keys(s3: S3Server, table: Table) -> set[str]:
    bucket, prefix = split(table.refresh().metadata.location)
    return s3.keys(bucket, prefix + "/")


def assert_bucket_holds_what_is_referenced(s3: S3Server, table: Table) -> None:
    listed, pyiceberg = table_keys(s3, table), table.refresh().pyiceberg
    assert listed - referenced_keys(pyiceberg) == set(), "left in the bucket, referenced by no metadata"
    assert referenced_keys(pyiceberg, live=True) - listed == set(), "referenced, missing from the bucket"


def check(s3: S3Server, table: Table, model: Model) -> None:
    assert read(table) == model
    assert table.scan().count() == len(model)
    assert_bucket_holds_what_is_referenced(s3, table)


def test_scan_count_and_row_level_writes(s3: S3Server, s3_catalog: Catalog) -> None:
    table, model = create(s3_catalog, "db.t", [range(60), range(60, 120)])
    check(s3, table, model)
    assert table.scan(row_filter="k = 'k1'").count() == sum(1 for k, _ in model.values() if k == "k1")

    m = table.delete("id < 10 or id = 77")
    gone = [*range(10), 77]
    assert m.deleted_rows == len(gone) and m.delete_files_added > 0
    for i in gone:
        del model[i]
    check(s3, table, model)

    u = table.update({"v": "v + 1000"}, "id % 7 = 0")
    hit = [i for i in model if i % 7 == 0]
    assert u.rows_updated == len(hit)
    for i in hit:
        model[i] = (model[i][0], model[i][1] + 1000)
    check(s3, table, model)

    source = rows({i: (f"k{i % 3}", -i) for i in range(110, 130)})
    table.merge(source, on="t.id = s.id").when_matched_update_all().when_not_matched_insert_all().execute()
    model |= {i: (f"k{i % 3}", -i) for i in range(110, 130)}
    check(s3, table, model)

    changes = pa.table(
        {
            "op": ["U", "D", "I", "D"],
            "id": pa.array([20, 21, 500, 999], pa.int64()),  # 999 is not in the table
            "k": ["k2", "k0", "k2", "k0"],
            "v": pa.array([-20, 0, 500, 0], pa.int64()),
        }
    )
    table.apply_changes(changes, key=["id"])
    model[20] = ("k2", -20)
    del model[21]
    model[500] = ("k2", 500)
    check(s3, table, model)


def test_every_maintenance_action(s3: S3Server, s3_catalog: Catalog) -> None:
    # partition-scoped delete files pile up: minor compaction has work
    table, model = create(
        s3_catalog,
        "db.m",
        [range(40), range(40, 80), range(80, 120)],
        **{"write.delete.granularity": "partition"},
    )
    for where in ("id < 5", "id between 40 and 45", "id % 10 = 9"):
        table.delete(where)
    model = {i: kv for i, kv in model.items() if not (i < 5 or 40 <= i <= 45 or i % 10 == 9)}
    check(s3, table, model)

    minor = table.maintenance.rewrite_position_deletes()
    assert minor.snapshot_id is not None and minor.delete_files_rewritten > 0
    check(s3, table, model)

    changes = pa.table(
        {
            "op": ["D"] * 3 + ["U"],
            "id": pa.array([50, 60, 70, 100], pa.int64()),
            "k": ["k2", "k0", "k1", "k1"],
            "v": pa.array([0, 0, 0, -100], pa.int64()),
        }
    )
    table.apply_changes(changes, key=["id"])  # equality deletes
    for i in (50, 60, 70):
        del model[i]
    model[100] = ("k1", -100)
    check(s3, table, model)
    assert any(d.equality_ids for p in table.scan().plan_files() for d in p.delete_files)

    converted = table.maintenance.rewrite_equality_deletes()
    assert converted.snapshot_id is not None
    check(s3, table, model)
    assert not any(d.equality_ids for p in table.scan().plan_files() for d in p.delete_files)

    major = table.maintenance.rewrite_data_files(delete_file_threshold=1)
    assert major.snapshot_id is not None
    check(s3, table, model)
    assert not any(p.delete_files for p in table.scan().plan_files())

    before = table_keys(s3, table)
    expired = table.maintenance.expire_snapshots(older_than=int(time.time() * 1000) + 1, retain_last=1)
    assert len(table.refresh().metadata.snapshots) == 1
    check(s3, table, model)  # the files only expired snapshots reached are gone from the bucket
    gone = before - table_keys(s3, table)
    assert any(k.endswith(".parquet") for k in gone) and any(k.endswith(".avro") for k in gone), expired


def test_orphan_removal_lists_the_bucket(s3: S3Server, s3_catalog: Catalog, warehouse: str) -> None:
    table, model = create(s3_catalog, "db.o", [range(30)])
    table.delete("id < 3")
    del model[0], model[1], model[2]
    bucket, location = split(table.refresh().metadata.location)
    client = s3.client()
    orphans = [f"{location}/data/k=k0/orphan.parquet", f"{location}/metadata/orphan.avro"]
    hidden = f"{location}/data/_SUCCESS"  # a hidden name: never an orphan (Java's filter)
    outside = split(warehouse)[1] + "/elsewhere/not-this-table.parquet"
    for key in [*orphans, hidden, outside]:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")

    m = table.maintenance.remove_orphan_files(older_than=int(time.time() * 1000) + 60_000)
    assert sorted(m.files) == sorted(f"s3://{bucket}/{k}" for k in orphans)
    assert not m.failed
    left = s3.keys(bucket)
    assert not set(orphans) & left
    assert {hidden, outside} <= left
    assert read(table) == model
    listed, pyiceberg = table_keys(s3, table), table.refresh().pyiceberg
    assert listed - referenced_keys(pyiceberg) == {hidden}
    assert referenced_keys(pyiceberg, live=True) <= listed


def test_drop_table_purge_empties_the_table_location(s3: S3Server, s3_catalog: Catalog) -> None:
    table, _ = create(s3_catalog, "db.d", [range(20), range(20, 40)])
    table.delete("id < 5")
    table.maintenance.rewrite_data_files(delete_file_threshold=1)
    assert len(table_keys(s3, table)) > 5
    bucket, prefix = split(table.metadata.location)
    icemor.drop_table("db.d", catalog=s3_catalog, purge=True)
    assert not s3_catalog.table_exists("db.d")
    assert s3.keys(bucket, prefix + "/") == set()  # empty directory markers of pyarrow's may stay


def test_the_cli_on_an_s3_warehouse(s3: S3Server, home: Path, warehouse: str) -> None:
    """``icemor --catalog icemor ...``: the embedded catalog's name, configured (warehouse in S3, the
    ``s3.*`` properties) through pyiceberg's environment variables; the SQLite rows are the same."""
    cat = icemor.load_catalog(warehouse=warehouse, **s3.properties())
    table, model = create(cat, "db.c", [range(50)])
    bucket, prefix = split(table.metadata.location)
    env = {
        **os.environ,
        "PYICEBERG_CATALOG__ICEMOR__TYPE": "sql",
        "PYICEBERG_CATALOG__ICEMOR__URI": f"sqlite:///{home}/catalog.db",
        "PYICEBERG_CATALOG__ICEMOR__WAREHOUSE": warehouse,
        **{
            "PYICEBERG_CATALOG__ICEMOR__" + k.upper().replace(".", "__").replace("-", "_"): v
            for k, v in s3.properties().items()
        },
    }

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "icemor", "--catalog", "icemor", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert cli("count", "db.c").strip() == "50"
    cli("delete", "db.c", "--where", "id >= 40")
    assert cli("count", "db.c").strip() == "40"
    assert read(icemor.load_table("db.c", catalog=cat)) == {i: kv for i, kv in model.items() if i < 40}
    cli("drop-table", "db.c", "--purge")
    assert s3.keys(bucket, prefix + "/") == set()


# ------------------------------------------------------------------- failures leave nothing behind

OPERATIONS: dict[str, Callable[[Table], object]] = {
    "delete": lambda t: t.delete("id % 2 = 0"),
    "update": lambda t: t.update({"v": "v * 2"}, "id < 30"),
    "merge": lambda t: (
        t.merge(rows({i: ("k0", -i) for i in range(25, 75)}), on="t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    ),
    "apply-changes": lambda t: t.apply_changes(
        pa.table(
            {
                "op": ["U", "D"],
                "id": pa.array([1, 2], pa.int64()),
                "k": ["k1", "k2"],
                "v": pa.array([9, 0], pa.int64()),
            }
        ),
        key=["id"],
    ),
    "compact": lambda t: t.maintenance.rewrite_data_files(delete_file_threshold=1),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_refused_commit_removes_its_files_from_the_bucket(
    s3: S3Server, s3_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    table, model = create(
        s3_catalog,
        "db.r",
        [range(30), range(30, 60)],
        **{"commit.retry.num-retries": "1", "commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "2"},
    )
    table.delete("id = 3")  # a delete file, for compaction to have work
    del model[3]
    before = table_keys(s3, table)
    snapshot = table.refresh().metadata.current_snapshot_id
    written: list[str] = []
    refused = 0
    original_create = PyArrowFile.create

    def create_file(self: PyArrowFile, overwrite: bool = False) -> Any:
        written.append(self.location)
        return original_create(self, overwrite)

    def commit_table(*args: Any, **kwargs: Any) -> Any:
        nonlocal refused
        refused += 1
        msg = "refused by the test"
        raise CommitFailedException(msg)

    monkeypatch.setattr(PyArrowFile, "create", create_file)
    monkeypatch.setattr(type(s3_catalog), "commit_table", commit_table)
    with pytest.raises(CommitFailedError):
        OPERATIONS[operation](table)
    monkeypatch.undo()

    assert refused == 2  # the first try and one retry
    assert any(w.endswith(".parquet") for w in written), written  # it did write files first
    assert table.refresh().metadata.current_snapshot_id == snapshot
    assert table_keys(s3, table) == before
    assert read(table) == model
    assert_bucket_holds_what_is_referenced(s3, table)


class _CrashOnClose:
    """A stream whose ``close`` completes (the object is in the bucket), then calls ``after``."""

    def __init__(self, stream: Any, after: Callable[[], None]) -> None:
        self._stream, self._after = stream, after

    def write(self, data: bytes) -> int:
        return int(self._stream.write(data))

    def close(self) -> None:
        self._stream.close()
        self._after()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> _CrashOnClose:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.mark.parametrize("operation", ["delete", "update"])
def test_a_crashed_write_removes_its_files_from_the_bucket(
    s3: S3Server, s3_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """An exception in the middle of the write, once its second Parquet file is in the bucket
    (other writer threads may still be uploading): what was written goes, uploads in flight too."""
    table, model = create(s3_catalog, "db.w", [range(30), range(30, 60), range(60, 90)])
    before = table_keys(s3, table)
    snapshot = table.metadata.current_snapshot_id
    seen_at_crash: set[str] = set()
    closed = 0
    lock = threading.Lock()
    original_create = PyArrowFile.create

    def crash() -> None:
        nonlocal closed
        with lock:
            closed += 1
            if closed != 2:
                return
        seen_at_crash.update(table_keys(s3, table))
        msg = "the write crashed"
        raise RuntimeError(msg)

    def create_file(self: PyArrowFile, overwrite: bool = False) -> Any:
        stream = original_create(self, overwrite)
        return _CrashOnClose(stream, crash) if self.location.endswith(".parquet") else stream

    monkeypatch.setattr(PyArrowFile, "create", create_file)
    with pytest.raises(Exception, match="the write crashed"):
        OPERATIONS[operation](table)
    monkeypatch.undo()
    time.sleep(0.5)  # a writer thread still running would finish by now

    assert len(seen_at_crash - before) >= 2, "the files closed before the crash were not in the bucket"
    assert table.refresh().metadata.current_snapshot_id == snapshot
    assert table_keys(s3, table) == before
    assert read(table) == model
    assert_bucket_holds_what_is_referenced(s3, table)


def test_a_discarded_write_removes_an_upload_that_completes_later(s3: S3Server, warehouse: str) -> None:
    """On S3 an object appears when its upload completes: a file begun before its write was
    discarded, and closed after, must be removed then (on a local disk the removal unlinks it)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from icemor.io.data_writer import RecordingIO

    io = PyArrowFileIO(s3.properties())
    recording = RecordingIO(io)
    location = f"{warehouse}/data/late.parquet"
    stream = recording.new_output(location).create()
    stream.write(b"PAR1")
    assert recording.discard() == []  # nothing there yet to remove
    stream.close()  # the upload completes after the removal
    assert not io.new_input(location).exists()
    assert s3.keys(*split(f"{warehouse}/data/")) == set()


# ----------------------------------------------------------------- the Spark engine's native path


def test_native_spark_reads_make_no_local_links_for_s3_files(s3: S3Server, s3_catalog: Catalog) -> None:
    """On a local master, files with position deletes are read through local symlinks; an s3://
    file cannot be linked, so the native path must decline it (the Python workers read it)."""
    from icemor.engines.spark import native

    table, _ = create(s3_catalog, "db.n", [range(20)], partitioned=False)
    table.delete("id < 4")
    planned = table.scan().plan_files()
    paths = [p.data_file.path for p in planned]
    assert paths and all(p.startswith("s3://") for p in paths)
    assert all(native.spark_file_path(p) is None for p in paths)
    reason = native.native_ineligibility(table.scan().job, planned)
    assert reason.startswith("data file s3://"), reason
    local = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    assert native._link_files(local, paths) is None  # type: ignore[arg-type]


def test_the_spark_engine_reads_and_deletes_through_its_python_workers(
    s3: S3Server, s3_catalog: Catalog, spark: SparkSession
) -> None:
    """Without the S3A connector: the Python workers open the files with the table's FileIO
    (its ``s3.*`` properties travel with the tasks), so the Spark engine works on S3 as it is."""
    table, model = create(s3_catalog, "db.s", [range(60), range(60, 120)], partitioned=False)
    table.delete("id % 5 = 0", spark=spark)
    model = {i: kv for i, kv in model.items() if i % 5}
    got = {r["id"]: (r["k"], r["v"]) for r in table.refresh().to_spark(spark).collect()}
    assert got == model
    with pytest.raises(InvalidArgumentError, match="s3://"):
        table.to_spark(spark, strategy="native").collect()
    check(s3, table, model)
