"""Streaming writers against `optimize --watch`: what the maintenance test and `make bench` share.

:func:`run_streams` builds a small unhealthy table (many small files, deletes of every kind),
starts ``icemor optimize TABLE --watch`` in a process of its own, and runs three writers in
threads of this process for ``seconds``: a CDC batch every second (equality deletes and
inserts), a DELETE of a key range and a MERGE (upsert) of keys, each every two seconds, and on
a v3 table an UPDATE of a key range every three seconds. Every commit a writer made is recorded
by its snapshot id, with what it did; replayed over the snapshot chain in commit order this is
the model of the table's content (an ``optimize`` commit must change no row). Then the writers
stop, the optimizer finishes a whole round, and is stopped with SIGTERM.

Writers retry an operation that conflicted (as an application would) until the race ends;
they never wait for the optimizer, which takes no lock. As streams usually are, the writers
mostly keep to their own data: CDC changes keys of the lower half of the initial range and
inserts new keys above it, MERGE and UPDATE the upper half (MERGE inserts keys of its own, from
``MERGE_KEYS``), DELETE anywhere; so writers conflict with each other rarely (an UPDATE or MERGE
whose partition got a CDC equality delete meanwhile must conflict), and what conflicts is
mostly the optimizer's doing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import icemor
from icemor.exceptions import CommitConflictError, CommitFailedError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

__all__ = ["StreamResult", "run_streams"]

KEYS = 200_000
"""Ids of the initial rows: 0 .. KEYS-1; CDC and MERGE insert new ids above it."""
MERGE_KEYS = 10_000_000
"""New ids of MERGE's inserts start here (CDC's start at KEYS)."""
PARTITION_WIDTH = 20_000
"""The table is partitioned by ``truncate(PARTITION_WIDTH, id)``: ten partitions of initial rows."""


@dataclass
class StreamResult:
    """What happened: the commits of each writer, the optimizer's, its output, the scores."""

    name: str
    started_ms: int
    stopped_ms: int
    score_start: float
    score_end: float
    model: dict[int, str]
    rows: dict[int, str]
    writer_commits: dict[str, int]
    writer_conflicts: dict[str, int]
    conflict_reasons: dict[str, int]
    compactions_ms: list[int]
    """Commit times of the optimizer's snapshots (operation ``replace``), in the race and after."""
    compaction_ids: list[int]
    """Their snapshot ids (icemor read each one as the model had the table then: else an error)."""
    optimizer_output: str
    optimizer_returncode: int | None
    errors: list[str] = field(default_factory=list)

    def windows(self, seconds: float = 20.0) -> list[int]:
        """Optimizer commits in each whole window of ``seconds`` of the race."""
        out = []
        start = self.started_ms
        step = int(seconds * 1000)
        while start + step <= self.stopped_ms:
            out.append(sum(start <= t < start + step for t in self.compactions_ms))
            start += step
        return out


def _initial(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"r{i}" for i in range(lo, hi)]})


def build(
    name: str,
    *,
    format_version: int,
    files: int = 40,
    cdc_deletes: str = "equality",
    properties: Mapping[str, str] | None = None,
) -> icemor.Table:
    """``files`` data files of ``KEYS / files`` rows each (ids in order), a DELETE of every 50th
    row and a CDC batch deleting 2,000 keys: fragments, position deletes and equality deletes
    (``cdc_deletes``: the table's ``icemor.cdc.delete-mode``; ``position`` writes none)."""
    per = KEYS // files
    t = icemor.create_table(
        name,
        _initial(0, per),
        partition_by=[f"truncate({PARTITION_WIDTH},id)"],
        identifier_fields=["id"],
        properties={
            "format-version": str(format_version),
            "icemor.cdc.delete-mode": cdc_deletes,
            **(properties or {}),
        },
    )
    for i in range(1, files):
        t.append(_initial(i * per, (i + 1) * per))
    t.delete("id % 50 = 7")
    keys = list(range(0, KEYS, 100))
    t.apply_changes(pa.table({"id": pa.array(keys, pa.int64()), "v": [None] * len(keys), "op": ["D"] * len(keys)}),
                    key=["id"])  # fmt: skip
    return t.refresh()


