"""The private pyiceberg 0.12 names icemor borrows, each wrapped once, with why.

pyiceberg is complete for catalogs, schemas, expressions and FileIO, but some of what a
merge-on-read reader and writer needs is only reachable through underscore names. Each is
re-exported here as a small typed function so that a pyiceberg upgrade that moves one breaks
exactly one place; ``tests/_compat/test_pyiceberg.py`` checks each borrowed name.
"""

from __future__ import annotations

import inspect
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.expressions import visitors as _visitors
from pyiceberg.io import pyarrow as _pyarrow_io
from pyiceberg.manifest import DATA_FILE_TYPE, ManifestContent, ManifestWriterV2

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable, Iterator

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.typedef import TableVersion

__all__ = [
    "BORROWED",
    "V3_DATA_FILE_POSITIONS",
    "DeleteManifestWriterV2",
    "MetadataWrite",
    "arrow_schema_to_iceberg_without_ids",
    "check_arrow_schema_compatible",
    "inclusive_metrics_evaluator",
    "metadata_writes",
    "partition_constants",
    "record_metadata_writes",
    "to_file_schema",
    "to_requested_schema",
    "write_data_files",
]

# (module, name) of every private attribute used below; the compat test imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.io.pyarrow", "_to_requested_schema"),
    ("pyiceberg.io.pyarrow", "_get_column_projection_values"),
    ("pyiceberg.io.pyarrow", "_pyarrow_to_schema_without_ids"),
    ("pyiceberg.expressions.visitors", "_InclusiveMetricsEvaluator"),
    ("pyiceberg.manifest", "ManifestWriter._meta"),
    ("pyiceberg.io.pyarrow", "_dataframe_to_data_files"),
    ("pyiceberg.io.pyarrow", "_check_pyarrow_schema_compatible"),
    ("pyiceberg.manifest", "ManifestWriter._with_partition"),
    ("pyiceberg.catalog", "MetastoreCatalog._write_metadata"),
)


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
    no public per-batch entry point.
    """
    return _pyarrow_io._to_requested_schema(
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
    types; missing optional columns become NULL; ``timestamp[ns]`` becomes microseconds.

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
            _pyarrow_io._to_requested_schema(
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


def write_data_files(
    metadata: TableMetadata, data: pa.Table, io: FileIO, *, write_uuid: uuid.UUID, counter: Iterator[int]
) -> list[DataFile]:
    """Write ``data`` as Parquet data files of the table (partitioned, target-sized, with metrics).

    Why: ``Table.append`` writes and commits in one call; icemor streams its input in bounded
    chunks and commits every chunk's files in one snapshot, so it needs the writer alone.
    """
    return list(
        _pyarrow_io._dataframe_to_data_files(
            table_metadata=metadata,
            df=data,
            io=io,
            write_uuid=write_uuid,
            counter=counter,  # type: ignore[arg-type]
        )
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
