"""`Table.optimize` / `icemor optimize`: the plan on a table whose deletes are known, a run that raises
the score to >= 90 with the same rows (read by Iceberg Java), `optimize --watch` racing a DELETE
writer and a CDC writer, every snapshot checked against a model, and the service keeping up with
three writers for a minute on v2 and v3 tables (``tests/streams.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run
from icemor.exceptions import CommitConflictError
from streams import run_streams

if TYPE_CHECKING:
    from icemor.maintenance.optimize import RoundResult
    from oracle import IcebergJava


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(lo, hi), pa.int64()), "v": pa.array([f"r{i}" for i in range(lo, hi)])}
    )


def _build(name: str, tmp_path: Path, *, files: int = 4, rows: int = 1000) -> icemor.Table:
    """``files`` data files of ``rows`` rows (file i: ids i*rows ...); two DELETEs of 1 % of files
    0 to files-2 each (one file-scoped position-delete file per data file: the second folds the
    first in); a CDC batch deleting 50 keys of the last file (equality deletes)."""
    first = tmp_path / "f0.parquet"
    pq.write_table(_rows(0, rows), first)
    assert run(["create-table", name, "--schema-from", str(first)]) == 0
    t = icemor.load_table(name)
    for i in range(files):
        path = tmp_path / f"f{i}.parquet"
        pq.write_table(_rows(i * rows, (i + 1) * rows), path)
        t.append_files([path])
    t.delete(f"id % 100 = 0 and id < {(files - 1) * rows}")
    t.delete(f"id % 100 = 1 and id < {(files - 1) * rows}")
    last = (files - 1) * rows
    keys = list(range(last, last + 50))
    t.apply_changes(
        pa.table({"id": pa.array(keys, pa.int64()), "v": [None] * len(keys), "op": ["D"] * len(keys)}),
        key=["id"],
        allow_nullable_key=True,
    )
    return t


def test_plan_on_a_known_table(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = _build("db.o", tmp_path)
    capsys.readouterr()
    r = t.optimize(dry_run=True)
    assert r.actions == () and r.score_after is None
    plan = r.plan
    # one partition: 4 fragments (files of ~5 kB against 128 MiB / 8) >= 2: major, which replaces
    # the minor action its equality keys ask for
    assert plan.actions == ("rewrite-data-files",)
    (pp,) = plan.partitions
    assert pp.level == "major" and pp.actions == plan.actions
    assert pp.reasons == ("4 fragments >= 2", "50 live equality-delete keys")
    assert plan.score_before == t.inspect().table.score < 85
    assert plan.score_expected == 100.0
    before = len(t.metadata.snapshots)
    assert run(["optimize", "db.o", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"score {plan.score_before}, expected 100.0 after" in out, out
    assert "(unpartitioned)" in out and "major" in out
    assert len(t.refresh().metadata.snapshots) == before  # nothing committed


def test_properties_change_the_plan(home: Path, tmp_path: Path) -> None:
    t = _build("db.p", tmp_path)
    t.pyiceberg.transaction().set_properties(
        {"icemor.optimize.major.fragment-count": "10", "icemor.optimize.minor.delete-file-count": "4"}
    ).commit_transaction()
    plan = t.refresh().optimize(dry_run=True).plan
    assert plan.actions == ("equality-to-position",)
    assert plan.partitions[0].level == "minor"
    t.pyiceberg.transaction().set_properties({"icemor.optimize.fragment-ratio": "x"}).commit_transaction()
    with pytest.raises(icemor.exceptions.InvalidArgumentError, match=r"icemor\.optimize\.fragment-ratio"):
        t.refresh().optimize(dry_run=True)


def test_a_conflict_skips_the_action_this_round(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    t = _build("db.k", tmp_path)
    before = t.inspect().table.score

    def conflicting(*args: object, **kwargs: object) -> None:
        msg = "a concurrent DELETE added deletes for a file being rewritten"
        raise CommitConflictError(msg)

    monkeypatch.setattr("icemor.maintenance.data_files.rewrite_data_files", conflicting)
    capsys.readouterr()
    assert run(["optimize", "db.k"]) == 0
    out = capsys.readouterr().out
    assert (
        "rewrite-data-files for (unpartitioned): skipped this round (conflict: a concurrent DELETE added "
        "deletes for a file being rewritten)" in out
    ), out
    assert f"score {before} -> {before}" in out
    assert t.refresh().inspect().table.score == before


@pytest.mark.oracle
def test_run_raises_the_score_and_java_reads_the_same_rows(
    oracle: IcebergJava, ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{ns}.opt"
    _build(name, tmp_path)
    expected = sorted(range(4000))
    expected = [i for i in expected if not (i < 3000 and i % 100 in (0, 1)) and not 3000 <= i < 3050]
    assert [r[0] for r in oracle.rows(name, columns=["id"])] == expected
    capsys.readouterr()
    assert run(["optimize", name]) == 0
    out = capsys.readouterr().out
    assert "rewrite-data-files" in out, out
    after = icemor.load_table(name).inspect()
    assert after.table.score >= 90, after.table
    assert f"-> {after.table.score}" in out
    assert [r[0] for r in oracle.rows(name, columns=["id"])] == expected
    assert icemor.load_table(name).check().clean

    # the same on the Spark engine: the per-file work on executors
    on_spark = f"{ns}.opt_spark"
    (tmp_path / "spark").mkdir()
    _build(on_spark, tmp_path / "spark")
    result = icemor.load_table(on_spark).optimize(spark=oracle.spark)
    assert [a.action for a in result.actions] == ["rewrite-data-files"]
    assert result.score_after is not None and result.score_after >= 90
    assert [r[0] for r in oracle.rows(on_spark, columns=["id"])] == expected


@pytest.mark.oracle
def test_watch_rounds_run_as_spark_jobs(
    oracle: IcebergJava, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``table.watch(spark=...)``: the rounds' per-file work goes through the Spark runner, the
    first round rewrites the table, the next finds nothing to do, ``stop`` ends the service."""
    from icemor.engines import spark as spark_engine

    name = f"{ns}.watch_spark"
    _build(name, tmp_path)
    expected = [i for i in range(4000) if not (i < 3000 and i % 100 in (0, 1)) and not 3000 <= i < 3050]
    items: list[int] = []
    make = spark_engine.runner

    def counting(*args: Any, **kwargs: Any) -> Any:
        run_on_spark = make(*args, **kwargs)

        def run_items(fn: Any, work: Any) -> Any:
            items.append(len(work))
            return run_on_spark(fn, work)

        return run_items

    monkeypatch.setattr(spark_engine, "runner", counting)
    rounds: list[RoundResult] = []
    t = icemor.load_table(name)
    assert t.watch(0.05, spark=oracle.spark, stop=lambda: len(rounds) >= 2, on_round=rounds.append) == 2
    first, second = rounds
    rewrite = [a for a in first.result.actions if a.action == "rewrite-data-files"]
    assert first.level == "major" and rewrite and rewrite[0].commits >= 1, first
    assert items and all(n >= 1 for n in items)
    assert first.result.score_after is not None and first.result.score_after >= 90
    assert second.level == "idle" and not second.result.actions, second
    assert [r[0] for r in oracle.rows(name, columns=["id"])] == expected


