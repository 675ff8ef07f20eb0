"""A failed Spark write leaves nothing behind (issue 51, defects 5 and 6).

- **Defect 5**: CDC from a Spark DataFrame whose job fails (a UDF of the changes raising, one
  task's file refused) raises, commits nothing and leaves no file the table does not reference:
  the tasks announce every file under the write's staging prefix, a failing task removes its
  own, and the driver, once no task of the job runs any more, removes every announced file
  (and the key-index sidecars beside them). Before, the files of the tasks that had finished
  stayed. (The other half of the defect, a task taking a cut-off input for all of it, shows on
  PySpark 4.x, whose Python workers get whole batches before the cut: ``tests_spark4/
  test_spark_failures.py``; here, PySpark 3.5 cuts inside a batch, which pyarrow refuses, and
  the UDF cases guard that it stays so.)
- **Defect 6**: the staging markers a killed write leaves (``data/_icemor-staging/<id>/...``)
  are orphans: ``remove_orphan_files`` and ``icemor expire --remove-orphans`` remove those older
  than the cut-off, with their emptied directories, and keep younger ones (a write in progress)
  and every other hidden file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import faults
import icemor
from icemor.cli import run

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "cat", StringType()),
    NestedField(3, "v", StringType()),
)
STAGING = "_icemor-staging"
# a Python worker still writing when the driver has its error does so within Spark's kill timeout
LATE_WRITER_SECONDS = 3.0


def _table(catalog: SqlCatalog, name: str, *, version: int, partitioned: bool = False) -> icemor.Table:
    table = icemor.create_table(
        name,
        SCHEMA,
        partition_by=["cat"] if partitioned else None,
        format_version=version,
        catalog=catalog,
    )
    table.apply_changes(  # on the local engine: live rows for position mode to find
        pa.table({"op": ["I"] * 6, "id": pa.array(range(6), pa.int64()), "cat": ["a"] * 6, "v": ["old"] * 6}),
        key=["id"],
        deletes="equality",
    )
    return table


def _unreferenced(home: Path, name: str, *, wait: float = 0.0) -> set[str]:
    """Files under the table location that no snapshot or metadata file references, after
    ``wait`` seconds (for a Python worker that may still be writing). The key-index sidecar of
    a referenced data file counts as referenced (a lookup builds it: a cache of a live file, as
    orphan removal sees it)."""
    from icemor.io.key_index import data_path_of

    time.sleep(wait)
    refs = faults.references(home, name)
    assert not refs.problems, refs.problems
    return {p for p in faults.stray_files(refs) if data_path_of(p) not in refs.everything}


def _fails_leaving_nothing(
    table: icemor.Table, home: Path, name: str, apply: Callable[[], object], *, expect: str | None = None
) -> None:
    before = table.pyiceberg.refresh().metadata.current_snapshot_id
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    already = _unreferenced(home, name)
    with pytest.raises(Exception) as err:  # Spark's error (a UDF's), or icemor's one line
        apply()
    if expect is not None:
        assert expect in str(err.value)
    assert table.pyiceberg.refresh().metadata.current_snapshot_id == before
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == rows
    left = sorted(_unreferenced(home, name, wait=LATE_WRITER_SECONDS) - already)
    location = faults.local_path(table.pyiceberg.metadata.location)
    assert not left, faults.describe_files(left, location)


@pytest.mark.parametrize(
    ("deletes", "version", "partitions"),
    [("equality", 2, 1), ("position", 2, None), ("position", 3, 1)],
)
def test_a_udf_failing_in_the_changes_leaves_nothing(
    spark: SparkSession,
    catalog: SqlCatalog,
    icemor_home: Path,
    ns: str,
    deletes: str,
    version: int,
    partitions: int | None,
) -> None:
    """The issue's repro: a UDF of the changes raises on one row, with more than a batch of
    Spark's Arrow transfer before it; the one-task path (``partitions=1``) and the default."""
    from pyspark.sql import functions as F

    name = f"{ns}.t"
    table = _table(catalog, name, version=version)

    @F.udf("string")
    def value(i: int) -> str:
        if i == 25_000:
            raise ValueError("the UDF refuses row 25000")
        return f"v{i}"

    df = spark.range(30_000).select(
        F.lit("U").alias("op"), "id", F.lit("a").alias("cat"), value("id").alias("v")
    )
    _fails_leaving_nothing(
        table,
        icemor_home,
        name,
        lambda: table.apply_changes(df, key=["id"], deletes=deletes, partitions=partitions),
        expect="the UDF refuses row 25000",
    )


