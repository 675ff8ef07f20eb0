"""pyiceberg's table changes computed without committing them, and its snapshot summaries.

icemor commits every change through :mod:`icemor.commit.door` (its retries, cleanup and
snapshot ids); pyiceberg computes some changes only inside builders whose public exit commits.
Borrowed: ``UpdateSchema._commit``, ``UpdateSpec._commit``, ``_SnapshotProducer._commit`` (and
its ``_snapshot_id``), ``CreateTableTransaction._table`` / ``._updates``,
``SnapshotSummaryCollector`` and ``update_snapshot_summaries``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.table.snapshots import SnapshotSummaryCollector, Summary, update_snapshot_summaries

from icemor._compat.pyiceberg.records import content_size

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from pyiceberg.manifest import DataFile
    from pyiceberg.table import CreateTableTransaction, StagedTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.table.update.schema import UpdateSchema
    from pyiceberg.table.update.snapshot import _SnapshotProducer
    from pyiceberg.table.update.spec import UpdateSpec

__all__ = [
    "schema_update_changes",
    "snapshot_producer_changes",
    "snapshot_summary",
    "spec_update_changes",
    "staged_create_changes",
]

# (module, name) of every internal used below; tests/_compat/test_pyiceberg.py imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.table.update.schema", "UpdateSchema._commit"),
    ("pyiceberg.table.update.spec", "UpdateSpec._commit"),
    ("pyiceberg.table.update.snapshot", "_SnapshotProducer._commit"),
    ("pyiceberg.table.snapshots", "SnapshotSummaryCollector"),
    ("pyiceberg.table.snapshots", "update_snapshot_summaries"),
)


def snapshot_summary(
    metadata: TableMetadata,
    *,
    operation: Operation,
    counted_as: Operation,
    added: Iterable[DataFile],
    removed: Iterable[DataFile],
    properties: Mapping[str, str],
    partition_summary_limit: int,
    previous: Mapping[str, str] | None,
) -> Summary:
    """The summary of a snapshot adding and removing these files, totals carried from ``previous``.

    The totals are computed as for ``counted_as`` (pyiceberg's know append, overwrite and
    delete only); the summary names ``operation``.

    Why: pyiceberg's summary collector and totals are what its own snapshot producers use, so
    icemor's summaries read as pyiceberg's (and Java's) do; neither is public API.
    """
    specs, schema = metadata.specs(), metadata.schema()
    collector = SnapshotSummaryCollector(partition_summary_limit=partition_summary_limit)
    added, removed = list(added), list(removed)
    for f in added:
        collector.add_file(f, schema, specs[f.spec_id])
    for f in removed:
        collector.remove_file(f, schema, specs[f.spec_id])
    built = collector.build()
    _count_deletion_vectors(built, "added", added)
    _count_deletion_vectors(built, "removed", removed)
    summary = Summary(operation=counted_as, **built, **properties)
    totals = update_snapshot_summaries(summary, previous)
    return Summary(operation=operation, **totals.additional_properties)


def _count_deletion_vectors(summary: dict[str, str], side: str, files: list[DataFile]) -> None:
    """Count deletion vectors as Iceberg Java's ``SnapshotSummary`` does (pyiceberg 0.12 knows none).

    A DV is ``{side}-dvs`` and a delete file, not a position delete file, and its size is its
    blob's ``content_size_in_bytes``, not its Puffin file's (several DVs share one file).
    """
    dvs = [
        f
        for f in files
        if f.content == DataFileContent.POSITION_DELETES and f.file_format == FileFormat.PUFFIN
    ]
    if not dvs:
        return
    summary[f"{side}-dvs"] = str(len(dvs))
    key = f"{side}-position-delete-files"
    left = int(summary.get(key, "0")) - len(dvs)
    if left > 0:
        summary[key] = str(left)
    else:
        summary.pop(key, None)
    size_key = f"{side}-files-size"
    excess = sum(f.file_size_in_bytes - (content_size(f) or f.file_size_in_bytes) for f in dvs)
    if size_key in summary:
        summary[size_key] = str(int(summary[size_key]) - excess)


def schema_update_changes(
    update: UpdateSchema,
) -> tuple[tuple[TableUpdate, ...], tuple[TableRequirement, ...]]:
    """The updates and requirements of a staged schema change, not committed.

    Why: pyiceberg computes a schema change (reusing an equal schema, the identifier-field
    rules) only in ``UpdateSchema``, whose public exit commits through its transaction; icemor
    commits through :mod:`icemor.commit` with its own retries and cleanup.
    """
    return update._commit()


def spec_update_changes(
    update: UpdateSpec,
) -> tuple[tuple[TableUpdate, ...], tuple[TableRequirement, ...]]:
    """The updates and requirements of a staged partition spec change, not committed.

    Why: pyiceberg computes a spec change (Iceberg's field ids and names, reusing an equal spec)
    only in ``UpdateSpec``, whose public exit commits through its transaction, as for
    :func:`schema_update_changes`.
    """
    return update._commit()


def snapshot_producer_changes(
    producer: _SnapshotProducer[Any], snapshot_id: int
) -> tuple[tuple[TableUpdate, ...], tuple[TableRequirement, ...]]:
    """The updates and requirements of a pyiceberg snapshot producer (fast or merging append) as
    snapshot ``snapshot_id``, its manifests and manifest list written, not committed.

    Why: pyiceberg's producer draws a new snapshot id when it is built and commits through its
    transaction on exit; icemor commits through :mod:`icemor.commit.door`, and keeps one
    snapshot id across the attempts of a commit (an attempt that landed although it raised is
    then found by that id). The id is read by the producer only when it writes (``_commit``).
    """
    producer._snapshot_id = snapshot_id
    return producer._commit()


def staged_create_changes(transaction: CreateTableTransaction) -> tuple[StagedTable, tuple[TableUpdate, ...]]:
    """The staged table of a create transaction and the updates that create it (``AssignUUID``,
    schema, spec, sort order, location, properties), not committed.

    Why: pyiceberg commits a staged create only through the transaction; icemor sends its updates
    (with ``AssertCreate``) through :mod:`icemor.commit.door` like every other commit.
    """
    return transaction._table, transaction._updates  # type: ignore[return-value]
