"""DELETE under concurrency: OS processes commit DELETEs and appends to one table at once.

Each worker process (``WORKER``, run with ``sys.executable -c``) loads the table from the test's
own ``ICEMOR_HOME``, waits for a common start signal, runs its operations and prints a JSON log:
per attempt, whether it committed (with its snapshot id and, for a DELETE, the rows it deleted),
changed nothing, conflicted (``CommitConflictError``) or failed (``CommitFailedError`` / a lost
compare-and-swap of an append). The test then replays the main branch's history, oldest first,
on a model of the rows: an append adds its rows, a DELETE removes every model row its condition
matches at the moment it committed (so under serializable isolation it must have seen every
append committed before it). Checked:

- every worker exits 0 (it catches the expected errors itself);
- the snapshots after the initial data are exactly the ones the workers report as committed
  (nothing failed committed, nothing committed is lost from the main-branch ancestry);
- the table read at every one of those snapshots equals the model there (no row lost or
  resurrected), and each DELETE reported as many deleted rows as the model removed;
- no delete file or icemor manifest of a failed attempt is left behind.

Deterministic interleavings (a DELETE paused inside its catalog swap while another process
appends or overwrites) check the conflict rules exactly: serializable isolation refuses a DELETE
whose condition may match the concurrently appended rows, snapshot isolation and non-matching
appends let it commit on a retry, and an overwrite that removed a data file the DELETE
references is a conflict under either isolation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.manifest import ManifestContent
from pyiceberg.table.snapshots import ancestors_of

import concurrency
import icemor
from concurrency import WORKER_PRELUDE
from icemor.catalog import load_catalog

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.table import Table

TABLE = "db.t"
P_ISOLATION = "write.delete.isolation-level"
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("m", pa.int32())])
Row = tuple[int, str, int]

# One worker process. argv[1] is its plan (JSON): its ready/go files and its operations. An
# operation may name its own table (default: the plan's) and `pause`: its first catalog swap
# touches one file, then waits for another before going on.
WORKER = (
    WORKER_PRELUDE
    + r"""

tables = {}


def table_of(name):
    if name not in tables:
        tables[name] = icemor.load_table(name)
    return tables[name]


table_of(plan["table"])
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
    if kind == "sleep":
        time.sleep(op["seconds"])
        continue
    table = table_of(op.get("table", plan["table"]))
    pause.update(op.get("pause") or {})
    for attempt in range(op.get("tries", 1)):
        entry = {"op": i, "kind": kind, "try": attempt}
        try:
            if kind == "delete":
                m = table.delete(op["where"])
                entry["outcome"] = "committed" if m.snapshot_id is not None else "noop"
                entry["snapshot_id"] = m.snapshot_id
                entry["deleted_rows"] = m.deleted_rows
            else:
                pt = table.pyiceberg.refresh()
                data = pa.Table.from_pydict(op["rows"], schema=pt.schema().as_arrow())
                if kind == "overwrite":
                    pt.overwrite(data, overwrite_filter=op["filter"])
                else:
                    pt.append(data)
                entry["outcome"] = "committed"
                entry["snapshot_id"] = pt.current_snapshot().snapshot_id
        except CommitConflictError as e:
            entry.update(outcome="conflict", error=str(e))
        except CommitFailedError as e:
            entry.update(outcome="failed", error=str(e))
        except CommitFailedException as e:  # pyiceberg's append lost the swap: nothing committed
            if kind == "delete":
                raise
            entry.update(outcome="failed", error=str(e))
        except Exception as e:  # SQLite refused the append's swap ("database is locked")
            if kind == "delete" or type(e).__name__ != "OperationalError" or "locked" not in str(e):
                raise
            entry.update(outcome="failed", error=str(e))
        log.append(entry)
        if entry["outcome"] in ("committed", "noop"):
            break
        time.sleep(0.005 * (1 + attempt))
    assert not pause, f"operation {i} never reached its catalog swap"
