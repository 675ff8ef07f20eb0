"""add-files checks each file's schema from its footer, in order, and stops at the first file that
does not fit: one line naming that file and the column, nothing printed by pyiceberg (which
printed its comparison table once per file: 118,000 lines for 20,000 files), nothing committed."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

import icemor
from icemor.cli import run

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _file(path: Path, i: int, *, fits: bool) -> Path:
    s = pa.array([f"r{i}"]) if fits else pa.array([i], pa.int32())
    pq.write_table(pa.table({"id": pa.array([i], pa.int64()), "s": s}), path)
    return path


def _table(home: Path, tmp_path: Path) -> str:
    schema = _file(tmp_path / "schema.parquet", 0, fits=True)
    assert run(["create-table", "db.t", "--schema-from", str(schema)]) == 0
    return "db.t"


def test_many_mismatching_files_are_one_line_and_nothing_printed(home: Path, tmp_path: Path) -> None:
    """2,000 files, the second half with `s` as int where the table has a string."""
    name = _table(home, tmp_path)
    files = [_file(tmp_path / f"f{i:05d}.parquet", i, fits=i < 1000) for i in range(2000)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "icemor", "add-files", name, *map(str, files)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    err = done.stderr.splitlines()
    assert len(err) == 1, err[:10]
    assert "f01000.parquet" in err[0] and "s: optional string" in err[0] and "int" in err[0], err
    assert icemor.load_table(name).snapshots() == []


def test_the_first_mismatch_is_named_and_later_files_are_not_read(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = _table(home, tmp_path)
    good = [_file(tmp_path / f"g{i}.parquet", i, fits=True) for i in range(3)]
    bad = _file(tmp_path / "bad.parquet", 3, fits=False)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")  # after the mismatch: never opened
    capsys.readouterr()
    assert run(["add-files", name, *map(str, [*good, bad, junk])]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert out == "" and len(lines) == 1 and "bad.parquet" in lines[0], lines
    assert "s: optional string" in lines[0]
    # files that all fit are added, once: the check does not change what is committed
    assert run(["add-files", name, *map(str, good)]) == 0
    assert icemor.load_table(name).scan().count() == 3