class _Writers:
    def __init__(self, name: str, stop_at: float, format_version: int) -> None:
        self.name = name
        self.stop_at = stop_at
        self.format_version = format_version
        self.lock = threading.Lock()
        self.ops: dict[int, Callable[[dict[int, str]], None]] = {}
        self.commits: dict[str, int] = {}
        self.conflicts: dict[str, int] = {}
        self.errors: list[str] = []
        self.reasons: dict[str, int] = {}
        self.next_id = {"cdc": KEYS, "merge": MERGE_KEYS}

    def new_ids(self, kind: str, n: int) -> list[int]:
        with self.lock:
            first = self.next_id[kind]
            self.next_id[kind] += n
        return list(range(first, first + n))

    def loop(self, kind: str, every: float, step: Callable[[icemor.Table, int], tuple[Any, Any]]) -> None:
        table = icemor.load_table(self.name)
        i = 0
        try:
            while time.monotonic() < self.stop_at:
                began = time.monotonic()
                i += 1
                attempt = 0
                while True:
                    try:
                        metrics, op = step(table.refresh(), i)
                        break
                    except (CommitConflictError, CommitFailedError) as e:
                        with self.lock:
                            self.conflicts[kind] = self.conflicts.get(kind, 0) + 1
                            why = re.sub(r"\S*/\S*|\d+", "#", str(e))[:90]
                            self.reasons[f"{kind}: {why}"] = self.reasons.get(f"{kind}: {why}", 0) + 1
                        attempt += 1
                        if time.monotonic() >= self.stop_at:
                            return  # the race is over: this operation never committed
                        time.sleep(min(1.0, 0.02 * attempt))
                if metrics.snapshot_id is not None:
                    with self.lock:
                        self.ops[metrics.snapshot_id] = op
                        self.commits[kind] = self.commits.get(kind, 0) + 1
                time.sleep(max(0.0, every - (time.monotonic() - began)))
        except BaseException as e:  # reported by the caller
            self.errors.append(f"{kind}: {type(e).__name__}: {e}")

    def cdc(self, table: icemor.Table, i: int) -> tuple[Any, Any]:
        # deletes and updates of existing keys (spread over the whole key range), new keys
        half = KEYS // 2
        gone = [(i * 7919 + j * 1543) % half for j in range(3)]
        changed = [(i * 104_729 + j * 613) % half for j in range(5)]
        new = self.new_ids("cdc", 10)
        ids = gone + changed + new
        values = [None] * len(gone) + [f"c{i}"] * (len(changed) + len(new))
        ops = ["D"] * len(gone) + ["U"] * len(changed) + ["I"] * len(new)
        m = table.apply_changes(
            pa.table({"id": pa.array(ids, pa.int64()), "v": values, "op": ops}), key=["id"]
        )

        def op(model: dict[int, str]) -> None:
            for k in gone:
                model.pop(k, None)
            for k in changed + new:
                model[k] = f"c{i}"

        return m, op

    def delete(self, table: icemor.Table, i: int) -> tuple[Any, Any]:
        lo = (i * 2_003) % KEYS
        m = table.delete(f"id >= {lo} and id < {lo + 15}")
        return m, lambda model: [model.pop(k) for k in [k for k in model if lo <= k < lo + 15]]

    def merge(self, table: icemor.Table, i: int) -> tuple[Any, Any]:
        half = KEYS // 2
        keys = [half + (i * 3_001 + j * 7) % half for j in range(10)] + self.new_ids("merge", 5)
        source = pa.table({"id": pa.array(keys, pa.int64()), "v": [f"m{i}"] * len(keys)})
        m = table.merge(source, on=["id"]).when_matched_update_all().when_not_matched_insert_all().execute()

        def op(model: dict[int, str]) -> None:
            for k in keys:
                model[k] = f"m{i}"

        return m, op

    def update(self, table: icemor.Table, i: int) -> tuple[Any, Any]:
        lo = KEYS // 2 + (i * 4_007) % (KEYS // 2)
        m = table.update({"v": f"'u{i}'"}, where=f"id >= {lo} and id < {lo + 10}")

        def op(model: dict[int, str]) -> None:
            for k in model:
                if lo <= k < lo + 10:
                    model[k] = f"u{i}"

        return m, op


def _chain(t: icemor.Table) -> list[Any]:
    snapshots = {s.snapshot_id: s for s in t.metadata.snapshots}
    chain = []
    current = t.metadata.current_snapshot()
    while current is not None:
        chain.append(current)
        current = snapshots.get(current.parent_snapshot_id) if current.parent_snapshot_id else None
    chain.reverse()
    return chain


