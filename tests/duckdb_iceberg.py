"""DuckDB 1.5.5's iceberg extension (from PyPI) as a third reader of icemor's tables.

The reader is :class:`realservers.servers.DuckDB` (a process of its own: icemor depends on DuckDB 2.x,
and PyPI's newest iceberg extension loads only into 1.5.5), from ``.cache/realservers/duckdb-1.5.5``,
which ``tools/prepare_realservers.py duckdb`` makes (``make test`` runs it); tests that need it are
skipped without it (:data:`needs_duckdb`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from realservers.servers import DuckDB

SITE = Path(__file__).resolve().parents[1] / ".cache" / "realservers" / "duckdb-1.5.5"

needs_duckdb = pytest.mark.skipif(
    not (SITE / ".prepared").exists(),
    reason="DuckDB 1.5.5 not prepared (tools/prepare_realservers.py duckdb)",
)


def duckdb_rows(metadata_location: str, columns: str = "id, v") -> list[tuple[Any, ...]]:
    """The rows DuckDB reads from the table at ``metadata_location``, sorted."""
    worker = DuckDB(SITE)
    try:
        rows = worker.sql(f"SELECT {columns} FROM iceberg_scan('{metadata_location}')")
    finally:
        worker.close()
    return sorted(tuple(r) for r in rows)
