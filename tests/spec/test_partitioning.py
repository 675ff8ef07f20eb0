"""Partition fields given as text; names and checks follow Iceberg Java's PartitionSpec.Builder."""

from __future__ import annotations

import pytest
from pyiceberg.partitioning import PartitionField
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from icemor.exceptions import InvalidArgumentError
from icemor.spec.partitioning import parse_partition_spec, split_partition_fields

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "d", DateType(), required=False),
    NestedField(5, "score", DoubleType(), required=False),
    NestedField(6, "flag", BooleanType(), required=False),
    NestedField(7, "tstz", TimestamptzType(), required=False),
    NestedField(8, "small", IntegerType(), required=False),
    NestedField(9, "ratio", FloatType(), required=False),
)


def fields(text: str | list[str]) -> list[PartitionField]:
    return list(parse_partition_spec([text] if isinstance(text, str) else text, SCHEMA).fields)


def test_empty_is_unpartitioned() -> None:
    assert parse_partition_spec([], SCHEMA).is_unpartitioned()
    assert parse_partition_spec([""], SCHEMA).is_unpartitioned()


def test_identity() -> None:
    assert fields("id") == [
        PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="id")
    ]


def test_identity_call() -> None:
    assert fields("identity(name)") == [
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="name")
    ]


def test_bucket() -> None:
    assert fields("bucket(16,id)") == [
        PartitionField(source_id=1, field_id=1000, transform=BucketTransform(16), name="id_bucket")
    ]


def test_truncate() -> None:
    assert fields("truncate(4,name)") == [
        PartitionField(source_id=2, field_id=1000, transform=TruncateTransform(4), name="name_trunc")
    ]


@pytest.mark.parametrize(
    ("text", "transform", "name"),
    [
        ("year(ts)", YearTransform(), "ts_year"),
        ("years(d)", YearTransform(), "d_year"),
        ("month(tstz)", MonthTransform(), "tstz_month"),
        ("day(ts)", DayTransform(), "ts_day"),
        ("days(d)", DayTransform(), "d_day"),
        ("hour(ts)", HourTransform(), "ts_hour"),
    ],
)
def test_time_transforms(text: str, transform: object, name: str) -> None:
    (f,) = fields(text)
    assert f.transform == transform
    assert f.name == name
    assert f.source_id == SCHEMA.find_field(text[text.index("(") + 1 : -1]).field_id


def test_whitespace_and_case() -> None:
    assert fields("  BUCKET ( 8 , id )  ") == [
        PartitionField(source_id=1, field_id=1000, transform=BucketTransform(8), name="id_bucket")
    ]


def test_comma_separated_list() -> None:
    assert fields("day(ts),bucket(16,id)") == [
        PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(16), name="id_bucket"),
    ]


def test_list_of_values_and_commas_mixed() -> None:
    assert fields(["name", "day(ts), bucket(4,id)", "truncate(10,small)"]) == [
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="name"),
        PartitionField(source_id=3, field_id=1001, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=1, field_id=1002, transform=BucketTransform(4), name="id_bucket"),
        PartitionField(source_id=8, field_id=1003, transform=TruncateTransform(10), name="small_trunc"),
    ]


def test_split_partition_fields() -> None:
    assert split_partition_fields(["day(ts),bucket(16,id)", " id ,", "truncate(4, name)"]) == [
        "day(ts)",
        "bucket(16,id)",
        "id",
        "truncate(4, name)",
    ]


def test_unknown_column() -> None:
    with pytest.raises(InvalidArgumentError, match="nope"):
        fields("bucket(16,nope)")
    with pytest.raises(InvalidArgumentError):
        fields("nope")
    with pytest.raises(InvalidArgumentError):
        fields("day(ts),day(missing)")


@pytest.mark.parametrize(
    "text",
    [
        "bucket(id)",  # missing N
        "truncate(name)",  # missing W
        "bucket(16 id)",
        "bucket(16,id",
        "bucket16,id)",
        "bucket(x,id)",
        "day(1,ts)",  # a unary transform with an argument
        "frobnicate(ts)",
        "id name",
        "bucket(16,)",
        "()",
    ],
)
def test_bad_syntax(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        fields(text)


@pytest.mark.parametrize(
    "text",
    [
        "bucket(16,score)",  # bucket does not apply to double
        "bucket(16,ratio)",  # nor to float
        "bucket(16,flag)",  # nor to boolean
        "truncate(4,ts)",  # truncate applies to int, long, decimal, string, binary
        "truncate(4,score)",
        "day(id)",  # time transforms need date / timestamp
        "year(name)",
        "hour(d)",  # hour needs a timestamp, not a date
    ],
)
def test_transform_not_applicable(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        fields(text)


@pytest.mark.parametrize("text", ["bucket(0,id)", "truncate(0,name)"])
def test_zero_width_rejected(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        fields(text)


@pytest.mark.parametrize("text", ["id,id", "bucket(16,id),bucket(8,id)"])
def test_duplicate_partition_name_rejected(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        fields(text)


@pytest.mark.parametrize("text", ["day(ts),hour(ts)", "year(ts),month(ts)"])
def test_redundant_time_partitions_rejected(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        fields(text)


def test_partition_label_of_a_dropped_source_column_shows_the_stored_value() -> None:
    """Old specs may partition by a column the current schema dropped: its human form is gone
    with its type, so the stored value shows as it is (and a day of a live column as a date)."""
    from pyiceberg.partitioning import PartitionSpec

    from icemor.spec.partitioning import partition_label

    spec = PartitionSpec(
        PartitionField(source_id=9, field_id=1000, transform=DayTransform(), name="gone_day"),
        PartitionField(source_id=1, field_id=1001, transform=DayTransform(), name="ts_day"),
    )
    schema = Schema(NestedField(1, "ts", TimestampType()))
    assert partition_label(spec, schema, (19844, 19844)) == "gone_day=19844/ts_day=2024-05-01"
    assert partition_label(spec, schema, (None, None)) == "gone_day=null/ts_day=null"
    assert partition_label(PartitionSpec(), schema, ()) == ""
