"""Every private pyiceberg name icemor borrows still exists and still behaves as relied upon.

A pyiceberg upgrade that moves or changes one of them fails here, by name, not deep in a read.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.expressions import GreaterThan
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from icemor._compat import pyiceberg as compat

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "cat", StringType(), required=False),
)


@pytest.mark.parametrize(("module", "name"), compat.BORROWED)
def test_borrowed_name_exists(module: str, name: str) -> None:
    obj: object = importlib.import_module(module)
    for part in name.split("."):
        assert hasattr(obj, part), f"{module}.{name} moved: update icemor._compat"
        obj = getattr(obj, part)


def test_to_requested_schema_projects_by_field_id() -> None:
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64())})
    file_schema = Schema(NestedField(1, "id", LongType(), required=False))
    out = compat.to_requested_schema(
        SCHEMA, file_schema, batch, downcast_ns_timestamp_to_us=True, missing_fields={2: "x"}
    )
    assert out.column_names == ["id", "cat"]
    assert out.column(0).to_pylist() == [1, 2]
    assert out.column(1).to_pylist() == ["x", "x"]  # an identity-partition constant fills the column


def test_partition_constants_for_a_file_without_the_partition_column() -> None:
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat"), spec_id=1)
    data_file = DataFile.from_args(partition=Record("a"))
    assert compat.partition_constants(data_file, SCHEMA, spec, {1}) == {2: "a"}
    assert compat.partition_constants(data_file, SCHEMA, spec, {1, 2}) == {}


def test_arrow_schema_without_ids() -> None:
    arrow = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("ns"))])
    schema = compat.arrow_schema_to_iceberg_without_ids(arrow, downcast_ns_timestamp_to_us=True)
    assert [f.name for f in schema.fields] == ["id", "ts"]


def test_inclusive_metrics_evaluator_prunes_by_bounds() -> None:
    from pyiceberg.conversions import to_bytes

    evaluate = compat.inclusive_metrics_evaluator(SCHEMA, GreaterThan("id", 100), case_sensitive=True)

    def data_file(upper: int) -> DataFile:
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path="f.parquet",
            file_format=FileFormat.PARQUET,
            record_count=10,
            file_size_in_bytes=1,
            value_counts={1: 10},
            null_value_counts={1: 0},
            lower_bounds={1: to_bytes(LongType(), 0)},
            upper_bounds={1: to_bytes(LongType(), upper)},
        )

    assert evaluate(data_file(1000)) is True
    assert evaluate(data_file(50)) is False


def test_v3_data_file_positions_are_the_named_fields() -> None:
    from pyiceberg.manifest import DATA_FILE_TYPE

    fields = DATA_FILE_TYPE[3].fields
    for name, pos in compat.V3_DATA_FILE_POSITIONS.items():
        assert fields[pos].name == name
    assert set(compat.V3_DATA_FILE_POSITIONS) == {
        "first_row_id",
        "referenced_data_file",
        "content_offset",
        "content_size_in_bytes",
    }


def test_delete_manifest_writer_writes_delete_content(tmp_path: Path) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    io = PyArrowFileIO()
    df = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path="d.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=3,
        file_size_in_bytes=10,
    )
    path = str(tmp_path / "m.avro")
    with compat.DeleteManifestWriterV2(
        UNPARTITIONED_PARTITION_SPEC, SCHEMA, io.new_output(path), 7, "deflate"
    ) as writer:
        writer.add_entry(
            ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=df)
        )
    manifest = writer.to_manifest_file()
    assert manifest.content == ManifestContent.DELETES
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS

    with AvroFile[ManifestEntry](io.new_input(path), MANIFEST_ENTRY_SCHEMAS[2]) as reader:
        assert reader.header.meta["content"] == "deletes"
    manifest.sequence_number = 1
    entries = manifest.fetch_manifest_entry(io)
    assert [int(e.data_file.content) for e in entries] == [int(DataFileContent.POSITION_DELETES)]


def test_to_file_schema_adds_field_ids_nulls_and_microseconds() -> None:
    from pyiceberg.schema import sanitize_column_names
    from pyiceberg.types import TimestampType

    table = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "my-col", StringType(), required=False),
        NestedField(3, "ts", TimestampType(), required=False),
    )
    file_schema = sanitize_column_names(table)
    data = pa.table({"ts": pa.array([1_000, 2_000], pa.timestamp("ns")), "id": pa.array([1, 2], pa.int64())})
    out = compat.to_file_schema(table, file_schema, data, format_version=2)
    assert out.column_names == [f.name for f in file_schema.fields]  # table order, Avro-safe names
    assert [f.metadata[b"PARQUET:field_id"] for f in out.schema] == [b"1", b"2", b"3"]
    assert out.column(1).to_pylist() == [None, None]  # a missing optional column is NULL
    assert out.schema.field("ts").type == pa.timestamp("us")
    # a subset schema (the key of equality deletes) keeps only its columns
    key = Schema(table.find_field(1))
    assert compat.to_file_schema(table, key, data, format_version=2).column_names == ["id"]
    empty = compat.to_file_schema(table, key, data.slice(0, 0), format_version=2)
    assert empty.num_rows == 0 and empty.column_names == ["id"]


def test_delete_manifest_writes_equality_ids_as_list_of_int(tmp_path: Path) -> None:
    """The spec's ``list<int>``, which Iceberg Java requires (pyiceberg 0.12 declares ``list<long>``)."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS, ManifestEntry, ManifestEntryStatus
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    io = PyArrowFileIO()
    path = str(tmp_path / "eq.avro")
    df = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path="/x/eq.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=2,
        file_size_in_bytes=10,
        equality_ids=[1, 2],
    )
    with compat.DeleteManifestWriterV2(
        UNPARTITIONED_PARTITION_SPEC, SCHEMA, io.new_output(path), 7, "deflate"
    ) as writer:
        writer.add_entry(
            ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=df)
        )
    with AvroFile[ManifestEntry](io.new_input(path), MANIFEST_ENTRY_SCHEMAS[2]) as reader:
        written = reader.header.get_schema()
    assert str(written.find_field(136).field_type) == "int"
    manifest = writer.to_manifest_file()
    manifest.sequence_number = 1
    [entry] = manifest.fetch_manifest_entry(io)  # pyiceberg reads int back as its long
    assert entry.data_file.equality_ids == [1, 2]


def test_metadata_writes_records_the_file_a_sql_catalog_commit_writes(tmp_path: Path) -> None:
    """The hook on ``MetastoreCatalog._write_metadata`` sees the path before the write and knows
    when the file is complete; a catalog object is hooked once, other objects not at all."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    assert compat.record_metadata_writes(catalog) is True
    assert compat.record_metadata_writes(catalog) is True  # idempotent
    with compat.metadata_writes() as writes, table.transaction() as tx:
        tx.set_properties(x="1")
    assert [(w.path, w.done) for w in writes] == [(table.metadata_location, True)]
    other = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    with compat.metadata_writes() as writes, other.load_table("db.t").transaction() as tx:
        tx.set_properties(x="2")
    assert writes == []  # not hooked
    with compat.metadata_writes() as writes:
        pass
    assert writes == []
    other.engine.dispose()
    catalog.engine.dispose()
