"""The door against a REST catalog (``tests/rest_stub.py``), told how to answer the next commits.

The REST spec's commit responses: 409 is a conflict (retried on the new head); any other 4xx a
refusal (nothing committed: every file written for the commit is removed, one line says why);
5xx, a timeout or a dropped connection leave the commit state unknown (every file is kept), unless
the table shows that the attempt committed (its snapshot id): then it succeeded.

Before the door, every REST error but 409 was "may or may not have committed" (a 403 to
``expire`` too), and its files were kept.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.exceptions import CommitFailedError, CommitStateUnknownError
from rest_stub import Fault, RestStub

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyiceberg.catalog.rest import RestCatalog

RETRIES = {"commit.retry.num-retries": "3", "commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "2"}
TIMEOUT = 2.0  # the client's read timeout in these tests (pyiceberg sets none)


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[RestStub]:
    server = RestStub(tmp_path / "server")
    yield server
    server.close()


@pytest.fixture
def rest(stub: RestStub) -> RestCatalog:
    catalog = stub.catalog(read_timeout=TIMEOUT)
    catalog.create_namespace("db")
    return catalog


def _table(rest: RestCatalog, **properties: str) -> icemor.Table:
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "k": [f"k{i % 7}" for i in range(100)]})
    table = icemor.create_table(
        "db.t", rows, identifier_fields=["id"], properties={**RETRIES, **properties}, catalog=rest
    )
    table.delete("id < 5")  # a second snapshot, for expire to have one to remove
    table.refresh().append(pa.table({"id": pa.array([1000], pa.int64()), "k": ["x"]}))
    return table.refresh()


OPERATIONS: dict[str, Callable[[icemor.Table], Any]] = {
    "delete": lambda t: t.delete("id < 20"),
    "append": lambda t: t.append(pa.table({"id": pa.array([2000], pa.int64()), "k": ["y"]})),
    "apply-changes": lambda t: t.apply_changes(
        pa.table({"op": ["U", "D"], "id": pa.array([30, 31], pa.int64()), "k": ["u", None]}), key=["id"]
    ),
    "schema": lambda t: t.update_schema().add_column("note", "string").commit(),
    "expire": lambda t: t.maintenance.expire_snapshots(
        older_than=int(time.time() * 1000) + 60_000, retain_last=1
    ),
}


def _on_disk(table: icemor.Table) -> set[str]:
    root = Path(table.metadata.location.removeprefix("file://"))
    return {p.as_uri() for p in root.rglob("*") if p.is_file()}


def _referenced(table: icemor.Table) -> set[str]:
    """Every file the table's metadata references: metadata JSONs, and what every snapshot holds."""
    pyiceberg = table.pyiceberg
    metadata = pyiceberg.metadata
    out = {pyiceberg.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for m in snapshot.manifests(pyiceberg.io):
            out.add(m.manifest_path)
            out.update(e.data_file.file_path for e in m.fetch_manifest_entry(pyiceberg.io))
    return {p if p.startswith("file:") else Path(p).as_uri() for p in out}


def _orphans(table: icemor.Table) -> set[str]:
    return _on_disk(table) - _referenced(table)


def _state(rest: RestCatalog) -> tuple[Any, ...]:
    t = icemor.load_table("db.t", catalog=rest)
    return t.metadata.current_snapshot_id, len(t.metadata.snapshots), t.metadata.current_schema_id


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_conflict_is_retried(stub: RestStub, rest: RestCatalog, operation: str) -> None:
    table = _table(rest)
    stub.commits.clear()
    stub.answer_next_commit(Fault(status=409))
    OPERATIONS[operation](table)
    assert stub.commits[-2:] == ["409", "200"]
    assert _orphans(icemor.load_table("db.t", catalog=rest)) == set()


def test_conflicts_on_every_attempt_fail_and_leave_nothing(stub: RestStub, rest: RestCatalog) -> None:
    table = _table(rest)
    before = _state(rest)
    stub.commits.clear()
    stub.answer_next_commit(Fault(status=409), times=4)
    with pytest.raises(CommitFailedError, match=r"failed after 4 attempt\(s\)"):
        table.delete("id < 20")
    assert stub.commits == ["409"] * 4
    assert _state(rest) == before
    assert _orphans(table) == set()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 419, 422])
