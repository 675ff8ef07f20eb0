"""Apply a batch of change rows (CDC): one RowDelta commit per batch, old rows deleted by equality
deletes (``deletes="equality"``, below) or by position (``deletes="position"``, at the end).

Each change row carries an op (``op_column``) and the table's columns; the batch is applied
per key, as Iceberg's Flink upsert writer does, without reading the table:

- ``I``/``insert``/``+I``: the row is added. No equality delete: a change stream inserts a key
  that does not exist (send ``U`` to replace whatever is there).
- ``U``/``update_after``/``+U``: the key's older rows are deleted by an **equality delete** on the
  key columns, and the row is added (an upsert: the key need not exist).
- ``-U``/``update_before``: ignored (the ``U`` that follows carries the new row).
- ``D``/``delete``/``-D``: the key's older rows are deleted by an equality delete; a key that
  does not exist is harmless.

Within the batch the rows of one key are taken in row order, or by ``order_by``; only the net
effect counts. Every inserted/updated row is written to a new data file, but a row superseded
later in the same batch (inserted, then updated or deleted) is removed by a **position delete**
against that new file (Flink's ``insertedRowMap``): an equality delete cannot remove it, since
an equality delete applies only to data files with a strictly lower data sequence number, and
the batch's files share one (spec, "Scan Planning").

Equality-delete files hold the key columns only. When every field of the partition spec is a
transform of key columns (and no live data file uses an older spec), the key decides the
partition of its rows, so each delete file is clustered in the partition of its keys. Otherwise
the deletes are **global**: one file of an unpartitioned spec (added to the table if it has
none), which every data file of every partition must be checked against when read.

The work is a pure function of the batch's rows (:func:`change_unit`): the local engine runs it
once; the Spark engine repartitions a DataFrame by key and runs it per partition on the
executors. Bad input is found in the units before anything is written; the driver then commits
once. With ``app_id``/``batch_id`` the commit records them in the snapshot summary and a batch
already committed by that app is skipped (exactly-once for Structured Streaming's
``foreachBatch``, like Delta's ``txnAppId``/``txnVersion`` and Flink's checkpoint id).

**Position mode** (:func:`delete_mode`: the default on v3 and ``icemor.v4-ready`` tables) writes no
equality delete: each unit also finds the live rows of the keys it updates or deletes in the
snapshot the batch starts from (:mod:`icemor.ops.key_lookup`, through each data file's key index),
writes only each key's last row, and the driver hands the positions to DELETE's per-file units
(a DV per data file on v3, file-scoped position deletes on v2). The commit also refuses when a
concurrent commit added a row with one of those keys (:class:`icemor.ops.key_lookup.KeyConflicts`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table.snapshots import Operation
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, FloatType, PrimitiveType

from icemor._compat.pyiceberg import check_arrow_schema_compatible, to_file_schema
from icemor.commit.door import may_have_committed
from icemor.commit.files import delete_quietly
from icemor.commit.row_delta import RowDelta
from icemor.commit.schema import add_unpartitioned_spec, set_identifier_fields, unpartitioned_spec_id
from icemor.commit.validation import Validation
from icemor.exceptions import CommitConflictError, InvalidArgumentError
from icemor.io.data_writer import DataFileTarget, file_positions, write_data_files_in_order
from icemor.io.equality_writer import write_equality_deletes
from icemor.io.key_index import build_key_index, remember_key_index, save_key_index
from icemor.io.puffin import write_deletion_vectors
from icemor.io.writers import DeleteFileTarget, remove_written, write_position_deletes
from icemor.ops.append import downcast_ns_timestamps, schema_mismatch_message
from icemor.ops.inputs import read_arrow
from icemor.ops.key_lookup import (
    KeyConflicts,
    KeyLookup,
    find_positions,
    partition_rows,
    plan_lookup,
    same_as_previous,
)
from icemor.ops.units import DeleteUnit, UnitResult, check_writable, delete_unit, delete_units, run_units
from icemor.planning.scan_job import prepare_scan
from icemor.spec import properties as P
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.engines import Runner
    from icemor.spec.files import WrittenFile

__all__ = [
    "APP_ID_PROPERTY",
    "BATCH_ID_PROPERTY",
    "DELETE_MODE_PROPERTY",
    "V4_READY_PROPERTY",
    "ChangeContext",
    "ChangeMetrics",
    "ChangeSink",
    "ChangeUnitResult",
    "apply_changes",
    "apply_changes_dataframe",
    "change_unit",
    "delete_mode",
    "last_committed_batch",
    "prepare_changes",
]

APP_ID_PROPERTY = "icemor.cdc.app-id"
BATCH_ID_PROPERTY = "icemor.cdc.batch-id"
DELETE_MODE_PROPERTY = "icemor.cdc.delete-mode"
"""Table property: how CDC deletes old rows, ``equality`` or ``position`` (default: by format version)."""
V4_READY_PROPERTY = "icemor.v4-ready"
"""Table property: ``true`` keeps the table ready for format v4, which forbids new equality deletes:
icemor never writes one to it (CDC resolves keys to positions)."""
EQUALITY, POSITION = "equality", "position"

INSERT, UPDATE, UPDATE_BEFORE, DELETE = 0, 1, 2, 3
_OPS = {
    "i": INSERT,
    "insert": INSERT,
    "+i": INSERT,
    "u": UPDATE,
    "update_after": UPDATE,
    "+u": UPDATE,
    "-u": UPDATE_BEFORE,
    "update_before": UPDATE_BEFORE,
    "d": DELETE,
    "delete": DELETE,
    "-d": DELETE,
}
_OP_HELP = "use I/insert, U/update_after, -U/update_before or D/delete"
_SEQ = "__icemor_seq"
"""Row order of a Spark DataFrame, captured before it is shuffled by key."""
_UNSET_SPEC = -1
"""Spec id of global equality deletes before the unpartitioned spec is added (at commit)."""


@dataclass(frozen=True)
class ChangeMetrics:
    """What one batch of changes did."""

    changes: int
    """Change rows given (every op, ``update_before`` included)."""
    inserts: int
    updates: int
    deletes: int
    ignored: int
    """``update_before`` rows."""
    rows_written: int
    """Rows written to new data files (superseded ones included)."""
    equality_deletes: int
    """Keys deleted by equality (one per updated or deleted key; none in position mode)."""
    position_deletes: int
    """Rows deleted by position: equality mode, rows of this batch's own files superseded within
    the batch; position mode, the live older rows of the updated and deleted keys."""
    data_files_added: int
    equality_delete_files_added: int
    position_delete_files_added: int
    snapshot_id: int | None
    """The new snapshot; None when nothing was committed (no change, or ``skipped``)."""
    skipped: bool
    """``batch_id`` was already committed by ``app_id``: nothing was done."""
    seconds: float
    delete_mode: str = EQUALITY
    """``equality`` (keys deleted by equality deletes) or ``position`` (keys resolved to the
    positions of their live rows: deletion vectors on v3, position deletes on v2)."""
    data_files_removed: int = 0
    """Position mode: data files whose every live row the batch deleted (removed, not listed)."""
    delete_files_removed: int = 0
    """Position mode: older deletes of the files it deleted from, merged into its new ones."""
    files_searched: int = 0
    """Position mode: data files whose key index the batch's keys were looked up in."""
    lookup_seconds: float = 0.0
    """Position mode: time spent finding the keys' rows (summed over the units)."""


