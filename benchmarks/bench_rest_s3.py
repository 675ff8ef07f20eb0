"""The cost of object storage: DELETE, MERGE and CDC on a REST catalog over S3 (SeaweedFS's
``weed mini`` on 127.0.0.1, OAuth2) against the same on local disk (the embedded catalog).

Run as ``.venv/bin/python benchmarks/bench_rest_s3.py`` (``make bench``). Each setup gets the same
table (``--rows`` rows in 8 appends, partitioned by ``k``, 4 values) and the same three writes,
timed one by one on the local engine: a DELETE of 10% of the rows, a MERGE of ``--rows`` / 20
source rows (half updates, half inserts) and a CDC batch of as many changes (updates and
deletes). The median of ``--runs`` runs, each on a fresh table; every result is checked against
the model's row count before its time counts. Prints one line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "realservers"))

import pyarrow as pa
from _report import Report

import icemor

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string()), ("v", pa.int64())])


def rows(ids: range | list[int], v: int = 0) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": [f"k{i % 4}" for i in ids],
            "v": pa.array([i + v for i in ids]),
        },
        schema=SCHEMA,
    )


def one_run(catalog: Any, name: str, n: int, properties: dict[str, str]) -> dict[str, float]:
    if catalog.table_exists(name):
        catalog.purge_table(name)
    table = icemor.create_table(name, SCHEMA, catalog=catalog, partition_by=["k"], properties=properties)
    step = n // 8
    for lo in range(0, n, step):
        table.append(rows(range(lo, min(n, lo + step))))
    live = n
    times: dict[str, float] = {}

    t0 = time.perf_counter()
    m = table.delete("id % 10 = 0")
    times["delete"] = time.perf_counter() - t0
    live -= m.deleted_rows

    half = n // 40
    source = rows([*range(1, 2 * half, 2), *range(n, n + half)], v=7)  # odd ids exist, the rest are new
    t0 = time.perf_counter()
    table.merge(source, on="t.id = s.id").when_matched_update_all().when_not_matched_insert_all().execute()
    times["merge"] = time.perf_counter() - t0
    live += half

    ids = list(range(3, 3 + 2 * (n // 20), 2))  # odd ids: none was deleted above
    changes = rows(ids, v=1).append_column("op", pa.array(["U" if i % 4 == 1 else "D" for i in ids]))
    t0 = time.perf_counter()
    table.apply_changes(changes, key=["id"])
    times["cdc"] = time.perf_counter() - t0
    live -= sum(1 for i in ids if i % 4 != 1)

    got = table.refresh().scan().count()
    if got != live:
        msg = f"{name}: {got} rows, the model has {live}"
        raise AssertionError(msg)
    catalog.purge_table(name)
    return times


def median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report = Report.of(__file__)
    from servers import DATA_BUCKET, SeaweedFS

    with tempfile.TemporaryDirectory(prefix="bench-rest-s3-") as tmp:
        local_catalog = icemor.load_catalog(
            None, uri=f"sqlite:///{tmp}/catalog.db", warehouse=Path(tmp, "warehouse").as_uri()
        )
        Path(tmp, "warehouse").mkdir()
        local_catalog.create_namespace_if_not_exists("bench")
        server = SeaweedFS(Path(tmp, "seaweedfs"))
        server.start()
        try:
            rest = icemor.load_catalog("bench", **server.catalog_properties())
            rest.create_namespace_if_not_exists("bench")
            local = median([one_run(local_catalog, "bench.t", args.rows, {}) for _ in range(args.runs)])
            remote = median(
                [
                    one_run(rest, "bench.t", args.rows, {"write.data.path": f"s3://{DATA_BUCKET}/bench/t"})
                    for _ in range(args.runs)
                ]
            )
        finally:
            server.stop()
    parts = ", ".join(
        f"{k.upper()} {remote[k]:.2f} s vs {local[k]:.2f} s ({remote[k] / local[k]:.1f}x)" for k in local
    )
    print(f"REST+S3 (SeaweedFS) vs local disk, {args.rows:,} rows, local engine: {parts}")
    for k in local:
        report.add(f"{k.upper()}, local disk", local[k])
        report.add(f"{k.upper()}, REST + S3", remote[k], ratio=remote[k] / local[k], versus="local disk")
    report.context.update(rows=args.rows, runs=args.runs)
    report.write()


if __name__ == "__main__":
    main()
