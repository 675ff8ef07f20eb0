"""icemor on a cluster whose executors are separate processes without icemor: ``ship`` (ship.py).

Every other Spark test runs on ``local[*]``, where the executors share the driver's JVM, process
tree, temp directory and Python. Here a subprocess (this process already has its ``local[*]``
oracle JVM) runs ``spark_cluster_app.py`` against ``local-cluster[2,1,1024]``: two executor JVMs
that the driver's JVM launches as processes of their own, each with a temp directory of its own,
whose Python workers run a bare venv of the driver's Python (no icemor, no pyarrow, nothing
installed) and see no ``PYTHONPATH`` of the driver's. Without shipping, the executors cannot
import icemor and a DELETE fails, changing nothing; after ``icemor.spark.ship(spark)`` on the
same session, DELETE, UPDATE (moving rows to another partition), MERGE and a CDC batch run on
a partitioned and an unpartitioned table, and Spark reads them with their position and
equality deletes; a second session gets the archive at start-up (the ``spark-submit``
recipe). Iceberg Java (this session's oracle, same catalog) must read exactly the model's rows,
and every Spark read must equal Java's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from oracle import load_oracle_env, sorted_rows

if TYPE_CHECKING:
    from oracle import IcebergJava

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("spark_cluster_app.py")
COLUMNS = ["id", "part", "qty", "note"]


def _spark_home(home: Path) -> Path:
    """PySpark's package as SPARK_HOME, but with a ``work`` directory of this test's: the
    standalone workers of ``local-cluster`` put their executors' directories (and the unpacked
    archives) in ``$SPARK_HOME/work``, which would otherwise be inside the venv."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    home.mkdir()
    for entry in Path(spec.origin).parent.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    return home


@pytest.mark.oracle
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_icemor_shipped_to_executors_without_it(
    oracle: IcebergJava, icemor_home: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # executors inherit the env
    # the executors' interpreter: a venv of the driver's Python with nothing installed
    venv = tmp_path / "executor-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    executor_python = venv / "bin" / "python"
    for module in ("icemor", "pyarrow", "pyiceberg", "pyroaring"):
        probe = [executor_python, "-c", f"import {module}"]
        assert subprocess.run(probe, env=env, cwd=tmp_path, capture_output=True, check=False).returncode, (
            module
        )

    out = tmp_path / "out"
    out.mkdir()
    (out / "home").symlink_to(icemor_home)  # the oracle's catalog and warehouse
    executor_tmp = tmp_path / "executor-tmp"
    executor_tmp.mkdir()
    env |= {"JAVA_HOME": load_oracle_env()["java_home"], "SPARK_HOME": str(_spark_home(tmp_path / "spark"))}
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(APP),
                str(ROOT / "src"),
                "local-cluster[2,1,1024]",
                str(out),
                str(executor_python),
                str(executor_tmp),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=1400,
            check=False,
        )
    finally:  # pytest keeps the last runs' temp dirs: not these 2 GB (the executors' logs stay)
        for unpacked in (tmp_path / "spark" / "work").glob("app-*/*/icemor-env*"):
            shutil.rmtree(unpacked, ignore_errors=True)
        shutil.rmtree(out / "ship-cache", ignore_errors=True)
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads((out / "report.json").read_text())
    assert report["driver_icemor"] == str(ROOT / "src" / "icemor" / "__init__.py")
    # two executor JVMs, neither of them the driver's
    assert len(report["executor_jvms"]) == 2, report
    assert not set(report["executor_jvms"]) & set(report["driver_jvms"]), report

    # before shipping: one line naming the cause and the remedy; the DELETE failed, changing nothing
    before = report["check_before"]
    assert "No module named 'icemor'" in before and "icemor.spark.ship(spark)" in before, before
    assert str(executor_python) in before and "\n" not in before, before
    assert "No module named 'icemor'" in report["delete_before"]
    assert report["unshipped_unchanged"]

    shipped = {d.split("==")[0].lower() for d in report["shipped"]["distributions"]}
    assert {"icemor", "pyarrow", "pyiceberg", "pyroaring", "numpy", "pandas"} <= shipped, shipped
    assert not {"pyspark", "py4j"} & shipped

    # Iceberg Java reads the model's rows; every Spark read on the cluster reads Java's rows
    expected = sorted((out / "expected").glob("*.json"))
    assert [p.stem for p in expected] == ["cluster.flat", "cluster.part", "cluster.unshipped"]
    java = {}
    for path in expected:
        java[path.stem] = oracle.rows(path.stem, columns=COLUMNS)
        assert java[path.stem] == sorted_rows(tuple(r) for r in json.loads(path.read_text())), path.stem
    reads = sorted(p.name for p in (out / "reads").glob("*.json"))
    assert reads == sorted(
        f"{name}.{label}.json"
        for name in ("cluster.flat", "cluster.part")
        for label in ("shipped.auto", "shipped.python", "recipe.python")
    )
    for name in reads:
        table = name.split(".")[0] + "." + name.split(".")[1]
        got = sorted_rows(tuple(r) for r in json.loads((out / "reads" / name).read_text()))
        assert got == java[table], name
