"""Table.append / Table.overwrite of in-memory data, judged by a pandas model of the input rules.

The rules (docs/semantics.md, "Input rows"): Iceberg's promotions plus int/long -> double, NULL-
typed columns as the table's type, nanosecond timestamps floored to microseconds with one note
counting the values that lost digits, nullable input into a required column only without NULLs.
The expected rows are computed with pandas from the input, never by icemor.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

import icemor
from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "qty", DoubleType()),
    NestedField(3, "n", IntegerType()),
    NestedField(4, "note", StringType()),
    NestedField(5, "ts", TimestampType()),
    NestedField(6, "tz", TimestamptzType()),
    identifier_field_ids=[1],
)


def _table(catalog: SqlCatalog, ns: str, **kwargs: object) -> icemor.table.Table:
    return icemor.create_table(f"{ns}.t", SCHEMA, catalog=catalog, **kwargs)  # type: ignore[arg-type]


def _frame(start: int, rows: int) -> pd.DataFrame:
    """pandas' own types: int64 ids and quantities, int8 n, an all-None note, ns timestamps with
    sub-microsecond digits (negative ones too), a zoned column in another zone."""
    rng = np.random.default_rng(start)
    nanos = rng.integers(-(10**15), 10**15, rows)
    return pd.DataFrame(
        {
            "id": np.arange(start, start + rows, dtype=np.int64),
            "qty": rng.integers(-1000, 1000, rows),  # int64 into a double column
            "n": rng.integers(-100, 100, rows).astype(np.int8),  # int8 into an int column
            "note": [None] * rows,  # Arrow's null type
            "ts": pd.to_datetime(nanos, unit="ns"),
            "tz": pd.to_datetime(nanos, unit="ns", utc=True).tz_convert("Asia/Kolkata"),
        }
    )


def _model(df: pd.DataFrame) -> list[tuple[object, ...]]:
    """What the table must hold: pandas' own conversions of the rules."""
    ts = df["ts"].dt.floor("us")  # the microsecond holding the instant
    tz = df["tz"].dt.tz_convert("UTC").dt.floor("us")
    out = []
    for i in range(len(df)):
        out.append(
            (
                int(df["id"].iloc[i]),
                float(df["qty"].iloc[i]),
                int(df["n"].iloc[i]),
                None,
                ts.iloc[i].to_pydatetime(),
                tz.iloc[i].to_pydatetime(),
            )
        )
    return sorted(out, key=lambda r: r[0])  # type: ignore[arg-type,return-value]


def _rows(table: icemor.table.Table) -> list[tuple[object, ...]]:
    got = table.scan().to_arrow()
    return sorted(
        zip(*(got.column(c).to_pylist() for c in got.column_names), strict=True), key=lambda r: r[0]
    )  # type: ignore[arg-type,return-value]


def _lost_digits(df: pd.DataFrame) -> int:
    values = np.concatenate(
        [df["ts"].to_numpy().astype(np.int64), df["tz"].dt.tz_convert(None).to_numpy().astype(np.int64)]
    )
    return int(np.count_nonzero(values % 1000))


def test_append_pandas_matches_the_pandas_model(catalog: SqlCatalog, ns: str) -> None:
    table = _table(catalog, ns, partition_by=["day(ts)"])
    df = _frame(0, 500)
    notes: list[str] = []
    assert table.append(df, note=notes.append) == 500
    assert _rows(table) == _model(df)
    assert len(table.snapshots()) == 1
    # one note for the whole command, counting every value that lost digits
    assert len(notes) == 1 and f"{_lost_digits(df)} nanosecond" in notes[0], notes
    assert "ts (" in notes[0] and "tz (" in notes[0]


@pytest.mark.parametrize("kind", ["arrow", "batch", "reader", "polars", "parquet", "parquet-list"])
def test_append_takes_every_input_kind(catalog: SqlCatalog, ns: str, tmp_path: Path, kind: str) -> None:
    df = _frame(10, 50)
    arrow = pa.Table.from_pandas(df, preserve_index=False)
    if kind == "arrow":
        data: object = arrow
    elif kind == "batch":
        data = arrow.combine_chunks().to_batches()[0]
    elif kind == "reader":
        data = pa.RecordBatchReader.from_batches(arrow.schema, arrow.to_batches(max_chunksize=7))
    elif kind == "polars":
        import polars as pl

        data = pl.from_pandas(df)
    else:
        pq.write_table(arrow.slice(0, 20), tmp_path / "a.parquet")
        pq.write_table(arrow.slice(20), tmp_path / "b.parquet")
        data = (
            [tmp_path / "a.parquet", str(tmp_path / "b.parquet")]
            if kind == "parquet-list"
            else tmp_path / "a.parquet"
        )
    table = _table(catalog, ns)
    expected = _model(df) if kind != "parquet" else _model(df.iloc[:20])
    assert table.append(data, note=lambda _: None) == len(expected)
    assert _rows(table) == expected
    assert len(table.snapshots()) == 1