@dataclass(frozen=True)
class ChangeContext:
    """How one batch is written: everything a unit needs, picklable for Spark executors."""

    schema: Schema
    file_schema: Schema
    """The table schema with Avro-safe column names, as data files are written."""
    key_schema: Schema
    """The key fields of ``file_schema``: the equality-delete files' schema."""
    spec: PartitionSpec
    format_version: int
    key: tuple[str, ...]
    key_ids: tuple[int, ...]
    op_column: str
    order_column: str | None
    """The column ordering the rows of one key; None: row order."""
    dropped: tuple[str, ...]
    """Columns of the changes that are not table columns (the op, a foreign order column)."""
    nullable_key: bool
    required: tuple[str, ...]
    """Required top-level table columns (not NULL in inserted/updated rows)."""
    data_dir: str
    eq_partitioned: bool
    global_spec_id: int
    commit_id: str
    properties: dict[str, str]
    target_file_size: int
    delete_target_file_size: int
    row_group_bytes: int
    """``write.parquet.row-group-size-bytes``, measured on the rows in memory (Arrow bytes)."""
    compression: str
    delete_mode: str = EQUALITY
    lookup: KeyLookup | None = None
    """Position mode: the live files of the start snapshot the keys are looked up in."""


@dataclass(frozen=True)
class ChangeUnitResult:
    """What one unit wrote, or the bad input it found (then it wrote nothing)."""

    error: str | None = None
    written: tuple[WrittenFile, ...] = ()
    changes: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    ignored: int = 0
    rows_written: int = 0
    equality_deletes: int = 0
    position_deletes: int = 0
    positions: tuple[tuple[str, npt.NDArray[np.int64]], ...] = ()
    """Position mode: the live positions of the unit's keys, per data file of the start snapshot."""
    sidecars: tuple[str, ...] = ()
    """Position mode: the key-index sidecars of the data files written (removed if not committed)."""
    files_searched: int = 0
    lookup_seconds: float = 0.0
    keys: pa.Table | None = None
    """Position mode: the keys the unit updated or deleted (the commit checks concurrent files for them)."""


# ------------------------------------------------------------------------------------- driver


def last_committed_batch(metadata: TableMetadata, app_id: str) -> int | None:
    """The newest ``batch_id`` that ``app_id`` committed on the main branch's history, if any."""
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        batch = _batch_of(snapshot, app_id)
        if batch is not None:
            return batch
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return None


