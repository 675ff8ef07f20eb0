"""Appending a Spark DataFrame: icemor's executor-side write against Iceberg Java's, and driver memory.

Run as ``.venv/bin/python benchmarks/bench_spark_append.py [--rows N] [--runs R]`` (``make bench``).

1. **Against Iceberg Java** (PySpark 3.5, one session: the oracle's ``local[2]``): the bench's
   10 M-row DataFrame (``bench_scan.SELECT_ROWS``: id, k1, k2, qty, ts, a 72-character note),
   generated once and kept on disk (``persist(DISK_ONLY)``), so both writers read the same
   cached rows. Each run appends it to a new empty table: Iceberg Java's
   ``df.writeTo(t).append()`` and ``icemor.spark.write(df, t)`` (the function form of
   ``df.write.format("icemor")``), and ``INSERT INTO t SELECT * FROM source`` by Iceberg Java
   and through ``icemor.spark.attach`` (target: <= 1.0x Java's), in rotating order, one warm-up
   each, the median of ``--runs`` printed. Every result is checked through Iceberg Java (count,
   sum(id)) before its time counts.
2. **Driver memory** (PySpark 3.5): in a fresh process each (icemor's own ``local[2]`` session),
   ``icemor.spark.write`` of a 1 M and a 10 M-row ``spark.range`` DataFrame; the child prints its
   driver Python process's peak RSS (``ru_maxrss``). Only file metadata reaches the driver, so
   the peak must not grow with the rows (target: 10 M / 1 M <= 1.2).
3. **The data source on PySpark 4.x** (when ``.venv-spark4`` exists): ``df.write.format("icemor")
   .mode("append")`` against the function form on the same DataFrame in one 4.x session (Iceberg
   Java has no Spark 4 runtime here, so the data source cannot be timed against it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _report import Report

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "bench-data" / "spark-append"
SPARK4_PYTHON = REPO_ROOT / ".venv-spark4" / "bin" / "python"
NAMESPACE = "bench_append"
ATTACH_NAME = "ice"
# df.writeTo(t).append() and icemor.spark.write; INSERT INTO … SELECT by Java and through attach
WRITERS = ("java", "icemor", "java_insert", "attach_insert")
ROWS = 10_000_000
MEMORY_ROWS = (1_000_000, 10_000_000)
# the rows of the driver-memory children: no note column (generation would dominate)
RANGE_COLUMNS = [
    "id",
    "CAST(id % 1000 AS INT) AS k1",
    "(id * 7919 % 10000) / 100 AS qty",
    "timestamp_seconds(1700000000 + id) AS ts",
]


def _expected(rows: int) -> tuple[int, int]:
    return rows, rows * (rows - 1) // 2


def _check(java: Any, name: str, rows: int) -> None:
    got = java.sql(f"SELECT count(*), sum(id) FROM {java.qualified(name)}")[0]
    if (int(got[0]), int(got[1])) != _expected(rows):
        msg = f"{name}: Java reads (count, sum(id)) = {tuple(got)}, expected {_expected(rows)}"
        raise RuntimeError(msg)


def bench_against_java(home: Path, rows: int, runs: int) -> dict[str, Any]:
    """Median seconds of Java's and icemor's append of the same cached DataFrame (one session)."""
    os.environ["ICEMOR_HOME"] = str(home)
    from bench_scan import COLUMNS_DDL, SELECT_ROWS, machine_info
    from pyspark import StorageLevel

    import icemor.spark
    from oracle import IcebergJava

    java = IcebergJava(home)
    spark = java.spark
    java.create_namespace(NAMESPACE)
    t0 = time.perf_counter()
    source = spark.sql(SELECT_ROWS.format(rows=rows)).persist(StorageLevel.DISK_ONLY)
    source.count()
    print(f"generated and cached {rows:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    view = "bench_append_source"
    source.createOrReplaceTempView(view)
    icemor.spark.attach(spark, name=ATTACH_NAME)  # Java's catalog is `icemor` in this session
    times: dict[str, list[float]] = {who: [] for who in WRITERS}
    counter = 0

    def fresh() -> str:
        nonlocal counter
        counter += 1
        name = f"{NAMESPACE}.t{counter}"
        java.sql(f"DROP TABLE IF EXISTS {java.qualified(name)} PURGE")
        java.create_table(name, COLUMNS_DDL)
        return name

    writers = {
        "java": lambda name: source.writeTo(java.qualified(name)).append(),
        "icemor": lambda name: icemor.spark.write(source, name),
        "java_insert": lambda name: spark.sql(f"INSERT INTO {java.qualified(name)} SELECT * FROM {view}"),
        "attach_insert": lambda name: spark.sql(f"INSERT INTO {ATTACH_NAME}.{name} SELECT * FROM {view}"),
    }
    for i in range(runs + 1):  # the first round is the warm-up
        shift = i % len(WRITERS)  # each writer takes each place in the order in turn
        order = WRITERS[shift:] + WRITERS[:shift]
        for who in order:
            name = fresh()
            t0 = time.perf_counter()
            writers[who](name)
            elapsed = time.perf_counter() - t0
            _check(java, name, rows)
            java.sql(f"DROP TABLE {java.qualified(name)} PURGE")
            print(f"  {'warm-up' if i == 0 else f'run {i}'}: {who} {elapsed:.1f} s", flush=True)
            if i:
                times[who].append(elapsed)
    files = {}
    for who in ("java", "icemor"):  # what each wrote, once more, for the file layout
        name = fresh()
        writers[who](name)
        files[who] = [
            (int(r[0]), int(r[1]))
            for r in java.sql(f"SELECT record_count, file_size_in_bytes FROM {java.qualified(name)}.files")
        ]
        java.sql(f"DROP TABLE {java.qualified(name)} PURGE")
    icemor.spark.detach(spark)
    source.unpersist()
    machine = machine_info(spark.version)
    java.stop()
    return {
        "rows": rows,
        **{f"{who}_s": statistics.median(times[who]) for who in WRITERS},
        **{f"{who}_runs": times[who] for who in WRITERS},
        "files": files,
        "machine": machine,
    }


def memory_child(name: str, rows: int) -> dict[str, Any]:
    """``icemor.spark.write`` of ``rows`` in this fresh process: its time and peak driver RSS."""
    import icemor
    import icemor.spark
    from icemor.engines.spark import session
    from icemor.engines.spark.table_writes import new_table_schema_of

    spark = session(master="local[2]", conf={"spark.ui.enabled": "false"})
    df = spark.range(rows).selectExpr(*RANGE_COLUMNS)
    if name in icemor.list_tables(name.split(".", maxsplit=1)[0]):
        icemor.drop_table(name, purge=True)
    icemor.create_table(name, new_table_schema_of(df))
    t0 = time.perf_counter()
    written = icemor.spark.write(df, name)
    seconds = time.perf_counter() - t0
    if written != rows:
        msg = f"wrote {written} rows, expected {rows}"
        raise RuntimeError(msg)
    return {
        "rows": rows,
        "seconds": seconds,
        "python_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def datasource_child(name: str, rows: int, runs: int) -> dict[str, Any]:
    """PySpark 4.x: ``df.write.format("icemor")`` against ``icemor.spark.write``, one session."""
    import icemor
    import icemor.spark
    from icemor.engines.spark import session
    from icemor.engines.spark.table_writes import new_table_schema_of

    spark = session(master="local[2]", conf={"spark.ui.enabled": "false"})
    fmt = "icemor"
    if hasattr(icemor.spark, "register"):
        icemor.spark.register(spark)
    else:  # before the data source lands: one that returns the same writer
        from pyspark.sql.datasource import DataSource

        class _Writes(DataSource):
            @classmethod
            def name(cls) -> str:
                return "icemor_bench_writes"

            def writer(self, schema: Any, overwrite: bool) -> Any:
                from icemor.engines.spark.table_writes import IcemorBatchWriter

                services = icemor.spark._data_source_services()
                return IcemorBatchWriter(services, dict(self.options), schema, overwrite)

        spark.dataSource.register(_Writes)
        fmt = "icemor_bench_writes"
    df = spark.range(rows).selectExpr(*RANGE_COLUMNS)
    times: dict[str, list[float]] = {"data source": [], "function": []}
    schema = new_table_schema_of(df)
    for i in range(runs + 1):
        for who in ("data source", "function") if i % 2 == 0 else ("function", "data source"):
            table = f"{name}_{i}_{who[0]}"
            if table in icemor.list_tables(name.split(".", maxsplit=1)[0]):
                icemor.drop_table(table, purge=True)
            icemor.create_table(table, schema)
            t0 = time.perf_counter()
            if who == "function":
                icemor.spark.write(df, table)
            else:
                df.write.format(fmt).mode("append").save(table)
            elapsed = time.perf_counter() - t0
            if icemor.load_table(table).scan().count() != rows:
                msg = f"{table}: not {rows} rows"
                raise RuntimeError(msg)
            icemor.drop_table(table, purge=True)
            if i:
                times[who].append(elapsed)
    return {
        "rows": rows,
        "datasource_s": statistics.median(times["data source"]),
        "function_s": statistics.median(times["function"]),
        "spark": spark.version,
    }


def _child(
    python: str, args: list[str], home: Path, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    env = dict(os.environ, ICEMOR_HOME=str(home), **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([python, __file__, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        msg = f"child {args} failed"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory-rows", default=",".join(str(r) for r in MEMORY_ROWS))
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--skip", default="", help="comma-separated: java, memory, datasource")
    parser.add_argument("--spark4-python", type=Path, default=SPARK4_PYTHON, help="PySpark 4.x's Python")
    parser.add_argument("--memory-child", nargs=2, metavar=("TABLE", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--datasource-child", nargs=3, metavar=("TABLE", "ROWS", "RUNS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))), flush=True)
        return 0
    if args.datasource_child:
        table, rows, runs = args.datasource_child
        print(json.dumps(datasource_child(table, int(rows), int(runs))), flush=True)
        return 0

    report = Report.of(__file__)
    report.context.update(rows=args.rows, runs=args.runs)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    home = args.data_dir.resolve()
    home.mkdir(parents=True, exist_ok=True)
    (home / "warehouse").mkdir(exist_ok=True)
    lines = []
    if "java" not in skip:
        r = bench_against_java(home, args.rows, args.runs)
        m = r["machine"]
        print(json.dumps({k: v for k, v in r.items() if k != "machine"}), flush=True)
        ratio = r["icemor_s"] / r["java_s"]
        lines.append(f"machine: {json.dumps(m)}")
        lines.append(
            f"append of {r['rows']:,} rows (median of {args.runs}): Iceberg Java writeTo().append() "
            f"{r['java_s']:.1f} s, icemor.spark.write {r['icemor_s']:.1f} s = {ratio:.2f}x Java "
            f"(target <= 1.0x) {'OK' if ratio <= 1.0 else 'OVER'}"
        )
        report.context["spark"] = m["spark"]
        report.add(f"append of {r['rows']:,} rows: Iceberg Java writeTo().append()", r["java_s"])
        icemor_write = f"append of {r['rows']:,} rows: icemor.spark.write"
        report.against(icemor_write, r["icemor_s"], r["java_s"], "Iceberg Java", limit=1.0)
        insert = f"INSERT INTO … SELECT of {r['rows']:,} rows"
        ratio = r["attach_insert_s"] / r["java_insert_s"]
        lines.append(
            f"{insert}: Iceberg Java {r['java_insert_s']:.1f} s, through icemor.spark.attach "
            f"{r['attach_insert_s']:.1f} s = {ratio:.2f}x Java (target <= 1.0x) "
            f"{'OK' if ratio <= 1.0 else 'OVER'}"
        )
        report.add(f"{insert}: Iceberg Java", r["java_insert_s"])
        report.against(
            f"{insert}: through attach", r["attach_insert_s"], r["java_insert_s"], "Iceberg Java", limit=1.0
        )
        for who, files in r["files"].items():
            sizes = sorted(s for _, s in files)
            rows_in = sum(n for n, _ in files)
            mib = f"{sizes[0] >> 20}-{sizes[-1] >> 20} MiB"
            lines.append(f"  {who}: {len(files)} files, {rows_in:,} rows, sizes {mib}")
            report.add(f"files written by {who}", len(files), "files", note=f"{rows_in:,} rows, sizes {mib}")
    if "memory" not in skip:
        peaks = []
        sizes = [int(s) for s in args.memory_rows.split(",")]
        for k, n in enumerate(sizes):
            name = f"{NAMESPACE}.memory_{k}"
            result = _child(sys.executable, ["--memory-child", name, str(n)], home)
            print(json.dumps(result), flush=True)
            peaks.append(result)
        ratio = peaks[-1]["python_peak_rss_mib"] / peaks[0]["python_peak_rss_mib"]
        cells = ", ".join(
            f"{p['rows']:,} rows: {p['python_peak_rss_mib']:.0f} MiB ({p['seconds']:.1f} s)" for p in peaks
        )
        lines.append(
            f"driver Python peak RSS of icemor.spark.write: {cells}; {ratio:.2f}x (target <= 1.2x) "
            f"{'OK' if ratio <= 1.2 else 'OVER'}"
        )
        for p in peaks:
            what = f"icemor.spark.write of {p['rows']:,} rows"
            report.add(f"{what}: driver Python peak RSS", p["python_peak_rss_mib"], "MiB")
            report.add(f"{what}: time", p["seconds"])
        report.add(
            "driver peak RSS, largest against smallest",
            ratio,
            "×",
            target="≤ 1.2×",
            passed=ratio <= 1.2,
        )
    if "datasource" not in skip:
        if args.spark4_python.exists():
            env_file = REPO_ROOT / ".cache" / "oracle" / "oracle.env.json"
            java_home = json.loads(env_file.read_text())["java_home"]
            r = _child(
                str(args.spark4_python),
                ["--datasource-child", f"{NAMESPACE}.ds", str(args.rows), str(args.runs)],
                home,
                {"JAVA_HOME": java_home},
            )
            print(json.dumps(r), flush=True)
            lines.append(
                f"PySpark {r['spark']}: df.write.format('icemor').mode('append') of {r['rows']:,} rows "
                f"{r['datasource_s']:.1f} s, icemor.spark.write {r['function_s']:.1f} s "
                f"= {r['datasource_s'] / r['function_s']:.2f}x"
            )
            what = f"PySpark {r['spark']}, {r['rows']:,} rows"
            report.add(f"{what}: icemor.spark.write", r["function_s"])
            report.add(
                f"{what}: df.write.format('icemor').mode('append')",
                r["datasource_s"],
                ratio=r["datasource_s"] / r["function_s"],
                versus="icemor.spark.write",
            )
        else:
            missing = args.spark4_python
            lines.append(f"data source on PySpark 4.x: skipped ({missing} does not exist: make test-spark4)")
            report.add("data source on PySpark 4.x", None, "", note=f"skipped: no {missing}")
    print("\n" + "\n".join(lines))
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
