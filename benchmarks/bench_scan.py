"""Scan benchmark: icemor against raw pyarrow, Iceberg Java on Spark and pyiceberg (see ANCHORS.md).

Run as ``.venv/bin/python benchmarks/bench_scan.py`` (``make bench``). The first run builds the workload
with Iceberg Java 1.10.2 on Spark into ``bench-data/`` (an icemor home: ``catalog.db`` + ``warehouse/``)
and writes a marker file when the last table is complete; later runs reuse it (``--rebuild`` forces).

Tables in namespace ``bench``, each with its own copy of the same 10 data files:
``base`` (no deletes), ``pos10`` (v2 position deletes), ``dv10`` (v3 deletion vectors) and ``eq10``
(v2, 5 equality delete files on ``id`` committed in one Java RowDelta); the variants delete
``id % 10 = 3``. Every timing is warm and in-process: median of ``--runs`` runs after one warm-up.
Each timed call includes loading the table (catalog lookup, metadata), as Spark's SQL does.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "bench-data"
MARKER = "BUILD_COMPLETE.json"
RESULTS = "results.json"
NAMESPACE = "bench"
TABLES = ("base", "pos10", "dv10", "eq10")
FORMAT_VERSIONS = {"base": 2, "pos10": 2, "dv10": 3, "eq10": 2}
DATA_FILES = 10
EQ_DELETE_BUCKETS = 50  # id % 50 splits the deleted ids (id % 10 = 3) into 5 equality delete files
FULL_ROWS = 10_000_000
FULL_VARIANT_ROWS, FULL_VARIANT_QTY = 9_000_000, 449_930_000.00  # ANCHORS.md, for N = 10 M
COLUMNS_DDL = "id BIGINT, k1 INT, k2 STRING, qty DOUBLE, ts TIMESTAMP, note STRING"
SELECT_ROWS = (
    "SELECT id, CAST(id % 1000 AS INT) AS k1, concat('cat', CAST(id % 97 AS STRING)) AS k2,"
    " (id * 7919 % 10000) / 100 AS qty, timestamp_seconds(1700000000 + id) AS ts,"
    " concat('comment-', sha2(CAST(id AS STRING), 256)) AS note FROM range({rows})"
)
QUERIES = ("narrow", "wide")
SPARK_SQL = {
    "narrow": "SELECT count(*), sum(qty) FROM {table}",
    "wide": "SELECT count(*), sum(id), sum(k1), max(k2), sum(qty), max(ts), max(note) FROM {table}",
}
# Exact check (qty is a whole number of cents): count, sum(id), sum of qty in cents.
EXACT_SQL = "SELECT count(*), sum(id), sum(CAST(round(qty * 100) AS BIGINT)) FROM {table}"
SPARK_QTY_TOLERANCE = 0.5  # Spark sums doubles sequentially; exactness is checked by EXACT_SQL
ENGINES = {
    "raw": "raw pyarrow (no deletes)",
    "icemor": "icemor local",
    "icemor_count": "icemor local .count()",
    "java": "Iceberg Java on Spark",
    "icemor_spark": "icemor on Spark (auto = native plans)",
    "icemor_spark_python": "icemor on Spark (Python workers)",
    "pyiceberg": "pyiceberg",
}


# ------------------------------------------------------------------------------------------ expectations


@dataclass(frozen=True)
class Expected:
    """What a table must read: row count, sum(id), sum(qty) in cents (exact integers)."""

    rows: int
    sum_id: int
    qty_cents: int

    @property
    def qty(self) -> float:
        return self.qty_cents / 100


def expected_for(rows: int) -> dict[str, Expected]:
    ids = np.arange(rows, dtype=np.int64)
    kept = ids[ids % 10 != 3]
    full = Expected(rows, int(ids.sum()), int((ids * 7919 % 10000).sum()))
    variant = Expected(len(kept), int(kept.sum()), int((kept * 7919 % 10000).sum()))
    if rows == FULL_ROWS:
        assert (variant.rows, variant.qty) == (FULL_VARIANT_ROWS, FULL_VARIANT_QTY), variant
    return {name: full if name == "base" else variant for name in TABLES}


def qty_cents(qty: pa.ChunkedArray) -> int:
    return int(pc.sum(pc.cast(pc.round(pc.multiply(qty, 100.0)), pa.int64())).as_py() or 0)


# ------------------------------------------------------------------------------------------------ build


def qualified(name: str) -> str:
    return f"icemor.{NAMESPACE}.{name}"


def clean_data_dir(home: Path) -> None:
    """Remove what a build writes, and nothing else."""
    for name in ("catalog.db", "catalog.db-journal", MARKER, RESULTS):
        (home / name).unlink(missing_ok=True)
    shutil.rmtree(home / "warehouse", ignore_errors=True)


def collision_free_partitions(spark: SparkSession) -> int:
    """Smallest shuffle partition count >= 10 at which ``DISTRIBUTE BY id % 10`` gives 10 partitions.

    Spark's hash partitioning is ``pmod(hash(expr), n)``; at n = 10 some residues may share a partition.
    """
    row = spark.sql(
        "SELECT n.id FROM range(10, 1000) n CROSS JOIN range(10) r GROUP BY n.id"
        " HAVING count(DISTINCT pmod(hash(r.id), n.id)) = 10 ORDER BY n.id LIMIT 1"
    ).collect()
    return int(row[0][0])


def file_summary(java: Any, name: str) -> list[dict[str, Any]]:
    rows = java.sql(
        f"SELECT content, file_format, count(*), sum(record_count), sum(file_size_in_bytes)"
        f" FROM {qualified(name)}.files GROUP BY content, file_format ORDER BY content"
    )
    keys = ("content", "format", "files", "records", "bytes")
    return [dict(zip(keys, (r[0], r[1], int(r[2]), int(r[3]), int(r[4])), strict=True)) for r in rows]


def build(java: Any, rows: int) -> dict[str, Any]:
    """Write the four tables with Iceberg Java; return timings and file summaries."""
    spark = java.spark
    steps: dict[str, float] = {}
    start = time.perf_counter()
    java.create_namespace(NAMESPACE)
    saved = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")}
    partitions = collision_free_partitions(spark)
    # One shuffle partition (one data file) per residue of id % 10; AQE would coalesce them.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    for name in TABLES:
        t0 = time.perf_counter()
        java.create_table(
            f"{NAMESPACE}.{name}",
            COLUMNS_DDL,
            format_version=FORMAT_VERSIONS[name],
            merge_on_read=name != "base",
            properties={"write.distribution-mode": "none"},
        )
        java.sql(
            f"INSERT INTO {qualified(name)} {SELECT_ROWS.format(rows=rows)} DISTRIBUTE BY id % 10 SORT BY id"
        )
        steps[f"insert {name}"] = time.perf_counter() - t0
        n_files = java.sql(f"SELECT count(*) FROM {qualified(name)}.data_files")[0][0]
        if n_files != DATA_FILES:
            msg = f"{name} has {n_files} data files, expected {DATA_FILES}"
            raise RuntimeError(msg)
        print(f"  {name}: inserted {rows:,} rows in {steps[f'insert {name}']:.1f} s", flush=True)
    for key, value in saved.items():
        spark.conf.set(key, value)

    for name in ("pos10", "dv10"):
        t0 = time.perf_counter()
        java.sql(f"DELETE FROM {qualified(name)} WHERE id % 10 = 3")
        steps[f"delete {name}"] = time.perf_counter() - t0
        print(f"  {name}: DELETE (merge-on-read) in {steps[f'delete {name}']:.1f} s", flush=True)

    t0 = time.perf_counter()
    ids = np.arange(rows, dtype=np.int64)
    ids = ids[ids % 10 == 3]
    eq_name = f"{NAMESPACE}.eq10"
    id_field = java.field_ids(eq_name)["id"]
    delete_files = []
    for bucket in range(3, EQ_DELETE_BUCKETS, 10):
        keys = ids[ids % EQ_DELETE_BUCKETS == bucket]
        if len(keys):
            rows_tbl = pa.table({"id": pa.array(keys, pa.int64())})
            delete_files.append(java.write_equality_delete_file(eq_name, rows_tbl, [id_field]))
    java.commit_row_delta(eq_name, delete_files=delete_files)
    steps["equality deletes eq10"] = time.perf_counter() - t0
    print(f"  eq10: {len(delete_files)} equality delete files ({len(ids):,} keys) committed", flush=True)

    files = {name: file_summary(java, name) for name in TABLES}
    return {"seconds": time.perf_counter() - start, "steps": steps, "files": files}


def verify_with_java(java: Any, expected: dict[str, Expected]) -> None:
    """Check every table through Iceberg Java, exactly, before anything is timed."""
    for name in TABLES:
        row = java.sql(EXACT_SQL.format(table=qualified(name)))[0]
        got = Expected(int(row[0]), int(row[1]), int(row[2]))
        if got != expected[name]:
            msg = f"bench.{name} reads {got} through Iceberg Java, expected {expected[name]}: use --rebuild"
            raise SystemExit(msg)
    print("Verified through Iceberg Java: " + ", ".join(f"{n} {expected[n].rows:,} rows" for n in TABLES))


# ----------------------------------------------------------------------------------------- measurement


@dataclass
class Cell:
    """One engine x query x table measurement."""

    engine: str
    query: str
    table: str
    times: list[float] = field(default_factory=list)
    median: float | None = None
    note: str | None = None  # "n/a (...)" or "error: ..." when there is no time
    rows: int | None = None
    qty: float | None = None
    wrong: str | None = None  # a result that differs from the expected one

    def text(self, reference: float | None) -> str:
        if self.median is None:
            return self.note or ""
        ratio = f" ({self.median / reference:.2f}×)" if reference else ""
        return f"{self.median:.3f}{ratio}{' WRONG' if self.wrong else ''}"


def measure(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """One warm-up call, then ``runs`` timed calls; returns the times and the last result."""
    gc.collect()
    result = fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def one_line(exc: BaseException, limit: int = 90) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Bench:
    def __init__(self, runs: int, expected: dict[str, Expected]) -> None:
        self.runs = runs
        self.expected = expected
        self.cells: list[Cell] = []

    def run(
        self,
        engine: str,
        query: str,
        table: str,
        fn: Callable[[], Any],
        facts: Callable[[Any], tuple[int, int | None, float | int | None]],
        *,
        exact_qty: bool,
        on_error: Callable[[BaseException], str] | None = None,
    ) -> Cell:
        """Time ``fn``; ``facts`` turns its result into (rows, sum_id or None, qty cents or qty sum)."""
        cell = Cell(engine, query, table)
        self.cells.append(cell)
        label = f"{ENGINES[engine]} {query} {table}"
        try:
            cell.times, result = measure(fn, self.runs)
        except Exception as exc:
            cell.note = on_error(exc) if on_error else f"error: {one_line(exc)}"
            print(f"  {label}: {cell.note}", flush=True)
            return cell
        cell.median = statistics.median(cell.times)
        rows, sum_id, qty = facts(result)
        want = self.expected[table]
        cell.rows = rows
        cell.qty = None if qty is None else (qty / 100 if exact_qty else float(qty))
        problems = []
        if rows != want.rows:
            problems.append(f"{rows:,} rows, expected {want.rows:,}")
        if sum_id is not None and sum_id != want.sum_id:
            problems.append(f"sum(id) {sum_id}, expected {want.sum_id}")
        if qty is not None:
            bad = qty != want.qty_cents if exact_qty else abs(float(qty) - want.qty) > SPARK_QTY_TOLERANCE
            if bad:
                problems.append(f"sum(qty) {cell.qty!r}, expected {want.qty:.2f}")
        cell.wrong = "; ".join(problems) or None
        status = f"  WRONG: {cell.wrong}" if cell.wrong else ""
        print(f"  {label}: {cell.median:.3f} s {[round(t, 3) for t in cell.times]}{status}", flush=True)
        return cell

    def na(self, engine: str, query: str, table: str, note: str) -> None:
        self.cells.append(Cell(engine, query, table, note=note))

    def get(self, engine: str, query: str, table: str) -> Cell | None:
        for cell in self.cells:
            if (cell.engine, cell.query, cell.table) == (engine, query, table):
                return cell
        return None

    def median(self, engine: str, query: str, table: str) -> float | None:
        cell = self.get(engine, query, table)
        return None if cell is None else cell.median


def arrow_facts(tbl: pa.Table) -> tuple[int, int | None, int]:
    sum_id = int(pc.sum(tbl["id"]).as_py() or 0) if "id" in tbl.column_names else None
    return tbl.num_rows, sum_id, qty_cents(tbl["qty"])


def narrow_facts(result: tuple[pa.Table, int, float]) -> tuple[int, None, int]:
    tbl, _, _ = result
    return tbl.num_rows, None, qty_cents(tbl["qty"])


def spark_facts(query: str) -> Callable[[Any], tuple[int, int | None, float]]:
    def facts(row: Any) -> tuple[int, int | None, float]:
        if query == "narrow":
            return int(row[0]), None, float(row[1] or 0)
        return int(row[0]), int(row[1] or 0), float(row[4] or 0)

    return facts


def data_file_paths(metadata_location: str) -> list[str]:
    from pyiceberg.table import StaticTable

    from oracle import local_path

    scan = StaticTable.from_metadata(metadata_location).scan()
    return [str(local_path(task.file.file_path)) for task in scan.plan_files()]


def bench_local(bench: Bench, metadata: dict[str, str], *, skip_pyiceberg: bool) -> None:
    import icemor

    print("Local engines:", flush=True)
    files = data_file_paths(metadata["base"])

    def raw_narrow() -> tuple[pa.Table, int, float]:
        tbl = pq.read_table(files, columns=["qty"])
        return tbl, tbl.num_rows, pc.sum(tbl["qty"]).as_py()

    bench.run("raw", "narrow", "base", raw_narrow, narrow_facts, exact_qty=True)
    bench.run("raw", "wide", "base", lambda: pq.read_table(files), arrow_facts, exact_qty=True)

    for name in TABLES:
        ident = f"{NAMESPACE}.{name}"

        def icemor_narrow(ident: str = ident) -> tuple[pa.Table, int, float]:
            tbl = icemor.load_table(ident).scan(selected_fields=("qty",)).to_arrow()
            return tbl, tbl.num_rows, pc.sum(tbl["qty"]).as_py()

        def icemor_count(ident: str = ident) -> int:
            return int(icemor.load_table(ident).scan().count())

        def icemor_wide(ident: str = ident) -> pa.Table:
            return icemor.load_table(ident).scan().to_arrow()

        bench.run("icemor", "narrow", name, icemor_narrow, narrow_facts, exact_qty=True)
        bench.run("icemor_count", "narrow", name, icemor_count, lambda n: (n, None, None), exact_qty=True)
        bench.run("icemor", "wide", name, icemor_wide, arrow_facts, exact_qty=True)

    if skip_pyiceberg:
        return
    from pyiceberg.table import StaticTable

    def pyiceberg_error(exc: BaseException) -> str:
        if "equality" in str(exc).lower():
            return "error: equality deletes unsupported"
        return f"error: {one_line(exc)}"

    for name in TABLES:
        location = metadata[name]

        def pi_narrow(location: str = location) -> tuple[pa.Table, int, float]:
            tbl = StaticTable.from_metadata(location).scan(selected_fields=("qty",)).to_arrow()
            return tbl, tbl.num_rows, pc.sum(tbl["qty"]).as_py()

        def pi_wide(location: str = location) -> pa.Table:
            return StaticTable.from_metadata(location).scan().to_arrow()

        bench.run(
            "pyiceberg", "narrow", name, pi_narrow, narrow_facts, exact_qty=True, on_error=pyiceberg_error
        )
        bench.run("pyiceberg", "wide", name, pi_wide, arrow_facts, exact_qty=True, on_error=pyiceberg_error)


def bench_spark(bench: Bench, spark: SparkSession) -> None:

    print("Spark engines:", flush=True)
    for name in TABLES:
        for query in QUERIES:
            sql = SPARK_SQL[query].format(table=qualified(name))

            def java_query(sql: str = sql) -> Any:
                return spark.sql(sql).collect()[0]

            bench.run("java", query, name, java_query, spark_facts(query), exact_qty=False)

    reason = None
    try:
        module = importlib.import_module("icemor.engines.spark")
        if not hasattr(module, "scan_to_dataframe"):
            reason = "icemor.engines.spark has no scan_to_dataframe"
    except Exception as exc:
        reason = one_line(exc, 60)
    for engine, strategy in (("icemor_spark", "auto"), ("icemor_spark_python", "python")):
        _icemor_on_spark(bench, spark, engine, strategy, reason)


def _icemor_on_spark(
    bench: Bench, spark: SparkSession, engine: str, strategy: str, reason: str | None
) -> None:
    import icemor

    for name in TABLES:
        for query in QUERIES:
            if reason is not None:
                bench.na(engine, query, name, f"n/a ({reason})")
                continue
            fields = ("qty",) if query == "narrow" else ("*",)
            view = f"icemor_bench_{name}_{query}_{strategy}"
            sql = SPARK_SQL[query].format(table=view)

            def run(
                name: str = name, fields: tuple[str, ...] = fields, view: str = view, sql: str = sql
            ) -> Any:
                table = icemor.load_table(f"{NAMESPACE}.{name}")
                df = table.to_spark(spark, strategy=strategy, selected_fields=fields)
                df.createOrReplaceTempView(view)
                return spark.sql(sql).collect()[0]

            cell = bench.run(
                engine,
                query,
                name,
                run,
                spark_facts(query),
                exact_qty=False,
                on_error=lambda exc: f"n/a ({one_line(exc, 60)})",
            )
            if cell.median is not None and query == "wide" and not cell.wrong:
                # the timed query sums qty as doubles; check the rows exactly once, untimed
                row = spark.sql(EXACT_SQL.format(table=view)).collect()[0]
                got = Expected(int(row[0]), int(row[1]), int(row[2]))
                if got != bench.expected[name]:
                    cell.wrong = f"exact check {got}, expected {bench.expected[name]}"
                    print(f"  {ENGINES[engine]} {name}: WRONG {cell.wrong}", flush=True)


class CpuMonitor:
    """CPU share the rest of the machine took while we measured (this process and its children excluded).

    Other processes (say, a test suite next door) make timings on a small machine unreliable.
    """

    def __init__(self) -> None:
        self.start = (time.perf_counter(), _busy_ticks(), _own_ticks())

    def others_share(self) -> float | None:
        wall, busy, own = self.start
        elapsed = time.perf_counter() - wall
        if elapsed <= 0 or busy is None:
            return None
        end_busy = _busy_ticks()
        assert end_busy is not None
        others = (end_busy - busy) - (_own_ticks() - own)
        total = elapsed * os.sysconf("SC_CLK_TCK") * len(os.sched_getaffinity(0))
        return max(0.0, others / total)


def _busy_ticks() -> int | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return user + nice + system + irq + softirq + steal


def _own_ticks() -> int:
    """CPU ticks of this process and all its descendants (the Spark JVM and its Python workers)."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, utime + stime + cutime + cstime)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            rest = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stats[int(entry.name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    ours, total = {os.getpid()}, 0
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in stats.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                changed = True
    for pid in ours:
        total += stats.get(pid, (0, 0))[1]
    return total