@pytest.mark.parametrize("operation", ["delete", "append", "apply-changes"])
def test_a_refusal_commits_nothing_and_removes_what_was_written(
    stub: RestStub, rest: RestCatalog, operation: str, status: int
) -> None:
    table = _table(rest)
    before = _state(rest)
    stub.commits.clear()
    # 401 and 419 (credentials expired): pyiceberg refreshes its token and sends once more itself
    times = 2 if status in (401, 419) else 1
    stub.answer_next_commit(Fault(status=status), times=times)
    with pytest.raises(CommitFailedError) as raised:
        OPERATIONS[operation](table)
    message = str(raised.value)
    assert message.startswith("the catalog refused the ") and f"(HTTP {status})" in message, message
    assert "\n" not in message
    assert stub.commits == [str(status)] * times  # not tried again
    assert _state(rest) == before
    assert _orphans(table) == set()  # data, delete files, manifests, manifest list: removed


@pytest.mark.parametrize("operation", ["schema", "expire"])
def test_a_refused_metadata_change_says_so(stub: RestStub, rest: RestCatalog, operation: str) -> None:
    """The case seen with a real REST catalog: ``expire`` answered 403. It is a refusal, not a
    commit that may have happened; no file is deleted (expiry deletes only after its commit)."""
    table = _table(rest)
    before, files = _state(rest), _on_disk(table)
    stub.answer_next_commit(Fault(status=403))
    with pytest.raises(CommitFailedError, match=r"^the catalog refused .* \(HTTP 403\): ForbiddenException"):
        OPERATIONS[operation](table)
    assert _state(rest) == before
    assert _on_disk(table) == files


UNKNOWN = {
    "500": Fault(status=500),
    "502": Fault(status=502),
    "503": Fault(status=503),
    "504": Fault(status=504),
    "timeout": Fault(late=TIMEOUT + 1.5),
    "dropped": Fault(drop=True),
}


@pytest.mark.parametrize("answer", list(UNKNOWN))
def test_an_unknown_outcome_keeps_every_file(stub: RestStub, rest: RestCatalog, answer: str) -> None:
    table = _table(rest)
    before, files = _state(rest), _on_disk(table)
    stub.commits.clear()
    stub.answer_next_commit(UNKNOWN[answer])
    with pytest.raises(CommitStateUnknownError, match="may or may not have happened") as raised:
        table.delete("id < 20")
    assert "\n" not in str(raised.value)
    assert len(stub.commits) == 1  # not tried again: it may have committed
    assert _state(rest) == before  # (it did not; icemor cannot know)
    left = {Path(p).name for p in _on_disk(table) - files}
    assert any(n.endswith(("-deletes.parquet", ".puffin")) for n in left), left
    assert any(n.startswith("snap-") for n in left), left  # the attempt's manifest list is kept


@pytest.mark.parametrize("answer", list(UNKNOWN))
@pytest.mark.parametrize("operation", ["delete", "append", "apply-changes"])
def test_an_unknown_outcome_that_committed_is_success(
    stub: RestStub, rest: RestCatalog, answer: str, operation: str
) -> None:
    """The server committed, then answered 5xx, too late or not at all: the table shows the
    attempt's snapshot, so the operation succeeded, once, and its files are the table's."""
    table = _table(rest)
    snapshots = len(table.metadata.snapshots)
    stub.commits.clear()
    fault = UNKNOWN[answer]
    stub.answer_next_commit(Fault(status=fault.status, late=fault.late, drop=fault.drop, commit_first=True))
    OPERATIONS[operation](table)
    assert stub.commits == [f"{'late' if answer == 'timeout' else answer} after commit"]
    fresh = icemor.load_table("db.t", catalog=rest)
    assert len(fresh.metadata.snapshots) == snapshots + 1
    assert _orphans(fresh) == set()
    assert fresh.scan().count() > 0


def test_retention_over_rest(stub: RestStub, rest: RestCatalog) -> None:
    table = _table(
        rest,
        **{"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "2"},
    )
    for i in range(6):
        table.refresh().delete(f"id = {20 + i}")
    fresh = icemor.load_table("db.t", catalog=rest)
    metadata_files = {p for p in _on_disk(fresh) if p.endswith(".metadata.json")}
    assert metadata_files == {
        fresh.pyiceberg.metadata_location,
        *(e.metadata_file for e in fresh.metadata.metadata_log),
    }
    assert len(metadata_files) == 3
