"""The one switch between a classic session's paths and Spark Connect's (engines/spark/session_kind.py).

The Connect side runs for real in ``tests_spark4/test_connect.py`` (PySpark 4.x ships the Connect
server; this venv's PySpark 3.5 has no Connect client libraries): here, the classic side on the
oracle's session, and which way each choice goes for a session whose class is Connect's.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from icemor.engines.spark import session_kind
from spark_connect_fake import as_connect_session_class

if TYPE_CHECKING:
    import pytest
    from pyspark.sql import SparkSession


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _ConnectSession:
    """What icemor may ask of a Connect client session: no SparkContext, a conf, a session id."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = _Conf(conf)
        self.session_id = "9f1c"

    @property
    def sparkContext(self) -> None:  # as Connect: there is none
        msg = "[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute `sparkContext` is not supported in Spark Connect"
        raise AttributeError(msg)


def test_a_connect_session_takes_the_public_paths_without_touching_a_spark_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_connect_session_class(monkeypatch, _ConnectSession)
    connect = _ConnectSession({"spark.default.parallelism": "7"})
    assert session_kind.is_connect(connect)  # type: ignore[arg-type]
    assert session_kind.parallelism(connect) == 7  # type: ignore[arg-type]
    assert session_kind.jvm_handles(connect) is None  # type: ignore[arg-type]
    assert not session_kind.driver_disk_is_executors(connect)  # type: ignore[arg-type]
    assert session_kind.status_tracker(connect) is None  # type: ignore[arg-type]
    assert session_kind.cache_scope(connect) == ("connect", "9f1c")  # type: ignore[arg-type]


def test_a_classic_session_keeps_its_context(spark: SparkSession) -> None:
    assert not session_kind.is_connect(spark)
    assert session_kind.parallelism(spark) == spark.sparkContext.defaultParallelism
    assert session_kind.cache_scope(spark) == ("classic", spark.sparkContext.applicationId)
    assert session_kind.driver_disk_is_executors(spark) == spark.sparkContext.master.startswith("local")
    assert session_kind.status_tracker(spark) is not None


def test_map_tasks_gives_each_blob_its_partition_in_order(spark: SparkSession) -> None:
    import operator
    import pickle

    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StructField, StructType

    from icemor.engines.spark.worker import io_spec, item_blob, run_items

    spec = io_spec(PyArrowFileIO(), "file:///tmp")
    # each item runs on the executors as fn(io, item): here ``io is not item``, True
    blobs = [item_blob(spec, operator.is_not, i) for i in range(5)]
    schema = StructType([StructField("result", BinaryType())])
    for partitions, want in ((None, [1, 1, 1, 1, 1]), (2, [2, 3])):
        df = session_kind.map_tasks(spark, blobs, run_items, schema, partitions=partitions)
        rows = df.select(F.spark_partition_id().alias("p"), F.col("result")).collect()
        assert all(pickle.loads(r["result"]) is True for r in rows)
        per_partition: dict[int, int] = {}
        for r in rows:
            per_partition[r["p"]] = per_partition.get(r["p"], 0) + 1
        assert [per_partition[p] for p in sorted(per_partition)] == want


def test_the_workers_that_turn_blobs_into_rows_spare_the_archive_rescans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from icemor.engines.spark import _compat

    calls: list[int] = []
    monkeypatch.setattr(_compat, "spare_zip_rescans", lambda: calls.append(1) or 0)
    rows = [(b"a",), (b"b",)]
    gc.unfreeze()
    try:
        assert list(session_kind.spare_then(iter(rows))) == rows
        assert calls == [1]
        assert gc.get_freeze_count() > 0  # PySpark's collection after the task skips them
    finally:
        gc.unfreeze()


def test_analyzed_leaves_a_classic_dataframe_as_it_is(spark: SparkSession) -> None:
    df = spark.range(3)
    assert session_kind.analyzed(df) is df


def test_a_session_is_told_by_its_class_not_by_its_module_name() -> None:
    # the module name alone once sent such a session down the Connect paths
    look_alike = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    assert not session_kind.is_connect(look_alike)  # type: ignore[arg-type]
