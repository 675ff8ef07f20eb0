"""Metadata-only changes (no snapshot): schema updates, identifier fields and partition specs.

Each is a compare-and-swap through :func:`icemor.commit.door.commit` (a refused one leaves no
metadata JSON), tried again on fresh metadata after a lost swap as ``commit.retry.*`` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.exceptions import ResolveError, ValidationError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
)

from icemor._compat.pyiceberg import schema_update_changes, spec_update_changes
from icemor.commit.door import Change, commit
from icemor.exceptions import CommitConflictError, InvalidArgumentError, first_line

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.table.update.schema import UpdateSchema
    from pyiceberg.table.update.spec import UpdateSpec

__all__ = [
    "add_unpartitioned_spec",
    "commit_metadata_change",
    "commit_schema_update",
    "set_identifier_fields",
    "spec_update_change",
    "unpartitioned_spec_id",
]

_Change = tuple[tuple["TableRequirement", ...], tuple["TableUpdate", ...]]


def commit_metadata_change(
    table: PyIcebergTable, what: str, change: Callable[[TableMetadata], _Change | None]
) -> TableMetadata:
    """Commit ``change(current metadata)`` through :func:`icemor.commit.door.commit`; after a lost
    swap, ask again on fresh metadata.

    ``change`` returns None when there is nothing (left) to do. Returns the metadata after.

    Raises:
        CommitFailedError: Every attempt lost its swap, or the catalog refused the change.
        CommitStateUnknownError: The catalog call may have committed.
    """

    def prepare(metadata: TableMetadata, attempt: int) -> Change | None:
        todo = change(metadata)
        return None if todo is None else Change(*todo)

    return commit(table, prepare, what=f"{what} of {'.'.join(table.name())}").metadata


def commit_schema_update(
    table: PyIcebergTable,
    build: Callable[[UpdateSchema], None],
    *,
    allow_incompatible_changes: bool = False,
    check: Callable[[TableMetadata], None] | None = None,
) -> TableMetadata:
    """Commit the schema change ``build`` stages on pyiceberg's ``UpdateSchema`` (Iceberg's rules).

    ``check`` (e.g. no NULL in a column made required) runs on each attempt's metadata before
    the change is computed, and then the commit requires the main branch to be still at the
    snapshot it checked: a concurrent write makes the attempt lose its swap, and the next
    attempt checks again. Returns the metadata after (unchanged when there was nothing to do).
    """

    def change(metadata: TableMetadata) -> _Change | None:
        if check is not None:
            check(metadata)
        update = table.update_schema(allow_incompatible_changes=allow_incompatible_changes)
        build(update)
        updates, requirements = schema_update_changes(update)
        if not updates:
            return None
        pinned: tuple[TableRequirement, ...] = ()
        if check is not None:
            current = metadata.current_snapshot()
            pinned = (
                AssertRefSnapshotId(  # type: ignore[call-arg]  # pydantic aliases
                    ref=MAIN_BRANCH, snapshot_id=current.snapshot_id if current is not None else None
                ),
            )
        return (*requirements, *pinned), updates

    return commit_metadata_change(table, "the schema change", change)


def spec_update_change(
    table: PyIcebergTable, what: str, stage: Callable[[UpdateSpec], object]
) -> _Change | None:
    """The partition-spec change pyiceberg's ``UpdateSpec`` computes on the table's metadata (the
    attempt's: :func:`commit_metadata_change` reloads the table first), for that function to
    commit: Iceberg's field ids and names, an equal spec reused.

    Raises:
        InvalidArgumentError: pyiceberg refuses the change (its first line, after ``what``).
    """
    update = table.update_spec()
    try:
        stage(update)
        updates, requirements = spec_update_changes(update)
    except (ValueError, ResolveError, ValidationError) as e:
        msg = f"{what}: {first_line(e)}"
        raise InvalidArgumentError(msg) from e
    return (requirements, updates) if updates else None


def set_identifier_fields(table: PyIcebergTable, names: Sequence[str]) -> None:
    """Make ``names`` the identifier fields of the current schema if it has none.

    Raises:
        CommitConflictError: A concurrent commit set other identifier fields.
    """

    def change(metadata: TableMetadata) -> _Change | None:
        if metadata.schema().identifier_field_ids:
            return None  # set (concurrently, or before): checked below
        # pyiceberg's schema update computes the new schema (and reuses an equal one)
        update = table.update_schema()
        update.set_identifier_fields(*names)
        updates, requirements = schema_update_changes(update)
        return requirements, updates

    metadata = commit_metadata_change(table, "setting the identifier fields", change)
    schema = metadata.schema()
    if set(schema.identifier_field_ids) != {schema.find_field(n).field_id for n in names}:
        msg = f"the identifier fields of {'.'.join(table.name())} changed concurrently"
        raise CommitConflictError(msg)


def unpartitioned_spec_id(metadata: TableMetadata) -> int | None:
    """The id of the table's unpartitioned spec, None when it has none."""
    for spec in metadata.partition_specs:
        if spec.is_unpartitioned():
            return spec.spec_id
    return None


def add_unpartitioned_spec(table: PyIcebergTable) -> int:
    """The id of the table's unpartitioned spec, adding one (not as default) if it has none."""

    def change(metadata: TableMetadata) -> _Change | None:
        if unpartitioned_spec_id(metadata) is not None:
            return None
        new_id = max(s.spec_id for s in metadata.partition_specs) + 1
        # A concurrent identical addition is not detected by these requirements (it assigns no
        # partition field id); it is a one-time change and the next attempt sees the spec.
        return (
            (
                AssertLastAssignedPartitionId(  # type: ignore[call-arg]  # pydantic aliases
                    last_assigned_partition_id=metadata.last_partition_id
                ),
            ),
            (AddPartitionSpecUpdate(spec=PartitionSpec(spec_id=new_id)),),
        )

    spec_id = unpartitioned_spec_id(commit_metadata_change(table, "adding an unpartitioned spec", change))
    if spec_id is None:
        msg = f"could not add an unpartitioned spec to {'.'.join(table.name())} for global equality deletes"
        raise CommitConflictError(msg)
    return spec_id
