"""A newcomer's pandas day, end to end without a single file path, against a pandas model.

``create_table`` from a DataFrame (partitioned by ``day(ts)``, keyed by ``id``), ``append(df)``,
DELETE, MERGE, CDC, time travel by datetime, then ``to_pandas``, ``to_polars`` and
``to_duckdb``. The input is what pandas makes: nanosecond timestamps with sub-microsecond digits,
an int64 column for a double one, an all-None column. The expected rows come from a pandas
model of each step; Iceberg Java reads the result at the end. The CLI half: ``create-table
--identifier-fields``, ``apply-changes`` without ``--allow-nullable-key`` and one note,
``alter``, ``scan --as-of-timestamp`` with ISO text.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

COLUMNS = ["id", "customer", "amount", "note", "ts"]
DAY = 86_400 * 10**9


def _orders(ids: range, *, day: int, amount_as_int: bool = False, notes: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(ids.start)
    n = len(ids)
    amount = rng.integers(1, 500, n)
    return pd.DataFrame(
        {
            "id": np.array(ids, dtype=np.int64),
            "customer": [f"c{i % 7}" for i in ids],
            # pandas infers int64 when every amount is whole: the table's column is double
            "amount": amount if amount_as_int else amount + 0.25,
            "note": [f"n{i}" if i % 3 else None for i in ids] if notes else [None] * n,
            # nanoseconds since the epoch with sub-microsecond digits, within the day
            "ts": pd.to_datetime(day * DAY + rng.integers(0, DAY, n), unit="ns"),
        }
    )


def _as_table(df: pd.DataFrame) -> pd.DataFrame:
    """The model of what the table stores: microseconds (floored), doubles, strings."""
    out = df[COLUMNS].copy()
    out["amount"] = out["amount"].astype("float64")
    out["ts"] = out["ts"].dt.floor("us")
    return out.set_index("id", drop=False)


def _same(got: pd.DataFrame, model: pd.DataFrame) -> None:
    got = got[COLUMNS].sort_values("id").reset_index(drop=True)
    want = model.reset_index(drop=True).sort_values("id").reset_index(drop=True)
    got["ts"] = got["ts"].astype("datetime64[us]")
    want["ts"] = want["ts"].astype("datetime64[us]")
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_a_pandas_day_without_a_file_path(catalog: SqlCatalog, ns: str, oracle: IcebergJava) -> None:
    name = f"{ns}.orders"
    notes: list[str] = []

    # morning: the table from the first DataFrame, keyed and partitioned
    first = _orders(range(400), day=19_000)
    table = icemor.create_table(
        name, first, partition_by=["day(ts)"], identifier_fields=["id"], catalog=catalog, note=notes.append
    )
    model = _as_table(first)
    assert [f.name for f in table.schema().fields if f.required] == ["id"]
    assert len(notes) == 1  # one note for the command, not one per file
    morning = table.metadata.current_snapshot_id
    time.sleep(0.01)
    after_morning = datetime.now(UTC).replace(tzinfo=None)  # naive: UTC
    time.sleep(0.01)

    # noon: more orders, amounts as int64, notes all None
    second = _orders(range(400, 1000), day=19_001, amount_as_int=True, notes=False)
    assert table.append(second, note=notes.append) == 600
    model = pd.concat([model, _as_table(second)])
    assert (
        len(notes) == 2 and f"{int((second['ts'].astype('int64') % 1000 != 0).sum())} nanosecond" in notes[1]
    )

    # DELETE a customer
    assert table.delete("customer = 'c3'").deleted_rows == int((model["customer"] == "c3").sum())
    model = model[model["customer"] != "c3"]

    # MERGE corrections: existing ids updated, new ids inserted
    fixes = _orders(range(950, 1050), day=19_001)
    fixes["amount"] = fixes["amount"] * 2
    table.merge(
        fixes, on=["id"], note=notes.append
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    fixed = _as_table(fixes)
    model = pd.concat([model[~model.index.isin(fixed.index)], fixed])

    # CDC from the shop's database: updates, deletes, inserts (ids are required: no option needed)
    cdc = _orders(range(1040, 1080), day=19_002, amount_as_int=True)
    cdc["op"] = ["D" if i % 4 == 0 else "U" for i in range(1040, 1080)]
    m = table.apply_changes(cdc, key=["id"], note=notes.append)
    assert m.deletes == 10 and m.updates == 30
    changed = _as_table(cdc[cdc["op"] == "U"])
    model = pd.concat([model[~model.index.isin(cdc["id"])], changed])

    # create, append, MERGE and CDC: one note each (each input had sub-microsecond digits)
    assert len(notes) == 4 and all("nanosecond timestamp value(s)" in n for n in notes), notes

    # reading it back, three ways, and travelling back to the morning by datetime
    _same(table.scan().to_pandas(), model)
    _same(table.scan().to_polars().to_pandas(), model)
    con = duckdb.connect()
    table.scan().to_duckdb(con, "orders")
    _same(con.sql("SELECT * FROM orders").df(), model)
    _same(table.scan(as_of_timestamp=after_morning).to_pandas(), _as_table(first))
    assert table.scan(as_of_timestamp=after_morning).snapshot.snapshot_id == morning  # type: ignore[union-attr]

    # Iceberg Java reads the same rows
    java = oracle.arrow(name).to_pandas()
    java["ts"] = pd.to_datetime(java["ts"])
    _same(java, model)


def _err(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_cli_identifier_fields_make_cdc_work_without_options(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table created from pandas Parquet with --identifier-fields takes apply-changes keyed on
    it without --allow-nullable-key, and the nanoseconds of 30 partitions give one note."""
    day = _orders(range(300), day=19_000)
    day["ts"] = pd.to_datetime(19_000 * DAY + np.arange(300) * (DAY // 10) + 7, unit="ns")  # 30 days
    path = tmp_path / "orders.parquet"
    day.to_parquet(path)
    assert run(["create-table", "db.o", "--schema-from", str(path), "--partition-by", "day(ts)",
                "--identifier-fields", "id"]) == 0  # fmt: skip
    changes = day.assign(op="I")
    cdc = tmp_path / "cdc.parquet"
    changes.to_parquet(cdc)
    _err(capsys)
    assert run(["apply-changes", "db.o", "--changes", str(cdc), "--key", "id"]) == 0
    out, err = _err(capsys)
    assert "applied 300 changes" in out
    assert err.count("icemor: note:") == 1 and "300 nanosecond" in err, err
    assert "Downcasting" not in err
    assert run(["count", "db.o"]) == 0
    assert _err(capsys)[0].strip() == "300"


def test_cli_alter_evolves_the_schema_and_as_of_takes_iso(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "v": [1.5, None]}), path)
    assert run(["create-table", "db.a", "--schema-from", str(path)]) == 0
    assert run(["append", "db.a", str(path)]) == 0
    _err(capsys)
    assert run(["alter", "db.a", "--add-column", "note:string", "--rename", "v:value", "--widen", "id:long",
                "--identifier-fields", "id"]) == 0  # fmt: skip
    schema = icemor.load_table("db.a").schema()
    assert [(f.name, str(f.field_type), f.required) for f in schema.fields] == [
        ("id", "long", True),
        ("value", "double", False),
        ("note", "string", False),
    ]
    assert list(schema.identifier_field_names()) == ["id"]
    _err(capsys)
    assert run(["alter", "db.a", "--require", "value"]) == 2  # a live row is NULL
    _, err = _err(capsys)
    assert err.startswith("icemor: error:") and "'value'" in err and "1 live row" in err, err
    assert run(["alter", "db.a", "--widen", "value:int"]) == 2
    assert "double -> int" in _err(capsys)[1]
    now = datetime.now(UTC).isoformat()
    assert run(["count", "db.a", "--as-of-timestamp", now]) == 0
    assert _err(capsys)[0].strip() == "2"
    assert run(["count", "db.a", "--as-of-timestamp", "yesterday"]) == 2
    assert "--as-of-timestamp must be" in _err(capsys)[1]
    out_file = tmp_path / "changes.jsonl"
    assert run(["changes", "db.a", "--from-timestamp", "2000-01-01", "--to-timestamp", now,
                "--output", str(out_file)]) == 0  # fmt: skip
    assert len(out_file.read_text().splitlines()) == 2  # the two appended rows
    assert run(["changes", "db.a", "--to-timestamp", "soon"]) == 2
    assert "--to-timestamp must be" in _err(capsys)[1]
