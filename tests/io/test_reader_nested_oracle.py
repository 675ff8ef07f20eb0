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


# NULL lists and maps of structs (issue 38, defect 6): pyiceberg's projection rebuilt them without
# their validity, so a NULL read back (and was written) as [] / {}. Every variant, at the top
# level and inside a struct and a list, beside empty ones and ones holding NULL elements.
NULL_COLUMNS = (
    "id BIGINT, n BIGINT, tags ARRAY<STRUCT<x: BIGINT, y: STRING>>, "
    "info STRUCT<inner: ARRAY<STRUCT<x: BIGINT>>, k: BIGINT>, attrs MAP<STRING, STRUCT<x: BIGINT>>, "
    "deep ARRAY<ARRAY<STRUCT<x: BIGINT>>>, nums ARRAY<BIGINT>"
)
_X = pa.struct([pa.field("x", pa.int64())])
NULL_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("n", pa.int64()),
        pa.field("tags", pa.list_(pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.string())]))),
        pa.field("info", pa.struct([pa.field("inner", pa.list_(_X)), pa.field("k", pa.int64())])),
        pa.field("attrs", pa.map_(pa.string(), _X)),
        pa.field("deep", pa.list_(pa.list_(_X))),
        pa.field("nums", pa.list_(pa.int64())),
    ]
)


def _null_rows(count: int = 40) -> list[dict[str, Any]]:
    """Four patterns in turn: NULLs, empty collections, NULL elements, values."""
    rows: list[dict[str, Any]] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            row = {"tags": None, "info": {"inner": None, "k": i}, "attrs": None, "deep": None, "nums": None}
        elif kind == 1:
            row = {"tags": [], "info": {"inner": [], "k": i}, "attrs": [], "deep": [], "nums": []}
        elif kind == 2:
            row = {
                "tags": [None],
                "info": None,
                "attrs": [("k", None)],
                "deep": [None, [None]],
                "nums": [None],
            }
        else:
            row = {
                "tags": [{"x": i, "y": f"y{i}"}, None],
                "info": {"inner": [{"x": i}, None], "k": i},
                "attrs": [("k", {"x": i}), ("n", None)],
                "deep": [[{"x": i}], None, []],
                "nums": [i, None],
            }
        rows.append({"id": i, "n": i * 10, **row})
    return rows


def _by_id(table: pa.Table, columns: list[str] | None = None) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    rows = sorted(rows, key=lambda r: r["id"]) if rows and "id" in rows[0] else rows
    return [{c: r[c] for c in columns} for r in rows] if columns else rows


def _spark_rows(oracle: IcebergJava, table: Any, strategy: str) -> list[dict[str, Any]]:
    from icemor.engines.spark import collect_arrow

    return _by_id(collect_arrow(table.scan().to_spark(oracle.spark, strategy=strategy)))


def test_null_lists_and_maps_of_structs_written_by_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    from icemor.exceptions import InvalidArgumentError

    name = f"{ns}.nulls"
    oracle.create_table(name, NULL_COLUMNS)
    # Spark takes a map as a dict (Arrow's Python form is a list of pairs)
    spark_rows = [{**r, "attrs": None if r["attrs"] is None else dict(r["attrs"])} for r in _null_rows()]
    oracle.spark.createDataFrame(spark_rows, NULL_COLUMNS).writeTo(oracle.qualified(name)).append()
    oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id % 10 = 7")  # position deletes
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(name, pa.table({"id": pa.array([2, 13], pa.int64())}), [ids["id"]])

    expected = _by_id(oracle.arrow(name))
    # Java writes and reads the NULLs (the file holds them): what icemor must return
    assert [r["tags"] for r in expected if r["id"] % 4 == 0] == [None] * 10
    assert [r["attrs"] for r in expected if r["id"] % 4 == 0] == [None] * 10
    assert expected[1]["tags"] == [] and expected[1]["attrs"] == []
    table = icemor.load_table(name, catalog=catalog)
    assert _by_id(table.scan().to_arrow()) == expected
    for columns in (["id", "tags"], ["info", "id"], ["id", "attrs"], ["deep", "id"], ["id", "nums"]):
        got = table.scan(selected_fields=tuple(columns)).to_arrow()
        assert _by_id(got, columns) == _by_id(oracle.arrow(name).select(columns), columns), columns
    got = _by_id(table.scan(row_filter="id >= 20").to_arrow())
    assert got == [r for r in expected if r["id"] >= 20]
    # the Spark engine: its Python workers run the same reader; its native reader declines nesting
    for strategy in ("python", "auto"):
        assert _spark_rows(oracle, table, strategy) == expected, strategy
    with pytest.raises(InvalidArgumentError, match="nested columns"):
        table.scan().to_spark(oracle.spark, strategy="native")


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_null_lists_and_maps_of_structs_written_by_icemor(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, engine: str
) -> None:
    name = f"{ns}.nulls"
    rows = _null_rows()
    icemor.create_table(name, pa.Table.from_pylist(rows, schema=NULL_SCHEMA), catalog=catalog)
    # Java reads what icemor wrote: the NULLs are in the file, not []
    assert _by_id(oracle.arrow(name)) == rows
    table = icemor.load_table(name, catalog=catalog)
    assert _by_id(table.scan().to_arrow()) == rows
    # rows rewritten by an UPDATE (new data files, on the engine's own write path) keep them too
    spark = oracle.spark if engine == "spark" else None
    m = table.update({"n": "n + 1"}, where="id % 4 IN (0, 2) OR id = 1", spark=spark)
    assert m.rows_updated == 21
    expected = [{**r, "n": r["n"] + 1} if r["id"] % 4 in (0, 2) or r["id"] == 1 else r for r in rows]
    assert _by_id(oracle.arrow(name)) == expected
    assert _by_id(icemor.load_table(name, catalog=catalog).scan().to_arrow()) == expected
    assert _spark_rows(oracle, icemor.load_table(name, catalog=catalog), "auto") == expected
