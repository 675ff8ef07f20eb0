"""The public table facade: load a table, describe it, scan it merge-on-read, append to it, delete rows."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from icemor import table_maintenance
from icemor.dependencies import is_spark_dataframe
from icemor.exceptions import IcemorError
from icemor.ops.drop import drop_table
from icemor.spec import describe
from icemor.table_engine import runner, spark_errors
from icemor.table_load import open_table
from icemor.table_maintenance import Maintenance
from icemor.table_merge import MergeBuilder
from icemor.timestamps import Timestamp, optional_ms, to_epoch_ms

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import DataFrame, SparkSession

    from icemor.maintenance.check import CheckReport
    from icemor.maintenance.health import HealthReport
    from icemor.maintenance.optimize import OptimizeResult, RoundResult
    from icemor.ops.alter import SchemaChange
    from icemor.ops.cdc import ChangeMetrics
    from icemor.ops.delete import DeleteMetrics
    from icemor.ops.overwrite import OverwriteMetrics
    from icemor.ops.update import UpdateMetrics
    from icemor.scan import ChangeScan, Scan
    from icemor.spec.describe import HistoryEntry, SnapshotInfo, TableDescription

__all__ = ["Maintenance", "MergeBuilder", "Table", "Timestamp", "to_epoch_ms"]

# Notes (nanosecond timestamps truncated) of the Python API go here, one per operation; the
# CLI prints them as ``icemor: note: ...`` instead.
_log = logging.getLogger("icemor")


class Table:
    """An Iceberg table read and written merge-on-read. Wraps a pyiceberg table (catalog, metadata, IO).

    Example::

        table = icemor.create_table("shop.orders", pa.table({"id": [1, 2, 3], "qty": [5, 0, 7]}))
        table.delete("qty = 0")
        table.scan("id > 1").to_arrow()   # the row of id 3: id 2 is deleted
    """

    def __init__(self, table: PyIcebergTable, catalog: Catalog) -> None:
        self._table = table
        self.catalog = catalog

    @classmethod
    def load(cls, identifier: str, *, catalog: Catalog | str | None = None) -> Table:
        """Load ``namespace.table`` from ``catalog`` (embedded catalog when None).

        Example::

            table = Table.load("shop.orders")   # the same as icemor.load_table("shop.orders")

        Raises:
            NoSuchTableError: The table or its namespace does not exist.
            MissingFileError, CorruptFileError: Its metadata file is missing, or truncated or
                corrupt (the message names the file).
        """
        return cls(*open_table(identifier, catalog))

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
        as_of_timestamp: Timestamp | None = None,
        ref: str | None = None,
        metadata_columns: bool = False,
        *,
        include_deleted: bool = False,
        case_sensitive: bool = True,
    ) -> Scan:
        """A merge-on-read scan: every position delete, DV and equality delete is applied.

        Example::

            table.scan("qty > 0", selected_fields=("id", "qty")).to_pandas()
            table.scan(as_of_timestamp="2024-05-01T12:00:00").to_arrow()   # time travel

        Args:
            row_filter: A pyiceberg expression or a SQL-like string (``"id > 5 and k = 'a'"``).
            selected_fields: Column names, ``("*",)`` for all. ``_file``/``_pos`` may be named too,
                and on v3 tables ``_row_id``/``_last_updated_sequence_number`` (row lineage).
            snapshot_id: Read this snapshot.
            as_of_timestamp: Read the snapshot current at this time: a datetime (naive means UTC),
                ISO-8601 text or milliseconds since the epoch (:func:`to_epoch_ms`).
            ref: Read the head of this branch or tag.
            metadata_columns: Add ``_file`` and ``_pos``.
            include_deleted: Keep deleted rows and add a ``_deleted`` boolean column.
            case_sensitive: Column name matching.
        """
        from icemor.planning.scan_job import SnapshotSelection, prepare_scan  # noqa: PLC0415 - cost: ~1 s on import icemor.table
        from icemor.scan import Scan  # noqa: PLC0415 - cost: pyarrow ~200 ms on import icemor.table

        job = prepare_scan(
            self.metadata,
            self.io,
            row_filter=row_filter,
            selected_fields=selected_fields,
            selection=SnapshotSelection(snapshot_id, optional_ms(as_of_timestamp, "as_of_timestamp"), ref),
            metadata_columns=metadata_columns,
            include_deleted=include_deleted,
            case_sensitive=case_sensitive,
        )
        return Scan(job)

    def changes(
        self,
        start_snapshot_id: int | None = None,
        end_snapshot_id: int | None = None,
        *,
        start_timestamp: Timestamp | None = None,
        end_timestamp: Timestamp | None = None,
        row_filter: str | BooleanExpression | None = None,
        selected_fields: Sequence[str] = ("*",),
        net: bool = False,
        key: Sequence[str] | None = None,
    ) -> ChangeScan:
        """The change feed of the snapshots in ``(start, end]`` on the main ancestry of ``end``.

        Rows carry the selected columns plus ``_change_type`` (``INSERT``, ``DELETE``,
        ``UPDATE_BEFORE``, ``UPDATE_AFTER``, as Java), ``_change_ordinal`` and ``_commit_snapshot_id``
        (Iceberg Java's changelog view). Every delete kind counts; ``replace`` snapshots
        (compaction) produce no changes. Semantics: :mod:`icemor.planning.changes`.

        Example::

            table.changes(start_timestamp="2024-05-01", net=True).to_arrow()

        Args:
            start_snapshot_id: Exclusive start; None: from the table's first snapshot.
            end_snapshot_id: Inclusive end; None: the current snapshot.
            start_timestamp: Instead of ``start_snapshot_id``: snapshots committed after it (a
                datetime, naive means UTC; ISO-8601 text; or ms since the epoch).
            end_timestamp: Instead of ``end_snapshot_id``: snapshots committed at or before it.
            row_filter: Only changed rows matching it (the scan's filter language).
            selected_fields: Table columns to return.
            net: The net change over the range: a row inserted and deleted within it is absent.
            key: Pair a snapshot's delete and insert of one key as an update (default: the
                schema's identifier fields; none: no pairing).

        Raises:
            InvalidArgumentError: Bad bounds, filter, column or key; a start not an ancestor of the end.
            NoSuchSnapshotError: Unknown snapshot, or history needed for the range was expired (the
                message names the oldest snapshot that can be used as the start).
        """
        from icemor.planning.changes import prepare_changes, snapshot_range  # noqa: PLC0415 - cost: ~1 s on import icemor.table
        from icemor.scan import ChangeScan  # noqa: PLC0415 - cost: pyarrow ~200 ms on import icemor.table

        start_ms = optional_ms(start_timestamp, "start_timestamp")
        end_ms = optional_ms(end_timestamp, "end_timestamp")
        snapshots = snapshot_range(
            self.metadata,
            self.io,
            start_snapshot_id,
            end_snapshot_id,
            start_timestamp=start_ms,
            end_timestamp=end_ms,
        )
        job = prepare_changes(
            self.metadata,
            self.io,
            snapshots,
            row_filter=row_filter,
            selected_fields=selected_fields,
            net=net,
            key=key,
        )
        return ChangeScan(job)

    def describe(self) -> TableDescription:
        """Schema with field ids, partition specs, sort order, properties, format version,
        current snapshot, refs and location."""
        return describe.describe(self.metadata, self.name)

    def snapshots(self) -> list[SnapshotInfo]:
        """Every snapshot, oldest first: id, parent, time, operation, summary counts, refs."""
        return describe.snapshots(self.metadata)

    def history(self) -> list[HistoryEntry]:
        """Each change of the current snapshot, oldest first (Spark's ``history`` table)."""
        return describe.history(self.metadata)

    def upgrade(self, *, format_version: int) -> int:
        """Upgrade the table's format version (2 -> 3); return the version it had.

        Metadata only: existing position-delete files keep applying; on v3, icemor's writers
        write deletion vectors, folding a data file's older position deletes into its DV.

        Raises:
            InvalidArgumentError: A downgrade, or a version icemor cannot write (above 3).
        """
        from icemor.ops.upgrade import upgrade_table  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        before = upgrade_table(self._table, format_version=format_version)
        self.refresh()
        return before

    def append(
        self,
        data: Any,
        *,
        progress: Callable[[int], None] | None = None,
        note: Callable[[str], None] | None = None,
    ) -> int:
        """Append rows as one snapshot, streamed ``icemor.ops.append.BATCH_ROWS`` at a time.

        Example::

            table.append(pa.table({"id": [4], "qty": [1]}))   # 1 row appended

        Args:
            data: An Arrow table, record batch or RecordBatchReader (or any object with
                ``__arrow_c_stream__``), a pandas or polars DataFrame, Parquet file path(s), or
                a Spark DataFrame (written on its session's executors; only file metadata comes
                to the driver: docs/spark.md, "Writing DataFrames"). Columns are matched by
                name; missing optional ones are NULL. Conversions:
                docs/semantics.md, "Input rows" (``int -> long``, ``float -> double``,
                ``int``/``long -> double``, NULL-typed columns, nanosecond timestamps truncated to
                microseconds).
            progress: Called with the number of rows written after each batch.
            note: Told in one line how many nanosecond timestamps lost digits; default: a
                warning on the ``icemor`` logger.

        Returns:
            The number of rows appended (no snapshot when 0).

        Raises:
            InvalidArgumentError: A column that does not fit (named), NULL in a required column,
                an unreadable file; nothing is committed and no file is left.
        """
        from icemor.ops.append import append_data  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        if is_spark_dataframe(data):  # written on its session's executors
            from icemor.engines.spark.table_writes import (  # noqa: PLC0415 - optional: pyspark
                dataframe_rows,
            )

            data = dataframe_rows(data)
        rows = append_data(self._table, data, progress=progress, note=note or _log.warning)
        self.refresh()
        return rows

    def overwrite(
        self,
        data: Any,
        where: str | BooleanExpression | None = None,
        *,
        spark: SparkSession | None = None,
        note: Callable[[str], None] | None = None,
    ) -> OverwriteMetrics:
        """Replace the rows matching ``where`` (every row when None) with ``data``, in one snapshot.

        The matching rows are deleted merge-on-read (position deletes; a data file whose every
        live row matches is removed; with no condition every file is), the new rows written as
        :meth:`append` writes them, and both committed as one ``overwrite`` snapshot.

        Example::

            table.overwrite(pa.table({"id": [1], "qty": [9]}), where="id = 1").rows_added   # 1

        Args:
            data: What :meth:`append` takes.
            where: A row filter in the scan language, or a pyiceberg expression.
            spark: Run the per-file delete work on this SparkSession's executors (default for a
                Spark DataFrame: its session's, or local threads on a Spark Connect client).
            note: As in :meth:`append`.

        Raises:
            InvalidArgumentError: Bad condition, rows that do not fit; nothing is committed.
            CommitConflictError: A concurrent commit conflicts (``write.delete.isolation-level``).
        """
        from icemor.ops.overwrite import overwrite_rows  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        if is_spark_dataframe(data):  # written on its session's executors
            from icemor.engines.spark.table_writes import (  # noqa: PLC0415 - optional: pyspark
                dataframe_rows,
                removal_runner,
            )

            run = runner(self, spark) if spark is not None else removal_runner(data, self._table)
            data = dataframe_rows(data)
        else:
            run = runner(self, spark)
        metrics = overwrite_rows(self._table, data, where, run=run, note=note or _log.warning)
        self.refresh()
        return metrics

    def update_schema(self) -> SchemaChange:
        """Evolve the schema: ``table.update_schema().add_column("note", "string")
        .rename_column("qty", "quantity").widen_column("id", "long").require_column("id")
        .set_identifier_fields("id").commit()`` (one metadata commit, no snapshot)."""
        from icemor.ops.alter import SchemaChange  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        return SchemaChange(self)

    def append_files(
        self,
        files: Sequence[Path | str],
        *,
        progress: Callable[[int], None] | None = None,
        note: Callable[[str], None] | None = None,
    ) -> int:
        """Append Parquet files as one snapshot; nothing is committed if any file is bad.

        The rows are streamed ``icemor.ops.append.BATCH_ROWS`` at a time (memory is bounded
        by that, not by the input) and written as new data files, converted as :meth:`append`
        converts them.

        Args:
            files: Local Parquet files.
            progress: Called with the number of rows written after each chunk.
            note: As in :meth:`append`.

        Returns:
            The number of rows appended.

        Raises:
            InvalidArgumentError: A missing or unreadable file, or a schema that does not fit
                (the message names the differing fields).
        """
        from icemor.ops.append import append_files  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        rows = append_files(self._table, files, progress=progress, note=note or _log.warning)
        self.refresh()
        return rows

    def add_files(self, files: Sequence[Path | str]) -> int:
        """Register existing Parquet files as data files, without copying, in one snapshot.

        The files must stay where they are; their schema is checked as pyiceberg's
        ``add_files`` does.

        Returns:
            The number of rows added.

        Raises:
            InvalidArgumentError: Missing or unreadable file, schema mismatch, duplicate file.
        """
        from icemor.ops.add_files import add_files  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        rows = add_files(self._table, files)
        self.refresh()
        return rows

    def drop(self, *, purge: bool = False) -> None:
        """Remove the table from its catalog; ``purge`` also deletes every file it references."""
        drop_table(self.catalog, self.name, purge=purge)

    def delete(
        self,
        where: str | BooleanExpression | None = None,
        *,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> DeleteMetrics:
        """Delete the rows matching ``where`` as merge-on-read (position-delete files), in one commit.

        Example::

            table.delete("qty = 0 and id < 100").deleted_rows

        Args:
            where: A row filter in the scan language (``"k1 < 100 and k2 = 'a'"``) or a pyiceberg
                expression; None deletes every row (removes every data and delete file).
            spark: Run the per-file work on this SparkSession's executors instead of local threads.
            progress: Called with (files done, files) as the per-file work proceeds.

        Returns:
            Rows deleted, delete files added, data and delete files removed, the new snapshot id
            (None when nothing matched and nothing was committed), seconds taken.

        Raises:
            InvalidArgumentError: Unknown column or bad condition; a v1 or copy-on-write table.
            CommitConflictError: A concurrent commit conflicts (see ``write.delete.isolation-level``).
        """
        from icemor.ops.delete import delete_rows  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        with spark_errors(spark, self.metadata.location):
            metrics = delete_rows(self._table, where, run=runner(self, spark, progress), spark=spark)
        self.refresh()
        return metrics

    def update(
        self,
        set: Mapping[str, str],  # delta-rs / delta-spark's name
        where: str | None = None,
        *,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> UpdateMetrics:
        """Update the rows matching ``where`` as merge-on-read, in one commit.

        The old rows get position deletes; the new rows go to new data files (in their new
        partition when a partition column changes). A data file whose every live row changes
        is replaced rather than deleted row by row.

        Example::

            table.update({"qty": "qty + 1"}, where="id = 3").rows_updated   # 1

        Args:
            set: Column -> new value as SQL, e.g. ``{"qty": "qty + 1", "note": "upper(note)"}``.
            where: SQL condition (Spark SQL on Spark, DuckDB locally; the documented subset is
                the same on both); None updates every row.
            spark: Evaluate the SQL with this SparkSession and run the per-file work on its
                executors, instead of DuckDB and local threads.
            progress: Called with (files done, files) as the per-file work proceeds.

        Returns:
            Rows updated, data and delete files added, data files removed, the new snapshot id
            (None when no row matched), seconds taken.

        Raises:
            InvalidArgumentError: Unknown column, a value that does not fit its column, a
                non-boolean condition, a v1 or copy-on-write table (``write.update.mode``).
            CommitConflictError: A concurrent commit conflicts (``write.update.isolation-level``).
        """
        from icemor.ops.update import update_rows  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        with spark_errors(spark, self.metadata.location):
            metrics = update_rows(self._table, set, where, run=runner(self, spark, progress), spark=spark)
        self.refresh()
        return metrics

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        source_alias: str = "s",
        target_alias: str = "t",
        spark: SparkSession | None = None,
        note: Callable[[str], None] | None = None,
    ) -> MergeBuilder:
        """Start a MERGE of ``source`` into this table; add clauses, then ``execute()``.

        Example::

            merge = table.merge(updates, on="t.id = s.id").when_matched_update_all()
            merge.when_not_matched_insert_all().execute()

        Args:
            source: An Arrow table, Parquet file path(s), a pandas DataFrame, or (with ``spark``)
                a Spark DataFrame.
            on: The match condition as SQL over the aliases, or key column names (``["id"]``:
                ``t.id = s.id``).
            source_alias: The source's name in SQL (``s``).
            target_alias: The table's name in SQL (``t``).
            spark: Run the SQL on Spark and the per-file work on its executors.
            note: As in :meth:`append` (the source's table columns are converted alike).
        """
        return MergeBuilder(
            self, source, on, source_alias=source_alias, target_alias=target_alias, spark=spark, note=note
        )

    def apply_changes(
        self,
        changes: Any,
        *,
        key: Sequence[str],
        op_column: str = "op",
        order_by: str | None = None,
        allow_nullable_key: bool = False,
        app_id: str | None = None,
        batch_id: int | None = None,
        partitions: int | None = None,
        note: Callable[[str], None] | None = None,
        deletes: str | None = None,
    ) -> ChangeMetrics:
        """Apply a batch of change rows (CDC) in one commit: new data files, and the old rows of
        updated and deleted keys deleted by equality deletes on the key (``deletes="equality"``)
        or by position (``"position"``: deletion vectors on v3, position deletes on v2).

        Ops (``op_column``): ``I``/``insert``, ``U``/``update_after`` (an upsert),
        ``-U``/``update_before`` (ignored), ``D``/``delete`` (case-insensitive; Flink's ``+I``,
        ``+U``, ``-D`` too). The rows of one key count in row order, or by ``order_by``; only the
        net effect is applied. Equality mode never reads the table; position mode looks the keys
        up in each data file's key index (docs/cdc.md). See :mod:`icemor.ops.cdc`.

        Args:
            changes: An Arrow table (or pandas DataFrame, or Parquet file paths) runs on the local
                engine; a Spark DataFrame runs on its session's executors (repartitioned by key).
            key: The key columns; they become the table's identifier fields if it has none.
            op_column: The column holding each row's op (not written).
            order_by: A column ordering the changes of one key; two changes of a key with the
                same value are an error. Written only if it is a table column.
            allow_nullable_key: Accept optional and float/double key columns (and NULL keys).
            app_id: With ``batch_id``: record both in the snapshot summary and skip a batch
                this app already committed (exactly-once; see :func:`icemor.spark.cdc_sink`).
            batch_id: The increasing batch number of ``app_id``.
            partitions: Spark tasks for a DataFrame (default: the session's default parallelism).
            note: As in :meth:`append` (the table columns of the changes are converted alike).
            deletes: ``equality`` or ``position``; default: the table property
                ``icemor.cdc.delete-mode``, else ``position`` on v3 (and ``icemor.v4-ready``)
                tables, ``equality`` on v2.

        Returns:
            Op counts, rows written, equality and position deletes, files added, the new snapshot
            id (None when nothing was committed), whether the batch was skipped, seconds taken.

        Raises:
            InvalidArgumentError: Unknown op, missing key/op/order column, NULL keys, a schema that
                does not fit, two changes of a key with the same order value, a bad key (optional,
                float, contradicting the identifier fields); nothing is committed.
        """
        from icemor.ops.cdc import ChangeOptions, apply_changes, apply_changes_dataframe  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        options = ChangeOptions(
            key=tuple(key),
            op_column=op_column,
            order_by=order_by,
            allow_nullable_key=allow_nullable_key,
            app_id=app_id,
            batch_id=batch_id,
            deletes=deletes,
            partitions=partitions,
        )
        # the entry refreshes the table once and reads the changes once; its commit leaves the
        # table at the metadata the catalog answered with (no reload after)
        spark = None
        if is_spark_dataframe(changes):
            spark = changes.sparkSession
            with spark_errors(changes, self.metadata.location):
                metrics = apply_changes_dataframe(self._table, changes, options)
        else:
            metrics = apply_changes(self._table, changes, options, note=note or _log.warning)
        if metrics.snapshot_id is not None:
            self._compact_after_committed_batch(spark)
        return metrics

    def _compact_after_committed_batch(self, spark: SparkSession | None) -> None:
        """:meth:`compact_after_batch` for a writer whose batch is committed (``apply_changes``,
        the sinks): a failure is a warning, and the next batch plans again."""
        try:
            self.compact_after_batch(spark)
        except (IcemorError, OSError) as e:
            _log.warning("compaction after the batch failed (the batch is committed): %s", e)

    def compact_after_batch(self, spark: SparkSession | None = None) -> OptimizeResult | None:
        """The CDC writer's own compaction between its batches, if ``icemor.cdc.compact.enabled``:
        one ``optimize`` round when the health report asks for any, at most
        ``icemor.cdc.compact.max-groups-per-batch`` group commits an action when set (docs/cdc.md).
        ``apply_changes`` and the sinks call it after each committed batch; a writer of its own may too.

        Args:
            spark: Run the rewrite's per-file work on this session's executors (default: local threads).

        Returns:
            The round (its actions and the score after), or None: disabled, or nothing to do.
        """
        from icemor.maintenance.in_writer import compact_after_batch, compaction_enabled  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        if not compaction_enabled(self._table):
            return None
        result = compact_after_batch(self._table, name=self.name, run=runner(self, spark), note=_log.info)
        if result is not None:
            self.refresh()
        return result

    def inspect(self, *, snapshot_id: int | None = None, exact: bool = False) -> HealthReport:
        """The health report of the table (``icemor inspect``): files, deletes, read amplification,
        a score from 0 to 100 and the maintenance that would help (docs/health.md).

        Args:
            snapshot_id: Report on this snapshot (default: the current one).
            exact: Also count the rows equality deletes remove (reads the files they apply to).
        """
        from icemor.maintenance.health import inspect_table  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        return inspect_table(self.metadata, self.io, name=self.name, snapshot_id=snapshot_id, exact=exact)

    def check(self, *, snapshot_id: int | None = None) -> CheckReport:
        """Integrity check of the delete layer (``icemor check``): every finding, by a stable name.

        Files exist with their recorded sizes, Puffin footers and DV CRCs are valid, DVs and
        position deletes name live data files within their row counts and are not older than
        them, equality field ids exist (see :mod:`icemor.maintenance.check`).

        Args:
            snapshot_id: Check this snapshot (default: the current one).
        """
        from icemor.maintenance.check import check_table  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        return check_table(self.metadata, self.io, name=self.name, snapshot_id=snapshot_id)

    def optimize(
        self,
        *,
        dry_run: bool = False,
        spark: SparkSession | None = None,
        note: Callable[[str], None] | None = None,
    ) -> OptimizeResult:
        """One round of self-optimizing (``icemor optimize``): plan per partition from the health
        report (minor: equality -> position, delete-file compaction; major: data-file rewrite; full
        only when enabled; expiry and orphan removal only when enabled by ``icemor.optimize.*``
        properties, docs/health.md), run the chosen actions, report the score before and after.

        Args:
            dry_run: Plan only (``result.actions`` is empty, ``score_after`` None).
            spark: Run the per-file work on this SparkSession's executors instead of local threads.
            note: Called with one line per action as it finishes.
        """
        return table_maintenance.optimize(self, dry_run=dry_run, spark=spark, note=note)

    def watch(
        self,
        every: float,
        *,
        spark: SparkSession | None = None,
        stop: Callable[[], bool] | None = None,
        on_round: Callable[[RoundResult], None] | None = None,
    ) -> int:
        """``optimize --watch``: rounds of self-optimizing every ``every`` seconds until ``stop()``.

        Each round decides minor / major / full from the health report and the commits made
        since the previous round (docs/health.md), commits per group of partitions and takes no
        lock: a writer never waits for it. ``stop`` is asked between group commits and while
        waiting; a round it ends keeps what it committed and leaves no file. Returns the number
        of rounds.

        Args:
            every: Seconds between the end of a round and the start of the next.
            spark: Run each round's per-file work as Spark jobs on this session's executors.
            stop: True ends the service (None: it runs until interrupted).
            on_round: Called with each round's :class:`~icemor.maintenance.optimize.RoundResult`
                (``describe_round`` gives its one line).
        """
        return table_maintenance.watch(self, every, spark=spark, stop=stop, on_round=on_round)

    @property
    def maintenance(self) -> Maintenance:
        """Maintenance actions of merge-on-read tables (``table.maintenance.rewrite_equality_deletes()``)."""
        return Maintenance(self)

    def to_spark(self, spark: SparkSession, *, strategy: str = "auto", **scan_kwargs: Any) -> DataFrame:
        """The scan as a PySpark DataFrame whose reading runs on Spark executors.

        Args:
            spark: The SparkSession (see :func:`icemor.engines.spark.session`).
            strategy: ``auto`` (default), ``native`` or ``python``; see
                :func:`icemor.engines.spark.scan_to_dataframe`.
            **scan_kwargs: The arguments of :meth:`scan`.
        """
        return self.scan(**scan_kwargs).to_spark(spark, strategy=strategy)
