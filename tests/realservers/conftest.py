"""The real-server tier: SeaweedFS (S3 + Iceberg REST catalog) started once for the session, DuckDB
1.5.5 as a second writer, lakana-server as a second REST catalog (its tables on SeaweedFS's S3),
and the interop matrix printed at the end of the run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from servers import DuckDB, Lakana, SeaweedFS, prepared

if TYPE_CHECKING:
    from collections.abc import Iterator

# (direction, table, what was checked) -> "ok" or what went wrong; printed by the terminal summary
INTEROP: dict[tuple[str, str, str], str] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tier ``realservers`` and ``slow`` (minutes with a server: not `make test-fast`'s)."""
    for item in items:
        if "/realservers/" in str(item.path):
            item.add_marker(pytest.mark.realservers)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """SeaweedFS on 127.0.0.1 for the session: started here, stopped at the end."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def duckdb(seaweed: SeaweedFS) -> Iterator[DuckDB]:
    """DuckDB 1.5.5 with the SeaweedFS catalog attached as ``w``."""
    worker = DuckDB(prepared("duckdb"))
    worker.attach(seaweed)
    yield worker
    worker.close()


@pytest.fixture(scope="session")
def lakana(seaweed: SeaweedFS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lakana]:
    """lakana-server on 127.0.0.1 for the session, its storage on the SeaweedFS S3 gateway."""
    server = Lakana(prepared("lakana"), tmp_path_factory.mktemp("lakana"), seaweed)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not INTEROP:
        return
    tr = terminalreporter
    tr.section("DuckDB 1.5.5 <-> icemor through the SeaweedFS REST catalog (interop matrix)")
    width = max(len(f"{d}  {t}") for d, t, _ in INTEROP) + 2
    for (direction, table, what), result in sorted(INTEROP.items()):
        tr.write_line(f"{f'{direction}  {table}':<{width}} {what:<48} {result}")
    bad = sum(1 for r in INTEROP.values() if r != "ok")
    tr.write_line(f"interop: {len(INTEROP) - bad} ok, {bad} failed")
