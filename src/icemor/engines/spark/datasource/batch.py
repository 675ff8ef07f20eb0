"""The data source's batch read: planning, Spark's partitions, and the executors' reads.

``schema()`` plans (:func:`plan_scan`, or for the change feed :func:`changes_shape`) on the
table state it loads; :class:`IcemorReader` makes Spark's partitions from that same job, so a
read parses its options and its condition once, and the DataFrame reads the state it was made
on. Only pickled tasks (file paths and delete-file references) travel to the executors, where
:func:`read_scan_blob` and :func:`read_changes_blob` read them with the shared reader.
``icemor.spark.read`` plans with the same functions (:func:`plan_scan`, :func:`plan_changes_job`).
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as st

from icemor.engines.spark import _arrow_schema
from icemor.engines.spark.datasource.api import DataSourceReader, InputPartition
from icemor.engines.spark.datasource.options import ChangeRequest, ReadRequest
from icemor.engines.spark.errors import worker_errors, worker_iterator
from icemor.engines.spark.types import spark_schema
from icemor.engines.spark.worker import file_io, freeze_survivors, io_spec
from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError
from icemor.expr.duck import filter_batches
from icemor.io.changes import CHANGE_COLUMNS
from icemor.io.reader import read_run
from icemor.io.uuids import to_text_batch
from icemor.planning.changes import (
    ChangeJob,
    SnapshotChange,
    prepare_changes,
    snapshot_changes,
    snapshot_range,
)
from icemor.planning.scan_job import ScanJob, SnapshotSelection, prepare_scan
from icemor.spec.tasks import CombinedScanTask

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata

    from icemor.engines.spark.datasource.services import Services
    from icemor.engines.spark.worker import IOSpec

__all__ = [
    "BEFORE_FIRST",
    "FEED_SOURCE",
    "IcemorReader",
    "ScanPartition",
    "change_output_schema",
    "change_partitions",
    "changes_in_range",
    "changes_shape",
    "check_schema",
    "ordered_names",
    "output_schema",
    "partition_blob",
    "plan_changes_job",
    "plan_scan",
    "read_changes_blob",
    "read_scan_blob",
    "scan_partitions",
]

BEFORE_FIRST = -1
"""The offset before a table's first snapshot (snapshot ids are positive)."""


# ----------------------------------------------------------------------------------- planning


def plan_scan(metadata: TableMetadata, io: FileIO, request: ReadRequest) -> ScanJob:
    """The scan a read request describes.

    Raises:
        InvalidArgumentError: A bad filter or column; a branch option naming a tag or the reverse.
        NoSuchSnapshotError: The snapshot, time, branch or tag does not exist.
    """
    ref = request.branch or request.tag
    if ref is not None:
        found = metadata.refs.get(ref)
        kind = "branch" if request.branch is not None else "tag"
        if found is None:
            msg = f"{kind} {ref!r} does not exist"
            raise NoSuchSnapshotError(msg)
        actual = str(getattr(found.snapshot_ref_type, "value", found.snapshot_ref_type)).lower()
        if actual != kind:
            msg = f"{ref!r} is a {actual}, not a {kind}: use the {actual} option"
            raise InvalidArgumentError(msg)
    return prepare_scan(
        metadata,
        io,
        row_filter=request.row_filter,
        selected_fields=request.columns,
        selection=SnapshotSelection(request.snapshot_id, request.as_of_timestamp, ref),
        metadata_columns=request.metadata_columns,
    )


def plan_changes_job(
    metadata: TableMetadata,
    io: FileIO,
    request: ChangeRequest,
    *,
    start_snapshot_id: int | None = None,
    end_snapshot_id: int | None = None,
    bounded: bool = True,
) -> ChangeJob:
    """The change feed of ``(start, end]``: the request's bounds, or (a stream's micro-batch) the
    given snapshot ids (``BEFORE_FIRST``: from the table's first snapshot)."""
    if bounded:
        start, start_ts = request.start_snapshot_id, request.start_timestamp
        end, end_ts = request.end_snapshot_id, request.end_timestamp
    else:
        start = None if start_snapshot_id == BEFORE_FIRST else start_snapshot_id
        start_ts, end, end_ts = None, end_snapshot_id, None
    snapshots = snapshot_range(metadata, io, start, end, start_timestamp=start_ts, end_timestamp=end_ts)
    return prepare_changes(
        metadata,
        io,
        snapshots,
        row_filter=request.row_filter,
        selected_fields=request.columns,
        key=request.key,
    )


