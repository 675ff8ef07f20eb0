"""Spark Connect: every Spark-engine path works on a Connect session, as on a classic one.

PySpark 4.x ships the Connect server (no SPARK_HOME needed). A process that runs a classic
session cannot also be a Connect client (PySpark switches its functions to Connect's for the
whole process), so the Connect side runs in a subprocess (``twins.py connect``: a client only,
with a temp directory of its own, whose server is another process, ``local[2]``, on a free
port), at the same time as the classic side runs here, on the session fixture (``local[2]``).
Both run :func:`twins.run` over twin tables: reads with every delete kind (v2 position deletes
and v3 deletion vectors written by Iceberg Java, equality deletes) and every strategy, DELETE,
UPDATE with a partition move, MERGE from a DataFrame and from an Arrow table, a CDC batch, an
``icemor.spark.sql`` UPDATE, ``icemor.spark.write`` append and overwrite, a read through
``register``'s front (``spark.read.format("icemor")``), ``rewrite_equality_deletes``, the change
feed, the streaming CDC sink (run by the Connect server, pickled) and a refused UPDATE. Each
step is checked against a Python model inside the run; here the two runs must agree on every row
and every metric, and the final rows go to ``tools/spark4_check.py check`` (Iceberg Java). A
join of a scan with a small range must broadcast the range on both (Spark's planner must not
take a Connect scan for a small table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import twins

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.timeout(900)
def test_connect_session_runs_every_path_as_a_classic_session(spark: SparkSession, out_dir: Path) -> None:
    from icemor.engines.spark.session_kind import is_connect, parallelism

    assert not is_connect(spark)
    result_path = out_dir / "connect-result.json"
    result_path.unlink(missing_ok=True)
    client_tmp = out_dir / "connect-client-tmp"
    client_tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "TMPDIR": str(client_tmp),
    }
    log = (out_dir / "connect-client.log").open("w")
    client = subprocess.Popen(
        [sys.executable, str(Path(twins.__file__)), "connect", str(out_dir), str(result_path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=out_dir,
    )
    try:
        # as the Connect side's result: through JSON (tuples in metrics become lists)
        classic = json.loads(json.dumps(twins.run(spark, "classic", out_dir)))
        returncode = client.wait(timeout=840)
    finally:
        if client.poll() is None:
            client.kill()
        log.close()
    assert returncode == 0, (out_dir / "connect-client.log").read_text()[-4000:]
    # the server's executors made nothing in the client's temp directory, nor the client
    assert not any(client_tmp.iterdir()), sorted(client_tmp.iterdir())
    connect = json.loads(result_path.read_text())

    assert connect["parallelism"] == parallelism(spark) == 2
    assert connect["parallelism_set"] == 5
    assert connect["reads"] == classic["reads"]
    assert connect["broadcast"] == classic["broadcast"] == "range"
    # a MERGE spreads its changes over tasks by a hash of each row's data file path, which differs
    # between twin tables: how many files its tasks wrote may differ, the rows may not
    for side in (connect, classic):
        for merge in ("merge", "merge_arrow"):
            files = [side["metrics"][merge].pop(k) for k in ("data_files_added", "delete_files_added")]
            assert all(n >= 1 for n in files), (merge, files)
    assert connect["metrics"] == classic["metrics"]
    assert connect["feed"] == classic["feed"]
    assert connect["refused"] == classic["refused"]
    assert connect["attach"] == classic["attach"]
    for kind in ("t", "stream", "sqlt"):
        assert connect["rows"][f"connect.{kind}"] == classic["rows"][f"classic.{kind}"], kind
    # the Connect client's progress handler reported the job's 8 tasks, then that it ended
    progress = connect["progress"]
    assert progress[-1] is None, progress
    assert any(p is not None and p[1] >= 8 for p in progress), progress
