"""create-table refuses a location inside another table's, at it, or around it: the
outer table's orphan removal would take the inner one's files for orphans. Nothing is left behind."""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run
from icemor.exceptions import InvalidArgumentError
from oracle import icemor_rows

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("other_location", "name", "needle"),
    [
        ("db2", "db2.t", "inside 'other.x'"),  # the new table would lie inside other.x
        ("db/u", "db.u", "inside 'other.x'"),  # the same location
        ("db/v/data2", "db.v", "around 'other.x'"),  # other.x would lie inside the new table
    ],
)
def test_a_location_nested_with_another_tables_is_refused(
    home: Path,
    parquet: Path,
    capsys: pytest.CaptureFixture[str],
    other_location: str,
    name: str,
    needle: str,
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    catalog = icemor.load_catalog()
    catalog.create_namespace("other")
    location = f"{(home / 'warehouse').as_uri()}/{other_location}"
    catalog.create_table("other.x", schema=pq.read_schema(parquet), location=location)
    before, namespaces = set((home / "warehouse").rglob("*")), icemor.list_namespaces()
    capsys.readouterr()

    assert run(["create-table", name, "--schema-from", str(parquet)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and needle in lines[0] and location in lines[0], lines
    assert set((home / "warehouse").rglob("*")) == before
    assert icemor.list_namespaces() == namespaces  # db2, made for the table, is gone again
    assert icemor.list_tables() == ["db.t", "other.x"]


def test_a_data_path_inside_another_table_is_refused(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    outer = icemor.load_table("db.t").metadata.location
    capsys.readouterr()
    argv = ["create-table", "db.u", "--schema-from", str(parquet)]
    assert run([*argv, "--property", f"write.data.path={outer}/data/u"]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "inside 'db.t'" in lines[0], lines
    assert icemor.list_tables() == ["db.t"]


def test_existing_and_side_by_side_tables(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tables next to each other (``t`` and ``t2``: a shared prefix is no nesting) are created;
    an existing name is still "already exists"."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["create-table", "db.t2", "--schema-from", str(parquet)]) == 0
    assert run(["create-table", "db2.t", "--schema-from", str(parquet)]) == 0
    capsys.readouterr()
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "already exists" in lines[0], lines
    assert icemor.list_tables() == ["db.t", "db.t2", "db2.t"]


# ---------------------------------------------------------------- input types (issue 38, defect 8)


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*")) if root.exists() else set()


def _write(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path)
    return path


def _same_names(*names: str) -> pa.Table:
    return pa.Table.from_arrays([pa.array([1, 2], pa.int64()) for _ in names], names=list(names))


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (pa.table({"id": [1, 2], "d": pa.array([1, 2], pa.duration("us"))}), ["'d'", "duration[us]"]),
        (
            pa.table({"d": pa.array([decimal.Decimal("1.50"), None], pa.decimal256(50, 2))}),
            ["'d'", "decimal256(50, 2)", "38 digits"],
        ),
        (_same_names("id", "id"), ["two columns named 'id'"]),
        (_same_names("id", "ID"), ["'id' and 'ID'", "differ only in case"]),
        (_same_names("id", ""), ["column 2", "empty name"]),
        (
            pa.table({"s": pa.array([{"a": 1, "A": 2}], pa.struct([("a", pa.int64()), ("A", pa.int64())]))}),
            ["struct 's.'", "'a' and 'A'"],
        ),
        (
            pa.table({"l": pa.array([[{"": 1}]], pa.list_(pa.struct([("", pa.int64())])))}),
            ["struct 'l.element.'", "empty name"],
        ),
        (pa.table({"t": pa.array([1], pa.time64("ns"))}), ["'t'", "time64[ns]"]),  # pyiceberg's refusal
    ],
)
def test_a_type_iceberg_cannot_hold_is_one_line_and_leaves_nothing(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: pa.Table,
    needles: list[str],
) -> None:
    """Durations, decimals over 38 digits, duplicate names (also ignoring case, as Spark), empty
    names (at any depth): refused at create, by the CLI (exit 2) and by create_table; before, a
    traceback, or a table whose every append failed ("Can not validate empty avro name")."""
    path = _write(tmp_path / "in.parquet", data)
    warehouse = home / "warehouse"
    assert run(["create-table", "db.t", "--schema-from", str(path)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and all(n in lines[0] for n in needles), lines
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError) as e:
        icemor.create_table("db.t", data)
    assert "\n" not in str(e.value) and all(n in str(e.value) for n in needles), e.value
    assert icemor.list_tables() == [] and icemor.list_namespaces() == []
    assert _files(warehouse) == set()


@pytest.mark.parametrize(
    ("column", "table_type"),
    [
        (pa.array([1, 2], pa.timestamp("us", tz="Europe/Paris")), "timestamptz"),
        (pa.array([1, None], pa.timestamp("ns", tz="America/New_York")), "timestamptz"),
        (pa.array([decimal.Decimal("1.50"), None], pa.decimal256(20, 2)), "decimal(20, 2)"),
        (pa.array([0, 255], pa.uint8()), "int"),
        (pa.array([0, 65535], pa.uint16()), "int"),
        (pa.array([0, 2**32 - 1], pa.uint32()), "long"),
        (pa.array([0, 2**63 - 1], pa.uint64()), "long"),
        (pa.array(["a", "b"], pa.string()).dictionary_encode(), "string"),
        (pa.array([1, None], pa.time32("s")), "time"),
        (pa.array([86_400_000, None], pa.date64()), "date"),
    ],
)
def test_create_takes_the_type_append_converts_to(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], column: pa.Array, table_type: str
) -> None:
    """create-table from a file, then append of the same file: one set of rules, so the append
    is accepted and the table holds the input's values (the same instants, numbers, strings)."""
    data = pa.table({"c": column})
    path = _write(tmp_path / "in.parquet", data)
    assert run(["create-table", "db.t", "--schema-from", str(path)]) == 0
    t = icemor.load_table("db.t")
    assert str(t.pyiceberg.schema().find_field("c").field_type) == table_type
    assert run(["append", "db.t", str(path)]) == 0, capsys.readouterr().err
    got = t.refresh().scan().to_arrow().column("c").to_pylist()
    expected = pq.read_table(path).column("c")
    if pa.types.is_timestamp(column.type):  # the same instants (in UTC), nanoseconds floored
        expected = pc.floor_temporal(expected, unit="microsecond").cast(pa.timestamp("us", tz="UTC"))
    assert got == expected.to_pylist()


@pytest.mark.parametrize(
    ("column", "table_type", "limit"),
    [
        (pa.array([1, 2**63, 2**64 - 1, None], pa.uint64()), "long", 2**63 - 1),
        (pa.array([1, 2**31, 2**32 - 1, None], pa.uint32()), "int", 2**31 - 1),
    ],
)
def test_unsigned_values_beyond_the_column_are_refused_and_the_rest_accepted(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    column: pa.Array,
    table_type: str,
    limit: int,
) -> None:
    """uint64 into a long (what create makes of it), uint32 into an int: appended when every value
    fits, refused in one line naming the column when one does not (no commit); before, a uint64
    file created a long column that the append of the same file refused by type."""
    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    catalog.create_table(
        "db.t", schema=pa.schema([("c", pa.int64() if table_type == "long" else pa.int32())])
    )
    t = icemor.load_table("db.t")
    fits = _write(tmp_path / "fits.parquet", pa.table({"c": column.slice(0, 1)}))
    over = _write(tmp_path / "over.parquet", pa.table({"c": column}))
    assert run(["append", "db.t", str(fits)]) == 0
    capsys.readouterr()
    assert run(["append", "db.t", str(over)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "'c'" in lines[0] and "2 value(s)" in lines[0] and str(limit) in lines[0], (
        lines
    )
    assert t.refresh().scan().to_arrow().column("c").to_pylist() == [1]
    if table_type == "long":  # create_table makes a long of uint64 (of uint32 too: always fits)
        with pytest.raises(InvalidArgumentError, match="2 value"):
            icemor.create_table("db.u", pa.table({"c": column}))
    assert icemor.list_tables() == ["db.t"]


@pytest.mark.parametrize(
    ("data", "options", "needle"),
    [
        (pa.table({"u": pa.array([1, 2**64 - 1], pa.uint64())}), {}, "exceed"),
        (pa.table({"id": pa.array([1, None], pa.int64())}), {"identifier_fields": ["id"]}, "NOT NULL"),
        (  # the first batch is written (its partition directory made) before the second fails
            pa.Table.from_batches(
                [
                    pa.record_batch({"id": pa.array([1], pa.int64()), "p": ["a"]}),
                    pa.record_batch({"id": pa.array([None], pa.int64()), "p": ["b"]}),
                ]
            ),
            {"identifier_fields": ["id"], "partition_by": ["p"]},
            "NOT NULL",
        ),
    ],
)
def test_a_failed_create_from_data_leaves_nothing(
    home: Path, data: pa.Table, options: dict[str, list[str]], needle: str
) -> None:
    """The table made for data whose append fails is undone: no catalog entry, no namespace made
    for it, no metadata file and no directory (an empty table directory was left before)."""
    icemor.load_catalog().create_namespace("kept")
    before = _files(home / "warehouse")
    for name in ("kept.t", "made.t", "made.deeper.t"):
        with pytest.raises(InvalidArgumentError, match=needle):
            icemor.create_table(name, data, **options)  # type: ignore[arg-type]
        assert _files(home / "warehouse") == before, name
    assert icemor.list_namespaces() == ["kept"] and icemor.list_tables() == []


def test_created_types_and_values_are_those_spark_gives_the_same_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Parquet file with a zoned (Europe/Paris) timestamp, unsigned integers, a decimal256 and
    a date64: icemor's create-table + append and Spark's CTAS over the same file (Iceberg Java)
    give the same Iceberg types and the same rows."""
    import datetime as dt

    paris = [dt.datetime(2024, 5, 1, 10, 30, tzinfo=dt.UTC), None]
    data = pa.table(
        {
            "tz": pa.array(paris, pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us", tz="Europe/Paris")),
            "u8": pa.array([255, None], pa.uint8()),
            "u16": pa.array([65535, 0], pa.uint16()),
            "u32": pa.array([2**32 - 1, 0], pa.uint32()),
            "d": pa.array([decimal.Decimal("123456789012345678.25"), None], pa.decimal256(20, 2)),
            "day": pa.array([dt.date(2024, 5, 1), None], pa.date32()),
        }
    )
    path = tmp_path / "in.parquet"
    pq.write_table(data, path)
    assert run(["create-table", f"{ns}.mine", "--schema-from", str(path)]) == 0
    assert run(["append", f"{ns}.mine", str(path)]) == 0, capsys.readouterr().err
    oracle.sql(
        f"CREATE TABLE {oracle.qualified(ns + '.java')} USING iceberg AS SELECT * FROM parquet.`{path}`"
    )
    mine, java = catalog.load_table(f"{ns}.mine").schema(), catalog.load_table(f"{ns}.java").schema()
    assert [(f.name, str(f.field_type)) for f in mine.fields] == [
        (f.name, str(f.field_type)) for f in java.fields
    ]
    assert str(mine.find_field("tz").field_type) == "timestamptz"
    # Java reads the same rows from both tables; icemor too
    assert oracle.rows(f"{ns}.mine") == oracle.rows(f"{ns}.java")
    assert icemor_rows(catalog, f"{ns}.mine") == icemor_rows(catalog, f"{ns}.java")
    assert len(icemor_rows(catalog, f"{ns}.mine")) == 2
