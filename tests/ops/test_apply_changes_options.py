"""CDC's options object (:class:`icemor.ops.cdc.ChangeOptions`): checked once, in one place, whichever
entry builds it (the facade, the CLI, ``icemor.spark.cdc_sink``); and one refresh of the table, one
read of the changes, per batch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icemor
import icemor.spark
from icemor.cli import run
from icemor.exceptions import InvalidArgumentError
from icemor.ops.cdc import ChangeOptions
from oracle import local_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog.sql import SqlCatalog

    from icemor.table import Table

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
BAD_BATCH_IDS = [-1, True, 1.5, "3"]


def _table(catalog: SqlCatalog, ns: str) -> Table:
    catalog.create_table(f"{ns}.t", schema=SCHEMA, properties={"format-version": "2"})
    return icemor.load_table(f"{ns}.t", catalog=catalog)


def _changes(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table(
        {
            "op": [r[0] for r in rows],
            "id": pa.array([r[1] for r in rows], pa.int64()),
            "v": [r[2] for r in rows],
        }
    )


def _files(t: Table) -> set[Path]:
    return {p for p in local_path(t.metadata.location).rglob("*") if p.is_file()}


@pytest.mark.parametrize("batch_id", BAD_BATCH_IDS)
def test_a_bad_batch_id_is_refused_when_the_options_are_built(batch_id: Any) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"batch_id \(--batch-id\) must be a whole number of 0 or more"
    ) as info:
        ChangeOptions(key=("id",), app_id="app", batch_id=batch_id)
    assert "\n" not in str(info.value)


def test_the_options_in_their_normal_form() -> None:
    options = ChangeOptions(key=["id", "k"], app_id="app", batch_id=np.int64(3), deletes=" Position ")  # type: ignore[arg-type]
    assert options.key == ("id", "k") and options.deletes == "position"
    assert options.batch_id == 3 and type(options.batch_id) is int
    assert ChangeOptions(**options.keywords()) == options
    cases: list[tuple[dict[str, Any], str]] = [
        ({"key": ()}, "give at least one key column"),
        ({"key": ("id", "id")}, "key columns repeat: id, id"),
        ({"key": ("id",), "batch_id": 1}, "give app_id and batch_id together"),
        ({"key": ("id",), "app_id": " ", "batch_id": 1}, "app_id must not be empty"),
        ({"key": ("id",), "deletes": "dv"}, "deletes='dv' must be 'equality' or 'position'"),
    ]
    for bad, needle in cases:
        with pytest.raises(InvalidArgumentError, match=needle):
            ChangeOptions(**bad)


@pytest.mark.parametrize("batch_id", BAD_BATCH_IDS)
def test_the_facade_refuses_a_bad_batch_id_in_one_line(catalog: SqlCatalog, ns: str, batch_id: Any) -> None:
    t = _table(catalog, ns)
    files = _files(t)
    with pytest.raises(InvalidArgumentError, match=r"batch_id \(--batch-id\) must be a whole number") as info:
        t.apply_changes(_changes([("I", 1, "a")]), key=["id"], app_id="app", batch_id=batch_id)
    assert "\n" not in str(info.value)
    assert t.refresh().snapshots() == [] and _files(t) == files


def test_the_cli_refuses_a_bad_batch_id_in_one_line(
    catalog: SqlCatalog, ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = _table(catalog, ns)
    path = tmp_path / "a.parquet"
    pq.write_table(_changes([("I", 1, "a")]), path)
    args = ["apply-changes", t.name, "--changes", str(path), "--key", "id", "--app-id", "app"]
    assert run([*args, "--batch-id", "-1"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("icemor: error: batch_id (--batch-id) must be"), err
    assert t.refresh().snapshots() == []


def test_the_sink_refuses_bad_options_when_it_is_made(catalog: SqlCatalog, ns: str) -> None:
    """Before the stream starts, not at its first micro-batch."""
    t = _table(catalog, ns)
    with pytest.raises(InvalidArgumentError, match="give at least one key column"):
        icemor.spark.cdc_sink(t, key=[], app_id="stream")
    with pytest.raises(InvalidArgumentError, match="deletes='dv' must be"):
        icemor.spark.cdc_sink(t, key=["id"], app_id="stream", deletes="dv")
    with pytest.raises(InvalidArgumentError, match="app_id must not be empty"):
        icemor.spark.cdc_sink(t, key=["id"], app_id="  ")


def _count_loads(t: Table, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    catalog = t.pyiceberg.catalog
    real = catalog.load_table
    loads: list[object] = []

    def load_table(identifier: Any) -> Any:
        loads.append(identifier)
        return real(identifier)

    monkeypatch.setattr(catalog, "load_table", load_table)
    return loads


def test_the_table_is_refreshed_once_a_batch(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that commits nothing (an empty one, one already committed) read the table twice:
    when it began and again after."""
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a")]), key=["id"], app_id="app", batch_id=1)
    loads = _count_loads(t, monkeypatch)
    assert t.apply_changes(_changes([]), key=["id"]).snapshot_id is None
    assert len(loads) == 1
    assert t.apply_changes(_changes([("U", 1, "b")]), key=["id"], app_id="app", batch_id=1).skipped
    assert len(loads) == 2


def test_a_skipped_batch_is_not_read(catalog: SqlCatalog, ns: str) -> None:
    """The changes are read once, after the check for a batch already committed: a skipped batch
    costs no read."""
    t = _table(catalog, ns)
    t.apply_changes(_changes([("I", 1, "a")]), key=["id"], app_id="app", batch_id=1)
    read: list[int] = []
    rows = _changes([("U", 1, "b")])

    def batches() -> Iterator[pa.RecordBatch]:
        for b in rows.to_batches():
            read.append(b.num_rows)
            yield b

    reader = pa.RecordBatchReader.from_batches(rows.schema, batches())
    assert t.apply_changes(reader, key=["id"], app_id="app", batch_id=1).skipped
    assert read == []
    again = pa.RecordBatchReader.from_batches(rows.schema, batches())
    assert t.apply_changes(again, key=["id"], app_id="app", batch_id=2).snapshot_id is not None
    assert read == [1]
