"""The write path under faults: disk full, read-only paths, SIGKILL, concurrent writers.

Every write command of the CLI runs on a copy of one small v2 table that has work for each of
them (three data files, two position-delete files, an equality delete, six snapshots):
``append``, ``delete``, ``update``, ``merge``, ``apply-changes``, the three ``compact`` actions
and ``expire``. The faults (injected by :mod:`faults`):

- **disk full** inside the first file of each kind the command writes (data, delete, manifest,
  manifest list, metadata JSON): through a patched FileIO (64 bytes of that file fit, then every
  write fails with ``ENOSPC``; ``test_disk_full``) and on a real tmpfs filled so that exactly the
  pages of the files before it fit (no patch: the real write path; ``test_disk_full_tmpfs``,
  which needs mount rights and is reported skipped without them);
- **read-only paths**: the table directory, its ``metadata/`` or ``data/``, or ``catalog.db``:
  through the FileIO (``PermissionError``) or SQLite's ``query_only`` (``test_read_only``), and
  with no patch, the OS refusing (``test_read_only_os``): a read-only bind mount (``EROFS``)
  where we may mount, else write permission removed (``EACCES``), which stops any process but
  root; reported skipped only where neither works.

Each such case runs the CLI in process and asserts: exit code 2 with exactly one stderr line
``icemor: error: ...`` and no traceback (or success, where the fault does not stop the
command); the table reads the old rows at the old metadata, or a Python model's new rows at new
metadata; no file in the table directory that its metadata does not reference (each snapshot's
manifest list, its manifests and their entries, the metadata JSON files of the log and the
current one, read with pyiceberg and the catalog's SQLite directly).

- **SIGKILL** at each file event (first data file, first delete file, manifest, manifest list,
  metadata JSON: half written and flushed; the first file expire removes) in a forked child:
  the table reads the old or the new state and the next write succeeds. Files a kill leaves are
  orphans by design: counted, not asserted.
- **Concurrency**: five writer processes (DELETE, UPDATE, MERGE, apply-changes, append) for
  ``SECONDS`` on one table, each logging what it committed; the main branch is replayed on a
  model and the table read at every snapshot must equal it (no lost update, duplicate or
  resurrected row), with no traceback and no stray file. Which interleavings happen is chance;
  the one that resurrects rows is also made certain (an UPDATE/MERGE whose rows a DELETE or a
  CDC batch deletes while it commits).

The figures (cases, clean errors, right results, tracebacks, stray files per family) go to
``/tmp/icemor-fault-figures-<uid>.json`` (one per user: the suite runs as root, then as
``nobody``, and one user cannot overwrite the other's file); the last test asserts that no non-kill family had a
traceback or left a stray file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import faults
import icemor
from icemor.cli import run
from icemor.exceptions import CommitConflictError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

TABLE = "db.t"
FIGURES = Path(f"/tmp/icemor-fault-figures-{os.getuid()}.json")
ICEBERG_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", LongType()),
    NestedField(3, "k", StringType()),
    identifier_field_ids=[1],
)
ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("k", pa.string())])
Row = tuple[int, int | None, str | None]
Change = tuple[str, int, int | None, str | None]

# The kinds of file each operation writes on the base table, in the order it writes them.
_ROW_LEVEL = ("data", "delete", "manifest", "manifest-list", "metadata")
OP_WRITES: dict[str, tuple[str, ...]] = {
    "append": ("data", "manifest", "manifest-list", "metadata"),
    "delete": ("delete", "manifest", "manifest-list", "metadata"),
    "update": _ROW_LEVEL,
    "merge": _ROW_LEVEL,
    "apply-changes": _ROW_LEVEL,
    "compact-eq": ("delete", "manifest", "manifest-list", "metadata"),
    "compact-pos": ("delete", "manifest", "manifest-list", "metadata"),
    "compact-data": ("data", "manifest", "manifest-list", "metadata"),
    "expire": ("metadata",),
}
KILL_EVENTS = {**OP_WRITES, "expire": ("metadata", "removal")}
READ_ONLY = ("table-dir", "metadata-dir", "data-dir", "catalog-db")
KEEP_ID = 7  # a row no operation touches: the next write after a kill deletes it


# ----------------------------------------------------------------------------------- the model


def _apply_changes(rows: Sequence[Row], changes: Sequence[Change]) -> list[Row]:
    touched = {c[1] for c in changes}
    out = [r for r in rows if r[0] not in touched]
    last = {c[1]: c for c in changes}
    out += [(key, v, k) for op, key, v, k in last.values() if op in ("I", "U")]
    return out


def base_model() -> list[Row]:
    rows: list[Row] = [(i, i, f"k{i % 4}") for i in range(300) if not (i < 200 and i % 10 in (1, 2))]
    return sorted(_apply_changes(rows, BASE_CHANGES))


def _changes(*groups: Iterable[Change]) -> list[Change]:
    return [c for g in groups for c in g]


BASE_CHANGES = _changes(
    (("U", i, 5000 + i, "c") for i in range(250, 255)),
    (("D", i, None, None) for i in range(260, 265)),
    (("I", i, i, "c") for i in range(300, 305)),
)
APPEND_ROWS: list[Row] = [(i, i, "a") for i in range(1000, 1050)]
MERGE_ROWS: list[Row] = [(i, 7000 + i, "m") for i in range(295, 310)]
CHANGES = _changes(
    (("U", i, 9000 + i, "c2") for i in range(10, 15)),
    (("D", i, None, None) for i in range(20, 25)),
    (("I", i, i, "c2") for i in range(2000, 2005)),
)


def _upsert(rows: list[Row], source: list[Row]) -> list[Row]:
    keys = {r[0] for r in source}
    return [r for r in rows if r[0] not in keys] + source


MODELS: dict[str, Callable[[list[Row]], list[Row]]] = {
    "append": lambda rows: rows + APPEND_ROWS,
    "delete": lambda rows: [r for r in rows if not 50 <= r[0] < 150],
    "update": lambda rows: [(i, v + 1000 if i % 10 == 3 and v is not None else v, k) for i, v, k in rows],
    "merge": lambda rows: _upsert(rows, MERGE_ROWS),
    "apply-changes": lambda rows: _apply_changes(rows, CHANGES),
    "compact-eq": list,
    "compact-pos": list,
    "compact-data": list,
    "expire": list,
}


def _parquet(path: Path, rows: list[Row]) -> str:
    pq.write_table(
        pa.Table.from_pylist([{"id": i, "v": v, "k": k} for i, v, k in rows], schema=ARROW_SCHEMA), path
    )
    return str(path)


def _changes_table(changes: Sequence[Change]) -> pa.Table:
    return pa.table(
        {
            "op": [c[0] for c in changes],
            "id": pa.array([c[1] for c in changes], pa.int64()),
            "v": pa.array([c[2] for c in changes], pa.int64()),
            "k": pa.array([c[3] for c in changes], pa.string()),
        }
    )


def _argv(op: str, inputs: Path) -> list[str]:
    return {
        "append": ["append", TABLE, str(inputs / "append.parquet")],
        "delete": ["delete", TABLE, "--where", "id >= 50 and id < 150"],
        "update": ["update", TABLE, "--set", "v=v+1000", "--where", "id % 10 = 3"],
        "merge": ["merge", TABLE, "--source", str(inputs / "merge.parquet"), "--on", "id"],
        "apply-changes": [
            "apply-changes",
            TABLE,
            "--changes",
            str(inputs / "changes.parquet"),
            "--key",
            "id",
        ],
        "compact-eq": ["compact", TABLE, "--equality-to-position"],
        "compact-pos": ["compact", TABLE, "--position-deletes"],
        "compact-data": ["compact", TABLE, "--data-files", "--delete-file-threshold", "1"],
        "expire": ["expire", TABLE, "--older-than", "2999-01-01", "--retain-last", "1"],
    }[op]


# ----------------------------------------------------------------------------------- the world


@dataclass
class World:
    """The base table (built once) and the home every case restores it into."""

    root: Path
    home: Path
    template: Path
    inputs: Path
    mountable: bool
    os_readonly: str | None
    """How the OS is made to refuse writes here (:func:`faults.os_readonly`); None: it cannot be."""
    table_dir: Path = Path()
    zygote: faults.Zygote | None = None

    def restore(self) -> None:
        """The base table, as built, at the same paths (the warehouse may be a mount point)."""
        warehouse = self.home / "warehouse"
        for child in warehouse.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        shutil.copytree(self.template / "warehouse", warehouse, dirs_exist_ok=True)
        self.fresh_catalog_db()

    def fresh_catalog_db(self) -> None:
        """The base's catalog.db as a new file: icemor keeps an embedded catalog open per file
        (device and inode), so the next command opens it anew, under whatever mount is there."""
        staged = self.home / "catalog.db.restore"
        shutil.copyfile(self.template / "catalog.db", staged)
        os.replace(staged, self.home / "catalog.db")


def _build_base(home: Path, inputs: Path) -> None:
    """Three data files, two position-delete files (partition granularity), one CDC batch."""
    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    catalog.create_table(
        TABLE,
        schema=ICEBERG_SCHEMA,
        properties={"format-version": "2", "write.delete.granularity": "partition"},
    )
    table = icemor.load_table(TABLE)
    for lo in (0, 100, 200):
        table.append_files(
            [_parquet(inputs / f"base-{lo}.parquet", [(i, i, f"k{i % 4}") for i in range(lo, lo + 100)])]
        )
    table.delete("id % 10 = 1 and id < 200")
    table.delete("id % 10 = 2 and id < 200")
    table.apply_changes(_changes_table(BASE_CHANGES), key=["id"])
    assert _rows() == base_model()  # the base is what the model says, or nothing here means anything


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("faults")
    mountable = faults.can_mount()
    w = World(
        root,
        root / "home",
        root / "template",
        root / "inputs",
        mountable=mountable,
        os_readonly=faults.os_readonly(mountable=mountable),
    )
    w.inputs.mkdir()
    _parquet(w.inputs / "append.parquet", APPEND_ROWS)
    _parquet(w.inputs / "merge.parquet", MERGE_ROWS)
    pq.write_table(_changes_table(CHANGES), w.inputs / "changes.parquet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ICEMOR_HOME", str(w.home))
        _build_base(w.home, w.inputs)
        w.table_dir = Path(faults.references(w.home, TABLE).location)
        w.template.mkdir()
        shutil.copytree(w.home / "warehouse", w.template / "warehouse")
        shutil.copyfile(w.home / "catalog.db", w.template / "catalog.db")
        try:
            yield w
        finally:
            if w.zygote is not None:
                w.zygote.close()


# ----------------------------------------------------------------------------------- the figures

FAMILIES: dict[str, Counter[str]] = {}
CASES: list[dict[str, Any]] = []


def _tally(family: str, record: dict[str, Any]) -> None:
    c = FAMILIES.setdefault(family, Counter())
    c["cases"] += 1
    c["clean_errors"] += record["outcome"] == "clean error"
    c["successes"] += record["outcome"] == "success"
    c["right_results"] += record["state"] in ("old", "new", "serial") and not record["wrong_state"]
    c["tracebacks"] += bool(record["traceback"])
    c["cases_with_stray_files"] += bool(record["stray"])
    c["stray_files"] += len(record["stray"])
    CASES.append({"family": family, **record})


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield
    faults.dump(
        FIGURES,
        {"families": {k: dict(v) for k, v in sorted(FAMILIES.items())}, "cases": CASES},
    )


# ----------------------------------------------------------------------------------- running and observing


@dataclass
class CliResult:
    code: int | None
    err: str
    exception: str | None
    summary: str = ""
    """The exception that escaped ``run()``, one line."""

    @property
    def traceback(self) -> bool:
        return self.exception is not None or "Traceback" in self.err


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> CliResult:
    capsys.readouterr()
    try:
        code: int | None = run(argv)
        exception = None
    except BaseException as e:  # what the user would see as a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return CliResult(
            None, capsys.readouterr().err, traceback.format_exc(), f"{type(e).__name__}: {first}"
        )
    return CliResult(code, capsys.readouterr().err, exception)


def _rows(snapshot_id: int | None = None) -> list[Row]:
    scan = icemor.load_table(TABLE).scan(snapshot_id=snapshot_id)
    return sorted((r["id"], r["v"], r["k"]) for r in scan.to_arrow().to_pylist())


@dataclass
class State:
    metadata: str
    rows: list[Row] | None
    error: str | None = None


def _observe(home: Path) -> State:
    location = faults.metadata_location(home, TABLE)
    try:
        return State(location, _rows())
    except Exception as e:  # a damaged table: reported, not raised
        return State(location, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def _diff(got: list[Row], want: list[Row]) -> str:
    g, w = Counter(got), Counter(want)
    extra, missing = sorted((g - w).elements()), sorted((w - g).elements())
    return f"{len(extra)} rows too many (e.g. {extra[:3]}), {len(missing)} missing (e.g. {missing[:3]})"


@dataclass
class Verdict:
    """What one case found; ``problems`` empty means it passed."""

    case: str
    result: CliResult
    state: str = "?"
    stray: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wrong_state: bool = False
    killed: bool = False

    def record(self) -> dict[str, Any]:
        lines = [line for line in self.result.err.splitlines() if line.strip()]
        if self.killed:
            outcome = "killed"
        elif self.result.traceback:
            outcome = "traceback"
        elif self.result.code == 0:
            outcome = "success"
        elif self.result.code == 2 and len(lines) == 1 and lines[0].startswith("icemor: error: "):
            outcome = "clean error"
        else:
            outcome = f"exit {self.result.code}, {len(lines)} stderr lines"
        return {
            "case": self.case,
            "outcome": outcome,
            "stderr": lines[:3],
            "state": self.state,
            "wrong_state": self.wrong_state,
            "traceback": self.result.traceback,
            "stray": self.stray,
            "problems": self.problems,
            "notes": self.notes,
        }

    def message(self) -> str:
        err = self.result.err.strip()
        if self.result.exception is not None:
            err = f"(raised out of run(): {self.result.summary}) {err}"
        return f"{self.case}: " + "; ".join(self.problems) + f"\n    stderr: {err[:800]!r}"


def _judge(
    case: str,
    world: World,
    op: str,
    before: State,
    result: CliResult,
    *,
    error_expected: bool = True,
) -> Verdict:
    """The checks every non-kill case makes (see the module doc)."""
    v = Verdict(case, result)
    lines = [line for line in result.err.splitlines() if line.strip()]
    if result.exception is not None:
        v.problems.append(f"traceback: {result.summary}")
    elif "Traceback" in result.err:
        v.problems.append("traceback on stderr")
    elif result.code == 0:
        if error_expected:
            v.notes.append("the operation succeeded despite the fault")
    elif result.code != 2 or len(lines) != 1 or not lines[0].startswith("icemor: error: "):
        v.problems.append(f"not one clean error line: exit {result.code}, {len(lines)} stderr lines")

    after = _observe(world.home)
    new_rows = sorted(MODELS[op](before.rows or []))
    if after.rows is None:
        v.state = "unreadable"
        v.problems.append(f"the table cannot be read afterwards: {after.error}")
    elif after.metadata == before.metadata and after.rows == before.rows:
        v.state = "old"
    elif after.metadata != before.metadata and after.rows == new_rows:
        v.state = "new"
    else:
        v.state = "neither"
        v.wrong_state = True
        want = new_rows if after.metadata != before.metadata else before.rows or []
        which = "new" if after.metadata != before.metadata else "old"
        v.problems.append(
            f"the table reads neither the old nor the new rows: vs {which}: {_diff(after.rows, want)}"
        )
    if v.state == "new" and result.code not in (0, None) and "may or may not" not in result.err:
        v.wrong_state = True
        v.problems.append("an error was reported but the change was committed")
    if v.state == "old" and result.code == 0:  # every operation has work to do on the base table
        v.wrong_state = True
        v.problems.append("success was reported but nothing was committed")

    refs = faults.references(world.home, TABLE)
    v.problems += [f"unreadable metadata: {p}" for p in refs.problems]
    missing = faults.missing_files(refs)
    if missing:
        v.problems.append(
            f"files the metadata needs are missing: {[os.path.relpath(p, refs.location) for p in missing]}"
        )
    v.stray = [os.path.relpath(p, refs.location) for p in faults.stray_files(refs)]
    if v.stray:
        v.problems.append(
            f"{len(v.stray)} stray files left: {faults.describe_files(faults.stray_files(refs), refs.location)}"
        )
    return v


def _finish(family: str, v: Verdict) -> None:
    _tally(family, v.record())


# ----------------------------------------------------------------------------------- disk full

_TABLE_FILE = re.compile(r"/[^\s:'\"]+?(?:\.parquet|\.avro|\.metadata\.json)")


def _record_writes(world: World, op: str, capsys: pytest.CaptureFixture[str]) -> list[faults.Event]:
    """What ``op`` writes on the base table, in order (no fault)."""
    world.restore()
    with faults.inject(faults.Fault()) as seen:
        result = _cli(_argv(op, world.inputs), capsys)
    assert result.code == 0, f"{op} fails without any fault: {result.err}"
    return seen.events


def _disk_full_fileio(world: World, op: str, kind: str, capsys: pytest.CaptureFixture[str]) -> Verdict:
    world.restore()
    before = _observe(world.home)
    fault = faults.Fault(full_in=kind)
    with faults.inject(fault):
        result = _cli(_argv(op, world.inputs), capsys)
    v = _judge(f"disk-full/fileio {op} @ {kind}", world, op, before, result)
    if fault.fired_at is None:
        v.problems.append(f"the fault never fired: {op} wrote no {kind} file")
    else:
        v.notes.append(f"ENOSPC in {os.path.relpath(fault.fired_at, world.table_dir)}")
    return v


def _disk_full_tmpfs(world: World, op: str, kind: str, capsys: pytest.CaptureFixture[str]) -> Verdict:
    """A real tmpfs on the warehouse, filled so that the files ``op`` writes before its first
    ``kind`` file fit (whole pages) and that file does not."""
    warehouse = world.home / "warehouse"
    with faults.tmpfs(warehouse, 16 << 20):
        closes = [e for e in _record_writes(world, op, capsys) if e.action == "close"]
        kinds = [e.kind for e in closes]
        assert kind in kinds, f"{op} writes no {kind} file: {kinds}"
        first = kinds.index(kind)
        room = sum(faults.pages(e.size) for e in closes[:first])
        world.restore()
        before = _observe(world.home)
        ballast = warehouse / ".ballast"
        with ballast.open("wb") as f:
            os.posix_fallocate(f.fileno(), 0, faults.free_bytes(warehouse) - room * faults.PAGE)
        assert faults.free_bytes(warehouse) == room * faults.PAGE
        result = _cli(_argv(op, world.inputs), capsys)  # no patch at all: the real write path
        ballast.unlink()
        v = _judge(f"disk-full/tmpfs {op} @ {kind} ({room} pages free)", world, op, before, result)
        if result.code == 0:
            v.problems.append(f"the disk never filled: {op} fit in {room} free pages")
        named = _TABLE_FILE.findall(result.err + (result.exception or ""))
        v.notes.append(
            f"the error names a {faults.kind_of(named[0])} file" if named else "the error names no file"
        )
        return v


@pytest.mark.parametrize(
    ("op", "kind"), [(op, kind) for op, kinds in OP_WRITES.items() for kind in kinds], ids=lambda x: x
)
def test_disk_full(world: World, op: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The disk fills up inside the first ``kind`` file ``op`` writes (a FileIO that runs out of
    room): a clean error, the old table, no file left."""
    v = _disk_full_fileio(world, op, kind, capsys)
    _finish("disk-full/fileio", v)
    assert not v.problems, v.message()