# ---------------------------------------------------------------------------------------------- report


@dataclass
class Target:
    label: str
    measured: float | None
    limit: float
    unit: str  # "×" or " s"
    status: str = field(init=False)

    def __post_init__(self) -> None:
        self.status = "n/a" if self.measured is None else ("PASS" if self.measured <= self.limit else "MISS")


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def targets(bench: Bench) -> list[Target]:
    raw_wide = bench.median("raw", "wide", "base")
    out = [
        Target(
            f"all columns → Arrow, {name} ≤ {limit}× raw (base)",
            ratio(bench.median("icemor", "wide", name), raw_wide),
            limit,
            "×",
        )
        for name, limit in (("pos10", 1.2), ("dv10", 1.2), ("eq10", 1.3))
    ]
    out.append(Target("narrow on eq10 ≤ 0.3 s", bench.median("icemor", "narrow", "eq10"), 0.3, " s"))
    for name in TABLES:
        limit = 1.0 if name == "eq10" else 1.5
        for query in QUERIES:
            measured = ratio(bench.median("icemor_spark", query, name), bench.median("java", query, name))
            out.append(
                Target(f"icemor on Spark ≤ {limit}× Iceberg Java, {query} {name}", measured, limit, "×")
            )
    return out


def machine_info(spark_version: str | None) -> dict[str, Any]:
    import pyiceberg
    import pyspark

    import icemor

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), ""
    )
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    mem_kb = next((int(ln.split()[1]) for ln in meminfo.splitlines() if ln.startswith("MemTotal:")), 0)
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kb / 2**20, 1),
        "cpu": model or platform.processor(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "pyiceberg": pyiceberg.__version__,
        "pyspark": pyspark.__version__,
        "spark": spark_version,
        "iceberg_java": "1.10.2",
        "icemor": f"{icemor.__version__} (git {commit})",
    }


