"""What the concurrency tests' worker processes share: a catalog swap that can pause on cue.

Each test's worker script is ``WORKER_PRELUDE`` followed by its own operations. The prelude
reads the plan (JSON, ``argv[1]``), defines ``wait_for(path)`` and patches
``SqlCatalog.commit_table`` so that, while ``pause`` holds ``{"touch": a, "wait": b}``, the
next swap touches ``a`` and waits for ``b`` before committing.
"""

from __future__ import annotations

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
