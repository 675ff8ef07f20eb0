"""Scan exports (icemor.scan): a scan registered in DuckDB answers every query, each reading the
scan's snapshot afresh, where a registered RecordBatchReader answered one and then failed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

import icemor
import icemor.engines.local as local_engine

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import pytest

    from icemor.planning.scan_job import ScanJob


def test_to_duckdb_answers_every_query_streaming_one_read_each(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = icemor.create_table("db.t", pa.table({"id": pa.array(range(10), pa.int64())}))
    t.delete("id < 3")  # deletes apply in every query
    reads = []
    real = local_engine.read_batches

    def counted(job: ScanJob) -> Iterator[pa.RecordBatch]:
        reads.append(job)
        yield from real(job)

    monkeypatch.setattr(local_engine, "read_batches", counted)
    con = duckdb.connect()
    relation = t.scan().to_duckdb(con, "t")
    t.append(pa.table({"id": pa.array([100], pa.int64())}))  # later snapshot: not in the scan
    assert con.sql("SELECT count(*) FROM t").fetchall() == [(7,)]
    assert con.sql("SELECT sum(id) FROM t").fetchall() == [(sum(range(3, 10)),)]
    assert con.sql("SELECT id FROM t WHERE id > 7 ORDER BY id").fetchall() == [(8,), (9,)]
    assert relation.aggregate("max(id)").fetchall() == [(9,)]
    assert len(reads) == 4  # one read of the scan per query: streamed, not held between queries


def test_change_feed_to_duckdb_answers_every_query(home: Path) -> None:
    t = icemor.create_table("db.c", pa.table({"id": pa.array([1, 2], pa.int64())}))
    t.delete("id = 1")
    con = duckdb.connect()
    t.changes().to_duckdb(con, "c")
    for _ in range(2):
        got = con.sql("SELECT _change_type, count(*) FROM c GROUP BY 1 ORDER BY 1").fetchall()
        assert got == [("DELETE", 1), ("INSERT", 2)]
