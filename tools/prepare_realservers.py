"""Prepare the environments of the real-server tests that cannot live in the test environment.

``python tools/prepare_realservers.py duckdb``: DuckDB 1.5.5 and its ``iceberg``, ``httpfs`` and
``avro`` extensions (PyPI ``duckdb-extension-*``, each pinned to ``duckdb==1.5.5``), installed with
``pip --target`` into ``.cache/realservers/duckdb-1.5.5``. icemor depends on DuckDB 2.x, and PyPI
has no iceberg extension for 2.x (its newest, 1.5.5, loads only into DuckDB 1.5.5): the tests run
this DuckDB in a process of its own (``PYTHONPATH``).

``python tools/prepare_realservers.py lakana``: ``lakana-server`` (a second Iceberg REST catalog)
in a virtual environment ``.cache/realservers/lakana-0.20.0``: its dependencies (aiobotocore) pin
an older botocore than the test extra's boto3 and moto need. Beside it ``migrated.db``, an empty
SQLite metadata database with lakana's migrations applied (``lakana-server migrate``, ~10 s), which
each test run copies instead of migrating again.

Each is made once (a stamp file), from the package index only; the path is printed last.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / ".cache" / "realservers"
DUCKDB = "1.5.5"
DUCKDB_PACKAGES = [f"duckdb=={DUCKDB}"] + [
    f"duckdb-extension-{e}=={DUCKDB}" for e in ("iceberg", "httpfs", "avro")
]
LAKANA = "0.20.0"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
                   check=True)  # fmt: skip


def duckdb() -> Path:
    target = ROOT / f"duckdb-{DUCKDB}"
    stamp = target / ".prepared"
    if not stamp.exists():
        shutil.rmtree(target, ignore_errors=True)
        _pip("--target", str(target), *DUCKDB_PACKAGES)
        stamp.write_text(" ".join(DUCKDB_PACKAGES) + "\n")
    return target


def lakana() -> Path:
    venv = ROOT / f"lakana-{LAKANA}"
    stamp = venv / ".prepared"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             f"lakana-server=={LAKANA}"],
            check=True,
        )  # fmt: skip
        stamp.write_text(f"lakana-server=={LAKANA}\n")
    template = venv / "migrated.db"
    if not template.exists():
        partial = venv / "migrated.db.partial"
        partial.unlink(missing_ok=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "lakana_server", "migrate"],
            # only the database is read for a migration; nothing of the caller's LAKANA_* settings
            env={**_without_lakana_settings(), "LAKANA_DATABASE__URL": f"sqlite:///{partial}"},
            check=True,
            capture_output=True,
        )
        partial.rename(template)
    return venv


def _without_lakana_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAKANA_")}


def main(argv: list[str]) -> int:
    what = argv[1:] or ["duckdb", "lakana"]
    for name in what:
        if name not in ("duckdb", "lakana"):
            print(f"unknown environment {name!r}: duckdb or lakana", file=sys.stderr)
            return 2
    for name in what:
        print(duckdb() if name == "duckdb" else lakana())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