def test_append_streams_in_bounded_batches_with_one_commit(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import icemor.ops.append as append_mod

    held: list[int] = []
    monkeypatch.setattr(append_mod, "BATCH_ROWS", 16)
    monkeypatch.setattr(append_mod, "observe_chunk", held.append)
    df = _frame(0, 100)
    table = _table(catalog, ns)
    assert table.append(df, note=lambda _: None) == 100
    assert max(held) <= 16 and sum(held) == 100
    assert len(table.snapshots()) == 1
    assert _rows(table) == _model(df)


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"qty": ["x"] * 3}, ["'qty'", "string", "double"]),  # not a promotion
        ({"n": np.array([1, 2, 3], dtype=np.int64)}, ["'n'", "int64", "int"]),  # a narrowing
        ({"extra": [1, 2, 3]}, ["'extra'", "not in the table"]),
        ({"id": [1, None, 3]}, ["'id'", "required", "1 row"]),  # NULL in a required column
        ({"ts": pd.to_datetime([1, 2, 3], unit="s", utc=True)}, ["'ts'", "timestamp"]),  # zoned into naive
    ],
)
def test_append_refuses_in_one_line_naming_the_column(
    catalog: SqlCatalog, ns: str, change: dict[str, object], needles: list[str]
) -> None:
    table = _table(catalog, ns)
    df = _frame(0, 3)
    for name, values in change.items():
        df[name] = values
    if "id" in change:
        df["id"] = df["id"].astype("Int64")  # a nullable column with a NULL
    with pytest.raises(InvalidArgumentError) as e:
        table.append(df, note=lambda _: None)
    line = str(e.value)
    assert "\n" not in line and all(n in line for n in needles), line
    assert table.refresh().snapshots() == []


def test_append_without_a_required_column_is_refused(catalog: SqlCatalog, ns: str) -> None:
    table = _table(catalog, ns)
    with pytest.raises(InvalidArgumentError, match=r"no column .id.*required"):
        table.append(pd.DataFrame({"qty": [1.0]}))


def test_missing_optional_columns_are_null(catalog: SqlCatalog, ns: str) -> None:
    table = _table(catalog, ns)
    table.append(pd.DataFrame({"id": [7, 8]}))
    assert _rows(table) == [(7, None, None, None, None, None), (8, None, None, None, None, None)]


def test_interrupted_append_leaves_no_file_and_no_snapshot(catalog: SqlCatalog, ns: str) -> None:
    """Ctrl-C after two batches were written: nothing committed, every data file removed."""
    table = _table(catalog, ns, partition_by=["day(ts)"])
    arrow = pa.Table.from_pandas(_frame(0, 300), preserve_index=False)

    def batches():  # type: ignore[no-untyped-def]
        yield from arrow.to_batches(max_chunksize=100)[:2]
        raise KeyboardInterrupt

    location = Path(table.metadata.location.removeprefix("file://"))
    before = sorted(p for p in location.rglob("*") if p.is_file())
    with pytest.raises(KeyboardInterrupt):
        table.append(pa.RecordBatchReader.from_batches(arrow.schema, batches()))
    assert sorted(p for p in location.rglob("*") if p.is_file()) == before
    assert table.refresh().snapshots() == []


# the condition in the scan language, and the same as a pandas mask (the model)
CONDITIONS = {
    None: lambda df: np.ones(len(df), dtype=bool),
    "id < 30": lambda df: df["id"] < 30,
    "id % 3 = 0": lambda df: df["id"] % 3 == 0,  # SQL: the engine finds the positions
}


@pytest.mark.parametrize("where", list(CONDITIONS))
def test_overwrite_replaces_the_matching_rows_in_one_snapshot(
    catalog: SqlCatalog, ns: str, where: str | None
) -> None:
    table = _table(catalog, ns, partition_by=["bucket(4, id)"])
    old = _frame(0, 100)
    table.append(old, note=lambda _: None)
    new = _frame(1000, 20)
    m = table.overwrite(new, where, note=lambda _: None)
    kept = old[~np.asarray(CONDITIONS[where](old), dtype=bool)]
    assert _rows(table) == sorted(_model(kept) + _model(new), key=lambda r: r[0])  # type: ignore[arg-type,return-value]
    assert m.rows_deleted == len(old) - len(kept) and m.rows_added == 20
    snapshots = table.snapshots()
    assert len(snapshots) == 2 and snapshots[-1].operation == "overwrite"


def test_overwrite_with_a_bad_condition_writes_nothing(catalog: SqlCatalog, ns: str) -> None:
    table = _table(catalog, ns)
    table.append(_frame(0, 10), note=lambda _: None)
    location = Path(table.metadata.location.removeprefix("file://"))
    before = sorted(p for p in (location / "data").rglob("*") if p.is_file())
    with pytest.raises(InvalidArgumentError):
        table.overwrite(_frame(100, 10), "nope > 1")
    assert sorted(p for p in (location / "data").rglob("*") if p.is_file()) == before
    assert len(table.refresh().snapshots()) == 1


def test_interrupted_overwrite_removes_its_new_files(
    catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the new rows were written, while the old ones are being found: no file left."""
    import icemor.ops.overwrite as overwrite_mod

    table = _table(catalog, ns)
    table.append(_frame(0, 50), note=lambda _: None)
    location = Path(table.metadata.location.removeprefix("file://"))
    before = sorted(p for p in location.rglob("*") if p.is_file())

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(overwrite_mod, "_removal", interrupted)
    with pytest.raises(KeyboardInterrupt):
        table.overwrite(_frame(100, 50), "id < 10", note=lambda _: None)
    assert sorted(p for p in location.rglob("*") if p.is_file()) == before
    assert len(table.refresh().snapshots()) == 1