def render(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def report(bench: Bench, machine: dict[str, Any], build_info: dict[str, Any], rows: int) -> list[Target]:
    m = machine
    print()
    print(
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, Spark {m['spark'] or 'not started'}, "
        f"Iceberg Java {m['iceberg_java']}, icemor {m['icemor']}"
    )
    print(f"Data: {rows:,} rows, {DATA_FILES} data files per table; built in {build_info['seconds']:.0f} s")
    print(f"Seconds, warm, median of {bench.runs} after 1 warm-up; (×) = ratio to the raw scan of base.")
    shares = m.get("cpu_share_of_other_processes", {})
    print(
        "CPU taken by other processes while measuring: "
        + ", ".join(f"{phase} {'?' if v is None else f'{v:.0%}'}" for phase, v in shares.items())
    )
    if any(v is not None and v > 0.1 for v in shares.values()):
        print("WARNING: the machine was busy with other work; these timings are unreliable.")
    for query, title in (
        ("narrow", "count(*), sum(qty)"),
        ("wide", "all columns (Spark: aggregates over all)"),
    ):
        reference = bench.median("raw", query, "base")
        table = [[f"{query}: {title}", *TABLES]]
        for engine, label in ENGINES.items():
            if engine == "icemor_count" and query != "narrow":
                continue
            cells = [bench.get(engine, query, name) for name in TABLES]
            if all(c is None for c in cells):
                continue
            table.append([label, *("" if c is None else c.text(reference) for c in cells)])
        print()
        print(render(table))
    found = targets(bench)
    print()
    lines = [["target (ANCHORS.md)", "measured", "limit", ""]]
    for t in found:
        value = "n/a" if t.measured is None else f"{t.measured:.2f}{t.unit}"
        lines.append([t.label, value, f"{t.limit}{t.unit}", t.status])
    print(render(lines))
    return found


# ------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=FULL_ROWS, help="rows per table (default 10,000,000)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="icemor home of the tables")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the tables even if present")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per measurement (after 1 warm-up)")
    parser.add_argument("--skip-spark", action="store_true", help="no Spark engines (and no Java check)")
    parser.add_argument("--skip-pyiceberg", action="store_true", help="no pyiceberg column")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from oracle import IcebergJava

    # every icemor.load_table() opens the catalog, and pyiceberg warns each time about Java's V0 schema
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    home = args.data_dir.resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["ICEMOR_HOME"] = str(home)  # read by icemor.load_catalog() at every call
    marker_path = home / MARKER
    marker = json.loads(marker_path.read_text()) if marker_path.is_file() else None
    if marker is not None and marker["rows"] != args.rows and not args.rebuild:
        msg = f"{home} holds {marker['rows']:,} rows, not {args.rows:,}: pass --rebuild or another --data-dir"
        raise SystemExit(msg)
    need_build = args.rebuild or marker is None
    expected = expected_for(args.rows)

    java = None
    if need_build:
        clean_data_dir(home)
    if need_build or not args.skip_spark:
        java = IcebergJava(home)
    if need_build:
        assert java is not None
        print(f"Building {args.rows:,}-row tables in {home} with Iceberg Java ...", flush=True)
        build_info = build(java, args.rows)
        verify_with_java(java, expected)
        marker = {"rows": args.rows, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "build": build_info}
        marker_path.write_text(json.dumps(marker, indent=2))
        print(f"Built in {build_info['seconds']:.0f} s", flush=True)
    elif java is not None:
        verify_with_java(java, expected)
    else:
        print(f"Reusing {home} (verified through Iceberg Java when built; --skip-spark skips the re-check)")
    assert marker is not None

    import icemor

    metadata = {name: icemor.load_table(f"{NAMESPACE}.{name}").pyiceberg.metadata_location for name in TABLES}
    bench = Bench(args.runs, expected)
    contention: dict[str, float | None] = {}
    monitor = CpuMonitor()
    bench_local(bench, metadata, skip_pyiceberg=args.skip_pyiceberg)
    contention["local"] = monitor.others_share()
    if java is not None and not args.skip_spark:
        monitor = CpuMonitor()
        bench_spark(bench, java.spark)
        contention["spark"] = monitor.others_share()

    machine = machine_info(java.spark.version if java is not None else None)
    machine["cpu_share_of_other_processes"] = contention
    found = report(bench, machine, marker["build"], args.rows)
    wrong = [c for c in bench.cells if c.wrong and c.engine != "pyiceberg"]
    failed = [c for c in bench.cells if c.engine in ("icemor", "icemor_count") and c.note]
    results = {
        "machine": machine,
        "config": {"rows": args.rows, "runs": args.runs, "warmup": 1, "data_dir": str(home)},
        "build": marker,
        "expected": {name: asdict(e) for name, e in expected.items()},
        "metadata_locations": metadata,
        "cells": [asdict(c) for c in bench.cells],
        "targets": [asdict(t) for t in found],
    }
    (home / RESULTS).write_text(json.dumps(results, indent=2))
    print(f"\nWrote {home / RESULTS}")
    if wrong or failed:
        print("\nWRONG RESULTS / FAILURES:")
        for c in wrong + failed:
            print(f"  {ENGINES[c.engine]} {c.query} {c.table}: {c.wrong or c.note}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
