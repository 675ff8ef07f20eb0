"""The public table facade: load a table, describe it, scan it merge-on-read, append to it, delete rows."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.exceptions import ValidationError as _PyIcebergValidationError

from icemor.exceptions import CorruptFileError, InvalidArgumentError, MissingFileError, table_lookup_errors

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from contextlib import AbstractContextManager
    from pathlib import Path

    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import DataFrame, SparkSession

    from icemor.engines import Runner
    from icemor.maintenance.check import CheckReport
    from icemor.maintenance.data_files import DataRewriteMetrics
    from icemor.maintenance.equality_to_position import ConversionMetrics
    from icemor.maintenance.expire import ExpireMetrics
    from icemor.maintenance.health import HealthReport
    from icemor.maintenance.optimize import OptimizeResult, RoundResult
    from icemor.maintenance.orphans import OrphanMetrics
    from icemor.maintenance.position_deletes import PositionDeleteMetrics
    from icemor.ops.alter import SchemaChange
    from icemor.ops.apply_changes import ChangeMetrics
    from icemor.ops.delete import DeleteMetrics
    from icemor.ops.merge import MergeClause, MergeMetrics
    from icemor.ops.overwrite import OverwriteMetrics
    from icemor.ops.update import UpdateMetrics
    from icemor.scan import ChangeScan, Scan
    from icemor.spec.describe import HistoryEntry, SnapshotInfo, TableDescription

__all__ = ["Maintenance", "MergeBuilder", "Table", "Timestamp", "to_epoch_ms"]

Timestamp = datetime | date | str | int
"""A point in time: a datetime (naive means UTC), a date (its midnight, UTC), ISO-8601 text
(``2024-05-01``, ``2024-05-01T12:00:00+02:00``) or milliseconds since the epoch."""

# Notes (nanosecond timestamps truncated) of the Python API go here, one per operation; the
# CLI prints them as ``icemor: note: ...`` instead.
_log = logging.getLogger("icemor")


def to_epoch_ms(value: Timestamp, *, what: str = "the timestamp") -> int:
    """Milliseconds since the epoch of a :data:`Timestamp`; icemor's one parser of points in time
    (``as_of_timestamp``, change-feed bounds, expiry cut-offs, and the CLI's options).

    Raises:
        InvalidArgumentError: Anything else, or text that is neither digits nor ISO-8601 (one line).
    """
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(value, date):
        return int(datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            return to_epoch_ms(datetime.fromisoformat(text), what=what)
        except ValueError:
            pass
    msg = (
        f"{what} must be a datetime, ISO-8601 text (2024-05-01T12:00:00, UTC unless zoned) or "
        f"milliseconds since the epoch, got {value!r}"
    )
    raise InvalidArgumentError(msg)


def _optional_ms(value: Timestamp | None, what: str) -> int | None:
    return None if value is None else to_epoch_ms(value, what=what)


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
        # the metadata file's own problems first: its decode errors are ValueErrors too
        with table_lookup_errors(identifier, cat.name):
            try:
                return cls(cat.load_table(identifier), cat)
            except FileNotFoundError as e:
                msg = f"metadata file of table {identifier!r} not found: {_metadata_file(cat, identifier, e)}"
                raise MissingFileError(msg) from e
            except (_PyIcebergValidationError, PydanticValidationError, UnicodeDecodeError) as e:
                # unparsable metadata JSON (truncated, damaged): pydantic's message names no file
                msg = (
                    f"metadata file of table {identifier!r} is truncated or corrupt: "
                    f"{_metadata_file(cat, identifier, e)} ({_first_problem(e)})"
                )
                raise CorruptFileError(msg) from e

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
        from icemor.planning.scan_job import SnapshotSelection, prepare_scan
        from icemor.scan import Scan

        job = prepare_scan(
            self.metadata,
            self.io,
            row_filter=row_filter,
            selected_fields=selected_fields,
            selection=SnapshotSelection(snapshot_id, _optional_ms(as_of_timestamp, "as_of_timestamp"), ref),
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
        from icemor.planning.changes import prepare_changes
        from icemor.scan import ChangeScan

        job = prepare_changes(
            self.metadata,
            self.io,
            start_snapshot_id,
            end_snapshot_id,
            start_timestamp=_optional_ms(start_timestamp, "start_timestamp"),
            end_timestamp=_optional_ms(end_timestamp, "end_timestamp"),
            row_filter=row_filter,
            selected_fields=selected_fields,
            net=net,
            key=key,
        )
        return ChangeScan(job)

    def describe(self) -> TableDescription:
        """Schema with field ids, partition specs, sort order, properties, format version,
        current snapshot, refs and location."""
        from icemor.spec.describe import describe

        return describe(self.metadata, self.name)

    def snapshots(self) -> list[SnapshotInfo]:
        """Every snapshot, oldest first: id, parent, time, operation, summary counts, refs."""
        from icemor.spec.describe import snapshots

        return snapshots(self.metadata)

    def history(self) -> list[HistoryEntry]:
        """Each change of the current snapshot, oldest first (Spark's ``history`` table)."""
        from icemor.spec.describe import history

        return history(self.metadata)

    def upgrade(self, *, format_version: int) -> int:
        """Upgrade the table's format version (2 -> 3); return the version it had.

        Metadata only: existing position-delete files keep applying; on v3, icemor's writers
        write deletion vectors, folding a data file's older position deletes into its DV.

        Raises:
            InvalidArgumentError: A downgrade, or a version icemor cannot write (above 3).
        """
        from icemor.ops.upgrade import upgrade_table

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
        from icemor.ops.append import append_data

        if _is_spark_dataframe(data):  # written on its session's executors
            from icemor.engines.spark.table_writes import dataframe_rows

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
        from icemor.ops.overwrite import overwrite_rows

        if _is_spark_dataframe(data):  # written on its session's executors
            from icemor.engines.spark.table_writes import dataframe_rows, removal_runner

            run = self._runner(spark) if spark is not None else removal_runner(data, self._table)
            data = dataframe_rows(data)
        else:
            run = self._runner(spark)
        metrics = overwrite_rows(self._table, data, where, run=run, note=note or _log.warning)
        self.refresh()
        return metrics

    def update_schema(self) -> SchemaChange:
        """Evolve the schema: ``table.update_schema().add_column("note", "string")
        .rename_column("qty", "quantity").widen_column("id", "long").require_column("id")
        .set_identifier_fields("id").commit()`` (one metadata commit, no snapshot)."""
        from icemor.ops.alter import SchemaChange

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
        from icemor.ops.append import append_files

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
        from icemor.ops.add_files import add_files

        rows = add_files(self._table, files)
        self.refresh()
        return rows

    def drop(self, *, purge: bool = False) -> None:
        """Remove the table from its catalog; ``purge`` also deletes every file it references."""
        from icemor.ops.drop import drop_table

        drop_table(self.catalog, self.name, purge=purge)

    def delete(
        self,
        where: str | BooleanExpression | None = None,
        *,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> DeleteMetrics:
        """Delete the rows matching ``where`` as merge-on-read (position-delete files), in one commit.

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
        from icemor.ops.delete import delete_rows

        with _spark_errors(spark, self.metadata.location):
            metrics = delete_rows(self._table, where, run=self._runner(spark, progress), spark=spark)
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
        from icemor.ops.update import update_rows

        with _spark_errors(spark, self.metadata.location):
            metrics = update_rows(self._table, set, where, run=self._runner(spark, progress), spark=spark)
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

        ``table.merge(src, on="t.id = s.id").when_matched_update_all()``
        ``.when_not_matched_insert_all().execute()``

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
        up in each data file's key index (docs/cdc.md). See :mod:`icemor.ops.apply_changes`.

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
        from icemor.ops.apply_changes import apply_changes, apply_changes_dataframe

        options: dict[str, Any] = {
            "key": key,
            "op_column": op_column,
            "order_by": order_by,
            "allow_nullable_key": allow_nullable_key,
            "app_id": app_id,
            "batch_id": batch_id,
            "deletes": deletes,
        }
        if _is_spark_dataframe(changes):
            with _spark_errors(changes, self.metadata.location):
                metrics = apply_changes_dataframe(self._table, changes, partitions=partitions, **options)
        else:
            from icemor.ops.inputs import TableRows, read_arrow

            convert = TableRows(self.schema(), table=self.name, strict=False)
            rows = read_arrow(changes, what="the changes", convert=convert)
            metrics = apply_changes(self._table, rows, **options)
            if (text := convert.summary()) is not None and not metrics.skipped:
                (note or _log.warning)(text)
        if metrics.snapshot_id is None:
            self.refresh()
        # else the commit left the table at the metadata the catalog answered it with (no reload)
        return metrics

    def inspect(self, *, snapshot_id: int | None = None, exact: bool = False) -> HealthReport:
        """The health report of the table (``icemor inspect``): files, deletes, read amplification,
        a score from 0 to 100 and the maintenance that would help (docs/health.md).

        Args:
            snapshot_id: Report on this snapshot (default: the current one).
            exact: Also count the rows equality deletes remove (reads the files they apply to).
        """
        from icemor.maintenance.health import inspect_table

        return inspect_table(self.metadata, self.io, name=self.name, snapshot_id=snapshot_id, exact=exact)

    def check(self, *, snapshot_id: int | None = None) -> CheckReport:
        """Integrity check of the delete layer (``icemor check``): every finding, by a stable name.

        Files exist with their recorded sizes, Puffin footers and DV CRCs are valid, DVs and
        position deletes name live data files within their row counts and are not older than
        them, equality field ids exist (see :mod:`icemor.maintenance.check`).

        Args:
            snapshot_id: Check this snapshot (default: the current one).
        """
        from icemor.maintenance.check import check_table

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
        from icemor.maintenance.optimize import optimize

        result = optimize(
            self._table,
            name=self.name,
            run=self._runner(spark),
            dry_run=dry_run,
            expire=self.maintenance.expire_snapshots,
            remove_orphans=self.maintenance.remove_orphan_files,
            note=note,
        )
        self.refresh()
        return result

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
        import time

        from icemor.maintenance.optimize import WatchState, watch_round

        state = WatchState()
        run = self._runner(spark)
        while stop is None or not stop():
            r = watch_round(
                self._table,
                state,
                name=self.name,
                run=run,
                expire=self.maintenance.expire_snapshots,
                remove_orphans=self.maintenance.remove_orphan_files,
                stop=stop,
            )
            if on_round is not None:
                on_round(r)
            waited = 0.0
            while waited < every and (stop is None or not stop()):
                time.sleep(min(0.05, every - waited))
                waited += 0.05
        self.refresh()
        return state.rounds

    @property
    def maintenance(self) -> Maintenance:
        """Maintenance actions of merge-on-read tables (``table.maintenance.rewrite_equality_deletes()``)."""
        return Maintenance(self)

    def _runner(
        self, spark: SparkSession | None, progress: Callable[[int, int], None] | None = None
    ) -> Runner:
        if spark is None:
            from icemor.engines.local import runner

            return runner(self.io, progress=progress)
        from icemor.engines.spark import runner as spark_runner

        return spark_runner(spark, self.io, self.metadata.location, progress=progress)

    def to_spark(self, spark: SparkSession, *, strategy: str = "auto", **scan_kwargs: Any) -> DataFrame:
        """The scan as a PySpark DataFrame whose reading runs on Spark executors.

        Args:
            spark: The SparkSession (see :func:`icemor.engines.spark.session`).
            strategy: ``auto`` (default), ``native`` or ``python``; see
                :func:`icemor.engines.spark.scan_to_dataframe`.
            **scan_kwargs: The arguments of :meth:`scan`.
        """
        return self.scan(**scan_kwargs).to_spark(spark, strategy=strategy)


class MergeBuilder:
    """Clauses of a MERGE, in the order given (the first whose condition holds acts), as in Spark."""

    def __init__(
        self, table: Table, source: Any, on: str | Sequence[str], *, source_alias: str, target_alias: str,
        spark: SparkSession | None, note: Callable[[str], None] | None = None,
    ) -> None:  # fmt: skip
        self._note = note or _log.warning
        self._table = table
        self._source = source
        self._on = on
        self._aliases = (source_alias, target_alias)
        self._spark = spark
        self._clauses: list[MergeClause] = []

    def _add(self, kind: str, condition: str | None, values: Mapping[str, str] | None) -> MergeBuilder:
        from icemor.ops.merge import MergeClause

        self._clauses.append(MergeClause(kind, condition, values))  # type: ignore[arg-type]
        return self

    def when_matched_update(self, set: Mapping[str, str], condition: str | None = None) -> MergeBuilder:
        """``WHEN MATCHED [AND condition] THEN UPDATE SET col = value, …`` (values are SQL)."""
        return self._add("update", condition, dict(set))

    def when_matched_update_all(self, condition: str | None = None) -> MergeBuilder:
        """``WHEN MATCHED [AND condition] THEN UPDATE SET *``: every column from the source."""
        return self._add("update", condition, None)

    def when_matched_delete(self, condition: str | None = None) -> MergeBuilder:
        """``WHEN MATCHED [AND condition] THEN DELETE``."""
        return self._add("delete", condition, {})

    def when_not_matched_insert(
        self, values: Mapping[str, str], condition: str | None = None
    ) -> MergeBuilder:
        """``WHEN NOT MATCHED [AND condition] THEN INSERT (cols) VALUES (…)``; other columns NULL."""
        return self._add("insert", condition, dict(values))

    def when_not_matched_insert_all(self, condition: str | None = None) -> MergeBuilder:
        """``WHEN NOT MATCHED [AND condition] THEN INSERT *``: every column from the source."""
        return self._add("insert", condition, None)

    def execute(self, *, progress: Callable[[int, int], None] | None = None) -> MergeMetrics:
        """Run the MERGE as one merge-on-read snapshot; ``progress`` is called with (files done,
        files) as the per-file work proceeds.

        Returns:
            Rows updated, deleted and inserted, files added and removed, the snapshot id.

        Raises:
            InvalidArgumentError: Unknown column, source without the key columns, a value that
                does not fit its column, a non-boolean condition, a target row matched by
                several source rows, ``*`` with a source that lacks table columns.
            CommitConflictError: A concurrent commit conflicts (``write.merge.isolation-level``).
        """
        from icemor.ops.merge import merge_rows, read_source

        t = self._table
        from icemor.ops.inputs import TableRows

        convert = TableRows(t.schema(), table=t.name, strict=False)
        source = read_source(self._source)
        if not _is_spark_dataframe(source):  # a Spark DataFrame stays on the executors, typed by Spark
            source = convert.convert_table(source, what="the MERGE source")
        source_alias, target_alias = self._aliases
        with _spark_errors(self._spark, t.metadata.location):
            metrics = merge_rows(
                t.pyiceberg,
                source,
                self._on,
                self._clauses,
                source_alias=source_alias,
                target_alias=target_alias,
                run=t._runner(self._spark, progress),
                spark=self._spark,
            )
        t.refresh()
        if (text := convert.summary()) is not None:
            self._note(text)
        return metrics


class Maintenance:
    """Maintenance of one table; each action commits at most one snapshot and returns its metrics."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def rewrite_equality_deletes(self, *, spark: SparkSession | None = None) -> ConversionMetrics:
        """Rewrite every equality delete as position deletes (rows unchanged, reads much faster).

        Args:
            spark: Run the per-file work on this SparkSession's executors instead of local threads.
        """
        from icemor.maintenance.equality_to_position import rewrite_equality_deletes

        t = self._table
        metrics = rewrite_equality_deletes(t.pyiceberg, run=t._runner(spark))
        t.refresh()
        return metrics

    def rewrite_position_deletes(
        self,
        *,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> PositionDeleteMetrics:
        """Minor compaction: merge the position-delete files of each partition (``write.delete.
        granularity=partition``) or data file (``file``) into one sorted file; drop dangling deletes.

        Rows are unchanged; the new files keep the largest data sequence number of the files
        they replace (as Iceberg Java). One ``replace`` snapshot, or none when nothing is to do.

        Args:
            spark: Run the per-group work on this SparkSession's executors instead of local threads.
            progress: Called with (groups done, groups) as the work proceeds.
        """
        from icemor.maintenance.position_deletes import rewrite_position_deletes

        t = self._table
        metrics = rewrite_position_deletes(t.pyiceberg, run=t._runner(spark, progress))
        t.refresh()
        return metrics

    def rewrite_data_files(
        self,
        delete_ratio_threshold: float = 0.3,
        delete_file_threshold: int | None = None,
        target_file_size_bytes: int | None = None,
        where: str | BooleanExpression | None = None,
        *,
        use_starting_sequence_number: bool = True,
        partial_progress_enabled: bool = False,
        partial_progress_max_commits: int = 10,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> DataRewriteMetrics:
        """Major compaction: rewrite data files with every delete applied, and bin-pack small ones.

        Iceberg Java's selection and defaults: a file whose deleted fraction reaches
        ``delete_ratio_threshold``, or to which ``delete_file_threshold`` or more delete files
        apply (None: never), or whose size is outside 75-180 % of the target, is a candidate;
        a partition's candidates are rewritten when one has too many deletes, or there are 5
        or more, or more than the target's bytes. One ``replace`` snapshot removes the old data
        files and the delete files that then apply to nothing.

        Args:
            delete_ratio_threshold: Java's ``delete-ratio-threshold`` (position deletes, counted exactly).
            delete_file_threshold: Java's ``delete-file-threshold``.
            target_file_size_bytes: Default: the table's ``write.target-file-size-bytes`` (512 MiB).
                pyiceberg's writer sizes files by in-memory Arrow bytes: files on disk are smaller.
            where: Only data files that may hold rows matching this filter (whole files).
            use_starting_sequence_number: Java's ``use-starting-sequence-number``: the new files
                keep the starting snapshot's sequence number, so equality deletes committed
                meanwhile still apply to them.
            partial_progress_enabled: Java's ``partial-progress.enabled``: the file groups are
                committed in several commits, each validated on its own; a conflicting one is
                planned again (up to 3 times), the others stand (``metrics.failed_commits``).
            partial_progress_max_commits: Java's ``partial-progress.max-commits``.
            spark: Run the per-unit work on this SparkSession's executors instead of local threads.
            progress: Called with (units done, units) as the work proceeds.

        Raises:
            CommitConflictError: A concurrent commit removed a file being rewritten or added
                deletes for one (nothing committed, no file left); with partial progress, only
                when no commit succeeded.
        """
        from icemor.maintenance.data_files import rewrite_data_files

        t = self._table
        metrics = rewrite_data_files(
            t.pyiceberg,
            run=t._runner(spark, progress),
            delete_ratio_threshold=delete_ratio_threshold,
            delete_file_threshold=delete_file_threshold,
            target_file_size_bytes=target_file_size_bytes,
            where=where,
            use_starting_sequence_number=use_starting_sequence_number,
            partial_progress_enabled=partial_progress_enabled,
            partial_progress_max_commits=partial_progress_max_commits,
        )
        t.refresh()
        return metrics

    def expire_snapshots(
        self,
        older_than: Timestamp | None = None,
        retain_last: int | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExpireMetrics:
        """Expire snapshots as Iceberg Java does, then delete the files no remaining snapshot reaches.

        Every ref's head is kept, and along each branch the ancestors younger than
        ``older_than`` or among its ``retain_last`` newest; refs older than their
        ``max-ref-age-ms`` go. Deleted: manifest lists and manifests of removed snapshots, the
        data, delete and Puffin files only they reached, and their statistics files.

        Args:
            older_than: A datetime (naive means UTC) or ms since the epoch; default now minus
                ``history.expire.max-snapshot-age-ms`` (5 days).
            retain_last: Default ``history.expire.min-snapshots-to-keep`` (1).
            dry_run: Commit and delete nothing; the metrics say what would go.
            progress: Called with (files deleted, files to delete).
        """
        from icemor.maintenance.expire import expire_snapshots

        t = self._table
        metrics = expire_snapshots(
            t.pyiceberg,
            older_than_ms=_optional_ms(older_than, "older_than"),
            retain_last=retain_last,
            dry_run=dry_run,
            progress=progress,
        )
        t.refresh()
        return metrics

    def remove_orphan_files(
        self,
        older_than: Timestamp | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> OrphanMetrics:
        """Delete files under the table location that no metadata references and that are older
        than ``older_than`` (default 3 days ago, Java's safety window: younger files may belong to
        a commit in flight).

        Args:
            older_than: A datetime (naive means UTC) or ms since the epoch.
            dry_run: List them, delete nothing.
            progress: Called with (files deleted, orphan files).

        Files under another table's location (one nested in this table's location) are never
        deleted, and nothing is when this table lies inside another's: ``skipped`` in the
        metrics names those tables. Every table of the catalog is loaded to learn where it lies.

        Raises:
            MissingFileError, CorruptFileError: Some table's metadata cannot be read, so where it
                lies is unknown; nothing is deleted.
        """
        from icemor.catalog import table_locations
        from icemor.maintenance.orphans import remove_orphan_files

        t = self._table
        return remove_orphan_files(
            t.pyiceberg,
            tables=lambda: table_locations(t.catalog, strict=True),
            older_than_ms=_optional_ms(older_than, "older_than"),
            dry_run=dry_run,
            progress=progress,
        )


def _spark_errors(spark: object, location: str) -> AbstractContextManager[None]:
    """Where Spark runs the work (``spark``: a session or a DataFrame, None: it does not), a Spark
    exception carrying an icemor error (a task's, a file of the table missing) raised as that
    error, its one line (:mod:`icemor.engines.spark.errors`)."""
    if spark is None:
        return nullcontext()
    from icemor.engines.spark.errors import spark_errors

    return spark_errors(location=location)


def _is_spark_dataframe(obj: object) -> bool:
    """A PySpark DataFrame (classic or Connect), told without importing pyspark."""
    return type(obj).__name__ == "DataFrame" and type(obj).__module__.startswith("pyspark.")


def _metadata_file(catalog: Catalog, identifier: str, error: Exception) -> str:
    from icemor.catalog import metadata_location

    location = metadata_location(catalog, identifier)
    if location is not None:
        return location
    return getattr(error, "filename", None) or "(location unknown to this catalog)"


def _first_problem(e: BaseException) -> str:
    if isinstance(e, _PyIcebergValidationError) and e.__cause__ is not None:
        return _first_problem(e.__cause__)  # pyiceberg wraps pydantic's error
    if isinstance(e, PydanticValidationError) and e.errors():
        return str(e.errors()[0]["msg"])
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
