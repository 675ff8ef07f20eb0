"""Small-files benchmark: a table of many small data files and many global equality deletes, what
a streaming writer leaves behind (issue 41).

Run as ``.venv/bin/python benchmarks/bench_small_files.py`` (``make bench``). The table
(``bench.small`` in ``bench-data/small_files/``, built on first use and kept): ``--files`` data
files (20,000) of ``--rows`` rows (100) each, written with pyarrow and registered with
``add_files`` (one commit), then ``--batches`` CDC batches (50) through ``apply_changes``, each
deleting 1,000 ids and updating 1,000 (so 2,000 keys per equality-delete file, global: the table
is unpartitioned) and adding one small data file. Columns: ``id`` (the key), ``v`` (a string),
``qty`` (a long).

Timed, each against a raw pyarrow read of the same data files in the same run (pyarrow's
dataset reader, its own threads, no delete applied):

* **plan**: ``scan().plan_files()``, the first in the process (manifests decoded) and warm;
* **count**: ``scan().count()`` against a raw read of the key column (what applying the
  equality deletes needs; the row count alone is in the footers);
* **scan**: ``scan(selected_fields=("qty",)).to_arrow()`` against a raw read of ``qty`` and of
  ``id, qty`` (the key column is read to apply the equality deletes).

icemor runs with the on-disk verdict store off (``ICEMOR_VERDICT_CACHE=0``): the first count
probes every key; the warm runs use the verdicts kept in memory, as a long-lived process would.
Targets: plan <= 2 s, count and scan <= 1.5x the raw read of the columns they need. With
``--spark``: ``count(*)`` and the one-column scan ``sum(qty)`` through icemor on Spark against
Iceberg Java on the same Spark (``local[2]``), icemor first and warm, Java once (its first run)
with a time limit (``--java-limit``, reported as such). Every figure comes with the load
average seen (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from _report import Report

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "bench-data" / "small_files"
NAME = "bench.small"
MARKER = "built.json"
PLAN_MAX, READ_MAX = 2.0, 1.5


def _file(path: Path, lo: int, rows: int) -> None:
    ids = np.arange(lo, lo + rows, dtype=np.int64)
    pq.write_table(
        pa.table({"id": ids, "v": pa.array([f"v{i}" for i in ids.tolist()]), "qty": ids % 1000}), path
    )


def build(home: Path, files: int, rows: int, batches: int) -> dict[str, Any]:
    """Write the data files, register them, apply the CDC batches; return what a reader expects."""
    import icemor

    data = home / "parquet"
    data.mkdir(parents=True, exist_ok=True)
    paths = [data / f"part-{i:05d}.parquet" for i in range(files)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:  # (files of an earlier build are the same: kept)
        list(pool.map(lambda i: paths[i].exists() or _file(paths[i], i * rows, rows), range(files)))
    print(f"  wrote {files:,} files in {time.perf_counter() - t0:.1f} s", flush=True)
    schema = pq.read_schema(paths[0])
    t = icemor.create_table(NAME, schema)
    t0 = time.perf_counter()
    t.add_files([str(p) for p in paths])
    print(f"  registered them in {time.perf_counter() - t0:.1f} s", flush=True)
    rng = np.random.default_rng(41)
    total = files * rows
    live = np.ones(total + batches * 1000, dtype=bool)
    live[total:] = False
    qty = np.concatenate([np.arange(total, dtype=np.int64) % 1000, np.zeros(batches * 1000, np.int64)])
    t0 = time.perf_counter()
    for b in range(batches):
        gone = rng.choice(total, 1000, replace=False)
        changed = rng.choice(total, 1000, replace=False)
        changed = changed[~np.isin(changed, gone)]
        new = np.arange(total + b * 1000, total + (b + 1) * 1000, dtype=np.int64)
        ids = np.concatenate([gone, changed, new]).astype(np.int64)
        n_g, n_c = len(gone), len(changed)
        values = np.concatenate([np.zeros(n_g, np.int64), np.full(n_c + len(new), 7, np.int64)])
        changes = pa.table(
            {
                "id": ids,
                "v": pa.array([None] * n_g + [f"c{b}"] * (n_c + len(new)), pa.string()),
                "qty": values,
                "op": ["D"] * n_g + ["U"] * n_c + ["I"] * len(new),
            }
        )
        t.apply_changes(changes, key=["id"], allow_nullable_key=True)
        live[gone] = False
        live[changed] = True
        live[new] = True
        qty[changed] = 7
        qty[new] = 7
    print(f"  applied {batches} CDC batches in {time.perf_counter() - t0:.1f} s", flush=True)
    return {"rows": int(live.sum()), "qty": int(qty[live].sum())}


def _timed(fn: Any, runs: int) -> tuple[float, float, Any]:
    """The first call's seconds, the median of ``runs`` more, and the last result."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times) if times else first, out


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _spark(args: argparse.Namespace, home: Path, expected: dict[str, Any], report: Report) -> list[str]:
    """icemor on Spark and Iceberg Java on the same Spark: ``count(*)`` and a one-column scan."""
    import icemor
    from oracle import IcebergJava

    java = IcebergJava(home)
    spark = java.spark
    lines = []
    t = icemor.load_table(NAME)
    tasks = len(t.scan(selected_fields=("qty",)).plan_tasks())
    lines.append(f"  Spark local[{spark.sparkContext.defaultParallelism}]: {tasks:,} icemor tasks")
    print(lines[-1], flush=True)
    queries = {
        "count(*)": (lambda: (t.to_spark(spark, selected_fields=()).count(),), (expected["rows"],)),
        "sum(qty)": (
            lambda: (
                int(t.to_spark(spark, selected_fields=("qty",)).selectExpr("sum(qty)").collect()[0][0]),
            ),
            (expected["qty"],),
        ),
    }
    for what, (ours, want) in queries.items():
        first, warm, got = _timed(ours, args.runs)
        if got != want:
            msg = f"icemor on Spark {what}: {got}, expected {want}"
            raise RuntimeError(msg)
        lines.append(f"  icemor on Spark   {what}: first {first:7.2f} s, warm {warm:7.2f} s (load {_load()})")
        report.add(f"icemor on Spark {what}, first", first, note=f"load {_load()}")
        report.add(f"icemor on Spark {what}, warm", warm)
        print(lines[-1], flush=True)
    sc = spark.sparkContext
    for what, (_, want) in queries.items():
        result: list[Any] = []
        group = f"java-small-files-{what}"
        sc.setJobGroup(group, f"Iceberg Java {what}", interruptOnCancel=True)

        def java_read(what: str = what, result: list[Any] = result) -> None:
            t0 = time.perf_counter()
            try:
                row = java.sql(f"SELECT {what} FROM {java.qualified(NAME)}")[0]
                result.append((time.perf_counter() - t0, (int(row[0]),)))
            except Exception as e:  # cancelled at the limit
                result.append((time.perf_counter() - t0, e))

        th = threading.Thread(target=java_read, daemon=True)
        th.start()
        th.join(args.java_limit)
        if th.is_alive() or not result:
            sc.cancelJobGroup(group)
            th.join(60)
            lines.append(
                f"  Iceberg Java      {what}: not done within the limit of {args.java_limit:.0f} s"
                f" (load {_load()})"
            )
            report.add(f"Iceberg Java {what}, first", None, note=f"not done within {args.java_limit:.0f} s")
        else:
            secs, got_java = result[0]
            if got_java != want:
                lines.append(f"  Iceberg Java      {what}: {got_java!r} after {secs:.1f} s, expected {want}")
                report.add(f"Iceberg Java {what}, first", None, note=f"WRONG: {got_java!r}, expected {want}")
            else:
                lines.append(f"  Iceberg Java      {what}: first {secs:7.2f} s (load {_load()})")
                report.add(f"Iceberg Java {what}, first", secs, note=f"load {_load()}")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--runs", type=int, default=2, help="warm runs after the first")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--spark", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--java-limit", type=float, default=300.0, help="seconds Iceberg Java gets")
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    home = args.data_dir.resolve()
    layout = {"files": args.files, "rows": args.rows, "batches": args.batches, "version": 1}
    os.environ["ICEMOR_HOME"] = str(home)
    os.environ["ICEMOR_VERDICT_CACHE"] = "0"
    marker = home / MARKER
    built = json.loads(marker.read_text()) if marker.exists() else None
    if built is None or built.get("layout") != layout:
        import shutil

        for old in ("warehouse", "catalog.db"):
            path = home / old
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        (home / "warehouse").mkdir(parents=True)
        print(f"Building {NAME}: {args.files:,} files of {args.rows} rows, {args.batches} CDC batches ...")
        expected = build(home, args.files, args.rows, args.batches)
        marker.write_text(json.dumps({"layout": layout, "expected": expected}))
    else:
        expected = built["expected"]

    import icemor

    t = icemor.load_table(NAME)
    files = [p.data_file.path.removeprefix("file://") for p in t.scan().plan_files()]
    print(f"{NAME}: {len(files):,} data files, {expected['rows']:,} live rows; load {_load()}", flush=True)
    dataset = ds.dataset(files, format="parquet")

    plan_first, plan_warm, planned = _timed(lambda: icemor.load_table(NAME).scan().plan_files(), args.runs)
    deletes = len({d.path for p in planned for d in p.delete_files})
    print(
        f"  plan  {len(planned):,} files, {deletes} delete files: "
        f"first {plan_first:.2f} s, warm {plan_warm:.2f} s (load {_load()})",
        flush=True,
    )
    raw_id = _timed(lambda: dataset.to_table(columns=["id"]).num_rows, args.runs)
    print(f"  raw pyarrow read of id       {raw_id[1]:6.2f} s (first {raw_id[0]:.2f} s)", flush=True)
    count = _timed(lambda: icemor.load_table(NAME).scan().count(), args.runs)
    ratio = count[1] / raw_id[1]
    print(
        f"  count                        {count[1]:6.2f} s (first {count[0]:.2f} s) = {ratio:.2f}x raw id"
        f" (load {_load()})",
        flush=True,
    )
    raw_qty = _timed(lambda: dataset.to_table(columns=["qty"]).num_rows, args.runs)
    raw_id_qty = _timed(lambda: dataset.to_table(columns=["id", "qty"]).num_rows, args.runs)
    print(
        f"  raw pyarrow read of qty      {raw_qty[1]:6.2f} s; of id, qty {raw_id_qty[1]:6.2f} s", flush=True
    )
    scan = _timed(lambda: icemor.load_table(NAME).scan(selected_fields=("qty",)).to_arrow(), args.runs)
    print(
        f"  scan qty                     {scan[1]:6.2f} s (first {scan[0]:.2f} s) = "
        f"{scan[1] / raw_id_qty[1]:.2f}x raw id, qty ({scan[1] / raw_qty[1]:.2f}x raw qty) (load {_load()})",
        flush=True,
    )
    if count[2] != expected["rows"] or scan[2].num_rows != expected["rows"]:
        msg = f"count {count[2]}, scan {scan[2].num_rows} rows; expected {expected['rows']}"
        raise RuntimeError(msg)
    if int(scan[2].column("qty").to_numpy().sum()) != expected["qty"]:
        raise RuntimeError("sum(qty) differs from the model")
    ok = plan_first <= PLAN_MAX and count[1] <= READ_MAX * raw_id[1] and scan[1] <= READ_MAX * raw_id_qty[1]
    print(
        f"  targets (plan <= {PLAN_MAX} s, count and scan <= {READ_MAX}x the raw read they need): "
        f"{'met' if ok else 'NOT met'}"
    )
    report.add(
        f"plan {len(planned):,} files, {deletes} delete files, first",
        plan_first,
        target=f"≤ {PLAN_MAX} s",
        passed=plan_first <= PLAN_MAX,
    )
    report.add("plan, warm", plan_warm)
    report.add("raw pyarrow read of id", raw_id[1], note=f"first {raw_id[0]:.2f} s")
    report.against("count", count[1], raw_id[1], "raw id", limit=READ_MAX, note=f"first {count[0]:.2f} s")
    report.add("raw pyarrow read of qty", raw_qty[1])
    report.add("raw pyarrow read of id, qty", raw_id_qty[1])
    note = f"first {scan[0]:.2f} s; {scan[1] / raw_qty[1]:.2f}× raw qty"
    report.against("scan qty", scan[1], raw_id_qty[1], "raw id, qty", limit=READ_MAX, note=note)
    report.context.update(files=args.files, rows=args.rows, batches=args.batches, runs=args.runs)
    if args.spark:
        _spark(args, home, expected, report)  # (prints as it goes)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
