"""The ``icemor`` Spark data source: batch reads, the change feed as a stream, and a CDC sink.

``icemor.spark.register(spark)`` registers :class:`IcemorDataSource` (PySpark 4.2+'s Python Data
Source API) under the name ``icemor``; ``icemor.spark.read`` is the same read as a function on
every PySpark version. Both parse their options here (:func:`read_request`), plan with the
shared planner (:func:`plan_scan`, :func:`icemor.planning.changes.prepare_changes`) and read with
the shared reader (:func:`icemor.io.reader.read_task`, :func:`icemor.planning.changes.snapshot_changes`):
the delete semantics live in the core only.

Where each part runs: Spark calls ``schema()``, ``partitions()``, the stream's
offsets and the sink's ``commit`` in Python workers on the driver's host (with the JVM's
environment: ``ICEMOR_HOME``, pyiceberg's catalog settings); ``read()`` and the sink's
``write()`` in the executors' Python workers. Only pickled tasks (file paths and delete-file
references) travel to the executors; rows never reach the driver, except in the sink's
``commit``, which reads its micro-batch's staged rows to apply them (docs/cdc.md).

The data source needs what lives above the engine layer (the catalog, the timestamp parser, the
CDC apply): :class:`Services`, given by the facade at registration and carried by the
registered class (pickled with it to Spark's Python workers).

Errors: Spark wraps what a data source raises in its own exception (``[PYTHON_DATA_SOURCE_ERROR]
Failed to create Python data source instance: ...``) around the worker's Python traceback. An
icemor error leaves the worker as its one line instead (:func:`~icemor.engines.spark.errors.worker_errors`
around each method Spark calls), so the first line the user sees ends with icemor's, and
``icemor.spark.errors()`` raises it as icemor's error.

No ``pushFilters``: Spark 4.3 keeps a Python source's planned read (partitions and read
function) on the DataFrame's relation and reuses it for a later query of that DataFrame that
pushes no filter, so ``df.where("id > 100").count()`` then ``df.count()`` counts the filtered
rows again (measured; ``PythonDataSourceV2.getOrCreateReadInfo``). Spark evaluates its filters
over the source's rows instead; the ``filter`` option prunes, and ``register``'s front gives
Python clients ``to_spark``'s plan, whose Parquet scans take Spark's pushed filters.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import uuid
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from icemor.engines.spark import _arrow_schema
from icemor.engines.spark.errors import worker_errors, worker_iterator
from icemor.engines.spark.types import spark_schema
from icemor.engines.spark.worker import file_io, freeze_survivors, io_spec
from icemor.engines.spark.write import data_path
from icemor.exceptions import IcemorError, InvalidArgumentError, NoSuchSnapshotError, UnsupportedFeatureError
from icemor.io.changes import CHANGE_COLUMNS
from icemor.planning.scan_job import SnapshotSelection, prepare_scan
from icemor.spec.identifiers import STAGING_DIR

try:  # PySpark 4.2+: Python data sources with streaming admission control
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, SupportsTriggerAvailableNow

    HAS_DATA_SOURCES = True
except ImportError:  # PySpark 3.5: placeholders, so that the option parsing here serves read()

    def _missing(name: str) -> Any:
        return type(name, (), {"__doc__": "PySpark 3.5 has no Python data sources"})

    DataSource = _missing("DataSource")
    DataSourceReader = _missing("DataSourceReader")
    DataSourceStreamReader = _missing("DataSourceStreamReader")
    DataSourceStreamArrowWriter = _missing("DataSourceStreamArrowWriter")
    InputPartition = _missing("InputPartition")
    WriterCommitMessage = _missing("WriterCommitMessage")
    SupportsTriggerAvailableNow = _missing("SupportsTriggerAvailableNow")
    ReadAllAvailable = ReadMaxFiles = _missing("ReadLimit")
    HAS_DATA_SOURCES = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from icemor.engines.spark.worker import IOSpec
    from icemor.planning.changes import ChangeJob
    from icemor.planning.scan_job import ScanJob

__all__ = [
    "HAS_DATA_SOURCES",
    "NAME",
    "ChangeRequest",
    "IcemorDataSource",
    "ReadRequest",
    "Services",
    "SinkRequest",
    "change_request",
    "data_source_class",
    "is_change_feed",
    "ordered_names",
    "output_schema",
    "plan_changes_job",
    "plan_scan",
    "read_request",
    "register",
    "sink_request",
]

NAME = "icemor"
SINK_STAGING = STAGING_DIR
"""Under the table's data path, as the engine's other staged files (engines/spark/write.py)."""
BEFORE_FIRST = -1
"""The offset before a table's first snapshot (snapshot ids are positive)."""


