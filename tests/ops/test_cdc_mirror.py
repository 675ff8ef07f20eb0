"""The sink's create-if-missing (icemor.ops.cdc.mirror): like the feed's source, or from the stream's columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

import icemor
from icemor.catalog import table_locations
from icemor.exceptions import InvalidArgumentError
from icemor.ops.cdc.mirror import create_mirror

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(4, "extra", StringType(), required=False),
)
SPEC = ["bucket(8, id)", "truncate(3, s)", "day(ts)", "extra"]
FEED = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("ts", pa.timestamp("us", "UTC")),
        ("_change_type", pa.string()),
        ("_change_ordinal", pa.int32()),
        ("_commit_snapshot_id", pa.int64()),
    ]
)


def test_like_the_source_for_the_columns_the_stream_writes(catalog: SqlCatalog, ns: str) -> None:
    source = icemor.create_table(
        f"{ns}.src", SCHEMA, partition_by=SPEC, format_version=3, catalog=catalog
    ).pyiceberg
    made = create_mirror(
        catalog,
        f"{ns}.m",
        FEED,
        key=["id"],
        source=source,
        tables=lambda: table_locations(catalog, strict=False),
    )
    assert [(f.name, str(f.field_type), f.required) for f in made.schema().fields] == [
        ("id", "long", True),
        ("s", "string", False),
        ("ts", "timestamptz", False),
    ]
    assert made.schema().identifier_field_names() == {"id"}
    # the field over a column the stream does not write (extra) is left out
    assert [(str(f.transform), made.schema().find_column_name(f.source_id)) for f in made.spec().fields] == [
        ("bucket[8]", "id"),
        ("truncate[3]", "s"),
        ("day", "ts"),
    ]
    assert made.metadata.format_version == 3


def test_another_stream_gives_its_columns(catalog: SqlCatalog, ns: str) -> None:
    columns = pa.schema([("k", pa.string()), ("n", pa.int32()), ("_change_type", pa.string())])
    made = create_mirror(
        catalog,
        f"{ns}.m",
        columns,
        key=["k"],
        source=None,
        tables=lambda: table_locations(catalog, strict=False),
    )
    assert [(f.name, str(f.field_type), f.required) for f in made.schema().fields] == [
        ("k", "string", True),
        ("n", "int", False),
    ]
    assert made.spec().is_unpartitioned()
    assert made.metadata.format_version == 2
    with pytest.raises(InvalidArgumentError, match="exists"):
        create_mirror(
            catalog,
            f"{ns}.m",
            columns,
            key=["k"],
            source=None,
            tables=lambda: table_locations(catalog, strict=False),
        )


def test_options_say_otherwise(catalog: SqlCatalog, ns: str) -> None:
    """The sink's ``partition-by`` and ``format-version`` win over the source's."""
    source = icemor.create_table(
        f"{ns}.src", SCHEMA, partition_by=SPEC, format_version=3, catalog=catalog
    ).pyiceberg
    made = create_mirror(
        catalog,
        f"{ns}.m",
        FEED,
        key=["id"],
        source=source,
        partition_by=["bucket(4, id)", "s"],
        format_version=2,
        tables=lambda: table_locations(catalog, strict=False),
    )
    assert [str(f.transform) for f in made.spec().fields] == ["bucket[4]", "identity"]
    assert made.metadata.format_version == 2


@pytest.mark.parametrize(
    ("given", "want"),
    [("day(ts), bucket(16, id)", ("day(ts)", "bucket(16, id)")), ("s", ("s",)), (None, None)],
)
def test_the_sink_option_splits_fields_outside_parentheses(
    given: str | None, want: tuple[str, ...] | None
) -> None:
    pytest.importorskip("pyspark")
    from icemor.engines.spark.datasource.options import sink_request

    options = {"key": "id", "app-id": "a", "path": "ns.t"}
    if given is not None:
        options["partition-by"] = given
    assert sink_request(options).partition_by == want
    with pytest.raises(InvalidArgumentError, match="must list partition fields"):
        sink_request({**options, "partition-by": "day(ts), "})
