"""The public table API: merge-on-read scans (and, later, row-level writes and maintenance)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.exceptions import NoSuchTableError as _PyIcebergNoSuchTable
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.table.refs import SnapshotRefType

from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError, NoSuchTableError
from icemor.io.reader import ReadOptions, count_task, output_schema, read_task
from icemor.planning.planner import PlannedFile, all_field_parents, all_field_types, plan_files
from icemor.planning.tasks import CombinedScanTask, SplitOptions, plan_tasks
from icemor.spec.metadata_columns import METADATA_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Scan", "Table", "append_files", "create_table"]


class Table:
    """An Iceberg table read and written merge-on-read. Wraps a pyiceberg table (catalog, metadata, IO)."""

    def __init__(self, table: PyIcebergTable, catalog: Catalog) -> None:
        self._table = table
        self.catalog = catalog

    @classmethod
    def load(cls, identifier: str, *, catalog: Catalog | str | None = None) -> Table:
        """Load ``namespace.table`` from ``catalog`` (embedded catalog when None).

        Raises:
            NoSuchTableError: The table or its namespace does not exist.
        """
        from icemor.catalog import load_catalog

        cat = catalog if catalog is not None and not isinstance(catalog, str) else load_catalog(catalog)
        try:
            return cls(cat.load_table(identifier), cat)
        except (_PyIcebergNoSuchTable, NoSuchNamespaceError) as e:
            msg = f"table {identifier!r} does not exist in catalog {cat.name!r}"
            raise NoSuchTableError(msg) from e
        except ValueError as e:
            msg = f"invalid table identifier {identifier!r}: {e}"
            raise InvalidArgumentError(msg) from e

    @property
    def pyiceberg(self) -> PyIcebergTable:
        """The underlying pyiceberg table (catalog operations, metadata)."""
        return self._table

    @property
    def name(self) -> str:
        return ".".join(self._table.name())

    @property
    def metadata(self) -> TableMetadata:
        return self._table.metadata

    @property
    def io(self) -> FileIO:
        return self._table.io

    def schema(self) -> Schema:
        return self._table.schema()

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.properties)

    def refresh(self) -> Table:
        self._table = self._table.refresh()
        return self

    def scan(
        self,
        row_filter: str | BooleanExpression | None = None,
        selected_fields: Sequence[str] = ("*",),
        snapshot_id: int | None = None,
        as_of_timestamp: int | None = None,
        ref: str | None = None,
        metadata_columns: bool = False,
        *,
        include_deleted: bool = False,
        case_sensitive: bool = True,
    ) -> Scan:
        """A merge-on-read scan: every position delete, DV and equality delete is applied.

        Args:
            row_filter: A pyiceberg expression or a SQL-like string (``"id > 5 and k = 'a'"``).
            selected_fields: Column names, ``("*",)`` for all. ``_file``/``_pos`` may be named too.
            snapshot_id: Read this snapshot.
            as_of_timestamp: Read the snapshot current at this time (milliseconds since epoch).
            ref: Read the head of this branch or tag.
            metadata_columns: Add ``_file`` and ``_pos``.
            include_deleted: Keep deleted rows and add a ``_deleted`` boolean column.
            case_sensitive: Column name matching.
        """
        if sum(x is not None for x in (snapshot_id, as_of_timestamp, ref)) > 1:
            msg = "give at most one of snapshot_id, as_of_timestamp and ref"
            raise InvalidArgumentError(msg)
        snapshot, schema = _resolve_snapshot(self.metadata, snapshot_id, as_of_timestamp, ref)
        fields = [f for f in selected_fields if f not in METADATA_COLUMNS]
        meta = {f for f in selected_fields if f in METADATA_COLUMNS}
        if "_deleted" in meta:
            include_deleted = True
        try:
            projected = schema if "*" in fields else schema.select(*fields, case_sensitive=case_sensitive)
        except ValueError as e:
            msg = f"unknown column in selected fields {list(fields)}: {e}"
            raise InvalidArgumentError(msg) from e
        expr = _parse_filter(row_filter, schema, case_sensitive)
        opts = ReadOptions(
            schema=schema,
            projected_schema=projected,
            row_filter=expr,
            case_sensitive=case_sensitive,
            specs=self.metadata.specs(),
            field_types=all_field_types(self.metadata),
            field_parents=all_field_parents(self.metadata),
            name_mapping=self.metadata.name_mapping(),
            format_version=self.metadata.format_version,
            file_column=metadata_columns or "_file" in meta,
            pos_column=metadata_columns or "_pos" in meta,
            include_deleted=include_deleted,
        )
        return Scan(self, snapshot, opts)

    def to_spark(self, spark: SparkSession, *, strategy: str = "auto", **scan_kwargs: Any) -> DataFrame:
        """The scan as a PySpark DataFrame whose reading runs on Spark executors.

        Args:
            spark: The SparkSession (see :func:`icemor.engines.spark.session`).
            strategy: ``auto`` (default), ``native`` or ``python``; see
                :func:`icemor.engines.spark.scan_to_dataframe`.
            **scan_kwargs: The arguments of :meth:`scan`.
        """
        from icemor.engines.spark import scan_to_dataframe

        return scan_to_dataframe(self.scan(**scan_kwargs), spark, strategy=strategy)


@dataclass
class Scan:
    """A planned-on-demand merge-on-read scan of one snapshot."""

    table: Table
    snapshot: Snapshot | None
    options: ReadOptions

    @property
    def io(self) -> FileIO:
        return self.table.io

    @cached_property
    def _planned(self) -> list[PlannedFile]:
        return plan_files(
            self.table.metadata,
            self.io,
            self.snapshot,
            schema=self.options.schema,
            row_filter=self.options.row_filter,
            case_sensitive=self.options.case_sensitive,
        )

    def plan_files(self) -> list[PlannedFile]:
        """Data files the scan reads, each with the delete files that apply to it."""
        return list(self._planned)

    def live_files(self) -> list[PlannedFile]:
        """The planned files minus those whose every row is deleted by position deletes or DVs.

        Those contribute no rows, so no engine opens them (unless ``include_deleted``).
        """
        if self.options.include_deleted:
            return self.plan_files()
        from icemor.io.deletes import fully_deleted

        return [
            p
            for p in self._planned
            if not p.delete_files or not fully_deleted(self.io, p.data_file, p.delete_files)
        ]

    def plan_tasks(
        self,
        *,
        target_size: int | None = None,
        open_file_cost: int | None = None,
        lookback: int | None = None,
    ) -> list[CombinedScanTask]:
        """Split and combine the planned files by ``read.split.*`` table properties (or overrides)."""
        opts = SplitOptions.from_properties(
            self.table.properties, target_size=target_size, open_file_cost=open_file_cost, lookback=lookback
        )
        return plan_tasks(self.live_files(), opts)

    @property
    def arrow_schema(self) -> pa.Schema:
        return output_schema(self.options)

    def _batches(self, *, workers: int | None = None) -> Iterator[pa.RecordBatch]:
        from icemor.engines.local import stream

        pieces = [t for ct in self.plan_tasks() for t in ct.tasks]
        # biggest first keeps all threads busy to the end
        pieces.sort(key=lambda t: -t.size_in_bytes())
        io, opts = self.io, self.options
        return stream(pieces, lambda t: read_task(io, t, opts), workers=workers)

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """Stream the rows; memory is bounded by the delete sets plus a few batches."""
        return pa.RecordBatchReader.from_batches(self.arrow_schema, self._batches())

    def to_arrow(self) -> pa.Table:
        """All rows as one Arrow table."""
        return pa.Table.from_batches(list(self._batches()), schema=self.arrow_schema)

    def count(self) -> int:
        """Number of live rows, without reading data where position deletes alone apply."""
        from icemor.engines.local import map_ordered

        pieces = [t for ct in self.plan_tasks() for t in ct.tasks]
        io, opts = self.io, self.options
        return sum(map_ordered(pieces, lambda t: count_task(io, t, opts)))


def _parse_filter(
    row_filter: str | BooleanExpression | None, schema: Schema, case_sensitive: bool
) -> BooleanExpression:
    if row_filter is None:
        return AlwaysTrue()
    if isinstance(row_filter, str):
        from pyiceberg.expressions import parser

        try:
            expr = parser.parse(row_filter)
        except Exception as e:  # pyparsing raises its own ParseException family
            msg = f"cannot parse row filter {row_filter!r}: {e}"
            raise InvalidArgumentError(msg) from e
    else:
        expr = row_filter
    try:
        bind(schema, expr, case_sensitive=case_sensitive)
    except ValueError as e:
        msg = f"invalid row filter {row_filter!r}: {e}"
        raise InvalidArgumentError(msg) from e
    return expr


def _resolve_snapshot(
    metadata: TableMetadata, snapshot_id: int | None, as_of_timestamp: int | None, ref: str | None
) -> tuple[Snapshot | None, Schema]:
    """The snapshot to read and the schema to read it with (Iceberg Java's SnapshotUtil.schemaFor)."""
    current_schema = metadata.schema()
    if snapshot_id is None and as_of_timestamp is None and ref is None:
        return metadata.current_snapshot(), current_schema
    if ref is not None:
        snap_ref = metadata.refs.get(ref)
        if snap_ref is None:
            msg = f"ref {ref!r} does not exist"
            raise NoSuchSnapshotError(msg)
        snapshot = metadata.snapshot_by_id(snap_ref.snapshot_id)
        if snap_ref.snapshot_ref_type == SnapshotRefType.BRANCH:
            return snapshot, current_schema
    elif snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            msg = f"snapshot {snapshot_id} does not exist"
            raise NoSuchSnapshotError(msg)
    else:
        assert as_of_timestamp is not None
        older = [e for e in metadata.snapshot_log if e.timestamp_ms <= as_of_timestamp]
        if not older:
            msg = f"no snapshot is older than timestamp {as_of_timestamp} ms"
            raise NoSuchSnapshotError(msg)
        snapshot = metadata.snapshot_by_id(older[-1].snapshot_id)
    if snapshot is None:
        msg = "the requested snapshot is no longer in the table metadata"
        raise NoSuchSnapshotError(msg)
    if snapshot.schema_id is not None:
        for s in metadata.schemas:
            if s.schema_id == snapshot.schema_id:
                return snapshot, s
    return snapshot, current_schema


def create_table(
    catalog: Catalog,
    identifier: str,
    *,
    schema_from: Path,
    partition_by: Sequence[str] = (),
    format_version: int = 2,
    properties: dict[str, str] | None = None,
) -> Table:
    """Create ``identifier`` with the schema of a Parquet file (its namespace too, if missing).

    Raises:
        InvalidArgumentError: Unreadable schema file, bad partition field, bad format version,
            or the table exists already.
    """
    import pyarrow.parquet as pq
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
    from pyiceberg.schema import assign_fresh_schema_ids

    from icemor.spec.partitioning import parse_partition_spec

    if format_version not in (2, 3):
        msg = f"--format-version must be 2 or 3, got {format_version}"
        raise InvalidArgumentError(msg)
    try:
        arrow_schema = pq.read_schema(schema_from)
    except (OSError, pa.ArrowInvalid) as e:
        msg = f"cannot read a Parquet schema from {schema_from}: {e}"
        raise InvalidArgumentError(msg) from e
    schema = assign_fresh_schema_ids(_pyarrow_to_schema_without_ids(arrow_schema))
    spec = parse_partition_spec(partition_by, schema)
    namespace, _, name = identifier.rpartition(".")
    if not namespace or not name:
        msg = f"table name must be namespace.table, got {identifier!r}"
        raise InvalidArgumentError(msg)
    catalog.create_namespace_if_not_exists(namespace)
    props = {"format-version": str(format_version), **(properties or {})}
    try:
        created = catalog.create_table(identifier, schema=schema, partition_spec=spec, properties=props)
    except TableAlreadyExistsError as e:
        msg = f"table {identifier!r} already exists"
        raise InvalidArgumentError(msg) from e
    return Table(created, catalog)


def append_files(table: Table, files: Sequence[Path]) -> int:
    """Append Parquet files to ``table`` as one snapshot; nothing is committed if any file is bad."""
    import pyarrow.parquet as pq

    parts = []
    for path in files:
        try:
            parts.append(pq.read_table(path))
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {path}: {e}"
            raise InvalidArgumentError(msg) from e
    if not parts:
        return 0
    try:
        data = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        msg = f"the files do not share one schema: {e}"
        raise InvalidArgumentError(msg) from e
    try:
        table.pyiceberg.append(data)
    except ValueError as e:
        msg = f"the files do not match the schema of {table.name}: {e}"
        raise InvalidArgumentError(msg) from e
    table.refresh()
    return int(data.num_rows)
