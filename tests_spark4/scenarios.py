"""Spark-engine write scenarios with a Python model of the rows, shared by two suites.

Run by ``tests_spark4`` (PySpark 4.x, ``make test-spark4``) and, as a script, by
``tests/engines/test_spark_cluster.py`` (PySpark 3.5 on a multi-process ``local-cluster``).
Every operation goes through icemor's public API with ``spark=`` (whichever Spark write path is
in the tree); after each one the table read by icemor's local reader must equal the model. The
final rows are saved as JSON, for Iceberg Java (Spark 3.5, the main venv) to read the same
catalog: ``tools/spark4_check.py``.

Script use: ``python scenarios.py MASTER OUT_DIR [--executor-tmp DIR]`` runs every scenario on a
session against ``MASTER``, with the catalog in ``OUT_DIR/home`` (ICEMOR_HOME) and the expected
rows in ``OUT_DIR/expected``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Row = tuple[int, str, int, str | None]  # id, part, qty, note
COLUMNS = ("id", "part", "qty", "note")
N = 200
SPARK_DDL = "id long, part string, qty long, note string"


def arrow_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("part", pa.string(), nullable=False),
            pa.field("qty", pa.int64()),
            pa.field("note", pa.string()),
        ]
    )


def initial_rows() -> dict[int, Row]:
    return {i: (i, f"p{i % 3}", i * 10, None if i % 4 == 0 else f"n{i}") for i in range(N)}


def create_table(name: str, *, partitioned: bool, format_version: int = 2) -> Any:
    """Create ``name`` in the embedded catalog (ICEMOR_HOME) with the initial rows in two files."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    import icemor

    catalog = icemor.load_catalog()
    namespace = name.split(".", maxsplit=1)[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "part", StringType(), required=True),
        NestedField(3, "qty", LongType(), required=False),
        NestedField(4, "note", StringType(), required=False),
    )
    spec = (
        PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))
        if partitioned
        else PartitionSpec()
    )
    if catalog.table_exists(name):  # an earlier run's
        catalog.purge_table(name)
    t = catalog.create_table(
        name, schema=schema, partition_spec=spec, properties={"format-version": str(format_version)}
    )
    rows = list(initial_rows().values())
    for part in (rows[: N // 2], rows[N // 2 :]):
        t.append(to_arrow(part))
    return icemor.load_table(name)


def to_arrow(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(COLUMNS, r, strict=True)) for r in rows], schema=arrow_schema())


def local_rows(name: str) -> list[Row]:
    """The table as icemor's local reader reads it, sorted."""
    import icemor

    data = icemor.load_table(name).scan(selected_fields=COLUMNS).to_arrow()
    return sorted(tuple(r[c] for c in COLUMNS) for r in data.to_pylist())  # type: ignore[misc]


def check(name: str, model: dict[int, Row], step: str) -> None:
    got = local_rows(name)
    want = sorted(model.values())
    if got != want:
        extra = sorted(set(got) - set(want))[:5]
        missing = sorted(set(want) - set(got))[:5]
        msg = f"{name} after {step}: {len(got)} rows, model {len(want)}; extra {extra}, missing {missing}"
        raise AssertionError(msg)


def run_writes(spark: SparkSession, name: str, *, partitioned: bool) -> dict[int, Row]:
    """DELETE, UPDATE (moving rows to another partition), MERGE and a CDC batch on Spark.

    Returns the model's final rows; each step is checked against it with the local reader.
    """
    table = create_table(name, partitioned=partitioned)
    model = initial_rows()
    check(name, model, "create")

    m = table.delete("qty % 50 = 0", spark=spark)
    model = {k: r for k, r in model.items() if r[2] % 50 != 0}
    assert m.deleted_rows == N - len(model), m
    check(name, model, "DELETE")

    table.refresh()
    table.update({"part": "'p9'", "qty": "qty + 1000"}, where="id % 7 = 1", spark=spark)
    model = {k: ((k, "p9", r[2] + 1000, r[3]) if k % 7 == 1 else r) for k, r in model.items()}
    check(name, model, "UPDATE (partition move)")

    table.refresh()
    source_rows: list[Row] = [(i, f"p{i % 2}", -i, f"m{i}") for i in range(150, 260, 3)]
    source = spark.createDataFrame(source_rows, schema=SPARK_DDL)
    merge = table.merge(source, on=["id"], spark=spark)
    merge.when_matched_update_all().when_not_matched_insert_all().execute()
    for r in source_rows:
        model[r[0]] = r
    check(name, model, "MERGE")

    table.refresh()
    changes = [("U", 2, "p1", 7, "cdc"), ("D", 3, None, None, None), ("I", 900, "p0", 9, "new")]
    changes += [("D", i, None, None, None) for i in range(10, 40, 6)]
    cdf = spark.createDataFrame(changes, schema=f"op string, {SPARK_DDL}")
    table.apply_changes(cdf, key=["id"])
    for op, i, part, qty, note in changes:
        if op == "D":
            model.pop(i, None)
        else:
            model[i] = (i, part, qty, note)  # type: ignore[assignment]
    check(name, model, "CDC batch")
    return model


def save_expected(out: Path, name: str, model: dict[int, Row]) -> None:
    (out / "expected").mkdir(parents=True, exist_ok=True)
    (out / "expected" / f"{name}.json").write_text(json.dumps(sorted(model.values())))


def _parent(pid: int) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ")"
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def executor_jvm_pid() -> int:
    """In a Python worker: the JVM that runs it (worker -> pyspark daemon -> executor JVM)."""
    return _parent(_parent(os.getpid()))


def driver_jvm_pids() -> list[int]:
    """The JVM(s) this driver process started (its child processes)."""
    children: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return sorted(children)


def main(argv: list[str]) -> int:
    master, out = argv[1], Path(argv[2]).resolve()
    os.environ["ICEMOR_HOME"] = str(out / "home")
    from icemor.engines.spark import session

    conf = {"spark.ui.enabled": "false", "spark.executor.memory": "768m"}
    if "--executor-tmp" in argv:
        # executors get a temp directory of their own: nothing may pass through the driver's
        tmp = argv[argv.index("--executor-tmp") + 1]
        conf["spark.executorEnv.TMPDIR"] = tmp
        conf["spark.executor.extraJavaOptions"] = f"-Djava.io.tmpdir={tmp}"
    if os.environ.get("PYTHONPATH"):
        conf["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
    spark = session(master=master, conf=conf)
    try:
        jvms = spark.sparkContext.parallelize(range(8), 8).map(lambda _: executor_jvm_pid()).collect()
        print(json.dumps({"driver_jvms": driver_jvm_pids(), "executor_jvms": sorted(set(jvms))}), flush=True)
        for partitioned in (False, True):
            name = f"cluster.{'part' if partitioned else 'flat'}"
            save_expected(out, name, run_writes(spark, name, partitioned=partitioned))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
