"""A CDC stream that keeps its table healthy by itself (issue 49): compaction in the writer on and off.

Run as ``.venv/bin/python benchmarks/bench_cdc_compaction.py`` (``make bench``). A 1,000,000-row
table (v2 and v3), then ``--batches`` (300; the issue's full run is 2,000) batches of 10,000
changes through ``apply_changes(..., deletes="position")``: 8,000 updates and 1,000 deletes of
random live keys, 1,000 inserts of new keys, so every batch touches every data file. Each
configuration runs twice, with ``icemor.cdc.compact.enabled`` on and off. Printed: the mean batch
time (compaction included) of batches 10-109 and of the last 100 (target: ratio <= 1.5), the
health score and read amplification every 100th batch (target: >= 90 and <= 2 with compaction),
a full scan at the end against the scan of a freshly compacted copy (target: <= 1.2x), and
whether the rows equal the model.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import Report

ROWS = 1_000_000
UPDATES, DELETES, INSERTS = 8_000, 1_000, 1_000
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int64())])


def _scan_seconds(table: object) -> tuple[float, pa.Table]:
    best, rows = float("inf"), None
    for _ in range(3):
        t0 = time.perf_counter()
        rows = table.scan().to_arrow()  # type: ignore[attr-defined]
        best = min(best, time.perf_counter() - t0)
    assert rows is not None
    return best, rows


def run(
    name: str, version: int, batches: int, *, rows_at_start: int, compact: bool, seed: int
) -> dict[str, object]:
    import icemor
    from icemor.maintenance.in_writer import COMPACT_ENABLED

    props = {COMPACT_ENABLED: "true" if compact else "false"}
    table = icemor.create_table(
        name, SCHEMA, identifier_fields=["id"], format_version=version, properties=props
    )
    n0 = rows_at_start
    table.append(pa.table({"id": np.arange(n0, dtype=np.int64), "n": np.zeros(n0, np.int64)}, schema=SCHEMA))
    capacity = n0 + INSERTS * batches
    alive = np.zeros(capacity, bool)
    alive[:n0] = True
    version_of = np.zeros(capacity, np.int64)
    rng = np.random.default_rng(seed)
    next_id = n0
    seconds: list[float] = []
    health: list[tuple[int, float, float]] = []
    for b in range(1, batches + 1):
        live = np.flatnonzero(alive)
        picked = rng.choice(live, UPDATES + DELETES, replace=False)
        updated, deleted = picked[:UPDATES], picked[UPDATES:]
        inserted = np.arange(next_id, next_id + INSERTS, dtype=np.int64)
        next_id += INSERTS
        ids = np.concatenate([updated, deleted, inserted]).astype(np.int64)
        ops = ["U"] * UPDATES + ["D"] * DELETES + ["I"] * INSERTS
        batch = pa.table({"op": ops, "id": ids, "n": np.full(len(ids), b, np.int64)})
        t0 = time.perf_counter()
        table.refresh().apply_changes(batch, key=["id"], deletes="position")
        seconds.append(time.perf_counter() - t0)
        alive[deleted] = False
        alive[inserted] = True
        version_of[updated] = b
        version_of[inserted] = b
        if b % 100 == 0:
            report = table.refresh().inspect()
            health.append((b, report.table.score, report.table.read_amplification.max))
    scan, rows = _scan_seconds(table.refresh())
    rows = rows.sort_by("id")
    want = np.flatnonzero(alive)
    exact = np.array_equal(rows.column("id").to_numpy(), want) and np.array_equal(
        rows.column("n").to_numpy(), version_of[want]
    )
    fresh = icemor.create_table(f"{name}_fresh", rows, format_version=version)
    fresh_scan, _ = _scan_seconds(fresh)
    early = float(np.mean(seconds[9:109]))
    late = float(np.mean(seconds[-100:]))
    return {
        "early": early,
        "late": late,
        "health": health,
        "scan": scan,
        "fresh_scan": fresh_scan,
        "exact": exact,
        "commits": len(list(table.pyiceberg.snapshots())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--rows", type=int, default=ROWS, help="rows at the start (a smoke run: fewer)")
    args = parser.parse_args(argv)
    if args.batches < 210:
        parser.error("--batches must be at least 210 (batches 10-109 against the last 100)")
    report = Report.of(__file__)
    report.context.update(batches=args.batches, rows=args.rows, changes_per_batch=UPDATES + DELETES + INSERTS)
    failed = False
    with tempfile.TemporaryDirectory(prefix="icemor-cdc-compaction-") as tmp:
        os.environ["ICEMOR_HOME"] = tmp
        for version in (2, 3):
            for compact in (True, False):
                label = f"v{version} position mode, compaction {'on' if compact else 'off'}"
                r = run(f"bench.cdc_v{version}_{'on' if compact else 'off'}", version, args.batches,
                        rows_at_start=args.rows, compact=compact, seed=args.seed)  # fmt: skip
                ratio = r["late"] / r["early"]  # type: ignore[operator]
                scan_ratio = r["scan"] / r["fresh_scan"]  # type: ignore[operator]
                health = r["health"]
                healthy = all(s >= 90 and a <= 2 for _, s, a in health)  # type: ignore[attr-defined]
                shown = ", ".join(f"{b}: {s:.0f}/{a:.0f}" for b, s, a in health)  # type: ignore[attr-defined]
                print(
                    f"{label}: batches 10-109 {r['early']:.3f} s, last 100 {r['late']:.3f} s ({ratio:.2f}x)"
                )
                print(f"  health score / read amplification every 100 batches: {shown}")
                print(
                    f"  full scan {r['scan']:.3f} s, fresh copy {r['fresh_scan']:.3f} s ({scan_ratio:.2f}x)"
                )
                print(f"  rows equal the model: {r['exact']}; snapshots {r['commits']}", flush=True)
                if compact:  # the targets are the writer's with its compaction; off is the baseline
                    failed |= not (ratio <= 1.5 and healthy and scan_ratio <= 1.2 and r["exact"])
                else:
                    failed |= not r["exact"]
                target = {} if not compact else {"target": "≤ 1.5×", "passed": ratio <= 1.5}
                report.add(f"{label}: last 100 batches / batches 10-109", round(ratio, 2), "×",
                           note=f"{r['early']:.3f} s -> {r['late']:.3f} s a batch", **target)  # fmt: skip
                target = {} if not compact else {"target": "≥ 90 / ≤ 2 each", "passed": healthy}
                report.add(f"{label}: health / read amplification every 100 batches", shown, "", **target)
                target = {} if not compact else {"target": "≤ 1.2×", "passed": scan_ratio <= 1.2}
                report.add(f"{label}: full scan / fresh copy's", round(scan_ratio, 2), "×",
                           note=f"{r['scan']:.3f} s vs {r['fresh_scan']:.3f} s", **target)  # fmt: skip
                report.add(f"{label}: rows equal the model", str(r["exact"]), "", target="True",
                           passed=bool(r["exact"]))  # fmt: skip
    report.write()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
