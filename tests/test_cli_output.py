"""``icemor scan --output`` on both engines: required, nested and decimal columns.

The table is written with pyiceberg from a Python model of its rows; a merge-on-read DELETE
adds position deletes. Each engine's file must hold exactly the model's remaining rows, with
the table's own Arrow schema (required columns stay required), as pyarrow reads it back.
"""

from __future__ import annotations

import decimal
import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

import icemor
from icemor.cli import run

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession


def _schema(*, collections: bool) -> Schema:
    fields = [
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=True),
        NestedField(3, "price", DecimalType(18, 4), required=True),
        NestedField(4, "note", StringType(), required=False),
        NestedField(
            5,
            "point",
            StructType(
                NestedField(6, "x", DoubleType(), required=True),
                NestedField(7, "label", StringType(), required=False),
            ),
            required=True,
        ),
        NestedField(13, "ts", TimestamptzType(), required=True),
    ]
    if collections:
        fields += [
            NestedField(8, "tags", ListType(9, StringType(), element_required=True), required=False),
            NestedField(10, "attrs", MapType(11, StringType(), 12, IntegerType(), value_required=False)),
        ]
    return Schema(*fields)


N = 300


def _model(*, collections: bool) -> list[dict[str, Any]]:
    rows = []
    for i in range(N):
        row: dict[str, Any] = {
            "id": i,
            "name": f"n{i}",
            "price": decimal.Decimal(i * 1234567).scaleb(-4),
            "note": None if i % 5 == 0 else f"note {i}",
            "point": {"x": i / 4, "label": None if i % 2 else f"p{i}"},
            "ts": i * 1_000_000,
        }
        if collections:
            row["tags"] = None if i % 7 == 0 else [f"t{j}" for j in range(i % 3)]
            row["attrs"] = [] if i % 4 == 0 else [("a", i), ("b", None)]
        rows.append(row)
    return rows


def _make_table(*, collections: bool) -> str:
    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    t = catalog.create_table("db.req", schema=_schema(collections=collections))
    arrow_schema = t.schema().as_arrow()
    rows = _model(collections=collections)
    # two appends: two data files; the DELETE below leaves position deletes in both
    for part in (rows[: N // 2], rows[N // 2 :]):
        t.append(pa.Table.from_pylist(part, schema=arrow_schema))
    m = icemor.load_table("db.req").delete("id % 3 = 0")
    assert m.deleted_rows == N // 3
    return "db.req"


def _expected(*, collections: bool) -> list[dict[str, Any]]:
    return [r for r in _model(collections=collections) if r["id"] % 3 != 0]


def _normalised(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows by id; maps as sorted item lists, timestamps as microseconds (pyarrow reads them zoned)."""
    out = []
    for r in sorted(rows, key=lambda r: r["id"]):
        r = dict(r)
        if r.get("attrs") is not None:
            r["attrs"] = sorted(r["attrs"])
        if not isinstance(r["ts"], int):
            r["ts"] = round(r["ts"].timestamp() * 1_000_000)
        out.append(r)
    return out


@pytest.fixture
def engine_args(engine: str, request: pytest.FixtureRequest) -> list[str]:
    """``--engine``; for Spark, the session's Spark (the oracle's JVM; the CLI takes the active
    session). Tests list it before ``home``: starting the session sets the session's
    ICEMOR_HOME, which ``home`` must then override (and restore after the test)."""
    if engine == "spark":
        spark: SparkSession = request.getfixturevalue("spark")
        assert spark is not None
    return ["--engine", engine]


@pytest.mark.parametrize("collections", [False, True], ids=["struct", "list_map"])
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_scan_output_parquet_keeps_required_nested_and_decimal_columns(
    engine: str, engine_args: list[str], home: Path, collections: bool, tmp_path: Path
) -> None:
    table = _make_table(collections=collections)
    out = tmp_path / "out.parquet"
    assert run([*engine_args, "scan", table, "--output", str(out)]) == 0
    written = pq.read_table(out)
    want_schema = icemor.load_table(table).scan().arrow_schema
    assert written.schema.equals(want_schema, check_metadata=False), written.schema
    assert not written.schema.field("id").nullable and not written.schema.field("price").nullable
    assert _normalised(written.to_pylist()) == _normalised(_expected(collections=collections))


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_scan_output_jsonl_with_a_filter_and_selected_columns(
    engine: str, engine_args: list[str], home: Path, tmp_path: Path
) -> None:
    table = _make_table(collections=False)
    out = tmp_path / "out.jsonl"
    args = [*engine_args, "scan", table, "--columns", "id,price,point"]
    assert run([*args, "--where", "id < 50", "--output", str(out)]) == 0
    got = sorted(map(json.loads, out.read_text().splitlines()), key=lambda r: r["id"])
    want = [
        {"id": r["id"], "price": str(r["price"]), "point": r["point"]}
        for r in _expected(collections=False)
        if r["id"] < 50
    ]
    assert got == want


def test_spark_batches_are_cast_back_to_the_table_schema() -> None:
    """What Spark returns (every column nullable, uuid as text, its own list child names) is
    cast to the table's Arrow schema; uuids compared with Python's own parsing."""
    import uuid

    from icemor.engines.spark import conform_batch

    ids = [uuid.uuid4() for _ in range(3)]
    spark_side = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "u": pa.array([str(ids[0]), None, str(ids[2]).upper()], pa.string()),
            "tags": pa.array([["a"], [], ["b", "c"]], pa.list_(pa.field("element", pa.string()))),
        }
    )
    target = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("u", pa.uuid()),
            pa.field("tags", pa.list_(pa.field("element", pa.string(), nullable=False))),
        ]
    )
    got = conform_batch(spark_side, target)
    assert got.schema == target
    assert got.column("u").storage.to_pylist() == [ids[0].bytes, None, ids[2].bytes]
    assert got.column("tags").to_pylist() == [["a"], [], ["b", "c"]]
