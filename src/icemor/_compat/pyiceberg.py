"""The pyiceberg 0.12 internals icemor borrows, each wrapped once, with why.

pyiceberg is complete for catalogs, schemas, expressions and FileIO, but some of what a
merge-on-read reader and writer needs is only reachable through its internals. Each is
wrapped here as a small typed function so that a pyiceberg upgrade that moves one breaks
exactly one place; ``tests/_compat/test_pyiceberg.py`` checks each borrowed name.

What counts as borrowed (``tools/check_borrowed.py`` refuses each outside this module, in
``make lint``):

- any ``_``-prefixed name or attribute of pyiceberg: ``_get_column_projection_values``,
  ``_pyarrow_to_schema_without_ids``, ``_check_pyarrow_schema_compatible``,
  ``_InclusiveMetricsEvaluator``, ``ManifestWriter._meta`` / ``._with_partition``,
  ``MetastoreCatalog._write_metadata``, ``UpdateSchema._commit``, ``DataFile._spec_id``,
  ``_SnapshotProducer._commit`` / ``._snapshot_id``, ``CreateTableTransaction._table`` /
  ``._updates``;
- pyiceberg's Avro layer (``pyiceberg.avro.*``: ``AvroFile`` with ``read_types`` /
  ``read_enums``, the codec names);
- names its ``Table`` API uses internally but does not offer users: ``ArrowProjectionVisitor``
  with ``ArrowAccessor`` and ``visit_with_partner`` (the projection of ``_to_requested_schema``,
  subclassed to keep NULL lists and maps), ``MANIFEST_ENTRY_SCHEMAS``,
  ``DATA_FILE_TYPE`` (and reading ``DataFile`` fields by position), ``ManifestWriterV2``,
  ``write_manifest_list``, ``SnapshotSummaryCollector``, ``update_snapshot_summaries``,
  ``data_file_statistics_from_parquet_metadata``, ``compute_statistics_plan``,
  ``parquet_path_to_id_mapping``, ``ParquetFormatModel``.

Catalogs, schemas, types, expressions, FileIO, ``DataFile``/``ManifestFile`` as records,
``schema_to_pyarrow``/``pyarrow_to_schema`` and the table update/requirement classes are used
as pyiceberg's public API, directly.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.avro.file import SYNC_SIZE, AvroFile, AvroOutputFile
from pyiceberg.avro.resolver import resolve_writer
from pyiceberg.expressions import visitors as _visitors
from pyiceberg.io import pyarrow as _pyarrow_io
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    DEFAULT_READ_VERSION,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriter,
    ManifestListWriterV2,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.table import metadata as _pyiceberg_metadata
from pyiceberg.table.snapshots import SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.typedef import IcebergBaseModel

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from types import TracebackType

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.avro.writer import Writer
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO, InputFile, OutputFile
    from pyiceberg.manifest import ManifestWriter
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import CreateTableTransaction, StagedTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.table.update.schema import UpdateSchema
    from pyiceberg.table.update.snapshot import _SnapshotProducer
    from pyiceberg.typedef import TableVersion

__all__ = [
    "BORROWED",
    "PYICEBERG_WRITES_V3",
    "V3_DATA_FILE_POSITIONS",
    "DataManifestWriterV2",
    "DeleteManifestWriterV2",
    "ManifestListWriterV3",
    "ManifestWriterV3",
    "MetadataWrite",
    "arrow_schema_to_iceberg_without_ids",
    "check_arrow_schema_compatible",
    "first_row_id_of",
    "inclusive_metrics_evaluator",
    "manifest_first_row_id",
    "manifest_list_writer",
    "manifest_writer",
    "metadata_writes",
    "parquet_statistics",
    "partition_constants",
    "read_manifest_entries_v3",
    "read_manifest_list_v3",
    "record_metadata_writes",
    "remember_committed_metadata",
    "schema_update_changes",
    "set_spec_id",
    "set_v3_field",
    "snapshot_producer_changes",
    "snapshot_summary",
    "staged_create_changes",
    "to_file_schema",
    "to_requested_schema",
    "v3_data_file",
    "v3_fields",
    "v3_metadata_json",
]

# (module, name) of every private attribute used below; the compat test imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.io.pyarrow", "ArrowProjectionVisitor"),
    ("pyiceberg.io.pyarrow", "ArrowProjectionVisitor.list"),
    ("pyiceberg.io.pyarrow", "ArrowProjectionVisitor.map"),
    ("pyiceberg.io.pyarrow", "ArrowAccessor"),
    ("pyiceberg.schema", "visit_with_partner"),
    ("pyiceberg.io.pyarrow", "_get_column_projection_values"),
    ("pyiceberg.io.pyarrow", "_pyarrow_to_schema_without_ids"),
    ("pyiceberg.expressions.visitors", "_InclusiveMetricsEvaluator"),
    ("pyiceberg.manifest", "ManifestWriter._meta"),
    ("pyiceberg.io.pyarrow", "_check_pyarrow_schema_compatible"),
    ("pyiceberg.manifest", "ManifestWriter._with_partition"),
    ("pyiceberg.catalog", "MetastoreCatalog._write_metadata"),
    ("pyiceberg.table.update.schema", "UpdateSchema._commit"),
    ("pyiceberg.manifest", "DataFile.spec_id"),
    ("pyiceberg.avro.file", "AvroFile"),
    ("pyiceberg.manifest", "MANIFEST_ENTRY_SCHEMAS"),
    ("pyiceberg.manifest", "DATA_FILE_TYPE"),
    ("pyiceberg.manifest", "ManifestWriterV2"),
    ("pyiceberg.manifest", "write_manifest_list"),
    ("pyiceberg.table.snapshots", "SnapshotSummaryCollector"),
    ("pyiceberg.table.snapshots", "update_snapshot_summaries"),
    ("pyiceberg.io.pyarrow", "data_file_statistics_from_parquet_metadata"),
    ("pyiceberg.io.pyarrow", "compute_statistics_plan"),
    ("pyiceberg.io.pyarrow", "parquet_path_to_id_mapping"),
    ("pyiceberg.io.pyarrow", "ParquetFormatModel"),
    ("pyiceberg.manifest", "ManifestListWriterV2"),
    ("pyiceberg.manifest", "ManifestListWriter"),
    ("pyiceberg.manifest", "MANIFEST_LIST_FILE_SCHEMAS"),
    ("pyiceberg.manifest", "DataFile.from_args"),
    ("pyiceberg.table.metadata", "SUPPORTED_TABLE_FORMAT_VERSION"),
    ("pyiceberg.table.metadata", "TableMetadataV3.model_dump_json"),
    ("pyiceberg.avro.file", "AvroOutputFile"),
    ("pyiceberg.table.update", "_apply_table_update"),
    ("pyiceberg.table.metadata", "TableMetadataUtil._construct_without_validation"),
    ("pyiceberg.table.update.snapshot", "_SnapshotProducer._commit"),
    ("pyiceberg.avro.file", "AvroFile._read_header"),
    ("pyiceberg.avro.file", "_SCHEMA_KEY"),
    ("pyiceberg.avro.decoder", "new_decoder"),
    ("pyiceberg.avro.resolver", "resolve_reader"),
    ("pyiceberg.avro.resolver", "resolve_writer"),
    ("pyiceberg.avro.file", "SYNC_SIZE"),
    ("pyiceberg.manifest", "DEFAULT_READ_VERSION"),
    ("pyiceberg.manifest", "ManifestWriter.new_writer"),
    ("pyiceberg.avro.file", "AvroOutputFile.write_block"),
    ("pyiceberg.serializers", "FromInputFile.table_metadata"),
)


class _NullKeepingProjection(_pyarrow_io.ArrowProjectionVisitor):
    """pyiceberg's projection visitor, except that a NULL list or map stays NULL.

    Why: pyiceberg 0.12 rebuilds a list whose elements are structs (and a map whose values
    are structs) from its offsets alone, its workaround for apache/arrow#38809; the rebuilt
    array has no validity bitmap, so every NULL ``array<struct<...>>`` / ``map<..., struct>``
    became ``[]`` / ``{}``, on read and on write (apache/iceberg-python#3833, open). The Parquet
    reader decodes those NULLs correctly; this puts the source array's NULLs back.
    """

    def list(
        self, list_type: Any, list_array: pa.Array | None, value_array: pa.Array | None
    ) -> pa.Array | None:
        return _with_nulls_of(super().list(list_type, list_array, value_array), list_array)

    def map(
        self,
        map_type: Any,
        map_array: pa.Array | None,
        key_result: pa.Array | None,
        value_result: pa.Array | None,
    ) -> pa.Array | None:
        return _with_nulls_of(super().map(map_type, map_array, key_result, value_result), map_array)


def _with_nulls_of(out: pa.Array | None, source: pa.Array | None) -> pa.Array | None:
    """``out`` (a list or map array projected from ``source``) with ``source``'s NULL slots."""
    import pyarrow as pa

    if out is None or source is None or source.null_count == out.null_count:
        return out  # nothing lost: pyiceberg only ever drops all of the NULLs, never moves them
    if not isinstance(out, pa.ListArray | pa.LargeListArray | pa.MapArray):
        return out  # fixed-size lists are cast, which keeps their NULLs
    offsets = out.offsets
    if offsets.offset:  # Arrow refuses a validity mask over sliced offsets: copy the few ints
        offsets = pa.array(offsets.to_numpy(zero_copy_only=False), offsets.type)
    mask = source.is_null()
    if isinstance(out, pa.MapArray):
        return pa.MapArray.from_arrays(offsets, out.keys, out.items, type=out.type, mask=mask)
    return type(out).from_arrays(offsets, out.values, type=out.type, mask=mask)


def _project(
    requested: Schema,
    file_schema: Schema,
    batch: pa.RecordBatch,
    **options: Any,
) -> pa.RecordBatch:
    """pyiceberg's ``_to_requested_schema`` with :class:`_NullKeepingProjection` as its visitor."""
    import pyarrow as pa
    from pyiceberg.schema import visit_with_partner

    struct_array = visit_with_partner(
        requested,
        batch,
        _NullKeepingProjection(file_schema, **options),
        _pyarrow_io.ArrowAccessor(file_schema),
    )
    return pa.RecordBatch.from_struct_array(struct_array)


def to_requested_schema(
    requested: Schema,
    file_schema: Schema,
    batch: pa.RecordBatch,
    *,
    downcast_ns_timestamp_to_us: bool,
    missing_fields: dict[int, Any],
) -> pa.RecordBatch:
    """Project a batch read with ``file_schema`` onto ``requested`` by field id.

    Why: pyiceberg's projection handles renames, added columns (nulls or initial defaults),
    type promotions and identity-partition constants exactly as its own reader does; there is
    no public per-batch entry point. Its visitor is used with NULL lists and maps kept
    (:class:`_NullKeepingProjection`).
    """
    return _project(
        requested,
        file_schema,
        batch,
        downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us,
        projected_missing_fields=missing_fields,
        allow_timestamp_tz_mismatch=True,
    )


def to_file_schema(
    table_schema: Schema, file_schema: Schema, data: pa.Table, *, format_version: int
) -> pa.Table:
    """``data`` (columns matched to ``table_schema`` by name) as a file of ``file_schema`` is written.

    ``file_schema`` holds fields of ``table_schema`` (the same ids; names may be sanitized, or a
    subset). Columns get their field ids (``PARQUET:field_id``), order and Iceberg's Arrow
    types; missing optional columns become NULL; ``timestamp[ns]`` becomes microseconds; NULL
    lists and maps stay NULL (:class:`_NullKeepingProjection`).

    Why: pyiceberg's writer does this per write task with the same private projection; icemor
    writes its files itself (it must know each row's position) and needs the conversion alone.
    """
    import pyarrow as pa

    task_schema = _pyarrow_io.pyarrow_to_schema(
        data.schema,
        name_mapping=table_schema.name_mapping,
        downcast_ns_timestamp_to_us=True,
        format_version=format_version,  # type: ignore[arg-type]
    )
    batches = data.to_batches() or [pa.RecordBatch.from_pylist([], schema=data.schema)]
    parquet = _pyarrow_io.ParquetFormatModel()
    return pa.Table.from_batches(
        [
            _project(
                file_schema,
                task_schema,
                b,
                downcast_ns_timestamp_to_us=True,
                include_field_ids=True,
                format_model=parquet,
            )
            for b in batches
        ]
    )


def partition_constants(
    data_file: DataFile, table_schema: Schema, spec: PartitionSpec, file_field_ids: set[int]
) -> dict[int, Any]:
    """Values of identity-partition fields the data file does not store (imported files).

    Why: pyiceberg's reader decides these with the spec's column-projection rules; reusing it
    keeps our reads identical to pyiceberg's for such files.
    """
    return _pyarrow_io._get_column_projection_values(
        data_file, table_schema, table_schema, spec, file_field_ids
    )


def arrow_schema_to_iceberg_without_ids(schema: pa.Schema, *, downcast_ns_timestamp_to_us: bool) -> Schema:
    """An Iceberg schema (ids still to assign) for an Arrow schema without field ids.

    Why: ``pyarrow_to_schema`` requires field ids or a name mapping; creating a table from a
    plain Parquet file needs the id-less conversion pyiceberg uses in ``create_table``.
    """
    return _pyarrow_io._pyarrow_to_schema_without_ids(
        schema, downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us
    )


def check_arrow_schema_compatible(
    table_schema: Schema, arrow_schema: pa.Schema, *, format_version: int
) -> None:
    """Raise ValueError unless Arrow data with ``arrow_schema`` can be written to ``table_schema``.

    Why: the rules (missing optional columns, promotions, name mapping) are pyiceberg's
    ``append``/``add_files`` check; icemor applies them before it writes anything. On a
    mismatch pyiceberg prints its explanation table to stdout as well as into the error: the
    print is swallowed here, the error keeps it.
    """
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        _pyarrow_io._check_pyarrow_schema_compatible(
            table_schema,
            arrow_schema,
            downcast_ns_timestamp_to_us=False,
            format_version=format_version,  # type: ignore[arg-type]
        )


def inclusive_metrics_evaluator(
    schema: Schema, expr: BooleanExpression, *, case_sensitive: bool
) -> Callable[[DataFile], bool]:
    """Whether a data file's column metrics allow rows matching ``expr`` (bound once).

    Why: the public ``inclusive_metrics_evaluator``-style helper re-binds per file; the private
    class binds once, which matters for manifests of thousands of files.
    """
    evaluator = _visitors._InclusiveMetricsEvaluator(schema, expr, case_sensitive, False)
    return evaluator.eval


def _v3_positions() -> dict[str, int]:
    """Positions of the v3-only data_file fields in pyiceberg's DataFile record.

    pyiceberg 0.12 reads manifests with its v2 schema and drops these fields; icemor reads with
    the v3 schema, where the record keeps them at these positions (found by name, not assumed).
    """
    names = [f.name for f in DATA_FILE_TYPE[3].fields]
    wanted = ("first_row_id", "referenced_data_file", "content_offset", "content_size_in_bytes")
    return {name: names.index(name) for name in wanted}


V3_DATA_FILE_POSITIONS: dict[str, int] = _v3_positions()
_REFERENCED_DATA_FILE = V3_DATA_FILE_POSITIONS["referenced_data_file"]
_CONTENT_OFFSET = V3_DATA_FILE_POSITIONS["content_offset"]
_CONTENT_SIZE = V3_DATA_FILE_POSITIONS["content_size_in_bytes"]


_READERS: dict[tuple[str, int, int, int], tuple[Any, Any]] = {}
_READERS_LOCK = threading.Lock()


class _ResolvedAvroFile(AvroFile[Any]):
    """pyiceberg's ``AvroFile``, with the file schema's conversion and the reader tree resolved
    once per (writer schema, read schema) in the process.

    Why: pyiceberg converts each file's Avro schema to an Iceberg schema and resolves a reader
    tree on every open: measured, ~80 % of the time to read a small manifest (a commit reads
    every manifest of its parent; a scan of many manifests pays it per manifest). Manifests of
    one table share a handful of writer schemas, and a resolved reader is a stateless tree.
    """

    __slots__ = ()

    def __enter__(self) -> _ResolvedAvroFile:
        from pyiceberg.avro.decoder import new_decoder
        from pyiceberg.avro.file import _SCHEMA_KEY
        from pyiceberg.avro.resolver import resolve_reader

        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        text = self.header.meta.get(_SCHEMA_KEY)
        key = (text or "", id(self.read_schema), id(self.read_types), id(self.read_enums))
        found = _READERS.get(key) if text is not None and self.read_schema is not None else None
        if found is None:
            schema = self.header.get_schema()
            read_schema = self.read_schema or schema
            found = (schema, resolve_reader(schema, read_schema, self.read_types, self.read_enums))
            if text is not None and self.read_schema is not None:
                with _READERS_LOCK:
                    if len(_READERS) > 256:  # bounded: a few schemas per table in practice
                        _READERS.clear()
                    _READERS[key] = found
        self.schema, self.reader = found
        if not self.read_schema:
            self.read_schema = self.schema
        return self


_ENTRY_READ_TYPES: dict[int, Any] = {-1: ManifestEntry, 2: DataFile}
_ENTRY_READ_ENUMS: dict[int, Any] = {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}


def read_manifest_entries_v3(input_file: InputFile) -> list[ManifestEntry]:
    """Every entry of one manifest (DELETED ones too), decoded with the v3 entry schema.

    Why: pyiceberg 0.12 reads every manifest with its v2 read schema, which drops the v3 fields
    a merge-on-read reader needs; its own Avro reader with its v3 schema keeps them (a superset:
    v1/v2 manifests resolve to it with the new optional fields null). Sequence numbers are not
    inherited here, nor is ``spec_id`` set (:func:`set_spec_id`).
    """
    with _ResolvedAvroFile(
        input_file, MANIFEST_ENTRY_SCHEMAS[3], read_types=_ENTRY_READ_TYPES, read_enums=_ENTRY_READ_ENUMS
    ) as reader:
        return list(reader)


def v3_fields(data_file: DataFile) -> tuple[str | None, int | None, int | None]:
    """``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes`` of a data file
    read by :func:`read_manifest_entries_v3`.

    Why: pyiceberg 0.12's ``DataFile`` has no attributes for them; the record keeps them at
    their v3 schema positions (:data:`V3_DATA_FILE_POSITIONS`).
    """
    return data_file[_REFERENCED_DATA_FILE], data_file[_CONTENT_OFFSET], data_file[_CONTENT_SIZE]


def set_spec_id(data_file: DataFile, spec_id: int) -> None:
    """Give a decoded data file its manifest's partition spec id.

    Why: the spec id is not a manifest field; pyiceberg's own manifest reader sets it the same
    way (on the private ``_spec_id`` behind the setter), and its writers and summaries read it.
    """
    data_file.spec_id = spec_id


def manifest_writer(
    spec: PartitionSpec, schema: Schema, output: OutputFile, snapshot_id: int, *, deletes: bool
) -> ManifestWriter:
    """A v2 manifest writer (deflate) for data files, or delete files when ``deletes``.

    Why: pyiceberg has no public constructor of a manifest of chosen content; its v2 writer
    class writes data manifests and :class:`DeleteManifestWriterV2` the delete ones.
    """
    cls = DeleteManifestWriterV2 if deletes else DataManifestWriterV2
    return cls(spec, schema, output, snapshot_id, "deflate")


def manifest_list_writer(
    output: OutputFile, *, snapshot_id: int, parent_snapshot_id: int | None, sequence_number: int
) -> ManifestListWriter:
    """A v2 manifest-list writer (deflate), a context manager.

    Why: pyiceberg writes manifest lists only inside its own snapshot producers; icemor's
    RowDelta builds its snapshot itself.
    """
    return write_manifest_list(
        format_version=2,
        output_file=output,
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_snapshot_id,
        sequence_number=sequence_number,
        avro_compression="deflate",
    )


def snapshot_summary(
    metadata: TableMetadata,
    *,
    operation: Operation,
    counted_as: Operation,
    added: Iterable[DataFile],
    removed: Iterable[DataFile],
    properties: Mapping[str, str],
    partition_summary_limit: int,
    previous: Mapping[str, str] | None,
) -> Summary:
    """The summary of a snapshot adding and removing these files, totals carried from ``previous``.

    The totals are computed as for ``counted_as`` (pyiceberg's know append, overwrite and
    delete only); the summary names ``operation``.

    Why: pyiceberg's summary collector and totals are what its own snapshot producers use, so
    icemor's summaries read as pyiceberg's (and Java's) do; neither is public API.
    """
    specs, schema = metadata.specs(), metadata.schema()
    collector = SnapshotSummaryCollector(partition_summary_limit=partition_summary_limit)
    added, removed = list(added), list(removed)
    for f in added:
        collector.add_file(f, schema, specs[f.spec_id])
    for f in removed:
        collector.remove_file(f, schema, specs[f.spec_id])
    built = collector.build()
    _count_deletion_vectors(built, "added", added)
    _count_deletion_vectors(built, "removed", removed)
    summary = Summary(operation=counted_as, **built, **properties)
    totals = update_snapshot_summaries(summary, previous)
    return Summary(operation=operation, **totals.additional_properties)


def _count_deletion_vectors(summary: dict[str, str], side: str, files: list[DataFile]) -> None:
    """Count deletion vectors as Iceberg Java's ``SnapshotSummary`` does (pyiceberg 0.12 knows none).

    A DV is ``{side}-dvs`` and a delete file, not a position delete file, and its size is its
    blob's ``content_size_in_bytes``, not its Puffin file's (several DVs share one file).
    """
    dvs = [
        f
        for f in files
        if f.content == DataFileContent.POSITION_DELETES and f.file_format == FileFormat.PUFFIN
    ]
    if not dvs:
        return
    summary[f"{side}-dvs"] = str(len(dvs))
    key = f"{side}-position-delete-files"
    left = int(summary.get(key, "0")) - len(dvs)
    if left > 0:
        summary[key] = str(left)
    else:
        summary.pop(key, None)
    size_key = f"{side}-files-size"
    excess = sum(f.file_size_in_bytes - (_content_size(f) or f.file_size_in_bytes) for f in dvs)
    if size_key in summary:
        summary[size_key] = str(int(summary[size_key]) - excess)


def _content_size(f: DataFile) -> int | None:
    return f[_CONTENT_SIZE] if len(f) > _CONTENT_SIZE else None


def schema_update_changes(
    update: UpdateSchema,
) -> tuple[tuple[TableUpdate, ...], tuple[TableRequirement, ...]]:
    """The updates and requirements of a staged schema change, not committed.

    Why: pyiceberg computes a schema change (reusing an equal schema, the identifier-field
    rules) only in ``UpdateSchema``, whose public exit commits through its transaction; icemor
    commits through :mod:`icemor.commit` with its own retries and cleanup.
    """
    return update._commit()


def snapshot_producer_changes(
    producer: _SnapshotProducer[Any], snapshot_id: int
) -> tuple[tuple[TableUpdate, ...], tuple[TableRequirement, ...]]:
    """The updates and requirements of a pyiceberg snapshot producer (fast or merging append) as
    snapshot ``snapshot_id``, its manifests and manifest list written, not committed.

    Why: pyiceberg's producer draws a new snapshot id when it is built and commits through its
    transaction on exit; icemor commits through :mod:`icemor.commit.door`, and keeps one
    snapshot id across the attempts of a commit (an attempt that landed although it raised is
    then found by that id). The id is read by the producer only when it writes (``_commit``).
    """
    producer._snapshot_id = snapshot_id
    return producer._commit()


def staged_create_changes(transaction: CreateTableTransaction) -> tuple[StagedTable, tuple[TableUpdate, ...]]:
    """The staged table of a create transaction and the updates that create it (``AssignUUID``,
    schema, spec, sort order, location, properties), not committed.

    Why: pyiceberg commits a staged create only through the transaction; icemor sends its updates
    (with ``AssertCreate``) through :mod:`icemor.commit.door` like every other commit.
    """
    return transaction._table, transaction._updates  # type: ignore[return-value]


def parquet_statistics(
    parquet_metadata: pq.FileMetaData, schema: Schema, metrics_properties: Mapping[str, str]
) -> dict[str, Any]:
    """A written Parquet file's metrics (pyiceberg's serialized ``DataFile`` fields) by the metrics
    modes of ``metrics_properties`` (``write.metadata.metrics.*``).

    Why: pyiceberg's writer computes them with these helpers from the footer; icemor's writers
    must agree with it (and Java) on truncation and modes.
    """
    stats = _pyarrow_io.data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata,
        stats_columns=_pyarrow_io.compute_statistics_plan(schema, dict(metrics_properties)),
        parquet_column_mapping=_pyarrow_io.parquet_path_to_id_mapping(schema),
    )
    return stats.to_serialized_dict()


