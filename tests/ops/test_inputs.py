"""The input-type rules of create and of every write (icemor.ops.inputs): the type a new table
takes from an input column is the type TableRows converts that column to, and unsigned values
beyond the table's signed column are refused by value, never wrapped.

Expected types are Iceberg's (and Spark's reading of the same Parquet file: zoned timestamps are
timestamptz, uint8/16 an int, uint32 a long, decimals at most 38 digits), written by hand."""

from __future__ import annotations

import decimal
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField

from icemor.exceptions import InvalidArgumentError
from icemor.ops.inputs import TableRows, input_batches, new_table_schema, read_arrow, schema_of


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (pa.timestamp("us", tz="Europe/Paris"), pa.timestamp("us", tz="UTC")),
        (pa.timestamp("ns", tz="+02:00"), pa.timestamp("ns", tz="UTC")),  # create downcasts ns later
        (pa.timestamp("ms"), pa.timestamp("ms")),
        (pa.decimal256(38, 10), pa.decimal128(38, 10)),
        (pa.decimal128(20, 2), pa.decimal128(20, 2)),
        (pa.uint8(), pa.int32()),
        (pa.uint16(), pa.int32()),
        (pa.uint32(), pa.int64()),
        (pa.uint64(), pa.int64()),
        (pa.time32("ms"), pa.time64("us")),
        (pa.date64(), pa.date32()),
        (pa.dictionary(pa.int8(), pa.string()), pa.string()),
        (
            pa.struct([("at", pa.timestamp("us", tz="Asia/Tokyo")), ("n", pa.uint32())]),
            pa.struct([("at", pa.timestamp("us", tz="UTC")), ("n", pa.int64())]),
        ),
        (pa.list_(pa.uint64()), pa.list_(pa.int64())),
        (pa.large_list(pa.uint8()), pa.large_list(pa.int32())),
        (pa.map_(pa.string(), pa.decimal256(10, 1)), pa.map_(pa.string(), pa.decimal128(10, 1))),
    ],
)
def test_new_table_types(source: pa.DataType, expected: pa.DataType) -> None:
    got = new_table_schema(pa.schema([("c", source)]), what="the data")
    assert got.field("c").type == expected


@pytest.mark.parametrize(
    ("schema", "needles"),
    [
        (pa.schema([("d", pa.duration("s"))]), ["'d'", "duration[s]"]),
        (pa.schema([("i", pa.month_day_nano_interval())]), ["'i'", "month_day_nano_interval"]),
        (pa.schema([("d", pa.decimal256(39, 0))]), ["'d'", "38 digits"]),
        (pa.schema([("s", pa.struct([("x", pa.duration("ms"))]))]), ["'s.x'", "duration"]),
        (pa.schema([("a", pa.int64()), ("A", pa.int64())]), ["'a' and 'A'"]),
        (pa.schema([("", pa.int64())]), ["column 1", "empty name"]),
        (pa.schema([("m", pa.map_(pa.string(), pa.struct([("", pa.int8())])))]), ["'m.value.'", "empty"]),
    ],
)
def test_new_table_refusals_name_the_column(schema: pa.Schema, needles: list[str]) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        new_table_schema(schema, what="the data")
    assert "\n" not in str(e.value) and all(n in str(e.value) for n in needles), e.value


_SCHEMA = Schema(NestedField(1, "i", IntegerType()), NestedField(2, "l", LongType()))


@pytest.mark.parametrize("strict", [True, False])
def test_unsigned_values_convert_when_they_fit_and_are_refused_when_not(strict: bool) -> None:
    """uint32 into an int and uint64 into a long: the values that fit are kept exactly; one that
    does not is refused in one line naming the column, strict (append) or not (MERGE, CDC),
    never wrapped around to a negative number."""
    rows = TableRows(_SCHEMA, table="db.t", strict=strict)
    fits = pa.record_batch(
        {"i": pa.array([0, 2**31 - 1, None], pa.uint32()), "l": pa.array([0, 2**63 - 1, None], pa.uint64())}
    )
    got = rows.convert(fits, what="the data")
    assert got.column("i").type == pa.int32() and got.column("l").type == pa.int64()
    assert got.column("i").to_pylist() == [0, 2**31 - 1, None]
    assert got.column("l").to_pylist() == [0, 2**63 - 1, None]
    for column, value in (("i", 2**31), ("l", 2**64 - 1)):
        batch = fits.set_column(
            fits.schema.get_field_index(column),
            column,
            pa.array([1, value, value], fits.column(column).type),
        )
        with pytest.raises(InvalidArgumentError) as e:
            rows.convert(batch, what="the data")
        text = str(e.value)
        assert f"'{column}'" in text and "2 value(s)" in text and str(value) in text, text


