"""v3 DELETE benchmark: merge-on-read DELETE of 10% of a 10 M-row format-version 3 table (deletion vectors).

Run as ``.venv/bin/python benchmarks/bench_v3_delete.py``. It uses ``bench.base`` of
``benchmarks/bench_write.py`` (built there on first use: 10 data files, each an id range). Every
timed DELETE runs on a fresh v3 copy: a format-version 3 table that registers base's 10 data
files (Java fast append, no data copied). Both engines write deletion vectors (one Puffin blob
per data file): icemor on the local engine, and Iceberg Java's merge-on-read ``DELETE FROM`` on
Spark, in the same session. Per engine one warm-up, then ``--runs`` timed runs; the medians and
icemor's ratio to Java are printed. Every result is checked through Iceberg Java (row count,
sum(id), and that the live delete files are Puffin DVs) before its time counts.
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
from _report import Report
from bench_scan import COLUMNS_DDL
from bench_write import DEFAULT_DATA_DIR, NAMESPACE, ROWS, _check, open_base

if TYPE_CHECKING:
    from collections.abc import Callable

CONDITION = "id % 10 = 3"
JAVA = "Iceberg Java on Spark (merge-on-read, DVs)"
ICEMOR = "icemor local (DVs)"


def _fresh_v3_copy(java: Any, n: int) -> str:
    """A new merge-on-read v3 table holding base's data files (registered, not copied)."""
    name = f"{NAMESPACE}.v3copy_{n}"
    java.sql(f"DROP TABLE IF EXISTS {java.qualified(name)}")
    java.create_table(name, COLUMNS_DDL, merge_on_read=True, format_version=3)
    base = java.java_table(f"{NAMESPACE}.base")
    append = java.java_table(name).newFastAppend()
    files = base.currentSnapshot().addedDataFiles(base.io()).iterator()
    while files.hasNext():
        append = append.appendFile(files.next())
    append.commit()
    return name


def _check_dvs(java: Any, name: str) -> None:
    rows = java.sql(f"SELECT file_format, referenced_data_file FROM {java.qualified(name)}.delete_files")
    formats = {str(r[0]) for r in rows}
    referenced = [r[1] for r in rows]
    if formats != {"PUFFIN"} or len(set(referenced)) != len(referenced):
        msg = f"{name}: live delete files {formats}, {len(referenced)} for {len(set(referenced))} data files"
        raise RuntimeError(msg)


def _time(
    java: Any, runs: int, counter: list[int], run: Callable[[str], None], check: tuple[int, int]
) -> list[float]:
    times = []
    for i in range(runs + 1):  # the first is the warm-up
        counter[0] += 1
        name = _fresh_v3_copy(java, counter[0])
        t0 = time.perf_counter()
        run(name)
        elapsed = time.perf_counter() - t0
        _check(java, name, *check)
        _check_dvs(java, name)
        java.sql(f"DROP TABLE {java.qualified(name)}")
        if i:
            times.append(elapsed)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    import icemor

    java = open_base(args.data_dir, args.rows)
    ids = np.arange(args.rows, dtype=np.int64)
    kept = ids[ids % 10 != 3]
    check = (len(kept), int(kept.sum()))
    counter = [0]
    engines: dict[str, Callable[[str], None]] = {
        JAVA: lambda name: java.sql(f"DELETE FROM {java.qualified(name)} WHERE {CONDITION}"),
        ICEMOR: lambda name: icemor.load_table(name).delete(CONDITION),
    }
    medians: dict[str, float] = {}
    for engine, run in engines.items():
        print(f"  DELETE WHERE {CONDITION} on a v3 copy: {engine} ...", flush=True)
        times = _time(java, args.runs, counter, run, check)
        medians[engine] = statistics.median(times)
        print(
            f"    runs {', '.join(f'{t:.2f}' for t in times)} s; median {medians[engine]:.2f} s", flush=True
        )
    ratio = medians[ICEMOR] / medians[JAVA]
    print(
        f"v3 DELETE 10% of {args.rows:,} rows: Iceberg Java {medians[JAVA]:.2f} s, "
        f"icemor local {medians[ICEMOR]:.2f} s, ratio {ratio:.2f}x (target <= 1.0x)"
    )
    report.add(f"DELETE {CONDITION}: {JAVA}", medians[JAVA])
    report.against(f"DELETE {CONDITION}: {ICEMOR}", medians[ICEMOR], medians[JAVA], "Iceberg Java", limit=1.0)
    report.context.update(rows=args.rows, runs=args.runs, spark=java.spark.version)
    report.write()
    java.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
