"""Spark DataFrames written as data files of a table on the executors; the driver commits once.

``table.append(df)``, ``table.overwrite(df, where=...)``, ``icemor.create_table(name, df)``,
``icemor.spark.write(df, ...)`` and ``df.write.format("icemor")`` (PySpark 4.x, through
:class:`IcemorBatchWriter`) all write the same way: each Spark task converts its Arrow batches
to the table's columns by the input rules of local appends (:class:`icemor.ops.inputs.TableRows`,
carried to the executors pickled) and writes them with icemor's writer
(:class:`icemor.io.data_writer.TableDataWriter`: one rolling file per partition, the table's
target file size, row-group size, compression and metrics). Only the files' metadata comes back
to the driver (one small row per task); the operation (:mod:`icemor.ops.append`,
:mod:`icemor.ops.overwrite`) commits them once.

Nothing written stays behind: every file is announced under a staging prefix before it is
created (:class:`icemor.engines.spark.write.StagingIO`), so the files of failed, retried or
speculative task attempts are found without a listing of the data directory and removed once the
job ends; when the job fails or nothing is committed, every file of the write goes.

Spark types map as Spark's Arrow transfer hands them to Python (:func:`spark_arrow_schema`):
``TimestampType`` is an instant (``timestamptz``), ``TimestampNTZType`` a ``timestamp``; a
``uuid`` column takes the text Spark shows (``io/uuids.py``).

The data source's writer loads the table and commits through the
:class:`~icemor.engines.spark.datasource.Services` the facade gave at registration (Spark
constructs it in Python workers of its own from the options of ``df.write.format("icemor")``):
this engine module imports neither the catalog nor the operations.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import IntegerType, LongType, StringType
from pyspark.sql import functions as F
from pyspark.sql import types as st

from icemor.commit.data_file_struct import from_data_file
from icemor.engines import ExternalRows
from icemor.engines.local import runner as local_runner
from icemor.engines.spark import runner as spark_runner
from icemor.engines.spark.errors import icemor_error, worker_errors
from icemor.engines.spark.worker import RESULT_SCHEMA, IOSpec, file_io, io_spec, result_batch
from icemor.engines.spark.worker import results as task_results
from icemor.engines.spark.write import KILL_GRACE_SECONDS, Staging, StagingIO, job_group, settle, whole_input
from icemor.exceptions import InvalidArgumentError
from icemor.io.data_writer import TableDataWriter
from icemor.io.uuids import is_uuid, uuid_from_strings

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator, Mapping

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import Column, DataFrame

    from icemor.engines import Runner
    from icemor.engines.spark.datasource.services import Services
    from icemor.spec.files import WrittenFile

__all__ = [
    "DATA_SOURCE_OPTIONS",
    "SPARK_INPUT",
    "DataFrameFiles",
    "IcemorBatchWriter",
    "TableFileJob",
    "TaskFiles",
    "dataframe_rows",
    "new_table_schema_of",
    "removal_runner",
    "spark_arrow_schema",
    "write_dataframe",
    "write_options",
    "write_task",
]

SPARK_INPUT = "the Spark DataFrame"
"""How errors name the rows of a write from Spark."""

DISTRIBUTION_MODE = "write.distribution-mode"
"""Iceberg's table property: how rows are spread over tasks before they are written."""

# ----------------------------------------------------------------------------- Spark -> Arrow types


def spark_arrow_schema(schema: st.StructType, *, what: str = SPARK_INPUT) -> pa.Schema:
    """The Arrow schema of the batches Spark hands Python for rows of ``schema`` (``mapInArrow``,
    a data source's writer), by public types only.

    ``TimestampType`` (an instant) is a UTC ``timestamp[us]``; ``TimestampNTZType`` one without a
    zone; ``CharType``/``VarcharType`` are strings; day-time intervals are durations (refused by
    the input rules, as Iceberg has no such type).

    Raises:
        InvalidArgumentError: A type Iceberg cannot hold (year-month and calendar intervals,
            variants, ...), naming the column.
    """
    return pa.schema([_arrow_field(f, what=what, path=f.name) for f in schema.fields])