def _content(t: icemor.Table, snapshot_id: int | None = None) -> dict[int, str]:
    rows = t.scan(selected_fields=("id", "v"), snapshot_id=snapshot_id).to_arrow()
    ids, values = rows.column("id").to_pylist(), rows.column("v").to_pylist()
    out = dict(zip(ids, values, strict=True))
    if len(out) != len(ids):
        out[-1] = f"{len(ids) - len(out)} duplicate ids"
    return out


def run_streams(
    name: str,
    home: Path,
    *,
    format_version: int,
    seconds: float = 60.0,
    watch_every: float = 1.0,
    cdc_deletes: str = "equality",
    extra_args: tuple[str, ...] = (),
    note: Callable[[str], None] | None = None,
    properties: Mapping[str, str] | None = None,
) -> StreamResult:
    """Race the writers against ``icemor optimize NAME --watch`` for ``seconds`` (see the module doc);
    ``properties`` of the table (e.g. the optimizer's thresholds) beside the defaults."""
    t = build(name, format_version=format_version, cdc_deletes=cdc_deletes, properties=properties)
    score_start = t.inspect().table.score
    base = t.metadata.current_snapshot()
    assert base is not None
    watch = subprocess.Popen(
        [sys.executable, "-m", "icemor", "optimize", name, "--watch", str(watch_every), *extra_args],
        env={**os.environ, "ICEMOR_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert watch.stdout is not None
        for line in iter(watch.stdout.readline, ""):
            lines.append(line)
            if note is not None:
                note(line.rstrip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def rounds() -> int:
        return sum(line.startswith("round ") for line in list(lines))

    def wait_for_rounds(n: int, limit: float) -> None:
        deadline = time.monotonic() + limit
        while rounds() < n and watch.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)

    wait_for_rounds(1, 120)  # the optimizer is up (under load, starting Python takes seconds)
    started_ms = int(time.time() * 1000)
    writers = _Writers(name, time.monotonic() + seconds, format_version)
    plans: list[tuple[str, float, Callable[[icemor.Table, int], tuple[Any, Any]]]] = [
        ("cdc", 1.0, writers.cdc),
        ("delete", 2.0, writers.delete),
        ("merge", 2.0, writers.merge),
    ]
    if format_version >= 3:
        plans.append(("update", 3.0, writers.update))
    threads = [threading.Thread(target=writers.loop, args=plan) for plan in plans]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stopped_ms = int(time.time() * 1000)
    wait_for_rounds(rounds() + 2, 180)  # a whole round of optimizing after the writers
    watch.send_signal(signal.SIGTERM)
    try:
        watch.wait(timeout=120)
    except subprocess.TimeoutExpired:
        watch.kill()
        watch.wait()
    reader.join(timeout=10)  # it reads stdout to the end (communicate would race it for the last line)
    assert watch.stderr is not None
    err = watch.stderr.read()

    t = t.refresh()
    chain = _chain(t)
    first = next(i for i, s in enumerate(chain) if s.snapshot_id == base.snapshot_id)
    model = _content(t, base.snapshot_id)
    compactions, compaction_ids = [], []
    errors = list(writers.errors)
    for s in chain[first + 1 :]:
        op = writers.ops.get(s.snapshot_id)
        if op is not None:
            op(model)
        elif s.summary is not None and s.summary.operation.value == "replace":
            compactions.append(s.timestamp_ms)
            compaction_ids.append(s.snapshot_id)
            if _content(t, s.snapshot_id) != model:  # a compaction changes no row
                errors.append(f"compaction snapshot {s.snapshot_id} does not read as the model")
        else:
            errors.append(f"snapshot {s.snapshot_id} ({s.summary}) was made by no writer and is no replace")
    return StreamResult(
        name=name,
        started_ms=started_ms,
        stopped_ms=stopped_ms,
        score_start=score_start,
        score_end=t.inspect().table.score,
        model=model,
        rows=_content(t),
        writer_commits=writers.commits,
        writer_conflicts=writers.conflicts,
        conflict_reasons=writers.reasons,
        compactions_ms=compactions,
        compaction_ids=compaction_ids,
        optimizer_output="".join(lines) + err,
        optimizer_returncode=watch.returncode,
        errors=errors,
    )
