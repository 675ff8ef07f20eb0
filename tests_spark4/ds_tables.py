"""Tables and row helpers of the ``icemor`` data source tests (``test_datasource*.py``), also run
as a script by ``test_datasource_stream.py``'s kill-and-restart test (see :func:`main`).

Rows are compared as sorted lists of tuples, after casting Spark's Arrow batches to the local
scan's Arrow schema (``conform_batch``: Spark marks every column nullable and hands uuids over
as text), so a value differs only if the rows do.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

UTC = dt.UTC


def typed_schema() -> Any:
    """Every primitive kind a pushed filter can name, each column with NULLs."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
        TimestamptzType,
        UUIDType,
    )

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "i", IntegerType()),
        NestedField(3, "d", DoubleType()),
        NestedField(4, "m", DecimalType(10, 2)),
        NestedField(5, "dt", DateType()),
        NestedField(6, "ts", TimestamptzType()),
        NestedField(7, "tsn", TimestampType()),
        NestedField(8, "b", BooleanType()),
        NestedField(9, "s", StringType()),
        NestedField(10, "u", UUIDType()),
        identifier_field_ids=[1],
    )


def typed_rows(ids: range) -> pa.Table:
    """Rows of :func:`typed_schema`: a NULL in every column where ``id % 6 == 5``."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    def value(i: int, v: Any) -> Any:
        return None if i % 6 == 5 else v

    base = dt.datetime(2024, 3, 1, tzinfo=UTC)
    rows = [
        {
            "id": i,
            "i": value(i, i % 17 - 8),
            "d": value(i, float("nan") if i % 23 == 0 else (i % 11) * 0.5 - 2.0),
            "m": value(i, Decimal(i * 37 % 1000) / 10),
            "dt": value(i, dt.date(2024, 1, 1) + dt.timedelta(days=i % 40)),
            "ts": value(i, base + dt.timedelta(hours=i * 5, microseconds=i)),
            "tsn": value(i, (base + dt.timedelta(hours=i * 7)).replace(tzinfo=None)),
            "b": value(i, i % 3 == 0),
            "s": value(i, ["alpha", "beta", "it's", "gam%ma", "del_ta", "a\\b"][i % 6] + str(i % 4)),
            "u": value(i, uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128)).bytes),
        }
        for i in ids
    ]
    return pa.Table.from_pylist(rows, schema=schema_to_pyarrow(typed_schema()))


def create_typed(name: str, *, ids: range = range(120)) -> Any:
    """``name`` with :func:`typed_rows` in two files, then position deletes (``id % 7 = 3``) and
    equality deletes (CDC deletes of ``id % 10 = 4``): every row read passes both kinds."""
    import icemor

    catalog = icemor.load_catalog()
    namespace = name.split(".", maxsplit=1)[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    if catalog.table_exists(name):
        catalog.purge_table(name)
    t = catalog.create_table(name, schema=typed_schema())
    rows = typed_rows(ids)
    half = rows.num_rows // 2
    t.append(rows.slice(0, half))
    t.append(rows.slice(half))
    table = icemor.load_table(name)
    table.delete("id % 7 = 3")
    gone = list(range(4, ids.stop, 10))
    deletes = pa.table({"op": ["D"] * len(gone), "id": pa.array(gone, pa.int64())})
    table.apply_changes(deletes, key=["id"])
    return icemor.load_table(name)


def local(table: Any, **scan: Any) -> pa.Table:
    """The rows icemor's local reader reads (the model every Spark path must match)."""
    return table.scan(**scan).to_arrow()


def arrow_of(df: DataFrame, schema: pa.Schema) -> pa.Table:
    """``df``'s rows as Arrow in ``schema`` (the local scan's: uuids back to 16 bytes)."""
    from icemor.engines.spark import conform_batch

    got = df.toArrow()
    return pa.Table.from_batches([conform_batch(b, schema) for b in got.to_batches()], schema=schema)


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, repr(v)) for v in row)


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Sorted tuples (NaN compared as its text, so NaN equals NaN)."""
    out = [tuple(r.values()) for r in table.to_pylist()]
    return sorted(out, key=_key)


def same(df: DataFrame, want: pa.Table) -> None:
    """``df`` holds exactly ``want``'s rows (as a multiset), columns in order."""
    got = arrow_of(df, want.schema)
    a, b = rows(got), rows(want)
    if [_key(r) for r in a] != [_key(r) for r in b]:
        extra = [r for r in a if r not in b][:3]
        missing = [r for r in b if r not in a][:3]
        msg = f"{len(a)} rows, expected {len(b)}; extra {extra}, missing {missing}"
        raise AssertionError(msg)


def plan_of(df: DataFrame) -> str:
    """The physical plan's text (what ``explain()`` prints)."""
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        df.explain()
    return text.getvalue()


# ---------------------------------------------------------------- kill-and-restart stream script

SOURCE_COLUMNS = ("id", "part", "qty", "note")


def run_replication(spark: SparkSession, source: str, target: str, checkpoint: str) -> None:
    """Stream ``source``'s change feed into ``target`` with the icemor sink (one snapshot per
    micro-batch), until the source's current snapshot is read (``Trigger.AvailableNow``)."""
    query = (
        spark.readStream.format("icemor")
        .option("readChangeFeed", "true")
        .option("starting-snapshot-id", os.environ["DS_START_SNAPSHOT"])
        .option("maxSnapshotsPerTrigger", "1")
        .load(source)
        .select(*SOURCE_COLUMNS, "_change_type")
        .writeStream.format("icemor")
        .option("key", "id")
        .option("op-column", "_change_type")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(target)
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def main(argv: list[str]) -> int:
    """``python ds_tables.py OUT SOURCE TARGET CHECKPOINT``: :func:`run_replication` in a session
    of its own (ICEMOR_HOME = ``OUT/home``); ``python ds_tables.py OUT --code FILE``: the Python
    block in FILE (the README's stream) with ``spark`` defined, then its ``query`` until nothing
    is left. ``ICEMOR_TEST_PAUSE`` (see ``pause_hook``) makes one of its Python processes stop at
    a point for the test to kill the whole process group."""
    out = Path(argv[1])
    os.environ["ICEMOR_HOME"] = str(out / "home")
    import icemor.spark
    from icemor.engines.spark import session

    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
    spark = session(master="local[2]", conf=conf)
    if argv[2] == "--code":
        scope: dict[str, Any] = {"spark": spark}
        exec(compile(Path(argv[3]).read_text(), argv[3], "exec"), scope)
        scope["query"].processAllAvailable()
        scope["query"].stop()
    else:
        icemor.spark.register(spark)
        run_replication(spark, argv[2], argv[3], argv[4])
    print(json.dumps({"done": True}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