def test_decimal256_converts_to_the_tables_decimal() -> None:
    schema = Schema(NestedField(1, "d", DecimalType(20, 2)))
    rows = TableRows(schema, table="db.t")
    batch = pa.record_batch({"d": pa.array([decimal.Decimal("12.34"), None], pa.decimal256(20, 2))})
    assert rows.convert(batch, what="the data").column("d").to_pylist() == [decimal.Decimal("12.34"), None]


def test_uuids_inside_structs_and_lists_convert() -> None:
    """A struct or list of uuids (as icemor reads them: Arrow's uuid extension) is checked and
    converted like any column; building the check's empty batch once failed on them."""
    from pyiceberg.types import ListType, StructType, UUIDType

    schema = Schema(
        NestedField(1, "s", StructType(NestedField(2, "u", UUIDType()))),
        NestedField(3, "l", ListType(4, UUIDType(), element_required=False)),
    )
    convert = TableRows(schema, table="db.t")
    value = b"\x01" * 16
    uuids = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([value, None], pa.binary(16)))
    struct = pa.StructArray.from_arrays([uuids], names=["u"], mask=pa.array([False, True]))
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 2], pa.int32()), uuids, mask=pa.array([False, True]))
    rows = pa.table({"s": struct, "l": lists})
    out = convert.convert_table(rows, what="the data")
    assert out.schema == convert.arrow_schema
    assert out.column("s").to_pylist()[0]["u"].bytes == value
    assert out.column("l").to_pylist()[1] is None


class _IndexedFrame(pd.DataFrame):
    """A pandas DataFrame subclass from another module (as geopandas' GeoDataFrame is)."""

    @property
    def _constructor(self) -> type[_IndexedFrame]:
        return _IndexedFrame


def test_a_pandas_subclass_is_a_pandas_frame_its_index_left_out() -> None:
    # told by its class: taken by the Arrow stream protocol instead, its index became a column
    frame = _IndexedFrame({"a": [1, 2]}, index=[10, 20])
    assert read_arrow(frame, what="the rows").column_names == ["a"]
    assert schema_of(frame, what="the rows")[0].names == ["a"]
    batches = input_batches(frame, what="the rows", batch_rows=1).batches
    assert [batch.schema.names for _, batch in batches] == [["a"], ["a"]]


def test_a_polars_lazyframe_subclass_is_collected() -> None:
    pl = pytest.importorskip("polars")

    class Lazy(pl.LazyFrame):
        """A polars LazyFrame subclass from another module."""

    # told by its class: a LazyFrame has no Arrow stream, so it was refused as an unknown input
    lazy = Lazy(pl.DataFrame({"a": [1, 2]}))
    assert read_arrow(lazy, what="the rows").column("a").to_pylist() == [1, 2]
    assert schema_of(lazy, what="the rows")[0].names == ["a"]
    batches = input_batches(lazy, what="the rows", batch_rows=10).batches
    assert [batch.num_rows for _, batch in batches] == [2]


def test_a_pandas_frame_arrow_refuses_is_one_line_whole_or_in_batches() -> None:
    frame = pd.DataFrame({"a": [1, "x"]})  # an object column Arrow cannot type
    with pytest.raises(
        InvalidArgumentError, match=r"^cannot convert the rows \(a pandas DataFrame\) to Arrow: "
    ):
        read_arrow(frame, what="the rows")
    with pytest.raises(
        InvalidArgumentError, match=r"^cannot convert the rows \(a pandas DataFrame\) to Arrow: "
    ):
        list(input_batches(frame, what="the rows", batch_rows=10).batches)


class _RefusingWriter:
    """A data writer whose Arrow refuses every batch with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def write(self, batch: pa.RecordBatch) -> None:
        raise self.error


def test_rows_the_writer_refuses_are_one_line_naming_them_and_the_table() -> None:
    convert = TableRows(Schema(NestedField(1, "id", LongType())), table="db.t")
    batch = pa.record_batch({"id": pa.array([1], pa.int32())})
    writer: Any = _RefusingWriter(pa.ArrowInvalid("bad partition value\nsecond line"))
    with pytest.raises(InvalidArgumentError) as e:
        convert.write(writer, batch, what="the data")
    assert str(e.value) == "cannot write the rows of the data to db.t: bad partition value"
    own = InvalidArgumentError("already one line")  # an icemor error passes as it is
    passing: Any = _RefusingWriter(own)
    with pytest.raises(InvalidArgumentError) as e:
        convert.write(passing, batch, what="the data")
    assert e.value is own
    with pytest.raises(InvalidArgumentError, match=r"does not match the schema of db\.t"):
        convert.write(writer, pa.record_batch({"other": [1]}), what="the data")  # converted first
