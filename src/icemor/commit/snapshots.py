"""Remove snapshots and refs from table metadata (snapshot expiry), compare-and-swap with retries.

The metadata changes are pyiceberg's table updates (``RemoveSnapshotRefUpdate``,
``RemoveSnapshotsUpdate``, which also drops the statistics of removed snapshots, and
``RemovePartitionStatisticsUpdate``); icemor decides which, and guards the swap: every ref must
still point where it pointed when the removal was chosen, so a commit, branch or tag move made
meanwhile makes the attempt start again from the new metadata (``commit.retry.*``). The commit
goes through :func:`icemor.commit.door.commit`.

A ref created meanwhile cannot be asserted absent in advance; if it names a snapshot being
removed, the catalog's update drops it with the snapshot. The window is the catalog call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    update_table_metadata,
)

from icemor.commit.door import Change, commit

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableRequirement, TableUpdate

__all__ = ["SnapshotRemoval", "commit_removal", "preview_removal"]


@dataclass(frozen=True)
class SnapshotRemoval:
    """Snapshots and refs to remove (``main`` is never among the refs)."""

    snapshot_ids: frozenset[int] = frozenset()
    refs: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.snapshot_ids or self.refs)


def _updates(metadata: TableMetadata, removal: SnapshotRemoval) -> tuple[TableUpdate, ...]:
    updates: list[TableUpdate] = [
        RemoveSnapshotRefUpdate(ref_name=name)  # type: ignore[call-arg]  # pydantic aliases
        for name in sorted(removal.refs)
    ]
    if removal.snapshot_ids:
        updates.append(RemoveSnapshotsUpdate(snapshot_ids=sorted(removal.snapshot_ids)))  # type: ignore[call-arg]
        # pyiceberg's snapshot removal drops table statistics, not partition statistics
        updates.extend(
            RemovePartitionStatisticsUpdate(snapshot_id=s.snapshot_id)  # type: ignore[call-arg]
            for s in metadata.partition_statistics
            if s.snapshot_id in removal.snapshot_ids
        )
    return tuple(updates)


def preview_removal(metadata: TableMetadata, removal: SnapshotRemoval) -> TableMetadata:
    """The metadata ``removal`` would leave, without committing anything (a dry run)."""
    return update_table_metadata(metadata, _updates(metadata, removal))


def commit_removal(
    table: PyIcebergTable, choose: Callable[[TableMetadata], SnapshotRemoval]
) -> tuple[TableMetadata, TableMetadata, SnapshotRemoval]:
    """Commit ``choose(current metadata)`` through :func:`icemor.commit.door.commit`, choosing
    again on fresh metadata after a lost swap.

    Returns:
        The metadata before and after the commit, and what was removed (nothing committed when
        the removal is empty: then before and after are the same).

    Raises:
        CommitFailedError: Every attempt lost its swap, or the catalog refused the removal.
        CommitStateUnknownError: The catalog call failed in a way that leaves unknown whether
            it committed (no file has been deleted yet).
        WriteFailedError: The new metadata file could not be written (nothing committed).
    """
    chosen: list[SnapshotRemoval] = []

    def prepare(metadata: TableMetadata, attempt: int) -> Change | None:
        removal = choose(metadata)
        chosen.append(removal)
        if not removal:
            return None
        # every ref must still point where it pointed when the removal was chosen
        requirements: tuple[TableRequirement, ...] = tuple(
            AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id)  # type: ignore[call-arg]
            for name, ref in sorted(metadata.refs.items())
        )
        return Change(requirements, _updates(metadata, removal))

    done = commit(table, prepare, what=f"expiring snapshots of {'.'.join(table.name())}")
    return done.base, done.metadata, chosen[-1]
