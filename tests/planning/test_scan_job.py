"""Snapshot selection of a scan (planning.scan_job.resolve_snapshot): a snapshot that was expired,
or a time before every readable snapshot, is one line saying so and naming the oldest snapshot
still readable (id and commit time), for the Python API and the CLI (exit 2)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from icemor.cli import run
from icemor.exceptions import NoSuchSnapshotError

if TYPE_CHECKING:
    from pathlib import Path


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_an_expired_snapshot_names_the_oldest_readable_one(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = icemor.create_table("db.t", pa.table({"id": pa.array([1], pa.int64())}))
    for i in (2, 3):
        time.sleep(0.005)  # distinct commit times
        t.append(pa.table({"id": pa.array([i], pa.int64())}))
    first, second, third = t.snapshots()
    t.maintenance.expire_snapshots(older_than=third.timestamp_ms + 1, retain_last=2)
    assert [s.snapshot_id for s in t.refresh().snapshots()] == [second.snapshot_id, third.snapshot_id]
    oldest = f"the oldest snapshot still readable is {second.snapshot_id}, committed at {_iso(second.timestamp_ms)}"

    cases = [
        ({"snapshot_id": first.snapshot_id}, ["--snapshot-id", str(first.snapshot_id)], "expired, or never"),
        ({"snapshot_id": 42}, ["--snapshot-id", "42"], "expired, or never"),
        ({"as_of_timestamp": first.timestamp_ms}, ["--as-of-timestamp", str(first.timestamp_ms)], "expired"),
    ]
    for kwargs, argv, needle in cases:
        with pytest.raises(NoSuchSnapshotError) as e:
            t.scan(**kwargs)  # type: ignore[arg-type]
        assert needle in str(e.value) and oldest in str(e.value), e.value
        capsys.readouterr()
        assert run(["scan", "db.t", *argv]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and needle in err[0] and oldest in err[0], err
    # the oldest readable snapshot is read by id and by its own time
    assert t.scan(snapshot_id=second.snapshot_id).count() == 2
    assert t.scan(as_of_timestamp=second.timestamp_ms).count() == 2


def test_a_table_without_snapshots_says_so(home: Path) -> None:
    t = icemor.create_table("db.e", pa.schema([("id", pa.int64())]))
    with pytest.raises(NoSuchSnapshotError, match="the table has no snapshot to read"):
        t.scan(snapshot_id=7)
