"""The change feed as a stream: offsets are snapshots, a micro-batch is ``table.changes(A, B)``.

Spark calls the offsets and ``partitions`` in a Python worker on the driver's host and ``read``
on the executors; each micro-batch plans on the table as it is then (:func:`plan_changes_job`)
and reads with the batch reader's tasks (:func:`change_partitions`, :func:`read_changes_blob`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icemor.engines.spark import _arrow_schema
from icemor.engines.spark.datasource.api import (
    DataSourceStreamReader,
    ReadAllAvailable,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from icemor.engines.spark.datasource.batch import (
    BEFORE_FIRST,
    ScanPartition,
    change_output_schema,
    change_partitions,
    check_schema,
    partition_blob,
    plan_changes_job,
    read_changes_blob,
)
from icemor.engines.spark.errors import worker_errors, worker_iterator
from icemor.engines.spark.worker import io_spec
from icemor.exceptions import NoSuchSnapshotError
from icemor.planning.changes import snapshot_range

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyiceberg.table import Table as PyIcebergTable
    from pyspark.sql.types import StructType

    from icemor.engines.spark.datasource.options import ChangeRequest
    from icemor.engines.spark.datasource.services import Services
    from icemor.exceptions import IcemorError

__all__ = ["IcemorStreamReader", "RefusedStreamReader"]


def _offset(snapshot: Any | None) -> dict[str, int]:
    if snapshot is None:
        return {"snapshot_id": BEFORE_FIRST, "sequence_number": 0}
    return {"snapshot_id": int(snapshot.snapshot_id), "sequence_number": int(snapshot.sequence_number or 0)}


class IcemorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
    """The change feed as a stream: an offset is the last snapshot read (``{"snapshot_id",
    "sequence_number"}``, ``snapshot_id`` -1 before the first); a micro-batch from offset A to B
    is ``table.changes(A, B)``: the same rows, ``_change_type`` and ``_change_ordinal``.

    Start: ``startingOffsets`` ``earliest`` (before the first snapshot: every row the table had)
    or ``latest`` (the default), ``starting-snapshot-id`` (exclusive, as ``table.changes``),
    ``starting-timestamp`` (the snapshots committed after it), Iceberg's ``stream-from-timestamp``
    (at or after it), else the current snapshot when the query first starts
    (only new changes; an empty table: from its first snapshot). A restarted query resumes from
    its checkpoint's offsets, and a micro-batch run again reads the same snapshots: they are
    immutable. A checkpoint whose snapshot was expired fails, naming the oldest one readable.
    ``max-snapshots-per-trigger`` bounds a micro-batch (``Trigger.AvailableNow`` honours it).
    """

    def __init__(self, services: Services, request: ChangeRequest, schema: StructType) -> None:
        self.services = services
        self.request = request
        self.schema = schema
        self._until: int | None = None

    def _table(self) -> PyIcebergTable:
        return self.services.load_table(self.request.table, self.request.catalog)

    @worker_errors()
    def initialOffset(self) -> dict[str, int]:
        table = self._table()
        metadata = table.metadata
        r = self.request
        if r.starting_offsets == "earliest":
            snapshot_range(metadata, table.io)  # expired history: names the oldest readable snapshot
            return _offset(None)
        if r.start_snapshot_id is not None:
            snapshot = metadata.snapshot_by_id(r.start_snapshot_id)
            if snapshot is None:
                snapshot_range(metadata, table.io, r.start_snapshot_id)  # expired: names the oldest readable
                msg = f"snapshot {r.start_snapshot_id} does not exist"
                raise NoSuchSnapshotError(msg)
            return _offset(snapshot)
        if r.start_timestamp is not None:
            after = snapshot_range(metadata, table.io, start_timestamp=r.start_timestamp)
            if not after:
                return _offset(metadata.current_snapshot())
            parent = after[0].parent_snapshot_id
            return _offset(None if parent is None else metadata.snapshot_by_id(parent))
        return _offset(metadata.current_snapshot())

    @worker_errors()
    def prepareForTriggerAvailableNow(self) -> None:
        current = self._table().metadata.current_snapshot()
        self._until = BEFORE_FIRST if current is None else current.snapshot_id

    def getDefaultReadLimit(self) -> Any:
        # a ReadLimit must be one of Spark's built-in kinds: a snapshot counts as one "file"
        if self.request.max_snapshots is None:
            return ReadAllAvailable()
        return ReadMaxFiles(self.request.max_snapshots)

    @worker_errors()
    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        table = self._table()
        metadata = table.metadata
        end = self._until
        if end == BEFORE_FIRST or metadata.current_snapshot() is None:
            return start
        first = start["snapshot_id"]
        snapshots = snapshot_range(metadata, table.io, None if first == BEFORE_FIRST else first, end)
        if not snapshots:
            return start
        most = getattr(limit, "max_files", None)
        if most is not None:
            snapshots = snapshots[: max(1, int(most))]
        return _offset(snapshots[-1])

    @worker_errors()
    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[ScanPartition]:
        if start["snapshot_id"] == end["snapshot_id"]:
            return []
        table = self._table()
        job = plan_changes_job(
            table.metadata,
            table.io,
            self.request,
            start_snapshot_id=start["snapshot_id"],
            end_snapshot_id=end["snapshot_id"],
            bounded=False,
        )
        columns = self.request.columns
        what = f"the icemor change stream of {self.request.table}"
        check_schema(self.schema, change_output_schema(job, columns), what)
        return change_partitions(job, io_spec(table.io, table.metadata.location), columns)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        blob = partition_blob(partition)
        if blob is None:
            return iter(())
        return worker_iterator(read_changes_blob(blob, _arrow_schema(self.schema)))

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: offsets are snapshots, which the table keeps until they expire."""


class RefusedStreamReader(IcemorStreamReader):
    """The stream of refused options: each of Spark's calls raises the refusal (see
    ``IcemorDataSource.streamReader``)."""

    def __init__(self, error: IcemorError, schema: StructType) -> None:
        self.error = error
        self.schema = schema

    @worker_errors()
    def initialOffset(self) -> dict[str, int]:
        raise self.error

    @worker_errors()
    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    @worker_errors()
    def getDefaultReadLimit(self) -> Any:
        raise self.error

    @worker_errors()
    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        raise self.error

    @worker_errors()
    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[ScanPartition]:
        raise self.error

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        raise self.error
