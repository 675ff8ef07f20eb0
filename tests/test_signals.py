"""Ctrl-C (SIGINT) and SIGTERM from outside, in the middle of a write: exit 130 with a one-line
note, and no file under the table's location that its metadata does not reference (an
interrupted 8 M-row append once left 9 to 29 uncommitted data files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icemor.cli import run

if TYPE_CHECKING:
    from pyiceberg.table import Table

pytestmark = pytest.mark.slow

ROWS = 1_200_000  # per input file: more than one writer batch (1 Mi rows)


def _rows(lo: int, n: int) -> pa.Table:
    ids = np.arange(lo, lo + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "v": np.random.default_rng(lo).random(n),
            "s": pa.array(np.char.add("s", (ids % 1000).astype(str))),
        }
    )


def _table() -> Table:
    import icemor

    return icemor.load_table("db.t").pyiceberg


def _referenced(table: Table) -> set[str]:
    """Every file the table's metadata names: metadata files, manifest lists, manifests, data
    and delete files of every snapshot (deleted entries too)."""
    io, meta = table.io, table.metadata
    paths = {table.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    for snapshot in meta.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    return {p.removeprefix("file://").removeprefix("file:") for p in paths}


def _on_disk(table: Table) -> set[str]:
    root = table.metadata.location.removeprefix("file://").removeprefix("file:")
    return {str(Path(d) / f) for d, _, files in os.walk(root) for f in files}


def _interrupt_when_a_data_file_appears(
    argv: list[str], home: Path, sig: int
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a process of its own; once a new data file appears under the table's data
    directory, send ``sig`` (once)."""
    data = Path(_table().metadata.location.removeprefix("file://")) / "data"
    before = set(data.rglob("*.parquet"))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from icemor.cli import main; main()", *argv],
        env={**os.environ, "ICEMOR_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    sent = False
    while proc.poll() is None and time.monotonic() < deadline:
        if set(data.rglob("*.parquet")) - before:
            proc.send_signal(sig)
            sent = True
            break
        time.sleep(0.005)
    out, err = proc.communicate(timeout=120)
    assert sent, f"the command ended before writing a data file: {proc.returncode} {err}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _check(done: subprocess.CompletedProcess[str], sig: int, snapshot_before: int | None) -> None:
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    assert done.returncode == 130, done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [f"icemor: interrupted ({name})"]
    table = _table()
    assert table.metadata.current_snapshot_id == snapshot_before  # nothing committed
    stray = _on_disk(table) - _referenced(table)
    assert stray == set()


@pytest.fixture
def setup(home: Path, tmp_path: Path) -> Path:
    """A table db.t (unpartitioned) holding ROWS rows; returns the inputs' directory."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    first = inputs / "first.parquet"
    pq.write_table(_rows(0, ROWS), first)
    assert run(["create-table", "db.t", "--schema-from", str(first)]) == 0
    assert run(["append", "db.t", str(first)]) == 0
    return inputs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_a_multi_batch_append_removes_its_files(setup: Path, home: Path, sig: int) -> None:
    files = []
    for n in range(3):
        path = setup / f"more-{n}.parquet"
        pq.write_table(_rows((n + 1) * ROWS, ROWS), path)
        files.append(str(path))
    before = _table().metadata.current_snapshot_id
    done = _interrupt_when_a_data_file_appears(["append", "db.t", *files], home, sig)
    _check(done, sig, before)


def test_a_signal_in_a_merge_removes_its_files(setup: Path, home: Path) -> None:
    source = setup / "source.parquet"
    # half the keys match (updated), half are new (inserted): new rows and position deletes
    pq.write_table(_rows(ROWS // 2, 2 * ROWS), source)
    before = _table().metadata.current_snapshot_id
    done = _interrupt_when_a_data_file_appears(
        ["merge", "db.t", "--source", str(source), "--on", "id"], home, signal.SIGINT
    )
    _check(done, signal.SIGINT, before)


# the signal comes as the first file appears: when it lands while that file is being opened,
# the writer did not hold it yet and left it behind (1 run in 3 before the fix): three tries
@pytest.mark.parametrize("attempt", range(3))
def test_a_signal_in_a_cdc_batch_removes_its_files(setup: Path, home: Path, attempt: int) -> None:
    changes = _rows(ROWS // 2, 2 * ROWS)
    ops = np.where(changes.column("id").to_numpy() < ROWS, "U", "I")
    path = setup / "changes.parquet"
    pq.write_table(changes.append_column("op", pa.array(ops)), path)
    before = _table().metadata.current_snapshot_id
    done = _interrupt_when_a_data_file_appears(
        [
            "apply-changes",
            "db.t",
            "--changes",
            str(path),
            "--key",
            "id",
            "--op-column",
            "op",
            "--allow-nullable-key",
        ],
        home,
        signal.SIGINT,
    )
    _check(done, signal.SIGINT, before)
