"""Scan benchmark: icemor against raw pyarrow, Iceberg Java on Spark and pyiceberg (docs/benchmarks.md).

Run as ``.venv/bin/python benchmarks/bench_scan.py`` (``make bench``). The first run builds the workload
with Iceberg Java 1.10.2 on Spark into ``bench-data/`` (an icemor home: ``catalog.db`` + ``warehouse/``;
git-ignored) and writes a marker file when the last table is complete; later runs reuse it (``--rebuild``
forces). The marker records ``LAYOUT_VERSION``: a cache built with another layout is rebuilt, never reused.

The workload (layout of 2026-11-22, ``LAYOUT_VERSION``). Tables in namespace ``bench``, each with its own
copy of the same 10 data files, each file an id range (``repartitionByRange(10, id)
.sortWithinPartitions(id)``, written once and appended to every table, so the files match row for row):
``base`` (no deletes), ``pos10`` (v2, merge-on-read ``DELETE WHERE id % 10 = 3``: one position delete
file per data file), ``dv10`` (the same on v3: one deletion vector per data file), ``eq10`` (v2, the same
rows deleted by 5 equality delete files on ``id`` committed in one Java RowDelta) and ``eq10s`` (the same
by 5 equality delete files on the string ``note``). Every delete hits 10% of every data file; the build
checks that through Iceberg Java's own scan planning.

Every timing is warm and in-process: median of ``--runs`` runs after one warm-up, and of at least
``QUICK_RUNS`` for a cell under ``QUICK_SECONDS`` (thread scheduling moves those). A cell whose warm-up
takes longer than ``--slow`` seconds reports that one cold call instead (marked ``*``), and every call
is stopped after ``--cell-timeout`` seconds. Cells are timed in alternation (``Bench.run_group``, one
call per cell per round): the local narrow cells, then the local wide ones, then on Spark Iceberg Java
and both icemor strategies per table and query. So a ratio and its reference sample the same minutes
of a VM that has slow phases. Every call's result is checked, untimed. Each timed call includes
loading the table (catalog lookup, metadata), as Spark's SQL does. ``--variants`` and ``--engines``
select what is measured (the build always makes every table). The local engines are timed with no
JVM on the machine: the build runs in a child process, and Spark (for the layout re-check and the
Spark engines) starts after them.

Cold reads: the first narrow read of eq10/eq10s in a new Python process decodes the
delete files and probes every row (later reads apply the cached verdict). ``--cold-runs`` new
processes per cell (default 5), icemor and the raw scan of ``qty`` plus the key column in
alternation; each imports its modules and opens the catalog before the clock starts, then times
its first call and its later (warm) ones. Reported as medians, with paired ratios against the
raw scan's first call and its warm calls.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import KW_ONLY, asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _report
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "bench-data"
MARKER = "BUILD_COMPLETE.json"
RESULTS = "results.json"
NAMESPACE = "bench"
QUICK_SECONDS = 0.25
QUICK_RUNS = 15
TABLES = ("base", "pos10", "dv10", "eq10", "eq10s")
FORMAT_VERSIONS = {"base": 2, "pos10": 2, "dv10": 3, "eq10": 2, "eq10s": 2}
EQ_COLUMNS = {"eq10": "id", "eq10s": "note"}  # the equality-delete variants and their key column
# Bump when the workload changes: a cache with another layout is rebuilt, never silently reused.
# (The first layout, DISTRIBUTE BY id % 10, had no version and put every deleted row in one file.)
LAYOUT_VERSION = "2026-11-22 range(10, id) + eq10s"
DATA_FILES = 10
EQ_DELETE_BUCKETS = 50  # id % 50 splits the deleted ids (id % 10 = 3) into 5 equality delete files
FULL_ROWS = 10_000_000
FULL_VARIANT_ROWS, FULL_VARIANT_QTY = 9_000_000, 449_930_000.00  # the expected result, for N = 10 M
COLUMNS_DDL = "id BIGINT, k1 INT, k2 STRING, qty DOUBLE, ts TIMESTAMP, note STRING"
# The workload defines note as 'comment-' || sha2(id, 256); Spark's sha2 takes BINARY and refuses a BIGINT
# (DATATYPE_MISMATCH), so the id goes through its decimal string: sha2(CAST(id AS STRING), 256), the
# lowercase hex SHA-256 of str(id) (note_of() below computes the same in Python for the eq10s keys).
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
    "raw_mmap": "raw pyarrow, memory-mapped",
    "icemor": "icemor local",
    "icemor_count": "icemor local .count()",
    "java": "Iceberg Java on Spark",
    "icemor_spark": "icemor on Spark (auto)",
    "icemor_spark_python": "icemor on Spark (Python workers)",
    "icemor_attach": "spark.sql through icemor.spark.attach",
    "pyiceberg": "pyiceberg",
}
ATTACH_NAME = "ice"  # the oracle's session names Iceberg Java's catalog `icemor`
ATTACH_VS_READ = 1.1  # spark.sql through attach against icemor.spark.read (auto), issue #47


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


def note_of(ids: np.ndarray) -> pa.Array:
    """The ``note`` of each id, as Spark computes it: ``'comment-' || sha2(CAST(id AS STRING), 256)``."""
    return pa.array(
        [f"comment-{hashlib.sha256(str(i).encode()).hexdigest()}" for i in ids.tolist()], pa.string()
    )


def file_summary(java: Any, name: str) -> list[dict[str, Any]]:
    rows = java.sql(
        f"SELECT content, file_format, count(*), sum(record_count), sum(file_size_in_bytes)"
        f" FROM {qualified(name)}.files GROUP BY content, file_format ORDER BY content"
    )
    keys = ("content", "format", "files", "records", "bytes")
    return [dict(zip(keys, (r[0], r[1], int(r[2]), int(r[3]), int(r[4])), strict=True)) for r in rows]


def build(java: Any, rows: int) -> dict[str, Any]:
    """Write every table with Iceberg Java; return timings and file summaries."""
    from pyspark import StorageLevel

    spark = java.spark
    steps: dict[str, float] = {}
    start = time.perf_counter()
    java.create_namespace(NAMESPACE)
    saved = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # keep the 10 range partitions as they are
    # The range bounds come from a random sample, so every write of repartitionByRange would cut the ids
    # a little differently: compute the partitions once (on disk) and append those to every table.
    t0 = time.perf_counter()
    source = (
        spark.sql(SELECT_ROWS.format(rows=rows))
        .repartitionByRange(DATA_FILES, "id")
        .sortWithinPartitions("id")
        .persist(StorageLevel.DISK_ONLY)
    )
    source.count()
    steps["generate"] = time.perf_counter() - t0
    print(f"  generated {rows:,} rows in {DATA_FILES} id ranges in {steps['generate']:.1f} s", flush=True)
    for name in TABLES:
        t0 = time.perf_counter()
        java.create_table(
            f"{NAMESPACE}.{name}",
            COLUMNS_DDL,
            format_version=FORMAT_VERSIONS[name],
            merge_on_read=name != "base",
            properties={"write.distribution-mode": "none"},  # one file per range partition, in order
        )
        source.writeTo(qualified(name)).append()
        steps[f"insert {name}"] = time.perf_counter() - t0
        print(f"  {name}: inserted {rows:,} rows in {steps[f'insert {name}']:.1f} s", flush=True)
    source.unpersist()
    spark.conf.set("spark.sql.adaptive.enabled", saved)

    for name in ("pos10", "dv10"):
        t0 = time.perf_counter()
        java.sql(f"DELETE FROM {qualified(name)} WHERE id % 10 = 3")
        steps[f"delete {name}"] = time.perf_counter() - t0
        print(f"  {name}: DELETE (merge-on-read) in {steps[f'delete {name}']:.1f} s", flush=True)

    ids = np.arange(rows, dtype=np.int64)
    ids = ids[ids % 10 == 3]
    for name, column in EQ_COLUMNS.items():
        t0 = time.perf_counter()
        ident = f"{NAMESPACE}.{name}"
        field_id = java.field_ids(ident)[column]
        delete_files = []
        for bucket in range(3, EQ_DELETE_BUCKETS, 10):
            keys = ids[ids % EQ_DELETE_BUCKETS == bucket]
            if len(keys):
                values = pa.array(keys, pa.int64()) if column == "id" else note_of(keys)
                rows_tbl = pa.table({column: values})
                delete_files.append(java.write_equality_delete_file(ident, rows_tbl, [field_id]))
        java.commit_row_delta(ident, delete_files=delete_files)
        steps[f"equality deletes {name}"] = time.perf_counter() - t0
        print(
            f"  {name}: {len(delete_files)} equality delete files on {column} ({len(ids):,} keys)"
            f" committed in {steps[f'equality deletes {name}']:.1f} s",
            flush=True,
        )

    files = {name: file_summary(java, name) for name in TABLES}
    return {"seconds": time.perf_counter() - start, "steps": steps, "files": files}


def deleted_in_range(lower: int, upper: int) -> int:
    """How many ids in [lower, upper] have id % 10 = 3."""

    def upto(n: int) -> int:  # ids in [0, n) with id % 10 = 3
        return (n + 6) // 10

    return upto(upper + 1) - upto(lower)


def check_layout(java: Any, names: tuple[str, ...], rows: int) -> dict[str, list[dict[str, Any]]]:
    """Check, through Iceberg Java's own scan planning, that the deletes hit every data file.

    Every table must plan the same 10 data files, contiguous id ranges covering 0..rows-1; in every
    variant every data file carries deletes: one position delete file (pos10) or deletion vector (dv10)
    removing exactly its ids with id % 10 = 3, or the 5 equality delete files (eq10, eq10s).
    """
    layout: dict[str, list[dict[str, Any]]] = {}
    reference: list[tuple[int, int, int]] | None = None
    problems: list[str] = []
    for name in names:
        bounds = {
            str(r[0]): (int(r[1]), int(r[2]), int(r[3]))
            for r in java.sql(
                f"SELECT file_path, record_count, readable_metrics.id.lower_bound,"
                f" readable_metrics.id.upper_bound FROM {qualified(name)}.data_files"
            )
        }
        tasks = java.java_table(f"{NAMESPACE}.{name}").newScan().planFiles()
        planned: list[dict[str, Any]] = []
        try:
            iterator = tasks.iterator()
            while iterator.hasNext():
                task = iterator.next()
                path = str(task.file().location())
                records, lower, upper = bounds[path]
                deletes = [
                    {"content": str(d.content()), "format": str(d.format()), "records": int(d.recordCount())}
                    for d in task.deletes()
                ]
                planned.append(
                    {"path": path, "records": records, "lower": lower, "upper": upper, "deletes": deletes}
                )
        finally:
            tasks.close()
        planned.sort(key=lambda f: f["lower"])
        layout[name] = planned
        ranges = [(f["lower"], f["upper"], f["records"]) for f in planned]
        if len(planned) != DATA_FILES:
            problems.append(f"{name}: {len(planned)} data files planned, expected {DATA_FILES}")
        edges = [lo for lo, _, _ in ranges[1:]] != [hi + 1 for _, hi, _ in ranges[:-1]]
        if not ranges or ranges[0][0] != 0 or ranges[-1][1] != rows - 1 or edges:
            problems.append(f"{name}: data files are not contiguous id ranges over 0..{rows - 1}: {ranges}")
        if any(hi - lo + 1 != n for lo, hi, n in ranges):
            problems.append(f"{name}: a data file holds other rows than its id range: {ranges}")
        if reference is None:
            reference = ranges
        elif ranges != reference:
            problems.append(f"{name}: id ranges differ from {names[0]}'s")
        for f in planned:
            found = sorted({(d["content"], d["format"]) for d in f["deletes"]})
            if name == "base":
                want_files, want_kinds = 0, []
            elif name in EQ_COLUMNS:
                want_files, want_kinds = 5, [("EQUALITY_DELETES", "PARQUET")]
            else:
                fmt = "PUFFIN" if FORMAT_VERSIONS[name] >= 3 else "PARQUET"
                want_files, want_kinds = 1, [("POSITION_DELETES", fmt)]
            if len(f["deletes"]) != want_files or found != want_kinds:
                problems.append(f"{name}: {f['path']} plans deletes {f['deletes']}")
            elif name in ("pos10", "dv10"):
                want = deleted_in_range(f["lower"], f["upper"])
                if f["deletes"][0]["records"] != want:
                    problems.append(
                        f"{name}: {f['path']} has {f['deletes'][0]['records']} deletes, want {want}"
                    )
        per_file = sorted({len(f["deletes"]) for f in planned})
        kinds = sorted(
            {
                f"{d['content'].split('_')[0].lower()}/{d['format'].lower()}"
                for f in planned
                for d in f["deletes"]
            }
        )
        sizes = [n for _, _, n in ranges]
        print(
            f"  {name}: {len(planned)} data files, id ranges of {min(sizes, default=0):,}"
            f"..{max(sizes, default=0):,} rows; delete files per data file: {per_file} {' '.join(kinds)}",
            flush=True,
        )
    if problems:
        raise SystemExit("Layout check failed (use --rebuild):\n  " + "\n  ".join(problems))
    assert reference is not None
    print("  id ranges: " + ", ".join(f"{lo:,}-{hi:,}" for lo, hi, _ in reference), flush=True)
    return layout


def verify_with_java(java: Any, expected: dict[str, Expected], names: tuple[str, ...]) -> None:
    """Check every table through Iceberg Java, exactly, before anything is timed."""
    for name in names:
        row = java.sql(EXACT_SQL.format(table=qualified(name)))[0]
        got = Expected(int(row[0]), int(row[1]), int(row[2]))
        if got != expected[name]:
            msg = f"bench.{name} reads {got} through Iceberg Java, expected {expected[name]}: use --rebuild"
            raise SystemExit(msg)
    print("Verified through Iceberg Java: " + ", ".join(f"{n} {expected[n].rows:,} rows" for n in names))


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
    cold_only: bool = False  # the warm-up exceeded --slow: its time is the only one
    first: float | None = None  # the warm-up call: the first of this query on this table in the process

    def text(self, reference: float | None) -> str:
        if self.median is None:
            return self.note or ""
        ratio = f" ({self.median / reference:.2f}×)" if reference else ""
        star = "*" if self.cold_only else ""
        unchecked = " (exact check timed out)" if self.note else ""
        return f"{self.median:.3f}{star}{ratio}{' WRONG' if self.wrong else ''}{unchecked}"


@dataclass(frozen=True)
class Spec:
    """What one cell times, and how its result is checked (see ``Bench.run``)."""

    engine: str
    query: str
    table: str
    fn: Callable[[], Any]
    facts: Callable[[Any], tuple[int, int | None, float | int | None]]
    _: KW_ONLY
    exact_qty: bool
    on_error: Callable[[BaseException], str] | None = None


class CellTimeoutError(Exception):
    """A call ran past --cell-timeout."""


@contextmanager
def time_limit(seconds: float | None, spark: SparkSession | None) -> Iterator[list[bool]]:
    """Stop the enclosed call after ``seconds``.

    Local calls get an exception raised into them (SIGALRM; main thread only). Spark calls are not
    interrupted: a watchdog thread cancels their jobs, and keeps cancelling any job started later
    (the call may have been planning at the deadline) until the pending ``collect()`` fails. (py4j
    must not be called from a signal handler: with PySpark's pinned threads the handler would reuse
    the main thread's busy connection and break it.)
    """
    fired: list[bool] = []
    if not seconds:
        yield fired
        return
    if spark is not None:
        done = threading.Event()

        def watchdog() -> None:
            if done.wait(seconds):
                return
            fired.append(True)
            while True:
                spark.sparkContext.cancelAllJobs()
                if done.wait(0.5):
                    return

        thread = threading.Thread(target=watchdog, name="bench-cell-timeout", daemon=True)
        thread.start()
        try:
            yield fired
        finally:
            done.set()
            thread.join()
        return

    def on_alarm(_signum: int, _frame: Any) -> None:
        fired.append(True)
        raise CellTimeoutError

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Limits:
    """How long a cell may take: see --slow and --cell-timeout."""

    slow: float | None
    timeout: float | None


def call_within(fn: Callable[[], Any], limits: Limits, spark: SparkSession | None) -> Any:
    with time_limit(limits.timeout, spark) as fired:
        try:
            return fn()
        except Exception as exc:
            if fired:
                raise CellTimeoutError from exc
            raise


def timed_call(fn: Callable[[], Any], limits: Limits, spark: SparkSession | None) -> tuple[Any, float]:
    # whatever the previous call returned is freed by then: otherwise every call of a wide scan
    # allocates 1+ GB of fresh pages beside it, and times measure the allocator, not the scan
    gc.collect()
    t0 = time.perf_counter()
    result = call_within(fn, limits, spark)
    return result, time.perf_counter() - t0


def wants_more(times: list[float], runs: int) -> bool:
    # a quick cell (tens of ms) moves with thread scheduling: it gets more runs for its median
    return len(times) < runs or (len(times) < QUICK_RUNS and statistics.median(times) < QUICK_SECONDS)


def one_line(exc: BaseException, limit: int = 90) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Bench:
    def __init__(
        self,
        runs: int,
        expected: dict[str, Expected],
        *,
        variants: tuple[str, ...],
        engines: tuple[str, ...],
        limits: Limits,
    ) -> None:
        self.runs = runs
        self.expected = expected
        self.variants = variants
        self.engines = engines
        self.limits = limits
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
        spark: SparkSession | None = None,
    ) -> Cell:
        """Time ``fn``; ``facts`` turns its result into (rows, sum_id or None, qty cents or qty sum)."""
        spec = Spec(engine, query, table, fn, facts, exact_qty=exact_qty, on_error=on_error)
        return self.run_group([spec], spark=spark)[0]

    def run_group(self, specs: list[Spec], *, spark: SparkSession | None = None) -> list[Cell]:
        """Time the cells in alternation: one warm-up each, then rounds of one call per cell.

        A ratio divides two cells, and this VM has slow phases lasting tens of seconds; timed one
        after the other, a cell caught in one is off by a third against its reference. In rounds,
        both sides of every ratio sample the same minutes. Each round starts one cell further on,
        so no cell always follows the same one. Every call's result is checked, untimed.
        """
        cells = [Cell(spec.engine, spec.query, spec.table) for spec in specs]
        self.cells.extend(cells)
        active: list[tuple[Cell, Spec]] = []
        for cell, spec in zip(cells, specs, strict=True):
            if self._call(cell, spec, spark, warm_up=True):
                if cell.cold_only:
                    self._report(cell)
                else:
                    active.append((cell, spec))
        turn = 0
        while active:
            start = turn % len(active)
            for cell, spec in active[start:] + active[:start]:
                if not self._call(cell, spec, spark, warm_up=False):
                    cell.times = []
            turn += 1
            for cell, _ in active:
                if not cell.times or not wants_more(cell.times, self.runs):
                    self._report(cell)
            active = [(c, s) for c, s in active if c.times and wants_more(c.times, self.runs)]
        return cells

    def _call(self, cell: Cell, spec: Spec, spark: SparkSession | None, *, warm_up: bool) -> bool:
        """One call of the cell, its result checked; False (with ``cell.note``) if it failed."""
        label = f"{ENGINES[spec.engine]} {spec.query} {spec.table}"
        try:
            result, seconds = timed_call(spec.fn, self.limits, spark)
        except CellTimeoutError:
            cell.note = f"timeout (> {self.limits.timeout:g} s)"
            print(f"  {label}: {cell.note}", flush=True)
            return False
        except Exception as exc:
            cell.note = spec.on_error(exc) if spec.on_error else f"error: {one_line(exc)}"
            print(f"  {label}: {cell.note}", flush=True)
            return False
        if warm_up:
            cell.first = seconds
            if self.limits.slow is not None and seconds > self.limits.slow:
                cell.cold_only = True
                cell.times = [seconds]
        else:
            cell.times.append(seconds)
        self._check(cell, spec, result)
        return True

    def _check(self, cell: Cell, spec: Spec, result: Any) -> None:
        rows, sum_id, qty = spec.facts(result)
        want = self.expected[spec.table]
        cell.rows = rows
        cell.qty = None if qty is None else (qty / 100 if spec.exact_qty else float(qty))
        problems = []
        if rows != want.rows:
            problems.append(f"{rows:,} rows, expected {want.rows:,}")
        if sum_id is not None and sum_id != want.sum_id:
            problems.append(f"sum(id) {sum_id}, expected {want.sum_id}")
        if qty is not None:
            bad = (
                qty != want.qty_cents if spec.exact_qty else abs(float(qty) - want.qty) > SPARK_QTY_TOLERANCE
            )
            if bad:
                problems.append(f"sum(qty) {cell.qty!r}, expected {want.qty:.2f}")
        if problems and cell.wrong is None:  # the first wrong call is the one reported
            cell.wrong = "; ".join(problems)

    def _report(self, cell: Cell) -> None:
        if not cell.times:
            return  # failed: its note is printed already
        cell.median = statistics.median(cell.times)
        label = f"{ENGINES[cell.engine]} {cell.query} {cell.table}"
        status = f"  WRONG: {cell.wrong}" if cell.wrong else ""
        cold = f" (warm-up > {self.limits.slow:g} s: no timed runs)" if cell.cold_only else ""
        times = [round(t, 3) for t in cell.times]
        print(f"  {label}: {cell.median:.3f} s {times}{cold}{status}", flush=True)

    def wants(self, engine: str) -> bool:
        return engine in self.engines

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

    def paired(self, cell: tuple[str, str, str], reference: tuple[str, str, str]) -> float | None:
        """Median over rounds of ``cell``'s time / ``reference``'s time in the same round.

        Both cells must come from one :meth:`run_group`: call ``i`` of each is then round ``i``
        (cells leave a group, never join it), so each ratio divides two calls made seconds apart.
        """
        a, b = self.get(*cell), self.get(*reference)
        if a is None or b is None or a.median is None or b.median is None or a.cold_only or b.cold_only:
            return None
        rounds = min(len(a.times), len(b.times))  # a quick cell may stay for more rounds
        return statistics.median(x / y for x, y in zip(a.times[:rounds], b.times[:rounds], strict=True))


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


def bench_local(bench: Bench, metadata: dict[str, str]) -> None:
    import icemor

    print("Local engines:", flush=True)
    files = data_file_paths(metadata["base"])

    def raw_narrow() -> tuple[pa.Table, int, float]:
        tbl = pq.read_table(files, columns=["qty"])
        return tbl, tbl.num_rows, pc.sum(tbl["qty"]).as_py()

    narrow: list[Spec] = []
    wide: list[Spec] = []
    if bench.wants("raw"):
        narrow.append(Spec("raw", "narrow", "base", raw_narrow, narrow_facts, exact_qty=True))
        wide.append(Spec("raw", "wide", "base", lambda: pq.read_table(files), arrow_facts, exact_qty=True))
    if bench.wants("raw_mmap"):
        # not a target's reference: shown because icemor maps local files and pyarrow's default
        # does not, so part of icemor's standing against "raw" is that difference
        def raw_mmap() -> pa.Table:
            return pq.read_table(files, memory_map=True)

        wide.append(Spec("raw_mmap", "wide", "base", raw_mmap, arrow_facts, exact_qty=True))

    for name in bench.variants:
        ident = f"{NAMESPACE}.{name}"

        def icemor_narrow(ident: str = ident) -> tuple[pa.Table, int, float]:
            tbl = icemor.load_table(ident).scan(selected_fields=("qty",)).to_arrow()
            return tbl, tbl.num_rows, pc.sum(tbl["qty"]).as_py()

        def icemor_count(ident: str = ident) -> int:
            return int(icemor.load_table(ident).scan().count())

        def icemor_wide(ident: str = ident) -> pa.Table:
            return icemor.load_table(ident).scan().to_arrow()

        if bench.wants("icemor"):
            narrow.append(Spec("icemor", "narrow", name, icemor_narrow, narrow_facts, exact_qty=True))
        if bench.wants("icemor_count"):
            narrow.append(
                Spec("icemor_count", "narrow", name, icemor_count, lambda n: (n, None, None), exact_qty=True)
            )
        if bench.wants("icemor"):
            wide.append(Spec("icemor", "wide", name, icemor_wide, arrow_facts, exact_qty=True))

    # apart: a call after a wide one may pay the allocator's release of its 1+ GB result, which
    # is noise next to a narrow call's tens of ms
    bench.run_group(narrow)
    bench.run_group(wide)

    if not bench.wants("pyiceberg"):
        return
    from pyiceberg.table import StaticTable

    def pyiceberg_error(exc: BaseException) -> str:
        if "equality" in str(exc).lower():
            return "error: equality deletes unsupported"
        return f"error: {one_line(exc)}"

    for name in bench.variants:
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


# ------------------------------------------------------------------------------------------ cold reads

COLD_RUNS = 5
# The cold cell of a process that finds no stored equality verdict (icemor.io.verdicts): the
# first read of a table's equality deletes on a host. "icemor" is the next new process.
FIRST = "icemor-first"
COLD_VS_RAW = 1.5  # a first read of an equality-deleted table, against the raw scan
# Modules a scan imports on first use: imported before the clock starts in a cold process, as the
# raw scan's pyarrow.dataset is (importing them is Python's start-up cost, not the read's).
SCAN_MODULES = ("icemor.scan", "icemor.planning.scan_job", "icemor.engines.local", "icemor.io.reader")


@dataclass
class ColdCell:
    """First and warm calls of one engine on one table, each round in a new Python process."""

    engine: str  # "icemor" or "raw"
    table: str
    cold: list[float] = field(default_factory=list)  # the first call of each process
    cold_cpu: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)  # each process's median of its later calls
    wrong: str | None = None

    def median(self, which: str) -> float | None:
        values: list[float] = getattr(self, which)
        return statistics.median(values) if values else None


def cold_child(spec: str, runs: int) -> None:
    """In a new process (``--cold-child engine:table:files``): time the first call, then ``runs``
    warm ones; print one JSON line. The modules and the catalog are loaded before the clock starts.
    A call is the read and sum(qty), as in the warm cells; the result is checked after the clock."""
    import pyarrow.dataset  # noqa: F401  (pq.read_table imports it on first use)

    engine, table, files_json = spec.split(":", 2)
    if engine == "raw":
        files = json.loads(files_json)
        key = EQ_COLUMNS[table]

        def read() -> pa.Table:
            return pq.read_table(files, columns=["qty", key])

    else:
        import icemor

        for module in SCAN_MODULES:
            importlib.import_module(module)
        logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
        icemor.load_table(f"{NAMESPACE}.base")  # the catalog's imports and connection; nothing of `table`

        def read() -> pa.Table:
            return icemor.load_table(f"{NAMESPACE}.{table}").scan(selected_fields=("qty",)).to_arrow()

    def call() -> pa.Table:
        tbl = read()
        pc.sum(tbl["qty"]).as_py()
        return tbl

    start, cpu = time.perf_counter(), time.process_time()
    first = call()
    cold, cold_cpu = time.perf_counter() - start, time.process_time() - cpu
    rows, cents = first.num_rows, qty_cents(first["qty"]) if engine != "raw" else None
    del first
    warm = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        warm.append(time.perf_counter() - start)
    print(json.dumps({"cold": cold, "cold_cpu": cold_cpu, "warm": warm, "rows": rows, "qty_cents": cents}))


def bench_cold(bench: Bench, home: Path, metadata: dict[str, str], runs: int) -> list[ColdCell]:
    """The first narrow read of eq10/eq10s in a new Python process, against the raw scan of ``qty``
    plus the key column (base's files: the same bytes), each in new processes, in alternation."""
    names = [name for name in bench.variants if name in EQ_COLUMNS]
    if not runs or not names or not bench.wants("icemor"):
        return []
    print(f"Cold reads: {runs} new processes per cell, in alternation", flush=True)
    files = json.dumps(data_file_paths(metadata["base"]))
    cells = {(e, n): ColdCell(e, n) for n in names for e in ("icemor", FIRST, "raw")}
    timeout = bench.limits.timeout
    stores = Path(tempfile.mkdtemp(prefix="icemor-verdicts-"))
    for round_no in range(runs):
        for name in names:
            # a fresh verdict store per round and table: FIRST reads with nothing stored (the
            # first read on a host), "icemor" is the next new process, the verdict stored
            env = {
                **os.environ,
                "ICEMOR_HOME": str(home),
                "ICEMOR_VERDICT_DIR": str(stores / f"{round_no}-{name}"),
            }
            engines = (FIRST, "icemor", "raw") if round_no % 2 == 0 else ("raw", FIRST, "icemor")
            for engine in engines:
                cell = cells[(engine, name)]
                child = [sys.executable, str(Path(__file__).resolve()), "--cold-child"]
                child += [
                    f"{'icemor' if engine == FIRST else engine}:{name}:{files}",
                    "--runs",
                    str(bench.runs),
                ]
                done = subprocess.run(
                    child, check=False, capture_output=True, text=True, env=env, timeout=timeout
                )
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                if done.returncode or not lines:
                    cell.wrong = cell.wrong or f"failed: {one_line(RuntimeError(done.stderr.strip()[-300:]))}"
                    continue
                result = json.loads(lines[-1])
                expected = bench.expected["base" if engine == "raw" else name]
                got = (result["rows"], result["qty_cents"])
                want = (expected.rows, None if engine == "raw" else expected.qty_cents)
                if got != want and cell.wrong is None:
                    cell.wrong = f"rows, qty cents {got}, expected {want}"
                cell.cold.append(result["cold"])
                cell.cold_cpu.append(result["cold_cpu"])
                cell.warm.append(statistics.median(result["warm"]) if result["warm"] else result["cold"])
            firsts = [f"{e} {cells[(e, name)].cold[-1]:.3f} s" for e in engines if cells[(e, name)].cold]
            print(f"  round {round_no + 1} {name}, first calls: {', '.join(firsts)}", flush=True)
    shutil.rmtree(stores, ignore_errors=True)
    return list(cells.values())


def cold_paired(cells: list[ColdCell], name: str, which: str, engine: str = "icemor") -> float | None:
    """Median over rounds of ``engine``'s first call divided by the raw scan's ``which`` ("cold"/"warm")."""
    mine = next((c for c in cells if c.engine == engine and c.table == name), None)
    raw = next((c for c in cells if c.engine == "raw" and c.table == name), None)
    if mine is None or raw is None or not mine.cold or len(mine.cold) != len(getattr(raw, which)):
        return None
    return statistics.median(a / b for a, b in zip(mine.cold, getattr(raw, which), strict=True) if b)


def cold_targets(cells: list[ColdCell]) -> list[Target]:
    out = []
    for name in dict.fromkeys(c.table for c in cells):
        key = EQ_COLUMNS[name]
        for engine, which, what in (
            ("icemor", "warm", "its warm scan"),
            ("icemor", "cold", "its first call in a new process"),
            (FIRST, "cold", "its first call; first read on the host, nothing stored"),
        ):
            mine = next(c for c in cells if c.engine == engine and c.table == name).median("cold")
            raw = next(c for c in cells if c.engine == "raw" and c.table == name).median(which)
            out.append(
                Target(
                    f"local narrow cold {name} ≤ {COLD_VS_RAW}× raw qty+{key}, {what}",
                    cold_paired(cells, name, which, engine),
                    COLD_VS_RAW,
                    "×",
                    ratio(mine, raw),
                )
            )
    return out


def report_cold(cells: list[ColdCell]) -> None:
    if not cells:
        return
    names = list(dict.fromkeys(c.table for c in cells))
    runs = max(len(c.cold) for c in cells)

    def get(engine: str, name: str) -> ColdCell:
        return next(c for c in cells if c.engine == engine and c.table == name)

    def seconds(value: float | None) -> str:
        return "" if value is None else f"{value:.3f}"

    print()
    print(
        f"Cold narrow reads, count(*) and sum(qty): the first call of a new Python process (modules"
        f" imported, catalog opened), median of {runs} processes, icemor and raw in alternation; 'warm'"
        f" = each process's median of its later calls. Paired ratios: the median over rounds."
    )
    table = [["cold: first narrow read in a process", *names]]
    table.append(
        ["raw pyarrow, qty + key column, first call", *(seconds(get("raw", n).median("cold")) for n in names)]
    )
    table.append(
        ["raw pyarrow, qty + key column, warm", *(seconds(get("raw", n).median("warm")) for n in names)]
    )
    for engine, label in (
        (FIRST, "icemor local, nothing stored"),
        ("icemor", "icemor local, verdict stored"),
    ):
        table.append([f"{label}, first call", *(seconds(get(engine, n).median("cold")) for n in names)])
        table.append(
            [f"{label}, first call, CPU s", *(seconds(get(engine, n).median("cold_cpu")) for n in names)]
        )
    table.append(["icemor local, warm", *(seconds(get("icemor", n).median("warm")) for n in names)])
    for engine, which, label in (
        ("icemor", "warm", "icemor first call (stored) / raw warm"),
        ("icemor", "cold", "icemor first call (stored) / raw first call"),
        (FIRST, "cold", "icemor first call (nothing stored) / raw first call"),
    ):
        table.append(
            [
                f"{label} (paired)",
                *(f"{r:.2f}×" if (r := cold_paired(cells, n, which, engine)) else "" for n in names),
            ]
        )
    print(render(table))
    for c in cells:
        if c.wrong:
            print(f"  WRONG {c.engine} {c.table}: {c.wrong}")


def bench_spark(bench: Bench, spark: SparkSession) -> None:
    print("Spark engines:", flush=True)
    reason = None
    try:
        module = importlib.import_module("icemor.engines.spark")
        if not hasattr(module, "scan_to_dataframe"):
            reason = "icemor.engines.spark has no scan_to_dataframe"
    except Exception as exc:
        reason = one_line(exc, 60)
    strategies = [
        (engine, strategy)
        for engine, strategy in (("icemor_spark", "auto"), ("icemor_spark_python", "python"))
        if bench.wants(engine)
    ]
    attached = reason is None and bench.wants("icemor_attach")
    if attached:
        import icemor.spark

        icemor.spark.attach(spark, name=ATTACH_NAME)
    try:
        _spark_groups(bench, spark, strategies, reason)
    finally:
        if attached:
            icemor.spark.detach(spark)


def _spark_groups(
    bench: Bench, spark: SparkSession, strategies: list[tuple[str, str]], reason: str | None
) -> None:
    # Iceberg Java and icemor on the same table and query are timed in alternation (run_group)
    for name in bench.variants:
        for query in QUERIES:
            specs: list[Spec] = []
            if bench.wants("java"):
                sql = SPARK_SQL[query].format(table=qualified(name))

                def java_query(sql: str = sql) -> Any:
                    return spark.sql(sql).collect()[0]

                specs.append(Spec("java", query, name, java_query, spark_facts(query), exact_qty=False))
            views: dict[str, str] = {}
            for engine, strategy in strategies:
                if reason is not None:
                    bench.na(engine, query, name, f"n/a ({reason})")
                    continue
                views[engine] = view = f"icemor_bench_{name}_{query}_{strategy}"
                specs.append(
                    Spec(
                        engine,
                        query,
                        name,
                        _icemor_on_spark(spark, name, query, strategy, view),
                        spark_facts(query),
                        exact_qty=False,
                        on_error=lambda exc: f"n/a ({one_line(exc, 60)})",
                    )
                )
            if bench.wants("icemor_attach"):
                if reason is not None:
                    bench.na("icemor_attach", query, name, f"n/a ({reason})")
                else:
                    attached = f"{ATTACH_NAME}.{NAMESPACE}.{name}"
                    views["icemor_attach"] = attached  # the exact check reads it through attach too
                    specs.append(
                        Spec(
                            "icemor_attach",
                            query,
                            name,
                            _attach_query(spark, SPARK_SQL[query].format(table=attached)),
                            spark_facts(query),
                            exact_qty=False,
                            on_error=lambda exc: f"n/a ({one_line(exc, 60)})",
                        )
                    )
            for cell in bench.run_group(specs, spark=spark):
                if cell.engine in views and cell.median is not None and query == "wide" and not cell.wrong:
                    _exact_check(bench, spark, cell, views[cell.engine])


def _attach_query(spark: SparkSession, sql: str) -> Callable[[], Any]:
    """``spark.sql(sql)`` on the session attached by :func:`bench_spark` (as a user writes it)."""

    def run() -> Any:
        return spark.sql(sql).collect()[0]

    return run


def _icemor_on_spark(
    spark: SparkSession, name: str, query: str, strategy: str, view: str
) -> Callable[[], Any]:
    import icemor

    fields = ("qty",) if query == "narrow" else ("*",)
    sql = SPARK_SQL[query].format(table=view)

    def run() -> Any:
        table = icemor.load_table(f"{NAMESPACE}.{name}")
        df = table.to_spark(spark, strategy=strategy, selected_fields=fields)
        df.createOrReplaceTempView(view)
        return spark.sql(sql).collect()[0]

    return run


def _exact_check(bench: Bench, spark: SparkSession, cell: Cell, view: str) -> None:
    """The timed query sums qty as doubles: check the rows exactly once, untimed (a read more, so
    under the same --cell-timeout)."""

    def exact_check() -> Any:
        return spark.sql(EXACT_SQL.format(table=view)).collect()[0]

    try:
        row = call_within(exact_check, bench.limits, spark)
    except CellTimeoutError:
        cell.note = f"exact check: timeout (> {bench.limits.timeout:g} s)"
        print(f"  {ENGINES[cell.engine]} {cell.table}: {cell.note}", flush=True)
        return
    got = Expected(int(row[0]), int(row[1]), int(row[2]))
    if got != bench.expected[cell.table]:
        cell.wrong = f"exact check {got}, expected {bench.expected[cell.table]}"
        print(f"  {ENGINES[cell.engine]} {cell.table}: WRONG {cell.wrong}", flush=True)


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
    of_medians: float | None = None  # a ratio target: the ratio of the two medians, for comparison
    status: str = field(init=False)

    def __post_init__(self) -> None:
        self.status = "n/a" if self.measured is None else ("PASS" if self.measured <= self.limit else "MISS")


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


# The targets (docs/benchmarks.md, "Targets")
WIDE_VS_RAW = {"base": 1.05, "pos10": 1.15, "dv10": 1.15, "eq10": 1.3, "eq10s": 1.5}
NARROW_SECONDS = {"eq10": 0.3, "eq10s": 0.6}
NARROW_BASE_VS_RAW = 1.5
SPARK_VS_JAVA = {"base": 1.5, "pos10": 1.5, "dv10": 1.5, "eq10": 1.0, "eq10s": 1.0}


def versus(
    bench: Bench, label: str, cell: tuple[str, str, str], reference: tuple[str, str, str], limit: float
) -> Target:
    """A ratio target, judged on the paired ratio (the cells were timed in alternation)."""
    of_medians = ratio(bench.median(*cell), bench.median(*reference))
    return Target(label, bench.paired(cell, reference), limit, "×", of_medians)


def targets(bench: Bench) -> list[Target]:
    names = bench.variants
    out = [
        versus(
            bench,
            f"local all columns → Arrow, {name} ≤ {WIDE_VS_RAW[name]}× raw (base)",
            ("icemor", "wide", name),
            ("raw", "wide", "base"),
            WIDE_VS_RAW[name],
        )
        for name in names
    ]
    if "base" in names:
        out.append(
            versus(
                bench,
                f"local narrow, base ≤ {NARROW_BASE_VS_RAW}× raw",
                ("icemor", "narrow", "base"),
                ("raw", "narrow", "base"),
                NARROW_BASE_VS_RAW,
            )
        )
    out += [
        Target(f"local narrow, {name} ≤ {limit} s", bench.median("icemor", "narrow", name), limit, " s")
        for name, limit in NARROW_SECONDS.items()
        if name in names
    ]
    for name in names:
        limit = SPARK_VS_JAVA[name]
        for query in QUERIES:
            label = f"icemor on Spark ≤ {limit}× Iceberg Java, {query} {name}"
            out.append(versus(bench, label, ("icemor_spark", query, name), ("java", query, name), limit))
            if bench.get("icemor_attach", query, name) is not None:
                label = f"spark.sql through attach ≤ {ATTACH_VS_READ}× icemor.spark.read, {query} {name}"
                cell, ref = ("icemor_attach", query, name), ("icemor_spark", query, name)
                out.append(versus(bench, label, cell, ref, ATTACH_VS_READ))
    return out


def machine_info(spark_version: str | None) -> dict[str, Any]:
    """The machine line of the printed report (``_report.machine`` is what the results file keeps)."""
    m = _report.machine()
    commit = (m["git"]["commit"] or "unknown")[:7] + ("-dirty" if m["git"]["dirty"] else "")
    return {
        "nproc": m["cores"],
        "memory_gib": m["memory_gib"],
        "cpu": m["cpu"],
        "python": m["python"],
        "pyarrow": m["pyarrow"],
        "pyiceberg": m["pyiceberg"],
        "pyspark": m["pyspark"],
        "spark": spark_version,
        "iceberg_java": "1.10.2",
        "icemor": f"{m['icemor']} (git {commit})",
    }


def render(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def report(
    bench: Bench,
    machine: dict[str, Any],
    build_info: dict[str, Any],
    rows: int,
    cold: list[ColdCell] | None = None,
) -> list[Target]:
    m = machine
    print()
    print(
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, Spark {m['spark'] or 'not started'}, "
        f"Iceberg Java {m['iceberg_java']}, icemor {m['icemor']}"
    )
    print(
        f"Data: {rows:,} rows, {DATA_FILES} data files per table (id ranges), layout {LAYOUT_VERSION!r};"
        f" built in {build_info['seconds']:.0f} s"
    )
    print(
        f"Seconds, warm, median of {bench.runs} after 1 warm-up ({QUICK_RUNS} where that median is under "
        f"{QUICK_SECONDS} s); (×) = ratio to the raw scan of base."
    )
    print(
        "'first call' = that warm-up: the first query of a table in this process, which decodes its"
        " delete files and, for equality deletes, computes the verdicts later calls reuse."
    )
    limits = bench.limits
    if limits.slow is not None:
        print(
            f"* = the warm-up took > {limits.slow:g} s (--slow): that one cold call is shown, no timed runs."
        )
    if limits.timeout is not None:
        print(f"Every call is stopped after {limits.timeout:g} s (--cell-timeout).")
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
        table = [[f"{query}: {title}", *bench.variants]]
        versus_java = [[f"{query}: ratio to Iceberg Java on Spark", *bench.variants]]
        for engine, label in ENGINES.items():
            if engine == "icemor_count" and query != "narrow":
                continue
            cells = [bench.get(engine, query, name) for name in bench.variants]
            if all(c is None for c in cells):
                continue
            table.append([label, *("" if c is None else c.text(reference) for c in cells)])
            if engine in ("raw", "raw_mmap", "java"):
                continue
            java_medians = [bench.median("java", query, name) for name in bench.variants]
            ratios = [
                "" if c is None or c.median is None or not j else f"{c.median / j:.2f}×"
                for c, j in zip(cells, java_medians, strict=True)
            ]
            if any(ratios):
                versus_java.append([label, *ratios])
        if query == "narrow":
            table.append(["", *[""] * len(bench.variants)])
            for engine in ("icemor", "icemor_spark"):
                cells = [bench.get(engine, query, name) for name in bench.variants]
                if any(c is not None and c.first is not None for c in cells):
                    firsts = ["" if c is None or c.first is None else f"{c.first:.3f}" for c in cells]
                    table.append([f"{ENGINES[engine]}, first call", *firsts])
        print()
        if reference is not None and "base" not in bench.variants:
            print(f"{query}: {ENGINES['raw']} of base's files (the reference): {reference:.3f} s")
        print(render(table))
        if len(versus_java) > 1:
            print()
            print(render(versus_java))
    report_cold(cold or [])
    found = targets(bench) + cold_targets(cold or [])
    print()
    print(
        "Ratios are paired: the median over rounds of a cell's call divided by its reference's call"
        " of the same round; the ratio of the two medians is shown beside it."
    )
    lines = [["target", "measured", "limit", "", "ratio of medians"]]
    for t in found:
        value = "n/a" if t.measured is None else f"{t.measured:.2f}{t.unit}"
        beside = "" if t.of_medians is None else f"{t.of_medians:.2f}{t.unit}"
        lines.append([t.label, value, f"{t.limit}{t.unit}", t.status, beside])
    print(render(lines))
    mapped = bench.median("raw_mmap", "wide", "base")
    if mapped:
        versus = [
            f"{name} {seconds / mapped:.2f}×"
            for name in bench.variants
            if (seconds := bench.median("icemor", "wide", name)) is not None
        ]
        print(
            "Not a target: icemor local all columns against the memory-mapped raw scan "
            f"({mapped:.3f} s; icemor maps local files, the reference above does not): " + ", ".join(versus)
        )
    return found


def record(results: _report.Report, bench: Bench, cold: list[ColdCell], found: list[Target]) -> None:
    """The printed report's figures as rows of the results file: each cell's median (its ratio to
    the raw scan of base locally, to Iceberg Java on Spark), the cold medians, then the targets."""
    for cell in bench.cells:
        on_spark = cell.engine in SPARK_ENGINES and cell.engine != "java"
        reference = ("java", cell.query, cell.table) if on_spark else ("raw", cell.query, "base")
        ref = None if cell.engine in ("raw", "java") else bench.median(*reference)
        results.add(
            f"{ENGINES[cell.engine]}, {cell.query}, {cell.table}"
            + (" (one cold call)" if cell.cold_only else ""),
            cell.median,
            ratio=ratio(cell.median, ref),
            versus=ENGINES[reference[0]] if ref else None,
            note=(cell.wrong and f"WRONG: {cell.wrong}") or cell.note,
        )
    labels = {"raw": "raw pyarrow, qty + key column", FIRST: "icemor local, nothing stored"}
    for c in cold:
        label = labels.get(c.engine, "icemor local, verdict stored")
        for which in ("cold", "warm") if c.engine != FIRST else ("cold",):
            results.add(
                f"cold narrow {c.table}: {label}, {'first call' if which == 'cold' else 'warm'}",
                c.median(which),
                note=c.wrong and f"WRONG: {c.wrong}",
            )
    for t in found:
        results.add(
            t.label,
            t.measured,
            t.unit.strip(),
            target=f"≤ {t.limit}{t.unit}",
            passed=None if t.measured is None else t.status == "PASS",
            note=None if t.of_medians is None else f"ratio of medians {t.of_medians:.2f}{t.unit}",
        )


# ------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=FULL_ROWS, help="rows per table (default 10,000,000)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="icemor home of the tables")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the tables even if present")
    parser.add_argument(
        "--runs",
        type=int,
        default=5,
        help=f"timed runs per measurement (after 1 warm-up); at least {QUICK_RUNS} under {QUICK_SECONDS} s",
    )
    parser.add_argument(
        "--variants",
        type=names_of(TABLES),
        default=TABLES,
        help=f"tables to measure, comma-separated (default {','.join(TABLES)}); the build makes all",
    )
    parser.add_argument(
        "--engines",
        type=names_of(tuple(ENGINES)),
        default=tuple(ENGINES),
        help=f"engines to measure, comma-separated (default {','.join(ENGINES)})",
    )
    parser.add_argument(
        "--slow",
        type=float,
        default=30.0,
        help="a cell whose warm-up takes longer reports that one call, no timed runs (default 30 s; 0: off)",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=300.0,
        help="stop any single call after this many seconds and print 'timeout' (default 300 s; 0: off)",
    )
    parser.add_argument("--skip-spark", action="store_true", help="no Spark engines (and no Java check)")
    parser.add_argument("--skip-pyiceberg", action="store_true", help="no pyiceberg column")
    parser.add_argument(
        "--cold-runs",
        type=int,
        default=COLD_RUNS,
        help=f"new processes per cold cell (eq10/eq10s narrow, icemor and raw; default {COLD_RUNS}; 0: off)",
    )
    parser.add_argument("--cold-child", help=argparse.SUPPRESS)  # engine:table:files, in a cold process
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="build (with --rebuild: again) and check the tables, then exit",
    )
    args = parser.parse_args(argv)
    engines = [e for e in args.engines if not (args.skip_pyiceberg and e == "pyiceberg")]
    if args.skip_spark:
        engines = [e for e in engines if e not in SPARK_ENGINES]
    args.engines = tuple(engines)
    return args


SPARK_ENGINES = ("java", "icemor_spark", "icemor_spark_python", "icemor_attach")


def names_of(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated subset of ``allowed``, returned in ``allowed``'s order."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = {n.strip() for n in text.split(",") if n.strip()}
        if unknown := sorted(chosen - set(allowed)):
            msg = f"unknown {', '.join(unknown)}; choose from {','.join(allowed)}"
            raise argparse.ArgumentTypeError(msg)
        return tuple(n for n in allowed if n in chosen)

    return parse


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cold_child:
        cold_child(args.cold_child, args.runs)
        return 0
    results_file = _report.Report.of(__file__)
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from oracle import IcebergJava

    # every icemor.load_table() opens the catalog, and pyiceberg warns each time about Java's V0 schema
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    home = args.data_dir.resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["ICEMOR_HOME"] = str(home)  # read by icemor.load_catalog() at every call
    marker_path = home / MARKER
    marker = json.loads(marker_path.read_text()) if marker_path.is_file() else None
    if marker is not None and marker.get("layout") != LAYOUT_VERSION:
        # an older workload (the first one had no layout key) must not be measured as this one
        print(
            f"{home} holds workload layout {marker.get('layout', 'unversioned (first layout)')!r},"
            f" not {LAYOUT_VERSION!r}: rebuilding",
            flush=True,
        )
        marker = None
    if marker is not None and marker["rows"] != args.rows and not args.rebuild:
        msg = f"{home} holds {marker['rows']:,} rows, not {args.rows:,}: pass --rebuild or another --data-dir"
        raise SystemExit(msg)
    need_build = args.rebuild or marker is None
    expected = expected_for(args.rows)
    spark_wanted = any(e in SPARK_ENGINES for e in args.engines)

    checked = need_build and not args.build_only  # by the child below, right after building
    if checked:
        # built in a child process: its JVM is gone before the local engines are timed (an idle
        # JVM's memory beside them made their wide times swing by a third on a 2-core VM)
        child = [sys.executable, str(Path(__file__).resolve()), "--build-only", "--data-dir", str(home)]
        subprocess.run([*child, "--rows", str(args.rows), "--rebuild"], check=True)
        marker = json.loads(marker_path.read_text())
        need_build = False

    java = None
    if need_build:
        clean_data_dir(home)
        java = IcebergJava(home)
        print(f"Building {args.rows:,}-row tables in {home} with Iceberg Java ...", flush=True)
        build_info = build(java, args.rows)
        print("Planned by Iceberg Java:", flush=True)
        build_info["layout"] = check_layout(java, TABLES, args.rows)
        verify_with_java(java, expected, TABLES)
        marker = {
            "rows": args.rows,
            "layout": LAYOUT_VERSION,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "build": build_info,
        }
        marker_path.write_text(json.dumps(marker, indent=2))
        print(f"Built in {build_info['seconds']:.0f} s", flush=True)
    if args.build_only:
        if not need_build:
            print(f"{home} holds the tables already (--rebuild to build them again)")
        return 0
    if args.skip_spark and not checked:
        print(f"Reusing {home} (verified through Iceberg Java when built; --skip-spark skips the re-check)")
    assert marker is not None

    import icemor

    measured = tuple(dict.fromkeys(("base", *args.variants)))  # the raw scan reads base's files
    metadata = {
        name: icemor.load_table(f"{NAMESPACE}.{name}").pyiceberg.metadata_location for name in measured
    }
    limits = Limits(slow=args.slow or None, timeout=args.cell_timeout or None)
    bench = Bench(args.runs, expected, variants=args.variants, engines=args.engines, limits=limits)
    contention: dict[str, float | None] = {}
    monitor = CpuMonitor()
    bench_local(bench, metadata)  # no JVM on the machine yet
    cold = bench_cold(bench, home, metadata, args.cold_runs)
    contention["local"] = monitor.others_share()
    if not args.skip_spark:
        java = IcebergJava(home)
        if not checked:  # the build checked them already
            print("Planned by Iceberg Java:", flush=True)
            check_layout(java, args.variants, args.rows)
            verify_with_java(java, expected, args.variants)
        if spark_wanted:
            monitor = CpuMonitor()
            bench_spark(bench, java.spark)
            contention["spark"] = monitor.others_share()

    machine = machine_info(java.spark.version if java is not None else None)
    machine["cpu_share_of_other_processes"] = contention
    found = report(bench, machine, marker["build"], args.rows, cold)
    wrong = [c for c in bench.cells if c.wrong and c.engine != "pyiceberg"]
    timeouts = [c for c in bench.cells if c.note and "timeout" in c.note]
    failed = [
        c for c in bench.cells if c.engine in ("icemor", "icemor_count") and c.note and c not in timeouts
    ]
    results = {
        "machine": machine,
        "config": {
            "rows": args.rows,
            "runs": args.runs,
            "warmup": 1,
            "variants": list(args.variants),
            "engines": list(args.engines),
            "slow": limits.slow,
            "cell_timeout": limits.timeout,
            "data_dir": str(home),
            "layout": LAYOUT_VERSION,
        },
        "build": marker,
        "expected": {name: asdict(e) for name, e in expected.items()},
        "metadata_locations": metadata,
        "cells": [asdict(c) for c in bench.cells],
        "cold": [asdict(c) for c in cold],
        "targets": [asdict(t) for t in found],
    }
    (home / RESULTS).write_text(json.dumps(results, indent=2))
    print(f"\nWrote {home / RESULTS}")
    results_file.context.update(rows=args.rows, runs=args.runs, spark=machine["spark"], contention=contention)
    record(results_file, bench, cold, found)
    results_file.write()
    if timeouts:
        print("\nTIMED OUT (so not checked; raise --cell-timeout to measure them):")
        for c in timeouts:
            print(f"  {ENGINES[c.engine]} {c.query} {c.table}: {c.note}")
    cold_wrong = [c for c in cold if c.wrong]
    if wrong or failed or cold_wrong:
        print("\nWRONG RESULTS / FAILURES:")
        for c in wrong + failed:
            print(f"  {ENGINES[c.engine]} {c.query} {c.table}: {c.wrong or c.note}")
        for cc in cold_wrong:
            print(f"  {cc.engine} cold narrow {cc.table}: {cc.wrong}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
