"""The public scan facade: a merge-on-read read of one snapshot, on the local engine or Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icemor.engines import local as local_engine

if TYPE_CHECKING:
    import duckdb
    import pandas as pd  # type: ignore[import-untyped]
    import polars as pl
    from pyiceberg.io import FileIO
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame, SparkSession

    from icemor.io.reader import ReadOptions
    from icemor.planning.changes import ChangeJob
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.tasks import CombinedScanTask, PlannedFile

__all__ = ["ChangeScan", "Scan"]


class _Exports:
    """``to_pandas``, ``to_polars`` and ``to_duckdb`` over a scan's Arrow batch stream."""

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        raise NotImplementedError

    def to_pandas(self, **kwargs: Any) -> pd.DataFrame:
        """All rows as a pandas DataFrame, converted batch by batch from the Arrow stream.

        Args:
            **kwargs: Passed to ``pyarrow.Table.to_pandas`` (e.g. ``types_mapper=pd.ArrowDtype``).
        """
        return self.to_arrow_batch_reader().read_pandas(**kwargs)

    def to_polars(self) -> pl.DataFrame:
        """All rows as a polars DataFrame, built from the Arrow batch stream (polars is imported
        only here)."""
        import polars as pl  # noqa: PLC0415 - optional: polars

        frame = pl.from_arrow(self.to_arrow_batch_reader())
        assert isinstance(frame, pl.DataFrame)  # a reader gives a frame, not a series
        return frame

    def to_duckdb(self, connection: duckdb.DuckDBPyConnection, name: str) -> duckdb.DuckDBPyRelation:
        """Register the rows as the view ``name`` on a DuckDB connection, streamed and re-readable:
        each query DuckDB runs on it reads the scan afresh (same snapshot), pulling batches as
        it goes, so memory stays bounded as for :meth:`to_arrow_batch_reader` and nothing is
        held between queries; each query pays a read. To read once and query many times, copy
        it into DuckDB: ``CREATE TABLE t AS SELECT * FROM name``.

        Returns:
            The relation of the view.
        """
        connection.register(name, _Rescannable(self))
        return connection.table(name)


class _Rescannable:
    """An Arrow stream source (``__arrow_c_stream__``) that opens a new stream of the scan at each
    call: DuckDB asks for one per scan of a registered object (and for its schema), where a
    registered RecordBatchReader answers one query only. Opening a stream reads nothing until
    DuckDB pulls a batch."""

    def __init__(self, scan: _Exports) -> None:
        self._scan = scan

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._scan.to_arrow_batch_reader().__arrow_c_stream__(requested_schema)


class Scan(_Exports):
    """A planned-on-demand merge-on-read scan: every position delete, DV and equality delete applies."""

    def __init__(self, job: ScanJob) -> None:
        self.job = job

    @property
    def snapshot(self) -> Snapshot | None:
        return self.job.snapshot

    @property
    def options(self) -> ReadOptions:
        return self.job.options

    @property
    def io(self) -> FileIO:
        return self.job.io

    def plan_files(self) -> list[PlannedFile]:
        """Data files the scan reads, each with the delete files that apply to it."""
        return list(self.job.planned)

    def live_files(self) -> list[PlannedFile]:
        """The planned files minus those whose every row is deleted by position deletes or DVs."""
        return self.job.live_files()

    def plan_tasks(
        self,
        *,
        target_size: int | None = None,
        open_file_cost: int | None = None,
        lookback: int | None = None,
    ) -> list[CombinedScanTask]:
        """Split and combine the planned files by ``read.split.*`` table properties (or overrides)."""
        return self.job.plan_tasks(target_size=target_size, open_file_cost=open_file_cost, lookback=lookback)

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.job.arrow_schema

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """Stream the rows; memory is bounded by the delete sets plus a few batches."""
        return pa.RecordBatchReader.from_batches(self.arrow_schema, local_engine.read_batches(self.job))

    def to_arrow(self) -> pa.Table:
        """All rows as one Arrow table."""
        return pa.Table.from_batches(list(local_engine.read_batches(self.job)), schema=self.arrow_schema)

    def count(self) -> int:
        """Number of live rows, without reading data where position deletes alone apply."""
        return local_engine.count_rows(self.job)

    def to_spark(self, spark: SparkSession, *, strategy: str = "auto") -> DataFrame:
        """The scan as a PySpark DataFrame read on the executors (see :meth:`icemor.table.Table.to_spark`)."""
        from icemor.engines.spark import scan_to_dataframe  # noqa: PLC0415 - optional: pyspark

        return scan_to_dataframe(self.job, spark, strategy=strategy)


class ChangeScan(_Exports):
    """The rows inserted, deleted and updated over a snapshot range (see :mod:`icemor.planning.changes`).

    Columns: the selected table columns, then ``_change_type`` (``INSERT``, ``DELETE``,
    ``UPDATE_BEFORE``, ``UPDATE_AFTER``, as Java), ``_change_ordinal`` and ``_commit_snapshot_id``.
    """

    def __init__(self, job: ChangeJob) -> None:
        self.job = job

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.job.arrow_schema

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """Stream the changes snapshot by snapshot (one snapshot's changes are held at a time)."""
        # imported by Table.changes already; at the top it would cost every Table.scan() ~10 ms
        from icemor.planning.changes import change_batches  # noqa: PLC0415 - cost: ~10 ms for Table.scan()

        return pa.RecordBatchReader.from_batches(
            self.arrow_schema, change_batches(self.job, lambda fn, items: local_engine.map_ordered(items, fn))
        )

    def to_arrow(self) -> pa.Table:
        """All changes as one Arrow table, ordered by ``_change_ordinal``."""
        return self.to_arrow_batch_reader().read_all()

    def count(self) -> int:
        """Number of change rows."""
        return sum(b.num_rows for b in self.to_arrow_batch_reader())

    def to_spark(self, spark: SparkSession) -> DataFrame:
        """The changes as a PySpark DataFrame: rows read on the executors, carry-overs, update pairs
        and ``net`` in Spark SQL; the same rows as :meth:`to_arrow` (table columns nullable)."""
        from icemor.engines.spark.feed import changes_to_dataframe  # noqa: PLC0415 - optional: pyspark

        return changes_to_dataframe(self.job, spark)