@dataclass(frozen=True)
class Services:
    """What the data source needs from the layers above the engine, given at registration.

    Each is a module-level function (pickled by reference): Spark's Python workers import it.
    """

    load_table: Callable[[str, str | None], PyIcebergTable]
    """``(identifier, catalog name or None) -> pyiceberg table``; errors as ``icemor.load_table``."""
    epoch_ms: Callable[[Any], int]
    """A point in time (ms, ISO-8601 text, datetime) as ms since the epoch (``icemor.table.to_epoch_ms``)."""
    apply_changes: Callable[..., Any]
    """``(identifier, catalog, rows: pa.Table, *, key, op_column, order_by, allow_nullable_key,
    app_id, batch_id)``: one CDC batch as ``Table.apply_changes`` applies it (exactly once per
    app id and batch id)."""


# ------------------------------------------------------------------------------------ options


def _canon(key: str) -> str:
    """Option names match case-insensitively and ignoring ``-``/``_``: ``snapshot-id``,
    ``snapshot_id`` and ``snapshotId`` are one option (Spark's own style and Python's)."""
    return key.lower().replace("-", "").replace("_", "")


_READ = (
    "path",
    "catalog",
    "snapshot-id",
    "as-of-timestamp",
    "branch",
    "tag",
    "columns",
    "filter",
    "metadata-columns",
)
_CHANGES = (
    "path",
    "catalog",
    "read-change-feed",
    "starting-snapshot-id",
    "starting-timestamp",
    "ending-snapshot-id",
    "ending-timestamp",
    "columns",
    "filter",
    "key",
    "max-snapshots-per-trigger",
)
_SINK = (
    "path",
    "catalog",
    "key",
    "op-column",
    "order-by",
    "allow-nullable-key",
    "app-id",
    "checkpointLocation",
)
_SPARK_OWN = {
    _canon(k) for k in ("checkpointLocation", "queryName", "path", "owner", "provider", "location", "comment")
}
"""Options Spark itself passes to a source or sink (``CREATE TABLE ... USING icemor`` adds its owner)."""


class _Options:
    """Options by canonical name, refusing unknown ones in one line (a typo must not read all rows)."""

    def __init__(self, options: Mapping[str, Any], known: Sequence[str], what: str) -> None:
        names = {_canon(k): k for k in known}
        self.values: dict[str, Any] = {}
        for key, value in options.items():
            canon = _canon(str(key))
            if canon not in names:
                if canon in _SPARK_OWN:
                    continue
                shown = ", ".join(k for k in known if k not in ("path", "checkpointLocation"))
                msg = f"unknown option {key!r} for {what}: the options are {shown}"
                raise InvalidArgumentError(msg)
            if value is not None:
                self.values[canon] = value

    def text(self, name: str) -> str | None:
        value = self.values.get(_canon(name))
        if value is None:
            return None
        text = str(value).strip()
        return text or None

    def integer(self, name: str) -> int | None:
        value = self.values.get(_canon(name))
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        text = str(value).strip()
        if text.lstrip("-").isdigit():
            return int(text)
        msg = f"option {name} must be an integer, got {value!r}"
        raise InvalidArgumentError(msg)

    def flag(self, name: str) -> bool:
        value = self.values.get(_canon(name), False)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        msg = f"option {name} must be true or false, got {value!r}"
        raise InvalidArgumentError(msg)

    def names(self, name: str) -> tuple[str, ...] | None:
        value = self.values.get(_canon(name))
        if value is None:
            return None
        parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
        if not parts or any(not p for p in parts):
            msg = f"option {name} must name columns, comma-separated (a,b), got {value!r}"
            raise InvalidArgumentError(msg)
        return tuple(parts)

    def time(self, name: str, epoch_ms: Callable[[Any], int]) -> int | None:
        value = self.values.get(_canon(name))
        return None if value is None else epoch_ms(value)

    def table(self, table: str | None) -> str:
        name = table or self.text("path")
        if not name:
            msg = "name the table: .load('db.t') (or the path option)"
            raise InvalidArgumentError(msg)
        return name


