"""Append data files as one snapshot, and register existing files (``add-files``).

On v1/v2 tables pyiceberg's fast or merging append producer computes the snapshot (manifests,
manifest list, summary) on each attempt's metadata, with the one snapshot id of the commit, and
:func:`icemor.commit.door.commit` commits it; its manifests go through a ``RecordingIO`` so that
a lost attempt's are removed. v3 tables append through :class:`RowDelta` (pyiceberg 0.12 writes
v2 manifests only). An append conflicts with nothing, so there is nothing to validate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import SetPropertiesUpdate
from pyiceberg.utils.properties import property_as_bool

from icemor._compat.pyiceberg import snapshot_producer_changes
from icemor.commit.data_file_struct import from_data_file
from icemor.commit.door import Change, commit
from icemor.commit.row_delta import RowDelta
from icemor.commit.schema import commit_metadata_change
from icemor.commit.v3 import is_v3
from icemor.commit.validation import Validation
from icemor.io.data_writer import RecordingIO

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["commit_add_files", "commit_append"]


def commit_append(table: PyIcebergTable, io: FileIO, data_files: list[DataFile], *, what: str) -> None:
    """Commit ``data_files`` as one append snapshot, its manifests written through ``io``.

    ``what`` names the change in messages (``"the append to db.t"``). The data files are the
    caller's: it removes them unless the error raised :func:`icemor.commit.door.may_have_committed`.

    Raises:
        CommitFailedError: Every attempt lost its swap, or the catalog refused it (nothing committed).
        CommitStateUnknownError: The catalog call may have committed.
    """
    if is_v3(table.metadata):
        _commit_append_v3(table, data_files)
        return
    snapshot_id = table.metadata.new_snapshot_id()

    def prepare(metadata: TableMetadata, attempt: int) -> Change:
        return _append_change(table, metadata, io, data_files, snapshot_id)

    commit(table, prepare, what=what, snapshot_id=snapshot_id)


def _append_change(
    table: PyIcebergTable,
    metadata: TableMetadata,
    io: FileIO,
    data_files: list[DataFile],
    snapshot_id: int,
    extra: tuple[Any, ...] = (),
) -> Change:
    """pyiceberg's append producer on ``metadata``: its manifests and manifest list written (through
    ``io``, recorded), its snapshot as ``snapshot_id``; ``extra`` updates go first."""
    merge = property_as_bool(
        metadata.properties,
        TableProperties.MANIFEST_MERGE_ENABLED,
        TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
    )
    recording = RecordingIO(io)
    # the table at this attempt's metadata, its snapshot producer writing through ``recording``
    at = Table(table.name(), metadata, table.metadata_location, recording, table.catalog, table.config)
    update = at.transaction().update_snapshot()
    producer = update.merge_append() if merge else update.fast_append()
    try:
        for f in data_files:
            producer.append_data_file(f)
        updates, requirements = snapshot_producer_changes(producer, snapshot_id)
    except BaseException:
        recording.discard()
        raise
    return Change(requirements, (*extra, *updates), list(recording.paths))


def _commit_append_v3(table: PyIcebergTable, data_files: list[DataFile], *, owned: bool = True) -> None:
    """Append on a v3 table through :class:`RowDelta` (pyiceberg 0.12's producers write v2 only).

    An append conflicts with nothing: no file is referenced or removed, and a non-serializable
    validation does not look for concurrent appends.
    """
    current = table.metadata.current_snapshot()
    spec_id = table.metadata.default_spec_id  # pyiceberg's writer writes for the default spec
    RowDelta(
        table,
        Validation(current.snapshot_id if current is not None else None, serializable=False),
        added_files=[from_data_file(f, spec_id) for f in data_files],
        operation=Operation.APPEND,
        owns_added_files=owned,
    ).commit()


def _check_not_in_table(table: PyIcebergTable, paths: list[str]) -> None:
    """pyiceberg's ``add_files`` checks: each path once, none already a live data file."""
    if len(paths) != len(set(paths)):
        msg = "File paths must be unique"
        raise ValueError(msg)
    io, current = table.io, table.metadata.current_snapshot()
    if current is None:
        return
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


def _name_mapping(metadata: TableMetadata) -> SetPropertiesUpdate | None:
    """The table's name mapping as an update, when it has none: imported files may lack field ids
    (pyiceberg's ``add_files`` sets the mapping the same way)."""
    if metadata.name_mapping() is not None:
        return None
    mapping = metadata.schema().name_mapping.model_dump_json()
    return SetPropertiesUpdate(updates={TableProperties.DEFAULT_NAME_MAPPING: mapping})


def commit_add_files(table: PyIcebergTable, paths: list[str]) -> None:
    """Add existing Parquet files as data files in one snapshot (pyiceberg's ``add_files``).

    Whatever fails, the manifests written for it are removed unless the catalog may have
    committed (the added files are the caller's: they stay, always).

    Raises:
        CommitFailedError: Every attempt lost its swap, or the catalog refused it (nothing committed).
        CommitStateUnknownError: The catalog call may have committed.
        ValueError: pyiceberg refused the files (schema, duplicates): nothing committed.
    """
    _check_not_in_table(table, paths)
    name = ".".join(table.name())
    if is_v3(table.metadata):
        # two commits: the name mapping first (RowDelta adds a snapshot only)
        def mapping(metadata: TableMetadata) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
            update = _name_mapping(metadata)
            return None if update is None else ((), (update,))

        metadata = commit_metadata_change(table, "setting the name mapping", mapping)
        files = [parquet_file_to_data_file(table.io, metadata, p) for p in paths]
        _commit_append_v3(table, files, owned=False)
        return
    snapshot_id = table.metadata.new_snapshot_id()

    def prepare(metadata: TableMetadata, attempt: int) -> Change:
        files = [parquet_file_to_data_file(table.io, metadata, p) for p in paths]
        update = _name_mapping(metadata)
        extra = () if update is None else (update,)
        return _append_change(table, metadata, table.io, files, snapshot_id, extra)

    commit(table, prepare, what=f"adding files to {name}", snapshot_id=snapshot_id)
