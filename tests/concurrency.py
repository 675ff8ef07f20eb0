"""What the concurrency tests share: worker processes released together, and a catalog swap
that can pause on cue.

Each test's worker script is ``WORKER_PRELUDE`` followed by its own operations. The prelude
reads the plan (JSON, ``argv[1]``), defines ``wait_for(path)`` and patches
``SqlCatalog.commit_table`` so that, while ``pause`` holds ``{"touch": a, "wait": b}``, the
next swap touches ``a`` and waits for ``b`` before committing. :func:`run_workers` starts one
process per plan, waits until every one has loaded its table, then releases them together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

WORKER_PRELUDE = r"""
import json, os, sys, time
from pathlib import Path

plan = json.loads(sys.argv[1])

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException

import icemor
from icemor.exceptions import CommitConflictError, CommitFailedError


def wait_for(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.002)


pause = {}
original = SqlCatalog.commit_table


def commit_table(self, table, requirements, updates):
    if pause:
        p = dict(pause)
        pause.clear()
        Path(p["touch"]).touch()
        wait_for(p["wait"])
    return original(self, table, requirements, updates)


SqlCatalog.commit_table = commit_table
"""


def run_workers(
    home: Path,
    worker: str,
    plans: Mapping[str, Mapping[str, Any]],
    *,
    defaults: Mapping[str, Any] | None = None,
    start_timeout: float = 60,
    timeout: float = 120,
) -> dict[str, list[dict[str, Any]]]:
    """Run ``worker`` once per plan (``defaults`` under it), released together; return each one's log.

    A worker signals it is ready by touching its plan's ``ready`` file, waits for ``go``, and
    prints its log as the last line of its output (JSON). Each must exit 0 within ``timeout``
    seconds of the release; one that does not is killed and the test fails with every stderr.
    """
    procs: dict[str, subprocess.Popen[str]] = {}
    outputs: dict[str, tuple[Path, Path]] = {}
    go = home / "go"
    for name, plan in plans.items():
        full = {**(defaults or {}), **plan, "ready": str(home / f"ready-{name}"), "go": str(go)}
        out, err = home / f"{name}.out", home / f"{name}.err"
        outputs[name] = (out, err)
        with out.open("w") as fo, err.open("w") as fe:
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", worker, json.dumps(full)],
                stdout=fo,
                stderr=fe,
                text=True,
                env={**os.environ, "ICEMOR_HOME": str(home)},
            )
    try:
        deadline = time.monotonic() + start_timeout
        while not all((home / f"ready-{n}").exists() for n in plans):
            exited = {n: p.returncode for n, p in procs.items() if p.poll() is not None}
            assert not exited, f"workers exited before starting: {exited}: {stderr_tails(outputs)}"
            assert time.monotonic() < deadline, f"workers did not start within {start_timeout} s"
            time.sleep(0.01)
        go.touch()
        for p in procs.values():
            p.wait(timeout=timeout)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = {n: p.returncode for n, p in procs.items()}
    assert all(c == 0 for c in codes.values()), f"exit codes {codes}: {stderr_tails(outputs)}"
    return {n: json.loads(out.read_text().strip().splitlines()[-1]) for n, (out, _) in outputs.items()}


def stderr_tails(outputs: Mapping[str, tuple[Path, Path]]) -> str:
    """The last 3,000 characters of each worker's stderr, for a failure's message."""
    return "\n".join(f"--- {n}:\n{err.read_text()[-3000:]}" for n, (_, err) in outputs.items())
