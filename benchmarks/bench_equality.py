"""Micro-benchmark of equality-delete probing: build once, probe many batches.

Run as ``.venv/bin/python benchmarks/bench_equality.py`` (``--rows``/``--keys`` to scale down).
For each key shape it builds an ``EqualityDeleteSet`` from the delete keys and probes
``--rows`` data rows in 128k-row batches, about 10 % of them deleted, and prints build and
total probe time (median of ``--runs``) for the hash index and for what it replaced: the Arrow
hash join (timed on a few batches and scaled, as it takes ~1 s a batch), for one integer
column that is not dense, binary search in the sorted keys, and for long string keys, hashing
every word of every value instead of the few that tell the keys apart (what string keys used before).
Shapes: 72-char strings (``'comment-' || sha256hex``, as the scan benchmark's ``note``),
sparse bigints, and (int, string) pairs.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from icemor.io import equality
from icemor.io.equality import EqualityDeleteSet

if TYPE_CHECKING:
    from collections.abc import Callable

BATCH = 131_072


def notes(ids: np.ndarray) -> pa.Array:
    return pa.array(
        ["comment-" + hashlib.sha256(str(int(i)).encode()).hexdigest() for i in ids], pa.large_string()
    )


def shape(name: str, ids: np.ndarray) -> list[pa.Array]:
    if name == "string72":
        return [notes(ids)]
    if name == "bigint":
        return [pa.array(ids * 7_919_000_003 % (1 << 62), pa.int64())]  # sparse: not dense-mapped
    return [pa.array((ids % 1000).astype(np.int32)), pa.array([f"cat{i % 97}-{i}" for i in ids])]


def median(f: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--join-batches", type=int, default=2, help="batches timed for the old join")
    p.add_argument("--shapes", default="string72,bigint,int_string")
    a = p.parse_args()
    rng = np.random.default_rng(12)
    # data batches are generated once and reused: the probe, not the generation, is timed
    distinct = min(a.rows, 4 * BATCH)
    data_ids = np.where(
        rng.random(distinct) < 0.1, rng.integers(0, a.keys, distinct), rng.integers(a.keys, 1 << 40, distinct)
    )
    nbatches = -(-a.rows // BATCH)
    print(f"{a.keys:,} keys, {a.rows:,} rows in {nbatches} batches of {BATCH:,}, median of {a.runs}")
    for name in a.shapes.split(","):
        keys = shape(name, np.arange(a.keys))
        data = shape(name, data_ids)
        batches = [[c.slice(s, BATCH) for c in data] for s in range(0, distinct, BATCH)]
        built: list[EqualityDeleteSet] = []
        build = median(partial(lambda k, out: out.append(EqualityDeleteSet(k)), keys, built), a.runs)
        s = built[-1]
        t_probe = median(partial(probe, s, batches, nbatches), a.runs)
        hits = probe(s, batches, nbatches) / a.rows
        print(
            f"{name:>10}: hash index  build {build:6.2f} s  probe {t_probe:6.2f} s"
            f"  ({t_probe / nbatches * 1e3:5.1f} ms/batch, {hits:.1%} hits, {s.nbytes / 2**20:.0f} MiB)"
        )
        index = getattr(s, "_index", None)
        if index is not None and index._words is not None:
            # what string keys used before: every word of every value hashed
            telling = equality._telling_words
            equality._telling_words = lambda _key: None
            try:
                whole: list[EqualityDeleteSet] = []
                t_build = median(
                    partial(lambda k, out: out.append(EqualityDeleteSet(k)), keys, whole), a.runs
                )
                t_whole = median(partial(probe, whole[-1], batches, nbatches), a.runs)
            finally:
                equality._telling_words = telling
            print(
                f"{'':>10}  all words   build {t_build:6.2f} s  probe {t_whole:6.2f} s"
                f"  ({t_whole / nbatches * 1e3:5.1f} ms/batch; above: words {index._words} only)"
            )
        if len(keys) == 1 and pa.types.is_integer(keys[0].type):
            # what one integer column used before, when not dense: binary search of sorted keys
            t0 = time.perf_counter()
            sorted_keys = np.sort(keys[0].to_numpy())
            t_build = time.perf_counter() - t0
            t_sorted = median(partial(probe_sorted, sorted_keys, batches, nbatches), a.runs)
            print(
                f"{'':>10}  searchsort  build {t_build:6.2f} s  probe {t_sorted:6.2f} s"
                f"  ({t_sorted / nbatches * 1e3:5.1f} ms/batch)"
            )
        if a.join_batches:
            # the approach this replaced: Arrow's hash join, its build side rehashed every batch
            old = EqualityDeleteSet.__new__(EqualityDeleteSet)
            old.width, old._types = len(keys), [c.type for c in keys]
            t0 = time.perf_counter()
            old._keys = EqualityDeleteSet._join_table(keys)
            t_build = time.perf_counter() - t0
            k = min(a.join_batches, len(batches))
            t0 = time.perf_counter()
            for b in batches[:k]:
                old._join_matches(b, len(b[0]))
            per = (time.perf_counter() - t0) / k
            print(
                f"{'':>10}  arrow join  build {t_build:6.2f} s  probe {per * nbatches:6.2f} s"
                f"  ({per * 1e3:5.1f} ms/batch, from {k} batches)"
            )


def probe_sorted(sorted_keys: np.ndarray, batches: list[list[pa.Array]], nbatches: int) -> int:
    hits = 0
    for i in range(nbatches):
        values = batches[i % len(batches)][0].to_numpy()
        pos = np.searchsorted(sorted_keys, values)
        pos[pos == len(sorted_keys)] = 0
        hits += int((sorted_keys[pos] == values).sum())
    return hits


def probe(s: EqualityDeleteSet, batches: list[list[pa.Array]], nbatches: int) -> int:
    """Probe ``nbatches`` batches (cycling through the generated ones); the number of hits."""
    return sum(int(s.matches(batches[i % len(batches)]).sum()) for i in range(nbatches))


if __name__ == "__main__":
    main()
