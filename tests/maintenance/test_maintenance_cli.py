"""`icemor compact --position-deletes | --data-files` and `icemor expire`: metrics printed, rows kept,
bad input one line with exit 2 and nothing changed."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import icemor
from icemor.cli import run
from icemor.planning.manifest_reader import live_delete_files


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture
def table(home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """db.t: two appends of the four rows (ids 1-4 twice), three DELETEs writing partition-scoped files."""
    argv = ["create-table", "db.t", "--schema-from", str(parquet)]
    assert run([*argv, "--property", "write.delete.granularity=partition"]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    for i in (1, 2, 3):
        assert run(["delete", "db.t", "--where", f"id = {i}"]) == 0
    capsys.readouterr()
    return "db.t"


def _state(name: str) -> tuple[int, int, int]:
    """(live rows, data files, delete files) of the current snapshot."""
    t = icemor.load_table(name)
    snapshot = t.metadata.current_snapshot()
    assert snapshot is not None
    return t.scan().count(), len(t.scan().plan_files()), len(live_delete_files(t.io, snapshot))


def test_compact_position_deletes_then_data_files(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _state(table) == (2, 2, 3)
    assert run(["compact", table, "--position-deletes"]) == 0
    out = capsys.readouterr().out
    assert "merged 3 position delete files (6 rows) into 1 (6 positions)" in out, out
    assert _state(table) == (2, 2, 1)
    assert run(["compact", table, "--position-deletes"]) == 0
    assert "nothing committed" in capsys.readouterr().out
    assert run(["compact", table, "--data-files"]) == 0  # 75 % deleted: over the 0.3 ratio
    out = capsys.readouterr().out
    assert "rewrote 2 data files" in out and "into 1 (2 rows" in out and "removed 1 delete files" in out, out
    assert _state(table) == (2, 1, 0)
    assert run(["compact", table, "--data-files", "--delete-file-threshold", "1"]) == 0
    assert "no data file needs rewriting" in capsys.readouterr().out


def test_expire_dry_run_then_for_real_and_orphans(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    t = icemor.load_table(table)
    snapshots = len(t.metadata.snapshots)
    assert snapshots == 5
    future = (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert run(["expire", table, "--older-than", future, "--retain-last", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would expire 3 snapshots; would delete 0 data files") and "snap-" in out, out
    assert len(t.refresh().metadata.snapshots) == snapshots
    stray = Path(t.metadata.location.removeprefix("file://")) / "data" / "stray.parquet"
    stray.write_bytes(b"x")
    old = time.time() - 4 * 86400
    os.utime(stray, (old, old))
    assert run(["expire", table, "--retain-last", "2", "--remove-orphans", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would expire 0 snapshots" in out and "would delete 1 orphan files (1 bytes)" in out, out
    assert str(stray) in out and stray.exists()
    assert run(["expire", table, "--older-than", future, "--retain-last", "2", "--remove-orphans"]) == 0
    out = capsys.readouterr().out
    # the two appends and the first DELETE go; every manifest and file they wrote is still live
    expected = "expire 3 snapshots; delete 0 data files, 0 delete files, 0 manifests, 3 manifest lists"
    assert out.startswith(expected), out
    assert "delete 1 orphan files" in out and not stray.exists()
    assert len(t.refresh().metadata.snapshots) == 2
    assert _state(table) == (2, 2, 3)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compact", "db.t"], "choose one action"),
        (["compact", "db.t", "--position-deletes", "--data-files"], "choose one action"),
        (["compact", "db.t", "--position-deletes", "--where", "id > 1"], "go with --data-files"),
        (["compact", "db.t", "--data-files", "--delete-ratio-threshold", "0"], "must be > 0"),
        (["compact", "db.t", "--data-files", "--where", "nope = 1"], "nope"),
        (["compact", "db.missing", "--data-files"], "does not exist"),
        (["expire", "db.t", "--older-than", "yesterday"], "ISO-8601"),
        (["expire", "db.t", "--retain-last", "0"], "at least 1"),
        (["expire", "db.missing"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    table: str, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    before = len(icemor.load_table(table).metadata.snapshots)
    assert run(argv) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and needle in lines[0], lines
    assert len(icemor.load_table(table).metadata.snapshots) == before
    assert _state(table) == (2, 2, 3)
