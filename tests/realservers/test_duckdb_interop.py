"""DuckDB 1.5.5 (its iceberg extension from PyPI) as a second reader and writer of the same tables,
through SeaweedFS's REST catalog: DuckDB reads what icemor wrote (position deletes on v2,
deletion vectors on v3, equality deletes, after each compaction), icemor reads what DuckDB wrote
(INSERT, DELETE, UPDATE on v2 and v3), and histories mixing both; every read of either is compared
with the model kept here. Each check lands in the interop matrix the run prints at its end
(``conftest.INTEROP``). Where the two disagree, the Iceberg spec decides (docs/rest-s3.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from servers import DATA_BUCKET, DuckDB, SeaweedFS

import icemor
from conftest import INTEROP

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from icemor.table import Table

NS = "interop"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string()), ("v", pa.int64())])
Model = dict[int, tuple[str, int]]


@pytest.fixture(scope="module")
def rest_catalog(seaweed: SeaweedFS) -> Catalog:
    cat = icemor.load_catalog("sw", **seaweed.catalog_properties())
    cat.create_namespace_if_not_exists(NS)
    return cat


def rows(model: Model) -> pa.Table:
    ids = sorted(model)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "k": [model[i][0] for i in ids], "v": [model[i][1] for i in ids]},
        schema=SCHEMA,
    )


def new_table(catalog: Catalog, name: str, version: int) -> Table:
    full = f"{NS}.{name}"
    if catalog.table_exists(full):
        catalog.purge_table(full)
    props = {}
    if version == 3:  # SeaweedFS refuses .puffin keys in its table buckets
        props["write.data.path"] = f"s3://{DATA_BUCKET}/{NS}/{name}"
    return icemor.create_table(full, SCHEMA, catalog=catalog, format_version=version, properties=props)


def duck_rows(duckdb: DuckDB, name: str) -> Model:
    got = duckdb.sql(f"SELECT id, k, v FROM w.{NS}.{name}")
    model = {int(r[0]): (r[1], int(r[2])) for r in got}
    assert len(model) == len(got), "a row read twice"
    return model


def icemor_rows(table: Table) -> Model:
    got = table.refresh().scan().to_arrow().to_pylist()
    return {r["id"]: (r["k"], r["v"]) for r in got}


def record(direction: str, name: str, what: str, got: Model, model: Model) -> None:
    INTEROP[(direction, name, what)] = (
        "ok" if got == model else f"WRONG ({len(got)} rows, model {len(model)})"
    )
    assert got == model, f"{direction} {name}: {what}"


def delete_kinds(table: Table) -> str:
    kinds = set()
    for p in table.refresh().scan().plan_files():
        for d in p.delete_files:
            kinds.add("equality" if d.equality_ids else ("dv" if d.path.endswith(".puffin") else "position"))
    return "+".join(sorted(kinds)) or "none"


@pytest.mark.parametrize("version", [2, 3])
def test_duckdb_reads_what_icemor_wrote(rest_catalog: Catalog, duckdb: DuckDB, version: int) -> None:
    name = f"to_duck_v{version}"
    table = new_table(rest_catalog, name, version)
    model: Model = {i: (f"k{i % 3}", i) for i in range(300)}
    table.append(rows({i: model[i] for i in range(150)}))
    table.append(rows({i: model[i] for i in range(150, 300)}))
    direction = "icemor -> DuckDB"
    record(direction, name, "append", duck_rows(duckdb, name), model)

    table.delete("id % 10 = 0")
    model = {i: kv for i, kv in model.items() if i % 10}
    record(direction, name, f"DELETE ({delete_kinds(table)})", duck_rows(duckdb, name), model)

    table.update({"v": "v + 1000"}, where="id between 100 and 120")
    model = {i: (k, v + 1000 if 100 <= i <= 120 else v) for i, (k, v) in model.items()}
    record(direction, name, f"UPDATE ({delete_kinds(table)})", duck_rows(duckdb, name), model)

    changes = pa.table(
        {"op": ["D", "D", "U", "I"], "id": pa.array([1, 2, 3, 1000], pa.int64()),
         "k": ["k1", "k2", "kx", "k1"], "v": pa.array([0, 0, -3, 1000], pa.int64())}
    )  # fmt: skip
    table.apply_changes(changes, key=["id"])
    del model[1], model[2]
    model[3] = ("kx", -3)
    model[1000] = ("k1", 1000)
    record(direction, name, f"CDC ({delete_kinds(table)})", duck_rows(duckdb, name), model)

    table.maintenance.rewrite_equality_deletes()
    record(direction, name, f"after eq->pos ({delete_kinds(table)})", duck_rows(duckdb, name), model)
    table.delete("id between 200 and 205")
    model = {i: kv for i, kv in model.items() if not 200 <= i <= 205}
    table.maintenance.rewrite_position_deletes()
    record(direction, name, f"after minor compaction ({delete_kinds(table)})", duck_rows(duckdb, name), model)
    table.maintenance.rewrite_data_files(delete_file_threshold=1)
    record(direction, name, f"after major compaction ({delete_kinds(table)})", duck_rows(duckdb, name), model)


@pytest.mark.parametrize("version", [2, 3])
def test_icemor_reads_what_duckdb_wrote(rest_catalog: Catalog, duckdb: DuckDB, version: int) -> None:
    name = f"from_duck_v{version}"
    table = new_table(rest_catalog, name, version)
    direction = "DuckDB -> icemor"
    duckdb.sql(f"INSERT INTO w.{NS}.{name} SELECT i, 'k' || (i % 3), i FROM range(300) t(i)")
    model: Model = {i: (f"k{i % 3}", i) for i in range(300)}
    record(direction, name, "INSERT", icemor_rows(table), model)

    duckdb.sql(f"DELETE FROM w.{NS}.{name} WHERE id % 10 = 0")
    model = {i: kv for i, kv in model.items() if i % 10}
    record(direction, name, f"DELETE ({delete_kinds(table)})", icemor_rows(table), model)

    duckdb.sql(f"UPDATE w.{NS}.{name} SET v = v + 1000 WHERE id BETWEEN 100 AND 120")
    model = {i: (k, v + 1000 if 100 <= i <= 120 else v) for i, (k, v) in model.items()}
    record(direction, name, f"UPDATE ({delete_kinds(table)})", icemor_rows(table), model)
    assert table.check().errors == ()


@pytest.mark.parametrize("version", [2, 3])
def test_mixed_history(rest_catalog: Catalog, duckdb: DuckDB, version: int) -> None:
    """icemor and DuckDB write the same table in turns; both read every state."""
    name = f"mixed_v{version}"
    table = new_table(rest_catalog, name, version)
    model: Model = {i: (f"k{i % 3}", i) for i in range(200)}
    table.append(rows(model))

    def both(what: str) -> None:
        record("mixed: DuckDB reads", name, what, duck_rows(duckdb, name), model)
        record("mixed: icemor reads", name, what, icemor_rows(table), model)

    duckdb.sql(f"DELETE FROM w.{NS}.{name} WHERE id < 20")
    model = {i: kv for i, kv in model.items() if i >= 20}
    both("DuckDB DELETE")
    table.delete("id between 20 and 39")  # the same data file: folds DuckDB's deletes in
    model = {i: kv for i, kv in model.items() if not 20 <= i <= 39}
    both(f"icemor DELETE on it ({delete_kinds(table)})")
    duckdb.sql(f"UPDATE w.{NS}.{name} SET k = 'dd' WHERE id BETWEEN 40 AND 49")
    model = {i: ("dd", v) if 40 <= i <= 49 else (k, v) for i, (k, v) in model.items()}
    both("DuckDB UPDATE")
    table.update({"v": "-v"}, where="k = 'dd' or id = 150")
    model = {i: (k, -v) if k == "dd" or i == 150 else (k, v) for i, (k, v) in model.items()}
    both(f"icemor UPDATE ({delete_kinds(table)})")
    table.apply_changes(
        pa.table({"op": ["D", "I"], "id": pa.array([41, 5000], pa.int64()), "k": ["dd", "new"],
                  "v": pa.array([0, 5000], pa.int64())}),
        key=["id"],
    )  # fmt: skip
    del model[41]
    model[5000] = ("new", 5000)
    both(f"icemor CDC ({delete_kinds(table)})")
    duckdb.sql(f"DELETE FROM w.{NS}.{name} WHERE id = 5000 OR id = 42")
    del model[5000], model[42]
    both("DuckDB DELETE after CDC")
    table.maintenance.rewrite_data_files(delete_file_threshold=1)
    both(f"icemor major compaction ({delete_kinds(table)})")
    assert table.check().errors == ()
