"""optimize benchmark: ``Table.optimize()`` on copies of the scan bench's ``eq10`` and ``pos10``.

Run as ``.venv/bin/python benchmarks/bench_optimize.py`` (``make bench``). The tables are those of
``bench_scan.py`` (built there by Iceberg Java on first use, into ``bench-data/``); each is
registered from its metadata in a catalog of its own under ``bench-data/optimize/``, with new
files written there, so the scan bench's tables are never changed. For each table it prints:
the health score before and after, the optimize time against the time of the single maintenance
actions optimize chose (each on a fresh copy), and the narrow read (``qty``) after, against
``base``'s. The targets: score >= 90, narrow read <= 1.1x base, optimize <= 2x the
single actions. Every result is checked: the row count is the same before and after.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import Report
from bench_scan import DEFAULT_DATA_DIR, MARKER
from pyiceberg.catalog.sql import SqlCatalog

from icemor.table import Table

SCORE_MIN, READ_MAX, TIME_MAX = 90.0, 1.1, 2.0


def _copy(source: SqlCatalog, target: SqlCatalog, root: Path, name: str) -> Table:
    shutil.rmtree(root / name, ignore_errors=True)
    metadata = source.load_table(f"bench.{name}").metadata_location
    t = target.register_table(f"b.{name}", metadata)
    t.transaction().set_properties(
        {
            "write.data.path": f"file://{root}/{name}/data",
            "write.metadata.path": f"file://{root}/{name}/metadata",
        }
    ).commit_transaction()
    return Table(target.load_table(f"b.{name}"), target)


def _drop(target: SqlCatalog, root: Path, name: str) -> None:
    target.drop_table(f"b.{name}")
    shutil.rmtree(root / name, ignore_errors=True)


def _narrow(t: Table, runs: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(runs + 1):
        started = time.perf_counter()
        rows = t.scan(selected_fields=("qty",)).to_arrow().num_rows
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:]), rows


def _single(t: Table, action: str, thresholds: object) -> None:
    if action == "rewrite-data-files":
        t.maintenance.rewrite_data_files(
            delete_ratio_threshold=thresholds.major_delete_ratio,  # type: ignore[attr-defined]
            delete_file_threshold=1,
            target_file_size_bytes=thresholds.target_file_size_bytes,  # type: ignore[attr-defined]
        )
    elif action == "equality-to-position":
        t.maintenance.rewrite_equality_deletes()
    elif action == "compact-position-deletes":
        t.maintenance.rewrite_position_deletes()
    else:
        msg = f"no single action for {action!r}"
        raise ValueError(msg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--tables", nargs="+", default=["eq10", "pos10"])
    parser.add_argument("--runs", type=int, default=5, help="narrow reads timed (median), after one warm-up")
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    home: Path = args.data_dir.resolve()
    if not (home / MARKER).exists():
        build = [sys.executable, str(Path(__file__).resolve().parent / "bench_scan.py"), "--build-only"]
        subprocess.run([*build, "--data-dir", str(home)], check=True)
    os.environ["ICEMOR_HOME"] = str(home)
    root = home / "optimize"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    source = SqlCatalog("icemor", uri=f"sqlite:///{home}/catalog.db", warehouse=f"file://{home}/warehouse")
    target = SqlCatalog("optimize", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
    target.create_namespace("b")
    base_s, base_rows = _narrow(Table(source.load_table("bench.base"), source), args.runs)
    print(f"base: narrow read {base_s:.3f} s ({base_rows:,} rows)", flush=True)
    report.add("base: narrow read", base_s)
    failed = False
    for name in args.tables:
        t = _copy(source, target, root, name)
        before = t.inspect()
        rows_before = t.scan().count()
        started = time.perf_counter()
        result = t.optimize()
        seconds = time.perf_counter() - started
        rows_after = t.scan().count()
        if rows_after != rows_before:
            print(f"{name}: WRONG ROWS after optimize: {rows_after:,} != {rows_before:,}")
            return 1
        read_s, _ = _narrow(t, args.runs)
        _drop(target, root, name)
        single = 0.0
        for action in result.actions:
            copy = _copy(source, target, root, name)
            started = time.perf_counter()
            _single(copy, action.action, before.thresholds)
            single += time.perf_counter() - started
            _drop(target, root, name)
        after = result.score_after if result.score_after is not None else before.table.score
        ok = (
            after >= SCORE_MIN
            and read_s / base_s <= READ_MAX
            and (not single or seconds / single <= TIME_MAX)
        )
        failed |= not ok
        ratio = seconds / single if single else float("nan")
        actions = [a.action for a in result.actions]
        print(
            f"{name}: score {before.table.score:.1f} -> {after:.1f} (>= {SCORE_MIN:.0f}); "
            f"optimize {seconds:.2f} s = {ratio:.2f}x the single actions {actions} ({single:.2f} s; "
            f"<= {TIME_MAX}x); narrow read {read_s:.3f} s = {read_s / base_s:.2f}x base (<= {READ_MAX}x) "
            f"{'ok' if ok else 'MISSED'}",
            flush=True,
        )
        report.add(f"{name}: health score before", before.table.score, "")
        report.add(
            f"{name}: health score after", after, "", target=f"≥ {SCORE_MIN:.0f}", passed=after >= SCORE_MIN
        )
        singles = f"the single actions {', '.join(actions)}"
        report.against(f"{name}: optimize", seconds, single, singles, limit=TIME_MAX if single else None)
        report.against(f"{name}: narrow read after", read_s, base_s, "base", limit=READ_MAX)
    report.context.update(runs=args.runs)
    report.write()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
