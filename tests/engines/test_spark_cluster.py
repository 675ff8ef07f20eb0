"""The Spark write path on a cluster whose executors are separate processes.

Every other Spark test runs on ``local[*]``, where the executors share the driver's JVM, process
tree and temp directory. Here a subprocess (this process already has its ``local[*]`` oracle
JVM) runs ``tests_spark4/scenarios.py`` against ``local-cluster[2,1,1024]``: two executor JVMs
that the driver's JVM launches as processes of their own, each with a temp directory of its own
(``TMPDIR`` and ``java.io.tmpdir``), so a write that passed anything through the driver's temp
directory would fail. It runs DELETE, UPDATE (moving rows to another partition), MERGE and a CDC
batch on a partitioned and an unpartitioned table, each step checked against a Python model with
icemor's local reader; then Iceberg Java (this session's oracle, same catalog) must read exactly
the model's final rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from oracle import load_oracle_env, sorted_rows

if TYPE_CHECKING:
    from oracle import IcebergJava

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests_spark4" / "scenarios.py"
COLUMNS = ["id", "part", "qty", "note"]


@pytest.mark.oracle
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_writes_on_a_two_executor_local_cluster(
    oracle: IcebergJava, icemor_home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "home").symlink_to(icemor_home)  # the oracle's catalog and warehouse
    executor_tmp = tmp_path / "executor-tmp"
    executor_tmp.mkdir()
    env = {
        **os.environ,
        "JAVA_HOME": load_oracle_env()["java_home"],
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            str(SCENARIOS),
            "local-cluster[2,1,1024]",
            str(out),
            "--executor-tmp",
            str(executor_tmp),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    shape = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    # two executor JVMs, neither of them the driver's
    assert len(shape["executor_jvms"]) == 2, shape
    assert not set(shape["executor_jvms"]) & set(shape["driver_jvms"]), shape

    expected = sorted((out / "expected").glob("*.json"))
    assert [p.stem for p in expected] == ["cluster.flat", "cluster.part"]
    for path in expected:
        want = sorted_rows(tuple(r) for r in json.loads(path.read_text()))
        assert oracle.rows(path.stem, columns=COLUMNS) == want, path.stem
