"""Write benchmark: merge-on-read DELETE, UPDATE and MERGE of 10% of the rows of a 10 M-row table.

Run as ``.venv/bin/python benchmarks/bench_write.py`` (``make bench``). The first run builds
``bench.base`` with Iceberg Java in ``bench-data/write/`` (10 data files, each an id range, so
a 10% delete touches every file). Every timed DELETE runs on a fresh copy:
a table that registers base's 10 data files (Java fast append, no data copied), so runs do not
see each other's deletes. Per engine: one warm-up, then ``--runs`` timed runs, median printed.
Every result is checked through Iceberg Java (row count, sum(id)) before its time counts.

Engines: icemor local, icemor with the per-file work on Spark executors, Iceberg Java's
merge-on-read ``DELETE FROM`` on Spark, and pyiceberg 0.12 (copy-on-write only).

UPDATE (``SET qty = qty + 1 WHERE id % 10 = 3``) and MERGE (a 1 M-row source, half matching
ids spread over every data file, half new; ``UPDATE SET *`` / ``INSERT *``) run against Iceberg
Java's merge-on-read ``UPDATE`` / ``MERGE INTO`` the same way, each result checked exactly
(count, sum(id), sum of qty in cents) through Java. Java's MERGE and icemor's Spark-engine MERGE
read the same source: a temporary view's DataFrame built once (the local engine takes the Arrow
table). The same ``MERGE INTO`` text also runs through ``icemor.spark.sql`` (parsed, then the same
builder on Spark): its time must be within 5% of the builder's, and its parse time is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
from _report import Report
from bench_scan import COLUMNS_DDL, SELECT_ROWS, machine_info, one_line, render

if TYPE_CHECKING:
    from collections.abc import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "bench-data" / "write"
MARKER = "BUILD_COMPLETE.json"
LAYOUT = "range-10-v1"  # bump when the build changes: a stale layout is rebuilt, never reused
NAMESPACE = "bench"
ROWS = 10_000_000
# (label, icemor/pyiceberg filter or None where it cannot express it, Spark SQL condition)
PREDICATES = [
    ("k1 < 100", "k1 < 100", "k1 < 100"),
    ("id % 10 = 3", "id % 10 = 3", "id % 10 = 3"),
]
# pyiceberg's filter language has no arithmetic: its DELETE cannot express this one
PYICEBERG_CANNOT = {"id % 10 = 3"}
MERGE_SOURCE_ROWS = 1_000_000
EXACT = "SELECT count(*), sum(id), sum(CAST(round(qty * 100) AS BIGINT)) FROM {table}"


def _build(java: Any, home: Path, rows: int) -> None:
    spark = java.spark
    java.create_namespace(NAMESPACE)
    java.sql(f"DROP TABLE IF EXISTS {java.qualified(NAMESPACE + '.base')}")
    java.create_table(
        f"{NAMESPACE}.base", COLUMNS_DDL, merge_on_read=True, properties={"write.distribution-mode": "none"}
    )
    df = spark.sql(SELECT_ROWS.format(rows=rows)).repartitionByRange(10, "id").sortWithinPartitions("id")
    df.writeTo(java.qualified(f"{NAMESPACE}.base")).append()
    n = java.sql(f"SELECT count(*) FROM {java.qualified(NAMESPACE + '.base')}.data_files")[0][0]
    if n != 10:
        msg = f"base has {n} data files, expected 10"
        raise RuntimeError(msg)
    (home / MARKER).write_text(json.dumps({"rows": rows, "layout": LAYOUT}))


def open_base(data_dir: Path, rows: int) -> Any:
    """Iceberg Java on the bench home ``data_dir`` (also icemor's), with ``bench.base`` built
    there first unless a complete build of this size and layout is already there."""
    home = data_dir.resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["ICEMOR_HOME"] = str(home)
    from oracle import IcebergJava

    java = IcebergJava(home)
    marker = json.loads((home / MARKER).read_text()) if (home / MARKER).exists() else None
    if marker != {"rows": rows, "layout": LAYOUT}:
        print(f"Building bench.base ({rows:,} rows, 10 id-range files) with Iceberg Java ...", flush=True)
        t0 = time.perf_counter()
        _build(java, home, rows)
        print(f"  built in {time.perf_counter() - t0:.1f} s", flush=True)
    return java


def _fresh_copy(java: Any, n: int) -> str:
    """A new merge-on-read table holding base's data files (registered, not copied)."""
    name = f"{NAMESPACE}.copy_{n}"
    java.sql(f"DROP TABLE IF EXISTS {java.qualified(name)}")
    java.create_table(name, COLUMNS_DDL, merge_on_read=True)
    base = java.java_table(f"{NAMESPACE}.base")
    append = java.java_table(name).newFastAppend()
    files = base.currentSnapshot().addedDataFiles(base.io()).iterator()
    while files.hasNext():
        append = append.appendFile(files.next())
    append.commit()
    return name


def _check(java: Any, name: str, expected_rows: int, expected_id_sum: int) -> None:
    got = java.sql(f"SELECT count(*), sum(id) FROM {java.qualified(name)}")[0]
    if (int(got[0]), int(got[1])) != (expected_rows, expected_id_sum):
        msg = (
            f"{name}: Java reads {got[0]} rows, sum(id) {got[1]}; expected {expected_rows}, {expected_id_sum}"
        )
        raise RuntimeError(msg)


def _check_exact(java: Any, name: str, expected: tuple[int, int, int]) -> None:
    got = java.sql(EXACT.format(table=java.qualified(name)))[0]
    if tuple(int(v) for v in got) != expected:
        msg = f"{name}: Java reads (count, sum(id), sum(qty cents)) = {tuple(got)}, expected {expected}"
        raise RuntimeError(msg)


def _time(
    java: Any,
    runs: int,
    counter: list[int],
    run: Callable[[str], None],
    check: tuple[int, int] | tuple[int, int, int],
) -> list[float]:
    times = []
    for i in range(runs + 1):  # the first is the warm-up
        counter[0] += 1
        name = _fresh_copy(java, counter[0])
        t0 = time.perf_counter()
        run(name)
        elapsed = time.perf_counter() - t0
        if len(check) == 3:
            _check_exact(java, name, check)
        else:
            _check(java, name, *check)
        java.sql(f"DROP TABLE {java.qualified(name)}")
        if i:
            times.append(elapsed)
    return times


def _eq10_copy(java: Any, n: int, ids: Any) -> str:
    """A fresh copy of base with id % 10 = 3 deleted by 5 equality-delete files (one RowDelta)."""
    import pyarrow as pa

    name = _fresh_copy(java, n)
    field = java.field_ids(name)["id"]
    deleted = ids[ids % 10 == 3]
    files = [
        java.write_equality_delete_file(name, pa.table({"id": pa.array(deleted[deleted % 50 == b])}), [field])
        for b in range(3, 50, 10)
    ]
    java.commit_row_delta(name, delete_files=files)
    return name


def _bench_conversion(java: Any, icemor: Any, runs: int, counter: list[int], ids: Any) -> list[list[str]]:
    kept = ids[ids % 10 != 3]
    check = (len(kept), int(kept.sum()))
    convert, before, after = [], [], []

    def narrow(name: str) -> float:
        t0 = time.perf_counter()
        tbl = icemor.load_table(name).scan(selected_fields=("qty",)).to_arrow()
        elapsed = time.perf_counter() - t0
        if tbl.num_rows != check[0]:
            msg = f"{name}: icemor reads {tbl.num_rows} rows, expected {check[0]}"
            raise RuntimeError(msg)
        return elapsed

    for i in range(runs + 1):
        counter[0] += 1
        name = _eq10_copy(java, counter[0], ids)
        narrow(name)  # warm the delete cache as a repeated query would
        b = narrow(name)
        t0 = time.perf_counter()
        m = icemor.load_table(name).maintenance.rewrite_equality_deletes()
        c = time.perf_counter() - t0
        if m.equality_delete_files_removed != 5:
            msg = f"conversion removed {m.equality_delete_files_removed} equality delete files, expected 5"
            raise RuntimeError(msg)
        _check(java, name, *check)
        narrow(name)
        a = narrow(name)
        java.sql(f"DROP TABLE {java.qualified(name)}")
        if i:
            convert.append(c)
            before.append(b)
            after.append(a)
    return [
        [label, f"{statistics.median(v):.3f}", " ".join(f"{t:.2f}" for t in v)]
        for label, v in (("conversion", convert), ("read before", before), ("read after", after))
    ]


JAVA = "Iceberg Java on Spark (merge-on-read)"
SQL_STATEMENT = "icemor.spark.sql(MERGE INTO …)"


def _cents(ids: Any) -> Any:
    """qty in cents as base writes it: (id * 7919 % 10000) / 100."""
    return ids * 7919 % 10000


def _merge_source(ids: Any) -> Any:
    """Half the rows match existing ids (every 20th: all data files), half are new; qty = 1.00."""
    import pyarrow as pa

    n = MERGE_SOURCE_ROWS // 2
    matched = ids[:: max(1, len(ids) // n)][:n]
    new = np.arange(len(ids), len(ids) + n, dtype=np.int64)
    src_ids = np.concatenate([matched, new])
    return pa.table(
        {
            "id": pa.array(src_ids, pa.int64()),
            "k1": pa.array((src_ids % 1000).astype(np.int32)),
            "k2": pa.array([f"cat{i % 97}" for i in range(len(src_ids))]),
            "qty": pa.array(np.ones(len(src_ids))),
            "ts": pa.array((1_700_000_000 + src_ids) * 1_000_000, pa.timestamp("us", tz="UTC")),
            "note": pa.array(["merged"] * len(src_ids)),
        }
    )


def _bench_update_merge(
    java: Any, icemor: Any, runs: int, counter: list[int], ids: Any
) -> dict[tuple[str, str], list[float] | str]:
    out: dict[tuple[str, str], list[float] | str] = {}
    total_id, cents = int(ids.sum()), _cents(ids)
    hit = ids % 10 == 3
    update_check = (len(ids), total_id, int(cents.sum()) + 100 * int(hit.sum()))
    update_sql = "UPDATE {t} SET qty = qty + 1 WHERE id % 10 = 3"
    engines: dict[str, Callable[[str], None]] = {
        JAVA: lambda name: java.sql(update_sql.format(t=java.qualified(name))),
        "icemor local": lambda name: icemor.load_table(name).update({"qty": "qty + 1"}, "id % 10 = 3"),
        "icemor, SQL on Spark": lambda name: icemor.load_table(name).update(
            {"qty": "qty + 1"}, "id % 10 = 3", spark=java.spark
        ),
    }
    for engine, run in engines.items():
        print(f"  UPDATE: {engine} ...", flush=True)
        try:
            out[("UPDATE", engine)] = _time(java, runs, counter, run, update_check)
        except Exception as e:
            out[("UPDATE", engine)] = one_line(e)

    source = _merge_source(ids)
    src_ids = source.column("id").to_numpy()
    matched = src_ids[src_ids < len(ids)]
    new = src_ids[src_ids >= len(ids)]
    merge_check = (
        len(ids) + len(new),
        total_id + int(new.sum()),
        int(cents.sum()) - int(_cents(matched).sum()) + 100 * len(src_ids),
    )
    view = "bench_merge_source"
    java.spark.createDataFrame(source.to_pandas()).createOrReplaceTempView(view)
    # the Spark engine gets what Java's MERGE reads, the view's DataFrame (a Spark user's source);
    # handed the Arrow table it would convert it on every run (~8 s of 15 s, measured), Java never does
    frame = java.spark.table(view)
    merge_sql = (
        "MERGE INTO {t} t USING " + view + " s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    engines = {
        JAVA: lambda name: java.sql(merge_sql.format(t=java.qualified(name))),
        "icemor local": lambda name: (
            icemor.load_table(name)
            .merge(source, on=["id"])
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
        "icemor, SQL on Spark": lambda name: (
            icemor.load_table(name)
            .merge(frame, on=["id"], spark=java.spark)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
        SQL_STATEMENT: lambda name: icemor.spark.sql(java.spark, merge_sql.format(t=name)),
    }
    for engine, run in engines.items():
        print(f"  MERGE: {engine} ...", flush=True)
        try:
            out[("MERGE", engine)] = _time(java, runs, counter, run, merge_check)
        except Exception as e:
            out[("MERGE", engine)] = one_line(e)
    from icemor.expr.dml import parse_statement

    statement = merge_sql.format(t=f"{NAMESPACE}.base")
    parse_statement(statement).translate(["id"])  # the first parse imports sqlglot's dialect
    t0 = time.perf_counter()
    for _ in range(100):
        parse_statement(statement).translate(["id"])
    out[("MERGE", "parse")] = [(time.perf_counter() - t0) / 100]
    return out


def _bench_file_sizes(icemor: Any, rows: int = 3_000_000, days: int = 30) -> str:
    """Append ``rows`` pandas rows over ``days`` day partitions in one append (icemor streams it
    1 Mi rows at a time; that once made a file per batch and day): the line telling the
    files per partition and their mean size."""
    import pandas as pd
    import pyarrow as pa
    from pyiceberg.transforms import DayTransform

    from icemor.catalog import load_catalog

    name = f"{NAMESPACE}.file_sizes_{os.getpid()}"
    ids = np.arange(rows, dtype=np.int64)
    df = pd.DataFrame(
        {
            "id": ids,
            "qty": np.random.default_rng(0).integers(0, 1000, rows),
            "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta(ids % days, unit="D"),
        }
    )
    catalog = load_catalog()
    schema = pa.Schema.from_pandas(df, preserve_index=False).set(2, pa.field("ts", pa.timestamp("us")))
    created = catalog.create_table(name, schema=schema)
    try:
        with created.update_spec() as spec:
            spec.add_field("ts", DayTransform(), "ts_day")
        icemor.load_table(name).append(df)
        files = [t.file for t in catalog.load_table(name).scan().plan_files()]
        partitions = len({tuple(f.partition) for f in files}) or 1
        mean_mb = sum(f.file_size_in_bytes for f in files) / max(1, len(files)) / 1e6
        return (
            f"append file sizes: {rows:,} pandas rows over {days} day partitions, one append: "
            f"{len(files)} data files, {len(files) / partitions:.1f} per partition, mean {mean_mb:.2f} MB"
        )
    finally:
        catalog.purge_table(name)


# the engines whose time must not exceed Iceberg Java's in the same run (docs/benchmarks.md, "Targets")
ATMOST_JAVA = ("icemor local", "icemor, per-file work on Spark", "icemor, SQL on Spark")


def _record(
    report: Report, operation: str, engine: str, value: list[float] | str, java_med: float | None
) -> None:
    """One printed line of a DELETE, UPDATE or MERGE table as a row: the median and its ratio to Java."""
    if isinstance(value, str):
        report.add(f"{operation}: {engine}", None, note=value)
        return
    med = statistics.median(value)
    if java_med is None or engine == JAVA:
        report.add(f"{operation}: {engine}", med)
        return
    limit = 1.0 if engine in ATMOST_JAVA else None
    report.against(f"{operation}: {engine}", med, java_med, "Iceberg Java", limit=limit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--skip-pyiceberg", action="store_true", help="pyiceberg's copy-on-write takes ~7 s a run"
    )
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    import icemor
    import icemor.spark

    java = open_base(args.data_dir, args.rows)
    ids = np.arange(args.rows, dtype=np.int64)
    counter = [0]
    results: dict[tuple[str, str], list[float] | str] = {}
    for label, ours, sql in PREDICATES:
        kept = ids[ids % 1000 >= 100] if label == "k1 < 100" else ids[ids % 10 != 3]
        check = (len(kept), int(kept.sum()))
        engines: dict[str, Callable[[str], None]] = {
            "Iceberg Java on Spark (merge-on-read)": lambda name, sql=sql: java.sql(
                f"DELETE FROM {java.qualified(name)} WHERE {sql}"
            ),
        }
        if ours is not None:
            engines["icemor local"] = lambda name, ours=ours: icemor.load_table(name).delete(ours)
            engines["icemor, per-file work on Spark"] = lambda name, ours=ours: icemor.load_table(
                name
            ).delete(ours, spark=java.spark)
            if not args.skip_pyiceberg and label not in PYICEBERG_CANNOT:
                from icemor.catalog import load_catalog

                engines["pyiceberg 0.12 (copy-on-write)"] = lambda name, ours=ours: (
                    load_catalog().load_table(name).delete(ours)
                )
        for engine, run in engines.items():
            print(f"  {label}: {engine} ...", flush=True)
            try:
                results[(label, engine)] = _time(java, args.runs, counter, run, check)
            except Exception as e:  # a failing engine is reported, not fatal
                results[(label, engine)] = one_line(e)

    update_merge = _bench_update_merge(java, icemor, args.runs, counter, ids)

    conversion = _bench_conversion(java, icemor, args.runs, counter, ids)

    print("  append file sizes ...", flush=True)
    try:
        file_sizes = _bench_file_sizes(icemor)
    except Exception as e:  # reported, not fatal
        file_sizes = f"append file sizes: {one_line(e)}"

    machine = machine_info(java.spark.version)
    m = machine
    print(
        f"\nMachine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, pyiceberg {m['pyiceberg']}, Spark {m['spark']}, icemor {m['icemor']}"
    )
    print(
        f"DELETE of 10% of {args.rows:,} rows on a fresh copy; seconds, median of {args.runs} after a warm-up"
    )
    rows = [["predicate", "engine", "median s", "runs", "vs Java (same run)"]]
    for (label, engine), value in results.items():
        java_t = results.get((label, "Iceberg Java on Spark (merge-on-read)"))
        java_med = statistics.median(java_t) if isinstance(java_t, list) else None
        if isinstance(value, list):
            med = statistics.median(value)
            ratio = f"{med / java_med:.2f}x" if java_med else ""
            rows.append([label, engine, f"{med:.3f}", " ".join(f"{t:.2f}" for t in value), ratio])
        else:
            rows.append([label, engine, "-", value, ""])
        _record(report, f"DELETE {label}", engine, value, java_med)
    print(render(rows))
    print(
        f"\nEquality -> position conversion of eq10 ({args.rows // 10:,} equality-deleted ids in 5 files,"
        " every data file affected), icemor local; narrow read (qty) before and after, icemor local, warm:"
    )
    print(render([["", "median s", "runs"], *conversion]))
    for label, med, _ in conversion:
        target = label == "conversion"
        report.add(
            f"eq10 equality → position {label}" + (" (narrow read)" if not target else ""),
            float(med),
            target="≤ 5 s" if target else None,
            passed=float(med) <= 5 if target else None,
        )
    print(
        f"\nUPDATE (SET qty = qty + 1 WHERE id % 10 = 3) and MERGE ({MERGE_SOURCE_ROWS:,}-row source, half "
        f"matching, half new) on a fresh copy of {args.rows:,} rows; seconds, median of {args.runs}:"
    )
    um_rows = [["operation", "engine", "median s", "runs", "vs Java (same run)"]]
    for (label, engine), value in update_merge.items():
        if engine == "parse":
            continue
        java_t = update_merge.get((label, JAVA))
        java_med = statistics.median(java_t) if isinstance(java_t, list) else None
        if isinstance(value, list):
            med = statistics.median(value)
            ratio = f"{med / java_med:.2f}x" if java_med else ""
            um_rows.append([label, engine, f"{med:.3f}", " ".join(f"{t:.2f}" for t in value), ratio])
        else:
            um_rows.append([label, engine, "-", value, ""])
        _record(report, label, engine, value, java_med)
    print(render(um_rows))
    print(f"\n{file_sizes}")
    report.add("append file sizes", None, "", note=file_sizes.removeprefix("append file sizes: "))
    print(
        "\nTarget: icemor local and icemor on Spark <= Iceberg Java's time, same run; "
        "conversion of eq10 <= 5 s."
    )
    spark_engines = {"UPDATE": "icemor, SQL on Spark", "MERGE": "icemor, SQL on Spark"}
    for label in ("UPDATE", "MERGE"):
        for ours in ("icemor local", spark_engines[label]):
            ours_t, java_t = update_merge.get((label, ours)), update_merge.get((label, JAVA))
            if isinstance(ours_t, list) and isinstance(java_t, list):
                a, b = statistics.median(ours_t), statistics.median(java_t)
                print(f"  {label}, {ours}: {'pass' if a <= b else 'FAIL'} ({a:.3f} s vs {b:.3f} s)")
    statement_t, builder_t = (
        update_merge.get(("MERGE", SQL_STATEMENT)),
        update_merge.get(("MERGE", spark_engines["MERGE"])),
    )
    parse_t = update_merge.get(("MERGE", "parse"))
    if isinstance(statement_t, list) and isinstance(builder_t, list) and isinstance(parse_t, list):
        a, b = statistics.median(statement_t), statistics.median(builder_t)
        verdict = "pass" if a <= 1.05 * b else "FAIL"
        print(
            f"  MERGE, SQL statement within 5% of the builder on Spark: {verdict} "
            f"({a:.3f} s vs {b:.3f} s, {a / b:.3f}x; parsing the statement {parse_t[0] * 1000:.2f} ms)"
        )
        report.against(f"MERGE: {SQL_STATEMENT}, to the builder", a, b, "the builder on Spark", limit=1.05)
        report.add("MERGE, parsing the statement", parse_t[0] * 1000, "ms")
    for label, *_ in PREDICATES:
        for ours in ("icemor local", "icemor, per-file work on Spark"):
            ours_t = results.get((label, ours))
            java_t = results.get((label, "Iceberg Java on Spark (merge-on-read)"))
            if isinstance(ours_t, list) and isinstance(java_t, list):
                a, b = statistics.median(ours_t), statistics.median(java_t)
                print(f"  {label}, {ours}: {'pass' if a <= b else 'FAIL'} ({a:.3f} s vs {b:.3f} s)")
            else:
                print(f"  {label}, {ours}: not measured ({ours_t if isinstance(ours_t, str) else 'error'})")
    report.context.update(rows=args.rows, runs=args.runs, spark=java.spark.version)
    report.write()
    java.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
