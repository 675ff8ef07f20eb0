"""Change-feed benchmark: the changes of one 10% DELETE on the 10 M-row bench table vs a scan.

Run as ``.venv/bin/python benchmarks/bench_changes.py``. The tables are the scan benchmark's
(``bench-data/``; built with Iceberg Java by ``bench_scan.py --build-only`` when missing). ``pos10``
is ``base``'s 10 data files followed by ``DELETE WHERE id % 10 = 3`` (one position-delete file per
data file): the changes of that last snapshot (its parent is ``base``'s content) are the 1 M deleted
rows. Timed warm, each call loading the table; a change cell and its scan alternate call by call
(median of ``--runs``, of a third of them for the wide pair, after one warm-up):

* ``changes narrow``: ``changes(parent, delete, selected_fields=("qty",))``, against ``scan narrow``
  (``scan(selected_fields=("qty",))``, the scan benchmark's narrow query) - the target is a
  ratio of at most 1.5;
* ``changes wide``: every column, against ``scan wide`` (every column, every live row).

Every result is checked (row count and sum of ``qty`` in cents against the scan of ``base`` minus
the scan of ``pos10``) before its time counts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
from _report import Report

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE.parent / "bench-data"
MARKER = "BUILD_COMPLETE.json"
TABLE = "bench.pos10"
TARGET_RATIO = 1.5


def cents(tbl: pa.Table) -> int:
    return int(pc.sum(pc.round(pc.multiply(tbl["qty"], 100))).as_py() or 0)


def timed_pair(cells: dict[str, Callable[[], Any]], runs: int) -> dict[str, tuple[float, Any]]:
    """Median seconds of each cell, timed in alternation (one call per cell per round) after a
    warm-up, so both sample the same minutes of a shared machine; and each one's result."""
    results = {name: fn() for name, fn in cells.items()}  # warm-up, checked by the caller
    times: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(runs):
        for name, fn in cells.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(times[name]), results[name]) for name in cells}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="icemor home of the bench tables")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per cell (after one warm-up)")
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    home = args.data_dir.resolve()
    if not (home / MARKER).is_file():
        print(f"building the bench tables in {home} (bench_scan.py --build-only) ...", flush=True)
        build = [sys.executable, str(HERE / "bench_scan.py"), "--build-only", "--data-dir", str(home)]
        subprocess.run(build, check=True)
    os.environ["ICEMOR_HOME"] = str(home)
    import logging

    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    import icemor

    table = icemor.load_table(TABLE)
    delete = table.metadata.current_snapshot()
    assert delete is not None and delete.parent_snapshot_id is not None
    parent = delete.parent_snapshot_id
    assert table.metadata.snapshot_by_id(parent).summary.operation.value == "append"  # type: ignore[union-attr]
    before = table.scan(snapshot_id=parent, selected_fields=("qty",)).to_arrow()
    after = table.scan(selected_fields=("qty",)).to_arrow()
    want_rows, want_cents = before.num_rows - after.num_rows, cents(before) - cents(after)

    def changes(fields: tuple[str, ...]) -> Callable[[], pa.Table]:
        def run() -> pa.Table:
            return (
                icemor.load_table(TABLE)
                .changes(parent, delete.snapshot_id, selected_fields=fields)
                .to_arrow()
            )

        return run

    def scan(fields: tuple[str, ...]) -> Callable[[], pa.Table]:
        return lambda: icemor.load_table(TABLE).scan(selected_fields=fields).to_arrow()

    results: dict[str, float] = {}
    groups = (
        ({"scan narrow": scan(("qty",)), "changes narrow": changes(("qty",))}, args.runs),
        ({"scan wide": scan(("*",)), "changes wide": changes(("*",))}, max(3, args.runs // 3)),
    )
    for cells, runs in groups:
        for name, (seconds, got) in timed_pair(cells, runs).items():
            if name.startswith("changes"):
                kinds = set(got["_change_type"].unique().to_pylist())
                if got.num_rows != want_rows or cents(got) != want_cents or kinds != {"DELETE"}:
                    msg = f"{name}: {got.num_rows} rows, {cents(got)} cents, {kinds}"
                    msg += f"; want {want_rows} rows, {want_cents} cents"
                    raise SystemExit(msg)
            results[name] = seconds
            print(f"  {name:<15} {seconds:8.3f} s   ({got.num_rows:,} rows; median of {runs})", flush=True)
            report.add(name, seconds, note=f"{got.num_rows:,} rows; median of {runs}")
    narrow = results["changes narrow"] / results["scan narrow"]
    wide = results["changes wide"] / results["scan wide"]
    verdict = "ok" if narrow <= TARGET_RATIO else f"ABOVE the target {TARGET_RATIO}"
    print(f"changes/scan: narrow {narrow:.2f}x ({verdict}), wide {wide:.2f}x  [{os.cpu_count()} CPUs]")
    report.add(
        "changes narrow, against scan narrow",
        narrow,
        "×",
        target=f"≤ {TARGET_RATIO}×",
        passed=narrow <= TARGET_RATIO,
    )
    report.add("changes wide, against scan wide", wide, "×")
    report.context.update(runs=args.runs)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