_WRITERS_SECONDS = 6.0


def test_watch_against_delete_and_cdc_writers(home: Path, tmp_path: Path) -> None:
    """`optimize --watch` runs in its own process while a DELETE writer and a CDC writer commit;
    every snapshot's rows are then checked against a model replaying the writers' commits in order
    (an optimize snapshot must keep its parent's rows)."""
    t = _build("db.w", tmp_path, files=6, rows=500)
    watch = subprocess.Popen(
        [sys.executable, "-m", "icemor", "optimize", "db.w", "--watch", "1"],
        env={**os.environ, "ICEMOR_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read_stdout() -> None:
        assert watch.stdout is not None
        lines.extend(iter(watch.stdout.readline, ""))

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()

    def rounds() -> int:
        return sum(line.startswith("round ") for line in list(lines))

    def wait_for_rounds(n: int) -> None:
        deadline = time.monotonic() + 120
        while rounds() < n:
            assert watch.poll() is None, watch.communicate()
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)

    wait_for_rounds(1)  # the optimizer is up (under load, starting Python takes seconds)
    ops: dict[int, tuple[str, object]] = {}
    lock = threading.Lock()
    stop = time.monotonic() + _WRITERS_SECONDS
    errors: list[BaseException] = []

    def writer(kind: str) -> None:
        table = icemor.load_table("db.w")
        i = 0
        try:
            while time.monotonic() < stop:
                i += 1
                for attempt in range(30):  # a conflict with a compaction: run the operation again
                    try:
                        if kind == "delete":
                            k = i % 50
                            m = table.refresh().delete(f"id % 50 = {k}")
                            op: tuple[str, object] = ("delete", k)
                        else:
                            gone = [10_000 * i + j for j in range(3)] + [i * 37 % 3000]
                            new = [10_000 * i + j for j in range(5)]
                            changes = pa.table(
                                {
                                    "id": pa.array([*gone, *new], pa.int64()),
                                    "v": [None] * len(gone) + [f"n{x}" for x in new],
                                    "op": ["D"] * len(gone) + ["I"] * len(new),
                                }
                            )
                            m = table.refresh().apply_changes(changes, key=["id"], allow_nullable_key=True)
                            op = ("cdc", (set(gone), set(new)))
                        break
                    except CommitConflictError:
                        time.sleep(0.05 * attempt)  # let the compaction's round end
                        continue
                else:
                    msg = f"{kind}: 30 conflicts in a row"
                    raise AssertionError(msg)
                if m.snapshot_id is not None:
                    with lock:
                        ops[m.snapshot_id] = op
                time.sleep(0.05)
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in ("delete", "cdc")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wait_for_rounds(rounds() + 2)  # a whole round of optimizing after the writers
    watch.send_signal(signal.SIGTERM)
    watch.wait(timeout=60)
    reader.join(timeout=10)  # it reads stdout to the end (communicate would race it for the last line)
    assert watch.stderr is not None
    err = watch.stderr.read()
    out = "".join(lines)
    assert not errors, errors
    assert watch.returncode == 0, err  # SIGTERM ends the service cleanly
    assert out.rstrip().endswith("db.w: stopped (SIGTERM) after " + str(rounds()) + " rounds"), out
    assert "Traceback" not in err, err

    t.refresh()
    snapshots = {s.snapshot_id: s for s in t.metadata.snapshots}
    chain = []
    current = t.metadata.current_snapshot()
    while current is not None:
        chain.append(current)
        current = snapshots.get(current.parent_snapshot_id) if current.parent_snapshot_id else None
    chain.reverse()
    # the model: replay from the snapshot before the first write of the race
    first = min((i for i, s in enumerate(chain) if s.snapshot_id in ops), default=len(chain))
    base = chain[first - 1]
    model = set(
        t.scan(selected_fields=("id",), snapshot_id=base.snapshot_id).to_arrow().column("id").to_pylist()
    )
    optimized = 0
    for s in chain[first:]:
        op = ops.get(s.snapshot_id)
        if op is None:
            assert s.summary is not None and s.summary.operation.value == "replace", s
            optimized += 1
        elif op[0] == "delete":
            model = {x for x in model if x % 50 != op[1]}
        else:
            gone, new = op[1]  # type: ignore[misc]
            model = (model - gone) | new
        rows = t.scan(selected_fields=("id",), snapshot_id=s.snapshot_id).to_arrow().column("id").to_pylist()
        assert len(rows) == len(set(rows)) and set(rows) == model, s.snapshot_id
    assert len(ops) >= 4 and optimized >= 1, (len(ops), optimized, out)


_STREAM_SECONDS = float(os.environ.get("ICEMOR_STREAM_SECONDS", "60"))


@pytest.mark.parametrize(
    ("version", "cdc_deletes"), [(2, "equality"), (3, "equality"), (2, "position"), (3, "position")]
)
def test_watch_keeps_up_with_three_writers(
    oracle: IcebergJava, icemor_home: Path, ns: str, version: int, cdc_deletes: str
) -> None:
    """`optimize --watch` against CDC every second, DELETE and MERGE (and UPDATE on v3) for a
    minute: the final rows are the model's and Iceberg Java reads exactly them, the service stops
    cleanly on SIGTERM, and every writer committed.
    A compaction commits in every 20 s window, and icemor reads each compaction's snapshot as the
    model had the table then (Java too, for the first and the last). With equality-delete CDC (the
    stream leaves work behind every second) the score ends at least where it started. Position-mode
    CDC writes DVs or position deletes on files over the whole key range every second, and keeps
    the score above the optimizer's busy threshold: its major rewrites are forced every 5 s
    (``icemor.optimize.busy.major-interval-seconds``), so nearly every one races a writer's
    deletes for its files and must carry them over (Java's rewrite fails there)."""
    name = f"{ns}.streams_v{version}_{cdc_deletes}"
    forced = {"icemor.optimize.busy.major-interval-seconds": "5"} if cdc_deletes == "position" else {}
    r = run_streams(
        name,
        icemor_home,
        format_version=version,
        seconds=_STREAM_SECONDS,
        cdc_deletes=cdc_deletes,
        properties=forced,
    )
    out = r.optimizer_output
    assert not r.errors, r.errors
    assert r.optimizer_returncode == 0 and "Traceback" not in out, out
    assert f"{name}: stopped (SIGTERM)" in out, out
    assert len(r.rows) == len(r.model) and r.rows == r.model
    windows = r.windows(20.0)
    assert len(windows) >= int(_STREAM_SECONDS // 20), (windows, out)
    assert all(windows), (windows, out)
    if cdc_deletes == "equality":
        assert r.score_end >= r.score_start, (r.score_start, r.score_end, out)
    kinds = ("cdc", "delete", "merge", "update") if version >= 3 else ("cdc", "delete", "merge")
    assert all(r.writer_commits.get(k, 0) >= 1 for k in kinds), (r.writer_commits, r.writer_conflicts)
    java = dict(oracle.rows(name, columns=["id", "v"]))
    assert java == r.model
    t = icemor.load_table(name)
    for snapshot_id in {r.compaction_ids[0], r.compaction_ids[-1]}:
        ours = t.scan(selected_fields=("id", "v"), snapshot_id=snapshot_id).to_arrow()
        expected = sorted(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist(), strict=True))
        assert oracle.rows(name, columns=["id", "v"], snapshot_id=snapshot_id) == expected, snapshot_id
