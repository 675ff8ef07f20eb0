"""The PySpark 4.x internals icemor borrows (``icemor.engines.spark._compat.spark4``) exist and behave.

The 4.x counterpart of ``tests/_compat/test_pyspark.py`` (3.5): a PySpark 4 release that moves
one fails here, by name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import pyarrow as pa
import pyspark
import pytest

from icemor.engines.spark import _compat as compat

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyspark.sql import SparkSession


def test_the_4x_module_is_chosen() -> None:
    assert pyspark.__version__.startswith("4."), pyspark.__version__
    assert compat.SPARK_RANGE == "4.x"


@pytest.mark.parametrize(("module", "name"), compat.BORROWED)
def test_borrowed_name_exists(module: str, name: str) -> None:
    obj: object = importlib.import_module(module)
    for part in name.split("."):
        assert hasattr(obj, part), f"{module}.{name} moved: update icemor.engines.spark._compat.spark4"
        obj = getattr(obj, part)


def test_arrow_and_spark_schemas_convert_both_ways() -> None:
    from pyspark.sql import types as st

    arrow = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", tz="UTC"))])
    spark_schema = compat.spark_schema_of(arrow)
    assert [(f.name, type(f.dataType)) for f in spark_schema.fields] == [
        ("id", st.LongType),
        ("ts", st.TimestampType),
    ]
    # as on 3.5: a zone-less Arrow timestamp is Spark's TIMESTAMP, not TIMESTAMP_NTZ
    naive = compat.spark_schema_of(pa.schema([pa.field("t", pa.timestamp("us"))]))
    assert type(naive.fields[0].dataType) is st.TimestampType
    back = compat.arrow_schema_of(spark_schema)
    assert back.field("id").type == pa.int64()
    assert back.field("ts").type == pa.timestamp("us", tz="UTC")


def test_jvm_handles_collect_and_row_index_column(spark: SparkSession) -> None:
    # no JVM-built literals on 4.x: Column(Expression), which they need, is gone
    assert compat.jvm_and_gateway(spark) is None
    jvm = spark.sparkContext._jvm
    constructors = jvm.java.lang.Class.forName("org.apache.spark.sql.Column").getConstructors()
    assert not any(
        "catalyst.expressions.Expression" in str(c.getParameterTypes()[0])
        for c in constructors
        if len(c.getParameterTypes()) == 1
    ), "Column(Expression) is back: _compat.spark4.jvm_and_gateway may return the handles again"
    companion = getattr(jvm.org.apache.spark.sql.execution.datasources.parquet, "ParquetFileFormat$")
    assert getattr(companion, "MODULE$").ROW_INDEX_TEMPORARY_COLUMN_NAME() == compat.ROW_INDEX_COLUMN
    batches = compat.collect_arrow_batches(spark.range(3))
    assert pa.Table.from_batches(batches).column("id").to_pylist() == [0, 1, 2]


def test_worker_still_invalidates_import_caches_before_each_task() -> None:
    # spare_zip_rescans exists because of this call; when PySpark drops it, the workaround can go
    import inspect

    source = inspect.getsource(importlib.import_module(compat.WORKER_MODULE))
    assert "importlib.invalidate_caches()" in source, (
        f"{compat.WORKER_MODULE} changed: revisit spare_zip_rescans"
    )


def test_spared_archives_keep_their_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import zipfile
    import zipimport

    archives = {"spark-core_2.12-3.5.9.jar": "icemor_probe_jar", "user.zip": "icemor_probe_user"}
    for name, module in archives.items():
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr(f"{module}.py", "VALUE = 1\n")
        monkeypatch.syspath_prepend(str(tmp_path / name))
        monkeypatch.delitem(sys.modules, module, raising=False)
        importlib.import_module(module)
    try:
        assert compat.spare_zip_rescans() >= 1
        assert compat.spare_zip_rescans() == 0  # idempotent
        read: list[str] = []
        original = zipimport._read_directory  # type: ignore[attr-defined]

        def counting(archive: str) -> object:
            read.append(archive.rsplit("/", 1)[-1])
            return original(archive)

        monkeypatch.setattr(zipimport, "_read_directory", counting)
        importlib.invalidate_caches()
        # the user's archive is still re-read (so this measures what Python does); Spark's is not
        assert "user.zip" in read
        assert "spark-core_2.12-3.5.9.jar" not in read
    finally:
        for name, module in archives.items():
            sys.path_importer_cache.pop(str(tmp_path / name), None)
            sys.modules.pop(module, None)


def test_workers_read_the_traceback_switch() -> None:
    """icemor's errors leave a 4.x worker as one line by the variable its error report reads."""
    import inspect

    import pyspark.util

    assert compat.HIDE_TRACEBACK_ENV == "SPARK_HIDE_TRACEBACK"
    source = inspect.getsource(pyspark.util)
    assert f'os.environ.get("{compat.HIDE_TRACEBACK_ENV}"' in source, (
        "pyspark.util changed: revisit worker_errors"
    )


def test_a_task_finds_its_input_stream(spark: SparkSession) -> None:
    """worker_input_stream finds the socket a mapInArrow task reads from (whole_input's check)."""

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from icemor.engines.spark._compat import worker_input_stream

        found = worker_input_stream(batches) is not None
        rows = sum(b.num_rows for b in batches)
        yield pa.record_batch([pa.array([found]), pa.array([rows])], names=["found", "rows"])

    out = spark.range(0, 1000, numPartitions=2).mapInArrow(probe, "found boolean, rows long").collect()
    assert sum(r["rows"] for r in out) == 1000
    assert all(r["found"] for r in out), "PySpark changed how a task gets its input: revisit whole_input"