print(json.dumps(log))
"""
)


def rows_table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA)


def row(i: int) -> Row:
    """The row of id ``i``: k is 'x' for every third id, m = id % 7."""
    return (i, "x" if i % 3 == 0 else "a", i % 7)


def create_table(files: list[list[int]], name: str = TABLE, **properties: str) -> PyIcebergTable:
    """Table ``name`` (id bigint, k string, m int), one data file per id list of ``files``.

    Commit retries are fast and many, so that lost swaps are retried rather than reported.
    """
    cat = load_catalog()
    cat.create_namespace_if_not_exists("db")
    props = {
        "format-version": "2",
        "commit.retry.num-retries": "30",
        "commit.retry.min-wait-ms": "5",
        "commit.retry.max-wait-ms": "200",
        **properties,
    }
    t = cat.create_table(name, schema=SCHEMA, properties=props)
    for ids in files:
        t.append(rows_table([row(i) for i in ids]))
    return t


SLEEP = {"op": "sleep", "seconds": 0.1}


def append_op(rows: list[Row], tries: int = 60) -> dict[str, Any]:
    cols = list(zip(*rows, strict=True))
    return {
        "op": "append",
        "rows": {n: list(c) for n, c in zip(SCHEMA.names, cols, strict=True)},
        "tries": tries,
    }


def delete_op(where: str | None, match: dict[str, Any], tries: int = 1) -> dict[str, Any]:
    """A DELETE; ``match`` is its condition for the model: ``{"id": [lo, hi]}``, ``{"k": v}`` or ``{}`` (all)."""
    return {"op": "delete", "where": where, "match": match, "tries": tries}


def matches(match: dict[str, Any], r: Row) -> bool:
    if "id" in match:
        lo, hi = match["id"]
        return bool(lo <= r[0] < hi)
    if "k" in match:
        return r[1] == match["k"]
    return True


def run_workers(home: Path, plans: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Run ``WORKER`` once per plan (on ``TABLE`` unless the plan names one), released together."""
    return concurrency.run_workers(
        home, WORKER, plans, defaults={"table": TABLE}, start_timeout=30, timeout=50
    )


def ancestry(t: PyIcebergTable) -> list[int]:
    """Snapshot ids of the main branch, oldest first."""
    current = t.current_snapshot()
    assert current is not None
    return [s.snapshot_id for s in ancestors_of(current, t.metadata)][::-1]


def read_rows(table: Table, snapshot_id: int | None = None) -> list[Row]:
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow().select(SCHEMA.names)
    return sorted(tuple(r.values()) for r in arrow.to_pylist())  # type: ignore[misc]


