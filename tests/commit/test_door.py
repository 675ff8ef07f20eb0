"""The one commit door (``icemor.commit.door``): retries, a stable snapshot id, an attempt that
landed, the table-uuid check, the outcome classes, and metadata retention on every commit.

Before the door, DELETE/UPDATE/MERGE/CDC/maintenance commits ignored
``write.metadata.delete-after-commit.enabled`` (only pyiceberg's append path honoured it), each
attempt drew a new snapshot id, an attempt reported as failed that had landed was reported as
"may or may not have happened", and the next attempt after a table was dropped and created again
under its name committed into the new table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
import sqlalchemy.exc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
    ForbiddenError,
    RESTError,
    ServerError,
    ServiceUnavailableError,
)
from pyiceberg.table.update import AddSnapshotUpdate

import icemor
from icemor.commit.door import Outcome, classify
from icemor.exceptions import CommitConflictError

RETRIES = {"commit.retry.num-retries": "3", "commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "2"}


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    return catalog


def _create(catalog: SqlCatalog, *, format_version: int = 2, **properties: str) -> icemor.Table:
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "k": [f"k{i % 7}" for i in range(100)]})
    return icemor.create_table(
        "db.t",
        rows,
        format_version=format_version,
        identifier_fields=["id"],
        properties={**RETRIES, **properties},
        catalog=catalog,
    )


def _ids(table: icemor.Table) -> list[int]:
    return sorted(
        icemor.load_table(table.name, catalog=table.pyiceberg.catalog).scan().to_arrow()["id"].to_pylist()
    )


def _files(tmp_path: Path, suffix: str = "") -> set[Path]:
    return {p for p in (tmp_path / "w").rglob(f"*{suffix}") if p.is_file()}


def _referenced(table: Any) -> set[Path]:
    """Every file the current snapshot references, metadata JSON aside."""
    snap = table.metadata.current_snapshot()
    out = {snap.manifest_list}
    for m in snap.manifests(table.io):
        out.add(m.manifest_path)
        out.update(e.data_file.file_path for e in m.fetch_manifest_entry(table.io))
    return {Path(p.removeprefix("file://")) for p in out}


class _Recorder:
    """Wraps ``SqlCatalog.commit_table``: records each call's snapshot ids; of the calls that add a
    snapshot, fails the first ``lose`` as a lost swap, and the ``landed``-th after committing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, lose: int = 0, landed: int | None = None) -> None:
        self.snapshot_ids: list[list[int]] = []
        real = SqlCatalog.commit_table

        def commit_table(catalog: SqlCatalog, table: Any, requirements: Any, updates: Any) -> Any:
            ids = [u.snapshot.snapshot_id for u in updates if isinstance(u, AddSnapshotUpdate)]
            self.snapshot_ids.append(ids)
            n = sum(1 for i in self.snapshot_ids if i) if ids else 0  # the n-th snapshot call
            if 0 < n <= lose:
                msg = "lost the race"
                raise CommitFailedException(msg)
            response = real(catalog, table, requirements, updates)
            if n == landed:
                # committed, then the database connection dies before the answer: not a refusal
                raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))
            return response

        monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)


def _operations(tmp_path: Path) -> dict[str, Any]:
    extra = tmp_path / "extra.parquet"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("k", pa.string())])
    pq.write_table(pa.table({"id": [500, 501], "k": ["x", "y"]}, schema=schema), extra)
    return {
        "delete": lambda t: t.delete("id < 10"),
        "update": lambda t: t.update({"k": "'u'"}, where="id < 10"),
        "append": lambda t: t.append(pa.table({"id": pa.array([500, 501], pa.int64()), "k": ["x", "y"]})),
        "add-files": lambda t: t.add_files([str(extra)]),
        "apply-changes": lambda t: t.apply_changes(
            pa.table({"op": ["U", "D"], "id": pa.array([3, 4], pa.int64()), "k": ["u", None]}), key=["id"]
        ),
    }


@pytest.mark.parametrize("format_version", [2, 3])
@pytest.mark.parametrize("operation", ["delete", "update", "append", "add-files", "apply-changes"])
def test_one_snapshot_id_across_attempts(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str, format_version: int
) -> None:
    table = _create(catalog, format_version=format_version)
    before = len(table.metadata.snapshots)
    recorder = _Recorder(monkeypatch, lose=2)
    _operations(tmp_path)[operation](table)
    # apply-changes first sets the identifier fields (no snapshot): count the snapshot commits
    attempts = [ids for ids in recorder.snapshot_ids if ids]
    assert len(attempts) == 3, recorder.snapshot_ids
    assert len({ids[0] for ids in attempts}) == 1, attempts  # the same id in every attempt
    fresh = icemor.load_table("db.t", catalog=catalog)
    assert fresh.metadata.current_snapshot_id == attempts[0][0]
    assert len(fresh.metadata.snapshots) == before + 1