@dataclass(frozen=True)
class ReadRequest:
    """A batch read of one snapshot, as options describe it (picklable)."""

    table: str
    catalog: str | None = None
    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    branch: str | None = None
    tag: str | None = None
    columns: tuple[str, ...] = ("*",)
    row_filter: str | None = None
    metadata_columns: bool = False


@dataclass(frozen=True)
class ChangeRequest:
    """A read of the change feed, batch (``(start, end]``) or streamed (picklable)."""

    table: str
    catalog: str | None = None
    start_snapshot_id: int | None = None
    start_timestamp: int | None = None
    end_snapshot_id: int | None = None
    end_timestamp: int | None = None
    columns: tuple[str, ...] = ("*",)
    row_filter: str | None = None
    key: tuple[str, ...] | None = None
    max_snapshots: int | None = None


@dataclass(frozen=True)
class SinkRequest:
    """The CDC sink's options (picklable)."""

    table: str
    catalog: str | None
    key: tuple[str, ...]
    op_column: str
    order_by: str | None
    allow_nullable_key: bool
    app_id: str


def is_change_feed(options: Mapping[str, Any]) -> bool:
    """Whether the options ask for the change feed: ``read-change-feed`` (Delta's
    ``readChangeFeed``) or any starting/ending bound. Spark asks a source for one schema whether
    it is read or streamed, so the options alone decide between the table and its changes."""
    keys = {_canon(str(k)) for k, v in options.items() if v is not None}
    bounds = {_canon(k) for k in _CHANGES if k.startswith(("starting", "ending"))}
    if keys & bounds:
        return True
    value = next((v for k, v in options.items() if _canon(str(k)) == _canon("read-change-feed")), False)
    return value is True or str(value).strip().lower() == "true"


def read_request(
    options: Mapping[str, Any], epoch_ms: Callable[[Any], int], *, table: str | None = None
) -> ReadRequest:
    """Parse a batch read's options (``spark.read.format("icemor").option(...)``, or the keyword
    arguments of ``icemor.spark.read``): strings or Python values.

    Raises:
        InvalidArgumentError: An unknown option, a malformed value, more than one snapshot selector.
    """
    o = _Options(options, _READ, "an icemor read")
    request = ReadRequest(
        table=o.table(table),
        catalog=o.text("catalog"),
        snapshot_id=o.integer("snapshot-id"),
        as_of_timestamp=o.time("as-of-timestamp", epoch_ms),
        branch=o.text("branch"),
        tag=o.text("tag"),
        columns=o.names("columns") or ("*",),
        row_filter=o.text("filter"),
        metadata_columns=o.flag("metadata-columns"),
    )
    given = [
        n
        for n, v in (
            ("snapshot-id", request.snapshot_id),
            ("as-of-timestamp", request.as_of_timestamp),
            ("branch", request.branch),
            ("tag", request.tag),
        )
        if v is not None
    ]
    if len(given) > 1:
        msg = f"give at most one of snapshot-id, as-of-timestamp, branch and tag, not {' and '.join(given)}"
        raise InvalidArgumentError(msg)
    return request


