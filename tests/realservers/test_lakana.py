"""icemor through lakana-server 0.20.0, a second Iceberg REST catalog, its tables on SeaweedFS's S3
gateway (``tests/realservers/servers.py``: :class:`~servers.Lakana`).

lakana does not implement staged creation: it answers ``stage-create`` with HTTP 422 "Staged
table creation is not implemented.", which icemor's create once reported as a refusal, so
``create-table`` could not create a table there. Now a catalog refusing staging gets a plain create
(``icemor.commit.create``). The rest is every write and compaction on a v2 table, checked after
each step against a model kept here (the rows read back; the store, listed with boto3, holds what
the metadata references), and the refusals lakana gives, each one line with nothing left behind.

lakana's own rules, which the tests follow or provoke: tables only under a top-level namespace
``bronze``, ``silver`` or ``gold`` (422 elsewhere); no format version 3 (its pyiceberg 0.12 cannot
write v3 metadata: a v3 create is answered 500, an upgrade 422); no snapshot removal through an
Iceberg commit (expiry is refused with 403: lakana expires snapshots itself); no metadata log
(each commit's metadata JSON replaces the last, which no later metadata references).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import RESTError
from servers import Lakana, SeaweedFS
from test_seaweedfs import SCHEMA, Model, batch, listed, read, referenced, rows

import icemor
from icemor.commit.door import http_status
from icemor.exceptions import CommitFailedError, IcemorError

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog import Catalog

    from icemor.table import Table

NS = "bronze"  # lakana creates tables only under bronze, silver or gold


@pytest.fixture(scope="module")
def catalog(lakana: Lakana) -> Catalog:
    return icemor.load_catalog("lakana", **lakana.catalog_properties())


def check(seaweed: SeaweedFS, table: Table, model: Model, step: str) -> None:
    """The rows are the model's; the store holds every file the metadata references and nothing
    else but lakana's earlier metadata JSONs (it keeps no metadata log)."""
    assert read(table) == model, step
    assert table.scan().count() == len(model), step
    on_store = listed(seaweed, table)
    metadata_dir = table.metadata.location.removeprefix("s3://") + "/metadata/"
    stray = {
        o
        for o in on_store - referenced(table)
        if not (o.startswith(metadata_dir) and o.endswith(".metadata.json"))
    }
    assert stray == set(), f"{step}: left in the store, referenced by no metadata"
    assert referenced(table, live=True) - on_store == set(), f"{step}: referenced, missing from the store"


def use_cli(lakana: Lakana, monkeypatch: pytest.MonkeyPatch) -> None:
    """``icemor --catalog lakana`` reads the catalog from ``PYICEBERG_CATALOG__LAKANA__*``."""
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    for key, value in lakana.env("lakana").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())  # read once at import


def stored(seaweed: SeaweedFS, lakana: Lakana, namespace: str, name: str) -> set[str]:
    """Every object of tables called ``name`` in ``namespace`` (lakana adds a uuid to the name)."""
    bucket, _, root = lakana.storage_root.removeprefix("s3://").partition("/")
    return {k for k in seaweed.keys(bucket, f"{root}/managed/{namespace}/") if f"/{name}-" in k}


