"""What a real REST catalog and object store answer, and what icemor makes of it (SeaweedFS):

* a definite refusal (HTTP 403) is "refused", one line, exit 2, nothing committed and every file
  written for it removed, never "may or may not have happened" with the files kept. SeaweedFS
  answers 403 to every SigV4-signed commit of pyiceberg 0.12, which signs a request body without
  sending ``x-amz-content-sha256`` (the S3 rule SeaweedFS applies; reads carry no body and pass);
* concurrent commits: the losers get HTTP 409, try again on the new head, and every write lands;
* a store refusing a key names the object refused: ``.puffin`` in a table bucket (with the likely
  cause), a Spark-engine staging marker (now written under the data path, which the store takes).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from servers import SeaweedFS
from test_seaweedfs import SCHEMA, Model, batch, check, listed, read, rows

import icemor
from icemor.exceptions import CommitConflictError, CommitFailedError, WriteFailedError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

NS = "outcomes"


@pytest.fixture(scope="module")
def oauth(seaweed: SeaweedFS) -> Catalog:
    cat = icemor.load_catalog("sw", **seaweed.catalog_properties("oauth2"))
    cat.create_namespace_if_not_exists(NS)
    return cat


def fresh(catalog: Catalog, name: str, model: Model, **properties: str) -> Any:
    full = f"{NS}.{name}"
    if catalog.table_exists(full):
        catalog.purge_table(full)
    table = icemor.create_table(full, SCHEMA, catalog=catalog, partition_by=["k"], properties=properties)
    table.append(rows(model))
    return table


def test_sigv4_commit_refused_with_403_is_refused_and_leaves_nothing(
    seaweed: SeaweedFS, oauth: Catalog
) -> None:
    model = batch(range(60))
    table = fresh(oauth, "refused", model)
    table.delete("id < 5")  # a second snapshot, for expiry
    model = {i: kv for i, kv in model.items() if i >= 5}
    snapshots = [s.snapshot_id for s in table.refresh().metadata.snapshots]
    before = listed(seaweed, table)

    sigv4 = icemor.load_catalog("sigv4", **seaweed.catalog_properties("sigv4"))
    signed = icemor.load_table(f"{NS}.refused", catalog=sigv4)
    assert read(signed) == model  # reads (GET, no body) pass the signature check
    with pytest.raises(CommitFailedError, match=r"refused .*HTTP 403") as refused:
        signed.maintenance.expire_snapshots(older_than=int(time.time() * 1000) + 1, retain_last=1)
    assert "may or may not" not in str(refused.value)
    # a write: its delete files are removed again, nothing committed
    with pytest.raises(CommitFailedError, match=r"HTTP 403"):
        signed.delete("id % 2 = 0")
    assert [s.snapshot_id for s in table.refresh().metadata.snapshots] == snapshots
    assert listed(seaweed, table) == before
    check(seaweed, table, model, "after the refusals")


def test_the_cli_says_refused_and_exits_2(
    seaweed: SeaweedFS, oauth: Catalog, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    from icemor.cli import run

    fresh(oauth, "cli", batch(range(20))).delete("id = 1")
    for key, value in seaweed.env("sigv4", "sigv4").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())  # read once at import
    code = run(
        ["--catalog", "sigv4", "expire", f"{NS}.cli", "--retain-last", "1", "--older-than", "2999-01-01"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "refused" in err[0] and "HTTP 403" in err[0], err


def test_concurrent_commits_get_409_and_all_land(
    seaweed: SeaweedFS, oauth: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = batch(range(200))
    fresh(oauth, "race", model, **{"commit.retry.num-retries": "10", "commit.retry.min-wait-ms": "20"})
    conflicts = 0
    lock = threading.Lock()
    commit_table = RestCatalog.commit_table

    def counting(self: RestCatalog, *args: Any, **kwargs: Any) -> Any:
        nonlocal conflicts
        try:
            return commit_table(self, *args, **kwargs)
        except CommitFailedException:  # pyiceberg's exception for HTTP 409
            with lock:
                conflicts += 1
            raise

    monkeypatch.setattr(RestCatalog, "commit_table", counting)
    writers = 4
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def writer(n: int) -> None:
        try:
            cat = icemor.load_catalog(f"sw{n}", **seaweed.catalog_properties())
            t = icemor.load_table(f"{NS}.race", catalog=cat)
            for round_ in range(3):
                start.wait() if round_ == 0 else None
                for _ in range(10):
                    # a lost swap (409) is retried inside; a DELETE whose merged delete file another
                    # writer replaced meanwhile is a real conflict (Java's too): the caller runs it again
                    try:
                        t.delete(f"id % {writers * 3} = {n * 3 + round_}")
                        break
                    except CommitConflictError:
                        continue
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert conflicts > 0, "no writer lost a race: the 409 path was not exercised"
    model = {i: kv for i, kv in model.items() if i % (writers * 3) >= writers * 3}
    table = icemor.load_table(f"{NS}.race", catalog=oauth)
    check(seaweed, table, model, "after the race")


def test_v3_in_the_table_bucket_names_the_refused_puffin_and_the_cause(
    seaweed: SeaweedFS, oauth: Catalog
) -> None:
    """SeaweedFS's bug: it refuses .puffin keys in a table bucket. The error names the object and
    says what to do; nothing is committed or left behind."""
    full = f"{NS}.puffin"
    if oauth.table_exists(full):
        oauth.purge_table(full)
    model = batch(range(30))
    table = icemor.create_table(full, rows(model), catalog=oauth, format_version=3)
    before = listed(seaweed, table)
    with pytest.raises(WriteFailedError) as refused:
        table.delete("id < 3")
    message = str(refused.value)
    assert ".puffin" in message and "write.data.path" in message and "\n" not in message, message
    assert listed(seaweed, table) == before
    assert read(table) == model


@pytest.mark.parametrize("version", [2, 3])
def test_spark_writes_in_a_table_bucket(
    seaweed: SeaweedFS, oauth: Catalog, spark: SparkSession, version: int
) -> None:
    """Spark DELETE / UPDATE / MERGE announce each file under a staging prefix: in a SeaweedFS table
    bucket, which refuses keys under ``metadata/`` that are not Avro or metadata JSON, it must lie
    in the data path; nothing staged is left."""
    model = batch(range(90))
    props = {} if version == 2 else {"write.data.path": f"s3://data/{NS}/spark_staging_v3"}
    table = fresh(oauth, f"spark_staging_v{version}", model, **{"format-version": str(version), **props})
    table.delete("id % 5 = 0", spark=spark)
    model = {i: kv for i, kv in model.items() if i % 5}
    table.update({"v": "v * 10"}, where="id < 20", spark=spark)
    model = {i: (k, v * 10 if i < 20 else v) for i, (k, v) in model.items()}
    table.merge(
        rows(batch(range(85, 95), v=7)), on="t.id = s.id", spark=spark
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    model |= batch(range(85, 95), v=7)
    check(seaweed, table, model, "spark writes")
    assert not any("_icemor-staging" in o or ".icemor-staging" in o for o in listed(seaweed, table))


def test_a_refused_marker_is_named(seaweed: SeaweedFS, oauth: Catalog) -> None:
    """A store that refuses the staging marker: the error names the marker, not the file it announces."""
    from icemor.engines.spark.write import StagingIO

    table = fresh(oauth, "marker", batch(range(3)))
    io = StagingIO(table.io, table.metadata.location + "/metadata/.refused-staging")
    target = table.metadata.location + "/data/x.parquet"
    with pytest.raises(WriteFailedError, match=r"\.refused-staging/") as refused:
        io.new_output(target)
    assert "cannot stage " + target in str(refused.value)
