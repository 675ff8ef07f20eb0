"""What UPDATE and MERGE share: SQL checks, the changed rows' positions, new data files, one commit.

Both find their target rows with SQL over the merge-on-read scan (``_file``, ``_pos`` and every
column, existing deletes applied), then:

- the old rows' positions become position-delete files through DELETE's per-file units
  (:func:`icemor.ops.units.delete_unit`: ``write.delete.granularity``, a data file whose every
  live row changes is removed rather than listed row by row, as Impala's Iceberg writer turns a
  DELETE or UPDATE of every row into a rewrite rather than position deletes);
- the new rows are written as data files of the table's current partition spec, so a row
  whose partition column changes moves to its new partition;
- one RowDelta commits both, validated as Iceberg Java validates its row-level operations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import pyarrow as pa
from pyiceberg import types as T
from pyiceberg.io.pyarrow import schema_to_pyarrow

from icemor.commit.data_file_struct import from_data_file
from icemor.commit.row_delta import RowDelta
from icemor.engines.local import read_batches
from icemor.exceptions import InvalidArgumentError
from icemor.expr.duck import duck_type, empty_table, is_boolean_type, query_batches, session
from icemor.expr.sql import quote_identifier
from icemor.expr.type_names import sql_type_name
from icemor.io.data_writer import TableDataWriter, with_row_id
from icemor.ops.units import (
    ChangeWrite,
    delete_units,
    isolation_level,
    row_validation,
    run_units,
    write_change_task,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Mapping, Sequence

    import numpy as np
    import numpy.typing as npt
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.snapshots import Operation, Snapshot

    from icemor.engines import Runner
    from icemor.io.reader import ReadOptions
    from icemor.ops.units import ChangeResult, UnitResult
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.files import WrittenFile

__all__ = [
    "DUCKDB",
    "SPARK",
    "CommitFigures",
    "Dialect",
    "NewRows",
    "RowLevelResult",
    "SparkChanges",
    "check_assignment",
    "check_condition",
    "commit_figures",
    "commit_row_changes",
    "commit_written",
    "resolve_column",
    "scan_rows",
    "write_and_commit_on_spark",
]

# New rows held before they are written: the memory bound of an UPDATE/MERGE's output.
BATCH_ROWS = 1 << 20

# Which value types SQL may assign to a column (Spark's ANSI store assignment: numbers to
# numbers, strings to strings, dates and timestamps to each other; never a string to a number).
_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "UTINYINT",
            "USMALLINT", "UINTEGER", "UBIGINT")  # fmt: skip
_TEMPORAL = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMP_NS", "TIMESTAMP_MS",
             "TIMESTAMP_S")  # fmt: skip


def _assignable(target: T.PrimitiveType, value_type: str) -> bool:
    base = value_type.split("(", maxsplit=1)[0].upper()
    if base in ("NULL", '"NULL"'):
        return True
    if isinstance(target, T.IntegerType | T.LongType | T.FloatType | T.DoubleType | T.DecimalType):
        return base in _NUMERIC
    if isinstance(target, T.StringType):
        return base == "VARCHAR"
    if isinstance(target, T.BooleanType):
        return base == "BOOLEAN"
    if isinstance(target, T.DateType | T.TimestampType | T.TimestamptzType):
        return base in _TEMPORAL
    if isinstance(target, T.UUIDType):  # SQL sees a uuid as its text; Spark stores text in one
        return base in ("VARCHAR", "UUID")
    return base == duck_type(target).split("(")[0]


def resolve_column(schema: Schema, name: str) -> str:
    """The table's spelling of a top-level column ``name`` (matched case-insensitively, as SQL)."""
    for f in schema.fields:
        if f.name == name:
            return f.name
    matches = [f.name for f in schema.fields if f.name.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    if "." in name:
        msg = f"cannot assign to nested field {name!r}: only top-level columns can be SET"
        raise InvalidArgumentError(msg)
    msg = f"unknown column {name!r} (columns: {', '.join(f.name for f in schema.fields)})"
    raise InvalidArgumentError(msg)


def check_condition(value_type: str, what: str, text: str) -> None:
    """Refuse a condition whose SQL type (DuckDB's name) is not BOOLEAN."""
    if not is_boolean_type(value_type):
        msg = f"the {what} {text!r} is of type {value_type.upper()}, not a boolean condition"
        raise InvalidArgumentError(msg)


@dataclass(frozen=True)
class Dialect:
    """How one engine's SQL spells identifiers and column types."""

    name: str
    quote: Callable[[str], str]
    type_name: Callable[[T.PrimitiveType], str]
    rounds_to_integer: bool = False
    """CAST of a fraction to an integer rounds (DuckDB) rather than truncating (Spark)."""

    def cast(self, value_sql: str, t: T.PrimitiveType) -> str:
        """``value_sql`` as a value of column type ``t``, as Spark stores it (2.7 -> 2)."""
        value = f"({value_sql}\n)"
        if self.rounds_to_integer and isinstance(t, T.IntegerType | T.LongType):
            value = f"trunc{value}"  # numeric (check_assignment): truncate toward zero first
        return f"CAST({value} AS {self.type_name(t)})"


def _spark_type_name(t: T.PrimitiveType) -> str:
    return sql_type_name(t, "spark")


DUCKDB = Dialect("duckdb", quote_identifier, duck_type, rounds_to_integer=True)
SPARK = Dialect("spark", quote_identifier, _spark_type_name)


def check_assignment(schema: Schema, column: str, value_type: str, source: str) -> T.PrimitiveType:
    """The column's type, refusing a value type Spark would not store in it (ANSI store assignment).

    Args:
        schema: The table schema.
        column: The table's column name.
        value_type: DuckDB's type of the value.
        source: How errors name the value (``SET qty``, ``INSERT value of qty``).
    """
    field = schema.find_field(column)
    if not isinstance(field.field_type, T.PrimitiveType):
        msg = f"{source}: assigning to a {field.field_type} column is not supported"
        raise InvalidArgumentError(msg)
    if not _assignable(field.field_type, value_type):
        msg = (
            f"{source}: a {value_type} value cannot be stored in column {column!r} of type {field.field_type}"
        )
        raise InvalidArgumentError(msg)
    return field.field_type


def empty_scan_table(job: ScanJob) -> pa.Table:
    return empty_table(job.arrow_schema)


@dataclass
class NewRows:
    """New rows of the table, written as data files of its current spec by one
    :class:`~icemor.io.data_writer.TableDataWriter`: one rolling file per partition across every
    batch, rolled at ``write.target-file-size-bytes`` (not a file per batch and partition)."""

    table: PyIcebergTable
    rows: int = 0
    lineage: bool = False
    """v3: write the rows' ``_row_id`` (an updated row's old id; NULL for an inserted row) and a
    NULL ``_last_updated_sequence_number`` (see :class:`TableDataWriter`)."""

    def __post_init__(self) -> None:
        self.arrow_schema = schema_to_pyarrow(self.table.metadata.schema(), include_field_ids=False)
        self.required = [f.name for f in self.table.metadata.schema().fields if f.required]
        self._writer = TableDataWriter(self.table.metadata, self.table.io, lineage=self.lineage)

    def add(self, data: pa.RecordBatch | pa.Table) -> None:
        if not data.num_rows:
            return
        for name in self.required:
            if data.column(name).null_count:
                msg = f"column {name!r} is required (NOT NULL) but a new value of it is NULL"
                raise InvalidArgumentError(msg)
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        self._writer.write(with_row_id(table, self.arrow_schema, lineage=self.lineage))
        self.rows += data.num_rows

    def files(self) -> list[WrittenFile]:
        """Close the open files: every data file written, for the commit."""
        spec_id = self.table.metadata.default_spec_id
        return [from_data_file(f, spec_id) for f in self._writer.close()]

    def abort(self) -> None:
        """Remove every file written (open ones too); idempotent."""
        self._writer.abort()


@dataclass(frozen=True)
class RowLevelResult:
    snapshot: Snapshot | None
    rows_deleted: int
    data_files_added: int
    delete_files_added: int
    data_files_removed: int


class CommitFigures(TypedDict):
    """The figures UPDATE's and MERGE's metrics take from their commit, spread into them with ``**``."""

    data_files_added: int
    delete_files_added: int
    data_files_removed: int
    snapshot_id: int | None
    seconds: float


def commit_figures(result: RowLevelResult, started: float) -> CommitFigures:
    """``result``'s figures; ``seconds`` since ``started`` (:func:`time.monotonic`)."""
    return CommitFigures(
        data_files_added=result.data_files_added,
        delete_files_added=result.delete_files_added,
        data_files_removed=result.data_files_removed,
        snapshot_id=result.snapshot.snapshot_id if result.snapshot is not None else None,
        seconds=time.monotonic() - started,
    )


def scan_rows(job: ScanJob, sql: str, **others: pa.Table) -> Generator[pa.RecordBatch, None, None]:
    """The rows of DuckDB ``sql`` over ``job``'s streamed merge-on-read scan as ``__target`` (and
    ``others`` by name): where UPDATE and MERGE find their changes locally."""
    target = pa.RecordBatchReader.from_batches(job.arrow_schema, read_batches(job))
    yield from query_batches(sql, {"__target": target, **others})


def commit_row_changes(
    table: PyIcebergTable,
    job: ScanJob,
    positions: Mapping[str, npt.NDArray[np.int64]],
    new_rows: NewRows,
    *,
    run: Runner,
    isolation_property: str,
    snapshot_properties: Mapping[str, str] | None = None,
    operation: Operation | None = None,
) -> RowLevelResult:
    """Write the position deletes of ``positions``, then commit them with ``new_rows``' files.

    On any failure nothing is committed and every file written for the operation is removed.
    An empty table (no snapshot) takes new rows only.
    """
    try:
        isolation_level(table, isolation_property)  # a bad property refuses before anything is written
        data = new_rows.files()
        by_path = {p.data_file.path: p for p in job.live_files()}
        planned = [by_path[path] for path in positions]
        units = delete_units(table, planned, job.options, positions=positions) if planned else []
        results = run_units(table, units, run)
    except BaseException:
        new_rows.abort()
        raise
    return commit_written(
        table,
        job,
        results,
        data,
        isolation_property=isolation_property,
        snapshot_properties=snapshot_properties,
        operation=operation,
    )


def commit_written(
    table: PyIcebergTable,
    job: ScanJob,
    results: Sequence[UnitResult],
    data: Sequence[WrittenFile],
    *,
    isolation_property: str,
    snapshot_properties: Mapping[str, str] | None = None,
    operation: Operation | None = None,
) -> RowLevelResult:
    """Commit delete units' results and new data files, already written, as one RowDelta.

    Validated against concurrent commits that touch what ``job`` read (its row filter). On
    failure nothing is committed and the given files are removed (unless the commit may have
    happened). ``operation``: the snapshot's (default RowDelta's: overwrite, or delete when it
    only deletes).
    """
    isolation = isolation_level(table, isolation_property)
    deletes = [w for r in results for w in r.written]
    removed = {p for r in results for p in r.removed}
    if not data and not deletes and not removed:
        return RowLevelResult(None, 0, 0, 0, 0)
    touched = {p for r in results for p in (*r.removed, *r.referenced)}
    planned = [p for p in job.planned if p.data_file.path in touched]
    delta = RowDelta(
        table,
        row_validation(
            job,
            isolation,
            referenced={p for r in results for p in r.referenced},
            removed=removed,
            # rows of these files live on in the new data files (a removed file's live rows, an
            # updated row): a delete that a concurrent commit adds for them would be undone by
            # our copy, the row resurrected; and the rows counted as deleted must still be live
            # (Java, at every isolation level: validateNoConflictingDeleteFiles and
            # validateNoNewDeletesForDataFiles)
            no_new_deletes_for=touched,
            data_files={p.data_file.path: p.data_file for p in planned},
        ),
        added_files=[*deletes, *data],
        removed_paths=removed,
        snapshot_properties=dict(snapshot_properties or {}),
        operation=operation,
    )
    committed = delta.commit()  # on failure it removes what it was given (not when the outcome is unknown)
    return RowLevelResult(
        snapshot=committed,
        rows_deleted=sum(r.deleted_rows for r in results),
        data_files_added=len(data),
        delete_files_added=len(deletes),
        data_files_removed=sum(r.removed_data_files for r in results),
    )


@dataclass(frozen=True)
class SparkChanges:
    """What a row-change write on the executors did: the commit and the tasks' counts."""

    result: RowLevelResult
    deleted: int
    updated: int
    inserted: int
    units: tuple[UnitResult, ...]


def write_and_commit_on_spark(
    table: PyIcebergTable,
    job: ScanJob,
    changes: Any,
    *,
    isolation_property: str,
    unique: str | None = None,
    options: ReadOptions | None = None,
    commit: Callable[[Sequence[UnitResult], Sequence[WrittenFile]], RowLevelResult] | None = None,
    clustered: bool = False,
    operation: Operation | None = None,
) -> SparkChanges:
    """Write ``changes`` (``_file``, ``_pos``, the new row) on the executors and commit once.

    The executor tasks run :func:`icemor.ops.units.write_change_task`: the delete units of the
    scan's live files (as templates) and the new data files; only file metadata comes back.
    Whatever happens (a failed job, a refused commit), every file an attempt wrote that is not
    committed is removed afterwards, found through the write's staging prefix.

    Args:
        table: The table.
        job: The scan the changes were read from (its live files get the delete units).
        changes: The Spark DataFrame of changes (see :func:`icemor.ops.units.write_change_task`).
        isolation_property: The operation's isolation-level property.
        unique: The error if a target row comes twice (MERGE).
        options: Read options of the delete units (default the job's).
        commit: Commits the written files instead of :func:`commit_written`.
        clustered: ``changes`` is ``job``'s scan filtered and projected (no join, no
            aggregate): written without a shuffle when each data file came to one task, else
            written again with it (:func:`icemor.engines.spark.write.write_changes`).
        operation: The snapshot's operation (see :func:`commit_written`).

    Raises:
        InvalidArgumentError: From the tasks (``unique``, a NULL in a required column).
        CommitConflictError: A concurrent commit conflicts; nothing is committed.
    """
    from icemor.engines.spark.write import Staging, files_seen_twice, write_changes  # noqa: PLC0415 - optional: pyspark

    isolation_level(table, isolation_property)  # a bad property refuses before anything is written
    live = job.live_files()
    units = delete_units(table, live, options or job.options)
    templates = {p.data_file.path: u for u in units for p in u.files}
    change = ChangeWrite(templates, table.metadata, unique)
    data_paths = set(templates)
    # a clustered write whose check fails is written again, shuffled (see write_changes)
    for shuffled in (False, True) if clustered else (True,):
        staging = Staging(table.io, table.metadata.location, table.metadata.properties)
        keep: set[str] = set()
        try:
            outcomes: list[ChangeResult] = write_changes(
                changes,
                table.io,
                table.metadata.location,
                write_change_task,
                change,
                staging=staging,
                row_columns=[f.name for f in table.metadata.schema().fields],
                clustered=not shuffled,
                file_sizes=[p.data_file.file_size_in_bytes for p in live],
            )
            results = tuple(u for o in outcomes for u in o.units)
            if not shuffled:
                seen = [p for r in results for p in (*r.referenced, *r.removed) if p in data_paths]
                if files_seen_twice(seen):
                    continue  # a data file came to two tasks: everything written goes below
            data = [w for o in outcomes for w in o.data]
            # given to the commit: it removes them itself when refused, keeps them when it may
            # have happened; every other announced file (failed or lost attempts) goes below
            keep = {w.path for w in data} | {w.path for r in results for w in r.written}
            if commit is not None:
                result = commit(results, data)
            else:
                result = commit_written(
                    table, job, results, data, isolation_property=isolation_property, operation=operation
                )
            break
        finally:
            staging.finish(keep)
    return SparkChanges(
        result,
        deleted=sum(o.deleted for o in outcomes),
        updated=sum(o.updated for o in outcomes),
        inserted=sum(o.inserted for o in outcomes),
        units=results,
    )


def typed(job: ScanJob, sql: str, what: str, **others: pa.Table) -> list[tuple[str, str]]:
    """The output types of ``sql`` over an empty ``__target`` with the scan's columns.

    Raises:
        InvalidArgumentError: ``sql`` does not bind (unknown column or function, bad types),
            named as ``what``.
    """
    s = session()
    try:
        with s.inputs({"__target": empty_scan_table(job), **others}):
            return s.types(sql)
    except InvalidArgumentError as e:
        msg = f"{what}: {e}"
        raise InvalidArgumentError(msg) from e
