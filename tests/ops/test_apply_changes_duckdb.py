"""DuckDB 1.5.5 (its iceberg extension, from PyPI) reads position-mode CDC tables exactly: position deletes
on v2, deletion vectors on v3, read from the metadata file on local disk after every batch.

DuckDB runs in a process of its own from ``.cache/realservers/duckdb-1.5.5`` (icemor depends on DuckDB
2.x; PyPI's newest iceberg extension loads only into 1.5.5), made by ``tools/prepare_realservers.py
duckdb`` (``make test`` runs it); without it the test is skipped.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icemor

SITE = Path(__file__).resolve().parents[2] / ".cache" / "realservers" / "duckdb-1.5.5"
_READ = r"""
import duckdb, importlib, json, pathlib, sys
con = duckdb.connect()
con.execute("SET autoinstall_known_extensions = false")
con.execute("SET autoload_known_extensions = false")
for name in ("avro", "httpfs", "iceberg"):
    module = importlib.import_module(f"duckdb_extension_{name}")
    ext = pathlib.Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    con.execute(f"LOAD '{ext}'")
rows = con.execute("SELECT id, v FROM iceberg_scan(?)", [sys.argv[1]]).fetchall()
print(json.dumps([list(r) for r in rows]))
"""

pytestmark = pytest.mark.skipif(
    not (SITE / ".prepared").exists(),
    reason="DuckDB 1.5.5 not prepared (tools/prepare_realservers.py duckdb)",
)


def _duckdb_rows(metadata_location: str) -> list[tuple[Any, ...]]:
    env = {**os.environ, "PYTHONPATH": str(SITE), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _READ, metadata_location],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return sorted((r[0], r[1]) for r in json.loads(done.stdout))


@pytest.mark.parametrize("version", [2, 3])
def test_duckdb_reads_position_mode_tables_exactly(home: Path, version: int) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    t = icemor.create_table("db.t", schema, format_version=version)
    rnd = random.Random(version)
    model: dict[int, str | None] = {}
    for b in range(4):
        batch = []
        for i in range(40):
            key = rnd.randrange(30)
            op = rnd.choice(["U", "D"] + ([] if key in model else ["I", "I"]))
            batch.append((op, key, None if rnd.random() < 0.2 else f"{b}-{i}"))
            if op == "D":
                model.pop(key, None)
            else:
                model[key] = batch[-1][2]
        changes = pa.table(
            {
                "op": [r[0] for r in batch],
                "id": pa.array([r[1] for r in batch], pa.int64()),
                "v": [r[2] for r in batch],
            }
        )
        m = t.apply_changes(changes, key=["id"], deletes="position")
        assert m.equality_delete_files_added == 0
        assert _duckdb_rows(t.pyiceberg.metadata_location) == sorted(model.items()), f"batch {b}"
    kinds = {d.kind for p in t.scan().plan_files() for d in p.delete_files}
    assert kinds == ({"dv"} if version == 3 else {"position"})
