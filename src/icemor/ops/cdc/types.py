"""What a CDC batch is made of and reports: the table properties it reads and writes, the op
spellings, the context every unit writes by, a unit's result and the batch's metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema

    from icemor.ops.key_lookup import KeyLookup
    from icemor.spec.files import WrittenFile

__all__ = [
    "APP_ID_PROPERTY",
    "BATCH_ID_PROPERTY",
    "DELETE",
    "DELETE_MODE_PROPERTY",
    "EQUALITY",
    "INSERT",
    "OPS",
    "OP_HELP",
    "POSITION",
    "UNSET_SPEC",
    "UPDATE",
    "UPDATE_BEFORE",
    "V4_READY_PROPERTY",
    "ChangeContext",
    "ChangeMetrics",
    "ChangeUnitResult",
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
OPS = {
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
"""Each op spelling (lower case, blanks trimmed) and what it does."""
OP_HELP = "use I/insert, U/update_after, -U/update_before or D/delete"
UNSET_SPEC = -1
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
    feed_order: bool
    """``order_column`` is a change feed's ``_change_ordinal``: a key's DELETE comes first in a tie."""
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
