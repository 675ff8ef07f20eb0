"""SQL row filters (outside pyiceberg's language) on both engines, judged by Spark SQL over Iceberg Java.

The same condition text runs as Spark SQL against Java's reader; icemor must return the same
rows locally (DuckDB evaluates the condition) and on the Spark engine, after deletes.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

import icemor
from icemor.exceptions import InvalidArgumentError
from oracle import sorted_rows

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

CONDITIONS = [
    "id % 10 = 3",
    "upper(k) = 'K1' AND id < 150",
    "coalesce(note, 'none') = 'none' OR qty * 2 > 140",
    "CASE WHEN id < 100 THEN k = 'k0' ELSE id BETWEEN 250 AND 260 END",
    "length(k) = 2 AND NOT (id IN (1, 2, 3) OR k LIKE '%3')",
]


@pytest.fixture(scope="module")
def table_name(oracle: IcebergJava, catalog: SqlCatalog) -> str:
    name = "sqlfilter.t"
    oracle.create_table(name, "id BIGINT, k STRING, qty DOUBLE, note STRING", partitioned_by="k")
    q = oracle.qualified(name)
    for lo in (0, 150):
        oracle.sql(
            f"INSERT INTO {q} SELECT id, concat('k', id % 4), id * 0.5, "
            f"CASE WHEN id % 3 = 0 THEN NULL ELSE concat('n', id) END FROM range({lo}, {lo + 150})"
        )
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 0")
    return name


@pytest.mark.parametrize("condition", CONDITIONS)
def test_sql_filter_matches_spark_sql_on_both_engines(
    oracle: IcebergJava, catalog: SqlCatalog, table_name: str, condition: str
) -> None:
    expected = Counter(
        sorted_rows(oracle.sql(f"SELECT id, qty FROM {oracle.qualified(table_name)} WHERE {condition}"))
    )
    assert expected, "a condition must select something to mean anything"
    table = icemor.load_table(table_name, catalog=catalog)
    scan = table.scan(row_filter=condition, selected_fields=("id", "qty"))
    local = Counter(sorted_rows(tuple(r.values()) for r in scan.to_arrow().to_pylist()))
    assert local == expected
    assert scan.count() == sum(expected.values())
    assert scan.arrow_schema.names == ["id", "qty"]  # columns read for the condition are dropped
    df = table.to_spark(oracle.spark, row_filter=condition, selected_fields=("id", "qty"))
    assert Counter(sorted_rows(tuple(r) for r in df.collect())) == expected


def test_sql_filter_prunes_with_its_translatable_conjuncts(catalog: SqlCatalog, table_name: str) -> None:
    table = icemor.load_table(table_name, catalog=catalog)
    every = len(table.scan().plan_files())
    pruned = table.scan(row_filter="k = 'k1' AND id % 10 = 3").plan_files()
    assert 0 < len(pruned) < every  # k = 'k1' pruned the other partitions; id % 10 = 3 did not


@pytest.mark.parametrize(
    ("condition", "needle"),
    [("nope % 2 = 1", "unknown column 'nope'"), ("id + 1", "not a boolean"), ("id % = 1", "cannot parse")],
)
def test_bad_sql_filter_is_one_line(
    catalog: SqlCatalog, table_name: str, condition: str, needle: str
) -> None:
    table = icemor.load_table(table_name, catalog=catalog)
    with pytest.raises(InvalidArgumentError, match=needle) as err:
        table.scan(row_filter=condition).count()
    assert "\n" not in str(err.value)
