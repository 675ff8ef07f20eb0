"""Smoke test of the Spark engine on PySpark 4.x (``make test-spark4``, its own venv).

No Iceberg Java here (the oracle's runtime jar is for Spark 3.5): pyiceberg writes the table,
so this checks the Spark engine's plumbing on PySpark 4 against the local engine:
planning, task shipping, mapInArrow and Arrow types.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pyarrow as pa
import pyspark
import pytest

import icemor
from icemor.engines.spark import collect_arrow, session

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def spark():  # type: ignore[no-untyped-def]
    s = session(master="local[2]", conf={"spark.ui.enabled": "false"})
    yield s
    s.stop()


def test_pyspark_is_4() -> None:
    assert pyspark.__version__.startswith("4."), pyspark.__version__


def test_scan_on_spark4_matches_local(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path))
    catalog = icemor.load_catalog()
    catalog.create_namespace("s4")
    rows = pa.table(
        {
            "id": pa.array(range(1000), pa.int64()),
            "cat": [f"c{i % 7}" for i in range(1000)],
            "ts": pa.array(range(1000), pa.timestamp("us", tz="UTC")),
        }
    )
    t = catalog.create_table("s4.t", schema=rows.schema)
    t.append(rows)
    t.append(rows)
    table = icemor.load_table("s4.t", catalog=catalog)
    local = table.scan(row_filter="id >= 500", metadata_columns=True).to_arrow()
    df = table.to_spark(spark, row_filter="id >= 500", metadata_columns=True)
    remote = collect_arrow(df)
    key = ["_file", "_pos"]
    assert remote.num_rows == local.num_rows == 1000
    assert (
        remote.sort_by([(k, "ascending") for k in key]).to_pylist()
        == local.cast(remote.schema).sort_by([(k, "ascending") for k in key]).to_pylist()
    )
    print(sys.version, pyspark.__version__)