def change_request(
    options: Mapping[str, Any],
    epoch_ms: Callable[[Any], int],
    *,
    table: str | None = None,
    stream: bool | None,
) -> ChangeRequest:
    """Parse the change feed's options (batch: ``(starting, ending]``; stream: from ``starting``;
    None: either, as when Spark asks for the schema).

    Raises:
        InvalidArgumentError: An unknown option, a malformed value, both an id and a time for one
            bound, an ending bound or ``read-change-feed=false`` on a stream.
    """
    o = _Options(options, _CHANGES, "an icemor change feed")
    request = ChangeRequest(
        table=o.table(table),
        catalog=o.text("catalog"),
        start_snapshot_id=o.integer("starting-snapshot-id"),
        start_timestamp=o.time("starting-timestamp", epoch_ms),
        end_snapshot_id=o.integer("ending-snapshot-id"),
        end_timestamp=o.time("ending-timestamp", epoch_ms),
        columns=o.names("columns") or ("*",),
        row_filter=o.text("filter"),
        key=o.names("key"),
        max_snapshots=o.integer("max-snapshots-per-trigger"),
    )
    if request.start_snapshot_id is not None and request.start_timestamp is not None:
        msg = "give starting-snapshot-id or starting-timestamp, not both"
        raise InvalidArgumentError(msg)
    if stream is True and (request.end_snapshot_id is not None or request.end_timestamp is not None):
        msg = "a stream has no end: ending-snapshot-id and ending-timestamp are for batch reads of changes"
        raise InvalidArgumentError(msg)
    if stream is False and request.max_snapshots is not None:
        msg = "max-snapshots-per-trigger is for streams, not batch reads"
        raise InvalidArgumentError(msg)
    if request.max_snapshots is not None and request.max_snapshots < 1:
        msg = f"max-snapshots-per-trigger must be at least 1, got {request.max_snapshots}"
        raise InvalidArgumentError(msg)
    if "readchangefeed" in o.values and not o.flag("read-change-feed"):
        msg = "read-change-feed is false but a starting or ending bound asks for the change feed"
        raise InvalidArgumentError(msg)
    return request


def sink_request(options: Mapping[str, Any]) -> SinkRequest:
    """Parse the CDC sink's options; the app id defaults to the query's checkpoint location.

    Raises:
        InvalidArgumentError: An unknown option, no key, no app id and no checkpoint location.
    """
    o = _Options(options, _SINK, "the icemor streaming sink")
    key = o.names("key")
    if not key:
        msg = "the icemor sink needs the key columns: .option('key', 'id') (comma-separated)"
        raise InvalidArgumentError(msg)
    app_id = o.text("app-id")
    if app_id is None:
        checkpoint = o.text("checkpointLocation")
        if checkpoint is None:
            msg = (
                "the icemor sink needs a stable identity for exactly-once commits: "
                ".option('checkpointLocation', ...) (its path becomes the app id) or .option('app-id', ...)"
            )
            raise InvalidArgumentError(msg)
        app_id = f"checkpoint:{checkpoint.rstrip('/')}"
    return SinkRequest(
        table=o.table(None),
        catalog=o.text("catalog"),
        key=key,
        op_column=o.text("op-column") or "op",
        order_by=o.text("order-by"),
        allow_nullable_key=o.flag("allow-nullable-key"),
        app_id=app_id,
    )


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
    from icemor.planning.changes import prepare_changes

    if bounded:
        start, start_ts = request.start_snapshot_id, request.start_timestamp
        end, end_ts = request.end_snapshot_id, request.end_timestamp
    else:
        start = None if start_snapshot_id == BEFORE_FIRST else start_snapshot_id
        start_ts, end, end_ts = None, end_snapshot_id, None
    return prepare_changes(
        metadata,
        io,
        start,
        end,
        start_timestamp=start_ts,
        end_timestamp=end_ts,
        row_filter=request.row_filter,
        selected_fields=request.columns,
        key=request.key,
    )


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


def output_schema(job: ScanJob, columns: Sequence[str] = ("*",)) -> StructType:
    """The Spark schema of a scan's rows (without the columns only its residual filter reads),
    in the ``columns`` option's order."""
    from pyspark.sql.types import StructType

    full = spark_schema(job.options.projected_schema, job.read_schema)
    names = job.output_names if job.output_names is not None else full.fieldNames()
    return StructType([full[n] for n in ordered_names(columns, names)])


