"""Spark 4 reads with every delete kind: position deletes (v2), deletion vectors (v3), equality deletes.

Tables are written by pyiceberg, deletes by icemor's local engine; the Spark engine on PySpark
4 (both strategies, collected whole and streamed a partition at a time) must read exactly the
Python model's rows, as the local reader does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import scenarios

import icemor
from icemor.engines.spark import collect_arrow, iter_arrow
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession


def _rows(table: object) -> list[scenarios.Row]:
    return sorted(tuple(r[c] for c in scenarios.COLUMNS) for r in table.to_pylist())  # type: ignore[attr-defined,misc]


def _check_spark_reads(spark: SparkSession, name: str, model: dict[int, scenarios.Row]) -> None:
    want = sorted(model.values())
    assert scenarios.local_rows(name) == want
    table = icemor.load_table(name)
    for strategy in ("auto", "python"):
        df = table.to_spark(spark, strategy=strategy, selected_fields=scenarios.COLUMNS)
        assert _rows(collect_arrow(df)) == want, strategy
        import pyarrow as pa

        streamed = pa.Table.from_batches(list(iter_arrow(df, schema=table.scan().arrow_schema)))
        assert _rows(streamed.select(scenarios.COLUMNS)) == want, strategy
    # a filter the planner prunes with, and one it leaves to Spark SQL (residual)
    filtered = table.to_spark(spark, row_filter="id >= 100 and id % 3 = 1")
    assert _rows(collect_arrow(filtered)) == [r for r in want if r[0] >= 100 and r[0] % 3 == 1]


def _delete_kinds(name: str) -> set[str]:
    table = icemor.load_table(name)
    kinds = set()
    for planned in table.scan().plan_files():
        for d in planned.delete_files:
            if d.content == FileContent.EQUALITY_DELETES:
                kinds.add("equality")
            elif str(d.file_format).upper().endswith("PUFFIN"):
                kinds.add("dv")
            else:
                kinds.add("position")
    return kinds


@pytest.mark.parametrize(("name", "kind"), [("java.pos", "position"), ("java.dv", "dv")])
def test_position_deletes_and_deletion_vectors(
    spark: SparkSession, out_dir: Path, name: str, kind: str
) -> None:
    """Tables Iceberg Java wrote (v2 position deletes, v3 deletion vectors; pyiceberg cannot
    write v3): ``tools/spark4_check.py prepare``, run by ``make test-spark4`` first."""
    catalog = icemor.load_catalog()
    if not catalog.table_exists(name):
        pytest.fail(f"{name} is missing: run `make test-spark4` (it prepares it with Iceberg Java)")
    assert _delete_kinds(name) == {kind}
    model = {k: r for k, r in scenarios.initial_rows().items() if k % 5 != 0}
    _check_spark_reads(spark, name, model)
    scenarios.save_expected(out_dir, name, model)


def test_equality_deletes(spark: SparkSession, out_dir: Path) -> None:
    name = "reads.equality"
    table = scenarios.create_table(name, partitioned=False)
    changes = [("D", i, "p0", None, None) for i in range(0, 200, 4)] + [("U", 1, "p1", 11, "u")]
    import pyarrow as pa

    arrow = pa.Table.from_pylist(
        [dict(zip(("op", *scenarios.COLUMNS), c, strict=True)) for c in changes],
        schema=pa.schema([pa.field("op", pa.string()), *scenarios.arrow_schema()]),
    )
    table.apply_changes(arrow, key=["id"], deletes="equality")
    assert "equality" in _delete_kinds(name)
    model = {k: r for k, r in scenarios.initial_rows().items() if k % 4 != 0}
    model[1] = (1, "p1", 11, "u")
    _check_spark_reads(spark, name, model)
    scenarios.save_expected(out_dir, name, model)
