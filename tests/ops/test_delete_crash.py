"""A DELETE that dies or fails before its catalog swap leaves the table as it was.

- Killed (SIGKILL, in a subprocess) inside the catalog's ``commit_table``, i.e. after its delete
  files, manifests and manifest list are written: the table stays at its old snapshot and reads
  its original rows; the orphans it left do not disturb a later DELETE.
- Refused by the catalog on every attempt (in process): ``CommitFailedError`` after
  ``commit.retry.num-retries`` + 1 attempts, the table unchanged, and no file left behind (no
  delete file, manifest or manifest list).
- A catalog that commits and then reports an unknown commit state: the commit is recognised (its
  snapshot id is in the table) and succeeds, its files kept; one that reports it and did not
  commit: ``CommitStateUnknownError``, every file kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
import sqlalchemy.exc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

import icemor
from icemor.catalog import load_catalog
from icemor.exceptions import CommitFailedError, CommitStateUnknownError

if TYPE_CHECKING:
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.table import Table

TABLE = "db.t"
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string())])
Row = tuple[int, str]

# Dies by SIGKILL when the DELETE calls the catalog's compare-and-swap. argv[1]: the condition, "-" for none.
KILLED_DELETE = r"""
import os, signal, sys

from pyiceberg.catalog.sql import SqlCatalog


