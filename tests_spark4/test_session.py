"""``session()`` on PySpark 4: the driver heap it asks for is the one the started JVM has."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.engines.spark import default_driver_memory

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_session_started_the_driver_with_the_default_heap(spark: SparkSession) -> None:
    assert spark.sparkContext.getConf().get("spark.driver.memory") == default_driver_memory()
    # the JVM really runs with it (-Xmx from spark-submit; the JVM reports a little more or less)
    jvm_max = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    want = int(default_driver_memory()[:-1]) * 2**20
    assert 0.85 * want <= jvm_max <= 1.05 * want, (jvm_max, want)
