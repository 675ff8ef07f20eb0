"""Spark Connect (PySpark 4.x ships the server: ``sbin/start-connect-server.sh``, the
spark-connect jar): icemor's Spark engine refuses a Connect session in one line.

A subprocess starts a local Connect server and a client session (``builder.remote("local[1]")``,
what the pip package offers without a SPARK_HOME) and calls ``to_spark``, DELETE, UPDATE and
MERGE with it; each must raise icemor's UnsupportedFeatureError naming Spark Connect, and the
table must be unchanged (docs/spark.md says why it is refused).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import scenarios

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

CLIENT = """
import json, sys
from pyspark.sql import SparkSession
import icemor
from icemor.exceptions import UnsupportedFeatureError

spark = SparkSession.builder.remote("local[1]").getOrCreate()
table = icemor.load_table(sys.argv[1])
source = spark.createDataFrame([(1, "p1", 5, "m")], schema="id long, part string, qty long, note string")
calls = {
    "to_spark": lambda: table.to_spark(spark),
    "delete": lambda: table.delete("qty % 50 = 0", spark=spark),
    "update": lambda: table.update({"qty": "qty + 1"}, where="id % 7 = 1", spark=spark),
    "merge": lambda: table.merge(source, on=["id"], spark=spark).when_matched_update_all().execute(),
}
found = {}
for name, call in calls.items():
    try:
        call()
        found[name] = "no error"
    except UnsupportedFeatureError as e:
        found[name] = str(e)
    except Exception as e:
        found[name] = f"{type(e).__name__}: {e}"
spark.stop()
print(json.dumps({"session": type(spark).__module__, "calls": found}))
"""


@pytest.mark.timeout(600)
def test_connect_session_is_refused_in_one_line(spark: SparkSession, out_dir: Path) -> None:
    name = "connect.t"
    scenarios.create_table(name, partitioned=False)
    before = scenarios.local_rows(name)
    env = {**os.environ, "ICEMOR_HOME": str(out_dir / "home"), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, name],
        capture_output=True,
        text=True,
        env=env,
        timeout=540,
        check=False,
        cwd=out_dir,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["session"].startswith("pyspark.sql.connect"), result
    for call, message in result["calls"].items():
        assert message.startswith("Spark Connect sessions are not supported"), (call, message)
        assert "\n" not in message
    assert scenarios.local_rows(name) == before