def commit_table(self, table, requirements, updates):
    sys.stdout.write("swap\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


SqlCatalog.commit_table = commit_table

import icemor

icemor.load_table("db.t").delete(None if sys.argv[1] == "-" else sys.argv[1])
print("survived")
"""

# (condition, its rows in the model, whether it writes a delete file): some rows of every data
# file; every row of one data file (that file is removed, no delete file); no condition.
CASES = [
    ("id >= 20 and id < 60 or id >= 250", lambda r: 20 <= r[0] < 60 or r[0] >= 250, True),
    ("id < 100", lambda r: r[0] < 100, False),
    (None, lambda _: True, False),
]
CASE_IDS = ["some-rows", "whole-file", "everything"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An icemor home of the test's own, exported as ``ICEMOR_HOME``."""
    path = tmp_path / "home"
    monkeypatch.setenv("ICEMOR_HOME", str(path))
    return path


def original_rows() -> list[Row]:
    return [(i, f"k{i % 4}") for i in range(300)]


def create_table(**properties: str) -> PyIcebergTable:
    """``db.t`` with three data files of 100 rows (ids 0-99, 100-199, 200-299)."""
    cat = load_catalog()
    cat.create_namespace_if_not_exists("db")
    t = cat.create_table(TABLE, schema=SCHEMA, properties={"format-version": "2", **properties})
    rows = original_rows()
    for lo in (0, 100, 200):
        part = rows[lo : lo + 100]
        t.append(pa.Table.from_pylist([{"id": i, "k": k} for i, k in part], schema=SCHEMA))
    return t


def read_rows(table: Table) -> list[Row]:
    return sorted((r["id"], r["k"]) for r in table.scan().to_arrow().to_pylist())


def files_under(t: PyIcebergTable) -> set[Path]:
    root = Path(t.metadata.location.removeprefix("file://"))
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("where", "match", "writes_delete_file"), CASES, ids=CASE_IDS)
def test_delete_killed_before_the_swap_leaves_the_old_snapshot(
    home: Path, where: str | None, match: Any, writes_delete_file: bool
) -> None:
    """SIGKILL inside ``commit_table``: the files of the commit are on disk, the table is not changed."""
    t = create_table()
    before_snapshot = t.metadata.current_snapshot_id
    before_location = t.metadata_location
    before_files = files_under(t)

    proc = subprocess.run(
        [sys.executable, "-c", KILLED_DELETE, where if where is not None else "-"],
        capture_output=True,
        text=True,
        env={**os.environ, "ICEMOR_HOME": str(home)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout == "swap\n"

    # it died after writing: its manifest list (and delete files) exist, orphaned
    new = files_under(t) - before_files
    assert any(p.name.startswith("snap-") and p.suffix == ".avro" for p in new), sorted(new)
    deletes = [p for p in new if p.name.endswith("-deletes.parquet")]
    assert bool(deletes) == writes_delete_file, sorted(new)
    assert not any(p.suffix == ".json" for p in new)  # no table metadata was written

    table = icemor.load_table(TABLE)
    assert table.pyiceberg.metadata_location == before_location
    assert table.metadata.current_snapshot_id == before_snapshot
    assert len(table.metadata.snapshots) == 3
    assert read_rows(table) == original_rows()

    # the orphans do not disturb the next DELETE
    m = table.delete(where)
    expected = [r for r in original_rows() if not match(r)]
    assert m.deleted_rows == len(original_rows()) - len(expected)
    assert m.snapshot_id is not None
    assert read_rows(icemor.load_table(TABLE)) == expected


def _commit_failed() -> Exception:
    return CommitFailedException("Table has been updated by another process: db.t")


def _database_locked() -> Exception:
    return sqlalchemy.exc.OperationalError("UPDATE iceberg_tables ...", {}, Exception("database is locked"))


@pytest.mark.parametrize(
    "error", [_commit_failed, _database_locked], ids=["commit-failed", "database-locked"]
)
@pytest.mark.parametrize(("where", "match", "writes_delete_file"), CASES, ids=CASE_IDS)
def test_delete_refused_on_every_attempt_leaves_nothing(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: Any,
    where: str | None,
    match: Any,
    writes_delete_file: bool,
) -> None:
    """Every swap refused: ``CommitFailedError`` after retries + 1 attempts, nothing changed or left on disk."""
    t = create_table(**{"commit.retry.num-retries": "1", "commit.retry.min-wait-ms": "1"})
    before_snapshot = t.metadata.current_snapshot_id
    before_files = files_under(t)
    table = icemor.load_table(TABLE)

    calls: list[int] = []

    def refuse(self: SqlCatalog, *args: Any) -> None:
        calls.append(1)
        # the delete files were written before the first swap (delete files end up removed)
        if writes_delete_file:
            assert any(p.name.endswith("-deletes.parquet") for p in files_under(t) - before_files)
        raise error()

    with monkeypatch.context() as patched, pytest.raises(CommitFailedError, match="2 attempt"):
        patched.setattr(SqlCatalog, "commit_table", refuse)
        table.delete(where)

    assert len(calls) == 2
    assert files_under(t) - before_files == set()
    assert files_under(t) == before_files
    fresh = icemor.load_table(TABLE)
    assert fresh.metadata.current_snapshot_id == before_snapshot
    assert len(fresh.metadata.snapshots) == 3
    assert read_rows(fresh) == original_rows()


def test_commit_state_unknown_keeps_the_committed_files(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog commits, then reports an unknown commit state (a REST catalog's 5xx/timeout).

    icemor must not remove the files of a snapshot that may be (here: is) the table's current
    one, and finds that it is: the attempt's snapshot id is in the table, so the DELETE succeeded
    (once: no second snapshot) and the table reads with the rows deleted.
    """
    create_table()
    table = icemor.load_table(TABLE)
    original = SqlCatalog.commit_table
    calls: list[int] = []

    def commit_then_unknown(self: SqlCatalog, *args: Any) -> Any:
        calls.append(1)
        original(self, *args)
        msg = "504 Gateway Timeout"
        raise CommitStateUnknownException(msg)

    with monkeypatch.context() as patched:
        patched.setattr(SqlCatalog, "commit_table", commit_then_unknown)
        metrics = table.delete("id < 50")

    assert calls == [1]  # recognised as committed: not tried again
    fresh = icemor.load_table(TABLE)
    assert len(fresh.metadata.snapshots) == 4  # the swap happened, once
    assert fresh.metadata.current_snapshot_id == metrics.snapshot_id
    assert read_rows(fresh) == [r for r in original_rows() if r[0] >= 50]


def test_commit_state_unknown_not_in_the_table_keeps_every_file(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog reports an unknown commit state and did not commit: the table does not show
    the attempt, but that proves nothing (a REST server may still be committing it), so the
    error says the state is unknown and no file is removed."""
    t = create_table()
    before_files = files_under(t)
    table = icemor.load_table(TABLE)

    def unknown(self: SqlCatalog, *args: Any) -> Any:
        msg = "504 Gateway Timeout"
        raise CommitStateUnknownException(msg)

    with (
        monkeypatch.context() as patched,
        pytest.raises(CommitStateUnknownError, match="may or may not have happened"),
    ):
        patched.setattr(SqlCatalog, "commit_table", unknown)
        table.delete("id < 50")

    left = files_under(t) - before_files
    assert any(p.name.endswith("-deletes.parquet") for p in left), left
    assert any(p.name.startswith("snap-") for p in left), left
    assert read_rows(icemor.load_table(TABLE)) == original_rows()