def _batch_of(snapshot: Snapshot, app_id: str) -> int | None:
    summary = snapshot.summary
    if summary is None or summary.additional_properties.get(APP_ID_PROPERTY) != app_id:
        return None
    raw = summary.additional_properties.get(BATCH_ID_PROPERTY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def prepare_changes(
    table: PyIcebergTable,
    schema: pa.Schema,
    *,
    key: Sequence[str],
    op_column: str,
    order_by: str | None,
    allow_nullable_key: bool,
    sequence_column: str | None = None,
    rows: pa.Table | None = None,
    io: FileIO | None = None,
    deletes: str | None = None,
) -> ChangeContext:
    """Check the table, the key and the changes' schema; decide how the batch is written.

    ``deletes``: ``equality``, ``position`` or None (:func:`delete_mode` decides). Position
    mode plans the key lookup over the live files of the table's current snapshot.

    ``rows``, when the caller holds them (the local engine), are checked for NULL keys before the
    column types are: a NULL makes pandas turn an integer column into floats, and the type
    mismatch would hide the NULL.

    Raises:
        InvalidArgumentError: A v1 or copy-on-write table, a bad key (unknown, nested, float,
            optional, contradicting the table's identifier fields), a missing op/order/key
            column, or columns that do not fit the table.
    """
    check_writable(table)
    metadata = table.metadata
    mode = delete_mode(metadata, deletes)
    name = ".".join(table.name())
    tschema = metadata.schema()
    key = tuple(key)
    if not key:
        msg = "give at least one key column"
        raise InvalidArgumentError(msg)
    if len(set(key)) != len(key):
        msg = f"key columns repeat: {', '.join(key)}"
        raise InvalidArgumentError(msg)
    top = {f.name: f for f in tschema.fields}
    if unknown := [k for k in key if k not in top]:
        msg = f"key column {unknown[0]!r} is not a top-level column of {name}"
        raise InvalidArgumentError(msg)
    fields = [top[k] for k in key]
    key_ids = [f.field_id for f in fields]
    existing = set(tschema.identifier_field_ids)
    if existing and existing != set(key_ids):
        names = ", ".join(sorted(tschema.find_column_name(i) or str(i) for i in existing))
        msg = f"key ({', '.join(key)}) contradicts the identifier fields of {name} ({names})"
        raise InvalidArgumentError(msg)
    for f in fields:
        if not isinstance(f.field_type, PrimitiveType):
            msg = f"key column {f.name!r} is a {f.field_type}: keys must be primitive columns"
            raise InvalidArgumentError(msg)
        if not allow_nullable_key and isinstance(f.field_type, FloatType | DoubleType):
            msg = (
                f"key column {f.name!r} is a {f.field_type}: float/double keys compare unreliably (NaN, "
                "-0.0) and cannot be identifier fields; pass allow_nullable_key (--allow-nullable-key) to "
                "use it anyway"
            )
            raise InvalidArgumentError(msg)
        if not allow_nullable_key and not f.required:
            msg = (
                f"key column {f.name!r} is optional (nullable): identifier fields must be required; make it "
                "NOT NULL, or pass allow_nullable_key (--allow-nullable-key) to key on it anyway"
            )
            raise InvalidArgumentError(msg)

    columns = set(schema.names)
    if op_column not in columns:
        msg = f"the changes have no op column {op_column!r} (columns: {', '.join(schema.names)})"
        raise InvalidArgumentError(msg)
    if op_column in key:
        msg = f"the op column {op_column!r} cannot be a key column"
        raise InvalidArgumentError(msg)
    op_type = schema.field(op_column).type
    if pa.types.is_dictionary(op_type):
        op_type = op_type.value_type
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view, pa.types.is_null)
    # Arrow's null type: an empty pandas batch (or an op column of NULLs, refused per row)
    if not any(is_string(op_type) for is_string in strings):
        msg = f"op column {op_column!r} is {op_type}: it must hold strings ({_OP_HELP})"
        raise InvalidArgumentError(msg)
    if order_by is not None and order_by not in columns:
        msg = f"the changes have no order column {order_by!r}"
        raise InvalidArgumentError(msg)
    if missing := [k for k in key if k not in columns]:
        msg = f"the changes have no key column {missing[0]!r}"
        raise InvalidArgumentError(msg)
    if rows is not None:
        _check_null_keys(rows, key, op_column, allow_nullable_key, {f.name for f in fields if f.required})
    dropped = [op_column]
    if order_by is not None and order_by not in top:
        dropped.append(order_by)
    if sequence_column is not None:
        dropped.append(sequence_column)
    _check_fits(metadata, schema, dropped, name)

    spec = metadata.spec()
    props = dict(metadata.properties)
    eq_partitioned = spec.is_unpartitioned() or _key_decides_partition(table, spec, set(key_ids))
    global_spec_id = spec.spec_id if spec.is_unpartitioned() else _unpartitioned_spec_id(metadata)
    file_schema = sanitize_column_names(tschema)
    lookup = None
    if mode == POSITION:
        # the rows the keys hit are found in the live files of the snapshot the batch starts from
        job = prepare_scan(metadata, io or table.io, selected_fields=("_pos",))
        opts = replace(job.options, projected_schema=Schema(), file_column=False)
        lookup = plan_lookup(
            metadata, io or table.io, job.live_files(), key_names=key, key_ids=key_ids, options=opts
        )
    return ChangeContext(
        schema=tschema,
        file_schema=file_schema,
        key_schema=Schema(*[file_schema.find_field(i) for i in key_ids]),
        spec=spec,
        format_version=metadata.format_version,
        key=key,
        key_ids=tuple(key_ids),
        op_column=op_column,
        order_column=order_by if order_by is not None else sequence_column,
        dropped=tuple(dropped),
        nullable_key=allow_nullable_key,
        required=tuple(f.name for f in tschema.fields if f.required),
        # the data directory as the table's location provider lays it out (write.data.path etc.)
        data_dir=table.location_provider().new_data_location("x").rsplit("/", 1)[0],
        eq_partitioned=eq_partitioned,
        global_spec_id=global_spec_id,
        commit_id=uuid.uuid4().hex[:12],
        properties=props,
        target_file_size=P.int_property(
            props, P.WRITE_TARGET_FILE_SIZE_BYTES, P.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
        delete_target_file_size=P.int_property(
            props, P.DELETE_TARGET_FILE_SIZE_BYTES, P.DELETE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
        row_group_bytes=P.int_property(
            props, P.PARQUET_ROW_GROUP_SIZE_BYTES, P.PARQUET_ROW_GROUP_SIZE_BYTES_DEFAULT
        ),
        compression=props.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT),
        delete_mode=mode,
        lookup=lookup,
    )


def delete_mode(metadata: TableMetadata, deletes: str | None = None) -> str:
    """How a CDC batch deletes old rows: ``deletes`` if given, else the table property
    ``icemor.cdc.delete-mode``, else ``position`` on tables with ``icemor.v4-ready=true`` and
    ``equality`` on the others (a stream's compaction keeps up with equality deletes; position
    deletes written every second conflict with every rewrite of the files they hit).

    Raises:
        InvalidArgumentError: An unknown mode, or ``equality`` on a table marked v4-ready.
    """
    props = metadata.properties
    v4_ready = P.bool_property(props, V4_READY_PROPERTY, False)
    given = deletes if deletes is not None else props.get(DELETE_MODE_PROPERTY)
    if given is None:
        return POSITION if v4_ready else EQUALITY
    mode = given.strip().lower()
    if mode not in (EQUALITY, POSITION):
        where = "deletes" if deletes is not None else f"table property {DELETE_MODE_PROPERTY}"
        msg = f"{where}={given!r} must be {EQUALITY!r} or {POSITION!r}"
        raise InvalidArgumentError(msg)
    if mode == EQUALITY and v4_ready:
        msg = (
            f"the table has {V4_READY_PROPERTY}=true: format v4 forbids new equality deletes, so icemor "
            f"writes none; apply the changes with deletes='position' (--deletes position)"
        )
        raise InvalidArgumentError(msg)
    return mode


def _check_null_keys(
    rows: pa.Table, key: Sequence[str], op_column: str, allow_nullable_key: bool, required: set[str]
) -> None:
    """Refuse a NULL key (unless allowed) in a row that is not an update-before (those are
    ignored), naming the column and the first such row (numbered from 0, in input order)."""
    ignored = None
    for k in key:
        column = rows.column(k)
        if not column.null_count or (allow_nullable_key and k not in required):
            continue
        if ignored is None:
            ignored = _update_before_rows(rows.column(op_column))
        bad = pc.and_(pc.is_null(column), pc.invert(ignored))
        count = pc.sum(bad).as_py() or 0
        if count:
            row = pc.index(bad, True).as_py()
            hint = "" if k in required else " (allow_nullable_key / --allow-nullable-key accepts them)"
            msg = f"key column {k!r} is NULL in row {row} of the changes ({count} row(s) in all){hint}"
            raise InvalidArgumentError(msg)


def _update_before_rows(op: pa.ChunkedArray) -> pa.ChunkedArray:
    """Where ``op`` is an update-before spelling (``-U``, ``update_before``; case and blanks aside)."""
    if pa.types.is_null(op.type):
        return pa.chunked_array([pc.fill_null(pa.nulls(len(op), pa.bool_()), False)])
    if pa.types.is_dictionary(op.type):
        op = op.cast(op.type.value_type)
    spellings = pa.array([s for s, code in _OPS.items() if code == UPDATE_BEFORE])
    normalized = pc.utf8_lower(pc.utf8_trim_whitespace(op.cast(pa.string())))
    return pc.fill_null(pc.is_in(normalized, value_set=spellings), False)


def _check_fits(metadata: TableMetadata, schema: pa.Schema, dropped: Sequence[str], name: str) -> None:
    """The table columns of the changes must fit the table; NULLs in required ones are checked per row."""
    tschema = metadata.schema()
    required = {f.name for f in tschema.fields if f.required}
    fields = [
        # nullability is checked on the rows that are written (a delete row may carry NULLs)
        f.with_nullable(False) if f.name in required else f
        for f in _normalized(downcast_ns_timestamps(schema), tschema)
        if f.name not in dropped
    ]
    try:
        check_arrow_schema_compatible(tschema, pa.schema(fields), format_version=metadata.format_version)
    except ValueError as e:
        msg = f"the changes do not fit the schema of {name}: {schema_mismatch_message(e)}"
        raise InvalidArgumentError(msg) from e


def _normalized(schema: pa.Schema, table_schema: Schema) -> pa.Schema:
    """The changes' schema as written: zoned timestamps in UTC (Spark hands them in its session
    zone; the instant is the same), and all-NULL columns (Arrow's null type, e.g. a batch of
    deletes built from Python lists) typed as the table's column."""
    top = {f.name: f for f in table_schema.fields}
    out = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            f = f.with_type(pa.timestamp(f.type.unit, tz="UTC"))
        elif pa.types.is_null(f.type) and f.name in top:
            f = f.with_type(schema_to_pyarrow(top[f.name].field_type, include_field_ids=False))
        out.append(f)
    return pa.schema(out, metadata=schema.metadata)


def _key_decides_partition(table: PyIcebergTable, spec: PartitionSpec, key_ids: set[int]) -> bool:
    """Every partition field is a transform of a key column, and every live data file uses this spec.

    Then a key's older rows all live in the partition its values map to: an equality delete in
    that partition reaches them. Data files of an older spec would not be reached (a partitioned
    delete applies to its own spec and partition only).
    """
    if not all(f.source_id in key_ids for f in spec.fields):
        return False
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return True
    return all(
        m.partition_spec_id == spec.spec_id for m in snapshot.manifests(table.io) if int(m.content) == 0
    )


def _unpartitioned_spec_id(metadata: TableMetadata) -> int:
    spec_id = unpartitioned_spec_id(metadata)
    return _UNSET_SPEC if spec_id is None else spec_id


def apply_changes(
    table: PyIcebergTable,
    changes: Any,
    *,
    key: Sequence[str],
    op_column: str = "op",
    order_by: str | None = None,
    allow_nullable_key: bool = False,
    app_id: str | None = None,
    batch_id: int | None = None,
    deletes: str | None = None,
    run: Runner | None = None,
) -> ChangeMetrics:
    """Apply one batch of changes on the local engine, as one commit.

    Args:
        table: The pyiceberg table (refreshed here).
        changes: An Arrow table (or record batch / reader, or pandas DataFrame), or Parquet
            file paths; columns: the table's (missing optional ones are NULL), the op column,
            and ``order_by`` if given.
        key: The key columns.
        op_column: The column holding each row's op.
        order_by: A column ordering the changes of one key (default: row order).
        allow_nullable_key: Accept optional and float/double key columns, and NULL keys.
        app_id: With ``batch_id``: record both in the snapshot summary, and skip the batch if
            this app already committed it (or a later one).
        batch_id: The batch number of ``app_id`` (increasing).
        deletes: ``equality`` or ``position`` (default: :func:`delete_mode`).
        run: Position mode: runs the per-file delete units (default: the local thread pool).

    Raises:
        InvalidArgumentError: Bad table, key, schema or rows; nothing is committed.
        CommitConflictError: The batch was committed concurrently by the same app, or (position
            mode) a concurrent commit added a row with one of its updated or deleted keys.
    """
    started = time.monotonic()
    table = table.refresh()
    _check_app(app_id, batch_id)
    if app_id is not None and _already_committed(table, app_id, batch_id):
        return _skipped(started)
    rows = read_arrow(changes, what="the changes")
    if rows.num_rows == 0:
        # nothing to apply; an empty pandas frame's dtypes say nothing (object -> Arrow's null
        # type, [] -> float64): only the names are checked, and nothing is committed
        rows = pa.table({name: pa.nulls(0) for name in rows.column_names})
    ctx = prepare_changes(
        table,
        rows.schema,
        key=key,
        op_column=op_column,
        order_by=order_by,
        allow_nullable_key=allow_nullable_key,
        rows=rows,
        deletes=deletes,
    )
    start = table.metadata.current_snapshot()
    result = change_unit(table.io, ctx, rows, 0)
    if run is None:
        from icemor.engines.local import runner

        run = runner(table.io)
    return _commit(
        table,
        ctx,
        [result],
        start_snapshot_id=start.snapshot_id if start else None,
        app=(app_id, batch_id),
        started=started,
        run=run,
    )


def apply_changes_dataframe(
    table: PyIcebergTable,
    changes: Any,
    *,
    key: Sequence[str],
    op_column: str = "op",
    order_by: str | None = None,
    allow_nullable_key: bool = False,
    app_id: str | None = None,
    batch_id: int | None = None,
    partitions: int | None = None,
    deletes: str | None = None,
) -> ChangeMetrics:
    """Apply one batch of changes held in a Spark DataFrame (``changes``); the writing runs on the executors.

    The DataFrame is repartitioned by key (``partitions`` tasks, default the session's default
    parallelism); each task writes the files of its keys. In position mode each task also finds
    its keys' live rows; a second Spark job writes each data file's deletion vector or position
    deletes (DELETE's per-file units, on the executors). Arguments as :func:`apply_changes`.

    The tasks announce their files under a staging prefix (:mod:`icemor.engines.spark.write`): a
    failed job leaves none of them, and once the batch is committed (or refused) the files of
    attempts Spark did not keep go too.
    """
    from icemor.engines.spark import runner
    from icemor.engines.spark.changes import arrow_schema, run_per_key
    from icemor.engines.spark.session_kind import parallelism
    from icemor.engines.spark.write import Staging

    started = time.monotonic()
    table = table.refresh()
    _check_app(app_id, batch_id)
    if app_id is not None and _already_committed(table, app_id, batch_id):
        return _skipped(started)
    schema = arrow_schema(changes)
    if _SEQ in schema.names:
        msg = f"the changes have a column named {_SEQ}, which icemor uses itself"
        raise InvalidArgumentError(msg)
    sequence = None if order_by is not None else _SEQ
    ctx = prepare_changes(
        table,
        schema,
        key=key,
        op_column=op_column,
        order_by=order_by,
        allow_nullable_key=allow_nullable_key,
        sequence_column=sequence,
        deletes=deletes,
    )
    start = table.metadata.current_snapshot()
    spark = changes.sparkSession
    run = _grouped(runner(spark, table.io, table.metadata.location), parallelism(spark))
    unit: _ContextUnit | _OneTaskUnit = _ContextUnit(ctx)
    if (partitions or parallelism(spark)) == 1 and ctx.lookup is not None and ctx.lookup.files:
        unit = _OneTaskUnit(ctx, _unit_templates(table, ctx.lookup))
    staging = Staging(table.io, table.metadata.location, table.metadata.properties)
    keep: set[str] = set()
    try:
        # a failed job removes every file it wrote before it raises (run_per_key)
        results = run_per_key(
            changes,
            table.io,
            table.metadata.location,
            unit,
            key=ctx.key,
            sequence_column=sequence,
            staging=staging,
            partitions=partitions,
        )
        done: dict[frozenset[str], UnitResult] = {}
        if isinstance(unit, _OneTaskUnit):
            done = {paths: r for _, units in results for paths, r in units}
            results = [r for r, _ in results]
            run = _RunAlready(table.io, done, run)
        # given to the commit: it removes them itself when refused, keeps them when it may have
        # happened; every other announced file (failed or lost attempts) goes below
        keep = {w.path for r in results for w in r.written} | {p for r in results for p in r.sidecars}
        keep |= {w.path for r in done.values() for w in r.written}
        return _commit(
            table,
            ctx,
            results,
            start_snapshot_id=start.snapshot_id if start else None,
            app=(app_id, batch_id),
            started=started,
            run=run,
        )
    finally:
        staging.finish(keep)


def _unit_templates(table: PyIcebergTable, lookup: KeyLookup) -> tuple[DeleteUnit, ...]:
    """DELETE's per-file units for every file the keys are looked up in, positions to be found:
    a one-task batch keeps those of the files it found rows in (as ``_commit_positions`` makes
    them for those files)."""
    planned = [p for p, _ in lookup.files]
    none = np.zeros(0, np.int64)
    positions = {p.data_file.path: none for p in planned}
    return tuple(delete_units(table, planned, lookup.options, positions=positions, dvs_per_partition=True))


@dataclass(frozen=True)
class _OneTaskUnit:
    """Position mode in one Spark task (``partitions=1``): the task holds every key of the batch,
    so it has every position of each data file and also runs DELETE's per-file units, on the
    executor: no second Spark job. Returns the unit's result and, per delete unit, its data
    files and result."""

    ctx: ChangeContext
    templates: tuple[DeleteUnit, ...]

    def __call__(
        self, io: FileIO, rows: pa.Table, task: int
    ) -> tuple[ChangeUnitResult, list[tuple[frozenset[str], UnitResult]]]:
        result = change_unit(io, self.ctx, rows, task)
        if result.error is not None or not result.positions:
            return result, []
        found = dict(result.positions)
        units = []
        for template in self.templates:
            files = tuple(f for f in template.files if f.data_file.path in found)
            if files:
                units.append(
                    replace(template, files=files, positions=tuple(found[f.data_file.path] for f in files))
                )
        try:
            done = [(_paths(u), delete_unit(io, u)) for u in units]
        except BaseException:
            for u in units:
                remove_written(io, u.target)
            delete_quietly(io, [w.path for w in result.written] + list(result.sidecars))
            raise
        return result, done


def _paths(unit: DeleteUnit) -> frozenset[str]:
    return frozenset(p.data_file.path for p in unit.files)


@dataclass(frozen=True)
class _RunAlready:
    """The runner of ``_commit_positions`` after a one-task batch: the delete units it asks for
    were run by that task (the same data files, found by the same rule), so their results are
    returned; anything else runs on ``run`` (the task's delete files removed first)."""

    io: FileIO
    done: dict[frozenset[str], UnitResult]
    run: Runner

    def __call__(self, fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        if (
            fn is delete_unit
            and {_paths(u) for u in items} == set(self.done)
            and len(items) == len(self.done)
        ):
            return [self.done[_paths(u)] for u in items]
        delete_quietly(self.io, [w.path for r in self.done.values() for w in r.written])
        return self.run(fn, items)


def _grouped(run: Runner, groups: int) -> Runner:
    """``run`` with the items dealt into at most ``groups`` tasks: a batch touches a few data files
    each, and a Spark task per data file cost ~0.5 s apiece on 2 busy cores (10 s a batch)."""

    def run_grouped(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        chunks = [(fn, tuple(items[i::groups])) for i in range(min(groups, len(items)))]
        return [r for part in run(_each, chunks) for r in part]

    return run_grouped


def _each(io: FileIO, item: tuple[Callable[[FileIO, Any], Any], Sequence[Any]]) -> list[Any]:
    fn, chunk = item
    return [fn(io, x) for x in chunk]


class ChangeSink:
    """A ``foreachBatch`` function: each micro-batch applied by :func:`apply_changes_dataframe`
    with the stream's ``app_id`` and the batch id, so a batch already committed is skipped
    (see :func:`icemor.spark.cdc_sink`).

    Picklable, because Spark Connect runs a ``foreachBatch`` function in a Python process of its
    server, not in the client: the function travels there pickled. A table does not pickle (its
    catalog holds a connection), so the sink travels as the way to load the table again (the
    catalog's class, name and properties, and the table's identifier) and loads it once in the
    process that runs it. Where it was made (a classic session calls it in this process) it uses
    the table it was given, refreshed after each batch.
    """

    def __init__(
        self,
        table: Any,
        *,
        key: Sequence[str],
        app_id: str,
        op_column: str = "op",
        order_by: str | None = None,
        allow_nullable_key: bool = False,
        partitions: int | None = None,
        deletes: str | None = None,
        progress: Callable[[int, ChangeMetrics], None] | None = None,
    ) -> None:
        _check_app(app_id, 0)
        self._table: Any = table  # an icemor Table or a pyiceberg table
        iceberg = getattr(table, "pyiceberg", table)
        catalog = iceberg.catalog
        self._reference = (type(catalog), catalog.name, dict(catalog.properties), tuple(iceberg.name()))
        self._options: dict[str, Any] = {
            "key": list(key),
            "op_column": op_column,
            "order_by": order_by,
            "allow_nullable_key": allow_nullable_key,
            "app_id": app_id,
            "partitions": partitions,
            "deletes": deletes,
        }
        self._progress = progress

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_table"] = None  # loaded again where it runs (see the class)
        return state

    def _loaded(self) -> Any:
        if self._table is None:
            cls, name, properties, identifier = self._reference
            self._table = cls(name, **properties).load_table(identifier)
        return self._table

    def __call__(self, df: Any, batch_id: int) -> None:
        table = self._loaded()
        metrics = apply_changes_dataframe(
            getattr(table, "pyiceberg", table), df, batch_id=batch_id, **self._options
        )
        table.refresh()
        if self._progress is not None:
            self._progress(batch_id, metrics)


@dataclass(frozen=True)
class _ContextUnit:
    """``change_unit`` bound to a context: a picklable callable for the executors."""

    ctx: ChangeContext

    def __call__(self, io: FileIO, rows: pa.Table, task: int) -> ChangeUnitResult:
        return change_unit(io, self.ctx, rows, task)


def _check_app(app_id: str | None, batch_id: int | None) -> None:
    if (app_id is None) != (batch_id is None):
        msg = "give app_id and batch_id together (or neither)"
        raise InvalidArgumentError(msg)
    if app_id is not None and not app_id.strip():
        msg = "app_id must not be empty"
        raise InvalidArgumentError(msg)


def _already_committed(table: PyIcebergTable, app_id: str, batch_id: int | None) -> bool:
    done = last_committed_batch(table.metadata, app_id)
    return done is not None and batch_id is not None and batch_id <= done


def _skipped(started: float) -> ChangeMetrics:
    return ChangeMetrics(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None, True, time.monotonic() - started)


def _combined(
    *checks: Callable[[Sequence[Snapshot]], None] | None,
) -> Callable[[Sequence[Snapshot]], None] | None:
    """One history check running every given one, in order."""
    given = [c for c in checks if c is not None]
    if not given:
        return None

    def check(snapshots: Sequence[Snapshot]) -> None:
        for c in given:
            c(snapshots)

    return check


def _commit(
    table: PyIcebergTable,
    ctx: ChangeContext,
    results: Sequence[ChangeUnitResult],
    *,
    start_snapshot_id: int | None,
    app: tuple[str | None, int | None],
    started: float,
    run: Runner,
) -> ChangeMetrics:
    written = [w for r in results for w in r.written]
    errors = [r.error for r in results if r.error is not None]
    if errors:
        delete_quietly(table.io, [w.path for w in written] + [p for r in results for p in r.sidecars])
        raise InvalidArgumentError(errors[0])
    if ctx.delete_mode == POSITION:
        return _commit_positions(
            table, ctx, results, start_snapshot_id=start_snapshot_id, app=app, started=started, run=run
        )
    if not written:
        return _metrics(results, [], None, started)
    app_id, batch_id = app
    try:
        global_spec = _prepare_table(table, ctx, any(w.spec_id == _UNSET_SPEC for w in written))
        written = [replace(w, spec_id=global_spec) if w.spec_id == _UNSET_SPEC else w for w in written]
        props = {}
        check = None
        if app_id is not None and batch_id is not None:
            props = {APP_ID_PROPERTY: app_id, BATCH_ID_PROPERTY: str(batch_id)}
            check = _NotYetCommitted(app_id, batch_id)
        delta = RowDelta(
            table,
            Validation(start_snapshot_id=start_snapshot_id, serializable=False, history_check=check),
            added_files=written,
            snapshot_properties=props,
            operation=Operation.OVERWRITE
            if any(w.content != FileContent.DATA for w in written)
            else Operation.APPEND,
            base_is_current=True,  # refreshed when the batch began
        )
    except BaseException:
        delete_quietly(table.io, [w.path for w in written])
        raise
    snapshot = delta.commit()
    return _metrics(results, written, snapshot.snapshot_id, started)


def _commit_positions(
    table: PyIcebergTable,
    ctx: ChangeContext,
    results: Sequence[ChangeUnitResult],
    *,
    start_snapshot_id: int | None,
    app: tuple[str | None, int | None],
    started: float,
    run: Runner,
) -> ChangeMetrics:
    """Position mode: DELETE's per-file units write the positions the units found (a DV per data
    file on v3, file-scoped position deletes on v2, older deletes merged, a data file with no live
    row left removed), then one RowDelta commits them with the new data files."""
    io = table.io
    data = [w for r in results for w in r.written]
    sidecars = [p for r in results for p in r.sidecars]
    lookup = ctx.lookup
    assert lookup is not None
    keys = (
        pa.concat_tables([r.keys for r in results if r.keys is not None])
        if any(r.keys is not None for r in results)
        else None
    )
    found: dict[str, list[npt.NDArray[np.int64]]] = {}
    for r in results:
        for path, part in r.positions:
            found.setdefault(path, []).append(part)
    # units own disjoint keys, so each row is found by one unit: the union is a concatenation
    by_file = {
        p: np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0] for p, parts in found.items()
    }
    try:
        planned = [p for p, _ in lookup.files if p.data_file.path in by_file]
        units = (
            delete_units(table, planned, lookup.options, positions=by_file, dvs_per_partition=True)
            if planned
            else []
        )
        unit_results = run_units(table, units, run)
    except BaseException:
        delete_quietly(io, [w.path for w in data] + sidecars)
        raise
    deletes = [w for r in unit_results for w in r.written]
    removed = {p for r in unit_results for p in r.removed}
    removed_data = sum(r.removed_data_files for r in unit_results)
    deleted = sum(r.deleted_rows for r in unit_results)
    extra = {
        "delete_mode": POSITION,
        "data_files_removed": removed_data,
        "delete_files_removed": len(removed) - removed_data,
        "files_searched": sum(r.files_searched for r in results),
        "lookup_seconds": sum(r.lookup_seconds for r in results),
    }
    if not data and not deletes and not removed:
        delete_quietly(io, sidecars)
        return replace(_metrics(results, [], None, started), **extra)  # type: ignore[arg-type]
    app_id, batch_id = app
    added = [*data, *deletes]
    try:
        _prepare_table(table, ctx, False)
        props = {}
        once = None
        if app_id is not None and batch_id is not None:
            props = {APP_ID_PROPERTY: app_id, BATCH_ID_PROPERTY: str(batch_id)}
            once = _NotYetCommitted(app_id, batch_id)
        conflicts = KeyConflicts(io, table.metadata, lookup, keys) if keys is not None else None
        delta = RowDelta(
            table,
            Validation(
                start_snapshot_id=start_snapshot_id,
                serializable=False,
                referenced_data_files={p for r in unit_results for p in r.referenced},
                removed_data_files={p for r in unit_results for p in r.removed},
                history_check=_combined(once, conflicts),
            ),
            added_files=added,
            removed_paths=removed,
            snapshot_properties=props,
            operation=Operation.APPEND if not deletes and not removed else None,
            base_is_current=True,  # refreshed when the batch began
        )
    except BaseException:
        delete_quietly(io, [w.path for w in added] + sidecars)
        raise
    try:
        snapshot = delta.commit()
    except BaseException as e:
        if not may_have_committed(e):
            delete_quietly(io, sidecars)  # the commit removed the data and delete files
        raise
    metrics = _metrics(results, added, snapshot.snapshot_id, started)
    return replace(metrics, position_deletes=deleted, **extra)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _NotYetCommitted:
    """Validation of every commit attempt: no snapshot since the batch began holds this batch."""

    app_id: str
    batch_id: int

    def __call__(self, snapshots: Sequence[Snapshot]) -> None:
        for s in snapshots:
            done = _batch_of(s, self.app_id)
            if done is not None and done >= self.batch_id:
                msg = (
                    f"batch {self.batch_id} of app {self.app_id!r} was committed concurrently "
                    f"(snapshot {s.snapshot_id} holds batch {done})"
                )
                raise CommitConflictError(msg)


def _metrics(
    results: Sequence[ChangeUnitResult],
    written: Sequence[WrittenFile],
    snapshot_id: int | None,
    started: float,
) -> ChangeMetrics:
    def count(content: FileContent) -> int:
        return sum(1 for w in written if w.content == content)

    return ChangeMetrics(
        changes=sum(r.changes for r in results),
        inserts=sum(r.inserts for r in results),
        updates=sum(r.updates for r in results),
        deletes=sum(r.deletes for r in results),
        ignored=sum(r.ignored for r in results),
        rows_written=sum(r.rows_written for r in results),
        equality_deletes=sum(r.equality_deletes for r in results),
        position_deletes=sum(r.position_deletes for r in results),
        data_files_added=count(FileContent.DATA),
        equality_delete_files_added=count(FileContent.EQUALITY_DELETES),
        position_delete_files_added=count(FileContent.POSITION_DELETES),
        snapshot_id=snapshot_id,
        skipped=False,
        seconds=time.monotonic() - started,
    )


def _prepare_table(table: PyIcebergTable, ctx: ChangeContext, needs_global_spec: bool) -> int:
    """Set the identifier fields from the key if unset; add an unpartitioned spec if one is needed.

    Both are metadata changes without a snapshot, made once per table. Returns the spec id
    for global equality deletes (``_UNSET_SPEC`` when none is needed).
    """
    schema = table.metadata.schema()
    fields = [schema.find_field(i) for i in ctx.key_ids]
    # the spec's identifier-field rules: required, not float/double
    eligible = all(f.required and not isinstance(f.field_type, FloatType | DoubleType) for f in fields)
    if not schema.identifier_field_ids and eligible:
        set_identifier_fields(table, ctx.key)
    if not needs_global_spec:
        return _UNSET_SPEC
    return add_unpartitioned_spec(table)


# --------------------------------------------------------------------------------------- unit


@dataclass
class _Plan:
    """The batch's rows sorted by (key, order), with what becomes of each."""

    rows: pa.Table
    ops: npt.NDArray[np.int8]
    written: npt.NDArray[np.bool_]
    """Inserted/updated rows: written to a data file."""
    superseded: npt.NDArray[np.bool_]
    """Written rows that a later change of their key, in the batch, replaces or deletes."""
    eq_rows: npt.NDArray[np.int64]
    """One row per key updated or deleted: the equality deletes."""
    counts: ChangeUnitResult
    """The op counts (the rest is filled in once written)."""


def change_unit(io: FileIO, ctx: ChangeContext, rows: pa.Table, unit: int) -> ChangeUnitResult:
    """Check and write one unit of a batch: every change of its keys (no other unit has them).

    Bad input is returned as ``error`` before anything is written; any other failure removes
    what the unit wrote and raises.
    """
    try:
        plan = _plan(ctx, rows)
    except InvalidArgumentError as e:
        return ChangeUnitResult(error=str(e))
    if ctx.delete_mode == POSITION:
        return _position_unit(io, ctx, plan, unit)
    written: list[WrittenFile] = []
    try:
        prefix = f"{ctx.commit_id}-{unit:05d}"
        dropped = [c for c in ctx.dropped if c in plan.rows.column_names]
        data = plan.rows.filter(plan.written).drop_columns(dropped)
        superseded = plan.superseded[plan.written]
        position_deletes = 0
        for n, (partition, take) in enumerate(_partitions(ctx, data)):
            directory = _directory(ctx, partition)
            part_rows = to_file_schema(
                ctx.schema, ctx.file_schema, data.take(take), format_version=ctx.format_version
            )
            target = DataFileTarget(
                directory=directory,
                prefix=f"{prefix}-d{n:04d}",
                spec_id=ctx.spec.spec_id,
                partition=partition,
                target_file_size=ctx.target_file_size,
                row_group_rows=max(1, ctx.row_group_bytes * part_rows.num_rows // max(1, part_rows.nbytes)),
                compression=ctx.compression,
            )
            files = write_data_files_in_order(io, target, part_rows, ctx.file_schema, ctx.properties)
            written.extend(files)
            gone = np.flatnonzero(superseded[take]).astype(np.int64)
            for j, (path, positions) in enumerate(file_positions(files, gone)):
                pos_target = DeleteFileTarget(
                    directory=directory,
                    prefix=f"{prefix}-d{n:04d}-{j:05d}-pos",
                    spec_id=ctx.spec.spec_id,
                    partition=partition,
                    target_file_size=ctx.delete_target_file_size,
                    compression=ctx.compression,
                    deletion_vectors=ctx.format_version >= 3,  # v3: a DV (the file is new: no older one)
                )
                write = write_deletion_vectors if pos_target.deletion_vectors else write_position_deletes
                written.extend(write(io, pos_target, [(path, positions)]))
                position_deletes += len(positions)
        keys = plan.rows.select(list(ctx.key)).take(plan.eq_rows)
        if keys.num_rows:
            written.extend(_write_equality(io, ctx, keys, prefix))
    except BaseException:
        delete_quietly(io, [w.path for w in written])
        raise
    return replace(
        plan.counts,
        written=tuple(written),
        rows_written=data.num_rows,
        equality_deletes=keys.num_rows,
        position_deletes=position_deletes,
    )


def _position_unit(io: FileIO, ctx: ChangeContext, plan: _Plan, unit: int) -> ChangeUnitResult:
    """Position mode: find the live rows of the keys updated or deleted, and write each key's
    final row (rows superseded within the batch are not written at all: no position delete for
    them). The positions go back to the driver, which writes them per data file."""
    assert ctx.lookup is not None
    keys = plan.rows.select(list(ctx.key)).take(plan.eq_rows)
    found = find_positions(io, ctx.lookup, keys) if keys.num_rows else None
    dropped = [c for c in ctx.dropped if c in plan.rows.column_names]
    data = plan.rows.filter(plan.written & ~plan.superseded).drop_columns(dropped)
    written: list[WrittenFile] = []
    sidecars: list[str] = []
    try:
        prefix = f"{ctx.commit_id}-{unit:05d}"
        for n, (partition, take) in enumerate(_partitions(ctx, data)):
            rows = data.take(take)
            part_rows = to_file_schema(ctx.schema, ctx.file_schema, rows, format_version=ctx.format_version)
            target = DataFileTarget(
                directory=_directory(ctx, partition),
                prefix=f"{prefix}-d{n:04d}",
                spec_id=ctx.spec.spec_id,
                partition=partition,
                target_file_size=ctx.target_file_size,
                row_group_rows=max(1, ctx.row_group_bytes * part_rows.num_rows // max(1, part_rows.nbytes)),
                compression=ctx.compression,
            )
            files = write_data_files_in_order(io, target, part_rows, ctx.file_schema, ctx.properties)
            written.extend(files)
            sidecars.extend(_index_written(io, ctx, files, rows))
    except BaseException:
        delete_quietly(io, [w.path for w in written] + sidecars)
        raise
    return replace(
        plan.counts,
        written=tuple(written),
        rows_written=data.num_rows,
        positions=tuple(found.positions.items()) if found is not None else (),
        sidecars=tuple(sidecars),
        files_searched=found.files_searched if found is not None else 0,
        lookup_seconds=found.seconds if found is not None else 0.0,
        keys=keys if keys.num_rows else None,
    )


def _index_written(io: FileIO, ctx: ChangeContext, files: Sequence[WrittenFile], rows: pa.Table) -> list[str]:
    """Store the key index of each data file just written (its rows, in order, are ``rows``), so
    that later batches look its keys up without reading it; returns the sidecars written."""
    assert ctx.lookup is not None
    types = [
        schema_to_pyarrow(ctx.schema.find_field(i).field_type, include_field_ids=False) for i in ctx.key_ids
    ]
    columns = [rows.column(k).combine_chunks() for k in ctx.key]
    columns = [c if c.type == t else c.cast(t) for c, t in zip(columns, types, strict=True)]
    out = []
    start = 0
    for f in files:
        index = build_key_index([c.slice(start, f.record_count) for c in columns])
        start += f.record_count
        remember_key_index(f.path, f.file_size_in_bytes, ctx.key_ids, index)
        stored = save_key_index(io, f.path, f.file_size_in_bytes, ctx.key_ids, index)
        if stored is not None:
            out.append(stored)
    return out


def _write_equality(io: FileIO, ctx: ChangeContext, keys: pa.Table, prefix: str) -> list[WrittenFile]:
    out: list[WrittenFile] = []
    if ctx.eq_partitioned:
        groups = list(_partitions(ctx, keys))
        spec_id = ctx.spec.spec_id
    else:
        groups = [((), np.arange(keys.num_rows))]
        spec_id = ctx.global_spec_id
    for n, (partition, take) in enumerate(groups):
        target = DeleteFileTarget(
            directory=_directory(ctx, partition) if ctx.eq_partitioned else ctx.data_dir,
            prefix=f"{prefix}-e{n:04d}-eq",
            spec_id=spec_id,
            partition=partition,
            target_file_size=ctx.delete_target_file_size,
            compression=ctx.compression,
        )
        rows = to_file_schema(ctx.schema, ctx.key_schema, keys.take(take), format_version=ctx.format_version)
        out.extend(write_equality_deletes(io, target, rows, ctx.key_schema, ctx.key_ids))
    return out


def _directory(ctx: ChangeContext, partition: tuple[Any, ...]) -> str:
    if ctx.spec.is_unpartitioned():
        return ctx.data_dir
    return f"{ctx.data_dir}/{ctx.spec.partition_to_path(Record(*partition), ctx.schema)}"


def _partitions(ctx: ChangeContext, rows: pa.Table) -> list[tuple[tuple[Any, ...], npt.NDArray[np.int64]]]:
    """The rows of each partition of the table's spec: (partition tuple, row indices in order)."""
    return partition_rows(ctx.spec, ctx.schema, rows)


def _op_codes(ctx: ChangeContext, column: pa.ChunkedArray) -> npt.NDArray[np.int8]:
    arr = column.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if not len(arr):  # an empty batch (an empty pandas frame's op column has Arrow's null type)
        return np.zeros(0, dtype=np.int8)
    if arr.null_count:
        msg = f"op column {ctx.op_column!r} is NULL in {arr.null_count} rows ({_OP_HELP})"
        raise InvalidArgumentError(msg)
    encoded = pc.dictionary_encode(arr)
    codes = np.empty(len(encoded.dictionary), dtype=np.int8)
    for i, value in enumerate(encoded.dictionary.to_pylist()):  # the few distinct op spellings
        code = _OPS.get(str(value).strip().lower())
        if code is None:
            n = pc.sum(pc.equal(arr, value)).as_py()
            msg = f"unknown op {value!r} in column {ctx.op_column!r} ({n} rows): {_OP_HELP}"
            raise InvalidArgumentError(msg)
        codes[i] = code
    return np.asarray(codes[encoded.indices.to_numpy(zero_copy_only=False)], dtype=np.int8)


def _describe_key(ctx: ChangeContext, rows: pa.Table, i: int) -> str:
    return ", ".join(f"{k}={rows.column(k)[i].as_py()!r}" for k in ctx.key)


def _plan(ctx: ChangeContext, rows: pa.Table) -> _Plan:
    """Validate the rows and decide, vectorised, what is written and what is deleted."""
    normalized = _normalized(rows.schema, ctx.schema)
    if normalized != rows.schema:
        rows = rows.cast(normalized)
    ops = _op_codes(ctx, rows.column(ctx.op_column))
    counts = ChangeUnitResult(
        changes=rows.num_rows,
        inserts=int(np.count_nonzero(ops == INSERT)),
        updates=int(np.count_nonzero(ops == UPDATE)),
        deletes=int(np.count_nonzero(ops == DELETE)),
        ignored=int(np.count_nonzero(ops == UPDATE_BEFORE)),
    )
    keep = ops != UPDATE_BEFORE
    if not keep.all():
        rows, ops = rows.filter(keep), ops[keep]
    for k in ctx.key:
        nulls = rows.column(k).null_count
        if nulls and (not ctx.nullable_key or k in ctx.required):
            hint = "" if k in ctx.required else " (allow_nullable_key / --allow-nullable-key accepts them)"
            msg = f"key column {k!r} is NULL in {nulls} change rows{hint}"
            raise InvalidArgumentError(msg)
    if ctx.order_column is not None and (nulls := rows.column(ctx.order_column).null_count):
        msg = f"order column {ctx.order_column!r} is NULL in {nulls} change rows"
        raise InvalidArgumentError(msg)
    sort_keys = [(k, "ascending") for k in ctx.key]
    if ctx.order_column is not None:
        sort_keys.append((ctx.order_column, "ascending"))
    # a stable sort: without an order column, the rows of one key keep their row order
    order = pc.sort_indices(rows, sort_keys=sort_keys)
    rows, ops = rows.take(order), ops[order.to_numpy()]
    n = rows.num_rows
    same = np.ones(n, dtype=bool)
    same[:1] = False
    for k in ctx.key:
        same &= same_as_previous(rows.column(k).combine_chunks())
    if ctx.order_column is not None and n > 1:
        tie = same & same_as_previous(rows.column(ctx.order_column).combine_chunks())
        if tie.any():
            i = int(np.argmax(tie))
            value = rows.column(ctx.order_column)[i].as_py()
            msg = (
                f"two changes of key ({_describe_key(ctx, rows, i)}) have the same {ctx.order_column} "
                f"value {value!r}: their order is ambiguous"
            )
            raise InvalidArgumentError(msg)
    starts = np.flatnonzero(~same)
    last = np.ones(n, dtype=bool)
    last[:-1] = ~same[1:]
    written = (ops == INSERT) | (ops == UPDATE)
    superseded = written & ~last
    touched = (ops == UPDATE) | (ops == DELETE)
    eq_rows = starts[np.logical_or.reduceat(touched, starts)] if n else np.zeros(0, np.int64)
    for name in ctx.required:
        if name in rows.column_names and rows.column(name).null_count:
            nulls = pc.sum(pc.and_(pc.is_null(rows.column(name)), pa.array(written))).as_py() or 0
            if nulls:
                msg = f"column {name!r} is required but NULL in {nulls} inserted/updated rows"
                raise InvalidArgumentError(msg)
    return _Plan(rows, ops, written, superseded, eq_rows.astype(np.int64), counts)
