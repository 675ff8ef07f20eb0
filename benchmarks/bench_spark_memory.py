"""Driver memory of a MERGE on the Spark engine: it must not grow with the rows changed.

Run as ``.venv/bin/python benchmarks/bench_spark_memory.py [--rows N] [--sources 500000,5000000]``.
``bench.base`` (10 M rows, 10 data files) is built once with Iceberg Java in ``bench-data/write/``
(shared with ``bench_write.py``). For each source size, a fresh copy of base (its data files
registered, not copied) is merged with a ``spark.range`` source in a fresh process running
icemor's own local Spark session: half the source ids match rows spread over every data file
(``UPDATE SET *``), half are new (``INSERT *``). The child prints the driver Python process's
peak RSS (``ru_maxrss``) and the JVM's peak heap (sum of the heap pools' peak usage; in local
mode the executors run in the driver JVM, so this includes their work). The parent checks the
result through Iceberg Java (count and sum(id)) before printing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _report import Report

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "bench-data" / "write"
ROWS = 10_000_000
SOURCES = (500_000, 5_000_000)


def _source_columns(rows: int, n: int) -> list[str]:
    """A ``spark.range(n)`` source: even ids match base rows spread over its range, odd ones are new."""
    half = (n + 1) // 2
    stride = max(1, rows // half)
    return [
        f"CASE WHEN id % 2 = 0 THEN (id DIV 2) * {stride} ELSE {rows} + id END AS id",
        "CAST(id % 1000 AS INT) AS k1",
        "concat('src', CAST(id % 97 AS STRING)) AS k2",
        "CAST(id % 10000 AS DOUBLE) / 100 AS qty",
        "timestamp_seconds(1700000000 + id) AS ts",
        "concat('merged-', CAST(id AS STRING)) AS note",
    ]


def _expected(rows: int, n: int) -> tuple[int, int]:
    """(count, sum(id)) after the MERGE: base's rows plus the odd (new) source ids."""
    half = (n + 1) // 2
    stride = max(1, rows // half)
    top = (half - 1) * stride  # the largest matching id
    if top >= rows:
        msg = f"source ids exceed base's range ({top} >= {rows})"
        raise RuntimeError(msg)
    new = [rows + i for i in range(1, n, 2)]
    base_sum = rows * (rows - 1) // 2
    return rows + len(new), base_sum + sum(new)


def child(table_name: str, rows: int, n: int) -> dict[str, Any]:
    """The MERGE in this (fresh) process; its time and peak memory."""
    import icemor
    from icemor.engines.spark import session
    from icemor.engines.spark._compat import jvm_and_gateway

    spark = session(master=os.environ.get("ICEMOR_SPARK_MASTER", "local[2]"))
    table = icemor.load_table(table_name)
    source = spark.range(n).selectExpr(*_source_columns(rows, n))
    t0 = time.perf_counter()
    m = (
        table.merge(source, on=["id"], spark=spark)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    seconds = time.perf_counter() - t0
    handles = jvm_and_gateway(spark)
    heap_peak = None
    if handles is not None:
        jvm = handles[0]
        heap_peak = 0
        for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
            if str(pool.getType().toString()) == "Heap memory":
                heap_peak += int(pool.getPeakUsage().getUsed())
    return {
        "source_rows": n,
        "rows_updated": m.rows_updated,
        "rows_inserted": m.rows_inserted,
        "seconds": seconds,
        "python_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "jvm_heap_peak_mib": None if heap_peak is None else heap_peak / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--sources", default=",".join(str(s) for s in SOURCES))
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--child", nargs=3, metavar=("TABLE", "ROWS", "SOURCE_ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, rows, n = args.child
        print(json.dumps(child(name, int(rows), int(n))), flush=True)
        return 0

    from bench_write import _fresh_copy, open_base

    report = Report.of(__file__)
    home = args.data_dir.resolve()
    java = open_base(home, args.rows)
    results = []
    for k, n in enumerate(int(s) for s in args.sources.split(",")):
        name = _fresh_copy(java, 9000 + k)
        env = dict(os.environ, ICEMOR_HOME=str(home))
        done = subprocess.run(
            [sys.executable, __file__, "--child", name, str(args.rows), str(n)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            return 1
        result = json.loads(done.stdout.strip().splitlines()[-1])
        got = java.sql(f"SELECT count(*), sum(id) FROM {java.qualified(name)}")[0]
        if (int(got[0]), int(got[1])) != _expected(args.rows, n):
            msg = f"{name}: Java reads (count, sum(id)) = {tuple(got)}, expected {_expected(args.rows, n)}"
            raise RuntimeError(msg)
        java.sql(f"DROP TABLE IF EXISTS {java.qualified(name)}")
        results.append(result)
        print(json.dumps(result), flush=True)
    header = ("source rows", "updated", "inserted", "s", "py RSS MiB", "JVM heap MiB")
    print("\n" + " ".join(f"{h:>13}" for h in header))
    for r in results:
        heap = r["jvm_heap_peak_mib"]
        cells = (
            f"{r['source_rows']:,}",
            f"{r['rows_updated']:,}",
            f"{r['rows_inserted']:,}",
            f"{r['seconds']:.1f}",
            f"{r['python_peak_rss_mib']:.0f}",
            "-" if heap is None else f"{heap:.0f}",
        )
        print(" ".join(f"{c:>13}" for c in cells))
        what = f"MERGE of a {r['source_rows']:,}-row source"
        note = f"{r['rows_updated']:,} updated, {r['rows_inserted']:,} inserted"
        report.add(f"{what}: time", r["seconds"], note=note)
        report.add(f"{what}: driver Python peak RSS", r["python_peak_rss_mib"], "MiB")
        report.add(f"{what}: JVM heap peak", heap, "MiB")
    report.context.update(rows=args.rows, spark=java.spark.version)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