_BLOCK_ENTRIES = 1024
"""Manifest entries written per Avro block (pyiceberg writes one block per entry)."""
_ENTRY_WRITERS: dict[tuple[Any, ...], tuple[Schema, Writer]] = {}
_ENTRY_WRITERS_LOCK = threading.Lock()


class _BlockAvroOutputFile(AvroOutputFile[Any]):
    """pyiceberg's Avro writer with the records given to ``write_block`` gathered into blocks of
    up to :data:`_BLOCK_ENTRIES` records, the rest written at a clean close; the file schema and
    the record writer come ready-made (:func:`_entry_avro_file`)."""

    def __init__(
        self, output_file: OutputFile, file_schema: Schema, writer: Writer, metadata: dict[str, str]
    ) -> None:
        # AvroOutputFile.__init__ without its resolve_writer (cached by the caller)
        self.output_file = output_file
        self.file_schema = file_schema
        self.schema_name = "manifest_entry"
        self.sync_bytes = os.urandom(SYNC_SIZE)
        self.writer = writer
        self.metadata = metadata
        self._pending: list[Any] = []

    def write_block(self, objects: list[Any]) -> None:
        self._pending.extend(objects)
        if len(self._pending) >= _BLOCK_ENTRIES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            super().write_block(pending)

    def __exit__(
        self, exctype: type[BaseException] | None, excinst: BaseException | None, exctb: TracebackType | None
    ) -> None:
        try:
            if exctype is None:
                self._flush()
        finally:
            super().__exit__(exctype, excinst, exctb)


