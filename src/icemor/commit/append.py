"""Append data files as one snapshot: pyiceberg's fast or merging append producer, or ``add_files``.

The snapshot producer writes its manifests through a ``RecordingIO``, so a failed append can
remove them with its data files. pyiceberg's transaction retries a lost compare-and-swap
itself, as ``commit.retry.*`` says (the properties :func:`icemor.commit.retries.attempts`
follows): it rebuilds the snapshot on the new head and removes the lost attempts' manifests.
An append conflicts with nothing, so there is nothing to validate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icemor.commit.swap import Outcome, failed_outcome, tracked_swaps
from icemor.commit.v3 import is_v3

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata

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
    if is_v3(metadata):
        _commit_append_v3(table, data_files)
        return
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


def _commit_append_v3(table: PyIcebergTable, data_files: list[DataFile]) -> None:
    """Append on a v3 table through :class:`RowDelta` (pyiceberg 0.12's producers write v2 only).

    An append conflicts with nothing: no file is referenced or removed, and a non-serializable
    validation does not look for concurrent appends.
    """
    from pyiceberg.table.snapshots import Operation

    from icemor.commit.data_file_struct import from_data_file
    from icemor.commit.row_delta import RowDelta
    from icemor.commit.validation import Validation

    current = table.metadata.current_snapshot()
    spec_id = table.metadata.default_spec_id  # pyiceberg's writer writes for the default spec
    RowDelta(
        table,
        Validation(current.snapshot_id if current is not None else None, serializable=False),
        added_files=[from_data_file(f, spec_id) for f in data_files],
        operation=Operation.APPEND,
    ).commit()


def _commit_add_files_v3(table: PyIcebergTable, paths: list[str]) -> None:
    """``add_files`` on a v3 table: pyiceberg's checks and name mapping, committed by :class:`RowDelta`
    (pyiceberg 0.12 writes v2 manifests only). The files are the caller's: a failed commit keeps them.
    """
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.manifest import ManifestContent
    from pyiceberg.table import TableProperties
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate

    from icemor.commit.data_file_struct import from_data_file
    from icemor.commit.row_delta import RowDelta
    from icemor.commit.schema import commit_metadata_change
    from icemor.commit.validation import Validation

    if len(paths) != len(set(paths)):
        msg = "File paths must be unique"
        raise ValueError(msg)
    io, current = table.io, table.metadata.current_snapshot()
    if current is not None:
        wanted = set(paths)
        known = [
            e.data_file.file_path
            for m in current.manifests(io)
            if m.content == ManifestContent.DATA
            for e in m.fetch_manifest_entry(io, discard_deleted=True)
            if e.data_file.file_path in wanted
        ]
        if known:
            msg = f"Cannot add files that are already referenced by table, files: {', '.join(known)}"
            raise ValueError(msg)

    def name_mapping(metadata: TableMetadata) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        # imported files may lack field ids: pyiceberg's add_files sets the mapping the same way
        if metadata.name_mapping() is not None:
            return None
        mapping = metadata.schema().name_mapping.model_dump_json()
        return (
            (AssertTableUUID(uuid=metadata.table_uuid),),
            (SetPropertiesUpdate(updates={TableProperties.DEFAULT_NAME_MAPPING: mapping}),),
        )

    metadata = commit_metadata_change(table, "setting the name mapping", name_mapping)
    files = [parquet_file_to_data_file(io, metadata, p) for p in paths]
    RowDelta(
        table,
        Validation(current.snapshot_id if current is not None else None, serializable=False),
        added_files=[from_data_file(f, metadata.default_spec_id) for f in files],
        operation=Operation.APPEND,
        owns_added_files=False,
    ).commit()
    table.refresh()


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

    if is_v3(table.metadata):
        _commit_add_files_v3(table, paths)
        return
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
