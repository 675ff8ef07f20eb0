"""Dates before 1582 and timestamps before 1900 (issue 38, defect 4), judged by Iceberg Java.

Iceberg stores dates and timestamps in the proleptic Gregorian calendar. Spark's Parquet reader,
by default, refuses such values in files without Spark's own footer keys
(``INCONSISTENT_BEHAVIOR_CROSS_VERSION.READ_ANCIENT_DATETIME``): icemor's Spark reads must say the
files are proleptic, on every strategy, without touching the session's settings. The expected
values are computed here with Python's (proleptic) ``datetime``, and Java must read them too.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import icemor
from icemor.engines.spark import collect_arrow

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

COLUMNS = "id INT, d DATE, ts TIMESTAMP_NTZ, tz TIMESTAMP"
# 1582-10-10 exists only in the proleptic calendar (the hybrid one jumps from 10-04 to 10-15)
DAYS = ["0001-01-01", "0999-12-31", "1582-10-04", "1582-10-10", "1582-10-15", "1899-12-31", "1970-01-01",
        "2024-02-29", "9999-12-31"]  # fmt: skip
TIMES = ["0001-01-01 00:00:00", "0999-12-31 23:59:59.999999", "1582-10-10 08:00:00.5", "1582-10-15 00:00:00",
         "1899-12-31 23:59:59.999999", "1900-01-01 00:00:00", "1969-12-31 23:59:59.999999",
         "2024-02-29 12:00:00", "9999-12-31 23:59:59.999999"]  # fmt: skip
STRATEGIES = ("auto", "python", "native")
EPOCH = dt.datetime(1970, 1, 1)


def _days(text: str) -> int:
    return (dt.date.fromisoformat(text) - EPOCH.date()).days


def _micros(text: str) -> int:
    delta = dt.datetime.fromisoformat(text) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _rows() -> list[tuple[int, str | None, str | None, str | None]]:
    """(id, date, timestamp, timestamptz) as text; the last row all NULL."""
    rows: list[tuple[int, str | None, str | None, str | None]] = [
        (i, day, time, TIMES[(i + 3) % len(TIMES)])
        for i, (day, time) in enumerate(zip(DAYS, TIMES, strict=True))
    ]
    return [*rows, (len(rows), None, None, None)]


def _expected(rows: list[tuple[int, str | None, str | None, str | None]]) -> list[tuple[Any, ...]]:
    """Days and microseconds since the epoch, proleptic Gregorian (Python's calendar)."""
    return sorted(
        (
            i,
            None if d is None else _days(d),
            None if ts is None else _micros(ts),
            None if tz is None else _micros(tz),
        )
        for i, d, ts, tz in rows
    )


def _raw(table: pa.Table) -> list[tuple[Any, ...]]:
    """The table's (id, d, ts, tz) as days and microseconds, sorted (no Python datetimes)."""
    assert pa.types.is_date32(table.schema.field("d").type)
    cols = [
        table.column("id").cast(pa.int64()),
        table.column("d").cast(pa.int32()),
        table.column("ts").cast(pa.int64()),
        table.column("tz").cast(pa.int64()),
    ]
    return sorted(zip(*(c.to_pylist() for c in cols), strict=True))


def _values_sql(rows: list[tuple[int, str | None, str | None, str | None]]) -> str:
    def lit(kind: str, text: str | None) -> str:
        return "NULL" if text is None else f"{kind} '{text}'"

    return ", ".join(
        f"({i}, {lit('DATE', d)}, {lit('TIMESTAMP_NTZ', ts)}, {lit('TIMESTAMP', tz)})"
        for i, d, ts, tz in rows
    )


def _arrow(rows: list[tuple[int, str | None, str | None, str | None]]) -> pa.Table:
    def day(text: str | None) -> dt.date | None:
        return None if text is None else dt.date.fromisoformat(text)

    def time(text: str | None) -> dt.datetime | None:
        return None if text is None else dt.datetime.fromisoformat(text)

    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int32()),
            "d": pa.array([day(r[1]) for r in rows], pa.date32()),
            "ts": pa.array([time(r[2]) for r in rows], pa.timestamp("us")),
            "tz": pa.array([time(r[3]) for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )


def _assert_every_read(
    oracle: IcebergJava, catalog: SqlCatalog, name: str, snapshot_id: int | None = None
) -> None:
    """Java, the local engine and every Spark strategy read the same values at the snapshot."""
    expected = _raw(oracle.arrow(name, snapshot_id=snapshot_id))
    table = icemor.load_table(name, catalog=catalog)
    assert _raw(table.scan(snapshot_id=snapshot_id).to_arrow()) == expected
    for strategy in STRATEGIES:
        df = table.scan(snapshot_id=snapshot_id).to_spark(oracle.spark, strategy=strategy)
        assert _raw(collect_arrow(df)) == expected, strategy
        # and Spark itself sees Java's values (no calendar shift inside Spark either)
        assert df.exceptAll(oracle.dataframe(name, snapshot_id=snapshot_id)).count() == 0, strategy


def test_java_written_ancient_values_read_alike_on_every_engine_and_strategy(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    spark = oracle.spark
    conf = "spark.sql.parquet.datetimeRebaseModeInRead"
    before = spark.conf.get(conf, None)
    name = f"{ns}.ancient"
    oracle.create_table(name, COLUMNS)
    rows = _rows()
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES {_values_sql(rows)}")
    inserted = oracle.current_snapshot_id(name)
    # Java stores what Python's proleptic calendar says (this pins the expectation, not icemor)
    assert _raw(oracle.arrow(name)) == _expected(rows)
    _assert_every_read(oracle, catalog, name)
    # position deletes (Spark's reader with the bitmap filter), then an equality delete on the date
    # itself (Spark reads the delete file's ancient key; auto sends the file to the Python workers)
    oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id IN (1, 5)")
    positional = oracle.current_snapshot_id(name)
    ids = oracle.field_ids(name)
    key = pa.table({"d": pa.array([dt.date(1, 1, 1), dt.date(1582, 10, 10)], pa.date32())})
    oracle.write_equality_deletes(name, key, [ids["d"]])
    assert len(oracle.arrow(name)) == len(rows) - 4
    for snapshot_id in (inserted, positional, None):
        _assert_every_read(oracle, catalog, name, snapshot_id)
    # per read: the user's session settings are left as they were
    assert spark.conf.get(conf, None) == before


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_icemor_written_ancient_values_are_proleptic_for_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, engine: str
) -> None:
    name = f"{ns}.ancient"
    rows = _rows()
    table = icemor.create_table(name, _arrow(rows), catalog=catalog)
    assert _raw(oracle.arrow(name)) == _expected(rows)
    _assert_every_read(oracle, catalog, name)
    # rows rewritten by an UPDATE and a MERGE on the engine (Spark: the values pass through Spark
    # and its executors write them), read back by Java as Python's calendar computes them
    spark = oracle.spark if engine == "spark" else None
    # (not 9999-12-31 + 1 day: pyiceberg's file statistics cannot hold a year past 9999)
    table.update({"d": "d + 1", "ts": "ts + INTERVAL 1 SECOND"}, where="id % 2 = 0 AND id < 8", spark=spark)
    source = _arrow(
        [
            (0, "0001-01-01", "0001-01-01 00:00:01", "0001-01-01 00:00:02"),
            (100, "0002-03-04", None, "1000-01-01 00:00:00"),
        ]
    )
    (
        icemor.load_table(name, catalog=catalog)
        .merge(source, on=["id"], spark=spark)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    day, second = 1, 1_000_000
    updated = [
        (i, d + day, ts + second, tz) if i % 2 == 0 and i < 8 else (i, d, ts, tz)
        for i, d, ts, tz in _expected(rows)
    ]
    merged = _expected(
        [
            (0, "0001-01-01", "0001-01-01 00:00:01", "0001-01-01 00:00:02"),
            (100, "0002-03-04", None, "1000-01-01 00:00:00"),
        ]
    )
    expected = sorted([*merged, *(r for r in updated if r[0] != 0)])
    assert _raw(oracle.arrow(name)) == expected
    _assert_every_read(oracle, catalog, name)
