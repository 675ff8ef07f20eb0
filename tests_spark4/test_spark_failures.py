"""Spark 4: a task whose input Spark cut short fails; a failed CDC job leaves nothing (issue 51, defect 5).

When what feeds a Python task fails in the JVM (here a UDF of the changes), PySpark 4 shuts the
worker's input after the last whole Arrow batch it sent; pyarrow took that end for the end of
the stream, so the CDC task wrote the rows it had (20,000 of 30,000) as data and delete files,
and Spark failed the task only afterwards: the error was raised, nothing committed, the files
stayed. Now the task finds its input cut (no END_OF_STREAM after the Arrow stream:
``icemor.engines.spark.write.whole_input``) and fails before writing, and the driver removes
whatever the job's tasks announced once none of them runs. The tables stay in ``OUT/home``
with their (unchanged) rows in ``OUT/expected``, for Iceberg Java to read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icemor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import faults  # tests/faults: the write-fault kit (files nothing references)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "cat", StringType()),
    NestedField(3, "v", StringType()),
)
ROWS, FAILING_ROW = 30_000, 25_000  # three of Spark's Arrow batches (10,000 rows), the third cut
# a Python worker still writing when the driver has its error does so within Spark's kill timeout
LATE_WRITER_SECONDS = 3.0


def _changes(spark: SparkSession, failing_row: int | None) -> DataFrame:
    from pyspark.sql import functions as F

    @F.udf("string")
    def value(i):  # no hints: PySpark 4 infers a UDF's kind from them (and warns on these)
        if i == failing_row:
            raise ValueError(f"the UDF refuses row {i}")
        return f"v{i}"

    return spark.range(ROWS).select(
        F.lit("U").alias("op"), "id", F.lit("a").alias("cat"), value("id").alias("v")
    )


def _unreferenced(home: Path, name: str) -> set[str]:
    """Files under the table location no metadata references (a referenced data file's
    key-index sidecar counts as referenced: a cache of a live file, as orphan removal sees it)."""
    from icemor.io.key_index import data_path_of

    refs = faults.references(home, name)
    assert not refs.problems, refs.problems
    return {p for p in faults.stray_files(refs) if data_path_of(p) not in refs.everything}


def _fails_leaving_nothing(
    spark: SparkSession, home: Path, name: str, deletes: str, version: int, partitions: int | None
) -> list[tuple[Any, ...]]:
    """The issue's repro on table ``name`` (made afresh): the UDF's error is raised, the table
    keeps its snapshot and rows, and no file is left that the table does not reference.
    Returns the table's rows."""
    catalog = icemor.load_catalog()
    if catalog.table_exists(name):  # an earlier run's
        catalog.purge_table(name)
    table = icemor.create_table(name, SCHEMA, format_version=version)
    table.apply_changes(  # on the local engine: live rows for position mode to find
        pa.table({"op": ["I"] * 6, "id": pa.array(range(6), pa.int64()), "cat": ["a"] * 6, "v": ["old"] * 6}),
        key=["id"],
        deletes="equality",
    )
    before = table.pyiceberg.refresh().metadata.current_snapshot_id
    rows = sorted((r["id"], r["cat"], r["v"]) for r in table.scan().to_arrow().to_pylist())
    already = _unreferenced(home, name)
    with pytest.raises(Exception, match=f"the UDF refuses row {FAILING_ROW}"):
        table.apply_changes(_changes(spark, FAILING_ROW), key=["id"], deletes=deletes, partitions=partitions)
    assert table.pyiceberg.refresh().metadata.current_snapshot_id == before
    assert sorted((r["id"], r["cat"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == rows
    time.sleep(LATE_WRITER_SECONDS)
    left = sorted(_unreferenced(home, name) - already)
    assert not left, faults.describe_files(left, faults.local_path(table.pyiceberg.metadata.location))
    return rows


@pytest.mark.parametrize(("deletes", "version"), [("equality", 2), ("position", 2), ("position", 3)])
def test_a_udf_failing_in_the_changes_leaves_nothing(
    spark: SparkSession, out_dir: Path, deletes: str, version: int
) -> None:
    """The one-task path (``partitions=1``: the changes come to the task unshuffled, so the
    UDF's failure cuts that task's input)."""
    name = f"spark4fail.{deletes}_v{version}"
    rows = _fails_leaving_nothing(spark, out_dir / "home", name, deletes, version, 1)
    (out_dir / "expected").mkdir(parents=True, exist_ok=True)
    expected = {"columns": ["id", "cat", "v"], "rows": [list(r) for r in rows]}
    (out_dir / "expected" / f"{name}.json").write_text(json.dumps(expected))


_ON_ONE_CORE = """
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import test_spark_failures as t
from icemor.engines.spark import session

spark = session(master="local[1]", conf={"spark.ui.enabled": "false"})
for deletes, version in (("equality", 2), ("position", 3)):
    t._fails_leaving_nothing(spark, Path(sys.argv[2]), f"one.{deletes}_v{version}", deletes, version, None)
print("ok")
"""


def test_the_default_on_one_core_leaves_nothing(tmp_path: Path) -> None:
    """The default on ``local[1]``: one task by default parallelism, so the same unshuffled path
    (a session of its own: a process has one SparkContext)."""
    home = tmp_path / "home"
    env = {**os.environ, "ICEMOR_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_HOME", None)
    done = subprocess.run(
        [sys.executable, "-c", _ON_ONE_CORE, str(Path(__file__).parent), str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_a_task_whose_input_spark_cut_fails(spark: SparkSession, tmp_path: Path) -> None:
    """The mechanism: a ``mapInArrow`` task reading through ``whole_input`` sees two whole
    batches of a cut input, then fails (before, the batches simply ended); a whole input
    passes unchanged."""
    seen = tmp_path / "seen"
    seen.mkdir()
    where = str(seen)

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        from icemor.engines.spark.write import CutInputError, whole_input

        n = 0
        try:
            for b in whole_input(batches):
                n += b.num_rows
        except CutInputError:
            Path(where, f"{os.getpid()}-cut").write_text(str(n))
            raise
        Path(where, f"{os.getpid()}-whole").write_text(str(n))
        yield pa.record_batch([pa.array([n], pa.int64())], names=["n"])

    def outcome(failing_row: int | None) -> list[tuple[str, int]]:
        df = _changes(spark, failing_row).coalesce(1)
        try:
            df.mapInArrow(count, "n long").collect()
        except Exception as e:
            assert f"the UDF refuses row {failing_row}" in str(e)
        deadline = time.monotonic() + LATE_WRITER_SECONDS  # Spark ends the task before its worker
        while not any(seen.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        found: list[Any] = sorted((p.name.rsplit("-", 1)[1], int(p.read_text())) for p in seen.iterdir())
        for p in seen.iterdir():
            p.unlink()
        return found

    assert outcome(None) == [("whole", ROWS)]
    [(how, rows)] = outcome(FAILING_ROW)
    assert how == "cut" and 0 < rows < FAILING_ROW, (how, rows)
