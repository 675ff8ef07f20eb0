"""The Spark engine on a classic session and on Spark Connect: the same operations, timed.

Run with PySpark 4.x (``.venv-spark4``; Connect needs ``pyspark[connect]``):
``.venv-spark4/bin/python benchmarks/bench_connect.py [--rows N] [--runs R]``. Each session kind
runs in a process of its own (a Connect client cannot share a process with a classic session),
on ``local[2]`` with the same driver heap (Connect: a server process of its own on a free port,
``tests_spark4/connect_server.py``, this process its client), over its own tables in a
temporary icemor home: a table of ``--rows`` rows in 10 data files, then, on a fresh copy per
run, DELETE of 10% of the rows, reads after it (``auto``: files with position deletes in Python
workers; ``native``: Spark's reader and an anti-join), UPDATE of 10%, MERGE of a ``spark.range``
source (a tenth of the rows, half matching), the change feed of the MERGE, and a CDC batch of a
tenth of the rows. Each step's result is checked with icemor's local reader before
its time counts. One warm-up run, then the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests_spark4"))

FILES = 10


def _table(name: str, rows: int) -> Any:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    import icemor

    catalog = icemor.load_catalog()
    if ("bench",) not in catalog.list_namespaces():
        catalog.create_namespace("bench")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "qty", DoubleType()),
        NestedField(3, "note", StringType()),
    )
    t = catalog.create_table(name, schema=schema, properties={"format-version": "2"})
    per = rows // FILES
    for f in range(FILES):
        ids = pa.array(range(f * per, (f + 1) * per), pa.int64())
        t.append(
            pa.table(
                {
                    "id": ids,
                    "qty": pa.array([float(i % 1000) for i in range(per)]),
                    "note": pa.array([f"n{f}"] * per),
                },
                schema=schema.as_arrow(),
            )
        )
    return icemor.load_table(name)


def _run(spark: Any, rows: int, run: int) -> dict[str, float]:
    from pyspark.sql import functions as F

    from icemor.engines.spark import collect_arrow

    table = _table(f"bench.t{run}", rows)
    times: dict[str, float] = {}

    def timed(step: str, fn: Any, check: Any) -> None:
        start = time.perf_counter()
        value = fn()
        times[step] = time.perf_counter() - start
        if not check(value):
            msg = f"{step}: wrong result {value!r}"
            raise AssertionError(msg)

    live = rows

    def narrow(strategy: str) -> int:
        return collect_arrow(table.to_spark(spark, strategy=strategy, selected_fields=("qty",))).num_rows

    timed("read (no deletes)", lambda: narrow("auto"), lambda n: n == live)
    timed(
        "DELETE 10%", lambda: table.delete("id % 10 = 3", spark=spark).deleted_rows, lambda n: n == rows // 10
    )
    live -= rows // 10
    table.refresh()
    for strategy in ("auto", "native"):
        timed(
            f"read after DELETE ({strategy})",
            lambda s=strategy: (
                collect_arrow(table.to_spark(spark, strategy=s, selected_fields=("qty",))).num_rows
            ),
            lambda n: n == live,
        )
    timed(
        "UPDATE 10%",
        lambda: table.update({"qty": "qty + 1"}, where="id % 10 = 5", spark=spark).rows_updated,
        lambda n: n == rows // 10,
    )
    table.refresh()
    n = rows // 10
    source = spark.range(n).select(
        # even: ids id % 10 = 0 (neither deleted nor updated above); odd: new ids
        F.when(F.col("id") % 2 == 0, F.col("id") * 10).otherwise(F.col("id") + rows).alias("id"),
        F.lit(1.5).alias("qty"),
        F.lit("m").alias("note"),
    )
    before = table.metadata.current_snapshot_id
    timed(
        "MERGE",
        lambda: (
            table.merge(source, on=["id"], spark=spark)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
        lambda m: m.rows_inserted == n // 2,
    )
    table.refresh()
    timed(
        "change feed of the MERGE",
        lambda: collect_arrow(table.changes(before).to_spark(spark)).num_rows,
        lambda k: k > 0,
    )
    changes = spark.range(n).select(
        F.lit("U").alias("op"),
        (F.col("id") * 7).alias("id"),
        F.lit(2.5).alias("qty"),
        F.lit("c").alias("note"),
    )
    timed("CDC batch", lambda: table.apply_changes(changes, key=["id"]).changes, lambda k: k == n)
    return times


def child(kind: str, rows: int, runs: int, out: Path) -> None:
    from pyspark.sql import SparkSession

    from icemor.engines.spark import default_driver_memory, session

    # the same heap for both (a Connect server would start with Spark's 1 GiB default)
    memory = default_driver_memory()
    with contextlib.ExitStack() as stack:
        if kind == "connect":
            from connect_server import connect_server

            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icemor-connect-")))
            url = stack.enter_context(connect_server(work, conf={"spark.driver.memory": memory}))
            spark = SparkSession.builder.remote(url).getOrCreate()
        else:
            spark = session(master="local[2]", conf={"spark.ui.enabled": "false"}, driver_memory=memory)
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        try:
            results = [_run(spark, rows, r) for r in range(runs + 1)][1:]  # the first warms up
        finally:
            spark.stop()
    out.write_text(json.dumps(results))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=("classic", "connect"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv[1:])
    if args.child:
        child(args.child, args.rows, args.runs, args.out)
        return 0
    found: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="icemor-bench-connect-") as tmp:
        for kind in ("classic", "connect"):
            out = Path(tmp) / f"{kind}.json"
            env = {**os.environ, "ICEMOR_HOME": str(Path(tmp) / kind), "PYSPARK_PYTHON": sys.executable}
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            cmd = [
                sys.executable,
                __file__,
                "--child",
                kind,
                "--rows",
                str(args.rows),
                "--runs",
                str(args.runs),
            ]
            print(f"  {kind} ...", flush=True)
            subprocess.run([*cmd, "--out", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
            found[kind] = json.loads(out.read_text())
    print(f"\n{args.rows:,} rows in {FILES} files, local[2]; seconds, median of {args.runs} after a warm-up")
    print(f"{'step':32} {'classic':>8} {'Connect':>8} {'Connect / classic':>18}")
    for step in found["classic"][0]:
        c = statistics.median(r[step] for r in found["classic"])
        k = statistics.median(r[step] for r in found["connect"])
        print(f"{step:32} {c:8.2f} {k:8.2f} {k / c:17.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
