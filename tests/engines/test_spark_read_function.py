"""``icemor.spark.read`` on PySpark 3.5 (no Python data sources): the function form of
``spark.read.format("icemor")``, with its options, against Iceberg Java reading the same table
with the same options (``spark.read.format("iceberg").option(...)``); the change feed against
Java's changelog view. ``icemor.spark.register`` is one clear error here.

``tests_spark4/test_datasource*.py`` runs the same options through the data source on 4.x.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
import icemor.spark
from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError, UnsupportedFeatureError
from oracle import sorted_rows

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import DataFrame, SparkSession

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted_rows(df.collect())


@pytest.fixture
def history(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> dict[str, Any]:
    """Iceberg Java: two inserts (tag ``t1`` at the first), a merge-on-read DELETE (branch ``b2``
    there), then icemor's CDC batch (equality deletes); every delete kind Java reads."""
    name = f"{ns}.hist"
    oracle.create_table(
        name, "id BIGINT NOT NULL, part STRING, qty BIGINT, note STRING", partitioned_by="part"
    )
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('p', id % 3), id * 10, concat('n', id) FROM range(0, 60)")
    first = oracle.current_snapshot_id(name)
    oracle.sql(f"ALTER TABLE {q} CREATE TAG t1 AS OF VERSION {first}")
    oracle.sql(f"INSERT INTO {q} SELECT id, concat('p', id % 3), id * 10, NULL FROM range(60, 120)")
    second = oracle.current_snapshot_id(name)
    oracle.sql(f"DELETE FROM {q} WHERE id % 5 = 0")
    deleted = oracle.current_snapshot_id(name)
    oracle.sql(f"ALTER TABLE {q} CREATE BRANCH b2 AS OF VERSION {deleted}")
    table = icemor.load_table(name, catalog=catalog)
    changes = pa.table(
        {
            "op": ["U", "D", "I"],
            "id": pa.array([1, 2, 500], pa.int64()),
            "part": ["p1", "p2", "p0"],
            "qty": pa.array([-1, None, 5], pa.int64()),
            "note": ["u", None, "new"],
        }
    )
    table.apply_changes(changes, key=["id"])
    stamp = table.refresh().pyiceberg.snapshot_by_id(second).timestamp_ms  # type: ignore[union-attr]
    return {"name": name, "s1": first, "s2": second, "s3": deleted, "ts": stamp}


def test_options_read_what_java_reads(
    spark: SparkSession, oracle: IcebergJava, history: dict[str, Any]
) -> None:
    """Every option, time travel included, reads the rows Iceberg Java reads with that option."""
    name = history["name"]
    iso = dt.datetime.fromtimestamp(history["ts"] / 1000, dt.UTC).isoformat()
    table = oracle.qualified(name)

    def java(**options: Any) -> DataFrame:  # a reader of its own: PySpark's reader keeps its options
        return oracle.spark.read.format("iceberg").options(**options).load(table)

    base = java()
    cases: list[tuple[dict[str, Any], DataFrame]] = [
        ({}, base),
        ({"snapshot_id": history["s1"]}, java(**{"snapshot-id": history["s1"]})),
        ({"as-of-timestamp": str(history["ts"])}, java(**{"as-of-timestamp": history["ts"]})),
        ({"as_of_timestamp": iso}, java(**{"snapshot-id": history["s2"]})),
        ({"tag": "t1"}, java(tag="t1")),
        ({"branch": "b2"}, java(branch="b2")),
        ({"columns": ["note", "id"]}, base.select("note", "id")),
        (
            {"columns": "qty,id", "filter": "qty > 500 and id % 3 = 1"},
            base.where("qty > 500 and id % 3 = 1").select("qty", "id"),
        ),
        (
            {"metadata_columns": True, "filter": "part = 'p1'"},
            base.where("part = 'p1'").select("*", "_file", "_pos"),
        ),
    ]
    for options, want in cases:
        expected = _rows(want)
        assert expected, options
        assert _rows(icemor.spark.read(spark, name, **options)) == expected, options
    # the python strategy reads the same
    assert _rows(icemor.spark.read(spark, name, strategy="python")) == _rows(base)


def test_change_feed_reads_javas_changelog(
    spark: SparkSession, oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """``read_change_feed`` (with bounds, and a key pairing updates) reads the rows of Java's
    changelog view over a copy-on-write history (where that view answers)."""
    name = f"{ns}.cow"
    oracle.create_table(name, "id BIGINT, v STRING, cat STRING", merge_on_read=False)
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} VALUES (1, 'a', 'x'), (2, 'b', 'x'), (3, 'c', 'y'), (4, 'd', 'y')")
    oracle.sql(f"DELETE FROM {q} WHERE id = 1")
    oracle.sql(f"UPDATE {q} SET v = 'z' WHERE id IN (2, 3)")
    oracle.sql(f"INSERT INTO {q} VALUES (10, 'p', 'y')")
    ids = oracle.snapshot_ids(name)

    def java(options: str) -> Counter[tuple[Any, ...]]:
        view = f"cl_{len(options)}_{abs(hash(options)) % 10**6}"
        oracle.sql(
            f"CALL {oracle.catalog_name}.system.create_changelog_view(table => '{name}', "
            f"changelog_view => '{view}', identifier_columns => array('id'){options})"
        )
        return Counter(tuple(r) for r in oracle.spark.sql(f"SELECT * FROM {view}").collect())

    whole = icemor.spark.read(spark, name, read_change_feed=True, key="id")
    assert Counter(tuple(r) for r in whole.collect()) == java("")
    bounded = icemor.spark.read(
        spark, name, **{"starting-snapshot-id": str(ids[0]), "ending-snapshot-id": str(ids[-2]), "key": "id"}
    )
    assert Counter(tuple(r) for r in bounded.collect()) == java(
        f", options => map('start-snapshot-id', '{ids[0]}', 'end-snapshot-id', '{ids[-2]}')"
    )


def test_bad_options_are_one_line(spark: SparkSession, history: dict[str, Any]) -> None:
    name = history["name"]
    for options, error, text in [
        ({"snapshot_id": history["s1"], "tag": "t1"}, InvalidArgumentError, "at most one of snapshot-id"),
        ({"colums": "id"}, InvalidArgumentError, "unknown option 'colums'"),
        ({"branch": "t1"}, InvalidArgumentError, "'t1' is a tag, not a branch"),
        ({"snapshot-id": "12x"}, InvalidArgumentError, "must be an integer"),
        ({"snapshot_id": 1}, NoSuchSnapshotError, "snapshot 1 does not exist"),
        ({"max-snapshots-per-trigger": "2", "read_change_feed": True}, InvalidArgumentError, "for streams"),
        ({"strategy": "fast"}, InvalidArgumentError, "unknown Spark strategy"),
    ]:
        with pytest.raises(error, match=text) as info:
            icemor.spark.read(spark, name, **options)
        assert "\n" not in str(info.value)


def test_register_needs_python_data_sources(spark: SparkSession) -> None:
    """PySpark 3.5 has no Python data sources: one line naming the functions that work."""
    with pytest.raises(
        UnsupportedFeatureError, match=r"PySpark 4\.2 or later.*icemor\.spark\.read.*cdc_sink"
    ):
        icemor.spark.register(spark)