@pytest.mark.parametrize("operation", ["delete", "update", "append", "add-files", "apply-changes"])
def test_an_attempt_that_landed_but_raised_is_recognised(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """The catalog committed, then its call failed in a way that may have committed (a dropped
    database connection): the table has the attempt's snapshot id, so it succeeded, once."""
    table = _create(catalog)
    if operation == "apply-changes":
        table.apply_changes(pa.table({"op": ["U"], "id": pa.array([1], pa.int64()), "k": ["a"]}), key=["id"])
    before = len(table.refresh().metadata.snapshots)
    recorder = _Recorder(monkeypatch, landed=1)
    _operations(tmp_path)[operation](table)  # no error: success is reported
    assert len([ids for ids in recorder.snapshot_ids if ids]) == 1  # not tried again
    fresh = icemor.load_table("db.t", catalog=catalog)
    assert len(fresh.metadata.snapshots) == before + 1  # no duplicate snapshot
    assert fresh.metadata.current_snapshot_id == next(ids for ids in recorder.snapshot_ids if ids)[0]
    assert all(p.exists() for p in _referenced(fresh.pyiceberg))  # files kept
    assert fresh.scan().count() > 0


def test_a_table_replaced_between_attempts_gets_no_commit(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt loses; meanwhile the table is dropped and created again under its name.
    The next attempt must not commit the DELETE (planned on the old table) to the new one."""
    table = _create(catalog)
    real = SqlCatalog.commit_table
    calls: list[int] = []

    def commit_table(cat: SqlCatalog, *args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # another process (its own catalog object)
            other = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=(tmp_path / "w").as_uri())
            other.drop_table("db.t")
            other.create_table("db.t", table.pyiceberg.schema(), properties=RETRIES)
            msg = "lost the race"
            raise CommitFailedException(msg)
        return real(cat, *args)

    before = _files(tmp_path, ".parquet")
    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    with pytest.raises(CommitConflictError, match="dropped and created again"):
        table.delete("id < 10")
    assert calls == [1]
    assert icemor.load_table("db.t", catalog=catalog).metadata.snapshots == []  # nothing committed
    assert _files(tmp_path, ".parquet") == before  # the DELETE's delete files were removed


def _http_error(status: int, exception: type[Exception]) -> Exception:
    """What pyiceberg's REST client raises for an HTTP status: its error, from the HTTP error."""
    response = requests.Response()
    response.status_code = status
    error = exception(f"{status} answer")
    error.__cause__ = requests.HTTPError(response=response)
    return error


@pytest.mark.parametrize(
    ("status", "exception", "outcome"),
    [
        (409, CommitFailedException, Outcome.LOST),
        (400, BadRequestError, Outcome.REFUSED),
        (401, RESTError, Outcome.REFUSED),
        (403, ForbiddenError, Outcome.REFUSED),
        (404, RESTError, Outcome.REFUSED),
        (419, RESTError, Outcome.REFUSED),
        (422, RESTError, Outcome.REFUSED),
        (501, NotImplementedError, Outcome.REFUSED),
        (500, CommitStateUnknownException, Outcome.UNKNOWN),
        (502, CommitStateUnknownException, Outcome.UNKNOWN),
        (503, ServiceUnavailableError, Outcome.UNKNOWN),
        (504, CommitStateUnknownException, Outcome.UNKNOWN),
        (507, ServerError, Outcome.UNKNOWN),
    ],
)
def test_rest_answers_are_classified_as_the_spec_says(
    status: int, exception: type[Exception], outcome: Outcome, catalog: SqlCatalog
) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    rest = RestCatalog.__new__(RestCatalog)  # no server: only its type matters
    assert classify(rest, _http_error(status, exception), None) is outcome


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (requests.ConnectionError("connection dropped"), Outcome.UNKNOWN),
        (requests.ReadTimeout("read timed out"), Outcome.UNKNOWN),
        (CommitFailedException("lost"), Outcome.LOST),
        (CommitStateUnknownException("unknown"), Outcome.UNKNOWN),
    ],
)
def test_timeouts_and_dropped_connections_are_unknown(error: Exception, outcome: Outcome) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    rest = RestCatalog.__new__(RestCatalog)
    assert classify(rest, error, None) is outcome


# ------------------------------------------------------------------------------ metadata retention


def _metadata_files(tmp_path: Path) -> set[str]:
    return {p.as_uri() for p in (tmp_path / "w").rglob("*.metadata.json")}


def _every_kind_of_commit(table: icemor.Table, tmp_path: Path) -> None:
    ops = _operations(tmp_path)
    for name in ("delete", "update", "append", "add-files", "apply-changes"):
        ops[name](table.refresh())
    table.refresh().update_schema().add_column(
        f"extra{len(table.refresh().schema().fields)}", "string"
    ).commit()
    table.maintenance.rewrite_position_deletes()
    table.maintenance.rewrite_data_files(delete_file_threshold=1)
    table.maintenance.expire_snapshots(retain_last=2)