def _entry_avro_file(writer: ManifestWriter) -> AvroOutputFile[ManifestEntry]:
    """``writer.new_writer()``, as pyiceberg makes it, with the entry schema and its record writer
    built once per (writer class, table schema, partition spec) and entries written in blocks.

    Why: pyiceberg builds the manifest-entry schema (twice) and resolves its writer for every
    manifest (~0.7 ms, a position-mode CDC commit writes 3-4), and writes each entry as its own
    compressed Avro block (~25 us an entry, ~120 entries a batch). The schema and writer depend
    on nothing else (the header's ``schema`` and ``partition-spec`` are their key).
    """
    meta = writer._meta
    key = (type(writer), writer.version, meta["schema"], meta["partition-spec"])
    with _ENTRY_WRITERS_LOCK:
        made = _ENTRY_WRITERS.get(key)
    if made is None:
        file_schema = writer._with_partition(writer.version)
        record_schema = writer._with_partition(DEFAULT_READ_VERSION)
        made = (file_schema, resolve_writer(record_schema=record_schema, file_schema=file_schema))
        with _ENTRY_WRITERS_LOCK:
            if len(_ENTRY_WRITERS) > 256:  # many tables in one process: start again
                _ENTRY_WRITERS.clear()
            _ENTRY_WRITERS[key] = made
    return _BlockAvroOutputFile(writer._output_file, made[0], made[1], meta)


