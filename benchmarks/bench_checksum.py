"""What verifying Parquet page checksums costs: one 10 M-row file read with and without it.

icemor opens every data and delete file with ``page_checksum_verification=True`` (a flipped
byte in a page is then an error, not a wrong value). This measures the price on the
benchmark's row layout (``bench_scan.py``: id, k1, k2, qty, ts, note), written as Iceberg
Java writes it (zstd, page CRCs, 128 MiB row groups), read through ``pq.ParquetFile`` exactly
as icemor's reader opens files: narrow (``qty``) and wide (all columns).

    python benchmarks/bench_checksum.py [--rows N] [--runs 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _report import Report


def build(path: Path, rows: int) -> None:
    batch = 1_000_000
    rng = np.random.default_rng(14)
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("k1", pa.int32()),
            ("k2", pa.string()),
            ("qty", pa.float64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("note", pa.string()),
        ]
    )
    with pq.ParquetWriter(path, schema, compression="zstd", write_page_checksum=True) as w:
        for start in range(0, rows, batch):
            ids = np.arange(start, min(start + batch, rows), dtype=np.int64)
            k2 = pc.binary_join_element_wise("cat", pa.array(ids % 97).cast(pa.string()), "")
            # like sha2(id, 256) hex: 64 incompressible characters (CRCs cover compressed bytes)
            hexdigits = np.frombuffer(b"0123456789abcdef", dtype="S1")[rng.integers(0, 16, (len(ids), 64))]
            note = pc.binary_join_element_wise(
                "comment-", pa.array(hexdigits.view("S64").ravel()).cast(pa.string()), ""
            )
            w.write_table(
                pa.table(
                    [
                        pa.array(ids),
                        pa.array((ids % 1000).astype(np.int32)),
                        k2,
                        pa.array((ids * 7919 % 10000) / 100),
                        pa.array((1_700_000_000 + ids) * 1_000_000).cast(pa.timestamp("us", tz="UTC")),
                        note,
                    ],
                    schema=schema,
                ),
                row_group_size=1 << 20,
            )


def read(path: Path, columns: list[str] | None, verify: bool) -> int:
    pf = pq.ParquetFile(path, pre_buffer=True, page_checksum_verification=verify)
    n = 0
    for b in pf.iter_batches(batch_size=1 << 17, columns=columns, use_threads=True):
        n += b.num_rows
    pf.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    results = Report.of(__file__)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "data.parquet"
        build(path, args.rows)
        size = path.stat().st_size
        print(f"{args.rows:,} rows, {size / 2**20:.0f} MiB, zstd, page CRCs; median of {args.runs} warm runs")
        results.context.update(rows=args.rows, runs=args.runs, file_mib=round(size / 2**20))
        for query, columns in (("narrow (qty)", ["qty"]), ("wide (all columns)", None)):
            samples: dict[bool, list[float]] = {False: [], True: []}
            read(path, columns, False)  # warm-up
            for _ in range(args.runs):  # alternate, so drift in machine load hits both alike
                for verify in (False, True):
                    t = time.perf_counter()
                    assert read(path, columns, verify) == args.rows
                    samples[verify].append(time.perf_counter() - t)
            off, on = statistics.median(samples[False]), statistics.median(samples[True])
            print(
                f"{query:20s} without {off:.3f} s  with {on:.3f} s  "
                f"overhead {on - off:+.3f} s ({on / off - 1:+.0%})"
            )
            results.add(f"{query}, without verification", off)
            results.add(f"{query}, with verification", on, ratio=on / off, versus="without")
    results.write()


if __name__ == "__main__":
    main()
