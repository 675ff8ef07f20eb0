"""Position-mode CDC benchmark: 1 M changes in 100 batches onto a 10 M-row table, keys resolved to rows at
write time (deletion vectors on v3, position deletes on v2), against equality mode; then the first cold
read of each result beside the same data files without deletes; and a 100 M-row table's per-batch lookup.

Run as ``.venv/bin/python benchmarks/bench_cdc_position.py`` (``make bench``). The changes are
``bench_cdc.py``'s (60% U, 20% D, 20% I; U/D keys uniform over every data file, as real CDC updates old
rows everywhere; I new ids; full rows, shuffled within each batch), 100 batches of 10 k, onto fresh copies
of the write benchmark's ``bench.base`` (10 data files, each an id range; registered, not copied). Each
mode applies the whole stream ``--runs`` times, each time to a fresh copy, in a process whose caches are
emptied first (the key indexes then come from their sidecars, as in a new process); the median pass
counts. Every result is checked through Iceberg Java (count, sum(id), sum of qty in cents) against a
numpy model. The key indexes of base's 10 files are built once, before (timed on its own line): a new
table's first batch pays that build.

Reads: for each mode's last result and for a twin table registering the same data files without any
delete file, in as many commits (so as many data manifests), ``count + sum(qty)`` (narrow) and every
column (wide), each in a new Python process (no delete cache, no equality-verdict store: a first
read on a new host), median of ``--read-runs``.

100 M rows (``--big-rows``, 0 skips it): 100 files of 1 M rows (id, qty; id ranges) written with pyarrow
and registered with ``add_files``; ``--big-batches`` batches of 10 k changes in position mode; printed: the
per-batch lookup time beside the 10 M-row table's, and the index build.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _report import Report
from bench_cdc import KEYED_DDL, _batches, _check, _expected
from bench_equality import median
from bench_scan import machine_info, render
from bench_write import DEFAULT_DATA_DIR, NAMESPACE, ROWS, open_base

CHANGES = 1_000_000
BATCHES = 100
MODES = {"equality v2": ("equality", 2), "position v2": ("position", 2), "position v3 (DVs)": ("position", 3)}
LOCAL_TARGET = 150_000
SPARK_TARGET = 100_000
READ_TARGET = 1.1


def _copy(java: Any, name: str, version: int) -> str:
    """A fresh table of ``version`` holding base's data files (registered), ``id`` NOT NULL."""
    ident = f"{NAMESPACE}.{name}"
    java.sql(f"DROP TABLE IF EXISTS {java.qualified(ident)}")
    java.create_table(ident, KEYED_DDL, merge_on_read=True, format_version=version)
    _register(java, f"{NAMESPACE}.base", ident)
    return ident


def _register(java: Any, source: str, ident: str) -> None:
    """Append the live data files of ``source`` to ``ident`` (Java fast append, no data copied)."""
    src = java.java_table(source)
    append = java.java_table(ident).newFastAppend()
    tasks = src.newScan().planFiles().iterator()
    while tasks.hasNext():
        append = append.appendFile(tasks.next().file())
    append.commit()


def _base_files(java: Any) -> list[str]:
    rows = java.sql(f"SELECT file_path FROM {java.qualified(NAMESPACE + '.base')}.data_files")
    return [r[0] for r in rows]


def _build_indexes(icemor: Any, java: Any) -> float:
    """Remove base's key-index sidecars, then build them again: the one-time cost of a new table."""
    from icemor.io.cache import DELETE_CACHE
    from icemor.io.key_index import sidecar_path

    table = icemor.load_table(f"{NAMESPACE}.base")
    field_id = table.pyiceberg.schema().find_field("id").field_id
    for path in _base_files(java):
        local = Path(sidecar_path(path.removeprefix("file:"), [field_id]))
        local.unlink(missing_ok=True)
    DELETE_CACHE.clear()
    from icemor.io.key_index import IndexedFile, key_index
    from icemor.planning.planner import all_field_types

    types = all_field_types(table.pyiceberg.metadata)
    t0 = time.perf_counter()
    for p in table.scan().plan_files():
        f = p.data_file
        key_index(table.io, IndexedFile(f.path, f.file_size_in_bytes, f.record_count, {}), [field_id], types)
    return time.perf_counter() - t0


