"""The table facade: its one parser of points in time (``as_of_timestamp=datetime(...)`` once
raised a raw TypeError), judged against values computed by hand; what it takes for a Spark
DataFrame; the names it re-exports from the modules it is made of."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from icemor.exceptions import InvalidArgumentError
from icemor.table import to_epoch_ms

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

MAY_1 = 1_714_521_600_000  # 2024-05-01T00:00:00Z in ms


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (MAY_1, MAY_1),
        (str(MAY_1), MAY_1),
        (datetime(2024, 5, 1), MAY_1),  # naive: UTC
        (datetime(2024, 5, 1, 2, tzinfo=timezone(timedelta(hours=2))), MAY_1),
        (date(2024, 5, 1), MAY_1),
        ("2024-05-01", MAY_1),
        ("2024-05-01T02:00:00+02:00", MAY_1),
        ("2024-05-01T00:00:00Z", MAY_1),
        ("2024-05-01T00:00:00.250", MAY_1 + 250),
    ],
)
def test_every_kind_of_point_in_time(value: object, ms: int) -> None:
    assert to_epoch_ms(value) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1.5, "yesterday", True, None, [MAY_1]])
def test_anything_else_is_one_line(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a datetime, ISO-8601 text"):
        to_epoch_ms(value, what="as_of_timestamp")  # type: ignore[arg-type]


def test_scan_and_changes_take_a_datetime(catalog: SqlCatalog, ns: str) -> None:
    table = icemor.create_table(f"{ns}.t", pa.schema([("id", pa.int64())]), catalog=catalog)
    table.append(pa.table({"id": [1, 2]}))
    first = table.metadata.current_snapshot_id
    table.append(pa.table({"id": [3]}))
    now = datetime.now(UTC)
    assert table.scan(as_of_timestamp=now).count() == 3
    committed = table.metadata.snapshot_by_id(first).timestamp_ms  # type: ignore[union-attr]
    at_first = datetime.fromtimestamp(committed / 1000, UTC)
    assert table.scan(as_of_timestamp=at_first).count() == 2
    assert table.scan(as_of_timestamp=at_first.isoformat()).count() == 2
    feed = table.changes(start_timestamp=at_first, end_timestamp=now.replace(tzinfo=None)).to_arrow()
    assert feed.column("id").to_pylist() == [3]


class DataFrame:
    """An Arrow stream whose class is named as PySpark's DataFrame, in a ``pyspark.`` module (as
    pandas-on-Spark's ``pyspark.pandas.frame.DataFrame`` is): not a Spark DataFrame."""

    __module__ = "pyspark.pandas.frame"

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.table.__arrow_c_stream__(requested_schema)


def test_a_spark_dataframe_is_told_by_its_class_not_its_name(catalog: SqlCatalog, ns: str) -> None:
    # the name alone once sent such a frame to the Spark writer, which failed on it
    table = icemor.create_table(f"{ns}.t", DataFrame(pa.table({"id": [1, 2]})), catalog=catalog)
    assert table.scan().count() == 2
    assert table.append(DataFrame(pa.table({"id": [3]}))) == 1
    assert table.overwrite(DataFrame(pa.table({"id": [4]})), where="id = 1").rows_added == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [2, 3, 4]


def test_the_facade_names_stay_importable_from_icemor_table() -> None:
    from icemor import table, table_maintenance, table_merge, timestamps

    assert table.Maintenance is table_maintenance.Maintenance
    assert table.MergeBuilder is table_merge.MergeBuilder
    assert table.to_epoch_ms is timestamps.to_epoch_ms
    assert table.Timestamp is timestamps.Timestamp