class DataManifestWriterV2(ManifestWriterV2):
    """pyiceberg's v2 data-manifest writer, its entry writer cached and entries written in blocks
    (:func:`_entry_avro_file`)."""

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return _entry_avro_file(self)


class DeleteManifestWriterV2(ManifestWriterV2):
    """A v2 manifest of delete files: ``content`` = deletes in the manifest list and the Avro header,
    and ``equality_ids`` written as the spec's ``list<int>``.

    Why: pyiceberg 0.12's v2 writer hard-codes data content (``content()`` and the private
    ``_meta`` header property); the entry schema is the same for both contents. It also declares
    ``equality_ids`` (field 135, element 136) as ``list<long>`` (apache/iceberg-python#3840, fixed
    after 0.12): Iceberg Java then fails to read the manifest of an equality delete file
    (``ClassCastException: Long cannot be cast to Integer`` in ``BaseFile``), so the private
    ``_with_partition`` schema is corrected here.
    """

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}

    def _with_partition(self, format_version: TableVersion) -> Schema:
        return _equality_ids_as_int(super()._with_partition(format_version))

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return _entry_avro_file(self)


def _equality_ids_as_int(entry: Schema) -> Schema:
    """The manifest-entry schema with ``data_file.equality_ids`` as ``list<int>``."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, ListType, NestedField, StructType

    def fix_data_file(f: NestedField) -> NestedField:
        if f.field_id != 135 or not isinstance(f.field_type, ListType):
            return f
        element = ListType(element_id=136, element_type=IntegerType(), element_required=True)
        return NestedField(f.field_id, f.name, element, required=f.required, doc=f.doc)

    fields = []
    for f in entry.fields:
        if f.field_id == 2 and isinstance(f.field_type, StructType):
            data_file = StructType(*[fix_data_file(c) for c in f.field_type.fields])
            f = NestedField(f.field_id, f.name, data_file, required=f.required, doc=f.doc)
        fields.append(f)
    return Schema(*fields, schema_id=entry.schema_id)


@dataclass
class MetadataWrite:
    """A metadata JSON file a catalog began to write in :func:`metadata_writes`."""

    path: str
    done: bool = False
    """The file was written completely (the catalog's pointer swap comes after this)."""


_METADATA_WRITES: ContextVar[list[MetadataWrite] | None] = ContextVar("icemor_metadata_writes", default=None)
_HOOK_LOCK = threading.Lock()


def record_metadata_writes(catalog: Catalog) -> bool:
    """Make ``catalog`` report the metadata JSON files it writes to :func:`metadata_writes`.

    Returns False for a catalog that writes none itself (REST: the server writes them).

    Why: a metastore catalog's ``commit_table`` writes ``<location>/metadata/NNNNN-<uuid>.
    metadata.json`` (the private ``_write_metadata``) and then swaps the table's pointer; when
    the swap is refused, that file is left and nothing public names it. The hook wraps the
    method on this catalog object only, once; it records the path before the write starts,
    so a half-written file is known too.
    """
    from pyiceberg.catalog import MetastoreCatalog

    if not isinstance(catalog, MetastoreCatalog):
        return False
    with _HOOK_LOCK:
        if getattr(catalog, "_icemor_records_metadata", False):
            return True
        original = catalog._write_metadata
        signature = inspect.signature(original)

        def write_metadata(*args: Any, **kwargs: Any) -> None:
            frame = _METADATA_WRITES.get()
            record = MetadataWrite(str(signature.bind(*args, **kwargs).arguments["metadata_path"]))
            if frame is not None:
                frame.append(record)
            original(*args, **kwargs)
            record.done = True

        try:
            catalog._write_metadata = write_metadata  # type: ignore[method-assign]
            catalog._icemor_records_metadata = True  # type: ignore[attr-defined]
        except AttributeError:  # a catalog class with __slots__: nothing to record
            return False
    return True


@contextmanager
def metadata_writes() -> Iterator[list[MetadataWrite]]:
    """The metadata JSON files written in this block (this thread/context) by hooked catalogs."""
    frame: list[MetadataWrite] = []
    token = _METADATA_WRITES.set(frame)
    try:
        yield frame
    finally:
        _METADATA_WRITES.reset(token)


# --- format version 3 writes (pyiceberg 0.12 writes v1/v2 only) -----------------------------

PYICEBERG_WRITES_V3: bool = _pyiceberg_metadata.SUPPORTED_TABLE_FORMAT_VERSION >= 3
"""Whether pyiceberg itself writes v3 metadata; the shims below step aside when it does."""

_V3_FIRST_ROW_ID = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields].index("first_row_id")


