"""Tables with list, map and nested struct columns, written and deleted from by Iceberg Java, read by icemor.

pyiceberg's ``prune_columns`` refuses the id of a list or map column itself; a scan of any table
with such a column failed before the reader projected collections by their element ids.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

COLUMNS = "id BIGINT, tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>, info STRUCT<x: BIGINT, nums: ARRAY<INT>>"
ROWS = ", ".join(
    f"({i}, {'NULL' if i % 7 == 0 else f'array({chr(39)}t{i}{chr(39)}, {chr(39)}u{i % 3}{chr(39)})'}, "
    f"{'NULL' if i % 5 == 0 else f'map({chr(39)}k{i % 4}{chr(39)}, {i * 10})'}, "
    f"{'NULL' if i % 6 == 0 else f'named_struct({chr(39)}x{chr(39)}, {i}, {chr(39)}nums{chr(39)}, array({i}, {i + 1}))'})"
    for i in range(40)
)


def _plain(value: Any) -> Any:
    """Spark Rows and Arrow's python values in one shape: structs and maps as dicts."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return {k: _plain(v) for k, v in value}  # an Arrow map: [(key, value), ...]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _java(oracle: IcebergJava, name: str, columns: list[str]) -> list[str]:
    rows = oracle.dataframe(name).select(*columns).collect()
    return sorted(json.dumps([_plain(r[c]) for c in columns], sort_keys=True) for r in rows)


def _icemor(catalog: SqlCatalog, name: str, columns: list[str], **scan: Any) -> list[str]:
    table = icemor.load_table(name, catalog=catalog).scan(selected_fields=tuple(columns), **scan).to_arrow()
    rows = table.select(columns).to_pylist()
    return sorted(json.dumps([_plain(r[c]) for c in columns], sort_keys=True) for r in rows)


@pytest.mark.parametrize("version", [2, 3])
def test_collections_read_with_every_delete_kind(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, version: int
) -> None:
    name = f"{ns}.nested_v{version}"
    oracle.create_table(name, COLUMNS, format_version=version)
    oracle.sql(f"INSERT INTO {name} VALUES {ROWS}")
    # position deletes (v2) or deletion vectors (v3), over rows with NULL and non-NULL collections
    oracle.sql(f"DELETE FROM {name} WHERE id % 3 = 1")
    # and equality deletes on id
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(name, pa.table({"id": pa.array([2, 9, 35], pa.int64())}), [ids["id"]])
    every = ["id", "tags", "attrs", "info"]
    expected = _java(oracle, name, every)
    assert len(expected) == 40 - len([i for i in range(40) if i % 3 == 1 or i in (2, 9, 35)])
    assert _icemor(catalog, name, every) == expected
    for columns in (["tags"], ["attrs", "id"], ["info"], ["id"]):
        assert _icemor(catalog, name, columns) == _java(oracle, name, columns)
    # the Spark engine: its Python workers run the same reader (position deletes in Spark's own)
    for strategy in ("python", "auto"):
        df = icemor.load_table(name, catalog=catalog).scan().to_spark(oracle.spark, strategy=strategy)
        got_spark = sorted(json.dumps([_plain(r[c]) for c in every], sort_keys=True) for r in df.collect())
        assert got_spark == expected, strategy
    # a filter beside collections
    got = _icemor(catalog, name, every, row_filter="id >= 20")
    assert got == sorted(r for r in expected if json.loads(r)[0] >= 20)