def _arrow_field(f: st.StructField, *, what: str, path: str) -> pa.Field:
    return pa.field(f.name, _arrow_type(f.dataType, what=what, path=path), nullable=f.nullable)


_SIMPLE: tuple[tuple[type[st.DataType], pa.DataType], ...] = (
    (st.BooleanType, pa.bool_()),
    (st.ByteType, pa.int8()),
    (st.ShortType, pa.int16()),
    (st.IntegerType, pa.int32()),
    (st.LongType, pa.int64()),
    (st.FloatType, pa.float32()),
    (st.DoubleType, pa.float64()),
    (st.StringType, pa.string()),
    (st.CharType, pa.string()),
    (st.VarcharType, pa.string()),
    (st.BinaryType, pa.binary()),
    (st.DateType, pa.date32()),
    (st.TimestampType, pa.timestamp("us", tz="UTC")),
    (st.TimestampNTZType, pa.timestamp("us")),
    (st.NullType, pa.null()),
    (st.DayTimeIntervalType, pa.duration("us")),
)


def _arrow_type(t: st.DataType, *, what: str, path: str) -> pa.DataType:
    if isinstance(t, st.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, st.StructType):
        return pa.struct([_arrow_field(f, what=what, path=f"{path}.{f.name}") for f in t.fields])
    if isinstance(t, st.ArrayType):
        element = _arrow_type(t.elementType, what=what, path=f"{path}.element")
        return pa.list_(pa.field("element", element, nullable=t.containsNull))
    if isinstance(t, st.MapType):
        key = _arrow_type(t.keyType, what=what, path=f"{path}.key")
        value = _arrow_type(t.valueType, what=what, path=f"{path}.value")
        return pa.map_(pa.field("key", key, nullable=False), pa.field("value", value, t.valueContainsNull))
    for cls, arrow in _SIMPLE:
        if type(t) is cls:
            return arrow
    msg = f"column {path!r} of {what} is {t.simpleString()}: an Iceberg table has no such type"
    raise InvalidArgumentError(msg)


def new_table_schema_of(df: DataFrame) -> pa.Schema:
    """The Arrow schema a table created from ``df`` takes (then the input rules apply): every
    column optional, at any depth, as Spark's ``CREATE TABLE ... AS SELECT`` and Iceberg Java's
    ``writeTo(...).create()`` make it (Spark's nullability describes a plan, not a constraint).

    Raises:
        InvalidArgumentError: As :func:`spark_arrow_schema`.
    """
    return pa.schema([_nullable(f) for f in spark_arrow_schema(df.schema)])


