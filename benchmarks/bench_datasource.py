"""The ``icemor`` Spark data source against ``table.to_spark`` (docs/spark.md, "Data source").

Needs PySpark 4.2+ (``.venv-spark4``) and the tables of ``benchmarks/bench_scan.py``, built with
the main venv (Iceberg Java builds them)::

    .venv/bin/python benchmarks/bench_scan.py --build-only --rows 2000000 --data-dir /tmp/bench2m
    JAVA_HOME=... .venv-spark4/bin/python benchmarks/bench_datasource.py --data-dir /tmp/bench2m

Three ways to run the bench's narrow (``count(*), sum(qty)``) and wide (every column) queries on
each table, in one session, warm (one warm-up call each), timed in alternation, medians of
``--runs``; each call includes loading the table (as bench_scan's Spark cells do) and every
result is checked against ``to_spark``'s:

- ``to_spark``: ``table.to_spark(spark, selected_fields=...)``;
- ``format`` : ``spark.read.format("icemor")...load()`` after ``icemor.spark.register(spark)``
  (the front: the same plan as ``icemor.spark.read``);
- ``source`` : the same after ``register(spark, fast_reads=False)``: the Python data source.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from _report import Report

SQL = {
    "narrow": "SELECT count(*), sum(qty) FROM {view}",
    "wide": "SELECT count(*), sum(id), sum(k1), max(k2), sum(qty), max(ts), max(note) FROM {view}",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, required=True, help="bench_scan.py's icemor home")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tables", default="base,pos10,eq10")
    args = parser.parse_args()
    report = Report.of(__file__)
    os.environ["ICEMOR_HOME"] = str(args.data_dir.resolve())
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)

    import icemor
    import icemor.spark
    from icemor.engines.spark import session

    spark = session(master="local[2]", conf={"spark.ui.enabled": "false"})

    def to_spark(name: str, query: str) -> Any:
        fields = ("qty",) if query == "narrow" else ("*",)
        icemor.load_table(f"bench.{name}").to_spark(spark, selected_fields=fields).createOrReplaceTempView(
            "a"
        )
        return spark.sql(SQL[query].format(view="a")).collect()[0]

    def through_format(fast: bool) -> Any:
        def run(name: str, query: str) -> Any:
            reader = spark.read.format("icemor")
            if query == "narrow":
                reader = reader.option("columns", "qty")
            reader.load(f"bench.{name}").createOrReplaceTempView("b")
            return spark.sql(SQL[query].format(view="b")).collect()[0]

        def prepared(name: str, query: str) -> Any:
            icemor.spark.register(spark, fast_reads=fast)  # untimed: see timed() below
            return run

        return prepared

    cells = {
        "to_spark": lambda n, q: to_spark,
        "format": through_format(True),
        "source": through_format(False),
    }

    def timed(cell: str, name: str, query: str) -> tuple[Any, float]:
        fn = cells[cell](name, query)
        start = time.perf_counter()
        result = fn(name, query)
        return result, time.perf_counter() - start

    print(
        f"{'table':7}{'query':8}" + "".join(f"{c:>12}" for c in cells) + "   format/to_spark  source/to_spark"
    )
    for name in args.tables.split(","):
        for query in SQL:
            want = timed("to_spark", name, query)[0]
            for cell in cells:  # warm-up, and the check
                got = timed(cell, name, query)[0]
                same = all(
                    abs(a - b) <= 1e-6 * max(1.0, abs(a)) if isinstance(a, float) else a == b
                    for a, b in zip(got, want, strict=True)
                )
                if not same:
                    msg = f"{cell} {name} {query}: {got} != {want}"
                    raise SystemExit(msg)
            times: dict[str, list[float]] = {c: [] for c in cells}
            for _ in range(args.runs):
                for cell in cells:
                    times[cell].append(timed(cell, name, query)[1])
            med = {c: statistics.median(v) for c, v in times.items()}
            print(
                f"{name:7}{query:8}"
                + "".join(f"{med[c]:11.3f}s" for c in cells)
                + f"   {med['format'] / med['to_spark']:14.2f}x  {med['source'] / med['to_spark']:14.2f}x",
                flush=True,
            )
            report.add(f"{name} {query}: to_spark", med["to_spark"])
            for c in ("format", "source"):
                report.add(f"{name} {query}: {c}", med[c], ratio=med[c] / med["to_spark"], versus="to_spark")
    report.context.update(runs=args.runs, spark=spark.version)
    report.write()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
