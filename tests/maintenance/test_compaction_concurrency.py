"""Compaction under concurrency: OS processes compact and DELETE (and append to) one table at once.

Each worker process (``WORKER``) loads the table from the test's ``ICEMOR_HOME``, waits for a
common start signal, runs its operations and prints a JSON log: per attempt, whether it
committed (snapshot id, and rows deleted for a DELETE), changed nothing, or conflicted
(``CommitConflictError``). Neither side may lose the other's effect:

- deterministic races pause one side inside its catalog swap while the other commits: a
  compaction that rewrote a file the DELETE added position deletes for carries them onto its new
  files and commits (where Java's validateNoNewDeletesForDataFiles fails it), a DELETE whose data
  file a compaction replaced must fail cleanly and may then run again and commit; an append
  racing a compaction is no conflict;
- a free-running race loops compactions against range DELETEs (retried until they commit).

The history is then replayed on a model of the rows (a DELETE removes the model rows its range
matches when it committed, a compaction changes none, an append adds its rows) and the table
read at every snapshot must equal the model; failed attempts leave no file behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table.snapshots import ancestors_of

import concurrency
import icemor
from concurrency import WORKER_PRELUDE
from icemor.catalog import load_catalog

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string())])

WORKER = (
    WORKER_PRELUDE
    + r"""
table = icemor.load_table(plan["table"])
Path(plan["ready"]).touch()
wait_for(plan["go"])
log = []
for i, op in enumerate(plan["ops"]):
    kind = op["op"]
    if kind == "touch":
        Path(op["path"]).touch()
        continue
    if kind == "wait":
        wait_for(op["path"])
        continue
    pause.update(op.get("pause") or {})
    for attempt in range(op.get("tries", 1)):
        entry = {"op": i, "kind": kind, "try": attempt}
        try:
            if kind == "delete":
                m = table.delete(op["where"])
                entry["deleted_rows"] = m.deleted_rows
            elif kind == "compact-data":
                m = table.maintenance.rewrite_data_files(delete_file_threshold=1)
            elif kind == "compact-deletes":
                m = table.maintenance.rewrite_position_deletes()
            else:
                pt = table.pyiceberg.refresh()
                pt.append(pa.Table.from_pydict(op["rows"], schema=pt.schema().as_arrow()))
                m = None
                entry["snapshot_id"] = pt.current_snapshot().snapshot_id
            if m is not None:
                entry["snapshot_id"] = m.snapshot_id
            entry["outcome"] = "committed" if entry["snapshot_id"] is not None else "noop"
        except CommitConflictError as e:
            entry.update(outcome="conflict", error=str(e))
        except (CommitFailedError, CommitFailedException) as e:  # every swap lost: nothing committed
            entry.update(outcome="failed", error=str(e))
        except Exception as e:  # SQLite refused pyiceberg's append swap ("database is locked")
            if kind != "append" or "locked" not in str(e):
                raise
            entry.update(outcome="failed", error=str(e))
        log.append(entry)
        if entry["outcome"] in ("committed", "noop"):
            break
        time.sleep(0.01 * (1 + attempt))
    assert not pause, f"operation {i} never reached its catalog swap"
print(json.dumps(log))
"""
)


def create_table(name: str, files: list[range], **properties: str) -> None:
    """``name`` (id, k = 'k' + id % 2), one data file per range; fast, many commit retries."""
    cat = load_catalog()
    cat.create_namespace_if_not_exists(name.split(".", maxsplit=1)[0])
    props = {
        "format-version": "2",
        "commit.retry.num-retries": "30",
        "commit.retry.min-wait-ms": "5",
        "commit.retry.max-wait-ms": "200",
        **properties,
    }
    t = cat.create_table(name, schema=SCHEMA, properties=props)
    for ids in files:
        t.append(pa.table({"id": pa.array(ids, pa.int64()), "k": [f"k{i % 2}" for i in ids]}, schema=SCHEMA))


def run_workers(home: Path, plans: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Run ``WORKER`` once per plan, released together; each must exit 0. Returns each one's log."""
    return concurrency.run_workers(home, WORKER, plans)