def change_output_schema(job: ChangeJob, columns: Sequence[str] = ("*",)) -> StructType:
    """The Spark schema of the change feed's rows (table columns nullable, as ``ChangeScan.to_spark``)."""
    from pyspark.sql import types as st

    table = spark_schema(job.options.projected_schema, job.options.arrow_schema)
    return st.StructType(
        [
            st.StructField(table[n].name, table[n].dataType, True)
            for n in ordered_names(columns, job.output_names)
        ]
        + [
            st.StructField(CHANGE_COLUMNS[0], st.StringType(), False),
            st.StructField(CHANGE_COLUMNS[1], st.IntegerType(), False),
            st.StructField(CHANGE_COLUMNS[2], st.LongType(), False),
        ]
    )


def _same_schema(declared: StructType, actual: StructType, what: str) -> None:
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
    from icemor.io.reader import read_run
    from icemor.io.uuids import to_text_batch

    (props, location), combined, opts, residual, keep = pickle.loads(blob)
    io = file_io(props, location)
    batches: Iterable[pa.RecordBatch] = read_run(io, combined.tasks, opts)
    if residual is not None:
        from icemor.expr.duck import filter_batches

        batches = filter_batches(batches, residual, keep)
    for batch in batches:
        yield to_text_batch(batch if batch.schema.names == keep else batch.select(keep), target)
    freeze_survivors()  # (see there: Spark collects the worker's whole heap after each task)


def read_changes_blob(blob: bytes, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Executors: one snapshot's change rows (or one file's, where the snapshot cannot both
    delete and insert), as the local change feed computes them, in ``target``."""
    from icemor.io.uuids import to_text_batch
    from icemor.planning.changes import snapshot_changes

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
        from icemor.spec.tasks import CombinedScanTask

        combined = [CombinedScanTask((t,)) for ct in combined for t in ct.tasks]
    keep = ordered_names(columns, job.output_names or job.read_schema.names)
    return [ScanPartition(pickle.dumps((spec, ct, job.options, job.residual, keep))) for ct in combined]


def change_partitions(job: ChangeJob, spec: IOSpec, columns: Sequence[str] = ("*",)) -> list[ScanPartition]:
    """The change feed's tasks: a snapshot that may both delete and insert rows (its carry-overs
    and update pairs span its files) is one task; any other snapshot, one task per changed file."""
    from icemor.planning.changes import SnapshotChange

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


def _partition_blob(partition: Any) -> bytes | None:
    """The blob of one of our partitions; None for Spark's placeholder (no partitions planned)."""
    return getattr(partition, "blob", None)


# --------------------------------------------------------------------------------- data source


def _as_dict(options: Any) -> dict[str, Any]:
    return {str(k): v for k, v in dict(options).items()}


class IcemorDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.read.format("icemor")``, ``readStream`` (the change feed) and ``writeStream`` (CDC).

    Registered by ``icemor.spark.register(spark)``, which gives the :class:`Services`
    (:func:`data_source_class`). ``df.write.format("icemor")`` is ``icemor.engines.spark.table_writes``'s
    ``IcemorBatchWriter``.
    """

    services: ClassVar[Services | None] = None
    pinned: tuple[IOSpec, str] | None = None
    """(io, metadata file) read when Spark asked for the schema: the DataFrame reads that table
    state (as ``to_spark`` plans when called), not a later one."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _services(self) -> Services:
        if self.services is None:
            msg = "register the icemor data source with icemor.spark.register(spark)"
            raise UnsupportedFeatureError(msg)
        return self.services

    @worker_errors()
    def schema(self) -> StructType:
        services = self._services()
        options = _as_dict(self.options)
        if is_change_feed(options):
            changes = change_request(options, services.epoch_ms, stream=None)
            table = services.load_table(changes.table, changes.catalog)
            self.pinned = (io_spec(table.io, table.metadata.location), table.metadata_location)
            # the columns depend on the current schema only, not on the range (a stream's start
            # is checked when it starts)
            current = table.metadata.current_snapshot()
            shape = replace(
                changes,
                start_snapshot_id=None if current is None else current.snapshot_id,
                start_timestamp=None,
                end_snapshot_id=None,
                end_timestamp=None,
            )
            return change_output_schema(plan_changes_job(table.metadata, table.io, shape), changes.columns)
        request = read_request(options, services.epoch_ms)
        table = services.load_table(request.table, request.catalog)
        self.pinned = (io_spec(table.io, table.metadata.location), table.metadata_location)
        return output_schema(plan_scan(table.metadata, table.io, request), request.columns)

    @worker_errors()
    def reader(self, schema: StructType) -> IcemorReader:
        services = self._services()
        options = _as_dict(self.options)
        if is_change_feed(options):
            return IcemorReader(
                services, None, change_request(options, services.epoch_ms, stream=False), schema, self.pinned
            )
        return IcemorReader(services, read_request(options, services.epoch_ms), None, schema, self.pinned)

    def streamReader(self, schema: StructType) -> IcemorStreamReader:
        try:
            services = self._services()
            options = _as_dict(self.options)
            if not is_change_feed(options):
                msg = (
                    "a stream of an icemor table is its change feed: add .option('readChangeFeed', "
                    "'true') (changes after the current snapshot) or .option('starting-snapshot-id', "
                    "...) / .option('starting-timestamp', ...)"
                )
                raise InvalidArgumentError(msg)
            request = change_request(options, services.epoch_ms, stream=True)
        except IcemorError as e:
            # raised at Spark's first call: PySpark 4.3's stream runner loses an error raised here
            # (its cleanup calls stop() on the reader it never got: an UnboundLocalError instead)
            return _RefusedStreamReader(e, schema)
        return IcemorStreamReader(services, request, schema)

    @worker_errors()
    def writer(self, schema: StructType, overwrite: bool) -> Any:
        """``df.write.format("icemor")``: the executors write data files, the driver commits once."""
        from icemor.engines.spark.table_writes import IcemorBatchWriter

        assert IcemorBatchWriter is not None  # this class exists only where PySpark has data sources
        return IcemorBatchWriter(_as_dict(self.options), schema, overwrite)

    @worker_errors()
    def streamWriter(self, schema: StructType, overwrite: bool) -> IcemorStreamWriter:
        if overwrite:
            msg = "the icemor sink applies changes: use outputMode('append') or 'update', not 'complete'"
            raise InvalidArgumentError(msg)
        services = self._services()
        request = sink_request(_as_dict(self.options))
        table = services.load_table(request.table, request.catalog)
        digest = hashlib.sha256(request.app_id.encode()).hexdigest()[:24]
        prefix = (
            f"{data_path(table.metadata.location, table.metadata.properties)}/{SINK_STAGING}/sink-{digest}"
        )
        return IcemorStreamWriter(
            services, request, schema, io_spec(table.io, table.metadata.location), prefix
        )


_CLASSES: dict[Services, type[IcemorDataSource]] = {}
_REGISTERED: weakref.WeakKeyDictionary[Any, type[IcemorDataSource]] = weakref.WeakKeyDictionary()


def data_source_class(services: Services) -> type[IcemorDataSource]:
    """:class:`IcemorDataSource` with ``services`` (one class per services): a class made here is
    pickled by value, so Spark's Python workers get the services with it."""
    cls = _CLASSES.get(services)
    if cls is None:
        attrs = {"services": services, "__module__": __name__}
        cls = _CLASSES[services] = type(NAME.capitalize() + "DataSource", (IcemorDataSource,), attrs)
    return cls


def register(
    spark: SparkSession,
    services: Services,
    *,
    front: Callable[[Any, str | None, dict[str, Any]], Any] | None = None,
) -> None:
    """Register the ``icemor`` data source on ``spark`` (classic or Connect).

    Args:
        spark: The session.
        services: What the source needs from above the engine.
        front: ``read(spark, table, options) -> DataFrame`` serving this session's Python
            ``spark.read.format("icemor")...load()`` instead of the data source
            (:mod:`icemor.engines.spark._compat.front`); None: the data source serves it.

    Raises:
        UnsupportedFeatureError: PySpark older than 4.2 (no Python data sources with streaming
            admission control).
    """
    if not HAS_DATA_SOURCES:
        import pyspark

        msg = (
            f"the icemor Spark data source needs PySpark 4.2 or later (Python data sources), not "
            f"{pyspark.__version__}: use icemor.spark.read(spark, 'db.t', ...) and "
            "icemor.spark.cdc_sink(...) with foreachBatch, which work on every version"
        )
        raise UnsupportedFeatureError(msg)
    from icemor.engines.spark._compat import front as _front

    cls = data_source_class(services)
    if _REGISTERED.get(spark) is not cls:  # registering again makes Spark's next reads cold
        # PySpark 3.5's stubs (what mypy sees in the main venv) have no dataSource
        spark.dataSource.register(cls)  # type: ignore[attr-defined,unused-ignore]
        _REGISTERED[spark] = cls
    if front is not None:  # classic or Connect: to_spark's plan serves both
        _front.install(spark, front)
    else:
        _front.uninstall(spark)