@pytest.mark.parametrize("format_version", [2, 3])
def test_every_commit_keeps_previous_versions_max_metadata_files(
    catalog: SqlCatalog, tmp_path: Path, format_version: int
) -> None:
    table = _create(
        catalog,
        format_version=format_version,
        **{"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "2"},
    )
    expected = sorted(_ids(table))
    for _ in range(3):
        table.refresh().delete(f"id = {expected.pop(0)}")
        _every_kind_of_commit(table, tmp_path)
        fresh = icemor.load_table("db.t", catalog=catalog).pyiceberg
        # exactly the current metadata file and the two the log keeps: the others were deleted
        assert _metadata_files(tmp_path) == {
            fresh.metadata_location,
            *(e.metadata_file for e in fresh.metadata.metadata_log),
        }
        assert len(fresh.metadata.metadata_log) == 2
    assert icemor.load_table("db.t", catalog=catalog).scan().count() > 0


def test_metadata_files_are_kept_without_delete_after_commit(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog, **{"write.metadata.previous-versions-max": "2"})
    before = len(_metadata_files(tmp_path))
    _every_kind_of_commit(table, tmp_path)
    fresh = icemor.load_table("db.t", catalog=catalog).pyiceberg
    assert len(fresh.metadata.metadata_log) == 2
    assert len(_metadata_files(tmp_path)) > before + 5  # every version stays, as in Java


def test_current_metadata_is_used_without_a_reload(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``current``: the first attempt is made on the caller's metadata; the catalog is not read for it."""
    from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate

    from icemor.commit.door import Change, commit

    table = _create(catalog)
    loads: list[object] = []
    real = SqlCatalog.load_table
    monkeypatch.setattr(SqlCatalog, "load_table", lambda c, name: loads.append(name) or real(c, name))
    current = table.pyiceberg.metadata

    def prepare(metadata: Any, attempt: int) -> Change:
        assert metadata is current
        requirement = AssertRefSnapshotId(snapshot_id=metadata.current_snapshot_id, ref="main")  # type: ignore[call-arg]
        return Change((requirement,), (SetPropertiesUpdate(updates={"x": "1"}),))

    done = commit(table.pyiceberg, prepare, what="a test", current=current)
    assert done.metadata.properties["x"] == "1"
    assert len(loads) == 1  # SqlCatalog.commit_table's own load only (the door's is skipped)


def test_stale_current_metadata_costs_an_attempt_not_a_retry(catalog: SqlCatalog) -> None:
    """A ``current`` that a concurrent commit made stale loses its swap: the table is read and the
    change tried again at once, even with no retry allowed, on the new head."""
    from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate

    from icemor.commit.door import Change, commit

    table = _create(catalog, **{"commit.retry.num-retries": "0"})
    stale = table.pyiceberg.metadata
    other = icemor.load_table("db.t", catalog=catalog)
    other.append(pa.table({"id": pa.array([500], pa.int64()), "k": ["x"]}))
    seen: list[int | None] = []

    def prepare(metadata: Any, attempt: int) -> Change:
        seen.append(metadata.current_snapshot_id)
        requirement = AssertRefSnapshotId(snapshot_id=metadata.current_snapshot_id, ref="main")  # type: ignore[call-arg]
        return Change((requirement,), (SetPropertiesUpdate(updates={"x": str(len(seen))}),))

    done = commit(table.pyiceberg, prepare, what="a test", current=stale)
    assert seen == [stale.current_snapshot_id, other.metadata.current_snapshot_id]
    assert done.metadata.properties["x"] == "2"
    assert done.metadata.current_snapshot_id == other.metadata.current_snapshot_id


@pytest.mark.parametrize("format_version", [2, 3])
def test_metadata_a_commit_wrote_is_not_parsed_again(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch, format_version: int
) -> None:
    """Loading the table after a commit of this process reads back the metadata that commit wrote
    without parsing its JSON again, and it is what parsing that file gives."""
    from pyiceberg.table.metadata import TableMetadataUtil

    table = _create(catalog, format_version=format_version)
    table.delete("id < 10")
    location = table.pyiceberg.metadata_location
    real = TableMetadataUtil.parse_raw
    parsed: list[str] = []
    monkeypatch.setattr(
        TableMetadataUtil, "parse_raw", staticmethod(lambda data: parsed.append(data) or real(data))
    )
    fresh = icemor.load_table("db.t", catalog=catalog)
    assert parsed == []
    assert fresh.pyiceberg.metadata_location == location
    assert fresh.pyiceberg.metadata == real(Path(location.removeprefix("file://")).read_text())
    other = SqlCatalog("t", **catalog.properties)  # another catalog object: the same file, the same answer
    assert other.load_table("db.t").metadata == fresh.pyiceberg.metadata
    assert len(_ids(fresh)) == 90