class ManifestWriterV3(ManifestWriterV2):
    """A v3 manifest of data or delete files: the v3 entry schema (``first_row_id``,
    ``referenced_data_file``, ``content_offset``, ``content_size_in_bytes``) for the file and
    its records, ``format-version`` 3 and the content in the Avro header.

    Why: pyiceberg 0.12's ``write_manifest`` refuses format version 3; its writer writes any
    entry schema it is given (the private ``_with_partition``), so v3 is the v2 writer with the
    v3 schema. Records must be v3 ``DataFile`` records (``DataFile.from_args(3, ...)`` or read
    with :func:`read_manifest_entries_v3`). ``equality_ids`` is written as ``list<int>`` as in
    :class:`DeleteManifestWriterV2`.
    """

    def __init__(
        self, spec: PartitionSpec, schema: Schema, output: OutputFile, snapshot_id: int, *, deletes: bool
    ) -> None:
        super().__init__(spec, schema, output, snapshot_id, "deflate")
        self._deletes = deletes

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES if self._deletes else ManifestContent.DATA

    @property
    def version(self) -> TableVersion:
        return 3

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes" if self._deletes else "data"}

    def _with_partition(self, format_version: TableVersion) -> Schema:
        # records and file alike: the v3 schema (the base class asks for v2 records)
        return _equality_ids_as_int(super()._with_partition(3))

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return _entry_avro_file(self)