def check_against_model(
    plans: dict[str, dict[str, Any]],
    logs: dict[str, list[dict[str, Any]]],
    initial_snapshot: int,
    initial_rows: list[Row],
) -> dict[int, Row]:
    """Replay the history after ``initial_snapshot`` on the model and compare every snapshot.

    Returns:
        The model's final rows (by id).
    """
    committed: dict[int, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    for name, log in logs.items():
        for entry in log:
            if entry["outcome"] == "committed":
                sid = entry["snapshot_id"]
                assert sid not in committed, f"snapshot {sid} reported twice"
                committed[sid] = (name, plans[name]["ops"][entry["op"]], entry)
            elif entry["outcome"] == "noop":
                assert entry["snapshot_id"] is None
                assert entry["deleted_rows"] == 0
    table = icemor.load_table(TABLE)
    history = ancestry(table.pyiceberg)
    assert initial_snapshot in history
    after = history[history.index(initial_snapshot) + 1 :]
    assert len(after) == len(set(after))
    # every reported commit is on the main branch, and nothing else was committed
    assert set(after) == set(committed), (
        f"unreported snapshots {set(after) - set(committed)}, lost snapshots {set(committed) - set(after)}"
    )
    assert len(table.pyiceberg.metadata.snapshots) == history.index(initial_snapshot) + 1 + len(after)

    model = {r[0]: r for r in initial_rows}
    assert read_rows(table, initial_snapshot) == sorted(model.values())
    for sid in after:
        name, op, entry = committed[sid]
        if op["op"] == "append":
            added = list(zip(*(op["rows"][c] for c in SCHEMA.names), strict=True))
            for r in added:
                assert r[0] not in model, f"id {r[0]} appended twice"
                model[r[0]] = r
        else:
            gone = [i for i, r in model.items() if matches(op["match"], r)]
            assert entry["deleted_rows"] == len(gone), (
                f"{name}: DELETE {op['where']!r} (snapshot {sid}) reported {entry['deleted_rows']} rows, "
                f"the model has {len(gone)} matching rows when it committed"
            )
            for i in gone:
                del model[i]
        assert read_rows(table, sid) == sorted(model.values()), f"snapshot {sid} of {name}: {op['op']}"
        assert table.scan(snapshot_id=sid).count() == len(model)
    assert read_rows(table) == sorted(model.values())
    assert_no_leftovers(table.pyiceberg)
    return model


def assert_no_leftovers(t: PyIcebergTable) -> None:
    """Every delete file and icemor-written manifest on disk belongs to some snapshot of the table.

    Failed icemor attempts remove what they wrote; pyiceberg's failed appends may leave data files
    and manifests of their own naming (``<uuid>-m<n>.avro``), which are not checked.
    """
    io = t.io
    referenced: set[str] = set()
    manifests: set[str] = set()
    for snap in t.metadata.snapshots:
        for m in snap.manifests(io):
            manifests.add(m.manifest_path)
            if m.content == ManifestContent.DELETES:
                referenced.update(
                    e.data_file.file_path for e in m.fetch_manifest_entry(io, discard_deleted=False)
                )
    root = Path(t.metadata.location.removeprefix("file://"))
    on_disk = {p.as_uri() for p in root.rglob("*-deletes.parquet")}
    referenced_uris = {Path(p.removeprefix("file://")).as_uri() for p in referenced}
    assert on_disk <= referenced_uris, f"orphan delete files: {sorted(on_disk - referenced_uris)[:3]}"
    icemor_manifests = {
        p.as_uri() for p in (root / "metadata").iterdir() if re.fullmatch(r"[0-9a-f]{32}-m\d+\.avro", p.name)
    }
    manifest_uris = {Path(p.removeprefix("file://")).as_uri() for p in manifests}
    assert icemor_manifests <= manifest_uris, (
        f"orphan manifests: {sorted(icemor_manifests - manifest_uris)[:3]}"
    )


def data_files(t: PyIcebergTable, snapshot_id: int | None = None) -> set[str]:
    return {task.file.file_path for task in t.scan(snapshot_id=snapshot_id).plan_files()}


def assert_appends_committed(plan: dict[str, Any], log: list[dict[str, Any]]) -> None:
    """Every append of ``plan`` committed in the end (pyiceberg retries lost swaps itself)."""
    appends = [i for i, op in enumerate(plan["ops"]) if op["op"] == "append"]
    assert appends
    for i in appends:
        assert outcomes(log, i)[-1:] == ["committed"], f"append {i}: {outcomes(log, i)}"


def outcomes(log: list[dict[str, Any]], op: int) -> list[str]:
    return [e["outcome"] for e in log if e["op"] == op]


@pytest.mark.parametrize("deleters", [1, 2])
def test_range_deletes_and_appends_of_fresh_ids_all_commit(home: Path, deleters: int) -> None:
    """DELETEs of disjoint initial id ranges race appends of ids >= 1,000,000 (and each other).

    Column metrics show the validator that no appended file can match a DELETE, so with one
    deleter every DELETE commits at its first call (lost swaps are retried inside it). Two
    deleters touch the same data files: one may lose with a conflict (a file-scoped delete file
    it merges was replaced meanwhile); it is re-run until it commits. In the end every initial
    row in a range is gone, every appended row is there, and every snapshot reads as the model.
    """
    interleaved = [[i for i in range(800) if i % 4 == j] for j in range(4)]
    contiguous = list(range(800, 900))  # deleted by one range: the whole file is removed
    t = create_table([*interleaved, contiguous])
    initial_snapshot = ancestry(t)[-1]
    initial = sorted(row(i) for i in range(900))

    ranges = [(lo, lo + 100) for lo in range(0, 800, 100)]
    # one deleter: every other range and the contiguous file; a second one: the other ranges
    shares = [[*ranges[::2], (800, 900)], ranges[1::2]][:deleters]
    plans: dict[str, dict[str, Any]] = {}
    for d, share in enumerate(shares):
        ops = [
            delete_op(f"id >= {lo} and id < {hi}", {"id": [lo, hi]}, tries=1 if deleters == 1 else 30)
            for lo, hi in share
        ]
        plans[f"delete{d}"] = {"ops": ops}
    base = 1_000_000
    plans["append"] = {"ops": [append_op([row(base + 100 * n + j) for j in range(25)]) for n in range(6)]}

    logs = run_workers(home, plans)

    for name, plan in plans.items():
        for i in range(len(plan["ops"])):
            got = outcomes(logs[name], i)
            assert got[-1] == "committed", f"{name} op {i}: {got}"
            if name.startswith("delete"):
                assert set(got[:-1]) <= {"conflict"}, f"{name} op {i}: {got}"
                if deleters == 1:
                    assert got == ["committed"], f"{name} op {i}: {got}"
    model = check_against_model(plans, logs, initial_snapshot, initial)

    deleted = {i for share in shares for lo, hi in share for i in range(lo, hi)}
    appended = {base + 100 * n + j for n in range(6) for j in range(25)}
    assert set(model) == ({r[0] for r in initial} - deleted) | appended
    # a file whose every row a DELETE matched is removed (the contiguous one; with two deleters, all)
    initial_files = data_files(t, initial_snapshot)
    gone = initial_files - data_files(t.refresh())
    assert len(initial_files) == 5
    if deleters == 2:
        assert gone == initial_files
    else:
        assert len(gone) == 1
    for name, log in logs.items():
        if name.startswith("delete"):
            assert sum(e.get("deleted_rows", 0) for e in log if e["outcome"] == "committed") == 100 * len(
                plans[name]["ops"]
            )


def test_serializable_delete_races_appends_of_matching_rows(home: Path) -> None:
    """``k = 'x'`` DELETEs race appends, half of which add k='x' rows (serializable isolation).

    A DELETE either conflicts, or commits having seen every append committed before it: the
    history replay removes every k='x' row of the model at the DELETE's snapshot, which reads
    wrong if a DELETE committed without seeing a concurrently appended x row.
    """
    t = create_table([list(range(300)), list(range(300, 600))])
    initial_snapshot = ancestry(t)[-1]
    initial = sorted(row(i) for i in range(600))
    base = 2_000_000

    def batch(n: int) -> list[Row]:
        k = "x" if n % 2 == 0 else "y"
        return [(base + 100 * n + j, k, j % 7) for j in range(10)]

    done = str(home / "appends-done")
    x_delete = delete_op("k = 'x'", {"k": "x"})
    plans: dict[str, dict[str, Any]] = {
        # spread over the appends' time; a last one once they are all committed
        "delete": {
            "ops": [
                *[o for _ in range(8) for o in (x_delete, SLEEP)],
                {"op": "wait", "path": done},
                x_delete,
            ]
        },
        "append": {
            "ops": [
                *[o for n in range(8) for o in (append_op(batch(n)), SLEEP)],
                {"op": "touch", "path": done},
            ]
        },
    }
    logs = run_workers(home, plans)

    assert_appends_committed(plans["append"], logs["append"])
    delete_outcomes = [e["outcome"] for e in logs["delete"]]
    assert set(delete_outcomes) <= {"committed", "noop", "conflict"}, logs["delete"]
    assert delete_outcomes[-1] in ("committed", "noop")  # nothing concurrent any more
    assert "committed" in delete_outcomes  # the initial x rows went at some point
    for e in logs["delete"]:
        if e["outcome"] == "conflict":
            assert "serializable" in e["error"], e["error"]
    model = check_against_model(plans, logs, initial_snapshot, initial)
    # every x row is gone, every y row (initial and appended) is there
    assert sorted(model.values()) == sorted(
        [r for r in initial if r[1] != "x"] + [r for n in range(1, 8, 2) for r in batch(n)]
    )


def test_delete_everything_races_appends(home: Path) -> None:
    """``delete()`` (no condition) races appends: each either conflicts or empties the table at its snapshot."""
    t = create_table([list(range(200)), list(range(200, 400))])
    initial_snapshot = ancestry(t)[-1]
    initial = sorted(row(i) for i in range(400))
    base = 3_000_000
    done = str(home / "appends-done")
    everything = delete_op(None, {})
    plans: dict[str, dict[str, Any]] = {
        "delete": {
            "ops": [
                *[o for _ in range(4) for o in (everything, SLEEP)],
                {"op": "wait", "path": done},
                everything,
            ]
        },
        "append": {
            "ops": [
                *[
                    o
                    for n in range(5)
                    for o in (append_op([row(base + 100 * n + j) for j in range(10)]), SLEEP)
                ],
                {"op": "touch", "path": done},
            ]
        },
    }
    logs = run_workers(home, plans)
    assert_appends_committed(plans["append"], logs["append"])
    assert {e["outcome"] for e in logs["delete"]} <= {"committed", "noop", "conflict"}, logs["delete"]
    for e in logs["delete"]:
        if e["outcome"] == "conflict":
            assert "serializable" in e["error"], e["error"]
    assert logs["delete"][-1]["outcome"] in ("committed", "noop")
    model = check_against_model(plans, logs, initial_snapshot, initial)
    assert model == {}
    assert data_files(icemor.load_table(TABLE).pyiceberg) == set()


# (isolation, DELETE condition, what the other process commits meanwhile, the DELETE's outcome)
SWAP_RACES = [
    ("serializable", "k = 'x'", "append-x", "conflict"),
    ("serializable", "k = 'x'", "append-y", "committed"),
    ("snapshot", "k = 'x'", "append-x", "committed"),
    ("serializable", None, "append-y", "conflict"),
    # rewrites (removes) the data file of ids 0-149, which the DELETE adds position deletes for
    ("snapshot", "k = 'x'", "overwrite", "conflict"),
]


@pytest.fixture(scope="module")
def swap_races(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, list[dict[str, Any]]]]]:
    """The races of ``SWAP_RACES``, one table each (``db.race<n>``), run by one pair of processes.

    For race n, the deleter's DELETE on ``db.race<n>`` pauses inside its first catalog swap; the
    other process then commits to that table (an append of k='x' or k='y' rows, or an overwrite
    of the rows ``id < 10`` by k='y' rows) and releases it. Returns the home and both logs.
    """
    home = tmp_path_factory.mktemp("swap_races") / "home"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("ICEMOR_HOME", str(home))
        deleter: list[dict[str, Any]] = []
        writer: list[dict[str, Any]] = []
        for n, (isolation, where, concurrent, _) in enumerate(SWAP_RACES):
            name = f"db.race{n}"
            create_table([list(range(150)), list(range(150, 300))], name, **{P_ISOLATION: isolation})
            paused, released = str(home / f"paused{n}"), str(home / f"released{n}")
            op = delete_op(where, {"k": "x"} if where else {})
            deleter.append({**op, "table": name, "pause": {"touch": paused, "wait": released}})
            if concurrent == "overwrite":
                write = {**append_op(race_rows("y"), tries=1), "op": "overwrite", "filter": "id < 10"}
            else:
                write = append_op(race_rows(concurrent.removeprefix("append-")), tries=1)
            writer += [
                {"op": "wait", "path": paused},
                {**write, "table": name},
                {"op": "touch", "path": released},
            ]
        plans = {"delete": {"ops": deleter}, "write": {"ops": writer}}
        logs = run_workers(home, {w: {**plan, "table": "db.race0"} for w, plan in plans.items()})
    yield home, logs


