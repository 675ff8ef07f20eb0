"""Write-path faults for ``tests/faults/test_write_fault_suite.py``, and the checks made after each.

- :func:`inject` patches pyiceberg's ``PyArrowFile.create`` and ``PyArrowFileIO.delete`` (every
  file icemor and pyiceberg write or remove goes through them): a disk that fills up inside the
  first file of a kind (data, delete, manifest, manifest list, metadata JSON), directories that
  refuse writes and removals, or just a record of what was written and removed.
- :func:`install_kill` (in a child process) SIGKILLs the process at a file event: the first write
  to a file of a kind (half of it written and flushed: a torn file), or right after the first
  file removed. :class:`Zygote` runs such children cheaply: one process imports icemor once and
  forks a child per case.
- Real filesystems when this machine lets us mount (root with CAP_SYS_ADMIN): a small tmpfs that
  really runs out of space, read-only bind mounts. Without them, :func:`readonly_chmod` makes the
  OS refuse writes instead (write permission removed: it stops any process but root).
- The checks: the files a table's metadata references (every snapshot's manifest list, manifests
  and their entries, the metadata JSON files of the log and the current one), read with pyiceberg
  and the catalog's SQLite database directly, and the files on disk that nothing references.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from collections.abc import Iterator

KINDS = ("data", "delete", "manifest", "manifest-list", "metadata")
PAGE = 4096

_EQUALITY_DELETE = re.compile(r"-eq-\d{5}\.parquet$")


def kind_of(path: str) -> str:
    """The kind of a table file by its name (icemor's and pyiceberg's naming)."""
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".metadata.json"):
        return "metadata"
    if name.endswith(".avro"):
        return "manifest-list" if name.startswith("snap-") else "manifest"
    if name.endswith(("-deletes.parquet", ".puffin")) or _EQUALITY_DELETE.search(name):
        return "delete"
    if name.endswith(".parquet"):
        return "data"
    return "other"


def local_path(uri: str) -> str:
    """A ``file:`` URI (or a plain path) as a local path."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


# --------------------------------------------------------------------------- injection in process


@dataclass(frozen=True)
class Event:
    """One file event seen by the patched FileIO."""

    action: str
    """``create``, ``close`` (size is the bytes written), ``delete``, ``error`` (an OSError seen)."""
    kind: str
    path: str
    size: int = 0
    detail: str = ""


@dataclass
class Fault:
    """What the patched FileIO does; its ``events`` record what happened.

    ``full_in``: the disk fills up inside the first file of that kind: ``room`` bytes of it are
    written, then that write and every later one fails with ``OSError(ENOSPC)`` (creating a file
    still works, as on a real full disk; removing files works and frees nothing we model).
    ``readonly``: local directories under which creating or removing a file fails like a
    directory without write permission (``PermissionError``, pyiceberg's wording).
    """

    full_in: str | None = None
    room: int = 64
    readonly: tuple[str, ...] = ()
    events: list[Event] = field(default_factory=list)
    fired_at: str | None = None
    _armed: bool = False
    _full: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def refuses(self, path: str) -> bool:
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in self.readonly)

    def arm(self, path: str) -> bool:
        """Whether the stream of ``path`` is the one in which the disk fills up."""
        with self._lock:
            if self.full_in is None or self._armed or kind_of(path) != self.full_in:
                return False
            self._armed = True
            return True

    def fill(self, path: str) -> OSError:
        with self._lock:
            if not self._full:
                self._full, self.fired_at = True, path
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    @property
    def full(self) -> bool:
        return self._full


