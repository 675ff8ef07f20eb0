"""``import icemor`` stays light: pyspark (and py4j, a JVM) load only with ``icemor.engines.spark``."""

from __future__ import annotations

import json
import subprocess
import sys

LIGHT_MODULES = [
    "icemor",
    "icemor.table",
    "icemor.cli",
    "icemor.catalog",
    "icemor.output",
    "icemor.demo",
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


def test_probe_detects_pyspark() -> None:
    # the probe itself works: importing pyspark is seen
    assert "pyspark" in imported_heavy_modules("pyspark")


def test_icemor_spark_front_does_not_import_pyspark_until_called() -> None:
    import subprocess
    import sys

    code = "import sys, icemor.spark; assert 'pyspark' not in sys.modules; print(icemor.spark.session.__doc__ is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
