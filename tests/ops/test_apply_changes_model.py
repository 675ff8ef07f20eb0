"""Model test of apply_changes: random change streams over several batches against a dict.

A stream is what a CDC source emits: an insert only for a key that does not exist at that
point, updates (upserts) and deletes of any key (a missing key is harmless), update_before
rows (ignored), NULLs in the non-key columns, and within one batch insert-then-delete,
repeated updates and delete-then-insert of one key. After every batch icemor's read of the
table equals the model, on the local engine and with the batch as a Spark DataFrame, in both
delete modes: equality deletes, and positions found at write time (position deletes on v2,
deletion vectors on v3).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

import icemor

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    NestedField(3, "cat", StringType(), required=False),
)
SPECS = {
    "unpartitioned": PartitionSpec(),
    "by key": PartitionSpec(PartitionField(1, 1000, BucketTransform(3), "id_bucket")),
    "by another column": PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "cat")),
}
_tables = itertools.count()

Row = tuple[str, int, str | None, str | None]
value = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))


@st.composite
def streams(draw: st.DrawFn, *, max_batches: int, max_rows: int) -> list[list[Row]]:
    """Batches of (op, id, v, cat) rows, each consistent with the state the stream has reached."""
    live: set[int] = set()
    batches = []
    for _ in range(draw(st.integers(1, max_batches))):
        batch: list[Row] = []
        for _ in range(draw(st.integers(0, max_rows))):
            key = draw(st.integers(0, 6))
            kinds = ["U", "D", "-U"] + (["U"] if key in live else ["I", "I"])
            op = draw(st.sampled_from(kinds))
            batch.append((op, key, draw(value), draw(value)))
            if op in ("I", "U"):
                live.add(key)
            elif op == "D":
                live.discard(key)
        batches.append(batch)
    return batches


def apply_to_model(model: dict[int, tuple[str | None, str | None]], batch: list[Row]) -> None:
    for op, key, v, cat in batch:
        if op in ("I", "U"):
            model[key] = (v, cat)
        elif op == "D":
            model.pop(key, None)


def as_arrow(batch: list[Row]) -> pa.Table:
    return pa.table(
        {
            "op": pa.array([r[0] for r in batch], pa.string()),
            "id": pa.array([r[1] for r in batch], pa.int64()),
            "v": pa.array([r[2] for r in batch], pa.string()),
            "cat": pa.array([r[3] for r in batch], pa.string()),
        }
    )


def read(table: icemor.table.Table) -> dict[int, tuple[str | None, str | None]]:
    rows = table.scan().to_arrow().to_pylist()
    out = {r["id"]: (r["v"], r["cat"]) for r in rows}
    assert len(out) == len(rows), f"a key is live twice: {sorted(r['id'] for r in rows)}"
    return out


# (delete mode, format version)
MODES = {"equality": ("equality", 2), "position v2": ("position", 2), "position v3 (DVs)": ("position", 3)}


def run_stream(
    catalog: SqlCatalog, ns: str, spec: str, stream: list[list[Row]], apply: Any, *, version: int = 2
) -> None:
    name = f"{ns}.t{next(_tables)}"
    catalog.create_table(name, schema=SCHEMA, partition_spec=SPECS[spec], properties={"format-version": "2"})
    table = icemor.load_table(name, catalog=catalog)
    if version == 3:
        table.upgrade(format_version=3)
    model: dict[int, tuple[str | None, str | None]] = {}
    for n, batch in enumerate(stream):
        apply(table, batch)
        apply_to_model(model, batch)
        assert read(table) == model, f"after batch {n}: {batch}"
    catalog.drop_table(name)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("spec", list(SPECS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams(max_batches=4, max_rows=14))
def test_local_engine_matches_the_model(
    catalog: SqlCatalog, ns: str, spec: str, mode: str, stream: list[list[Row]]
) -> None:
    deletes, version = MODES[mode]
    run_stream(
        catalog,
        ns,
        spec,
        stream,
        lambda t, b: t.apply_changes(as_arrow(b), key=["id"], deletes=deletes),
        version=version,
    )


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("spec", ["unpartitioned", "by another column"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams(max_batches=3, max_rows=14))
def test_spark_engine_matches_the_model(
    catalog: SqlCatalog, ns: str, spark: SparkSession, spec: str, mode: str, stream: list[list[Row]]
) -> None:
    deletes, version = MODES[mode]

    def apply(table: icemor.table.Table, batch: list[Row]) -> None:
        # created from a local list: the DataFrame's row order is the batch's
        df = spark.createDataFrame(batch, schema="op string, id bigint, v string, cat string")
        # one task (unshuffled) or the default parallelism (repartitioned by key)
        table.apply_changes(df, key=["id"], deletes=deletes, partitions=1 if len(batch) % 2 else None)

    run_stream(catalog, ns, spec, stream, apply, version=version)
