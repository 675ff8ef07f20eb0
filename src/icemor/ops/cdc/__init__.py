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

The work is a pure function of the batch's rows (:func:`~icemor.ops.cdc.units.change_unit`): the
local engine runs it once; the Spark engine repartitions a DataFrame by key and runs it per
partition on the executors. Bad input is found in the units before anything is written; the
driver then commits once. With ``app_id``/``batch_id`` the commit records them in the snapshot
summary and a batch already committed by that app is skipped (exactly-once for Structured
Streaming's ``foreachBatch``, like Delta's ``txnAppId``/``txnVersion`` and Flink's checkpoint id).

**Position mode** (:func:`~icemor.ops.cdc.prepare.delete_mode`: the default on v3 and
``icemor.v4-ready`` tables) writes no equality delete: each unit also finds the live rows of the
keys it updates or deletes in the snapshot the batch starts from (:mod:`icemor.ops.key_lookup`,
through each data file's key index), writes only each key's last row, and the driver hands the
positions to DELETE's per-file units (a DV per data file on v3, file-scoped position deletes on
v2). The commit also refuses when a concurrent commit added a row with one of those keys
(:class:`icemor.ops.key_lookup.KeyConflicts`).

The package, by concern: ``options`` (:class:`ChangeOptions`, the batch's options, checked once),
``types`` (the properties, the context, a unit's result, the metrics), ``prepare`` (the checks
against the table, the context), ``units`` (one unit's work), ``commit`` (the commit paths,
batch idempotence), ``cleanup`` (the one removal path of written files), ``local`` and
``spark`` (the entries: an Arrow batch, a Spark DataFrame and the ``foreachBatch`` sink).
"""

from __future__ import annotations

from icemor.ops.cdc.commit import last_committed_batch
from icemor.ops.cdc.local import apply_changes
from icemor.ops.cdc.options import ChangeOptions
from icemor.ops.cdc.prepare import delete_mode, prepare_changes
from icemor.ops.cdc.spark import ChangeSink, apply_changes_dataframe
from icemor.ops.cdc.types import (
    APP_ID_PROPERTY,
    BATCH_ID_PROPERTY,
    DELETE_MODE_PROPERTY,
    V4_READY_PROPERTY,
    ChangeContext,
    ChangeMetrics,
    ChangeUnitResult,
)
from icemor.ops.cdc.units import change_unit

__all__ = [
    "APP_ID_PROPERTY",
    "BATCH_ID_PROPERTY",
    "DELETE_MODE_PROPERTY",
    "V4_READY_PROPERTY",
    "ChangeContext",
    "ChangeMetrics",
    "ChangeOptions",
    "ChangeSink",
    "ChangeUnitResult",
    "apply_changes",
    "apply_changes_dataframe",
    "change_unit",
    "delete_mode",
    "last_committed_batch",
    "prepare_changes",
]
