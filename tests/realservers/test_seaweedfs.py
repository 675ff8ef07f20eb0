"""Every operation on v2 and v3 tables, on both engines, through SeaweedFS's Iceberg REST catalog
and S3 gateway (``weed mini`` on 127.0.0.1, OAuth2 client credentials), checked after every step
against a model kept here: the rows read back, and the buckets listed with boto3 hold exactly the
files the table's metadata references.

The matrix (every operation at least once per engine and format version, within the tier's time):
both engines run v2 and v3 through the API, the Spark engine with ``spark=`` on every write and
maintenance action (the CLI is exercised against the same server in ``test_rest_outcomes.py``;
a CLI command with ``--engine spark`` would start a JVM of its own each time). v3 tables set ``write.data.path`` to
the plain bucket: SeaweedFS refuses ``.puffin`` objects in its table buckets
(``test_v3_in_the_table_bucket_names_the_refused_puffin_and_the_cause``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servers import DATA_BUCKET, SeaweedFS

import icemor
from s3 import split

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from icemor.table import Table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string()), ("v", pa.int64())])
Model = dict[int, tuple[str, int]]  # id -> (k, v)
NS = "tier"


def rows(model: Model) -> pa.Table:
    ids = sorted(model)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "k": [model[i][0] for i in ids], "v": [model[i][1] for i in ids]},
        schema=SCHEMA,
    )


def batch(ids: range, k: str | None = None, v: int = 0) -> Model:
    return {i: (k or f"k{i % 3}", i + v) for i in ids}


@pytest.fixture(scope="module")
def rest_catalog(seaweed: SeaweedFS) -> Catalog:
    cat = icemor.load_catalog("sw", **seaweed.catalog_properties())
    cat.create_namespace_if_not_exists(NS)
    return cat


def read(table: Table) -> Model:
    got = table.refresh().scan().to_arrow().to_pylist()
    model = {r["id"]: (r["k"], r["v"]) for r in got}
    assert len(model) == len(got), "a row read twice"
    return model


def external(table: Table) -> str:
    return f"s3://{DATA_BUCKET}/external/{table.name.replace('.', '-')}"


def listed(seaweed: SeaweedFS, table: Table) -> set[str]:
    """Every object under the table's location and its data path (``bucket/key``)."""
    metadata = table.refresh().metadata
    roots = {
        metadata.location,
        metadata.properties.get("write.data.path", metadata.location),
        external(table),  # add-files' sources
    }
    out: set[str] = set()
    for root in roots:
        bucket, prefix = split(root)
        out |= {f"{bucket}/{k}" for k in seaweed.keys(bucket, prefix.rstrip("/") + "/")}
    return out


def referenced(table: Table, *, live: bool = False) -> set[str]:
    """``bucket/key`` of every file the table's metadata references, read with pyiceberg alone
    (metadata JSON, manifest lists, manifests, data and delete files; ``live``: not those of
    DELETED entries, which expiry may have removed)."""
    metadata, io = table.refresh().metadata, table.pyiceberg.io
    uris = {table.pyiceberg.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        uris.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            uris.add(manifest.manifest_path)
            uris.update(
                e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=live)
            )
    return {"/".join(split(u)) for u in uris}


def check(seaweed: SeaweedFS, table: Table, model: Model, step: str) -> None:
    assert read(table) == model, step
    assert table.scan().count() == len(model), step
    on_store = listed(seaweed, table)
    assert on_store - referenced(table) == set(), f"{step}: left in the store, referenced by no metadata"
    assert referenced(table, live=True) - on_store == set(), f"{step}: referenced, missing from the store"


def new_table(catalog: Catalog, name: str, version: int) -> tuple[Table, dict[str, str]]:
    props = {"commit.retry.num-retries": "3"}
    if version == 3:  # SeaweedFS refuses .puffin keys in its table buckets
        props["write.data.path"] = f"s3://{DATA_BUCKET}/{NS}/{name}"
    full = f"{NS}.{name}"
    if catalog.table_exists(full):
        catalog.purge_table(full)
    return icemor.create_table(
        full, SCHEMA, catalog=catalog, partition_by=["k"], format_version=version, properties=props
    ), props


def add_files_source(seaweed: SeaweedFS, table: Table, ids: range, k: str) -> tuple[str, Model]:
    """A Parquet file of ``ids`` (all in partition ``k``) written to the plain bucket, outside the table."""
    model = batch(ids, k=k, v=1000)
    path = f"{external(table)}/{k}-{ids.start}.parquet"
    with table.io.new_output(path).create(overwrite=True) as out:
        pq.write_table(rows(model), out)
    return path, model