def _apply_stream(
    table: Any, inputs: list[Any], deletes: str, **options: Any
) -> tuple[list[float], list[Any]]:
    seconds, metrics = [], []
    for batch in inputs:
        t0 = time.perf_counter()
        m = table.apply_changes(batch() if callable(batch) else batch, key=["id"], deletes=deletes, **options)
        seconds.append(time.perf_counter() - t0)
        metrics.append(m)
    return seconds, metrics


def _passes(
    java: Any,
    icemor: Any,
    name: str,
    inputs: list[Any],
    mode: tuple[str, int],
    expected: Any,
    runs: int,
    **options: Any,
) -> tuple[str, tuple[list[float], list[Any]]]:
    from icemor.io.cache import DELETE_CACHE

    passes = []
    ident = ""
    for _ in range(runs):
        ident = _copy(java, name, mode[1])
        DELETE_CACHE.clear()  # as a new process: indexes from their sidecars, nothing decoded yet
        done = _apply_stream(icemor.load_table(ident), inputs, mode[0], **options)
        _check(java, ident, expected)
        passes.append(done)
    passes.sort(key=lambda p: sum(p[0]))
    return ident, passes[len(passes) // 2]


_READ = r"""
import json, os, sys, time
import icemor
t = icemor.load_table(sys.argv[1])
fields = ("qty",) if sys.argv[2] == "narrow" else ("*",)
t0 = time.perf_counter()
tbl = t.scan(selected_fields=fields).to_arrow()
print(json.dumps({"s": time.perf_counter() - t0, "rows": tbl.num_rows}))
"""


# What pyarrow alone pays for the same rows (the floor of any reader built on it): the table's live
# data files decoded with pyarrow's Parquet reader, a thread per core as icemor's local engine,
# as they are ("raw") or with each file's deleted positions removed by a mask ("filtered"). The
# positions are found before the clock starts; pyarrow has no row selection inside the decoder,
# so removing rows is a second pass over the decoded values (for a plain double column as much
# as the decoding itself).
_FLOOR = r"""
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
import icemor
from icemor.io.deletes import deleted_positions
t = icemor.load_table(sys.argv[1])
scan = t.scan()
tasks = [x for ct in scan.job.plan_tasks() for x in ct.tasks]
gone = {x.data_file.path: deleted_positions(scan.io, x.data_file.path, x.delete_files) for x in tasks}
cols = ["qty"] if sys.argv[2] == "narrow" else None
filtered = sys.argv[3] == "filtered"

def one(path):
    out, first, dead = [], 0, gone[path]
    pf = pq.ParquetFile(path.removeprefix("file:"))
    for b in pf.iter_batches(batch_size=1 << 20, columns=cols, use_threads=False):
        n = b.num_rows
        if filtered:
            lo, hi = np.searchsorted(dead, (first, first + n))
            if hi > lo:
                keep = np.ones(n, dtype=bool)
                keep[dead[lo:hi] - first] = False
                b = b.filter(pa.array(keep))
        first += n
        out.append(b)
    return out

t0 = time.perf_counter()
with ThreadPoolExecutor(os.cpu_count()) as pool:
    parts = [b for bs in pool.map(one, sorted(gone, key=lambda p: -len(gone[p]))) for b in bs]
rows = sum(b.num_rows for b in parts)  # kept in memory, as a read to one table holds them
print(json.dumps({"s": time.perf_counter() - t0, "rows": rows}))
"""


def _floor(ident: str, query: str, runs: int) -> tuple[float, float]:
    """Median seconds of pyarrow alone on ``ident``'s live files: decoded, and decoded and filtered."""
    out = []
    for mode in ("raw", "filtered"):
        times = []
        for _ in range(runs):
            done = subprocess.run(
                [sys.executable, "-c", _FLOOR, ident, query, mode], capture_output=True, text=True, check=True
            )
            times.append(json.loads(done.stdout.strip().splitlines()[-1])["s"])
        out.append(statistics.median(times))
    return out[0], out[1]


def _cold_read(ident: str, query: str, runs: int, want_rows: int) -> list[float]:
    """``runs`` reads, each in a new process with no icemor cache (equality verdicts off)."""
    env = dict(os.environ, ICEMOR_VERDICT_CACHE="0")
    out = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", _READ, ident, query], env=env, capture_output=True, text=True, check=True
        )
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if got["rows"] != want_rows:
            msg = f"{ident}: a cold read gives {got['rows']} rows, expected {want_rows}"
            raise RuntimeError(msg)
        out.append(got["s"])
    return out