def changes_shape(metadata: TableMetadata, io: FileIO, request: ChangeRequest) -> ChangeJob:
    """The change feed's columns, planned before its mode is known: they depend on the current
    schema only, not on the range (a stream's start is checked when it starts), so this is the
    feed after the current snapshot; :func:`changes_in_range` gives a batch read its range."""
    current = metadata.current_snapshot()
    after_current = replace(
        request,
        start_snapshot_id=None if current is None else current.snapshot_id,
        start_timestamp=None,
        end_snapshot_id=None,
        end_timestamp=None,
    )
    return plan_changes_job(metadata, io, after_current)


def changes_in_range(shape: ChangeJob, request: ChangeRequest) -> ChangeJob:
    """:func:`plan_changes_job` of ``request`` on the table state of ``shape``
    (:func:`changes_shape`), whose filter, columns and key are already parsed: only the range
    differs."""
    snapshots = snapshot_range(
        shape.metadata,
        shape.io,
        request.start_snapshot_id,
        request.end_snapshot_id,
        start_timestamp=request.start_timestamp,
        end_timestamp=request.end_timestamp,
    )
    return replace(shape, snapshots=snapshots)


def ordered_names(columns: Sequence[str], names: Sequence[str]) -> list[str]:
    """``names`` (a scan's columns) in the order the ``columns`` option gives them, as Spark's
    ``select`` would; metadata columns last. ``*`` keeps the table's order."""
    if "*" in columns:
        return list(names)
    first: list[str] = []
    for column in columns:
        top = column.split(".", 1)[0]
        if top in names and top not in first:
            first.append(top)
    return first + [n for n in names if n not in first]


def output_schema(job: ScanJob, columns: Sequence[str] = ("*",)) -> st.StructType:
    """The Spark schema of a scan's rows (without the columns only its residual filter reads),
    in the ``columns`` option's order."""
    full = spark_schema(job.options.projected_schema, job.read_schema)
    names = job.output_names if job.output_names is not None else full.fieldNames()
    return st.StructType([full[n] for n in ordered_names(columns, names)])


FEED_SOURCE = "icemor.feed.source"
"""The metadata key of the feed's ``_change_type`` column naming its table (``{"table", "catalog"}``
as JSON): Spark carries a column's metadata through a query to the sink, which creates a missing
mirror like the source (:mod:`icemor.ops.cdc.mirror`)."""


def change_output_schema(
    job: ChangeJob, columns: Sequence[str] = ("*",), *, source: tuple[str, str | None] | None = None
) -> st.StructType:
    """The Spark schema of the change feed's rows (table columns nullable, as ``ChangeScan.to_spark``);
    ``source`` (the table's identifier and catalog) is written in ``_change_type``'s metadata."""
    table = spark_schema(job.options.projected_schema, job.options.arrow_schema)
    meta = {} if source is None else {FEED_SOURCE: json.dumps({"table": source[0], "catalog": source[1]})}
    return st.StructType(
        [
            st.StructField(table[n].name, table[n].dataType, True)
            for n in ordered_names(columns, job.output_names)
        ]
        + [
            st.StructField(CHANGE_COLUMNS[0], st.StringType(), False, meta),
            st.StructField(CHANGE_COLUMNS[1], st.IntegerType(), False),
            st.StructField(CHANGE_COLUMNS[2], st.LongType(), False),
        ]
    )


def check_schema(declared: st.StructType, actual: st.StructType, what: str) -> None:
    """Refuse a read whose rows would not have the schema Spark was given.

    Raises:
        InvalidArgumentError: The table's columns changed, or ``.schema()`` gave others.
    """
    if [(f.name, f.dataType) for f in declared.fields] != [(f.name, f.dataType) for f in actual.fields]:
        msg = (
            f"{what}: the table's columns are now {actual.simpleString()}, not "
            f"{declared.simpleString()} (the schema changed, or .schema() was given): read it again, "
            "without .schema()"
        )
        raise InvalidArgumentError(msg)


# ------------------------------------------------------------------------- executor-side reads


@dataclass
class ScanPartition(InputPartition):  # type: ignore[misc,unused-ignore]
    """One Spark task of a read: a pickled (io, combined task or changed files, how to read)."""

    blob: bytes


