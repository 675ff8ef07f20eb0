"""Append data files as one snapshot: pyiceberg's fast or merging append producer, or ``add_files``.

The snapshot producer writes its manifests through a ``RecordingIO``, so a failed append can
remove them with its data files. pyiceberg's transaction retries a lost compare-and-swap
itself, as ``commit.retry.*`` says (the properties :func:`icemor.commit.retries.attempts`
follows): it rebuilds the snapshot on the new head and removes the lost attempts' manifests.
An append conflicts with nothing, so there is nothing to validate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.commit.swap import Outcome, failed_outcome, tracked_swaps

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.io.data_writer import RecordingIO

__all__ = ["commit_add_files", "commit_append"]


def commit_append(table: PyIcebergTable, io: RecordingIO, data_files: list[DataFile]) -> None:
    """Commit ``data_files`` with pyiceberg's append, its manifests written through ``io``.

    Call it inside :func:`icemor.commit.swap.tracked_swaps` of the table's catalog: that tells
    the caller whether a failure may have committed, and so whether ``io.discard()`` is safe.

    Raises:
        CommitFailedException: Every attempt lost its swap (pyiceberg's; nothing committed).
    """
    from pyiceberg.table import Table, TableProperties
    from pyiceberg.utils.properties import property_as_bool

    metadata = table.metadata
    merge = property_as_bool(
        metadata.properties,
        TableProperties.MANIFEST_MERGE_ENABLED,
        TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
    )
    # the same table, but its snapshot producer writes through ``io`` (which records the paths)
    recorded = Table(table.name(), metadata, table.metadata_location, io, table.catalog, table.config)
    with recorded.transaction() as tx:
        update = tx.update_snapshot()
        with update.merge_append() if merge else update.fast_append() as producer:
            for f in data_files:
                producer.append_data_file(f)


def commit_add_files(table: PyIcebergTable, paths: list[str]) -> None:
    """Add existing Parquet files as data files in one snapshot (pyiceberg's ``add_files``).

    Whatever fails, the manifests written for it are removed unless the catalog may have
    committed (the added files are the caller's: they stay).

    Raises:
        CommitFailedException: Every attempt lost its swap (pyiceberg's; nothing committed).
        ValueError: pyiceberg refused the files (schema, duplicates): nothing committed.
    """
    from pyiceberg.table import Table

    from icemor.io.data_writer import RecordingIO

    # the manifests pyiceberg writes go through ``io``, which records them
    io = RecordingIO(table.io)
    metadata = table.metadata
    recorded = Table(table.name(), metadata, table.metadata_location, io, table.catalog, table.config)
    with tracked_swaps(table.catalog) as calls:
        try:
            recorded.add_files(paths)
        except BaseException as e:
            if failed_outcome(calls, e) != Outcome.UNKNOWN:
                io.discard()
            raise
    table.refresh()  # as pyiceberg's own ``add_files`` leaves it: at the new snapshot
