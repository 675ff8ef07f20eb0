"""Iceberg Java (Spark 3.5, the main venv's oracle) before and after the PySpark 4.x suite.

``make test-spark4`` runs the PySpark 4.x suite in its own venv, where no Iceberg Java runtime
for Spark 4 can be installed. Run with the main venv's Python, this script

- ``prepare OUT``: creates ``OUT/home`` (an icemor home: ``catalog.db``, ``warehouse/``) with
  tables only Iceberg Java can write here, for the suite to read: ``java.dv`` (format v3, its
  deletes as deletion vectors) and ``java.pos`` (v2, position deletes), the rows of
  ``tests_spark4/scenarios.py``'s ``initial_rows()`` without ``id % 5 = 0``;
- ``check OUT``: reads every table the suite left in ``OUT/home`` with Iceberg Java and fails
  unless it reads exactly the rows the suite's Python model expects, saved in
  ``OUT/expected/<namespace.table>.json`` (sorted ``[id, part, qty, note]`` lists, or
  ``{"columns": [...], "rows": [...]}`` whose columns are names or Spark SQL expressions).

Usage: ``python tools/spark4_check.py prepare|check OUT_DIR``; exit 0 on success, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_COLUMNS = ["id", "part", "qty", "note"]


def expectations(out: Path) -> dict[str, tuple[list[str], list[tuple[object, ...]]]]:
    """``{table: (columns, sorted rows)}`` from ``OUT/expected/*.json``."""
    found = {}
    for path in sorted((out / "expected").glob("*.json")):
        data = json.loads(path.read_text())
        columns, rows = (data["columns"], data["rows"]) if isinstance(data, dict) else (DEFAULT_COLUMNS, data)
        found[path.stem] = (columns, sorted(tuple(r) for r in rows))
    return found


def _java(out: Path) -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    from oracle import CATALOG_NAME, IcebergJava

    return IcebergJava(out / "home", catalog_name=CATALOG_NAME)


def prepare(out: Path) -> int:
    """Java-written tables for the Spark 4 suite to read (see the module docstring)."""
    java = _java(out)
    try:
        for name, version in (("java.dv", 3), ("java.pos", 2)):
            java.create_table(
                name,
                "id BIGINT NOT NULL, part STRING NOT NULL, qty BIGINT, note STRING",
                partitioned_by="part",
                format_version=version,
            )
            q = java.qualified(name)
            # scenarios.initial_rows(), in two commits (two files a partition)
            for lo, hi in ((0, 100), (100, 200)):
                java.sql(
                    f"INSERT INTO {q} SELECT id, concat('p', id % 3), id * 10,"
                    f" CASE WHEN id % 4 = 0 THEN NULL ELSE concat('n', id) END FROM range({lo}, {hi})"
                )
            java.sql(f"DELETE FROM {q} WHERE id % 5 = 0")
            print(f"spark4_check: prepared {name} (format v{version}) in {out / 'home'}")
    finally:
        java.stop()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("prepare", "check"):
        print(__doc__.strip().splitlines()[-1])
        return 2
    out = Path(argv[2]).resolve()
    if argv[1] == "prepare":
        return prepare(out)
    return check(out)


def check(out: Path) -> int:
    """Iceberg Java reads exactly the expected rows of every table the suite saved."""
    expected = expectations(out)
    if not expected:
        print(f"spark4_check: no expected rows under {out / 'expected'}: nothing was checked")
        return 1
    start = time.monotonic()
    java = _java(out)
    from oracle import sorted_rows

    failed = 0
    try:
        for name, (columns, want) in expected.items():
            # a column may be an expression (``CAST(ts AS STRING)``: text both Sparks print alike)
            got = sorted_rows(java.dataframe(name).selectExpr(*columns).collect())
            if got == sorted_rows(want):
                print(f"spark4_check: {name}: Iceberg Java reads the {len(want)} expected rows")
            else:
                failed += 1
                extra = sorted(set(got) - set(want))[:5]
                missing = sorted(set(want) - set(got))[:5]
                print(f"spark4_check: {name}: MISMATCH {len(got)} rows, expected {len(want)}; "
                      f"extra {extra}, missing {missing}")  # fmt: skip
    finally:
        java.stop()
    seconds = time.monotonic() - start
    print(f"spark4_check: {len(expected) - failed} passed, {failed} failed ({seconds:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
