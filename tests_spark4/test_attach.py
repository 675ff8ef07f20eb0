"""``icemor.spark.attach`` on PySpark 4.x (classic): Spark SQL and ``spark.table`` on icemor tables.

Each statement's effect is checked against a Python model, read back both through the attached
session and by icemor's local reader; the final rows are saved for ``tools/spark4_check.py
check``, where Iceberg Java (on Spark 3.5) reads them. The Spark 3.5 side is judged statement by
statement against Java in ``tests/engines/test_spark_attach*.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

import icemor
import icemor.spark
from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyspark.sql import SparkSession

NS = "attach4"


@pytest.fixture
def attached(spark: SparkSession) -> Iterator[SparkSession]:
    icemor.spark.attach(spark)
    try:
        yield spark
    finally:
        assert icemor.spark.detach(spark)


def _rows(spark: SparkSession, text: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in spark.sql(text).collect())


def _local(name: str) -> Counter[tuple[Any, ...]]:
    table = icemor.load_table(name)
    return Counter(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())


def test_sql_statements_on_pyspark4(attached: SparkSession, out_dir: Path) -> None:
    spark = attached
    name = f"{NS}.t"
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, part STRING, qty DOUBLE, note STRING) USING iceberg "
        "PARTITIONED BY (part) TBLPROPERTIES ('format-version' = '3')"
    )
    model: dict[int, tuple[Any, ...]] = {}
    spark.sql(f"INSERT INTO {name} SELECT id, IF(id % 2 = 0, 'a', 'b'), id * 1.5, 'n' FROM range(0, 40)")
    model.update({i: (i, "a" if i % 2 == 0 else "b", i * 1.5, "n") for i in range(40)})
    spark.sql(f"DELETE FROM {name} WHERE id % 5 = 0")
    model = {i: r for i, r in model.items() if i % 5 != 0}
    spark.sql(f"UPDATE {name} SET qty = qty + 1 WHERE id < 10")
    model.update({i: (i, r[1], r[2] + 1, r[3]) for i, r in model.items() if i < 10})
    spark.createDataFrame(
        [(7, "b", 0.5, "m"), (100, "a", 2.0, "m")], "id long, part string, qty double, note string"
    ).createOrReplaceTempView("att4_src")
    spark.sql(
        f"MERGE INTO {name} t USING att4_src s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    model.update({7: (7, "b", 0.5, "m"), 100: (100, "a", 2.0, "m")})
    expected = Counter(model.values())
    assert _rows(spark, f"SELECT * FROM {name}") == expected
    assert _rows(spark, f"SELECT * FROM icemor.{name}") == expected
    assert Counter(tuple(r) for r in spark.table(name).collect()) == expected
    assert _local(name) == expected
    first = spark.sql(f"SELECT snapshot_id FROM {name}.snapshots ORDER BY committed_at LIMIT 1").first()[0]
    assert _rows(spark, f"SELECT count(*) FROM {name} VERSION AS OF {first}") == Counter({(40,): 1})
    kinds = {r[0] for r in spark.sql(f"SELECT DISTINCT content FROM {name}.files").collect()}
    assert kinds == {0, 1}  # data and deletion vectors
    with pytest.raises(InvalidArgumentError, match="no procedure"):
        spark.sql(f"CALL icemor.system.nothing('{name}')")
    (out_dir / "expected").mkdir(parents=True, exist_ok=True)
    (out_dir / "expected" / f"{name}.json").write_text(
        json.dumps({"columns": ["id", "part", "qty", "note"], "rows": sorted(model.values())})
    )