def test_staged_create_is_refused_and_create_table_creates_without_it(
    lakana: Lakana,
    seaweed: SeaweedFS,
    catalog: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # what icemor's create did alone before: a staged create, which lakana refuses
    with pytest.raises(RESTError) as staged:
        catalog.create_table_transaction(f"{NS}.staged", schema=SCHEMA)
    assert http_status(staged.value) == 422
    assert "Staged table creation is not implemented" in str(staged.value)
    assert not catalog.table_exists(f"{NS}.staged")

    # the CLI: a plain create after the refused staging
    schema_file = tmp_path / "schema.parquet"
    pq.write_table(rows(batch(range(3))), schema_file)
    use_cli(lakana, monkeypatch)
    from icemor.cli import run

    code = run(["--catalog", "lakana", "create-table", f"{NS}.by_cli", "--schema-from", str(schema_file),
                "--partition-by", "k", "--identifier-fields", "id"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    table = icemor.load_table(f"{NS}.by_cli", catalog=catalog)
    assert [(f.name, f.field_id) for f in table.schema().fields] == [("id", 1), ("k", 2), ("v", 3)]
    assert table.schema().identifier_field_names() == {"id"}
    assert [(f.name, str(f.transform)) for f in table.metadata.spec().fields] == [("k", "identity")]
    assert table.metadata.location.startswith(f"{lakana.storage_root}/managed/{NS}/by_cli-")
    assert table.metadata.format_version == 2
    assert read(table) == {}

    # the API, with rows: created, then appended
    model = batch(range(20))
    created = icemor.create_table(f"{NS}.by_api", rows(model), catalog=catalog, partition_by=["k"])
    check(seaweed, created, model, "create with rows")


def test_v2_writes_and_compactions_match_the_model(seaweed: SeaweedFS, catalog: Catalog) -> None:
    table = icemor.create_table(f"{NS}.v2", SCHEMA, catalog=catalog, partition_by=["k"])
    model = batch(range(100))
    table.append(rows(model))
    check(seaweed, table, model, "append")

    d = table.delete("id % 7 = 0")
    gone = [i for i in model if i % 7 == 0]
    assert d.deleted_rows == len(gone)
    for i in gone:
        del model[i]
    check(seaweed, table, model, "delete")

    # UPDATE moving rows to another partition (k is the partition column)
    hit = [i for i in model if 10 <= i <= 20]
    u = table.update({"k": "'k9'", "v": "v + 100"}, where="id between 10 and 20")
    assert u.rows_updated == len(hit)
    for i in hit:
        model[i] = ("k9", model[i][1] + 100)
    check(seaweed, table, model, "update (partition move)")

    present = len([i for i in range(90, 110) if i in model])  # some were deleted above
    merged = (
        table.merge(rows(batch(range(90, 110), v=-1)), on="t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert (merged.rows_updated, merged.rows_inserted) == (present, 20 - present)
    model |= batch(range(90, 110), v=-1)
    check(seaweed, table, model, "merge")

    changes = pa.table(
        {
            "op": ["U", "D", "I", "D"],
            "id": pa.array([1, 2, 500, 999], pa.int64()),  # 999 is not in the table
            "k": ["k2", "k2", "k1", "k0"],
            "v": pa.array([-1, 0, 500, 0], pa.int64()),
        }
    )
    table.apply_changes(changes, key=["id"])
    model[1] = ("k2", -1)
    del model[2]
    model[500] = ("k1", 500)
    check(seaweed, table, model, "apply-changes (CDC)")
    assert any(f.equality_ids for p in table.scan().plan_files() for f in p.delete_files)

    # a filtered scan, deletes of every kind applied
    got = table.scan("k = 'k1' and v >= 50").to_arrow().to_pylist()
    assert sorted(r["id"] for r in got) == sorted(i for i, (k, v) in model.items() if k == "k1" and v >= 50)

    table.maintenance.rewrite_equality_deletes()
    check(seaweed, table, model, "compact --equality-to-position")
    assert not any(f.equality_ids for p in table.scan().plan_files() for f in p.delete_files)
    table.maintenance.rewrite_position_deletes()
    check(seaweed, table, model, "compact --position-deletes")
    major = table.maintenance.rewrite_data_files(delete_file_threshold=1)
    assert major.snapshot_id is not None
    check(seaweed, table, model, "compact --data-files")
    assert not any(p.delete_files for p in table.scan().plan_files())
    assert table.check().errors == ()
    # lakana keeps no metadata log (so ``check`` allows its earlier metadata JSONs in the store)
    assert table.refresh().metadata.metadata_log == []


@pytest.fixture(scope="module")
def written(seaweed: SeaweedFS, catalog: Catalog) -> tuple[Table, Model]:
    """A v2 table with two snapshots, for the refusals."""
    model = batch(range(40))
    table = icemor.create_table(f"{NS}.refusals", rows(model), catalog=catalog, partition_by=["k"])
    table.delete("id < 4")
    return table, {i: kv for i, kv in model.items() if i >= 4}


def test_a_write_refused_with_403_is_one_line_and_leaves_nothing(
    lakana: Lakana, seaweed: SeaweedFS, written: tuple[Table, Model]
) -> None:
    """A VIEWER's DELETE: lakana refuses the commit (403); the delete files icemor wrote are removed."""
    table, model = written
    snapshots = [s.snapshot_id for s in table.refresh().metadata.snapshots]
    before = listed(seaweed, table)
    reader = icemor.load_catalog("lakana_reader", **lakana.catalog_properties(reader=True))
    as_reader = icemor.load_table(table.name, catalog=reader)
    assert read(as_reader) == model
    with pytest.raises(CommitFailedError) as refused:
        as_reader.delete("id % 2 = 0")
    message = str(refused.value)
    assert "refused" in message and "HTTP 403" in message and "\n" not in message, message
    assert "may or may not" not in message
    assert [s.snapshot_id for s in table.refresh().metadata.snapshots] == snapshots
    assert listed(seaweed, table) == before
    check(seaweed, table, model, "after the refused DELETE")


def test_the_cli_says_refused_and_exits_2(
    lakana: Lakana,
    seaweed: SeaweedFS,
    catalog: Catalog,
    written: tuple[Table, Model],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Expiry (lakana refuses snapshot removal through a commit: 403) and a create outside
    bronze/silver/gold (422): one line each, exit 2; nothing committed, created or stored."""
    table, model = written
    snapshots = [s.snapshot_id for s in table.refresh().metadata.snapshots]
    before = listed(seaweed, table)
    use_cli(lakana, monkeypatch)
    from icemor.cli import run

    code = run(
        ["--catalog", "lakana", "expire", table.name, "--retain-last", "1", "--older-than", "2999-01-01"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "refused" in err[0] and "HTTP 403" in err[0], err
    assert [s.snapshot_id for s in table.refresh().metadata.snapshots] == snapshots
    assert listed(seaweed, table) == before
    check(seaweed, table, model, "after the refused expiry")

    schema_file = tmp_path / "schema.parquet"
    pq.write_table(rows(batch(range(3))), schema_file)
    code = run(["--catalog", "lakana", "create-table", "elsewhere.t", "--schema-from", str(schema_file)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "refused" in err[0] and "HTTP 422" in err[0] and "bronze" in err[0], err
    assert ("elsewhere",) not in catalog.list_namespaces()  # the namespace icemor made is dropped again
    assert stored(seaweed, lakana, "elsewhere", "t") == set()


def test_format_version_3_is_not_accepted_and_nothing_is_left(
    lakana: Lakana, seaweed: SeaweedFS, catalog: Catalog, written: tuple[Table, Model]
) -> None:
    """lakana 0.20.0 cannot write v3 metadata: a v3 create fails (HTTP 500: its outcome unknown to
    icemor), an upgrade is refused (422); one line each, no table, no object, the v2 table intact."""
    with pytest.raises(IcemorError) as failed:
        icemor.create_table(f"{NS}.v3", rows(batch(range(5))), catalog=catalog, format_version=3)
    message = str(failed.value)
    assert "HTTP 500" in message and "\n" not in message, message
    assert not catalog.table_exists(f"{NS}.v3")
    assert stored(seaweed, lakana, NS, "v3") == set()

    table, model = written
    before = listed(seaweed, table)
    with pytest.raises(CommitFailedError) as refused:
        table.upgrade(format_version=3)
    message = str(refused.value)
    assert "refused" in message and "HTTP 422" in message and "\n" not in message, message
    assert table.refresh().metadata.format_version == 2
    assert listed(seaweed, table) == before
    check(seaweed, table, model, "after the refused upgrade")