def _load(
    services: Services, pinned: tuple[IOSpec, str] | None, table: str, catalog: str | None
) -> tuple[TableMetadata, FileIO, IOSpec]:
    """The table state a read plans with: the pinned metadata file, or the catalog's current."""
    if pinned is not None:
        from pyiceberg.serializers import FromInputFile

        (props, location), metadata_file = pinned
        io = file_io(props, location)
        return FromInputFile.table_metadata(io.new_input(metadata_file)), io, pinned[0]
    t = services.load_table(table, catalog)
    return t.metadata, t.io, io_spec(t.io, t.metadata.location)


class IcemorReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    """A batch read: a snapshot of the table (``request``) or its change feed (``changes``)."""

    def __init__(
        self,
        services: Services,
        request: ReadRequest | None,
        changes: ChangeRequest | None,
        schema: StructType,
        pinned: tuple[IOSpec, str] | None,
    ) -> None:
        self.services = services
        self.request = request
        self.changes = changes
        self.schema = schema
        self.pinned = pinned
        self._state: tuple[TableMetadata, FileIO, IOSpec] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = None  # metadata and FileIO stay on the driver; tasks carry what they need
        return state

    def _table(self) -> tuple[TableMetadata, FileIO, IOSpec]:
        if self._state is None:
            request = self.request if self.request is not None else self.changes
            assert request is not None
            self._state = _load(self.services, self.pinned, request.table, request.catalog)
        return self._state

    @worker_errors()
    def partitions(self) -> list[ScanPartition]:
        metadata, io, spec = self._table()
        if self.changes is not None:
            job = plan_changes_job(metadata, io, self.changes)
            _same_schema(
                self.schema, change_output_schema(job, self.changes.columns), "the icemor change feed"
            )
            return change_partitions(job, spec, self.changes.columns)
        assert self.request is not None
        scan = plan_scan(metadata, io, self.request)
        columns = self.request.columns
        _same_schema(self.schema, output_schema(scan, columns), f"icemor read of {self.request.table}")
        return scan_partitions(scan, spec, columns)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        blob = _partition_blob(partition)
        if blob is None:
            return iter(())
        target = _arrow_schema(self.schema)
        if self.changes is not None:
            return worker_iterator(read_changes_blob(blob, target))
        return worker_iterator(read_scan_blob(blob, target))


# ------------------------------------------------------------------------------------- stream


def _offset(snapshot: Any | None) -> dict[str, int]:
    if snapshot is None:
        return {"snapshot_id": BEFORE_FIRST, "sequence_number": 0}
    return {"snapshot_id": int(snapshot.snapshot_id), "sequence_number": int(snapshot.sequence_number or 0)}


class IcemorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
    """The change feed as a stream: an offset is the last snapshot read (``{"snapshot_id",
    "sequence_number"}``, ``snapshot_id`` -1 before the first); a micro-batch from offset A to B
    is ``table.changes(A, B)``: the same rows, ``_change_type`` and ``_change_ordinal``.

    Start: ``starting-snapshot-id`` (exclusive, as ``table.changes``), ``starting-timestamp``
    (the snapshots committed after it), else the current snapshot when the query first starts
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
        from icemor.planning.changes import snapshot_range

        table = self._table()
        metadata = table.metadata
        r = self.request
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
        from icemor.planning.changes import snapshot_range

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
        _same_schema(self.schema, change_output_schema(job, columns), what)
        return change_partitions(job, io_spec(table.io, table.metadata.location), columns)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        blob = _partition_blob(partition)
        if blob is None:
            return iter(())
        return worker_iterator(read_changes_blob(blob, _arrow_schema(self.schema)))

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: offsets are snapshots, which the table keeps until they expire."""


