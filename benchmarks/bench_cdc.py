"""CDC benchmark: apply 1 M changes (60% U, 20% D, 20% I, uniform keys) to a 10 M-row copy of ``base``
in 10 batches with ``apply_changes``, locally and on Spark; then read the result.

Run as ``.venv/bin/python benchmarks/bench_cdc.py`` (``make bench``). ``bench.base`` is the write
benchmark's (``bench-data/write/``, built with Iceberg Java on first use: 10 data files, each an id
range). Each engine writes into a fresh copy that registers base's data files (no data copied) and
declares ``id`` NOT NULL (the key). The changes are generated up front (outside the timing):
updates and deletes of ids drawn uniformly from the base, inserts of new ids, full rows, shuffled
within each batch. Timed: the ``apply_changes`` calls (local: an Arrow table per batch; Spark: a
DataFrame reading the batch's Parquet file, made before the timing as the Arrow tables are: Spark
infers a Parquet schema with a job of its own, ~0.2 s, which is not apply_changes' work). Each
engine applies the whole stream ``--runs`` + 1 times, each time to a fresh copy; the first pass is
a warm-up and the median pass of the others counts, as in the write benchmark (Spark's first
batches pay its Python workers and JIT: measured, a cold stream 65 k changes/s, the third 217 k).
Every result is checked through Iceberg Java (count, sum(id), sum of qty in cents) against a numpy
model of the stream before its time counts.

Then the read benchmark's queries (narrow: count + sum(qty); wide: every column) on the locally
written table, side by side with a copy of base without changes: icemor local, icemor on Spark
(``auto``) and Iceberg Java on Spark, median of ``--runs`` warm runs after one warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _report import Report
from bench_scan import COLUMNS_DDL, EXACT_SQL, SPARK_SQL, machine_info, note_of, qty_cents, render
from bench_write import DEFAULT_DATA_DIR, NAMESPACE, ROWS, open_base

if TYPE_CHECKING:
    from collections.abc import Callable

CHANGES = 1_000_000
BATCHES = 10
SHARES = {"U": 0.6, "D": 0.2, "I": 0.2}
KEYED_DDL = COLUMNS_DDL.replace("id BIGINT", "id BIGINT NOT NULL", 1)


def _copy(java: Any, name: str) -> str:
    """A fresh table holding base's data files (registered, not copied), with ``id`` NOT NULL."""
    ident = f"{NAMESPACE}.{name}"
    java.sql(f"DROP TABLE IF EXISTS {java.qualified(ident)}")
    java.create_table(ident, KEYED_DDL, merge_on_read=True)
    base = java.java_table(f"{NAMESPACE}.base")
    append = java.java_table(ident).newFastAppend()
    files = base.currentSnapshot().addedDataFiles(base.io()).iterator()
    while files.hasNext():
        append = append.appendFile(files.next())
    append.commit()
    return ident


def _cents(ids: np.ndarray, batch: int) -> np.ndarray:
    return (ids * 7919 + batch * 131) % 10000


def _batches(rows: int, changes: int, batches: int, seed: int = 10) -> list[pa.Table]:
    """The change batches: full rows, ops shuffled within each batch, inserts of new ids."""
    rng = np.random.default_rng(seed)
    per = changes // batches
    n_u, n_d = int(per * SHARES["U"]), int(per * SHARES["D"])
    n_i = per - n_u - n_d
    out = []
    for b in range(batches):
        ids = np.concatenate(
            [rng.integers(0, rows, n_u), rng.integers(0, rows, n_d), rows + b * n_i + np.arange(n_i)]
        ).astype(np.int64)
        ops = np.array(["U"] * n_u + ["D"] * n_d + ["I"] * n_i)
        order = rng.permutation(per)
        ids, ops = ids[order], ops[order]
        out.append(
            pa.table(
                {
                    "op": pa.array(ops, pa.string()),
                    "id": pa.array(ids, pa.int64()),
                    "k1": pa.array(ids % 1000, pa.int32()),
                    "k2": pa.array([f"cat{i % 97}" for i in ids.tolist()], pa.string()),
                    "qty": pa.array(_cents(ids, b + 1) / 100, pa.float64()),
                    "ts": pa.array((1_700_000_000 + ids) * 1_000_000, pa.timestamp("us", tz="UTC")),
                    "note": note_of(ids),
                }
            )
        )
    return out


def _expected(rows: int, batches: list[pa.Table]) -> tuple[int, int, int]:
    """count, sum(id), sum(qty cents) after the stream: the last op of each key in a batch wins."""
    total = rows + sum(int(pc.sum(pc.equal(b["op"], "I")).as_py()) for b in batches)
    alive = np.zeros(total, dtype=bool)
    alive[:rows] = True
    cents = np.zeros(total, dtype=np.int64)
    cents[:rows] = _cents(np.arange(rows, dtype=np.int64), 0)
    for n, b in enumerate(batches):
        ids = b["id"].to_numpy()
        ops = b["op"].to_numpy(zero_copy_only=False)
        last = len(ids) - 1 - np.unique(ids[::-1], return_index=True)[1]  # last row of each id
        keys, final = ids[last], ops[last]
        alive[keys] = final != "D"
        cents[keys] = np.where(final != "D", _cents(keys, n + 1), cents[keys])
    live = np.flatnonzero(alive)
    return len(live), int(live.sum()), int(cents[live].sum())


