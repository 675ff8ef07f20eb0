"""The pyiceberg 0.12 internals icemor borrows, each wrapped once, with why; one module per area.

pyiceberg is complete for catalogs, schemas, expressions and FileIO, but some of what a
merge-on-read reader and writer needs is only reachable through its internals. Each is
wrapped here as a small typed function so that a pyiceberg upgrade that moves one breaks
exactly one place; ``tests/_compat/test_pyiceberg.py`` checks each borrowed name.

- :mod:`.arrow`: projection by field id, schema conversion, the write-compatibility check;
- :mod:`.metrics`: column metrics of a written Parquet file, and their evaluation;
- :mod:`.records`: the v3 fields of ``DataFile`` / ``ManifestFile`` records;
- :mod:`.manifest_read` / :mod:`.manifest_write`: manifests and manifest lists (v2 and v3);
- :mod:`.updates`: table changes computed without committing them, snapshot summaries;
- :mod:`.metadata`: metadata files a commit writes, their reuse, v3 metadata JSON.

What counts as borrowed (``tools/check_borrowed.py`` refuses each outside ``icemor._compat``, in
``make lint``; each module lists its own in ``BORROWED``, and :data:`BORROWED` is all of them):

- any ``_``-prefixed name or attribute of pyiceberg: ``_get_column_projection_values``,
  ``_pyarrow_to_schema_without_ids``, ``_check_pyarrow_schema_compatible``,
  ``_InclusiveMetricsEvaluator``, ``ManifestWriter._meta`` / ``._with_partition``,
  ``MetastoreCatalog._write_metadata``, ``UpdateSchema._commit`` / ``UpdateSpec._commit``,
  ``DataFile._spec_id``,
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

from icemor._compat.pyiceberg import arrow, manifest_read, manifest_write, metadata, metrics, records, updates
from icemor._compat.pyiceberg.arrow import (
    arrow_schema_to_iceberg_without_ids,
    check_arrow_schema_compatible,
    partition_constants,
    to_file_schema,
    to_requested_schema,
)
from icemor._compat.pyiceberg.manifest_read import read_manifest_entries_v3, read_manifest_list_v3
from icemor._compat.pyiceberg.manifest_write import (
    DataManifestWriterV2,
    DeleteManifestWriterV2,
    ManifestListWriterV3,
    ManifestWriterV3,
    manifest_list_writer,
    manifest_writer,
)
from icemor._compat.pyiceberg.metadata import (
    PYICEBERG_WRITES_V3,
    MetadataWrite,
    metadata_writes,
    record_metadata_writes,
    remember_committed_metadata,
    v3_metadata_json,
)
from icemor._compat.pyiceberg.metrics import inclusive_metrics_evaluator, parquet_statistics
from icemor._compat.pyiceberg.records import (
    V3_DATA_FILE_POSITIONS,
    first_row_id_of,
    manifest_first_row_id,
    set_spec_id,
    set_v3_field,
    v3_data_file,
    v3_fields,
)
from icemor._compat.pyiceberg.updates import (
    schema_update_changes,
    snapshot_producer_changes,
    snapshot_summary,
    spec_update_changes,
    staged_create_changes,
)

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
    "spec_update_changes",
    "staged_create_changes",
    "to_file_schema",
    "to_requested_schema",
    "v3_data_file",
    "v3_fields",
    "v3_metadata_json",
]

BORROWED: tuple[tuple[str, str], ...] = tuple(
    dict.fromkeys(
        borrowed
        for module in (arrow, metrics, records, manifest_read, manifest_write, updates, metadata)
        for borrowed in module.BORROWED
    )
)
"""(module, name) of every internal the modules of this package use, each once."""