class ManifestListWriterV3(ManifestListWriter):
    """A v3 manifest list: sequence numbers as v2, and row lineage: each data manifest without a
    ``first_row_id`` gets the next unassigned row id, and the ids advance by its added and
    existing rows (spec, "Row Lineage"; as Iceberg Java's v3 manifest-list writer).
    ``next_row_id`` is the table's next row id after the list is written.

    Why: pyiceberg 0.12's ``write_manifest_list`` refuses format version 3.
    """

    def __init__(
        self,
        output: OutputFile,
        *,
        snapshot_id: int,
        parent_snapshot_id: int | None,
        sequence_number: int,
        first_row_id: int,
    ) -> None:
        super().__init__(
            format_version=3,
            output_file=output,
            meta={
                "snapshot-id": str(snapshot_id),
                "parent-snapshot-id": str(parent_snapshot_id) if parent_snapshot_id is not None else "null",
                "sequence-number": str(sequence_number),
                "first-row-id": str(first_row_id),
                "format-version": "3",
                "avro.codec": "deflate",
            },
        )
        self._v2 = ManifestListWriterV2(output, snapshot_id, parent_snapshot_id, sequence_number, "deflate")
        self.next_row_id = first_row_id

    def __enter__(self) -> ManifestListWriterV3:
        from pyiceberg.avro.file import AvroOutputFile

        self._writer = AvroOutputFile[ManifestFile](
            output_file=self._output_file,
            record_schema=MANIFEST_LIST_FILE_SCHEMAS[3],
            file_schema=MANIFEST_LIST_FILE_SCHEMAS[3],
            schema_name="manifest_file",
            metadata=self._meta,
        )
        self._writer.__enter__()
        return self

    def prepare_manifest(self, manifest_file: ManifestFile) -> ManifestFile:
        wrapped = self._v2.prepare_manifest(manifest_file)  # sequence numbers
        data = [wrapped[i] for i in range(len(wrapped))]
        data += [None] * (len(MANIFEST_LIST_FILE_SCHEMAS[3].fields) - len(data))
        if int(wrapped.content) == int(ManifestContent.DATA) and data[_V3_FIRST_ROW_ID] is None:
            data[_V3_FIRST_ROW_ID] = self.next_row_id
            self.next_row_id += (wrapped.added_rows_count or 0) + (wrapped.existing_rows_count or 0)
        return ManifestFile(*data)


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    """The ``first_row_id`` of a manifest read by :func:`read_manifest_list_v3` (None otherwise).

    Why: pyiceberg 0.12's ``ManifestFile`` has no attribute for it; the record keeps it at its
    v3 schema position.
    """
    return manifest[_V3_FIRST_ROW_ID] if len(manifest) > _V3_FIRST_ROW_ID else None


