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
from icemor._compat.pyiceberg import manifest_read

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


# ids: 1 id, 2 tags (list, element 5), 3 info (struct: 6 inner list, element 7), 4 attrs (map, 8 key,
# 9 value); every element or value a struct of 10/11/12 x
_ELEMENT = pa.struct([pa.field("x", pa.int64())])
_NESTED_ARROW = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("tags", pa.list_(_ELEMENT)),
        pa.field("info", pa.struct([pa.field("inner", pa.list_(_ELEMENT))])),
        pa.field("attrs", pa.map_(pa.string(), _ELEMENT)),
    ]
)
# NULL list, empty list, list of a NULL struct, list of a struct, at the top and in a struct; the
# same for a map; the NULLs in rows 1 and 4 are what pyiceberg's projection turned into [] / {}
_NESTED_ROWS = [
    {"id": 1, "tags": None, "info": {"inner": None}, "attrs": None},
    {"id": 2, "tags": [], "info": {"inner": []}, "attrs": []},
    {"id": 3, "tags": [None], "info": None, "attrs": [("k", None)]},
    {"id": 4, "tags": None, "info": {"inner": [{"x": 4}]}, "attrs": None},
    {"id": 5, "tags": [{"x": 5}, None], "info": {"inner": [None]}, "attrs": [("k", {"x": 5})]},
]


def _nested_schema() -> Schema:
    from pyiceberg.types import ListType, MapType, StructType

    def element(field_id: int) -> StructType:
        return StructType(NestedField(field_id, "x", LongType(), required=False))

    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "tags", ListType(5, element(10), element_required=False), required=False),
        NestedField(
            3,
            "info",
            StructType(
                NestedField(6, "inner", ListType(7, element(11), element_required=False), required=False)
            ),
            required=False,
        ),
        NestedField(
            4, "attrs", MapType(8, StringType(), 9, element(12), value_required=False), required=False
        ),
    )


@pytest.mark.parametrize("sliced", [False, True])
def test_projection_keeps_null_lists_and_maps_of_structs(sliced: bool) -> None:
    """pyiceberg 0.12 rebuilds a list or map of structs without its validity (iceberg-python#3833):
    a NULL one became [] / {} on read and on write; both of icemor's projections keep it NULL."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = _nested_schema()
    data = pa.Table.from_pylist(_NESTED_ROWS, schema=_NESTED_ARROW)
    # a slice (offset 1) over a table with a row more before it: offsets of a slice need a copy
    rows = _NESTED_ROWS
    if sliced:
        data = pa.Table.from_pylist([_NESTED_ROWS[-1], *_NESTED_ROWS], schema=_NESTED_ARROW).slice(1)
    written = compat.to_file_schema(schema, schema, data, format_version=2)
    assert written.to_pylist() == rows
    batch = pa.Table.from_pylist(rows, schema=schema_to_pyarrow(schema)).to_batches()[0]
    if sliced:
        wider = pa.Table.from_pylist([rows[-1], *rows], schema=schema_to_pyarrow(schema))
        batch = wider.combine_chunks().to_batches()[0].slice(1)
    read = compat.to_requested_schema(
        schema, schema, batch, downcast_ns_timestamp_to_us=True, missing_fields={}
    )
    assert read.to_pylist() == rows
    # a projection that rebuilds the structs (a column not in the file is added) keeps them too
    wider_schema = Schema(
        *schema.fields[:1],
        NestedField(13, "added", LongType(), required=False),
        *schema.fields[1:],
    )
    read = compat.to_requested_schema(
        wider_schema, schema, batch, downcast_ns_timestamp_to_us=True, missing_fields={}
    )
    assert read.column("tags").to_pylist() == [r["tags"] for r in rows]
    assert read.column("attrs").to_pylist() == [r["attrs"] for r in rows]


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


def test_manifest_writers_and_v3_reader_round_trip(tmp_path: Path) -> None:
    """A delete manifest and its manifest list, written by the wrapped writers and read back by the
    v3 reader: entries keep their content, the v3-only fields read as null in a v2 manifest, and
    the spec id is given from outside (it is not a manifest field)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, read_manifest_list
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    io = PyArrowFileIO()
    df = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path="/x/d.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=3,
        file_size_in_bytes=10,
    )
    path = str(tmp_path / "m.avro")
    with compat.manifest_writer(
        UNPARTITIONED_PARTITION_SPEC, SCHEMA, io.new_output(path), 7, deletes=True
    ) as writer:
        writer.add_entry(
            ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=df)
        )
    manifest = writer.to_manifest_file()
    list_path = str(tmp_path / "snap.avro")
    with compat.manifest_list_writer(
        io.new_output(list_path), snapshot_id=7, parent_snapshot_id=None, sequence_number=4
    ) as list_writer:
        list_writer.add_manifests([manifest])
    [listed] = read_manifest_list(io.new_input(list_path))
    assert listed.manifest_path == path
    assert listed.sequence_number == 4  # the list assigns the added manifest's sequence number

    [entry] = compat.read_manifest_entries_v3(io.new_input(path))
    assert entry.status == ManifestEntryStatus.ADDED
    assert entry.data_file.content == DataFileContent.POSITION_DELETES
    assert entry.data_file.file_path == "/x/d.parquet"
    assert compat.v3_fields(entry.data_file) == (None, None, None)
    compat.set_spec_id(entry.data_file, 5)
    assert entry.data_file.spec_id == 5


