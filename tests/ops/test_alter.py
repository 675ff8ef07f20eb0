"""Schema evolution through ``Table.update_schema()``: Iceberg Java reads the evolved table.

Each step's effect is checked on what Java sees (its schema and rows), and the rows against a
pandas model of the data written before and after the change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, FloatType, IntegerType, NestedField, StringType

import icemor
from icemor.exceptions import InvalidArgumentError
from icemor.ops.alter import parse_type

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

SCHEMA = Schema(
    NestedField(1, "id", IntegerType()),
    NestedField(2, "qty", FloatType()),
    NestedField(3, "k", StringType()),
)


@pytest.mark.oracle
def test_java_reads_the_evolved_table(catalog: SqlCatalog, ns: str, oracle: IcebergJava) -> None:
    name = f"{ns}.t"
    table = icemor.create_table(name, SCHEMA, catalog=catalog)
    before = pd.DataFrame({"id": pd.array([1, 2, 3], "int32"), "qty": pd.array([0.5, None, 2.5], "float32"),
                           "k": ["a", "b", None]})  # fmt: skip
    table.append(before)
    (
        table.update_schema()
        .add_column("note", "string")
        .rename_column("qty", "quantity")
        .widen_column("id", "long")
        .widen_column("qty", "double")  # names are the schema's before the change, as in Java
        .set_identifier_fields("id")  # id is optional: made required first (no NULL in it)
        .commit()
    )
    after = pd.DataFrame({"id": [2**40], "quantity": [1.25], "k": ["z"], "note": ["new"]})
    table.append(after)

    java = oracle.java_table(name).schema()
    assert [(f.name(), str(f.type()), f.isRequired()) for f in java.columns()] == [
        ("id", "long", True),
        ("quantity", "double", False),
        ("k", "string", False),
        ("note", "string", False),
    ]
    assert list(java.identifierFieldNames()) == ["id"]
    expected = [(1, 0.5, "a", None), (2, None, "b", None), (3, 2.5, None, None), (2**40, 1.25, "z", "new")]
    assert oracle.rows(name) == expected
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        dict(zip(["id", "quantity", "k", "note"], r, strict=True)) for r in expected
    ]


def test_require_is_refused_while_a_live_row_is_null(catalog: SqlCatalog, ns: str) -> None:
    table = icemor.create_table(f"{ns}.t", SCHEMA, catalog=catalog)
    table.append(pa.table({"id": pa.array([1, 2], pa.int32()), "k": ["a", None]}))
    with pytest.raises(InvalidArgumentError, match=r"'k'.*1 live row"):
        table.update_schema().require_column("k").commit()
    assert not table.refresh().schema().find_field("k").required
    table.delete("k is null")  # once no live row is NULL, it is allowed
    table.update_schema().require_column("k").commit()
    assert table.refresh().schema().find_field("k").required


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda c: c.widen_column("qty", "int"), "float -> int"),
        (lambda c: c.rename_column("nope", "x"), "nope"),
        (lambda c: c.add_column("k", "string"), "k"),
        (lambda c: c.add_column("x", "varchar2"), "unknown type"),
        (lambda c: c.set_identifier_fields("qty"), "qty"),
    ],
)
def test_refused_changes_are_one_line_and_commit_nothing(
    catalog: SqlCatalog, ns: str, build: object, needle: str
) -> None:
    table = icemor.create_table(f"{ns}.t", SCHEMA, catalog=catalog)
    location = table.pyiceberg.metadata_location
    with pytest.raises(InvalidArgumentError) as e:
        build(table.update_schema()).commit()  # type: ignore[operator]
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert table.refresh().pyiceberg.metadata_location == location


def test_parse_type_takes_iceberg_and_spark_names() -> None:
    assert isinstance(parse_type("double"), DoubleType)
    assert str(parse_type("BIGINT")) == "long"
    assert str(parse_type("decimal(10, 2)")) == "decimal(10, 2)"
    with pytest.raises(InvalidArgumentError, match="unknown type"):
        parse_type("struct<a:int>")