_LIST_READ_ENUMS: dict[int, Any] = {517: ManifestContent}
_LIST_READ_TYPES: dict[int, Any] = {}


def _list_read_types() -> dict[int, Any]:
    if not _LIST_READ_TYPES:
        from pyiceberg.manifest import PartitionFieldSummary

        _LIST_READ_TYPES.update({-1: ManifestFile, 508: PartitionFieldSummary})
    return _LIST_READ_TYPES


def read_manifest_list_v3(input_file: InputFile) -> list[ManifestFile]:
    """The manifests of a manifest list decoded with the v3 schema (``first_row_id`` kept).

    Why: pyiceberg 0.12 reads manifest lists with its v2 schema, which drops ``first_row_id``;
    a v3 writer must carry it over unchanged.
    """
    with _ResolvedAvroFile(
        input_file, MANIFEST_LIST_FILE_SCHEMAS[3], read_types=_list_read_types(), read_enums=_LIST_READ_ENUMS
    ) as reader:
        return list(reader)


def v3_data_file(**fields: Any) -> DataFile:
    """A ``DataFile`` record with the v3 fields (for :class:`ManifestWriterV3`).

    Why: ``DataFile.from_args`` builds v2 records unless given pyiceberg's private
    ``_table_format_version``.
    """
    return DataFile.from_args(_table_format_version=3, **fields)


def set_v3_field(data_file: DataFile, name: str, value: Any) -> None:
    """Set a v3-only field (``first_row_id`` ...) of a v3 ``DataFile`` record by its position."""
    data_file[V3_DATA_FILE_POSITIONS[name]] = value


def first_row_id_of(data_file: DataFile) -> int | None:
    """The ``first_row_id`` of a v3 ``DataFile`` record (None for a v2 record)."""
    pos = V3_DATA_FILE_POSITIONS["first_row_id"]
    return data_file[pos] if len(data_file) > pos else None


_V3_JSON: ContextVar[bool] = ContextVar("icemor_v3_json", default=False)
_V3_LOCK = threading.Lock()


def _install_v3_json() -> None:
    """Let ``TableMetadataV3.model_dump_json`` serialise inside :func:`v3_metadata_json` only.

    pyiceberg 0.12 raises ``NotImplementedError`` there; its pydantic model has every v3 field
    (``next-row-id``, snapshots' ``first-row-id`` and ``added-rows``), so the base model's dump
    is the spec's JSON. Outside the block (pyiceberg's own writers) it still raises.
    """
    with _V3_LOCK:
        cls = _pyiceberg_metadata.TableMetadataV3
        if getattr(cls, "_icemor_v3_json", False):
            return
        refuse = cls.model_dump_json

        def model_dump_json(self: Any, *args: Any, **kwargs: Any) -> str:
            if not _V3_JSON.get():
                return refuse(self, *args, **kwargs)
            if self.next_row_id is None:  # required in v3 JSON; a new table starts at 0
                self = self.model_copy(update={"next_row_id": 0})
            return IcebergBaseModel.model_dump_json(self, *args, **kwargs)

        cls.model_dump_json = model_dump_json  # type: ignore[method-assign]
        cls._icemor_v3_json = True  # type: ignore[attr-defined]