def test_resolved_reader_is_shared_by_files_of_one_schema_and_reads_as_pyiceberg(tmp_path: Path) -> None:
    """Two manifests of one writer schema: the second reuses the first's resolved reader, and
    both read exactly as pyiceberg's own ``AvroFile`` reads them."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS, ManifestEntry, ManifestEntryStatus
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    io = PyArrowFileIO()
    paths = []
    for i in range(2):
        df = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=f"/x/{i}.parquet",
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=3 + i,
            file_size_in_bytes=10,
        )
        path = str(tmp_path / f"m{i}.avro")
        with compat.manifest_writer(
            UNPARTITIONED_PARTITION_SPEC, SCHEMA, io.new_output(path), 7, deletes=False
        ) as writer:
            writer.add_entry(
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=df)
            )
        paths.append(path)
    manifest_read._READERS.clear()
    first = compat.read_manifest_entries_v3(io.new_input(paths[0]))
    assert len(manifest_read._READERS) == 1
    (resolved,) = manifest_read._READERS.values()
    second = compat.read_manifest_entries_v3(io.new_input(paths[1]))
    assert list(manifest_read._READERS.values()) == [resolved]  # the same reader, not resolved again
    for path, ours in zip(paths, (first, second), strict=True):
        with AvroFile[ManifestEntry](
            io.new_input(path),
            MANIFEST_ENTRY_SCHEMAS[3],
            manifest_read._ENTRY_READ_TYPES,
            manifest_read._ENTRY_READ_ENUMS,
        ) as reader:
            theirs = list(reader)
        assert [(e.status, e.data_file.file_path, e.data_file.record_count) for e in ours] == [
            (e.status, e.data_file.file_path, e.data_file.record_count) for e in theirs
        ]
    assert [e.data_file.record_count for e in second] == [4]


def test_snapshot_summary_counts_files_and_carries_totals(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table.snapshots import Operation

    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    metadata = catalog.create_table("db.t", schema=SCHEMA).metadata
    added = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="/x/a.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=3,
        file_size_in_bytes=100,
    )
    added.spec_id = 0
    summary = compat.snapshot_summary(
        metadata,
        operation=Operation.REPLACE,
        counted_as=Operation.OVERWRITE,
        added=[added],
        removed=[],
        properties={"icemor.x": "1"},
        partition_summary_limit=0,
        previous={"total-records": "10", "total-data-files": "2", "total-delete-files": "0"},
    )
    assert summary.operation == Operation.REPLACE
    assert summary["added-data-files"] == "1"
    assert summary["added-records"] == "3"
    assert summary["total-records"] == "13"
    assert summary["total-data-files"] == "3"
    assert summary["icemor.x"] == "1"
    catalog.engine.dispose()


def test_schema_update_changes_are_staged_not_committed(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table.update import AddSchemaUpdate, AssertCurrentSchemaId, SetCurrentSchemaUpdate

    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    update = table.update_schema().add_column("x", StringType())
    updates, requirements = compat.schema_update_changes(update)
    assert [type(u) for u in updates] == [AddSchemaUpdate, SetCurrentSchemaUpdate]
    assert [type(r) for r in requirements] == [AssertCurrentSchemaId]
    assert [f.name for f in catalog.load_table("db.t").schema().fields] == ["id", "cat"]
    catalog.engine.dispose()


def test_snapshot_producer_changes_use_the_given_snapshot_id_and_commit_nothing(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "cat": ["a"]}), path)
    producer = table.transaction().update_snapshot().fast_append()
    producer.append_data_file(parquet_file_to_data_file(table.io, table.metadata, path))
    updates, requirements = compat.snapshot_producer_changes(producer, 1234567)
    assert [type(u) for u in updates] == [AddSnapshotUpdate, SetSnapshotRefUpdate]
    snapshot = updates[0].snapshot  # type: ignore[attr-defined]
    assert snapshot.snapshot_id == 1234567
    assert "snap-1234567-" in snapshot.manifest_list
    assert [
        e.snapshot_id for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io)
    ] == [1234567]
    assert [type(r) for r in requirements] == [AssertRefSnapshotId]
    assert catalog.load_table("db.t").metadata.snapshots == []  # not committed
    catalog.engine.dispose()


def test_staged_create_changes_are_the_updates_of_the_create(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.table import StagedTable
    from pyiceberg.table.update import AssignUUIDUpdate, SetLocationUpdate

    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    staged, updates = compat.staged_create_changes(catalog.create_table_transaction("db.t", schema=SCHEMA))
    assert isinstance(staged, StagedTable)
    assert staged.name() == ("db", "t")
    kinds = {type(u) for u in updates}
    assert AssignUUIDUpdate in kinds and SetLocationUpdate in kinds
    uuid = next(u.uuid for u in updates if isinstance(u, AssignUUIDUpdate))
    assert uuid == staged.metadata.table_uuid
    with pytest.raises(NoSuchTableError):  # staged only
        catalog.load_table("db.t")
    catalog.engine.dispose()


def test_parquet_statistics_from_the_footer(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    arrow = pa.schema(
        [
            pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
            pa.field("cat", pa.string(), metadata={b"PARQUET:field_id": b"2"}),
        ]
    )
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": [1, 5, None], "cat": ["a", "b", "c"]}, schema=arrow), path)
    stats = compat.parquet_statistics(
        pq.read_metadata(path), SCHEMA, {"write.metadata.metrics.column.cat": "counts"}
    )
    assert stats["record_count"] == 3
    assert stats["value_counts"] == {1: 3, 2: 3}
    assert stats["null_value_counts"] == {1: 1, 2: 0}
    from pyiceberg.conversions import from_bytes

    assert from_bytes(LongType(), stats["lower_bounds"][1]) == 1
    assert from_bytes(LongType(), stats["upper_bounds"][1]) == 5
    assert 2 not in stats["lower_bounds"]  # "counts" mode: no bounds for cat


def test_v3_manifest_and_manifest_list_round_trip(tmp_path: Path) -> None:
    """The v3 writers write the v3 fields; pyiceberg's own v3 read schema reads them back."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

    io = PyArrowFileIO()
    spec = PartitionSpec(spec_id=0)
    dv = compat.v3_data_file(
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///t/data/d.puffin",
        file_format=FileFormat.PUFFIN,
        partition=Record(),
        record_count=3,
        file_size_in_bytes=100,
        referenced_data_file="file:///t/data/a.parquet",
        content_offset=4,
        content_size_in_bytes=42,
    )
    path = str(tmp_path / "m.avro")
    with compat.ManifestWriterV3(spec, SCHEMA, io.new_output(path), 7, deletes=True) as w:
        w.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=dv))
    manifest = w.to_manifest_file()
    (entry,) = compat.read_manifest_entries_v3(io.new_input(path))
    assert compat.v3_fields(entry.data_file) == ("file:///t/data/a.parquet", 4, 42)
    assert entry.data_file.file_format == FileFormat.PUFFIN

    data_manifest = manifest.__class__(*[manifest[i] for i in range(len(manifest))])
    data_manifest[3] = 0  # content: data
    data_manifest[10] = 2  # added_rows_count
    data_manifest[11] = 5  # existing_rows_count
    list_path = str(tmp_path / "snap.avro")
    with compat.ManifestListWriterV3(
        io.new_output(list_path), snapshot_id=7, parent_snapshot_id=None, sequence_number=1, first_row_id=10
    ) as lw:
        lw.add_manifests([manifest, data_manifest])
    assert lw.next_row_id == 17  # advanced by the data manifest's added + existing rows
    read = compat.read_manifest_list_v3(io.new_input(list_path))
    assert [compat.manifest_first_row_id(m) for m in read] == [None, 10]  # delete manifests get none
    assert [m.sequence_number for m in read] == [1, 1]