def read_ids(name: str, snapshot_id: int | None = None) -> list[int]:
    arrow = icemor.load_table(name).scan(snapshot_id=snapshot_id, selected_fields=("id",)).to_arrow()
    return sorted(arrow.column("id").to_pylist())


def check_history(
    name: str, plans: dict[str, dict[str, Any]], logs: dict[str, list[dict[str, Any]]], initial: set[int]
) -> set[int]:
    """Replay the main branch after the initial data on the model; every snapshot must read as it.

    Returns:
        The model's final ids.
    """
    committed: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for worker, log in logs.items():
        for entry in log:
            if entry["outcome"] == "committed":
                committed[entry["snapshot_id"]] = (plans[worker]["ops"][entry["op"]], entry)
    t = icemor.load_table(name).pyiceberg
    current = t.current_snapshot()
    assert current is not None
    history = list(ancestors_of(current, t.metadata))[::-1]
    start = max(i for i, s in enumerate(history) if s.snapshot_id not in committed)
    after = history[start + 1 :]
    assert {s.snapshot_id for s in after} == set(committed), (
        "a reported commit is missing, or one is unreported"
    )
    model = set(initial)
    assert read_ids(name, history[start].snapshot_id) == sorted(model)
    for snap in after:
        op, entry = committed[snap.snapshot_id]
        operation = snap.summary.operation.value if snap.summary is not None else None
        if op["op"] == "delete":
            lo, hi = op["range"]
            gone = {i for i in model if lo <= i < hi}
            assert entry["deleted_rows"] == len(gone), f"DELETE {op['where']} at {snap.snapshot_id}"
            model -= gone
        elif op["op"] == "append":
            model |= set(op["rows"]["id"])
        else:
            assert operation == "replace", (op, operation)  # a compaction changes files, not rows
        assert read_ids(name, snap.snapshot_id) == sorted(model), f"snapshot {snap.snapshot_id}: {op['op']}"
    assert_no_stray_files(name)
    return model


def assert_no_stray_files(name: str) -> None:
    """Every Parquet file under data/ is one some snapshot references: failed attempts cleaned up."""
    t = icemor.load_table(name).pyiceberg
    referenced: set[str] = set()
    for snap in t.metadata.snapshots:
        for m in snap.manifests(t.io):
            referenced.update(
                e.data_file.file_path.removeprefix("file://")
                for e in m.fetch_manifest_entry(t.io, discard_deleted=False)
            )
    root = Path(t.metadata.location.removeprefix("file://")) / "data"
    on_disk = {str(p) for p in root.rglob("*.parquet")}
    # pyiceberg's own appends name files 00000-0-<uuid>.parquet and may leave them on a lost swap
    ours = {p for p in on_disk if "-rewrite-" in p or "-deletes" in p or "-compacted-" in p}
    assert ours <= referenced, sorted(ours - referenced)[:3]


def delete_op(lo: int, hi: int, **extra: Any) -> dict[str, Any]:
    return {"op": "delete", "where": f"id >= {lo} and id < {hi}", "range": [lo, hi], **extra}


# (what pauses inside its swap, what the other process commits meanwhile, expected first outcome)
RACES = [
    ("compact-data", "delete", "committed"),  # its new position deletes are carried onto the new files
    ("delete", "compact-data", "conflict"),  # the DELETE's data file was replaced
    ("compact-deletes", "delete", "conflict"),  # the DELETE merged (removed) the files being merged
    ("delete", "compact-deletes", "conflict"),  # the compaction merged the DELETE's older file away
    ("compact-data", "append", "committed"),  # an append takes nothing away from a rewrite
]