def _check(java: Any, ident: str, expected: tuple[int, int, int]) -> None:
    row = java.sql(EXACT_SQL.format(table=java.qualified(ident)))[0]
    got = (int(row[0]), int(row[1]), int(row[2]))
    if got != expected:
        msg = f"{ident}: Java reads (count, sum(id), qty cents) {got}, expected {expected}"
        raise RuntimeError(msg)


def _apply_all(table: Any, inputs: list[Any]) -> tuple[list[float], list[Any]]:
    seconds, metrics = [], []
    for batch in inputs:
        t0 = time.perf_counter()
        m = table.apply_changes(batch() if callable(batch) else batch, key=["id"])
        seconds.append(time.perf_counter() - t0)
        metrics.append(m)
    return seconds, metrics


def _passes(
    java: Any, icemor: Any, name: str, inputs: list[Any], expected: tuple[int, int, int], runs: int
) -> tuple[str, tuple[list[float], list[Any]]]:
    """Apply the stream ``runs`` + 1 times, each to a fresh copy ``name`` checked through Java;
    the first is a warm-up. Returns the last copy and the median timed pass (per-batch seconds,
    metrics)."""
    passes = []
    for i in range(runs + 1):
        ident = _copy(java, name)
        done = _apply_all(icemor.load_table(ident), inputs)
        _check(java, ident, expected)
        if i:
            passes.append(done)
    passes.sort(key=lambda p: sum(p[0]))
    return ident, passes[len(passes) // 2]


def _timed(fn: Callable[[], Any], runs: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _read_local(icemor: Any, ident: str, query: str, want: tuple[int, int, int]) -> None:
    fields = ("qty",) if query == "narrow" else ("*",)
    tbl = icemor.load_table(ident).scan(selected_fields=fields).to_arrow()
    if tbl.num_rows != want[0] or qty_cents(tbl["qty"]) != want[2]:
        msg = f"icemor local reads {tbl.num_rows} rows of {ident}, expected {want[0]} (or qty differs)"
        raise RuntimeError(msg)


def _read_on_spark(java: Any, icemor: Any, ident: str, query: str, want: tuple[int, int, int]) -> None:
    fields = ("qty",) if query == "narrow" else ("*",)
    df = icemor.load_table(ident).to_spark(java.spark, strategy="auto", selected_fields=fields)
    df.createOrReplaceTempView(f"cdc_{query}")
    got = java.spark.sql(SPARK_SQL[query].format(table=f"cdc_{query}")).collect()[0]
    if int(got[0]) != want[0]:
        msg = f"icemor on Spark reads {got[0]} rows of {ident}, expected {want[0]}"
        raise RuntimeError(msg)


def _read_java(java: Any, ident: str, query: str, want: tuple[int, int, int]) -> None:
    got = java.sql(SPARK_SQL[query].format(table=java.qualified(ident)))[0]
    if int(got[0]) != want[0]:
        msg = f"Java reads {got[0]} rows of {ident}, expected {want[0]}"
        raise RuntimeError(msg)


def _reads(
    java: Any,
    icemor: Any,
    idents: dict[str, str],
    expected: dict[str, tuple[int, int, int]],
    runs: int,
    report: Report,
) -> list[list[str]]:
    rows = [["table", "query", "engine", "median s", "runs", "vs Java"]]
    for label, ident in idents.items():
        want = expected[label]
        for query in ("narrow", "wide"):
            engines: dict[str, Callable[[], None]] = {
                "icemor local": partial(_read_local, icemor, ident, query, want),
                "icemor on Spark": partial(_read_on_spark, java, icemor, ident, query, want),
                "Iceberg Java": partial(_read_java, java, ident, query, want),
            }
            times = {}
            for engine, fn in engines.items():
                print(f"  read {label} {query}: {engine} ...", flush=True)
                times[engine] = _timed(fn, runs)
            java_med = statistics.median(times["Iceberg Java"])
            for engine, ts in times.items():
                med = statistics.median(ts)
                runs_text = " ".join(f"{t:.2f}" for t in ts)
                rows.append([label, query, engine, f"{med:.3f}", runs_text, f"{med / java_med:.2f}x"])
                java_ratio = None if engine == "Iceberg Java" else med / java_med
                report.add(f"read {label}, {query}: {engine}", med, ratio=java_ratio, versus="Iceberg Java")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS, help="rows of base (default 10 M)")
    parser.add_argument("--changes", type=int, default=CHANGES)
    parser.add_argument("--batches", type=int, default=BATCHES)
    parser.add_argument("--runs", type=int, default=3, help="timed passes and read runs after a warm-up")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--skip-spark", action="store_true", help="no Spark-engine apply")
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    import icemor

    java = open_base(args.data_dir, args.rows)

    print(f"Generating {args.changes:,} changes in {args.batches} batches ...", flush=True)
    batches = _batches(args.rows, args.changes, args.batches)
    expected = _expected(args.rows, batches)
    base_ids = np.arange(args.rows, dtype=np.int64)
    expected_base = (args.rows, int(base_ids.sum()), int(_cents(base_ids, 0).sum()))

    results: dict[str, tuple[list[float], list[Any]]] = {}
    load0 = os.getloadavg()
    print("  apply: icemor local ...", flush=True)
    local_ident, results["icemor local"] = _passes(java, icemor, "cdc_local", batches, expected, args.runs)

    if not args.skip_spark:
        print("  apply: icemor on Spark ...", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for n, b in enumerate(batches):
                paths.append(str(Path(tmp) / f"batch-{n:03d}.parquet"))
                pq.write_table(b, paths[-1])
            inputs = [java.spark.read.parquet(p) for p in paths]  # lazy but for the schema
            spark_ident, results["icemor on Spark"] = _passes(
                java, icemor, "cdc_spark", inputs, expected, args.runs
            )
        java.sql(f"DROP TABLE {java.qualified(spark_ident)}")
    load1 = os.getloadavg()
    master = java.spark.sparkContext.master
    for engine, (seconds, _) in results.items():
        rate = args.changes / sum(seconds)
        where = f" ({master})" if engine == "icemor on Spark" else ""
        report.add(f"apply_changes: {engine}, total", sum(seconds))
        report.add(
            f"apply_changes: {engine}{where}",
            rate,
            "changes/s",
            target="≥ 200,000 changes/s",
            passed=rate >= 200_000,
        )

    summary = java.sql(
        f"SELECT content, count(*), sum(record_count) FROM {java.qualified(local_ident)}.files "
        "GROUP BY content ORDER BY content"
    )
    print("Reading the result ...", flush=True)
    base_ident = _copy(java, "cdc_base")
    reads = _reads(
        java,
        icemor,
        {"base copy": base_ident, "after CDC": local_ident},
        {"base copy": expected_base, "after CDC": expected},
        args.runs,
        report,
    )
    load2 = os.getloadavg()

    m = machine_info(java.spark.version)
    print(
        f"\nMachine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, Spark {m['spark']}, icemor {m['icemor']}"
    )
    print(
        f"Load average (1 min) before / after the writes / after the reads: "
        f"{load0[0]:.1f} / {load1[0]:.1f} / {load2[0]:.1f}"
    )
    print(
        f"apply_changes: {args.changes:,} changes (60% U, 20% D, 20% I, uniform keys) onto "
        f"{args.rows:,} rows in {args.batches} batches, median of {args.runs} passes after a warm-up; "
        "checked through Iceberg Java"
    )
    table = [["engine", "total s", "changes/s", "per batch s (min / median / max)"]]
    for engine, (seconds, _) in results.items():
        total = sum(seconds)
        table.append(
            [
                engine,
                f"{total:.2f}",
                f"{args.changes / total:,.0f}",
                f"{min(seconds):.3f} / {statistics.median(seconds):.3f} / {max(seconds):.3f}",
            ]
        )
    print(render(table))
    local_metrics = results["icemor local"][1]
    print(
        "Per run: "
        f"{sum(x.rows_written for x in local_metrics):,} rows written, "
        f"{sum(x.equality_deletes for x in local_metrics):,} equality deletes, "
        f"{sum(x.position_deletes for x in local_metrics):,} position deletes; the result's files "
        + ", ".join(
            f"{['data', 'position', 'equality'][int(r[0])]} {int(r[1])} ({int(r[2]):,} rows)" for r in summary
        )
    )
    print(f"\nRead (median of {args.runs} warm runs after a warm-up; rows checked):")
    print(render(reads))
    local_total = sum(results["icemor local"][0])
    rate = args.changes / local_total
    print(
        f"\nTarget: >= 200,000 changes/s on the local engine: "
        f"{'pass' if rate >= 200_000 else 'FAIL'} ({rate:,.0f})"
    )
    if "icemor on Spark" in results:
        rate = args.changes / sum(results["icemor on Spark"][0])
        print(
            f"Target: >= 200,000 changes/s on Spark ({java.spark.sparkContext.master}): "
            f"{'pass' if rate >= 200_000 else 'FAIL'} ({rate:,.0f})"
        )
    report.context.update(
        rows=args.rows, changes=args.changes, batches=args.batches, runs=args.runs, spark=java.spark.version
    )
    report.write()
    java.sql(f"DROP TABLE {java.qualified(base_ident)}")
    java.sql(f"DROP TABLE {java.qualified(local_ident)}")
    java.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