def test_v3_metadata_json_only_inside_the_block() -> None:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    metadata = new_table_metadata(
        SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///t", {"format-version": "3"}
    )
    with pytest.raises(NotImplementedError):
        metadata.model_dump_json()
    with compat.v3_metadata_json():
        text = metadata.model_dump_json()
    assert '"format-version":3' in text and '"next-row-id":0' in text
    with pytest.raises(NotImplementedError):  # pyiceberg's own writers still refuse
        metadata.model_dump_json()


@pytest.mark.parametrize("kind", ["data-v2", "deletes-v2", "data-v3", "deletes-v3"])
def test_manifest_entries_are_written_in_blocks_and_read_back(tmp_path: Path, kind: str) -> None:
    """icemor's manifest writers gather entries into Avro blocks of up to 1024 (pyiceberg wrote a
    compressed block per entry) with a cached entry writer: every entry reads back, in order, by
    pyiceberg's reader, and the same writer serves a second manifest."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    io = PyArrowFileIO()
    version, deletes = int(kind[-1]), kind.startswith("deletes")
    content = DataFileContent.POSITION_DELETES if deletes else DataFileContent.DATA
    for run in range(2):
        path = str(tmp_path / f"m{run}.avro")
        output = io.new_output(path)
        writer = (
            compat.ManifestWriterV3(UNPARTITIONED_PARTITION_SPEC, SCHEMA, output, 7, deletes=deletes)
            if version == 3
            else compat.manifest_writer(UNPARTITIONED_PARTITION_SPEC, SCHEMA, output, 7, deletes=deletes)
        )
        n = 2500
        with writer as w:
            for i in range(n):
                df = (compat.v3_data_file if version == 3 else DataFile.from_args)(
                    content=content,
                    file_path=f"/x/f{i}.parquet",
                    file_format=FileFormat.PARQUET,
                    partition=Record(),
                    record_count=i + 1,
                    file_size_in_bytes=10,
                )
                w.add_entry(
                    ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=df)
                )
        manifest = w.to_manifest_file()
        assert manifest.added_files_count == n and manifest.added_rows_count == n * (n + 1) // 2
        entries = compat.read_manifest_entries_v3(io.new_input(path))
        assert [e.data_file.file_path for e in entries] == [f"/x/f{i}.parquet" for i in range(n)]
        assert {int(e.data_file.content) for e in entries} == {int(content)}
        with AvroFile[ManifestEntry](io.new_input(path)) as reader:
            sync = reader.header.sync
            assert reader.header.meta["format-version"] == str(version)
        raw = Path(path).read_bytes()
        assert raw.count(sync) == 1 + 3  # the header's, then blocks of 1024, 1024 and 452 entries
