"""Creating a table through the door (``icemor.commit.create``): staged, its location checked,
committed with ``AssertCreate``; a plain create when the catalog refuses staging.

Before, create-table needed staged creation: a REST catalog without it ("Staged table creation
is not implemented") could not create tables through icemor, although pyiceberg's plain create
works there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from icemor.exceptions import CommitFailedError, CommitStateUnknownError, InvalidArgumentError
from rest_stub import Fault, RestStub

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog.rest import RestCatalog

ROWS = pa.table({"id": pa.array(range(10), pa.int64()), "k": [f"k{i}" for i in range(10)]})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RestStub]:
    stub = RestStub(tmp_path / "server")
    yield stub
    stub.close()


def _rest(stub: RestStub) -> RestCatalog:
    catalog = stub.catalog(read_timeout=10)
    catalog.create_namespace("db")
    return catalog


# 422: lakana-server's answer (tests/realservers/test_lakana.py runs against the real server)
@pytest.mark.parametrize("status", [400, 405, 406, 422, 501])
def test_a_catalog_that_refuses_staging_gets_a_plain_create(tmp_path: Path, status: int) -> None:
    stub = RestStub(tmp_path / "server", staging=False, staging_refusal=status)
    try:
        rest = _rest(stub)
        table = icemor.create_table("db.t", ROWS, identifier_fields=["id"], catalog=rest)
        assert stub.refused_stagings == 1 and stub.staged_creates == 0
        fresh = icemor.load_table("db.t", catalog=rest)
        assert fresh.metadata.table_uuid == table.metadata.table_uuid
        assert sorted(fresh.scan().to_arrow()["id"].to_pylist()) == list(range(10))
        assert fresh.metadata.location.startswith((tmp_path / "server" / "warehouse").as_uri())
    finally:
        stub.close()


def test_a_refused_location_drops_the_plainly_created_table(tmp_path: Path) -> None:
    """Without staging the location is known only once the table exists: a location inside
    another table's is refused then, and the new table dropped again."""
    stub = RestStub(tmp_path / "server", staging=False)
    try:
        rest = _rest(stub)
        outer = icemor.create_table("db.t", ROWS, catalog=rest).metadata.location
        with pytest.raises(InvalidArgumentError, match=r"inside 'db\.t'"):
            icemor.create_table(
                "db.u", ROWS.schema, properties={"write.data.path": f"{outer}/data/u"}, catalog=rest
            )
        assert [t[-1] for t in rest.list_tables("db")] == ["t"]
        left = [p for p in (tmp_path / "server" / "warehouse" / "db" / "u").rglob("*") if p.is_file()]
        assert left == []  # purged
    finally:
        stub.close()


def test_a_staging_refused_for_another_reason_is_an_error(tmp_path: Path) -> None:
    stub = RestStub(tmp_path / "server", staging=False, staging_refusal=403)
    try:
        rest = _rest(stub)
        with pytest.raises(CommitFailedError, match=r"the catalog refused creating db.t \(HTTP 403\)"):
            icemor.create_table("db.t", ROWS.schema, catalog=rest)
        assert rest.list_tables("db") == []
    finally:
        stub.close()


def test_a_staged_create_is_committed_through_the_door(server: RestStub) -> None:
    rest = _rest(server)
    server.commits.clear()
    icemor.create_table("db.t", ROWS.schema, catalog=rest)
    assert server.staged_creates == 1
    assert server.commits == ["200"]  # the create itself: a commit with AssertCreate
    assert icemor.load_table("db.t", catalog=rest).metadata.snapshots == []


def test_a_create_that_committed_but_failed_is_recognised(server: RestStub) -> None:
    rest = _rest(server)
    server.answer_next_commit(Fault(status=504, commit_first=True))
    table = icemor.create_table("db.t", ROWS, catalog=rest)  # the append after it commits too
    assert server.commits[0] == "504 after commit"
    assert icemor.load_table("db.t", catalog=rest).metadata.table_uuid == table.metadata.table_uuid


def test_a_create_in_an_unknown_state_says_so(server: RestStub) -> None:
    rest = _rest(server)
    server.answer_next_commit(Fault(status=500))
    with pytest.raises(CommitStateUnknownError, match=r"creating db\.t may or may not have happened"):
        icemor.create_table("db.t", ROWS.schema, catalog=rest)


def test_a_concurrent_create_is_already_exists(server: RestStub) -> None:
    rest = _rest(server)
    server.answer_next_commit(Fault(status=409))  # AssertCreate failed: created meanwhile
    with pytest.raises(InvalidArgumentError, match="already exists"):
        icemor.create_table("db.t", ROWS.schema, catalog=rest)