def _nullable(f: pa.Field) -> pa.Field:
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_list(t):
        t = pa.list_(_nullable(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(t.key_field, _nullable(t.item_field))
    return f.with_type(t).with_nullable(True)


# ------------------------------------------------------------------------------- uuid columns


def _uuid_type(source: pa.DataType, target: pa.DataType) -> pa.DataType:
    """``source`` with every string standing where ``target`` has a uuid turned into that uuid type."""
    t = pa.types
    if is_uuid(target) and (t.is_string(source) or t.is_large_string(source)):
        return target
    if t.is_struct(source) and t.is_struct(target):
        names = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        return pa.struct(
            [
                f.with_type(_uuid_type(f.type, names[f.name])) if f.name in names else f
                for f in (source.field(i) for i in range(source.num_fields))
            ]
        )
    if (t.is_list(source) or t.is_large_list(source)) and (t.is_list(target) or t.is_large_list(target)):
        element = source.value_field.with_type(_uuid_type(source.value_type, target.value_type))
        return pa.large_list(element) if t.is_large_list(source) else pa.list_(element)
    if t.is_map(source) and t.is_map(target):
        key = source.key_field.with_type(_uuid_type(source.key_type, target.key_type))
        item = source.item_field.with_type(_uuid_type(source.item_type, target.item_type))
        return pa.map_(key, item)
    return source


def _uuid_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """``arr`` with the text of uuids (where ``target`` has a uuid) as 16-byte uuids, vectorised."""
    t = pa.types
    source = arr.type
    if _uuid_type(source, target) == source:
        return arr
    if is_uuid(target):
        return uuid_from_strings(arr, target)
    mask = arr.is_null() if arr.null_count else None
    if t.is_struct(source):
        names = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        fields = [source.field(i) for i in range(source.num_fields)]
        # flatten: a NULL struct's children are NULL too (Spark leaves '' under it)
        flat = arr.flatten()
        children = [
            _uuid_array(flat[i], names[f.name]) if f.name in names else arr.field(i)
            for i, f in enumerate(fields)
        ]
        out_fields = [f.with_type(c.type) for f, c in zip(fields, children, strict=True)]
        return pa.StructArray.from_arrays(children, fields=out_fields, mask=mask)
    # a list or map: its values between the first and the last offset (``values`` ignores a
    # slice, ``flatten`` drops what NULL lists hide and would shift the offsets)
    offsets = arr.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, offsets[0])
    values = arr.values.slice(start, end - start)
    out_type = _uuid_type(source, target)
    if t.is_map(source):
        keys = _uuid_array(values.field(0), target.key_type)
        items = _uuid_array(_hidden_as_null(values.field(1), arr, rebased), target.item_type)
        return pa.MapArray.from_arrays(rebased, keys, items, type=out_type, mask=mask)
    values = _hidden_as_null(values, arr, rebased)
    cls = pa.LargeListArray if t.is_large_list(source) else pa.ListArray
    return cls.from_arrays(rebased, _uuid_array(values, target.value_type), type=out_type, mask=mask)


def _hidden_as_null(values: pa.Array, lists: pa.Array, offsets: pa.Array) -> pa.Array:
    """``values`` (of ``lists``, from its first offset) NULL where a NULL list spans them."""
    if not lists.null_count:
        return values
    bounds: npt.NDArray[np.int64] = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    counts = np.diff(bounds)
    hidden = np.repeat(np.asarray(lists.is_null().to_numpy(zero_copy_only=False), dtype=bool), counts)
    if not hidden.any():
        return values
    return pc.if_else(pa.array(hidden), pa.nulls(len(values), values.type), values)


def _uuid_columns(schema: pa.Schema, table: pa.Schema) -> dict[str, pa.DataType]:
    """The input columns that hold uuids as text, with the table's type for each."""
    out = {}
    for f in schema:
        if f.name in table.names:
            target = table.field(f.name).type
            if _uuid_type(f.type, target) != f.type:
                out[f.name] = target
    return out


def _with_uuids(batch: pa.RecordBatch, columns: Mapping[str, pa.DataType]) -> pa.RecordBatch:
    if not columns:
        return batch
    arrays, fields = [], []
    for i, f in enumerate(batch.schema):
        arr = batch.column(i)
        if f.name in columns:
            arr = _uuid_array(arr, columns[f.name])
            f = f.with_type(arr.type)
        arrays.append(arr)
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# --------------------------------------------------------------------------- the executors' part


@dataclass(frozen=True)
class TableFileJob:
    """What every task of a write needs, pickled to the executors once per task."""

    metadata: TableMetadata
    """The table's metadata without its history (schema, spec, properties, location)."""
    io: IOSpec
    convert: Any
    """The input rules (an :class:`icemor.ops.inputs.TableRows`, strict)."""
    staging: str
    """The staging prefix every file is announced under."""
    uuid_columns: dict[str, pa.DataType] = field(default_factory=dict)
    what: str = SPARK_INPUT

    @classmethod
    def of(
        cls, table: PyIcebergTable, convert: Any, schema: pa.Schema, staging: str, *, what: str = SPARK_INPUT
    ) -> TableFileJob:
        """The job of writing rows of Arrow ``schema`` (Spark's) to ``table`` by ``convert``."""
        metadata = table.metadata
        # the history is not needed to write files (and may be large): the current schema, spec,
        # properties and location are
        history: dict[str, Any] = {"snapshots": [], "snapshot_log": [], "metadata_log": [], "refs": {}}
        trimmed = metadata.model_copy(update={**history, "current_snapshot_id": None})
        return cls(
            metadata=trimmed,
            io=io_spec(table.io, metadata.location),
            convert=convert,
            staging=staging,
            uuid_columns=_uuid_columns(schema, convert.arrow_schema),
            what=what,
        )


@dataclass(frozen=True)
class TaskFiles:
    """What one task sends back to the driver: its rows, files and converted-value notes."""

    rows: int
    files: list[WrittenFile]
    truncated: dict[str, int]


def write_task(job: TableFileJob, batches: Iterable[pa.RecordBatch]) -> TaskFiles | None:
    """Write one task's batches as data files of the job's table (on an executor).

    Every file goes through the job's staging (announced before it is created); on any failure
    the files this call wrote are removed before the error goes on (the staging catches what an
    attempt killed meanwhile leaves).

    Returns:
        The rows and files written; None when the task had no row.

    Raises:
        InvalidArgumentError: Rows that do not fit the table (the message names the column).
        WriteFailedError: A file could not be written.
    """
    it = iter(whole_input(batches))  # a cut input fails the task: never written as all of it
    first = next((b for b in it if b.num_rows), None)
    if first is None:
        return None
    convert = job.convert
    before = dict(convert.truncated)
    io = StagingIO(file_io(*job.io), job.staging)
    writer = TableDataWriter(job.metadata, io, write_uuid=uuid.uuid4())
    rows = 0
    try:
        for batch in _chain(first, it):
            if not batch.num_rows:
                continue
            convert.write(writer, _with_uuids(batch, job.uuid_columns), what=job.what)  # TableRows.write
            rows += batch.num_rows
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    spec_id = job.metadata.default_spec_id
    truncated = {k: n - before.get(k, 0) for k, n in convert.truncated.items() if n - before.get(k, 0)}
    return TaskFiles(rows, [from_data_file(f, spec_id) for f in written], truncated)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


# ------------------------------------------------------------------------------ the driver's part


@dataclass
class DataFrameFiles:
    """The files a finished write left for the commit: :meth:`finish` removes the rest."""

    rows: int
    files: list[WrittenFile]
    truncated: dict[str, int]
    staging: Staging

    def finish(self, keep: Collection[str]) -> list[str]:
        """Remove every file the write announced but ``keep`` (all of them when nothing was
        committed), then the staging prefix; return the files that could not be removed."""
        return self.staging.finish(keep)


def dataframe_rows(df: DataFrame) -> ExternalRows:
    """``df`` as rows an append, overwrite or create writes on the executors.

    Raises:
        InvalidArgumentError: A column of a type Iceberg cannot hold (:func:`spark_arrow_schema`).
    """
    schema = spark_arrow_schema(df.schema)

    def write(table: PyIcebergTable, convert: Any) -> DataFrameFiles:
        return write_dataframe(df, table, convert, schema=schema)

    return ExternalRows(write=write, what=SPARK_INPUT)


def write_dataframe(
    df: DataFrame, table: PyIcebergTable, convert: Any, *, schema: pa.Schema | None = None
) -> DataFrameFiles:
    """Write ``df``'s rows as data files of ``table`` on the executors; nothing is committed.

    Rows are first spread by the table's ``write.distribution-mode`` (default, as Iceberg
    Java's: ``hash`` on the partition values for a partitioned table, ``none`` otherwise; see
    :func:`_distributed`); each task then writes one rolling file per partition it holds. When
    the job fails, every file it wrote is removed (tasks Spark is still cancelling are waited
    for first) and the error raised.

    Args:
        df: The rows.
        table: The pyiceberg table (its current metadata).
        convert: The input rules (:class:`icemor.ops.inputs.TableRows`); its counts of truncated
            values take the tasks'.
        schema: ``df``'s Arrow schema (:func:`spark_arrow_schema`), if known.

    Returns:
        The rows and files; call :meth:`DataFrameFiles.finish` after the commit.

    Raises:
        IcemorError: A task raised one (the same type and message); Spark's error otherwise.
    """
    spark = df.sparkSession
    schema = schema if schema is not None else spark_arrow_schema(df.schema)
    # every schema is checked before any row is written (the message names the column)
    convert.check(_uuid_schema(schema, convert.arrow_schema), what=SPARK_INPUT)
    staging = Staging(table.io, table.metadata.location, table.metadata.properties)
    job = TableFileJob.of(table, convert, schema, staging.prefix)

    def work(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        result = write_task(job, batches)
        if result is not None:
            yield result_batch(result)

    tag = group = f"icemor-write-{uuid.uuid4().hex}"
    results: list[TaskFiles] = []
    try:
        with job_group(spark, tag) as group:
            collected = _distributed(df, table.metadata).mapInArrow(work, RESULT_SCHEMA).collect()
        results = task_results(collected)
    except BaseException as e:
        settle(spark, group, failed=True)
        staging.finish(())
        found = icemor_error(e)
        if found is None or found is e:
            raise
        raise found from e
    settle(spark, group, failed=False)
    truncated: dict[str, int] = {}
    for r in results:
        for name, n in r.truncated.items():
            truncated[name] = truncated.get(name, 0) + n
    for name, n in truncated.items():
        convert.truncated[name] = convert.truncated.get(name, 0) + n
    files = [f for r in results for f in r.files]
    return DataFrameFiles(sum(r.rows for r in results), files, truncated, staging)


def _distributed(df: DataFrame, metadata: TableMetadata) -> DataFrame:
    """``df`` spread over tasks by the table's ``write.distribution-mode``, as Iceberg Java does.

    ``none``: as it comes (the default for an unpartitioned table). ``hash`` (the default for a
    partitioned one): repartitioned on expressions that equal rows of one partition share (the
    identity value, the time unit, the truncated value; a bucket cannot be computed in Spark SQL,
    so it adds nothing), so a partition is written by one task, not by every task that holds a
    row of it. ``range``: the same expressions, range-partitioned. Spark's adaptive execution
    sizes the shuffle. Only file counts depend on it, never rows.
    """
    spec = metadata.spec()
    if spec.is_unpartitioned():
        return df
    mode = metadata.properties.get(DISTRIBUTION_MODE, "hash").strip().lower()
    if mode not in ("hash", "range"):
        return df
    schema = metadata.schema()
    top = {f.field_id: f for f in schema.fields}
    columns = set(df.columns)
    exprs = []
    for pf in spec.fields:
        source = top.get(pf.source_id)
        if source is None or source.name not in columns:
            continue
        expr = _partition_expr(pf.transform, source.name, source.field_type)
        if expr is not None:
            exprs.append(expr)
    if not exprs:
        return df
    return df.repartitionByRange(*exprs) if mode == "range" else df.repartition(*exprs)


def _partition_expr(transform: Any, name: str, field_type: Any) -> Column | None:
    """A Spark expression equal for the rows of one partition value of ``transform(name)``."""
    col = F.col(f"`{name.replace('`', '``')}`")
    if isinstance(transform, IdentityTransform):
        return col
    units = {YearTransform: "year", MonthTransform: "month", DayTransform: "day", HourTransform: "hour"}
    for cls, unit in units.items():
        if isinstance(transform, cls):
            return F.date_trunc(unit, col)
    if isinstance(transform, TruncateTransform):
        width = transform.width
        if isinstance(field_type, StringType):
            return F.substring(col, 1, width)
        if isinstance(field_type, IntegerType | LongType):
            return col - F.pmod(col, F.lit(width))
        return col
    return None


def removal_runner(df: DataFrame, table: PyIcebergTable) -> Runner:
    """The runner of an overwrite's per-file delete work: ``df``'s session's executors (classic
    or Connect)."""
    return spark_runner(df.sparkSession, table.io, table.metadata.location)


# ------------------------------------------------------------------------------------- options

DATA_SOURCE_OPTIONS = ("where", "overwrite-where", "overwrite-mode", "catalog", "path")
"""The options of a write: the overwrite's condition (either name), Iceberg's ``overwrite-mode``
(``static``, the default, or ``dynamic``: the partitions the rows fall in are replaced), the
catalog, the table."""

MODES = ("append", "overwrite")


def write_options(options: Mapping[str, Any], *, overwrite: bool) -> tuple[str | None, str | None, bool]:
    """The overwrite condition, catalog name and whether the overwrite is dynamic, of a write's
    options (case-insensitive names, ``_`` or ``-``).

    Raises:
        InvalidArgumentError: An unknown option, two conditions, a condition for an append, an
            unknown ``overwrite-mode``, a condition for a dynamic overwrite.
    """
    found: dict[str, str] = {}
    for key, value in options.items():
        name = str(key).strip().lower().replace("_", "-")
        if name not in DATA_SOURCE_OPTIONS:
            msg = f"unknown write option {key!r}: the options are {', '.join(DATA_SOURCE_OPTIONS[:-1])}"
            raise InvalidArgumentError(msg)
        if value is not None:
            found[name] = str(value)
    if "where" in found and "overwrite-where" in found:
        msg = "give the overwrite's condition once: 'where' or 'overwrite-where', not both"
        raise InvalidArgumentError(msg)
    where = found.get("where", found.get("overwrite-where"))
    if where is not None and not overwrite:
        msg = "a condition ('where') applies to mode 'overwrite' only, not to an append"
        raise InvalidArgumentError(msg)
    mode = found.get("overwrite-mode", "static").strip().lower()
    if mode not in ("static", "dynamic"):
        msg = f"unknown overwrite-mode {found['overwrite-mode']!r}: use 'static' or 'dynamic'"
        raise InvalidArgumentError(msg)
    if mode == "dynamic" and not overwrite:
        msg = "overwrite-mode applies to mode 'overwrite' only, not to an append"
        raise InvalidArgumentError(msg)
    if mode == "dynamic" and where is not None:
        msg = "a dynamic overwrite replaces the partitions the rows fall in: it takes no condition ('where')"
        raise InvalidArgumentError(msg)
    return where, found.get("catalog"), mode == "dynamic"


# ------------------------------------------------------------------------ the data source writer


try:  # PySpark 4.x only: Python data sources
    from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
except ImportError:  # PySpark 3.5: the function forms only
    DataSourceArrowWriter = None
    WriterCommitMessage = None

if DataSourceArrowWriter is not None:

    @dataclass
    class _TaskMessage(WriterCommitMessage):  # type: ignore[misc,valid-type,unused-ignore]
        """One task's files, as :class:`TaskFiles` (a data source's commit message)."""

        files: TaskFiles | None

    class IcemorBatchWriter(DataSourceArrowWriter):  # type: ignore[misc,valid-type,unused-ignore]
        """``df.write.format("icemor").mode("append" | "overwrite").save("db.t")`` (PySpark 4.x).

        Made by Spark on the driver's side from the write's options: the table is loaded, the
        DataFrame's schema checked by the input rules and an overwrite's condition parsed before
        any row is written. :meth:`write` runs in each task on the executors (the same writer
        as ``table.append(df)``); :meth:`commit` commits every task's files once (an append, or
        the overwrite: the matching rows' deletes plus the new files, one snapshot; every row
        when no condition is given); :meth:`abort` removes every file the write made.

        Options: ``where`` (or ``overwrite-where``): the overwrite's condition (the scan's
        language: SQL, docs/sql.md); ``catalog``: a catalog name (default: icemor's embedded
        catalog). The table is the ``save`` path. ``services`` (the data source's) load the
        table, give the input rules and commit.
        """

        def __init__(
            self, services: Services, options: dict[str, str], schema: st.StructType, overwrite: bool
        ) -> None:
            self.services = services
            with worker_errors():  # icemor's refusal as its one line (see .errors)
                self._init(options, schema, overwrite)

        def _init(self, options: dict[str, str], schema: st.StructType, overwrite: bool) -> None:
            options = dict(options)
            identifier = options.pop("path", None) or options.pop("table", None)
            if not identifier:
                msg = 'name the table: df.write.format("icemor").save("db.t")'
                raise InvalidArgumentError(msg)
            self.identifier = identifier
            self.overwrite = overwrite
            self.where, self.catalog, dynamic = write_options(options, overwrite=overwrite)
            if dynamic:
                msg = (
                    "overwrite-mode 'dynamic' is not supported by the data source yet: use "
                    "icemor.spark.write(df, table, mode='overwrite', overwrite_mode='dynamic')"
                )
                raise InvalidArgumentError(msg)
            table = self.services.load_table(identifier, self.catalog)
            self.input_schema = spark_arrow_schema(schema)
            convert = self.services.input_rules(table.metadata.schema(), table=identifier)
            convert.check(_uuid_schema(self.input_schema, convert.arrow_schema), what=SPARK_INPUT)
            if overwrite:
                self.services.check_overwrite(table, self.where)
            self.location = table.metadata.location
            staging = Staging(table.io, self.location, table.metadata.properties)
            self.job = TableFileJob.of(table, convert, self.input_schema, staging.prefix)

        def write(self, iterator: Iterator[pa.RecordBatch]) -> _TaskMessage:
            with worker_errors():
                return _TaskMessage(write_task(self.job, iterator))

        def commit(self, messages: list[_TaskMessage | None]) -> None:
            with worker_errors():
                self._commit_tasks(messages)

        def _commit_tasks(self, messages: list[_TaskMessage | None]) -> None:
            table = self.services.load_table(self.identifier, self.catalog)
            done = [m.files for m in messages if m is not None and m.files is not None]
            staging = self._staging(table.io)

            def written(_: PyIcebergTable, convert: Any) -> DataFrameFiles:
                truncated: dict[str, int] = {}
                for d in done:
                    for name, n in d.truncated.items():
                        truncated[name] = truncated.get(name, 0) + n
                        convert.truncated[name] = convert.truncated.get(name, 0) + n
                files = [f for d in done for f in d.files]
                return DataFrameFiles(sum(d.rows for d in done), files, truncated, staging)

            # the operation removes what it does not commit (and keeps all if it may have)
            rows = ExternalRows(write=written, what=SPARK_INPUT)
            if self.overwrite:
                self.services.overwrite(table, rows, self.where, run=local_runner(table.io))
            else:
                self.services.append(table, rows)

        def abort(self, messages: list[_TaskMessage | None]) -> None:
            # Spark calls this as soon as the job failed, while it may still be cancelling tasks
            time.sleep(KILL_GRACE_SECONDS)
            table = self.services.load_table(self.identifier, self.catalog)
            self._staging(table.io).finish(())

        def _staging(self, io: FileIO) -> Staging:
            staging = Staging(io, self.location)
            staging.prefix = self.job.staging
            return staging

else:  # PySpark 3.5: no Python data sources
    IcemorBatchWriter = None  # type: ignore[misc,assignment,unused-ignore]


def _uuid_schema(schema: pa.Schema, table: pa.Schema) -> pa.Schema:
    """``schema`` with the text of uuid columns typed as the table's uuids (what the check sees)."""
    columns = _uuid_columns(schema, table)
    return pa.schema([f.with_type(columns[f.name]) if f.name in columns else f for f in schema])
