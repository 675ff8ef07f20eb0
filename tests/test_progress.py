"""Progress bars: on a terminal a bar shows while a write or a Spark job runs; piped or
redirected output has no progress characters (long commands once showed nothing)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icemor.cli import run

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow  # CLI processes on a pseudo-terminal and on pipes: ~30 s

_CLI = [sys.executable, "-c", "from icemor.cli import main; main()"]
_BAR = "━"  # rich's bar glyph


@pytest.fixture
def table(home: Path, tmp_path: Path) -> Path:
    path = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(200_000), pa.int64()), "v": [i % 7 for i in range(200_000)]}), path
    )
    assert run(["create-table", "db.t", "--schema-from", str(path)]) == 0
    assert run(["append", "db.t", str(path)]) == 0
    return tmp_path


def _commands(tmp: Path) -> list[list[str]]:
    return [
        ["update", "db.t", "--set", "v = v + 1", "--where", "id % 3 = 0"],
        ["delete", "db.t", "--where", "id % 5 = 0"],
        ["scan", "db.t", "--output", str(tmp / "out.parquet"), "--overwrite"],
    ]


def _in_a_terminal(argv: list[str], home: Path) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal; everything it printed."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [*_CLI, *argv],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env={**os.environ, "ICEMOR_HOME": str(home)},
    )
    os.close(child)
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0, out
    os.close(main)
    return out.decode(errors="replace")


def test_a_terminal_shows_a_bar(table: Path, home: Path) -> None:
    for argv, label in zip(_commands(table), ["updating", "deleting", "writing"], strict=True):
        out = _in_a_terminal(argv, home)
        assert label in out and _BAR in out, (argv, out)


def test_piped_output_has_no_progress(table: Path, home: Path) -> None:
    for argv in _commands(table):
        done = subprocess.run(
            [*_CLI, *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "ICEMOR_HOME": str(home)},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        for text in (done.stdout, done.stderr):
            assert _BAR not in text and "\x1b[" not in text and "\r" not in text, (argv, text)


def test_append_shares_the_one_progress_display(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``append`` once opened a rich ``Progress`` of its own beside the shared display (two live
    displays redrawing one terminal while the Spark jobs' bar shows); its bar is a row of the one
    display now."""
    import rich.progress

    from icemor.cli import progress

    made: list[object] = []
    init = rich.progress.Progress.__init__

    def counted(self: rich.progress.Progress, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(rich.progress.Progress, "__init__", counted)
    for stream in (sys.stdout, sys.stderr):  # as on a terminal
        monkeypatch.setattr(stream, "isatty", lambda: True)
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64())}), path)
    assert run(["create-table", "db.a", "--schema-from", str(path)]) == 0
    jobs = progress.Bar("spark jobs", "tasks")  # as the Spark jobs' bar of --engine spark
    jobs.start()
    try:
        assert run(["append", "db.a", str(path)]) == 0
    finally:
        jobs.stop()
    assert len(made) == 1