def scenario(seaweed: SeaweedFS, table: Table, model: Model, spark: SparkSession | None) -> None:
    """Every write, the change feed and every maintenance action, the model checked after each."""
    # add-files: registered where they lie (the external files become the table's)
    sources = [
        add_files_source(seaweed, table, range(200, 210), "k0"),
        add_files_source(seaweed, table, range(210, 215), "k1"),
    ]
    assert table.add_files([p for p, _ in sources]) == 15  # rows
    for _, m in sources:
        model |= m
    check(seaweed, table, model, "add-files")

    m = table.delete("id % 7 = 0", spark=spark)
    gone = [i for i in model if i % 7 == 0]
    assert m.deleted_rows == len(gone)
    for i in gone:
        del model[i]
    check(seaweed, table, model, "delete")

    # UPDATE moving rows to another partition (k is the partition column)
    hit = [i for i in model if 10 <= i <= 20]
    u = table.update({"k": "'k9'", "v": "v + 100"}, where="id between 10 and 20", spark=spark)
    assert u.rows_updated == len(hit)
    for i in hit:
        model[i] = ("k9", model[i][1] + 100)
    check(seaweed, table, model, "update (partition move)")

    source = rows(batch(range(50, 70), v=-1))
    merged = (
        table.merge(source, on="t.id = s.id", spark=spark)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    model |= batch(range(50, 70), v=-1)
    assert merged.rows_inserted + merged.rows_updated == 20
    check(seaweed, table, model, "merge")

    before_cdc = table.refresh().metadata.current_snapshot_id
    changes = pa.table(
        {
            "op": ["U", "D", "I", "D"],
            "id": pa.array([1, 2, 500, 999], pa.int64()),  # 999 is not in the table
            "k": ["k2", "k2", "k1", "k0"],
            "v": pa.array([-1, 0, 500, 0], pa.int64()),
        }
    )
    expected_feed = {("DELETE", 1), ("INSERT", 1), ("DELETE", 2), ("INSERT", 500)} if 1 in model else None
    # a Spark DataFrame of changes is applied on the executors
    table.apply_changes(
        spark.createDataFrame(changes.to_pandas()) if spark is not None else changes, key=["id"]
    )
    model[1] = ("k2", -1)
    model.pop(2, None)
    model[500] = ("k1", 500)
    check(seaweed, table, model, "apply-changes (CDC)")
    assert any(d.equality_ids for p in table.scan().plan_files() for d in p.delete_files)

    # the change feed of the CDC commit (no key: a delete and an insert each)
    feed = table.changes(before_cdc, key=()).to_arrow().to_pylist()
    got = {(r["_change_type"], r["id"]) for r in feed}
    if expected_feed is not None:
        assert got == expected_feed, feed

    e2p = table.maintenance.rewrite_equality_deletes(spark=spark)
    assert e2p.snapshot_id is not None
    check(seaweed, table, model, "compact --equality-to-position")
    assert not any(d.equality_ids for p in table.scan().plan_files() for d in p.delete_files)

    table.delete("id in (3, 4, 5)", spark=spark)
    for i in (3, 4, 5):
        model.pop(i, None)
    minor = table.maintenance.rewrite_position_deletes(spark=spark)
    check(seaweed, table, model, "compact --position-deletes")
    major = table.maintenance.rewrite_data_files(delete_file_threshold=1, spark=spark)
    assert major.snapshot_id is not None, (minor, major)
    check(seaweed, table, model, "compact --data-files")
    assert not any(p.delete_files for p in table.scan().plan_files())

    report = table.inspect()
    assert report.table.record_count if hasattr(report.table, "record_count") else True
    assert table.check().errors == ()
    table.delete("id < 30", spark=spark)
    model = {i: kv for i, kv in model.items() if i >= 30}
    result = table.optimize(spark=spark)
    check(seaweed, table, model, f"optimize ({result})")

    # expiry with orphan removal: an object nothing references, older than the cut, under the
    # table location (what orphan removal lists, as Java's DeleteOrphanFiles: not write.data.path)
    data_bucket, data_prefix = split(table.refresh().metadata.location + "/data")
    orphan = f"{data_prefix.rstrip('/')}/k=k0/orphan-{int(time.time())}.parquet"
    seaweed.client().put_object(Bucket=data_bucket, Key=orphan, Body=b"PAR1")
    before = listed(seaweed, table)
    now = int(time.time() * 1000) + 1
    table.maintenance.expire_snapshots(older_than=now, retain_last=1)
    orphans = table.maintenance.remove_orphan_files(older_than=now + 60_000)
    assert f"s3://{data_bucket}/{orphan}" in orphans.files, orphans
    assert len(table.refresh().metadata.snapshots) == 1
    check(seaweed, table, model, "expire + remove orphans")
    assert any(o.endswith(".parquet") for o in before - listed(seaweed, table))


@pytest.mark.parametrize("version", [2, 3])
def test_local_engine(seaweed: SeaweedFS, rest_catalog: Catalog, version: int) -> None:
    table, _ = new_table(rest_catalog, f"local_v{version}", version)
    model = batch(range(100))
    table.append(rows(model))
    check(seaweed, table, model, "append")
    scenario(seaweed, table, model, None)


@pytest.mark.parametrize("version", [2, 3])
def test_spark_engine(seaweed: SeaweedFS, rest_catalog: Catalog, spark: SparkSession, version: int) -> None:
    table, _ = new_table(rest_catalog, f"spark_v{version}", version)
    model = batch(range(100))
    table.append(rows(model))
    check(seaweed, table, model, "append")
    scenario(seaweed, table, model, spark)
