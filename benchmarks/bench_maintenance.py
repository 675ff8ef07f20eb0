"""Maintenance benchmark: pos10 (10% of rows position-deleted) before and after major compaction.

Run as ``.venv/bin/python benchmarks/bench_maintenance.py`` (``make bench``). It shares
``bench-data/write/`` with ``bench_write.py`` (``bench.base``, 10 M rows in 10 id-range data
files, built by Iceberg Java on first use). Each run takes a fresh copy of base (its data
files registered, not copied), deletes 10 % of the rows with Iceberg Java's merge-on-read
``DELETE ... WHERE id % 10 = 3`` (one position-delete file per data file: pos10), reads it,
compacts it with ``rewrite_data_files(delete_file_threshold=1)`` and reads it again; base is
read the same way for comparison. Reads are icemor local, warm (the median of 5 reads after
one warm-up read): narrow (``qty``, then count and sum) and all columns to Arrow; Java's
narrow ``count(*), sum(qty)`` too. Every result is checked (rows, sum(id) through Java;
sum(qty) in cents through icemor) before its time counts. Seconds, median of ``--runs`` runs
after a warm-up run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
import pyarrow.compute as pc
from _report import Report
from bench_scan import machine_info, render
from bench_write import DEFAULT_DATA_DIR, NAMESPACE, ROWS, _check, _fresh_copy, open_base

if TYPE_CHECKING:
    from collections.abc import Callable


def _loadavg() -> str:
    p = Path("/proc/loadavg")
    return " ".join(p.read_text().split()[:3]) if p.exists() else "?"


def _cents(values: Any) -> int:
    return int(pc.sum(pc.cast(pc.round(pc.multiply(values, 100)), "int64")).as_py() or 0)


READS = 5


def _warm(read: Callable[[], tuple[int, int]], expected: tuple[int, int], what: str) -> float:
    """The median of READS reads after one warm-up read, each checked."""
    times = []
    for i in range(READS + 1):
        t0 = time.perf_counter()
        got = read()
        elapsed = time.perf_counter() - t0
        if got != expected:
            msg = f"{what}: read (rows, qty cents) {got}, expected {expected}"
            raise RuntimeError(msg)
        if i:
            times.append(elapsed)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    import icemor

    load_start = _loadavg()
    java = open_base(args.data_dir, args.rows)

    ids = np.arange(args.rows, dtype=np.int64)
    qty_cents = ids * 7919 % 10000  # qty = (id * 7919 % 10000) / 100
    kept = ids % 10 != 3
    base_expect = (args.rows, int(qty_cents.sum()))
    pos10_expect = (int(kept.sum()), int(qty_cents[kept].sum()))
    java_check = (int(kept.sum()), int(ids[kept].sum()))

    def narrow(name: str) -> Callable[[], tuple[int, int]]:
        def read() -> tuple[int, int]:
            t = icemor.load_table(name).scan(selected_fields=("qty",)).to_arrow()
            return t.num_rows, _cents(t.column("qty"))

        return read

    def wide(name: str) -> Callable[[], tuple[int, int]]:
        def read() -> tuple[int, int]:
            t = icemor.load_table(name).scan().to_arrow()
            return t.num_rows, _cents(t.column("qty"))

        return read

    def java_narrow(name: str) -> float:
        query = f"SELECT count(*), sum(qty) FROM {java.qualified(name)}"
        java.sql(query)
        times = []
        for _ in range(READS):
            t0 = time.perf_counter()
            java.sql(query)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    times: dict[str, list[float]] = {}

    def note(label: str, seconds: float, run: int) -> None:
        if run:  # run 0 is the warm-up
            times.setdefault(label, []).append(seconds)

    base = f"{NAMESPACE}.base"
    counter = [10_000]
    detail: dict[str, Any] = {}
    for run in range(args.runs + 1):
        print(f"  run {run} ({'warm-up' if run == 0 else 'timed'}) ...", flush=True)
        note("base: icemor narrow", _warm(narrow(base), base_expect, "base narrow"), run)
        note("base: icemor all columns", _warm(wide(base), base_expect, "base wide"), run)
        note("base: Java narrow", java_narrow(base), run)
        counter[0] += 1
        name = _fresh_copy(java, counter[0])
        java.sql(f"DELETE FROM {java.qualified(name)} WHERE id % 10 = 3")
        deletes = java.sql(f"SELECT count(*) FROM {java.qualified(name)}.delete_files")[0][0]
        if deletes != 10:
            msg = f"pos10 copy has {deletes} delete files, expected one per data file (10)"
            raise RuntimeError(msg)
        note("pos10: icemor narrow", _warm(narrow(name), pos10_expect, "pos10 narrow"), run)
        note("pos10: icemor all columns", _warm(wide(name), pos10_expect, "pos10 wide"), run)
        note("pos10: Java narrow", java_narrow(name), run)
        t0 = time.perf_counter()
        m = icemor.load_table(name).maintenance.rewrite_data_files(delete_file_threshold=1)
        note("major compaction (icemor local)", time.perf_counter() - t0, run)
        left = java.sql(f"SELECT count(*) FROM {java.qualified(name)}.delete_files")[0][0]
        if m.data_files_rewritten != 10 or left != 0:
            msg = f"compaction rewrote {m.data_files_rewritten} files and left {left} delete files"
            raise RuntimeError(msg)
        _check(java, name, *java_check)
        detail = {"added": m.data_files_added, "bytes_in": m.bytes_rewritten, "bytes_out": m.bytes_added}
        note("pos10 compacted: icemor narrow", _warm(narrow(name), pos10_expect, "compacted narrow"), run)
        note("pos10 compacted: icemor all columns", _warm(wide(name), pos10_expect, "compacted wide"), run)
        note("pos10 compacted: Java narrow", java_narrow(name), run)
        java.sql(f"DROP TABLE {java.qualified(name)}")

    m = machine_info(java.spark.version)
    print(
        f"\nMachine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, Spark {m['spark']}, icemor {m['icemor']}; "
        f"load average {load_start} at start, {_loadavg()} at end"
    )
    print(
        f"pos10 ({args.rows:,} rows, 10 % deleted by Java, one position-delete file per data file) before "
        f"and after rewrite_data_files(delete_file_threshold=1), and base; seconds: each read the median of "
        f"{READS} warm reads, each cell the median over {args.runs} runs after a warm-up run"
    )
    table = [["", "median s", "runs"]]
    table += [[k, f"{statistics.median(v):.3f}", " ".join(f"{t:.2f}" for t in v)] for k, v in times.items()]
    print(render(table))
    for k, v in times.items():
        report.add(k, statistics.median(v))
    print(
        f"Compaction wrote {detail.get('added')} data files, {detail.get('bytes_out', 0) / 2**20:.0f} "
        f"MiB (from 10 files, {detail.get('bytes_in', 0) / 2**20:.0f} MiB)."
    )
    for q in ("narrow", "all columns"):
        after = statistics.median(times[f"pos10 compacted: icemor {q}"])
        plain = statistics.median(times[f"base: icemor {q}"])
        print(f"  icemor {q}: compacted pos10 / base = {after / plain:.2f}x (target: as fast as base)")
        report.add(
            f"pos10 compacted: icemor {q}, against base",
            after / plain,
            "×",
            target="≤ 1.0× (as fast as base)",
            passed=after <= plain,
        )
    report.add(
        "compaction output",
        detail.get("added"),
        "data files",
        note=f"{detail.get('bytes_out', 0) / 2**20:.0f} MiB, from 10 files of "
        f"{detail.get('bytes_in', 0) / 2**20:.0f} MiB",
    )
    report.context.update(rows=args.rows, runs=args.runs, reads=READS, spark=java.spark.version)
    report.write()
    java.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