class _Stream:
    """An output stream that counts its bytes and fails as its :class:`Fault` says."""

    def __init__(self, inner: Any, fault: Fault, path: str, armed: bool) -> None:
        self._inner = inner
        self._fault = fault
        self._path = path
        self._armed = armed
        self.written = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = view.nbytes
        if self._fault.full:
            raise self._fail()
        if self._armed:
            room = self._fault.room - self.written
            if n > room:
                if room > 0:
                    self._inner.write(bytes(view[:room]))
                    self.written += room
                raise self._fail()
        try:
            self._inner.write(data)
        except OSError as e:  # the real filesystem's (a tmpfs that is full)
            self._fault.note(Event("error", kind_of(self._path), self._path, self.written, str(e)))
            raise
        self.written += n
        return n

    def _fail(self) -> OSError:
        e = self._fault.fill(self._path)
        self._fault.note(Event("error", kind_of(self._path), self._path, self.written, "ENOSPC"))
        return e

    def close(self) -> None:
        if self._armed and not self._fault.full:
            # smaller than the room: the disk is full when the file's last bytes are flushed
            self._inner.close()
            raise self._fail()
        try:
            self._inner.close()
        except OSError as e:
            self._fault.note(Event("error", kind_of(self._path), self._path, self.written, str(e)))
            raise
        self._fault.note(Event("close", kind_of(self._path), self._path, self.written))

    def tell(self) -> int:
        return int(self._inner.tell())

    def flush(self) -> None:
        self._inner.flush()

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def inject(fault: Fault) -> Iterator[Fault]:
    """Patch pyiceberg's local FileIO (this process) to act as ``fault`` says while in the block."""
    from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

    create, delete = PyArrowFile.create, PyArrowFileIO.delete

    def faulty_create(self: PyArrowFile, overwrite: bool = False) -> Any:
        path = local_path(self.location)
        fault.note(Event("create", kind_of(path), path))
        if fault.refuses(path):
            fault.note(Event("error", kind_of(path), path, 0, "EACCES"))
            msg = f"Cannot create file, access denied: {self.location}"
            raise PermissionError(msg)
        return _Stream(create(self, overwrite), fault, path, fault.arm(path))

    def faulty_delete(self: PyArrowFileIO, location: Any) -> None:
        where = location if isinstance(location, str) else location.location
        path = local_path(where)
        if fault.refuses(path):
            fault.note(Event("error", kind_of(path), path, 0, "EACCES"))
            msg = f"Cannot delete file, access denied: {where}"
            raise PermissionError(msg)
        delete(self, location)
        fault.note(Event("delete", kind_of(path), path))

    PyArrowFile.create = faulty_create  # type: ignore[method-assign]
    PyArrowFileIO.delete = faulty_delete  # type: ignore[method-assign]
    try:
        yield fault
    finally:
        PyArrowFile.create = create  # type: ignore[method-assign]
        PyArrowFileIO.delete = delete  # type: ignore[method-assign]


@contextlib.contextmanager
def readonly_catalog_connections() -> Iterator[None]:
    """Every new SQLite connection of SQLAlchemy refuses writes (``PRAGMA query_only``): a read-only catalog.db."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA query_only = ON")

    event.listen(Engine, "connect", on_connect)
    try:
        yield
    finally:
        event.remove(Engine, "connect", on_connect)


# --------------------------------------------------------------------------- kills in a child


def install_kill(event: str) -> None:
    """SIGKILL this process at ``event``: a kind of :data:`KINDS` (first write to such a file,
    half of it written and flushed), or ``removal`` (right after the first file removed)."""
    from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

    def die() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    if event == "removal":
        delete = PyArrowFileIO.delete

        def deleting(self: PyArrowFileIO, location: Any) -> None:
            delete(self, location)
            die()

        PyArrowFileIO.delete = deleting  # type: ignore[method-assign]
        return

    create = PyArrowFile.create

    class Torn:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def write(self, data: Any) -> int:
            view = memoryview(data).cast("B")
            self._inner.write(bytes(view[: max(1, view.nbytes // 2)]))
            self._inner.flush()
            die()
            return 0  # never reached

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self._inner.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    def creating(self: PyArrowFile, overwrite: bool = False) -> Any:
        stream = create(self, overwrite)
        return Torn(stream) if kind_of(self.location) == event else stream

    PyArrowFile.create = creating  # type: ignore[method-assign]


ZYGOTE = r"""
import json, os, sys