def _twin(java: Any, ident: str) -> str:
    """The same data files as ``ident``, without any delete file, committed as ``ident`` did: each
    commit of ``ident`` becomes an append of the data files it added that are still live (so the
    twin has as many data manifests, and reads the same files with the same planning work)."""
    name = f"{ident}_nodeletes"
    java.sql(f"DROP TABLE IF EXISTS {java.qualified(name)}")
    java.create_table(name, KEYED_DDL, merge_on_read=True)
    src = java.java_table(ident)
    live = set()
    tasks = src.newScan().planFiles().iterator()
    while tasks.hasNext():
        live.add(str(tasks.next().file().location()))
    target = java.java_table(name)
    snapshots = []
    snap = src.currentSnapshot()
    while snap is not None:
        snapshots.append(snap)
        parent = snap.parentId()
        snap = src.snapshot(parent) if parent is not None else None
    for snap in reversed(snapshots):
        files = [f for f in snap.addedDataFiles(src.io()) if str(f.location()) in live]
        if files:
            append = target.newFastAppend()
            for f in files:
                append = append.appendFile(f)
            append.commit()
    return name


def _big(icemor: Any, data_dir: Path, rows: int, batches: int, changes_per_batch: int) -> dict[str, Any]:
    """A ``rows``-row table of 1 M-row id-range files; position-mode batches; per-batch lookup times."""
    files = max(1, rows // 1_000_000)
    per = rows // files
    src = data_dir / f"big-{rows}"
    marker = src / "DONE"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("qty", pa.float64())])
    if not marker.exists():
        src.mkdir(parents=True, exist_ok=True)
        for i in range(files):
            ids = np.arange(i * per, (i + 1) * per, dtype=np.int64)
            part = pa.table({"id": ids, "qty": (ids % 10000) / 100}, schema=schema)
            pq.write_table(part, src / f"part-{i:04d}.parquet")
        marker.write_text("ok")
    name = f"{NAMESPACE}.big_{rows}"
    if name in icemor.list_tables(NAMESPACE):
        icemor.drop_table(name)
    table = icemor.create_table(name, schema, identifier_fields=["id"], format_version=3)
    table.add_files(sorted(str(p) for p in src.glob("part-*.parquet")))
    from icemor.io.cache import DELETE_CACHE

    for p in src.glob(".part-*"):
        p.unlink()  # sidecars of an earlier run: the build is timed below
    DELETE_CACHE.clear()
    rng = np.random.default_rng(100)
    out: dict[str, Any] = {"rows": rows, "files": files, "lookup": [], "batch": []}
    for b in range(batches + 1):
        n_u = int(changes_per_batch * 0.8)
        ids = np.concatenate(
            [rng.integers(0, rows, n_u), rows + b * 10**6 + np.arange(changes_per_batch - n_u)]
        )
        ops = ["U" if i % 4 else "D" for i in range(n_u)] + ["I"] * (changes_per_batch - n_u)
        batch = pa.table({"op": ops, "id": ids, "qty": (ids % 10000) / 100})
        t0 = time.perf_counter()
        m = table.apply_changes(batch, key=["id"], deletes="position")
        elapsed = time.perf_counter() - t0
        if b == 0:
            out["first"] = (elapsed, m.lookup_seconds, m.files_searched)  # builds every index
        else:
            out["lookup"].append(m.lookup_seconds)
            out["batch"].append(elapsed)
            out["searched"] = m.files_searched
    icemor.drop_table(name)
    return out