class _RefusedStreamReader(IcemorStreamReader):
    """The stream of refused options: each of Spark's calls raises the refusal (see ``streamReader``)."""

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


# --------------------------------------------------------------------------------------- sink


@dataclass
class StagedRows(WriterCommitMessage):  # type: ignore[misc,unused-ignore]
    """One sink task's rows, staged as a Parquet file under the table (None: the task had none)."""

    path: str | None
    rows: int


class IcemorStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc,unused-ignore]
    """The CDC sink: each task stages its rows as Parquet under the table's location
    (``<data path>/_icemor-staging/sink-<app id hash>/``); ``commit(messages, batch_id)`` (a Python
    worker on the driver's host) reads the micro-batch's staged rows, applies them as one
    ``apply_changes`` commit recording the app id and batch id (a batch already committed is
    skipped: exactly once across restarts), then removes every staged file of the sink. Memory:
    the commit holds one micro-batch's rows (docs/cdc.md); ``icemor.spark.cdc_sink`` with
    ``foreachBatch`` applies on the executors instead.
    """

    def __init__(
        self, services: Services, request: SinkRequest, schema: StructType, spec: IOSpec, prefix: str
    ) -> None:
        self.services = services
        self.request = request
        self.schema = schema
        self.spec = spec
        self.prefix = prefix

    @worker_errors()
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        import pyarrow.parquet as pq

        io = file_io(*self.spec)
        path = f"{self.prefix}/{uuid.uuid4().hex}.parquet"
        writer = None
        rows = 0
        output = None
        try:
            for batch in iterator:
                if not batch.num_rows:
                    continue
                if writer is None:
                    output = io.new_output(path).create(overwrite=True)
                    writer = pq.ParquetWriter(output, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
            if output is not None:
                output.close()
        return StagedRows(path if rows else None, rows)

    def _staged(self, messages: Sequence[Any]) -> list[str]:
        return [m.path for m in messages if isinstance(m, StagedRows) and m.path is not None]

    @worker_errors()
    def commit(self, messages: list[Any], batchId: int) -> None:
        import pyarrow.parquet as pq

        io = file_io(*self.spec)
        try:
            parts = []
            for path in self._staged(messages):
                with io.new_input(path).open() as f:
                    parts.append(pq.read_table(f))
            rows = pa.concat_tables(parts) if parts else _arrow_schema(self.schema).empty_table()
            r = self.request
            self.services.apply_changes(
                r.table,
                r.catalog,
                rows,
                key=r.key,
                op_column=r.op_column,
                order_by=r.order_by,
                allow_nullable_key=r.allow_nullable_key,
                app_id=r.app_id,
                batch_id=batchId,
            )
        finally:
            self._clean(io, self._staged(messages))

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._clean(file_io(*self.spec), self._staged(messages))

    def _clean(self, io: FileIO, known: Sequence[str]) -> None:
        """Remove this batch's staged files and any a failed or killed attempt left (micro-batches
        of one query run one at a time, so nothing under the sink's prefix is still wanted)."""
        import contextlib

        for path in [*known, *_listed(io, self.prefix)]:
            with contextlib.suppress(OSError):
                io.delete(path)


def _listed(io: FileIO, prefix: str) -> list[str]:
    """Files under ``prefix`` (pyiceberg's PyArrowFileIO can list; another FileIO lists nothing)."""
    import pyarrow.fs as pafs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(io, PyArrowFileIO):
        return []
    scheme, netloc, path = PyArrowFileIO.parse_location(prefix)
    fs = io.fs_by_scheme(scheme, netloc)
    try:
        found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    except OSError:
        return []
    root = "" if scheme == "file" else f"{scheme}://"
    return [f"{root}{f.path}" for f in found if f.type == pafs.FileType.File]