def _install_v3_upgrade() -> None:
    """Let pyiceberg's ``UpgradeFormatVersionUpdate`` handler take a table to format version 3
    inside :func:`v3_metadata_json` only (it refuses versions above 2, also for a table created
    as v3: a staged create applies its updates to pyiceberg's empty v1 metadata, so v1 -> 3 is let
    through for metadata without snapshots); ``next-row-id`` starts at 0 (spec, "Row Lineage":
    existing rows have no ids).
    """
    from pyiceberg.table import update as _pyiceberg_update
    from pyiceberg.table.update import UpgradeFormatVersionUpdate

    with _V3_LOCK:
        apply = _pyiceberg_update._apply_table_update
        if getattr(apply, "_icemor_v3_upgrade", False):
            return
        original = apply.dispatch(UpgradeFormatVersionUpdate)

        def upgrade(update: UpgradeFormatVersionUpdate, base: TableMetadata, context: Any) -> TableMetadata:
            # v1 -> 3 only without snapshots: a staged create starts from pyiceberg's empty v1 metadata
            from_v1 = base.format_version == 1 and not base.snapshots
            if (
                not _V3_JSON.get()
                or update.format_version != 3
                or not (base.format_version in (2, 3) or from_v1)
            ):
                return original(update, base, context)
            if base.format_version == 3:
                return base
            context.add_update(update)
            v3 = _pyiceberg_metadata.TableMetadataUtil._construct_without_validation(
                base.model_copy(update={"format_version": 3})
            )
            return v3.model_copy(update={"next_row_id": 0})

        apply.register(UpgradeFormatVersionUpdate)(upgrade)
        apply._icemor_v3_upgrade = True  # type: ignore[attr-defined]


_WRITTEN_METADATA: OrderedDict[str, tuple[TableMetadata, bytes]] = OrderedDict()
_WRITTEN_METADATA_MAX = 8
_WRITTEN_LOCK = threading.Lock()


def _file_digest(input_file: InputFile) -> bytes:
    import hashlib

    with input_file.open() as f:
        return hashlib.sha256(f.read()).digest()


def remember_committed_metadata(location: str, metadata: TableMetadata, io: FileIO) -> None:
    """Keep the metadata a commit of this process wrote to ``location`` (the catalog's answer)
    with the SHA-256 of the file's bytes, so that reading that file again (the next refresh, the
    SQL catalog's read inside its next ``commit_table``) returns it instead of parsing the JSON
    again, as long as the file's bytes are still the ones written.

    Why: pyiceberg parses a metadata file on every ``load_table`` (pydantic, ~4-8 ms for a table
    with 100 snapshots, twice a CDC batch); reading and hashing it costs a tenth of that. Only
    files this process's commits wrote are kept (the last ``_WRITTEN_METADATA_MAX``), by path;
    pyiceberg's ``FromInputFile.table_metadata``, which every metastore catalog reads metadata
    files with, is wrapped once to look here first. A file that is gone, shorter or otherwise
    changed is parsed as pyiceberg would (and its damage reported): the kept model never
    stands in for bytes it did not come from. Best effort: a file that cannot be read back
    now is simply not kept. The model is frozen (pydantic); pyiceberg's updates copy it.
    """
    try:
        digest = _file_digest(io.new_input(location))
    except Exception:  # a hint only: nothing is kept
        return
    _install_metadata_reuse()
    with _WRITTEN_LOCK:
        _WRITTEN_METADATA[location] = (metadata, digest)
        _WRITTEN_METADATA.move_to_end(location)
        while len(_WRITTEN_METADATA) > _WRITTEN_METADATA_MAX:
            _WRITTEN_METADATA.popitem(last=False)


def _install_metadata_reuse() -> None:
    from pyiceberg import serializers

    with _WRITTEN_LOCK:
        reader = serializers.FromInputFile.__dict__["table_metadata"]
        if getattr(reader, "_icemor_reuse", False):
            return
        original = reader.__func__

        def table_metadata(input_file: InputFile, *args: Any, **kwargs: Any) -> TableMetadata:
            with _WRITTEN_LOCK:
                kept = _WRITTEN_METADATA.get(input_file.location)
            if kept is not None:
                try:
                    same = _file_digest(input_file) == kept[1]
                except Exception:  # pyiceberg's own read below reports it
                    same = False
                if same:
                    return kept[0]
            parsed: TableMetadata = original(input_file, *args, **kwargs)
            return parsed

        wrapped = staticmethod(table_metadata)
        wrapped._icemor_reuse = True  # type: ignore[attr-defined]
        serializers.FromInputFile.table_metadata = wrapped  # type: ignore[method-assign]


@contextmanager
def v3_metadata_json() -> Iterator[None]:
    """Inside the block, v3 table metadata serialises and a table may be upgraded (or created)
    at format version 3 (pyiceberg 0.12 refuses both elsewhere)."""
    if PYICEBERG_WRITES_V3:
        yield
        return
    _install_v3_json()
    _install_v3_upgrade()
    token = _V3_JSON.set(True)
    try:
        yield
    finally:
        _V3_JSON.reset(token)