def _floor_task(batches: Any) -> Any:
    yield pa.record_batch([pa.array([sum(b.num_rows for b in batches)])], names=["n"])


def _spark_floor(spark: Any, batch: Any, runs: int = 9) -> str:
    """Spark's fixed cost of the jobs a batch runs, doing nothing: an empty JVM job, a Python task
    (an RDD's, as the per-file delete units run), a batch's rows in one Python task (mapInArrow,
    as ``partitions=1``), and repartitioned by key over the default parallelism (the default)."""
    sc = spark.sparkContext
    jvm = median(lambda: sc.parallelize([1], 1).collect(), runs)
    python = median(
        lambda: sc.parallelize([b"x"], 1).mapPartitions(lambda it: [sum(1 for _ in it)]).collect(), runs
    )
    one = median(lambda: batch.coalesce(1).mapInArrow(_floor_task, "n long").collect(), runs)
    shuffled = median(
        lambda: batch.repartition(sc.defaultParallelism, "id").mapInArrow(_floor_task, "n long").collect(),
        runs,
    )
    return (
        f"  Spark's fixed cost, empty work (median of {runs}): a JVM job {jvm:.3f} s; a Python task "
        f"{python:.3f} s; a batch in one mapInArrow task {one:.3f} s; repartitioned by key "
        f"{shuffled:.3f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS, help="rows of base (default 10 M)")
    parser.add_argument("--changes", type=int, default=CHANGES)
    parser.add_argument("--batches", type=int, default=BATCHES)
    parser.add_argument("--runs", type=int, default=3, help="passes of the stream per mode (median)")
    parser.add_argument("--read-runs", type=int, default=3, help="cold reads per table and query")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--skip-spark", action="store_true", help="no Spark-engine apply")
    parser.add_argument("--spark-only", action="store_true", help="only the Spark-engine apply")
    parser.add_argument("--spark-batches", type=int, default=None, help="batches on Spark (default: all)")
    parser.add_argument("--big-rows", type=int, default=100_000_000, help="rows of the large table (0: skip)")
    parser.add_argument("--big-batches", type=int, default=5)
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    import icemor

    java = open_base(args.data_dir, args.rows)
    report.context.update(
        rows=args.rows, changes=args.changes, batches=args.batches, runs=args.runs, spark=java.spark.version
    )
    m = machine_info(java.spark.version)
    print(
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, Spark {m['spark']}, icemor {m['icemor']}"
    )
    print(f"Generating {args.changes:,} changes in {args.batches} batches ...", flush=True)
    batches = _batches(args.rows, args.changes, args.batches)
    expected = _expected(args.rows, batches)
    load0 = os.getloadavg()

    if args.spark_only:
        args.big_rows = 0
    print("Building the key indexes of base's data files ...", flush=True)
    build = _build_indexes(icemor, java)
    print(f"  key indexes of base's {args.rows:,} rows (10 files): built and stored in {build:.2f} s, once")
    report.add("key indexes of base's 10 files, built and stored once", build)

    results: dict[str, tuple[list[float], list[Any]]] = {}
    idents: dict[str, str] = {}
    for label, mode in MODES.items():
        if args.spark_only:
            break
        print(f"  apply: icemor local, {label} ...", flush=True)
        name = "cdcpos_" + label.split()[0] + str(mode[1])
        idents[label], results[label] = _passes(java, icemor, name, batches, mode, expected, args.runs)

    print(
        f"\napply_changes: {args.changes:,} changes (60% U, 20% D, 20% I, keys uniform over every file) onto "
        f"{args.rows:,} rows in {args.batches} batches, median of {args.runs} passes; checked through Java"
    )
    header = ["engine, mode", "total s", "changes/s", "per batch s (min / median / max)", "lookup s / batch"]
    table = [header]
    for label, (seconds, metrics) in results.items():
        total = sum(seconds)
        lookups = [x.lookup_seconds for x in metrics]
        table.append(
            [
                f"icemor local, {label}",
                f"{total:.2f}",
                f"{args.changes / total:,.0f}",
                f"{min(seconds):.3f} / {statistics.median(seconds):.3f} / {max(seconds):.3f}",
                f"{statistics.median(lookups):.4f}" if label.startswith("position") else "-",
            ]
        )
        report.add(f"apply_changes: icemor local, {label}", args.changes / total, "changes/s")
        if label.startswith("position"):
            report.add(f"apply_changes: icemor local, {label}, lookup per batch", statistics.median(lookups))
    print(render(table))
    for label, (_, metrics) in results.items():
        print(
            f"  {label}: {sum(x.rows_written for x in metrics):,} rows written, "
            f"{sum(x.equality_deletes for x in metrics):,} equality deletes, "
            f"{sum(x.position_deletes for x in metrics):,} rows deleted by position, "
            f"{sum(x.files_searched for x in metrics):,} file lookups"
        )
    print(f"Load average (1 min) before / after: {load0[0]:.1f} / {os.getloadavg()[0]:.1f}", flush=True)

    spark_rows: list[list[str]] = []
    if not args.skip_spark:
        n = args.spark_batches or args.batches
        sub = batches[:n]
        sub_expected = _expected(args.rows, sub)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, b in enumerate(sub):
                paths.append(str(Path(tmp) / f"batch-{i:03d}.parquet"))
                pq.write_table(b, paths[-1])
            inputs = [java.spark.read.parquet(p) for p in paths]
            print("  Spark warm-up (Python workers, JIT): 3 batches, not timed ...", flush=True)
            warm = _copy(java, "cdcpos_warm", 3)
            _apply_stream(icemor.load_table(warm), inputs[:3], "position")
            java.sql(f"DROP TABLE {java.qualified(warm)}")
            # partitions=1: a batch in one task, unshuffled, which also writes the deletes (one job)
            for label, tasks in (
                ("equality v2", None),
                ("position v3 (DVs)", None),
                ("position v3 (DVs)", 1),
            ):
                print(f"  apply: icemor on Spark, {label} ({n} batches, partitions={tasks}) ...", flush=True)
                ident, (seconds, _) = _passes(
                    java, icemor, "cdcpos_spark", inputs, MODES[label], sub_expected, 1, partitions=tasks
                )
                java.sql(f"DROP TABLE {java.qualified(ident)}")
                total = sum(seconds)
                changes = args.changes * n // args.batches
                spark_rows.append(
                    [
                        f"icemor on Spark {java.spark.sparkContext.master}, {label}"
                        + (f", partitions={tasks}" if tasks else ""),
                        f"{total:.2f}",
                        f"{changes / total:,.0f}",
                        f"{min(seconds):.3f} / {statistics.median(seconds):.3f} / {max(seconds):.3f}",
                    ]
                )
                print(render([header[:4], spark_rows[-1]]), flush=True)
                report.add(f"apply_changes: {spark_rows[-1][0]}", changes / total, "changes/s")
            floor_line = _spark_floor(java.spark, inputs[0])
            print(floor_line, flush=True)
            report.add("Spark's fixed cost per batch", None, "", note=floor_line.strip())
    load1 = os.getloadavg()
    print(f"Load average (1 min) after the Spark writes: {load1[0]:.1f}")

    if args.spark_only:
        report.write()
        java.stop()
        return 0
    print("Cold reads ...", flush=True)
    read_rows = [
        [
            "table",
            "query",
            "with deletes s",
            "same files, no deletes s",
            "ratio",
            "pyarrow: decode s / + filter s / ratio",
        ]
    ]
    ratios: dict[str, float] = {}
    for label, ident in idents.items():
        twin = _twin(java, ident)
        for query in ("narrow", "wide"):
            with_deletes = statistics.median(_cold_read(ident, query, args.read_runs, expected[0]))
            live_files = java.sql(f"SELECT sum(record_count) FROM {java.qualified(twin)}.data_files")[0][0]
            plain = statistics.median(_cold_read(twin, query, args.read_runs, int(live_files)))
            ratios[f"{label} {query}"] = with_deletes / plain
            floor = "-"
            if label.startswith("position"):
                raw, filtered = _floor(ident, query, args.read_runs)
                floor = f"{raw:.3f} / {filtered:.3f} / {filtered / raw:.2f}x"
            report.add(
                f"first cold read, {label}, {query}",
                with_deletes,
                ratio=with_deletes / plain,
                versus="the same files without deletes",
                note=None if floor == "-" else f"pyarrow alone: decode / + filter / ratio {floor}",
            )
            read_rows.append(
                [label, query, f"{with_deletes:.3f}", f"{plain:.3f}", f"{with_deletes / plain:.2f}x", floor]
            )
        java.sql(f"DROP TABLE {java.qualified(twin)}")
    load2 = os.getloadavg()
    print(
        f"\nFirst cold read (a new process each, median of {args.read_runs}; rows checked); last column: "
        "pyarrow alone on the same live files, decoded as they are and with the deleted positions "
        "removed (the floor of any reader on pyarrow, which cannot skip rows while decoding)"
    )
    print(render(read_rows))
    print(f"Load average (1 min) after the reads: {load2[0]:.1f}", flush=True)

    big = None
    if args.big_rows:
        print(f"Large table: {args.big_rows:,} rows ...", flush=True)
        big = _big(icemor, args.data_dir, args.big_rows, args.big_batches, args.changes // args.batches)
        print(
            f"\n{big['rows']:,} rows in {big['files']} files: first batch {big['first'][0]:.2f} s (builds "
            f"{big['first'][2]} key indexes); then per batch of {args.changes // args.batches:,} changes: "
            f"lookup {statistics.median(big['lookup']):.4f} s (median of {len(big['lookup'])}; "
            f"{big['searched']} files searched), whole batch {statistics.median(big['batch']):.3f} s"
        )
        small = statistics.median(x.lookup_seconds for x in results["position v3 (DVs)"][1])
        print(f"  vs {args.rows:,} rows: lookup {small:.4f} s per batch", flush=True)
        where = f"{big['rows']:,} rows in {big['files']} files"
        report.add(f"{where}: first batch (builds every key index)", big["first"][0])
        report.add(
            f"{where}: lookup per batch of {args.changes // args.batches:,} changes",
            statistics.median(big["lookup"]),
            ratio=statistics.median(big["lookup"]) / small,
            versus=f"{args.rows:,} rows",
        )
        report.add(f"{where}: whole batch", statistics.median(big["batch"]))

    print()
    best = max(args.changes / sum(results[k][0]) for k in MODES if k.startswith("position"))
    print(
        f"\nTarget: position mode >= {LOCAL_TARGET:,} changes/s locally: "
        f"{'pass' if best >= LOCAL_TARGET else 'FAIL'} ({best:,.0f})"
    )
    report.add(
        "position mode locally, the better of v2 and v3",
        best,
        "changes/s",
        target=f"≥ {LOCAL_TARGET:,} changes/s",
        passed=best >= LOCAL_TARGET,
    )
    if spark_rows:
        rate = max(float(r[2].replace(",", "")) for r in spark_rows if "position" in r[0])
        print(
            f"Target: position mode >= {SPARK_TARGET:,} changes/s on Spark: "
            f"{'pass' if rate >= SPARK_TARGET else 'FAIL'} ({rate:,.0f})"
        )
        report.add(
            "position mode on Spark, the best",
            rate,
            "changes/s",
            target=f"≥ {SPARK_TARGET:,} changes/s",
            passed=rate >= SPARK_TARGET,
        )
    for key in (
        "position v3 (DVs) narrow",
        "position v3 (DVs) wide",
        "position v2 narrow",
        "position v2 wide",
    ):
        r = ratios[key]
        verdict = "pass" if r <= READ_TARGET else "FAIL"
        print(f"Target: first cold read of {key} <= {READ_TARGET}x no deletes: {verdict} ({r:.2f}x)")
        report.add(
            f"first cold read of {key}, against no deletes",
            r,
            "×",
            target=f"≤ {READ_TARGET}×",
            passed=r <= READ_TARGET,
        )
    report.write()
    for ident in idents.values():
        java.sql(f"DROP TABLE {java.qualified(ident)}")
    java.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
