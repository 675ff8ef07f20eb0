"""Every write that fails cleans up after itself.

A disk that fills up, a directory or file system that refuses writes, a read-only catalog, a
lost compare-and-swap or SIGTERM: the command fails with one line on stderr (exit 2; 130 for
SIGTERM), nothing is committed, and no file is left that no snapshot references. "Left" is
checked against the table itself: every file under the table's location must be the current
metadata JSON, one in its metadata log, or a manifest list, manifest, data or delete file of
one of its snapshots.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFile

import icemor
from icemor.cli import run
from oracle import local_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

ROWS = 200


# ---------------------------------------------------------------------------------------- helpers


def _write(path: Path, table: pa.Table) -> str:
    pq.write_table(table, path)
    return str(path)


def _inputs(tmp: Path) -> dict[str, str]:
    """The Parquet inputs the commands read (written once per test, outside any table)."""
    tmp.mkdir(parents=True, exist_ok=True)
    ids = pa.array(range(ROWS), pa.int64())
    return {
        "rows": _write(tmp / "rows.parquet", pa.table({"id": ids, "k": ids})),
        "more": _write(
            tmp / "more.parquet",
            pa.table(
                {
                    "id": pa.array(range(ROWS, 3 * ROWS), pa.int64()),
                    "k": pa.array(range(2 * ROWS), pa.int64()),
                }
            ),
        ),
        "changes": _write(
            tmp / "changes.parquet",
            pa.table(
                {
                    "op": ["U", "D", "I"] * 10,
                    "id": pa.array([i for j in range(10) for i in (j, 50 + j, 1000 + j)], pa.int64()),
                    "k": pa.array(range(30), pa.int64()),
                }
            ),
        ),
    }


def _pyiceberg_table(name: str = "db.t") -> PyIcebergTable:
    from icemor.catalog import load_catalog

    return load_catalog().load_table(name)


def _referenced(table: PyIcebergTable) -> set[Path]:
    """Every file the table references: metadata JSONs, manifest lists, manifests, data and deletes."""
    io = table.io
    out = {local_path(table.metadata_location)}
    out |= {local_path(entry.metadata_file) for entry in table.metadata.metadata_log}
    for snapshot in table.metadata.snapshots:
        out.add(local_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(io):
            out.add(local_path(manifest.manifest_path))
            out |= {
                local_path(e.data_file.file_path)
                for e in manifest.fetch_manifest_entry(io, discard_deleted=False)
            }
    return out


def _orphans(name: str = "db.t") -> set[Path]:
    """Files under the table's location that the table does not reference."""
    table = _pyiceberg_table(name)
    on_disk = {p for p in local_path(table.metadata.location).rglob("*") if p.is_file()}
    return on_disk - _referenced(table)


def _snapshot_id(name: str = "db.t") -> int | None:
    snapshot = _pyiceberg_table(name).current_snapshot()
    return None if snapshot is None else snapshot.snapshot_id


def _setup(home: Path, inputs: dict[str, str], monkeypatch: pytest.MonkeyPatch, *, deletes: int = 0) -> None:
    """A fresh home with ``db.t``: two appends, then ``deletes`` DELETEs, each writing new
    position-delete files (partition granularity: none folds the one before)."""
    monkeypatch.setenv("ICEMOR_HOME", str(home))
    props = ["--property", "write.delete.granularity=partition"] if deletes else []
    assert run(["create-table", "db.t", "--schema-from", inputs["rows"], *props]) == 0
    assert run(["append", "db.t", inputs["rows"]]) == 0
    assert run(["append", "db.t", inputs["more"]]) == 0
    for i in range(deletes):
        assert run(["delete", "db.t", "--where", f"id = {10 * i + 1} or id = {ROWS + 10 * i + 1}"]) == 0


# Each command, and the DELETEs its table needs first (position deletes to compact).
_APPLY = ["apply-changes", "db.t", "--changes", "{changes}", "--key", "id", "--allow-nullable-key"]

