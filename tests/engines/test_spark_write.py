"""Row changes written on Spark executors (engines/spark/write.py), judged by Iceberg Java.

DELETE with a SQL condition, UPDATE and MERGE on the Spark engine: Java must read exactly the
rows of a plain-Python model of the operations; only file metadata may come to the driver; a
task attempt that dies after writing a file leaves no duplicate row and no stray file; a MERGE
that matches a target row twice commits nothing and leaves no file behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

import icemor
from icemor.exceptions import CommitConflictError, InvalidArgumentError
from icemor.ops.merge import DUPLICATE_MATCH
from oracle import local_path

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

Row = tuple[int, str, int]


def _make(oracle: IcebergJava, name: str, layout: str | None) -> list[Row]:
    """A table of 300 rows in three data files (per partition); its rows as the model."""
    oracle.create_table(name, "id BIGINT, k STRING, qty BIGINT", partitioned_by=layout)
    q = oracle.qualified(name)
    for lo in (0, 100, 200):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 4), id * 2 "
            f"FROM range({lo}, {lo + 100})"
        )
    return [(i, f"k{i % 4}", i * 2) for i in range(300)]


def _files_left(oracle: IcebergJava, name: str) -> tuple[set[str], set[str]]:
    """(files under the table's data directory, files that any snapshot references), and asserts
    that no staging file is left under data/_icemor-staging/."""
    q = oracle.qualified(name)
    location = oracle.sql(f"DESCRIBE TABLE EXTENDED {q}")
    loc = next(r[1] for r in location if r[0] == "Location")
    root = local_path(loc)
    staging = root / "data" / "_icemor-staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*"))
    on_disk = {str(p) for p in (root / "data").rglob("*") if p.is_file() and not p.name.startswith(".")}
    referenced = {str(local_path(r[0])) for r in oracle.sql(f"SELECT file_path FROM {q}.all_files")}
    return on_disk, referenced


class _Collected:
    """Every result the driver collects from a DataFrame while :meth:`on`: columns and row count."""

    def __init__(self) -> None:
        self.results: list[tuple[list[str], int]] = []
        self.active = False

    @contextmanager
    def on(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def add(self, columns: list[str], rows: int) -> None:
        if self.active:
            self.results.append((columns, rows))


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Collected]:
    """Record what DataFrames bring to the driver (collect, toPandas, icemor's Arrow collector)."""
    from pyspark.sql import DataFrame

    from icemor.engines.spark import _compat

    record = _Collected()
    collect, to_pandas = DataFrame.collect, DataFrame.toPandas
    batches = _compat.collect_arrow_batches

    def recording_collect(self: DataFrame) -> Any:
        rows = collect(self)
        record.add(self.columns, len(rows))
        return rows

    def recording_to_pandas(self: DataFrame) -> Any:
        frame = to_pandas(self)
        record.add(self.columns, len(frame))
        return frame

    def recording_batches(df: DataFrame) -> Any:
        out = batches(df)
        record.add(df.columns, sum(b.num_rows for b in out))
        return out

    def recording_iterator(self: DataFrame, *args: Any, **kwargs: Any) -> Any:
        record.add(self.columns, -1)  # streamed rows: only the columns are checked
        return to_iterator(self, *args, **kwargs)

    to_iterator = DataFrame.toLocalIterator
    monkeypatch.setattr(DataFrame, "toLocalIterator", recording_iterator)
    monkeypatch.setattr(DataFrame, "collect", recording_collect)
    monkeypatch.setattr(DataFrame, "toPandas", recording_to_pandas)
    monkeypatch.setattr(_compat, "collect_arrow_batches", recording_batches)
    yield record


def _only_metadata(record: _Collected, tasks: int) -> None:
    """Each collected result is the tasks' pickled metadata: one ``result`` row per task at most
    (``tasks``: the most tasks a write may have, shuffled or one per scan task)."""
    assert record.results, "the operation collected nothing: was it run on Spark?"
    for columns, rows in record.results:
        assert columns == ["result"], f"rows came to the driver: {columns}"
        assert rows <= tasks
    assert len(record.results) == 3  # one job per operation, nothing else collected


@pytest.mark.parametrize("layout", [None, "k"])
def test_delete_update_merge_on_executors_match_a_model(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, layout: str | None, collected: _Collected
) -> None:
    spark = oracle.spark
    name = f"{ns}.t"
    model = _make(oracle, name, layout)
    table = icemor.load_table(name, catalog=catalog)
    tasks = spark.sparkContext.defaultParallelism

    # DELETE with a SQL condition (outside pyiceberg's language: a residual for Spark SQL)
    with collected.on():
        m = table.delete("id % 7 = 3 OR upper(k) = 'K2'", spark=spark)
    gone = [r for r in model if r[0] % 7 == 3 or r[1] == "k2"]
    model = [r for r in model if r not in gone]
    assert m.deleted_rows == len(gone)
    assert Counter(oracle.rows(name)) == Counter(model)

    # UPDATE, moving some rows to another partition (k)
    with collected.on():
        m2 = table.update({"qty": "qty + 1", "k": "CASE WHEN id % 5 = 0 THEN 'moved' ELSE k END"},
                          where="id % 3 = 0", spark=spark)  # fmt: skip
    changed = [r for r in model if r[0] % 3 == 0]
    model = [r for r in model if r[0] % 3 != 0] + [
        (i, "moved" if i % 5 == 0 else k, q + 1) for i, k, q in changed
    ]
    assert m2.rows_updated == len(changed)
    assert Counter(oracle.rows(name)) == Counter(model)
    if layout == "k":
        parts = {r[0] for r in oracle.sql(f"SELECT partition.k FROM {oracle.qualified(name)}.data_files")}
        assert "moved" in parts

    # MERGE with every clause kind, a spark.range source (never collected)
    source = spark.range(250, 400).selectExpr(
        "id", "concat('s', id % 3) AS k", "id * 10 AS qty", "CASE WHEN id % 4 = 0 THEN 'D' ELSE 'U' END AS op"
    )
    with collected.on():
        m3 = (
            table.merge(source, on="t.id = s.id", spark=spark)
            .when_matched_delete("s.op = 'D'")
            .when_matched_update({"qty": "t.qty + s.qty"}, condition="t.qty > 520")
            .when_matched_update_all()
            .when_not_matched_insert_all("s.id % 2 = 0")
            .when_not_matched_insert({"id": "s.id", "k": "'new'", "qty": "0"})
            .execute()
        )
    by_id = {r[0]: r for r in model}
    counts = Counter[str]()
    for i in range(250, 400):
        s = (i, f"s{i % 3}", i * 10, "D" if i % 4 == 0 else "U")
        t = by_id.get(i)
        if t is not None:
            if s[3] == "D":
                del by_id[i]
                counts["deleted"] += 1
            elif t[2] > 520:
                by_id[i] = (i, t[1], t[2] + s[2])
                counts["updated"] += 1
            else:
                by_id[i] = s[:3]
                counts["updated"] += 1
        else:
            by_id[i] = s[:3] if i % 2 == 0 else (i, "new", 0)
            counts["inserted"] += 1
    model = list(by_id.values())
    assert (m3.rows_updated, m3.rows_deleted, m3.rows_inserted) == (
        counts["updated"],
        counts["deleted"],
        counts["inserted"],
    )
    assert Counter(oracle.rows(name)) == Counter(model)
    # a DELETE or UPDATE writes from its scan tasks (at most one per data file), MERGE shuffled
    _only_metadata(
        collected, max(tasks, len(oracle.sql(f"SELECT * FROM {oracle.qualified(name)}.all_data_files")))
    )
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each pass of write_changes while the test runs: whether it was clustered (no shuffle)."""
    from icemor.engines.spark import write

    seen: list[bool] = []
    real = write.write_changes

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(bool(kwargs.get("clustered")))
        return real(*args, **kwargs)

    monkeypatch.setattr(write, "write_changes", recording)
    return seen


def test_a_data_file_read_by_two_tasks_is_written_again_shuffled(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch, passes: list[bool]
) -> None:
    """The clustered write (no shuffle) relies on each data file coming to one task. When Spark
    splits one across tasks anyway, nothing of that pass is committed or left on disk, and the
    write runs again shuffled: one delete file per data file, the right rows for Java."""
    import contextlib

    from icemor.engines.spark import write

    spark = oracle.spark
    name = f"{ns}.t"
    # one data file of many small row groups, so that small splits give its rows to several tasks
    oracle.create_table(
        name, "id BIGINT, k STRING, qty BIGINT", properties={"write.parquet.row-group-size-bytes": "4096"}
    )
    q = oracle.qualified(name)
    oracle.sql(
        f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 4), id * 2 FROM range(0, 20000)"
    )
    before = {r[0] for r in oracle.sql(f"SELECT file_path FROM {q}.data_files")}
    assert len(before) == 1

    @contextlib.contextmanager
    def small_splits(spark_session: Any, sizes: Any) -> Iterator[None]:
        conf = spark_session.conf
        old = conf.get("spark.sql.files.maxPartitionBytes"), conf.get("spark.sql.files.openCostInBytes")
        conf.set("spark.sql.files.maxPartitionBytes", "16384")
        conf.set("spark.sql.files.openCostInBytes", "0")
        try:
            yield
        finally:
            conf.set("spark.sql.files.maxPartitionBytes", old[0])
            conf.set("spark.sql.files.openCostInBytes", old[1])

    monkeypatch.setattr(write, "_whole_files", small_splits)
    table = icemor.load_table(name, catalog=catalog)
    m = table.delete("id % 10 = 3", spark=spark)
    assert passes == [True, False]  # the clustered pass saw the file twice; the shuffled one wrote
    assert m.deleted_rows == 2000
    assert sorted(r[0] for r in oracle.sql(f"SELECT id FROM {q}")) == [i for i in range(20000) if i % 10 != 3]
    deletes = oracle.sql(f"SELECT file_path, record_count FROM {q}.delete_files")
    assert [r[1] for r in deletes] == [2000]  # one delete file for the one data file
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


def test_python_worker_scans_read_whole_files_for_a_clustered_write(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, passes: list[bool]
) -> None:
    """A file with equality deletes is read by icemor's Python workers, which split files at
    row groups for plain reads; a clustered write must get it whole (else it is written twice)."""
    import pyarrow as pa

    spark = oracle.spark
    name = f"{ns}.t"
    oracle.create_table(
        name,
        "id BIGINT, k STRING, qty BIGINT",
        properties={"write.parquet.row-group-size-bytes": "4096", "read.split.target-size": "8192"},
    )
    q = oracle.qualified(name)
    oracle.sql(
        f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 4), id * 2 FROM range(0, 20000)"
    )
    table = icemor.load_table(name, catalog=catalog)
    changes = pa.table(
        {
            "op": ["D", "D"],
            "id": pa.array([5, 6], pa.int64()),
            "k": [None, None],
            "qty": pa.array([None, None], pa.int64()),
        }
    )
    table.apply_changes(
        changes, key=["id"], allow_nullable_key=True
    )  # equality deletes: the file goes to the Python workers
    assert len(table.refresh().scan().to_arrow()) == 19998

    m = table.refresh().delete("id % 10 = 3", spark=spark)
    assert passes == [True]  # whole files: no second, shuffled pass
    assert m.deleted_rows == 2000
    expected = [i for i in range(20000) if i % 10 != 3 and i not in (5, 6)]
    assert sorted(r[0] for r in oracle.sql(f"SELECT id FROM {q}")) == expected


def test_duplicate_match_commits_nothing_and_leaves_no_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    spark = oracle.spark
    name = f"{ns}.t"
    model = _make(oracle, name, "k")
    table = icemor.load_table(name, catalog=catalog)
    before = oracle.current_snapshot_id(name)
    # ids 10..19 come twice: their target rows are matched by two source rows
    source = spark.range(0, 400).union(spark.range(10, 20)).selectExpr("id", "'x' AS k", "id AS qty")
    with pytest.raises(InvalidArgumentError) as err:
        (
            table.merge(source, on="t.id = s.id", spark=spark)
            .when_matched_update({"qty": "s.qty"})
            .when_not_matched_insert_all()
            .execute()
        )
    assert str(err.value) == DUPLICATE_MATCH
    assert oracle.current_snapshot_id(name) == before
    assert Counter(oracle.rows(name)) == Counter(model)
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


_CRASHING_IO = '''
"""A FileIO whose first attempt of every Spark task dies (the worker process exits) when it
opens its second data or delete file: the first one is complete on disk by then."""
import os
from collections import Counter

from pyiceberg.io.pyarrow import PyArrowFileIO

_OPENED = Counter()


class CrashingIO(PyArrowFileIO):
    def new_output(self, location):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and "_icemor-staging" not in location:
            _OPENED[context.taskAttemptId()] += 1
            if _OPENED[context.taskAttemptId()] == 2:
                os._exit(17)
        return super().new_output(location)
'''

_RETRY_SCRIPT = """
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
import icemor
from icemor.engines.spark import session

home, name = sys.argv[1], sys.argv[2]
catalog = SqlCatalog("icemor", uri=f"sqlite:///{home}/catalog.db", warehouse=f"file://{home}/warehouse",
                     **{"py-io-impl": "crashing_io.CrashingIO"})
# Spark's own log: a quiet session prints no failed task attempt (their errors reach the caller)
spark = session(master="local[2,3]", conf={"spark.ui.enabled": "false"}, quiet=False)
table = icemor.load_table(name, catalog=catalog)
m = table.update({"qty": "qty + 1000", "k": "'u'"}, where="id % 3 = 0", spark=spark)
print(json.dumps({"rows_updated": m.rows_updated, "snapshot_id": m.snapshot_id}))
"""


@pytest.mark.slow
def test_retried_attempts_leave_no_duplicate_and_no_stray_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, icemor_home: Path, tmp_path: Path
) -> None:
    name = f"{ns}.t"
    model = _make(oracle, name, "k")
    (tmp_path / "crashing_io.py").write_text(textwrap.dedent(_CRASHING_IO))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    env.pop("SPARK_HOME", None)
    done = subprocess.run(
        [sys.executable, "-c", _RETRY_SCRIPT, str(icemor_home), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Python worker exited unexpectedly" in done.stderr  # the first attempts did die
    out = json.loads(done.stdout.strip().splitlines()[-1])
    changed = [r for r in model if r[0] % 3 == 0]
    assert out["rows_updated"] == len(changed)
    model = [r for r in model if r[0] % 3 != 0] + [(i, "u", q + 1000) for i, _, q in changed]
    assert Counter(oracle.rows(name)) == Counter(model)  # no duplicate row from a lost attempt
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


def test_refused_commit_removes_every_written_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icemor.engines.spark import write

    name = f"{ns}.t"
    model = _make(oracle, name, None)
    q = oracle.qualified(name)
    table = icemor.load_table(name, catalog=catalog)
    written = write.write_changes

    def then_java_deletes(*args: Any, **kwargs: Any) -> Any:
        out = written(*args, **kwargs)
        # after the tasks wrote their files: Java deletes rows the UPDATE changes (a conflict)
        oracle.sql(f"DELETE FROM {q} WHERE id IN (3, 150, 297)")
        return out

    monkeypatch.setattr(write, "write_changes", then_java_deletes)
    with pytest.raises(CommitConflictError):
        table.update({"qty": "qty + 1"}, where="id % 3 = 0", spark=oracle.spark)
    model = [r for r in model if r[0] not in (3, 150, 297)]
    assert Counter(oracle.rows(name)) == Counter(model)  # Java's delete only
    on_disk, referenced = _files_left(oracle, name)
    assert on_disk == referenced


class _Conf:
    """The part of Spark's RuntimeConfig that _whole_files uses."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)
        self.seen: list[dict[str, str]] = []

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Session:
    def __init__(self, values: dict[str, str], cores: int = 2) -> None:
        self.conf = _Conf(values)
        self.sparkContext = type("Context", (), {"defaultParallelism": cores})()


@pytest.mark.parametrize(
    ("values", "sizes", "inside"),
    [
        # every file fits Spark's split (min(128 MiB, 131 MiB per core)): nothing changes
        ({"spark.sql.files.maxPartitionBytes": "128MB"}, [100 << 20, 100 << 20, 50 << 20], {}),
        # per core (99 MiB with the open cost) is below the 100 MiB file: Spark would split it
        ({}, [100 << 20, 90 << 20], {"spark.sql.files.openCostInBytes": str(100 << 20)}),
        # one 300 MiB file: both settings rise to it (per core is 152 MiB + open cost)
        (
            {"spark.sql.files.maxPartitionBytes": "134217728b"},
            [300 << 20],
            {
                "spark.sql.files.maxPartitionBytes": str(300 << 20),
                "spark.sql.files.openCostInBytes": str(300 << 20),
            },
        ),
        # a large total spreads per core over the file: only maxPartitionBytes rises
        ({}, [300 << 20] * 8, {"spark.sql.files.maxPartitionBytes": str(300 << 20)}),
    ],
)
def test_split_settings_rise_only_when_a_file_would_be_split_and_come_back(
    values: dict[str, str], sizes: list[int], inside: dict[str, str]
) -> None:
    from icemor.engines.spark.write import _whole_files

    session = _Session(values)
    with _whole_files(session, sizes):
        during = dict(session.conf.values)
    assert during == {**values, **inside}
    assert session.conf.values == values  # restored, unset where it was unset


def test_split_settings_come_back_when_the_job_fails() -> None:
    from icemor.engines.spark.write import _whole_files

    session = _Session({"spark.sql.files.maxPartitionBytes": "1m"})
    with pytest.raises(RuntimeError), _whole_files(session, [64 << 20]):
        raise RuntimeError
    assert session.conf.values == {"spark.sql.files.maxPartitionBytes": "1m"}


def test_staging_lies_in_the_data_path() -> None:
    """Markers go where the table's data files go (a table bucket takes those), hidden by ``_``;
    a FileIO that cannot list gets none (they could never be found again)."""
    from pyiceberg.io.fsspec import FsspecFileIO
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from icemor.engines.spark.write import Staging

    io = PyArrowFileIO()
    assert Staging(io, "s3://b/db/t/").prefix.startswith("s3://b/db/t/data/_icemor-staging/")
    moved = Staging(io, "s3://b/db/t", {"write.data.path": "s3://other/db/t/"})
    assert moved.prefix.startswith("s3://other/db/t/_icemor-staging/")
    legacy = Staging(io, "s3://b/db/t", {"write.object-storage.path": "s3://objects/t"})
    assert legacy.prefix.startswith("s3://objects/t/_icemor-staging/")
    unlisted = Staging(FsspecFileIO({}), "s3://b/db/t")
    assert unlisted.prefix == "" and unlisted.root.startswith("s3://b/db/t/data/_icemor-staging/")
    assert unlisted.finish() == []
