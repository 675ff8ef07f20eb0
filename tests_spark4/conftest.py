"""The PySpark 4.x suite (``make test-spark4``, venv ``.venv-spark4``): one Spark session, one icemor home.

No Iceberg Java runtime for Spark 4 can be installed here (the oracle's jar is Iceberg's Spark 3.5
runtime), so each test checks against a Python model and icemor's local reader, and the write
tests leave their final tables in ``OUT/home`` with the model's rows in ``OUT/expected``; the
Makefile then runs ``tools/spark4_check.py OUT`` with the main venv, where Iceberg Java on Spark
3.5 reads the same catalog. ``OUT``: ``$ICEMOR_SPARK4_OUT``, default ``.cache/spark4``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def out_dir() -> Iterator[Path]:
    """``OUT``, with ``OUT/home`` as this session's ICEMOR_HOME (tables of an earlier run are
    replaced by the tests that make them; ``OUT/expected`` is written afresh)."""
    out = Path(os.environ.get("ICEMOR_SPARK4_OUT", ROOT / ".cache" / "spark4")).resolve()
    shutil.rmtree(out / "expected", ignore_errors=True)
    (out / "home").mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("ICEMOR_HOME", str(out / "home"))
        yield out


@pytest.fixture(scope="session")
def spark(out_dir: Path) -> Iterator[SparkSession]:
    from icemor.engines.spark import session

    s = session(master="local[2]", conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    yield s
    s.stop()