@pytest.mark.parametrize(("paused", "other", "expected"), RACES, ids=["-vs-".join(r[:2]) for r in RACES])
def test_paused_inside_the_swap_while_the_other_commits(
    home: Path, paused: str, other: str, expected: str
) -> None:
    name = "db.t"
    create_table(name, [range(100), range(100, 200)])
    setup = icemor.load_table(name)
    # every file has deletes (file granularity: one file-scoped delete file per data file) ...
    setup.delete(f"id in ({', '.join(str(i) for i in range(1, 200, 10))})")
    # ... and a second one, so that minor compaction has something to merge
    setup.pyiceberg.transaction().set_properties(
        {"write.delete.granularity": "partition"}
    ).commit_transaction()
    setup.delete(f"id in ({', '.join(str(i) for i in range(2, 200, 10))})")
    setup.pyiceberg.transaction().set_properties({"write.delete.granularity": "file"}).commit_transaction()
    initial = set(read_ids(name))
    paused_at, released = str(home / "paused"), str(home / "released")

    def op(kind: str, **extra: Any) -> dict[str, Any]:
        if kind == "delete":
            return delete_op(50, 60, **extra)
        if kind == "append":
            return {"op": "append", "rows": {"id": [1000, 1001], "k": ["k0", "k1"]}, **extra}
        return {"op": kind, **extra}

    plans = {
        "paused": {
            "table": name,
            "ops": [op(paused, pause={"touch": paused_at, "wait": released}), op(paused)],
        },
        "other": {
            "table": name,
            "ops": [{"op": "wait", "path": paused_at}, op(other), {"op": "touch", "path": released}],
        },
    }
    logs = run_workers(home, plans)
    first, second = logs["paused"]
    assert logs["other"][0]["outcome"] == "committed", logs["other"]
    assert first["outcome"] == expected, first
    if expected == "conflict":
        assert second["outcome"] in ("committed", "noop"), second  # run again, it goes through
    model = check_history(name, plans, logs, initial)
    expected_ids = set(initial)
    if "delete" in (paused, other):
        expected_ids -= set(range(50, 60))
    if "append" in (paused, other):
        expected_ids |= {1000, 1001}
    assert model == expected_ids


def test_compactions_race_deletes_and_appends(home: Path) -> None:
    """Free-running: a process compacts over and over while another runs range DELETEs (retried on
    conflict until they commit) and a third appends; the model checks every snapshot."""
    name = "db.t"
    # partition-scoped delete files pile up: minor compaction has work between the DELETEs
    create_table(
        name, [range(i * 100, i * 100 + 100) for i in range(4)], **{"write.delete.granularity": "partition"}
    )
    initial = set(read_ids(name))
    done = str(home / "deletes-done")
    plans = {
        "compact": {
            "table": name,
            "ops": [
                *[{"op": k} for _ in range(6) for k in ("compact-data", "compact-deletes")],
                {"op": "wait", "path": done},
                {"op": "compact-data"},
            ],
        },
        "delete": {
            "table": name,
            "ops": [
                *[delete_op(lo, lo + 15, tries=40) for lo in range(0, 400, 40)],
                {"op": "touch", "path": done},
            ],
        },
        "append": {
            "table": name,
            "ops": [{"op": "append", "rows": {"id": [5000 + n], "k": ["k0"]}, "tries": 40} for n in range(5)],
        },
    }
    logs = run_workers(home, plans)
    for entry_op in range(10):
        outcomes = [e["outcome"] for e in logs["delete"] if e["op"] == entry_op]
        assert outcomes[-1] == "committed" and set(outcomes[:-1]) <= {"conflict", "failed"}, outcomes
    for entry_op in range(5):
        assert [e["outcome"] for e in logs["append"] if e["op"] == entry_op][-1] == "committed"
    assert {e["outcome"] for e in logs["compact"]} <= {"committed", "noop", "conflict", "failed"}
    assert any(e["outcome"] == "committed" for e in logs["compact"])
    model = check_history(name, plans, logs, initial)
    deleted = {i for lo in range(0, 400, 40) for i in range(lo, lo + 15)}
    assert model == (initial - deleted) | {5000 + n for n in range(5)}
    assert read_ids(name) == sorted(model)
