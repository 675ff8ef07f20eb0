"""The facade's one parser of points in time (``as_of_timestamp=datetime(...)`` once raised
a raw TypeError), judged against values computed by hand."""

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