# Each command, and what its table needs first: DELETEs (position deletes to compact), or
# CDC changes (equality deletes to convert).
COMMANDS: dict[str, tuple[list[str], int, list[str] | None]] = {
    "append": (["append", "db.t", "{more}"], 0, None),
    "delete": (["delete", "db.t", "--where", "id < 30 or id = 250"], 0, None),
    "update": (["update", "db.t", "--set", "k=k+1", "--where", "id < 20 or id = 260"], 0, None),
    "merge": (["merge", "db.t", "--source", "{changes}", "--on", "id"], 0, None),
    "apply-changes": (_APPLY, 0, None),
    "compact-position-deletes": (["compact", "db.t", "--position-deletes"], 2, None),
    "compact-data-files": (["compact", "db.t", "--data-files", "--delete-file-threshold", "1"], 2, None),
    "compact-equality-to-position": (["compact", "db.t", "--equality-to-position"], 0, _APPLY),
    "expire": (["expire", "db.t", "--retain-last", "1", "--older-than", "9999999999999"], 2, None),
}


def _prepare(command: str, home: Path, inputs: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`_setup` with what ``command`` needs first."""
    _, deletes, before = COMMANDS[command]
    _setup(home, inputs, monkeypatch, deletes=deletes)
    if before is not None:
        assert run([a.format(**inputs) for a in before]) == 0


def _argv(command: str, inputs: dict[str, str]) -> list[str]:
    return [a.format(**inputs) for a in COMMANDS[command][0]]


class _Disk:
    """A disk with ``free`` bytes left (None: unlimited), shared by every file written through
    pyiceberg's FileIO: a write past it fails with ENOSPC after writing what fits, as a full
    disk does. ``files`` records (path, bytes written) in order."""

    def __init__(self, free: int | None) -> None:
        self.free = free
        self.files: list[list[Any]] = []
        self.full: list[str] = []
        """The files whose write met the full disk."""


class _Stream:
    def __init__(self, disk: _Disk, inner: Any, path: str) -> None:
        self.disk, self.inner = disk, inner
        self.record: list[Any] = [path, 0]
        disk.files.append(self.record)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.disk.free is not None and len(view) > self.disk.free:
            self.inner.write(bytes(view[: self.disk.free]))
            self.record[1] += self.disk.free
            self.disk.free = 0
            self.disk.full.append(self.record[0])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.disk.free is not None:
            self.disk.free -= len(view)
        self.record[1] += len(view)
        return int(self.inner.write(data))

    def tell(self) -> int:
        return int(self.inner.tell())

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return bool(self.inner.closed)

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _use_disk(monkeypatch: pytest.MonkeyPatch, disk: _Disk) -> None:
    original = PyArrowFile.create

    def create(self: PyArrowFile, overwrite: bool = False) -> Any:
        return _Stream(disk, original(self, overwrite), self.location)

    monkeypatch.setattr(PyArrowFile, "create", create)


def _failing_open(monkeypatch: pytest.MonkeyPatch, error: Callable[[str], OSError | None]) -> None:
    """Opening a file for writing raises ``error(path)`` when it returns one."""
    original = PyArrowFile.create

    def create(self: PyArrowFile, overwrite: bool = False) -> Any:
        e = error(self.location)
        if e is not None:
            raise e
        return original(self, overwrite)

    monkeypatch.setattr(PyArrowFile, "create", create)


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("icemor: error: "), err
    return lines[0]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    return _inputs(tmp_path / "inputs")


# ---------------------------------------------------------------------------- (a) the disk fills up


@pytest.mark.parametrize("command", list(COMMANDS))
def test_disk_full_in_the_middle_of_every_file_leaves_nothing(
    command: str,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ENOSPC halfway through each file the command writes, in turn (data and delete files,
    manifests, manifest list, metadata JSON): exit 2, one line naming the file, no file left."""
    # what the command writes when the disk has room: the files, in order, and their sizes
    _prepare(command, tmp_path / "measure", inputs, monkeypatch)
    measured = _Disk(None)
    with monkeypatch.context() as m:
        _use_disk(m, measured)
        assert run(_argv(command, inputs)) == 0
    capsys.readouterr()
    assert measured.files, "the command wrote nothing"
    cuts, before = [], 0
    for _, size in measured.files:
        cuts.append(before + size // 2)
        before += size
    for n, free in enumerate(cuts):
        _prepare(command, tmp_path / f"cut{n}", inputs, monkeypatch)
        start = _snapshot_id()
        capsys.readouterr()
        disk = _Disk(free)
        with monkeypatch.context() as m:
            _use_disk(m, disk)
            code = run(_argv(command, inputs))
        line = _one_error_line(capsys)
        assert code == 2, line
        assert "No space left on device" in line, line
        assert any(f"cannot write {path}: " in line for path in disk.full), (line, disk.full)
        assert _snapshot_id() == start, f"cut {n}: something was committed"
        assert _orphans() == set(), f"cut {n} ({measured.files[n][0]})"


def test_disk_full_on_a_real_file_system(
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The warehouse on a small tmpfs (root and mount needed, else skipped), filled up: an append
    of 2 MB gets ENOSPC from the kernel; a DELETE then fails in its metadata."""
    home = tmp_path / "home"
    warehouse = home / "warehouse"
    warehouse.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(warehouse)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        _setup(home, inputs, monkeypatch)
        big = _write(
            tmp_path / "big.parquet",
            pa.table(
                {
                    "id": pa.array(range(300_000), pa.int64()),
                    "k": pa.array([i * 7919 % 1_000_003 for i in range(300_000)], pa.int64()),
                }
            ),
        )
        stat = os.statvfs(warehouse)
        filler = warehouse / "filler"
        filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 12_000))
        start = _snapshot_id()
        capsys.readouterr()
        for argv in (["append", "db.t", big], ["delete", "db.t", "--where", "id < 100"]):
            assert run(argv) == 2, argv
            line = _one_error_line(capsys)
            assert "No space left on device" in line and str(warehouse / "db" / "t") in line, line
            assert _snapshot_id() == start
            assert _orphans() == set(), argv
    finally:
        subprocess.run(["umount", str(warehouse)], check=False)


# ----------------------------------------------------- (b) a directory or file system refuses writes


@pytest.mark.parametrize("command", ["append", "delete", "update", "apply-changes", "compact-data-files"])
@pytest.mark.parametrize(
    ("where", "code"),
    [("data", errno.EACCES), ("data", errno.EROFS), ("metadata", errno.EACCES), ("metadata", errno.EROFS)],
)
def test_refused_writes_leave_nothing(
    command: str,
    where: str,
    code: int,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Root ignores permission bits, so the refusal is injected where the FileIO opens a file, with
    pyarrow's own wording: a read-only data (or metadata) directory, or file system."""
    _prepare(command, tmp_path / "home", inputs, monkeypatch)
    start = _snapshot_id()
    refused = f"{_pyiceberg_table().metadata.location}/{where}/"
    capsys.readouterr()

    def error(path: str) -> OSError | None:
        if not path.startswith(refused):
            return None
        cls = PermissionError if code == errno.EACCES else OSError
        return cls(
            code,
            f"Failed to open local file '{local_path(path)}'. Detail: [errno {code}] {os.strerror(code)}",
        )

    with monkeypatch.context() as m:
        _failing_open(m, error)
        assert run(_argv(command, inputs)) == 2
    line = _one_error_line(capsys)
    assert os.strerror(code) in line and f"/{where}/" in line, line
    assert _snapshot_id() == start
    assert _orphans() == set()


@pytest.mark.parametrize("command", ["append", "delete", "update"])
def test_immutable_data_directory(
    command: str,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``chattr +i`` on the data directory stops root too (skipped where chattr does not work)."""
    _setup(tmp_path / "home", inputs, monkeypatch)
    data = local_path(_pyiceberg_table().metadata.location) / "data"
    if subprocess.run(["chattr", "+i", str(data)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i does not work here")
    try:
        start = _snapshot_id()
        capsys.readouterr()
        assert run(_argv(command, inputs)) == 2
        line = _one_error_line(capsys)
        assert "Operation not permitted" in line and str(data) in line, line
    finally:
        subprocess.run(["chattr", "-i", str(data)], check=False)
    assert _snapshot_id() == start
    assert _orphans() == set()


# ------------------------------------------------------------------------ (c) a read-only catalog


@pytest.mark.parametrize(
    "command", ["append", "delete", "update", "apply-changes", "compact-data-files", "expire"]
)
def test_read_only_catalog_is_a_refusal_and_leaves_nothing(
    command: str,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``catalog.db`` immutable (``chattr +i``; skipped where it does not work): SQLite answers
    "attempt to write a readonly database" before changing anything. That is a refusal, not a
    commit that "may or may not have happened", so every file written is removed."""
    home = tmp_path / "home"
    _prepare(command, home, inputs, monkeypatch)
    start = _snapshot_id()
    db = home / "catalog.db"
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i does not work here")
    try:
        # connections opened before are writable: the command must open its own, as a new process
        from icemor.catalog import load_catalog

        load_catalog().engine.dispose()  # type: ignore[attr-defined]
        capsys.readouterr()
        code = run(_argv(command, inputs))
        line = _one_error_line(capsys)
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=False)
    assert code == 2, line
    assert "readonly database" in line and "may or may not" not in line, line
    assert _snapshot_id() == start
    assert _orphans() == set()


def test_read_only_catalog_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inputs: dict[str, str]
) -> None:
    """The same through the Python API, on a catalog opened read-only (SQLite ``mode=ro``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from icemor.exceptions import CommitFailedError

    home = tmp_path / "home"
    _setup(home, inputs, monkeypatch)
    start = _snapshot_id()
    catalog = SqlCatalog(
        "icemor",
        uri=f"sqlite:///file:{home / 'catalog.db'}?mode=ro&uri=true",
        warehouse=(home / "warehouse").as_uri(),
    )
    table = icemor.load_table("db.t", catalog=catalog)
    with pytest.raises(CommitFailedError, match="readonly database"):
        table.delete("id < 30")
    assert _snapshot_id() == start
    assert _orphans() == set()


# ---------------------------------------------------------------------- (d) a lost compare-and-swap


class _SwapLoser:
    """After a metadata JSON is written (before the catalog's swap), another writer commits (a
    property change, through its own catalog object): the swap then fails its check of the
    current metadata location, as when two writers race. Patched before any catalog object of
    the home exists (icemor hooks each object once); :meth:`arm` makes the next swap lose,
    or every one (``always``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, home: Path, *, always: bool = False) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.home, self.always = home, always
        self.armed = self.inside = False
        self.lost = 0
        original = SqlCatalog._write_metadata

        def write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
            original(metadata, io, metadata_path)
            if self.armed and not self.inside:
                self._commit_concurrently()

        monkeypatch.setattr(SqlCatalog, "_write_metadata", staticmethod(write_metadata))

    def arm(self) -> None:
        self.armed = True

    def _commit_concurrently(self) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.armed, self.inside = self.always, True
        try:
            other = SqlCatalog(
                "icemor",
                uri=f"sqlite:///{self.home / 'catalog.db'}",
                warehouse=(self.home / "warehouse").as_uri(),
            )
            with other.load_table("db.t").transaction() as tx:
                tx.set_properties(concurrent=str(self.lost))
            other.engine.dispose()
            self.lost += 1
        finally:
            self.inside = False


@pytest.mark.parametrize(
    "command",
    [
        "delete",
        "append",
        "update",
        "merge",
        "apply-changes",
        "compact-position-deletes",
        "compact-equality-to-position",
        "expire",
    ],
)
def test_lost_swap_leaves_no_metadata_file(
    command: str,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The loser's metadata JSON is removed (only that exact file), the commit is retried and
    succeeds, and every file of the table, the winner's metadata included, is referenced."""
    home = tmp_path / "home"
    loser = _SwapLoser(monkeypatch, home)
    _prepare(command, home, inputs, monkeypatch)
    start = _snapshot_id()
    loser.arm()
    assert run(_argv(command, inputs)) == 0, capsys.readouterr().err
    assert loser.lost == 1
    table = _pyiceberg_table()
    assert table.metadata.properties.get("concurrent") == "0"  # the winner's commit is intact
    if command != "expire":
        assert _snapshot_id() != start
    assert _orphans() == set()
    assert all(p.exists() for p in _referenced(table))


def test_swap_lost_on_every_attempt_fails_cleanly(
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    loser = _SwapLoser(monkeypatch, home, always=True)
    _setup(home, inputs, monkeypatch, deletes=1)
    with _pyiceberg_table().transaction() as tx:
        tx.set_properties({"commit.retry.num-retries": "1", "commit.retry.min-wait-ms": "1"})
    start = _snapshot_id()
    capsys.readouterr()
    loser.arm()
    assert run(["delete", "db.t", "--where", "id < 60"]) == 2
    line = _one_error_line(capsys)
    assert "failed after 2 attempt(s)" in line, line
    assert loser.lost == 2
    assert _snapshot_id() == start
    assert _orphans() == set()


@pytest.mark.parametrize("command", ["delete", "append"])
def test_a_swap_that_may_have_committed_keeps_every_file(
    command: str,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The other side of the line: the database fails at COMMIT with an error that is no
    refusal (an I/O error: it may have committed). Nothing may be removed then, not even the
    new metadata JSON, and the message says so."""
    import sqlalchemy.exc
    from sqlalchemy.orm import Session

    _setup(tmp_path / "home", inputs, monkeypatch)
    start = _snapshot_id()
    capsys.readouterr()

    def commit(self: Session) -> None:
        raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))

    with monkeypatch.context() as m:
        m.setattr(Session, "commit", commit)
        assert run(_argv(command, inputs)) == 2
    line = _one_error_line(capsys)
    assert "may or may not have happened" in line and "disk I/O error" in line, line
    assert _snapshot_id() == start  # (it did not, but icemor cannot know)
    kept = {p.name for p in _orphans()}
    assert any(n.endswith(".metadata.json") for n in kept), kept
    assert any(n.startswith("snap-") for n in kept), kept
    assert any(n.endswith(".parquet") for n in kept), kept


# ------------------------------------------------- (e) metrics count rows live at the commit's parent


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("id < 50", 49),  # 50 rows of file 0..199 matched; one deleted concurrently
        ("id < 200", 199),  # every row of that file: the file is removed; one deleted concurrently
        (None, 3 * ROWS - 1),  # no condition: every file is removed, no row read
    ],
)
def test_deleted_rows_under_snapshot_isolation_with_a_concurrent_delete(
    where: str | None,
    expected: int,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A concurrent DELETE of one matching row between our scan and our commit (no conflict
    under ``snapshot`` isolation): ``deleted_rows`` counts the rows that were still live."""
    import icemor.ops.delete as delete_module
    from icemor.commit.row_delta import RowDelta

    _setup(tmp_path / "home", inputs, monkeypatch)
    table = icemor.load_table("db.t")
    table.pyiceberg.transaction().set_properties(
        {"write.delete.isolation-level": "snapshot"}
    ).commit_transaction()
    concurrent: list[int] = []

    class Racing(RowDelta):
        """Another DELETE commits just before this one's commit (after its scan and writes)."""

        def commit(self) -> Any:
            if not concurrent:
                concurrent.append(1)
                assert icemor.load_table("db.t").delete("id = 5").deleted_rows == 1
            return super().commit()

    monkeypatch.setattr(delete_module, "RowDelta", Racing)
    metrics = table.refresh().delete(where)
    assert concurrent == [1]
    assert metrics.deleted_rows == expected
    live = icemor.load_table("db.t").scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    bound = 3 * ROWS if where is None else int(where.split("<")[1])
    assert sorted(live) == list(range(bound, 3 * ROWS))  # every matching row is gone, once


# ------------------------------------------------------------------------------ SIGTERM and Ctrl-C

_DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    where = sys.argv[1]
    fired = []

    def kill(*args, **kwargs):
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    if where == "delete-file":  # on a worker thread of the local engine
        import icemor.io.writers as w
        original = w._write_positions
        def write(*a):
            kill()
            return original(*a)
        w._write_positions = write
    elif where == "manifest-list":  # on the main thread, inside the commit
        import icemor.commit.row_delta as r
        original = r.manifest_list_writer
        def manifest_list_writer(*a, **k):
            kill()
            return original(*a, **k)
        r.manifest_list_writer = manifest_list_writer
    elif where == "data-file":  # every icemor data file is written through ParquetOutput
        import icemor.io.data_writer as d
        original_output = d.ParquetOutput.write
        def write_output(self, *a):
            kill()
            return original_output(self, *a)
        d.ParquetOutput.write = write_output
    from icemor.cli import main
    sys.argv = ["icemor", *sys.argv[2:]]
    main()
    """
)


@pytest.mark.parametrize(
    ("where", "command"),
    [
        ("delete-file", "delete"),
        ("manifest-list", "delete"),
        ("data-file", "append"),
        ("data-file", "update"),
    ],
)
def test_sigterm_removes_what_was_written(
    where: str,
    command: str,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    _setup(home, inputs, monkeypatch)
    start = _snapshot_id()
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    done = subprocess.run(
        [sys.executable, str(driver), where, *_argv(command, inputs)],
        capture_output=True,
        text=True,
        env={**os.environ, "ICEMOR_HOME": str(home)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "icemor: interrupted (SIGTERM)", done.stderr
    assert _snapshot_id() == start
    assert _orphans() == set()


def test_ctrl_c_exits_130_with_a_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from icemor.cli.commands import catalog

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(catalog, "open_catalog", interrupted)
    assert run(["tables"]) == 130
    assert capsys.readouterr().err.strip() == "icemor: interrupted (SIGINT)"