def _run_in_order(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [fn(item) for item in items]


def read_scan_blob(blob: bytes, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Executors: the rows of one combined scan task, every delete applied, in ``target``."""
    (props, location), combined, opts, residual, keep = pickle.loads(blob)
    io = file_io(props, location)
    batches: Iterable[pa.RecordBatch] = read_run(io, combined.tasks, opts)
    if residual is not None:
        batches = filter_batches(batches, residual, keep)
    for batch in batches:
        yield to_text_batch(batch if batch.schema.names == keep else batch.select(keep), target)
    freeze_survivors()  # (see there: Spark collects the worker's whole heap after each task)


def read_changes_blob(blob: bytes, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Executors: one snapshot's change rows (or one file's, where the snapshot cannot both
    delete and insert), as the local change feed computes them, in ``target``."""
    (props, location), step, opts, residual, key, names = pickle.loads(blob)
    io = file_io(props, location)
    rows = snapshot_changes(io, step, _run_in_order, options=opts, residual=residual, key=key)
    if rows is None or not rows.num_rows:
        return
    for batch in rows.select(list(names)).to_batches():
        yield to_text_batch(batch, target)


def scan_partitions(job: ScanJob, spec: IOSpec, columns: Sequence[str] = ("*",)) -> list[ScanPartition]:
    """One partition per combined task (per piece when there are fewer than two per core, as
    ``to_spark``'s Python-worker strategy does)."""
    combined = job.plan_tasks(job.live_files())
    if len(combined) < 2 * (os.cpu_count() or 1):
        combined = [CombinedScanTask((t,)) for ct in combined for t in ct.tasks]
    keep = ordered_names(columns, job.output_names or job.read_schema.names)
    return [ScanPartition(pickle.dumps((spec, ct, job.options, job.residual, keep))) for ct in combined]


def change_partitions(job: ChangeJob, spec: IOSpec, columns: Sequence[str] = ("*",)) -> list[ScanPartition]:
    """The change feed's tasks: a snapshot that may both delete and insert rows (its carry-overs
    and update pairs span its files) is one task; any other snapshot, one task per changed file."""
    names = (*ordered_names(columns, job.output_names), *CHANGE_COLUMNS)
    out = []
    for step in job.planned:
        if not step.files:
            continue
        inserts = any(
            c.before is None or (c.after is not None and not set(c.before) <= set(c.after))
            for c in step.files
        )
        deletes = any(c.before is not None for c in step.files)
        groups = [step.files] if inserts and deletes else [(c,) for c in step.files]
        for files in groups:
            part = SnapshotChange(step.snapshot_id, step.ordinal, step.operation, tuple(files))
            out.append(ScanPartition(pickle.dumps((spec, part, job.options, job.residual, job.key, names))))
    return out


def partition_blob(partition: Any) -> bytes | None:
    """The blob of one of our partitions; None for Spark's placeholder (no partitions planned)."""
    return getattr(partition, "blob", None)


# ---------------------------------------------------------------------------------- the reader


class IcemorReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    """A batch read: a snapshot of the table (a :class:`ReadRequest`) or its change feed (a
    :class:`ChangeRequest`).

    ``planned`` is what the data source planned when Spark asked for its schema, on the table
    state it loaded (the scan; the change feed's shape, :func:`changes_shape`): the partitions
    come from it, nothing is parsed or planned again. None when the schema was given: then the
    current table state is planned here.
    """

    def __init__(
        self,
        services: Services,
        request: ReadRequest | ChangeRequest,
        schema: st.StructType,
        planned: ScanJob | ChangeJob | None,
    ) -> None:
        self.services = services
        self.request = request
        self.schema = schema
        self.planned = planned

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["planned"] = None  # the job stays on the driver; tasks carry what they read
        return state

    @worker_errors()
    def partitions(self) -> list[ScanPartition]:
        request = self.request
        if isinstance(request, ChangeRequest):
            if isinstance(self.planned, ChangeJob):
                changes = changes_in_range(self.planned, request)
            else:
                table = self.services.load_table(request.table, request.catalog)
                changes = plan_changes_job(table.metadata, table.io, request)
            what = "the icemor change feed"
            check_schema(self.schema, change_output_schema(changes, request.columns), what)
            return change_partitions(changes, io_spec(changes.io, changes.metadata.location), request.columns)
        if isinstance(self.planned, ScanJob):
            scan = self.planned
        else:
            table = self.services.load_table(request.table, request.catalog)
            scan = plan_scan(table.metadata, table.io, request)
        check_schema(self.schema, output_schema(scan, request.columns), f"icemor read of {request.table}")
        return scan_partitions(scan, io_spec(scan.io, scan.metadata.location), request.columns)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        blob = partition_blob(partition)
        if blob is None:
            return iter(())
        target = _arrow_schema(self.schema)
        if isinstance(self.request, ChangeRequest):
            return worker_iterator(read_changes_blob(blob, target))
        return worker_iterator(read_scan_blob(blob, target))
