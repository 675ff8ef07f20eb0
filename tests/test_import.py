"""``import icemor`` stays light: pyspark (and py4j, a JVM) load only with ``icemor.engines.spark``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

LIGHT_MODULES = [
    "icemor",
    "icemor.table",
    "icemor.cli",
    "icemor.catalog",
    "icemor.cli.output",
    "icemor.cli.demo",
    "icemor.scan",
    "icemor.io.reader",
    "icemor.planning.planner",
    "icemor.planning.scan_job",
    "icemor.engines.local",
    "icemor.ops.create",
    "icemor.ops.append",
    "icemor._compat.pyiceberg",
]

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j"))
print(json.dumps(heavy))
"""


def _spawn(*modules: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, *modules], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _collect(proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: list[str] = json.loads(out.strip().splitlines()[-1])
    return result


def imported_heavy_modules(*modules: str) -> list[str]:
    return _collect(_spawn(*modules))


def test_import_icemor_table_cli_without_pyspark() -> None:
    assert imported_heavy_modules("icemor", "icemor.table", "icemor.cli") == []


def test_other_light_modules_without_pyspark() -> None:
    # modules the CLI imports lazily (inside commands) must stay light as well
    assert imported_heavy_modules(*LIGHT_MODULES) == []


DUCKDB_PROBE = """
import json, sys, tempfile, os
os.environ["ICEMOR_HOME"] = tempfile.mkdtemp()
import pyarrow as pa
import icemor
t = icemor.create_table("db.t", pa.table({"id": pa.array([1, 2], pa.int64())}))
from pyiceberg.expressions import EqualTo
t.delete(EqualTo("id", 2))  # a position delete, applied by the read below
rows = t.scan(selected_fields=("id",)).to_arrow().num_rows
print(json.dumps([rows, "duckdb" in sys.modules]))
"""


def test_scan_without_text_condition_does_not_import_duckdb() -> None:
    # DuckDB costs ~0.1 s to import: a plain read (a CLI call, a Spark Python worker) does not pay it
    done = subprocess.run(
        [sys.executable, "-c", DUCKDB_PROBE], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, False]


def test_probe_detects_pyspark() -> None:
    # the probe itself works: importing pyspark is seen
    assert "pyspark" in imported_heavy_modules("pyspark")


def test_icemor_spark_front_does_not_import_pyspark_until_called() -> None:
    import subprocess
    import sys

    code = "import sys, icemor.spark; assert 'pyspark' not in sys.modules; print(icemor.spark.session.__doc__ is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


# PySpark is an optional extra (`icemor[spark]`): a process where it cannot be imported
WITHOUT_PYSPARK = """
import sys

class _NoPySpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoPySpark())
from icemor.cli import run
sys.exit(run(sys.argv[1:]))
"""


def _cli_without_pyspark(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ICEMOR_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PYSPARK, *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_local_engine_and_cli_work_without_pyspark(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "cat": ["a", "b", "a"]}), rows)
    home = tmp_path / "home"
    for argv in (
        ["create-table", "db.t", "--schema-from", str(rows)],
        ["append", "db.t", str(rows)],
        ["delete", "db.t", "--where", "id = 2"],
    ):
        done = _cli_without_pyspark(home, *argv)
        assert done.returncode == 0, done.stderr
    out = tmp_path / "out.jsonl"
    done = _cli_without_pyspark(home, "scan", "db.t", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == [1, 3]


def test_spark_engine_without_pyspark_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), rows)
    home = tmp_path / "home"
    assert _cli_without_pyspark(home, "create-table", "db.t", "--schema-from", str(rows)).returncode == 0
    for argv in (["--engine", "spark", "count", "db.t"], ["--engine", "spark", "scan", "db.t"]):
        done = _cli_without_pyspark(home, *argv)
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr
        assert len(err) == 1 and "pip install 'icemor[spark]'" in err[0], err