@pytest.mark.parametrize(
    ("op", "kind"), [(op, kind) for op, kinds in OP_WRITES.items() for kind in kinds], ids=lambda x: x
)
def test_disk_full_tmpfs(world: World, op: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As :func:`test_disk_full`, on a real tmpfs that runs out of room: no patch at all."""
    if not world.mountable:
        pytest.skip("a real tmpfs needs mount rights (root with CAP_SYS_ADMIN); test_disk_full ran the case")
    v = _disk_full_tmpfs(world, op, kind, capsys)
    _finish("disk-full/tmpfs", v)
    assert not v.problems, v.message()


# ----------------------------------------------------------------------------------- read-only paths


def _read_only_target(world: World, where: str) -> Path:
    return {
        "table-dir": world.table_dir,
        "metadata-dir": world.table_dir / "metadata",
        "data-dir": world.table_dir / "data",
        "catalog-db": world.home / "catalog.db",
    }[where]


def _read_only(world: World, op: str, where: str, how: str, capsys: pytest.CaptureFixture[str]) -> Verdict:
    world.restore()
    before = _observe(world.home)
    target = _read_only_target(world, where)
    if where == "catalog-db":
        world.fresh_catalog_db()  # read-only from the start: no connection opened before
    fault = faults.Fault()
    with contextlib.ExitStack() as stack:
        if how == "mount":
            stack.enter_context(faults.readonly_bind(target))  # no patch at all: the real write path
        elif how == "chmod":
            stack.enter_context(faults.readonly_chmod(target))  # no patch either
        elif where == "catalog-db":
            stack.enter_context(faults.readonly_catalog_connections())
        else:
            fault.readonly = (str(target),)
            stack.enter_context(faults.inject(fault))
        result = _cli(_argv(op, world.inputs), capsys)
    # expire with a read-only data/ succeeds: it removes only manifest lists here (metadata/)
    v = _judge(f"read-only/{how} {op} @ {where}", world, op, before, result, error_expected=False)
    refused = [e for e in fault.events if e.action == "error"]
    if refused:
        v.notes.append(f"refused: {refused[0].kind} {os.path.relpath(refused[0].path, world.table_dir)}")
    return v


@pytest.mark.parametrize(("op", "where"), [(op, w) for op in OP_WRITES for w in READ_ONLY], ids=lambda x: x)
def test_read_only(world: World, op: str, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory or catalog.db that refuses writes (through the FileIO, or SQLite's query_only):
    a clean error (or success), old-or-new table, no file left."""
    v = _read_only(world, op, where, "fileio", capsys)
    _finish("read-only/fileio", v)
    assert not v.problems, v.message()


@pytest.mark.parametrize(("op", "where"), [(op, w) for op in OP_WRITES for w in READ_ONLY], ids=lambda x: x)
def test_read_only_os(world: World, op: str, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As :func:`test_read_only` with no patch, the OS refusing: a read-only bind mount where we
    may mount, else write permission removed."""
    if world.os_readonly is None:
        pytest.skip(
            "the OS cannot be made to refuse writes here: permission bits do not stop this process "
            "(root) and a read-only bind mount needs CAP_SYS_ADMIN; test_read_only ran the case"
        )
    v = _read_only(world, op, where, world.os_readonly, capsys)
    _finish(f"read-only/{world.os_readonly}", v)
    assert not v.problems, v.message()


# ----------------------------------------------------------------------------------- SIGKILL


@pytest.mark.parametrize(
    ("op", "event"), [(op, e) for op, events in KILL_EVENTS.items() for e in events], ids=lambda x: x
)
def test_killed(world: World, op: str, event: str, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL at a file event: the table reads the old or the new state, and the next write succeeds."""
    if world.zygote is None:
        world.zygote = faults.Zygote()
    world.restore()
    before = _observe(world.home)
    got = world.zygote.run(world.home, _argv(op, world.inputs), event, world.root / "kill.log")
    case = f"kill {op} @ {event}"
    v = Verdict(case, CliResult(None, got["output"], None))
    v.killed = got["signal"] == signal.SIGKILL
    if not v.killed:
        v.problems.append(f"not killed at {event} (exit {got['code']}): {got['output'][-500:]!r}")

    after = _observe(world.home)
    new_rows = sorted(MODELS[op](list(before.rows or [])))
    if after.rows is None:
        v.state = "unreadable"
        v.problems.append(f"the table cannot be read after the kill: {after.error}")
    elif after.metadata == before.metadata and after.rows == before.rows:
        v.state = "old"
    elif after.metadata != before.metadata and after.rows == new_rows:
        v.state = "new"
    else:
        v.state, v.wrong_state = "neither", True
        v.problems.append(
            f"the table reads neither the old nor the new rows: vs new: {_diff(after.rows, new_rows)}"
        )
    refs = faults.references(world.home, TABLE)
    v.problems += [f"unreadable metadata: {p}" for p in refs.problems]
    missing = faults.missing_files(refs)
    if missing:
        v.problems.append(f"files the metadata needs are missing: {missing}")
    v.stray = [os.path.relpath(p, refs.location) for p in faults.stray_files(refs)]  # orphans: expected

    if after.rows is not None:
        nxt = _cli(["delete", TABLE, "--where", f"id = {KEEP_ID}"], capsys)
        if nxt.code != 0 or nxt.traceback:
            v.problems.append(f"the next write fails: exit {nxt.code}: {nxt.err.strip()[:300]!r}")
        else:
            want = [r for r in after.rows if r[0] != KEEP_ID]
            got_rows = _observe(world.home).rows
            if got_rows != want:
                v.problems.append(f"the next write's result is wrong: {_diff(got_rows or [], want)}")
    _finish("kill", v)
    assert not v.problems, v.message()


# ----------------------------------------------------------------------------------- concurrency

SECONDS = 20
KEYS = 200  # the hot rows the writers pick from (the base has 0-399; appends add 400 and up)
WRITERS = ("delete", "update", "merge", "cdc", "append")
# seconds between attempts: the quick committers (appends, CDC batches, which never conflict)
# would otherwise leave no window for a MERGE, whose whole-table condition conflicts with any
# data committed meanwhile (serializable isolation)
PAUSES = {"cdc": (0.4, 1.0), "append": (0.4, 1.0)}

WRITER = r"""
import json, os, random, sys, time, traceback

plan = json.loads(sys.argv[1])
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException

import icemor
from icemor.exceptions import CommitConflictError, CommitFailedError

kind, rng = plan["kind"], random.Random(plan["seed"])
table = icemor.load_table(plan["table"])
open(plan["ready"], "w").close()
while not os.path.exists(plan["go"]):
    time.sleep(0.005)
end = time.monotonic() + plan["seconds"]
log, n = [], 0
try:
    while time.monotonic() < end:
        n += 1
        e = {"op": kind, "n": n}
        try:
            if kind == "delete":
                lo = rng.randrange(plan["keys"])
                e.update(lo=lo, hi=lo + 8)
                m = table.delete(f"id >= {lo} and id < {lo + 8}")
                e.update(snapshot=m.snapshot_id, rows=m.deleted_rows)
            elif kind == "update":
                lo = rng.randrange(plan["keys"])
                e.update(lo=lo, hi=lo + 40)
                m = table.update({"v": "v + 1"}, where=f"id >= {lo} and id < {lo + 40}")
                e.update(snapshot=m.snapshot_id, rows=m.rows_updated)
            elif kind == "merge":
                keys = sorted(rng.sample(range(plan["keys"]), 4))
                e.update(keys=keys)
                src = pa.table({"id": pa.array(keys, pa.int64()), "v": pa.array([100] * 4, pa.int64()),
                                "k": ["m"] * 4})
                m = (table.merge(src, on=["id"]).when_matched_update({"v": "t.v + s.v"})
                     .when_not_matched_insert_all().execute())
                e.update(snapshot=m.snapshot_id, updated=m.rows_updated, inserted=m.rows_inserted)
            elif kind == "cdc":
                keys = sorted(rng.sample(range(plan["keys"]), 4))
                ops = "D" if rng.random() < 0.5 else "UD"  # deletes only: no data file, no serializable conflict
                changes = [[rng.choice(ops), k, 1_000_000 + 10 * n + i, "c"] for i, k in enumerate(keys)]
                e.update(changes=changes)
                m = table.apply_changes(pa.table({
                    "op": [c[0] for c in changes], "id": pa.array(keys, pa.int64()),
                    "v": pa.array([c[2] for c in changes], pa.int64()), "k": [c[3] for c in changes]}),
                    key=["id"])
                e.update(snapshot=m.snapshot_id)
            elif kind == "append":
                lo = 400 + 3 * (n - 1)
                rows = [[i, 0, "a"] for i in range(lo, lo + 3)]
                path = os.path.join(plan["dir"], f"append-{n}.parquet")
                schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()),
                                    ("k", pa.string())])
                pq.write_table(pa.Table.from_pylist([dict(zip(("id", "v", "k"), r)) for r in rows],
                                                    schema=schema), path)
                e.update(rows=rows)
                table.append_files([path])
                e.update(snapshot="append")
            e["outcome"] = "committed" if e.get("snapshot") is not None else "nothing"
        except CommitConflictError as x:
            e.update(outcome="conflict", error=str(x).splitlines()[0])
        except (CommitFailedError, CommitFailedException) as x:
            e.update(outcome="failed", error=str(x).splitlines()[0])
        except BaseException as x:
            e.update(outcome="traceback", error=traceback.format_exc())
            log.append(e)
            break
        log.append(e)
        time.sleep(rng.uniform(*plan["pause"]))
finally:
    with open(plan["log"], "w") as f:
        json.dump(log, f)
"""


def _concurrency_base() -> list[Row]:
    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    # every metadata JSON stays in the log (default: the last 100), so none counts as a stray file
    properties = {"format-version": "2", "write.metadata.previous-versions-max": "10000"}
    t = catalog.create_table(TABLE, schema=ICEBERG_SCHEMA, properties=properties)
    rows: list[Row] = [(i, 0, "b") for i in range(400)]
    for lo in range(0, 400, 100):
        t.append(
            pa.Table.from_pylist(
                [{"id": i, "v": v, "k": k} for i, v, k in rows[lo : lo + 100]], schema=ARROW_SCHEMA
            )
        )
    return rows


def _replay(rows: list[Row], e: dict[str, Any]) -> tuple[list[Row], str | None]:
    """The model after the logged operation ``e``, and a note when the count it reported differs
    from the rows it changed in the model (a concurrent delete of the same rows does that)."""
    op, note = e["op"], None
    if op == "delete":
        out = [r for r in rows if not e["lo"] <= r[0] < e["hi"]]
        if len(rows) - len(out) != e["rows"]:
            note = (
                f"DELETE {e['lo']}-{e['hi']} reported {e['rows']} rows, the model lost {len(rows) - len(out)}"
            )
    elif op == "update":
        hit = sum(e["lo"] <= r[0] < e["hi"] for r in rows)
        out = [(i, v + 1 if e["lo"] <= i < e["hi"] and v is not None else v, k) for i, v, k in rows]
        if hit != e["rows"]:
            note = f"UPDATE {e['lo']}-{e['hi']} reported {e['rows']} rows, the model has {hit}"
    elif op == "merge":
        present = {r[0] for r in rows}
        out = [(i, v + 100 if i in e["keys"] and v is not None else v, k) for i, v, k in rows]
        out += [(key, 100, "m") for key in e["keys"] if key not in present]
    elif op == "cdc":
        out = _apply_changes(rows, [(c[0], c[1], c[2], c[3]) for c in e["changes"]])
    else:
        out = rows + [(r[0], r[1], r[2]) for r in e["rows"]]
    return out, note


def _classify(got: list[Row], want: list[Row], deleted_ever: set[int]) -> Counter[str]:
    """Differences by kind: duplicates, resurrected rows, lost rows, lost updates.

    A key the table holds more often than the model: resurrected if the model deleted it and
    holds it no more, else a duplicate. A key held as often but with other values: resurrected
    if the model deleted it before and the table's row comes from another writer (its ``k``
    tag: an UPDATE/MERGE applied to a deleted version, where the model re-inserted it), else a
    lost update.
    """
    g, w = Counter(got), Counter(want)
    out: Counter[str] = Counter()
    g_keys, w_keys = Counter(r[0] for r in got), Counter(r[0] for r in want)
    for key in set(g_keys) | set(w_keys):
        if g_keys[key] > w_keys[key]:
            kind = "resurrected" if w_keys[key] == 0 and key in deleted_ever else "duplicates"
            out[kind] += g_keys[key] - w_keys[key]
        elif g_keys[key] < w_keys[key]:
            out["lost rows"] += w_keys[key] - g_keys[key]
        else:
            extra = [r for r in (g - w).elements() if r[0] == key]
            if extra:
                tags = {r[2] for r in want if r[0] == key}
                reborn = key in deleted_ever and any(r[2] not in tags for r in extra)
                out["resurrected" if reborn else "lost updates"] += len(extra)
    return out


def test_concurrent_writers_replay_on_a_model(home: Path, tmp_path: Path) -> None:
    """Five writer processes for SECONDS: every snapshot of the main branch equals the model replayed
    up to it; nothing committed is lost, nothing uncommitted is in; no traceback, no stray file."""
    base = _concurrency_base()
    first = icemor.load_table(TABLE).metadata.current_snapshot_id
    procs = []
    env = {**os.environ, "ICEMOR_HOME": str(home), "PYICEBERG_MAX_WORKERS": "2"}
    for i, kind in enumerate(WRITERS):
        plan = {
            "kind": kind,
            "seed": 27 + i,
            "table": TABLE,
            "keys": KEYS,
            "seconds": SECONDS,
            "pause": PAUSES.get(kind, (0, 0.03)),
            "dir": str(tmp_path),
            "ready": str(tmp_path / f"ready-{i}"),
            "go": str(tmp_path / "go"),
            "log": str(tmp_path / f"log-{i}.json"),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, json.dumps(plan)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in range(len(WRITERS))):
        assert time.monotonic() < deadline, "the writers did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.05)
    (tmp_path / "go").touch()
    started = time.monotonic()
    outputs = [p.communicate(timeout=SECONDS + 120) for p in procs]
    started_check = time.monotonic()

    problems: list[str] = []
    tracebacks = 0
    logs: list[list[dict[str, Any]]] = []
    for i, (kind, p, (_, err)) in enumerate(zip(WRITERS, procs, outputs, strict=True)):
        log_path = tmp_path / f"log-{i}.json"
        log = json.loads(log_path.read_text()) if log_path.exists() else []
        logs.append(log)
        bad = [e for e in log if e["outcome"] == "traceback"]
        if p.returncode != 0 or bad or "Traceback" in err:
            tracebacks += max(1, len(bad))
            problems.append(
                f"{kind} writer: exit {p.returncode}: {(bad[0]['error'] if bad else err)[-1500:]}"
            )
    entries = [e for log in logs for e in log]

    # the main branch, oldest first, after the base
    meta = icemor.load_table(TABLE).metadata
    chain = []
    s = meta.current_snapshot()
    while s is not None and s.snapshot_id != first:
        chain.append(s)
        s = meta.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id is not None else None
    chain.reverse()
    by_id = {e["snapshot"]: e for e in entries if e["outcome"] == "committed" and e["op"] != "append"}
    appends = iter([e for e in logs[WRITERS.index("append")] if e["outcome"] == "committed"])
    committed_ids = set(by_id)

    model = sorted(base)
    deleted_ever: set[int] = set()
    findings: Counter[str] = Counter()
    count_notes: list[str] = []
    checked = 0
    for snap in chain:
        op = snap.summary.operation.value if snap.summary is not None else "?"
        e: dict[str, Any] | None
        if snap.snapshot_id in by_id:
            e = by_id.pop(snap.snapshot_id)
        elif op == "append":
            e = next(appends, None)
            if e is None:
                problems.append(f"append snapshot {snap.snapshot_id} that no writer reports")
                break
        else:
            problems.append(f"snapshot {snap.snapshot_id} ({op}) that no writer reports as committed")
            break
        keys_before = {r[0] for r in model}
        model, note = _replay(model, e)
        model.sort()
        deleted_ever |= keys_before - {r[0] for r in model}
        if note:
            count_notes.append(f"snapshot {snap.snapshot_id}: {note}")
        got = _rows(snap.snapshot_id)
        checked += 1
        if got != model:
            kinds = _classify(got, model, deleted_ever)
            findings.update(kinds)
            problems.append(
                f"snapshot {snap.snapshot_id} ({e['op']} {json.dumps({k: e[k] for k in e if k in ('lo', 'hi', 'keys', 'changes')})}): "
                f"{dict(kinds)}: {_diff(got, model)}"
            )
            model = got  # judge the next snapshots on what the table holds
    if by_id:
        findings["lost commits"] += len(by_id)
        problems.append(f"{len(by_id)} reported commits not in the main branch: {sorted(by_id)[:5]}")
    if next(appends, None) is not None:
        findings["lost commits"] += 1
        problems.append("a reported append is not in the main branch")

    refs = faults.references(home, TABLE)
    stray = faults.stray_files(refs)
    if stray:
        problems.append(f"{len(stray)} stray files: {faults.describe_files(stray[:8], refs.location)}")
    outcomes = Counter(f"{e['op']} {e['outcome']}" for e in entries)
    FAMILIES["concurrency"] = Counter(
        {
            "cases": 1,
            "right_results": int(not findings),
            "snapshots_checked": checked,
            "tracebacks": tracebacks,
            "stray_files": len(stray),
            "cases_with_stray_files": int(bool(stray)),
            "seconds_writing": round(started_check - started),
            "seconds_checking": round(time.monotonic() - started_check),
            "reported_counts_off": len(count_notes),
            **findings,
            **{f"attempts: {k}": v for k, v in sorted(outcomes.items())},
        }
    )
    CASES.append(
        {
            "family": "concurrency",
            "case": "5 writers",
            "problems": problems,
            "notes": count_notes,
            "outcomes": dict(outcomes),
        }
    )
    assert (
        len(committed_ids) + sum(e["outcome"] == "committed" for e in logs[WRITERS.index("append")]) >= 10
    ), outcomes
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("by", ["delete", "cdc-delete"])
@pytest.mark.parametrize("op", ["update", "merge"])
def test_row_deleted_while_a_row_level_operation_commits(
    home: Path, monkeypatch: pytest.MonkeyPatch, op: str, by: str
) -> None:
    """The interleaving the concurrency model is after, made certain: while an UPDATE or MERGE that
    read row 5 reaches its catalog swap, a DELETE (or a CDC batch deleting key 5) commits. Either
    the UPDATE/MERGE conflicts, or the result is the serial one (DELETE, then it): row 5 must not
    come back with the value the UPDATE/MERGE computed from its deleted version."""
    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    t = catalog.create_table(TABLE, schema=ICEBERG_SCHEMA, properties={"format-version": "2"})
    base: list[Row] = [(i, 0, "b") for i in range(20)]
    t.append(pa.Table.from_pylist([{"id": i, "v": v, "k": k} for i, v, k in base], schema=ARROW_SCHEMA))

    original = SqlCatalog.commit_table
    interleaved: list[str] = []

    def commit_table(self: SqlCatalog, table: Any, requirements: Any, updates: Any) -> Any:
        if not interleaved:
            interleaved.append(by)  # the concurrent commit goes straight through
            other = icemor.load_table(TABLE)
            if by == "delete":
                other.delete("id = 5")
            else:
                other.apply_changes(_changes_table([("D", 5, None, None)]), key=["id"])
        return original(self, table, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    table = icemor.load_table(TABLE)
    after_delete = [r for r in base if r[0] != 5]
    source: list[Row] = [(3, 100, "m"), (5, 100, "m"), (25, 100, "m")]
    serial: list[Row]
    try:
        if op == "update":
            table.update({"v": "v + 1"}, where="id < 10")
            serial = [(i, v + 1 if i < 10 and v is not None else v, k) for i, v, k in after_delete]
        else:
            src = pa.Table.from_pylist([{"id": i, "v": v, "k": k} for i, v, k in source], schema=ARROW_SCHEMA)
            table.merge(src, on=["id"]).when_matched_update(
                {"v": "t.v + s.v"}
            ).when_not_matched_insert_all().execute()
            serial = [(i, v + 100 if i == 3 and v is not None else v, k) for i, v, k in after_delete]
            serial += [r for r in source if r[0] in (5, 25)]
        outcome = "committed"
    except CommitConflictError:
        serial, outcome = after_delete, "conflict"
    monkeypatch.setattr(SqlCatalog, "commit_table", original)
    assert interleaved == [by]
    got = _rows()
    problem = (
        None
        if got == sorted(serial)
        else f"{outcome}: {_diff(got, sorted(serial))}; row 5: {[r for r in got if r[0] == 5]}"
    )
    record = {
        "case": f"{op} while a {by} of its row commits",
        "outcome": outcome,
        "stderr": [],
        "state": "serial" if problem is None else "not serial",
        "wrong_state": problem is not None,
        "traceback": False,
        "stray": [],
        "problems": [problem] if problem else [],
        "notes": [],
    }
    _tally("concurrency/interleaved", record)
    assert problem is None, f"{op} while a {by} of row 5 commits: {problem}"


# ----------------------------------------------------------------------------------- the figures


def test_figures() -> None:
    """Print the tally; no non-kill family may have a traceback or leave a stray file.

    The tally is what the suite's other tests recorded in this session: alone, there is nothing
    to judge, and that is a failure, not a pass."""
    assert FAMILIES, "no case of the fault suite ran in this session: run test_figures with the suite"
    summary = {k: dict(v) for k, v in sorted(FAMILIES.items())}
    print(json.dumps(summary, indent=2, sort_keys=True))
    faults.dump(FIGURES, {"families": summary, "cases": CASES})
    bad = {
        family: {"tracebacks": c["tracebacks"], "stray_files": c["stray_files"]}
        for family, c in FAMILIES.items()
        if family != "kill" and (c["tracebacks"] or c["stray_files"])
    }
    assert not bad, bad