@pytest.mark.parametrize(("deletes", "version"), [("equality", 2), ("position", 2), ("position", 3)])
def test_a_failed_task_leaves_no_file_of_the_tasks_that_finished(
    spark: SparkSession, catalog: SqlCatalog, icemor_home: Path, ns: str, deletes: str, version: int
) -> None:
    """Two tasks: the one with the keys of partition ``cat=a`` writes its files and finishes; the
    other cannot create ``cat=b`` (a file stands where its directory would go) and fails the job.
    Nothing is committed, and the finished task's files go too (they stayed before)."""
    from pyspark.sql import functions as F

    name = f"{ns}.t"
    table = _table(catalog, name, version=version, partitioned=True)
    location = Path(faults.local_path(table.pyiceberg.metadata.location))
    (location / "data" / "cat=b").write_bytes(b"not a directory")
    # Spark's hash partitioning of the key: task 0 gets cat=a only, task 1 cat=b only
    task = F.expr("pmod(hash(id), 2)")
    df = spark.range(20_000).select(
        F.lit("U").alias("op"),
        "id",
        F.when(task == 0, F.lit("a")).otherwise(F.lit("b")).alias("cat"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"),
    )
    _fails_leaving_nothing(
        table, icemor_home, name, lambda: table.apply_changes(df, key=["id"], deletes=deletes, partitions=2)
    )
    assert not (location / "data" / STAGING).exists() or not faults.files_under(location / "data" / STAGING)


# ------------------------------------------------------------------------------ defect 6


def _killed_write(data: Path, write_id: str, files: dict[str, str], *, mtime: float) -> list[Path]:
    """Staging files as a killed write leaves them (markers naming data files, a sink's staged
    rows), all last modified at ``mtime``, their directories too."""
    root = data / STAGING / write_id
    made = []
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        made.append(path)
    for p in [*made, *{p.parent for p in made}, root]:
        os.utime(p, (mtime, mtime))
    return made


@pytest.mark.parametrize("outside", [False, True], ids=["data-path", "write-data-path-outside"])
@pytest.mark.parametrize("how", ["api", "cli"])
def test_staging_markers_of_killed_writes_are_removed_as_orphans(
    home: Path, tmp_path: Path, how: str, outside: bool
) -> None:
    """Markers of killed writes (older than the cut-off) go, with the directories they leave
    empty; a write in progress (younger: its markers are newer than the cut-off) and other
    hidden files stay. With ``write.data.path`` outside the table location, its staging is
    listed too."""
    properties = {"write.data.path": (tmp_path / "elsewhere").as_uri()} if outside else {}
    t = icemor.create_table(
        "db.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]), properties=properties
    )
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    location = Path(faults.local_path(t.metadata.location))
    data = tmp_path / "elsewhere" if outside else location / "data"
    day_ago, hour_ahead = time.time() - 86_400, time.time() + 3_600
    killed = _killed_write(
        data,
        "0123456789abcdef0123456789abcdef",
        {f"{i:032x}": f"file://{data}/00000-{i}-lost.parquet" for i in range(37)},
        mtime=day_ago,
    )
    killed += _killed_write(data, "sink-5ca1ab1e", {"rows-1.parquet": "PAR1"}, mtime=day_ago)
    running = _killed_write(data, "fedcba9876543210fedcba9876543210", {"f" * 32: "x"}, mtime=hour_ahead)
    hidden = [location / "data" / ".part-0.crc", location / "data" / "_SUCCESS", location / "_meta" / "x"]
    for p in hidden:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
        os.utime(p, (day_ago, day_ago))
    now_ms = int(time.time() * 1000)
    if how == "api":
        m = t.maintenance.remove_orphan_files(older_than=now_ms)
        assert sorted(Path(faults.local_path(f)) for f in m.files) == sorted(killed)
    else:
        assert run(["expire", "db.t", "--remove-orphans", "--older-than", str(now_ms)]) == 0
    assert [p for p in killed if p.exists()] == []
    assert not (data / STAGING / "0123456789abcdef0123456789abcdef").exists()  # emptied: removed
    assert not (data / STAGING / "sink-5ca1ab1e").exists()
    assert all(p.exists() for p in running + hidden)
    assert sorted(r["id"] for r in t.refresh().scan().to_arrow().to_pylist()) == [1, 2, 3]