sys.path.insert(0, sys.argv[1])
import faults
import icemor, icemor.cli, icemor.table, icemor.ops.append, icemor.ops.delete, icemor.ops.update
import icemor.ops.merge, icemor.ops.cdc, icemor.maintenance.expire
import icemor.maintenance.data_files, icemor.maintenance.position_deletes
import icemor.maintenance.equality_to_position, pyiceberg.io.pyarrow, pyiceberg.catalog.sql, duckdb

print("ready", flush=True)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.environ["ICEMOR_HOME"] = req["home"]
        out = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        code = 3
        try:
            faults.install_kill(req["event"])
            code = icemor.cli.run(req["argv"])
            print("survived", flush=True)
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    result = {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
              "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}
    print(json.dumps(result), flush=True)
"""


class Zygote:
    """A process that imports icemor once and forks a child per kill case (a fresh interpreter
    per case would cost ~1.5 s of imports each)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, str(Path(__file__).parent.parent)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if first.strip() != "ready":
            msg = f"the kill zygote did not start: {first!r}"
            raise RuntimeError(msg)

    def run(self, home: Path, argv: list[str], event: str, log: Path) -> dict[str, Any]:
        """Run the CLI on ``argv`` in a child killed at ``event``; its output goes to ``log``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {"home": str(home), "argv": argv, "event": event, "log": str(log)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            msg = "the kill zygote died"
            raise RuntimeError(msg)
        result: dict[str, Any] = json.loads(line)
        result["output"] = log.read_text(errors="replace") if log.exists() else ""
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- mounts


def can_mount() -> bool:
    """Whether this process may mount (root with CAP_SYS_ADMIN): tried with a 1 MiB tmpfs."""
    if os.name != "posix" or os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/icemor-mount-probe-{uuid.uuid4().hex}")
    probe.mkdir()
    try:
        ok = _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe))
        if ok:
            umount(probe)
        return ok
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _mount(*args: str) -> bool:
    try:
        proc = subprocess.run(["mount", *args], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on ``path`` (an empty directory) while in the block."""
    if not _mount("-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)):
        msg = f"cannot mount a tmpfs on {path}"
        raise RuntimeError(msg)
    try:
        yield path
    finally:
        umount(path)


@contextlib.contextmanager
def readonly_bind(path: Path) -> Iterator[Path]:
    """``path`` (a directory or a file) bind-mounted read-only onto itself while in the block."""
    if not _mount("--bind", str(path), str(path)):
        msg = f"cannot bind-mount {path}"
        raise RuntimeError(msg)
    try:
        if not _mount("-o", "remount,bind,ro", str(path)):
            msg = f"cannot remount {path} read-only"
            raise RuntimeError(msg)
        yield path
    finally:
        umount(path)


def os_readonly(*, mountable: bool) -> str | None:
    """How the OS can be made to refuse writes to a path here: ``"mount"`` (a read-only bind
    mount, :func:`readonly_bind`) where ``mountable`` (:func:`can_mount`), else ``"chmod"``
    (write permission removed, :func:`readonly_chmod`) where permission bits stop this process
    (not root with CAP_DAC_OVERRIDE), else None."""
    if mountable:
        return "mount"
    probe = Path(tempfile.mkdtemp(prefix="icemor-chmod-probe-"))
    try:
        probe.chmod(0o555)
        try:
            (probe / "file").touch()
        except PermissionError:
            return "chmod"
        return None
    finally:
        probe.chmod(0o755)
        shutil.rmtree(probe)


@contextlib.contextmanager
def readonly_chmod(path: Path) -> Iterator[Path]:
    """``path`` (a directory with everything under it, or a file) without write permission while
    in the block, as a read-only mount makes it; the modes are restored after."""
    paths = [path, *(sorted(path.rglob("*")) if path.is_dir() else [])]
    modes = {p: p.lstat().st_mode for p in paths if not p.is_symlink()}
    try:
        for p, mode in modes.items():
            p.chmod(mode & ~0o222)
        yield path
    finally:
        for p, mode in modes.items():
            with contextlib.suppress(FileNotFoundError):
                p.chmod(mode)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def pages(size: int) -> int:
    return -(-size // PAGE)


# --------------------------------------------------------------------------- what the metadata references


def metadata_location(home: Path, identifier: str) -> str:
    """The table's current metadata file as the catalog's database says (SQLite, read-only)."""
    namespace, name = identifier.rsplit(".", 1)
    db = sqlite3.connect(f"file:{home / 'catalog.db'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?",
            (namespace, name),
        ).fetchone()
    finally:
        db.close()
    assert row is not None, f"{identifier} is not in {home / 'catalog.db'}"
    return str(row[0])


@dataclass
class References:
    """What a table's metadata references, as local paths."""

    location: str
    metadata: str
    everything: set[str] = field(default_factory=set)
    """Every file any snapshot or the metadata log names (deleted manifest entries too)."""
    needed: set[str] = field(default_factory=set)
    """What reading every snapshot needs: lists, manifests, live data/delete files, current metadata."""
    snapshot_ids: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Metadata that could not be read (a manifest list or manifest missing or corrupt)."""


def references(home: Path, identifier: str) -> References:
    """Every file the table's current metadata references, read with pyiceberg (not icemor)."""
    from pyiceberg.io import load_file_io
    from pyiceberg.manifest import ManifestEntryStatus
    from pyiceberg.serializers import FromInputFile

    current = metadata_location(home, identifier)
    io = load_file_io({}, current)
    metadata = FromInputFile.table_metadata(io.new_input(current))
    refs = References(location=local_path(metadata.location), metadata=local_path(current))
    refs.everything.add(refs.metadata)
    refs.needed.add(refs.metadata)
    refs.everything.update(local_path(m.metadata_file) for m in metadata.metadata_log)
    for s in [*metadata.statistics, *metadata.partition_statistics]:
        refs.everything.add(local_path(s.statistics_path))
    for snapshot in metadata.snapshots:
        refs.snapshot_ids.append(snapshot.snapshot_id)
        refs.everything.add(local_path(snapshot.manifest_list))
        refs.needed.add(local_path(snapshot.manifest_list))
        try:
            manifests = snapshot.manifests(io)
        except Exception as e:
            refs.problems.append(
                f"snapshot {snapshot.snapshot_id}: manifest list {snapshot.manifest_list}: {e}"
            )
            continue
        for m in manifests:
            refs.everything.add(local_path(m.manifest_path))
            refs.needed.add(local_path(m.manifest_path))
            try:
                entries = m.fetch_manifest_entry(io, discard_deleted=False)
            except Exception as e:
                refs.problems.append(f"snapshot {snapshot.snapshot_id}: manifest {m.manifest_path}: {e}")
                continue
            for entry in entries:
                path = local_path(entry.data_file.file_path)
                refs.everything.add(path)
                if entry.status != ManifestEntryStatus.DELETED:
                    refs.needed.add(path)
    return refs


def files_under(directory: str | Path) -> set[str]:
    return {str(p) for p in Path(directory).rglob("*") if p.is_file()}


def stray_files(refs: References) -> list[str]:
    """Files in the table's directory that nothing in its metadata references."""
    return sorted(files_under(refs.location) - refs.everything)


def missing_files(refs: References) -> list[str]:
    """Files reading some snapshot needs that are not on disk."""
    return sorted(p for p in refs.needed if not os.path.exists(p))


def describe_files(paths: list[str], root: str) -> str:
    """``paths`` shortened to the table directory, with their kinds and sizes, for messages."""
    out = []
    for p in paths:
        size = os.path.getsize(p) if os.path.exists(p) else -1
        out.append(f"{os.path.relpath(p, root)} ({kind_of(p)}, {size} B)")
    return ", ".join(out)


def dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