def race_rows(k: str) -> list[Row]:
    return [(4_000_000 + j, k, j % 7) for j in range(20)]


@pytest.mark.parametrize("n", range(len(SWAP_RACES)), ids=["-".join(map(str, r)) for r in SWAP_RACES])
def test_delete_loses_its_swap_to_a_concurrent_write(
    swap_races: tuple[Path, dict[str, list[dict[str, Any]]]], monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """A DELETE paused inside its first catalog swap while another process appends or overwrites.

    Its swap then fails (the head moved); the retry validates the concurrent commit: under
    serializable isolation an appended file that may match the condition (any, for
    ``delete()``) is a conflict, and under any isolation so is the removal of a data file the
    DELETE references (nothing committed, no file left). Otherwise the DELETE commits on its
    second attempt and the appended rows, which its scan did not see, stay.
    """
    home, logs = swap_races
    monkeypatch.setenv("ICEMOR_HOME", str(home))
    _, _, concurrent, expected = SWAP_RACES[n]
    (entry,) = [e for e in logs["delete"] if e["op"] == n]
    (write,) = [e for e in logs["write"] if e["op"] == 3 * n + 1]
    assert write["outcome"] == "committed", write
    assert entry["outcome"] == expected, entry

    initial = sorted(row(i) for i in range(300))
    if concurrent == "overwrite":
        written = [r for r in initial if r[0] >= 10] + race_rows("y")
    else:
        written = [*initial, *race_rows(concurrent.removeprefix("append-"))]
    table = icemor.load_table(f"db.race{n}")
    history = ancestry(table.pyiceberg)
    write_snapshots = 2 if concurrent == "overwrite" else 1  # pyiceberg: overwrite, then append
    assert len(history) == 2 + write_snapshots + (expected == "committed")
    assert history[1 + write_snapshots] == write["snapshot_id"]
    if expected == "conflict":
        reason = "removed by concurrent snapshot" if concurrent == "overwrite" else "serializable"
        assert reason in entry["error"]
        assert read_rows(table) == sorted(written)
    else:
        assert history[-1] == entry["snapshot_id"]
        survivors = [r for r in written if r not in initial or r[1] != "x"]
        assert entry["deleted_rows"] == sum(r[1] == "x" for r in initial)
        assert read_rows(table) == sorted(survivors)
        assert read_rows(table, write["snapshot_id"]) == sorted(written)
        # the manifest list of the second attempt (attempt number 1 in its name) was committed
        snap = table.pyiceberg.snapshot_by_id(entry["snapshot_id"])
        assert snap is not None
        assert f"snap-{entry['snapshot_id']}-1-" in snap.manifest_list
    assert_no_leftovers(table.pyiceberg)
