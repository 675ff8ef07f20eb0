"""Table metadata changes as Iceberg Java makes them for Spark SQL's DDL and its snapshot procedures.

- properties: ``ALTER TABLE ... SET / UNSET TBLPROPERTIES`` (:func:`set_properties`,
  :func:`unset_properties`; ``format-version`` upgrades the table, ``current-snapshot-id`` sets
  the current snapshot, as ``SparkCatalog.alterTable`` does);
- refs: ``ALTER TABLE ... CREATE / REPLACE / DROP BRANCH | TAG`` (:func:`create_branch`,
  :func:`create_tag`, :func:`drop_branch`, :func:`drop_tag`);
- partition evolution: ``ALTER TABLE ... ADD / DROP PARTITION FIELD``;
- columns: ``ALTER TABLE ... DROP COLUMN`` and ``ALTER COLUMN ... TYPE``
  (:class:`icemor.ops.alter.SchemaChange`);
- snapshot management: the procedures ``rollback_to_snapshot``, ``rollback_to_timestamp``,
  ``set_current_snapshot`` and ``fast_forward``, each returning what Java's returns.

Each change is one metadata commit (no snapshot) through
:func:`icemor.commit.schema.commit_metadata_change`, computed again on fresh metadata after a
lost swap. A ref change requires every ref it moves, or reads (``fast_forward``'s target), to
be still where it was when the change was computed (``AssertRefSnapshotId``), so a concurrent
commit or ref move makes the attempt start again and check again. Every refusal is Iceberg
Java's, as a one-line error raised before anything is committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import ancestors_of
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemovePropertiesUpdate,
    RemoveSnapshotRefUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)

from icemor.commit.schema import commit_metadata_change, spec_update_change
from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError, UnsupportedFeatureError
from icemor.ops.alter import SchemaChange
from icemor.ops.upgrade import upgrade_table
from icemor.spec.describe import iso_time
from icemor.spec.partitioning import parse_partition_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from pyiceberg.partitioning import PartitionField
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.types import IcebergType

__all__ = [
    "FastForward",
    "SnapshotChange",
    "add_partition_field",
    "create_branch",
    "create_tag",
    "drop_branch",
    "drop_column",
    "drop_partition_field",
    "drop_tag",
    "fast_forward",
    "rollback_to_snapshot",
    "rollback_to_timestamp",
    "set_current_snapshot",
    "set_properties",
    "unset_properties",
    "widen_column",
]

_Change = tuple[tuple["TableRequirement", ...], tuple["TableUpdate", ...]]

FORMAT_VERSION = "format-version"
CURRENT_SNAPSHOT_ID = "current-snapshot-id"
# Iceberg Java's TableProperties.RESERVED_PROPERTIES: derived from the metadata, never stored
# (TableMetadata.replaceProperties drops them from a property change)
_RESERVED = frozenset(
    {
        FORMAT_VERSION,
        "uuid",
        "snapshot-count",
        CURRENT_SNAPSHOT_ID,
        "current-snapshot-summary",
        "current-snapshot-timestamp-ms",
        "current-schema",
        "default-partition-spec",
        "default-sort-order",
    }
)
# properties SparkCatalog.alterTable refuses (each has its own statement), by lower-case name
_OWN_STATEMENT = {
    "sort-order": "ALTER TABLE ... WRITE ORDERED BY",
    "identifier-fields": "ALTER TABLE ... SET IDENTIFIER FIELDS",
    "location": "ALTER TABLE ... SET LOCATION",
}
_METRICS_COLUMN = "write.metadata.metrics.column."
# the column-scoped properties Iceberg Java's schema update drops with their column
_COLUMN_PREFIXES = (
    _METRICS_COLUMN,
    "write.parquet.bloom-filter-enabled.column.",
    "write.parquet.stats-enabled.column.",
)


@dataclass(frozen=True)
class SnapshotChange:
    """What the rollback and set-current-snapshot procedures return (Iceberg Java's row)."""

    previous_snapshot_id: int | None
    """The current snapshot before (None for a table that had none: only ``set_current_snapshot``)."""
    current_snapshot_id: int
    """The current snapshot after."""


@dataclass(frozen=True)
class FastForward:
    """What the ``fast_forward`` procedure returns (Iceberg Java's row)."""

    branch_updated: str
    previous_ref: int | None
    """The branch's snapshot before; None when the branch did not exist (it was created)."""
    updated_ref: int
    """The branch's snapshot after."""


def _name(table: PyIcebergTable) -> str:
    return ".".join(table.name())


# --------------------------------------------------------------------------------------- properties


def set_properties(table: PyIcebergTable, updates: Mapping[str, str]) -> None:
    """Set table properties (``ALTER TABLE t SET TBLPROPERTIES ('k'='v', ...)``).

    As Iceberg Java: ``format-version`` upgrades the table (:func:`icemor.ops.upgrade.upgrade_table`:
    a downgrade is refused), ``current-snapshot-id`` makes that snapshot current (as
    :func:`set_current_snapshot`), Iceberg's other reserved properties (``uuid``,
    ``snapshot-count``, ...) are not stored, and a ``write.metadata.metrics.column.<col>`` must
    name a column. Everything is checked before the first commit.

    Raises:
        InvalidArgumentError: A property with a statement of its own (``sort-order``,
            ``identifier-fields``, ``location``), a format version that is not a number or a
            downgrade, a metrics property naming no column.
        UnsupportedFeatureError: ``cherry-pick-snapshot-id`` (cherry-picking is not supported).
        NoSuchSnapshotError: ``current-snapshot-id`` names no snapshot.
    """
    name = _name(table)
    changes = dict(updates)
    snapshot_id: int | None = None
    for key in list(changes):
        lower = key.lower()
        if lower in _OWN_STATEMENT:
            msg = (
                f"cannot set {key!r} on {name}: it is a reserved table property, use {_OWN_STATEMENT[lower]}"
            )
            raise InvalidArgumentError(msg)
        if lower == "cherry-pick-snapshot-id":
            msg = f"cannot set {key!r} on {name}: cherry-picking a snapshot is not supported"
            raise UnsupportedFeatureError(msg)
        if lower == CURRENT_SNAPSHOT_ID:
            snapshot_id = _int_value(name, key, changes.pop(key))
            _snapshot(table.metadata, snapshot_id, name)
    version = changes.pop(FORMAT_VERSION, None)
    stored = {k: v for k, v in changes.items() if k not in _RESERVED}
    _check_column_properties(table.metadata.schema(), stored, name)
    if version is not None:
        upgrade_table(table, format_version=_int_value(name, FORMAT_VERSION, version))
    if snapshot_id is not None:
        set_current_snapshot(table, snapshot_id=snapshot_id)

    def change(metadata: TableMetadata) -> _Change | None:
        todo = {k: v for k, v in stored.items() if metadata.properties.get(k) != v}
        if not todo:
            return None
        _check_column_properties(metadata.schema(), todo, name)
        return (), (SetPropertiesUpdate(updates=todo),)

    commit_metadata_change(table, "setting table properties", change)


def unset_properties(table: PyIcebergTable, names: Iterable[str], *, if_exists: bool = False) -> None:
    """Remove table properties (``ALTER TABLE t UNSET TBLPROPERTIES [IF EXISTS] ('k', ...)``).

    A property the table does not have is skipped with or without ``if_exists``: Iceberg Java
    1.10.2 on Spark 3.5 refuses neither (``if_exists`` is taken for the statement's sake).
    Reserved properties (``format-version``, ...) are not stored, so removing one does nothing.
    """
    del if_exists  # the same either way: see above
    wanted = list(dict.fromkeys(names))

    def change(metadata: TableMetadata) -> _Change | None:
        present = [k for k in wanted if k in metadata.properties]
        if not present:
            return None
        return (), (RemovePropertiesUpdate(removals=present),)

    commit_metadata_change(table, "removing table properties", change)


def _int_value(table_name: str, key: str, value: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        msg = f"{key} of {table_name} must be an integer, got {value!r}"
        raise InvalidArgumentError(msg) from None


def _check_column_properties(schema: Schema, properties: Mapping[str, str], table_name: str) -> None:
    """Each metrics property names a column (Java's ``MetricsConfig.validateReferencedColumns``)."""
    for key in properties:
        column = key.removeprefix(_METRICS_COLUMN)
        if column != key and not _has_column(schema, column):
            msg = f"invalid metrics config of {table_name}: {key} names no column of the schema"
            raise InvalidArgumentError(msg)


def _has_column(schema: Schema, name: str) -> bool:
    try:
        schema.find_field(name)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------- refs


def create_branch(
    table: PyIcebergTable,
    name: str,
    *,
    snapshot_id: int | None = None,
    create: bool = True,
    replace: bool = False,
    if_not_exists: bool = False,
    min_snapshots_to_keep: int | None = None,
    max_snapshot_age_ms: int | None = None,
    max_ref_age_ms: int | None = None,
) -> None:
    """Create or replace a branch at ``snapshot_id`` (the current snapshot by default).

    ``CREATE BRANCH b``: the defaults (``IF NOT EXISTS``: ``if_not_exists=True``); ``REPLACE
    BRANCH b``: ``replace=True, create=False`` (the branch must exist); ``CREATE OR REPLACE
    BRANCH b``: ``replace=True``. ``AS OF VERSION n`` is ``snapshot_id``, ``RETAIN n DAYS``
    ``max_ref_age_ms`` and ``WITH SNAPSHOT RETENTION n SNAPSHOTS m DAYS`` ``min_snapshots_to_keep``
    and ``max_snapshot_age_ms``. A replaced branch keeps its retention unless given here.

    Raises:
        InvalidArgumentError: The ref exists (create), is a tag, or an option is invalid.
        NoSuchSnapshotError: The snapshot does not exist, or the branch does not (replace).
        UnsupportedFeatureError: The table has no snapshot (Iceberg Java commits an empty one
            for a new branch then; icemor does not).
    """
    retention = {
        "min_snapshots_to_keep": min_snapshots_to_keep,
        "max_snapshot_age_ms": max_snapshot_age_ms,
        "max_ref_age_ms": max_ref_age_ms,
    }
    _create_ref(
        table,
        name,
        SnapshotRefType.BRANCH,
        _Options(snapshot_id, create=create, replace=replace, if_not_exists=if_not_exists),
        retention,
    )


def create_tag(
    table: PyIcebergTable,
    name: str,
    *,
    snapshot_id: int | None = None,
    create: bool = True,
    replace: bool = False,
    if_not_exists: bool = False,
    max_ref_age_ms: int | None = None,
) -> None:
    """Create or replace a tag at ``snapshot_id`` (the current snapshot by default).

    The statements map as for :func:`create_branch`; ``RETAIN n DAYS`` is ``max_ref_age_ms``.

    Raises:
        InvalidArgumentError: The ref exists (create), is a branch, the table has no snapshot
            and none is given, or an option is invalid.
        NoSuchSnapshotError: The snapshot does not exist, or the tag does not (replace).
    """
    _create_ref(
        table,
        name,
        SnapshotRefType.TAG,
        _Options(snapshot_id, create=create, replace=replace, if_not_exists=if_not_exists),
        {"max_ref_age_ms": max_ref_age_ms},
    )


def drop_branch(table: PyIcebergTable, name: str, *, if_exists: bool = False) -> None:
    """Remove a branch (``ALTER TABLE t DROP BRANCH [IF EXISTS] b``); ``main`` cannot be removed.

    Raises:
        InvalidArgumentError: ``main``, or the ref is a tag.
        NoSuchSnapshotError: No such ref (without ``if_exists``).
    """
    _drop_ref(table, name, SnapshotRefType.BRANCH, if_exists=if_exists)


def drop_tag(table: PyIcebergTable, name: str, *, if_exists: bool = False) -> None:
    """Remove a tag (``ALTER TABLE t DROP TAG [IF EXISTS] t``).

    Raises:
        InvalidArgumentError: The ref is a branch.
        NoSuchSnapshotError: No such ref (without ``if_exists``).
    """
    _drop_ref(table, name, SnapshotRefType.TAG, if_exists=if_exists)


@dataclass(frozen=True)
class _Options:
    """The statement: ``CREATE`` (``create``), ``REPLACE`` or both, ``IF NOT EXISTS``."""

    snapshot_id: int | None
    create: bool
    replace: bool
    if_not_exists: bool


def _create_ref(
    table: PyIcebergTable,
    name: str,
    kind: SnapshotRefType,
    options: _Options,
    retention: Mapping[str, int | None],
) -> None:
    """Iceberg Java's ``CreateOrReplaceBranchExec`` / ``CreateOrReplaceTagExec``; ``retention``: the
    ``SnapshotRef`` fields to set (None: the ref's own, or none)."""
    table_name = _name(table)
    if options.replace and options.if_not_exists:
        msg = f"{kind.value} {name!r} of {table_name}: replace and if_not_exists exclude each other"
        raise InvalidArgumentError(msg)
    if not (options.create or options.replace):
        msg = f"{kind.value} {name!r} of {table_name}: neither create nor replace, nothing to do"
        raise InvalidArgumentError(msg)
    overrides = {k: v for k, v in retention.items() if v is not None}
    for key, value in overrides.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            msg = f"{key} of {kind.value} {name!r} must be a positive integer, got {value!r}"
            raise InvalidArgumentError(msg)

    def refs(metadata: TableMetadata) -> dict[str, SnapshotRef | None] | None:
        target = options.snapshot_id if options.snapshot_id is not None else _current_id(metadata)
        existing = metadata.refs.get(name)
        if kind is SnapshotRefType.TAG and target is None:
            msg = f"cannot create or replace tag {name!r} of {table_name}: main has no snapshot"
            raise InvalidArgumentError(msg)
        if options.replace and not (options.create and existing is None):
            if target is None:
                msg = f"cannot replace branch {name!r} of {table_name}: main has no snapshot"
                raise InvalidArgumentError(msg)
            base = _checked_kind(existing, name, kind, table_name).model_copy(update={"snapshot_id": target})
        else:
            if existing is not None:
                if options.if_not_exists:
                    return None
                msg = f"ref {name!r} already exists in {table_name}"
                raise InvalidArgumentError(msg)
            if target is None:
                msg = (
                    f"cannot create branch {name!r} of {table_name}: the table has no snapshot "
                    "(write to it first)"
                )
                raise UnsupportedFeatureError(msg)
            base = SnapshotRef(snapshot_id=target, snapshot_ref_type=kind)  # type: ignore[call-arg]
        _snapshot(metadata, target, table_name, f"cannot set {kind.value} {name!r} to unknown snapshot")
        return {name: base.model_copy(update=overrides)}

    _commit_refs(table, f"setting {kind.value} {name}", refs)


def _drop_ref(table: PyIcebergTable, name: str, kind: SnapshotRefType, *, if_exists: bool) -> None:
    """Iceberg Java's ``DropBranchExec`` / ``DropTagExec``."""
    table_name = _name(table)

    def refs(metadata: TableMetadata) -> dict[str, SnapshotRef | None] | None:
        existing = metadata.refs.get(name)
        if existing is None and if_exists:
            return None
        if kind is SnapshotRefType.BRANCH and name == MAIN_BRANCH:
            msg = f"cannot drop branch {MAIN_BRANCH} of {table_name}: the main branch cannot be removed"
            raise InvalidArgumentError(msg)
        _checked_kind(existing, name, kind, table_name)
        return {name: None}

    _commit_refs(table, f"dropping {kind.value} {name}", refs)


def _checked_kind(ref: SnapshotRef | None, name: str, kind: SnapshotRefType, table_name: str) -> SnapshotRef:
    """``ref``, refused unless it exists and is a ``kind``."""
    if ref is None:
        msg = f"{kind.value} {name!r} does not exist in {table_name}"
        raise NoSuchSnapshotError(msg)
    if ref.snapshot_ref_type is not kind:
        msg = f"ref {name!r} of {table_name} is a {ref.snapshot_ref_type.value}, not a {kind.value}"
        raise InvalidArgumentError(msg)
    return ref


def _commit_refs(
    table: PyIcebergTable,
    what: str,
    refs: Callable[[TableMetadata], dict[str, SnapshotRef | None] | None],
    *,
    pinned: Sequence[str] = (),
) -> None:
    """Commit ``refs(metadata)`` (each ref's new state, None to remove it), computed on each
    attempt's metadata; every ref it changes, and each of ``pinned``, must be still where it was."""

    def change(metadata: TableMetadata) -> _Change | None:
        wanted = refs(metadata)
        todo = {k: v for k, v in (wanted or {}).items() if metadata.refs.get(k) != v}
        if not todo:
            return None
        requirements = tuple(
            AssertRefSnapshotId(  # type: ignore[call-arg]  # pydantic aliases
                ref=ref, snapshot_id=r.snapshot_id if (r := metadata.refs.get(ref)) is not None else None
            )
            for ref in dict.fromkeys([*todo, *pinned])
        )
        updates = tuple(_ref_update(ref, new) for ref, new in todo.items())
        return requirements, updates

    commit_metadata_change(table, what, change)


def _ref_update(name: str, ref: SnapshotRef | None) -> TableUpdate:
    if ref is None:
        return RemoveSnapshotRefUpdate(ref_name=name)  # type: ignore[call-arg]  # pydantic aliases
    return SetSnapshotRefUpdate(  # type: ignore[call-arg]
        ref_name=name,
        type=ref.snapshot_ref_type,
        snapshot_id=ref.snapshot_id,
        min_snapshots_to_keep=ref.min_snapshots_to_keep,
        max_snapshot_age_ms=ref.max_snapshot_age_ms,
        max_ref_age_ms=ref.max_ref_age_ms,
    )


def _snapshot(metadata: TableMetadata, snapshot_id: int | None, table_name: str, what: str = "") -> int:
    """``snapshot_id``, refused unless it is a snapshot of the table."""
    if snapshot_id is None or metadata.snapshot_by_id(snapshot_id) is None:
        msg = f"{what or 'no snapshot'} {snapshot_id} in {table_name}"
        raise NoSuchSnapshotError(msg)
    return snapshot_id


# ------------------------------------------------------------------------------ snapshot management


def rollback_to_snapshot(table: PyIcebergTable, snapshot_id: int) -> SnapshotChange:
    """Make ``snapshot_id``, an ancestor of the current snapshot, current again (Java's
    ``rollback_to_snapshot`` procedure: the later snapshots stay, off the main branch).

    Raises:
        NoSuchSnapshotError: No such snapshot.
        InvalidArgumentError: It is not an ancestor of the current snapshot.
    """
    table_name = _name(table)

    def target(metadata: TableMetadata) -> int:
        _snapshot(metadata, snapshot_id, table_name, "cannot roll back to unknown snapshot")
        if snapshot_id not in _ancestor_ids(metadata):
            msg = (
                f"cannot roll back {table_name} to snapshot {snapshot_id}: it is not an ancestor of the "
                "current snapshot (set_current_snapshot makes any snapshot current)"
            )
            raise InvalidArgumentError(msg)
        return snapshot_id

    return _set_main(table, f"rolling back to snapshot {snapshot_id}", target)


def rollback_to_timestamp(table: PyIcebergTable, timestamp_ms: int) -> SnapshotChange:
    """Make current the latest ancestor of the current snapshot committed before ``timestamp_ms``
    (epoch milliseconds; Java's ``rollback_to_timestamp`` procedure).

    Raises:
        NoSuchSnapshotError: No ancestor of the current snapshot is older than that.
    """
    table_name = _name(table)

    def target(metadata: TableMetadata) -> int:
        older = [
            s
            for s in ancestors_of(metadata.current_snapshot(), metadata)
            if 0 < s.timestamp_ms < timestamp_ms
        ]
        if not older:
            msg = (
                f"cannot roll back {table_name}: no snapshot of its current history is older than "
                f"{iso_time(timestamp_ms)} ({timestamp_ms} ms)"
            )
            raise NoSuchSnapshotError(msg)
        return max(older, key=lambda s: s.timestamp_ms).snapshot_id

    return _set_main(table, f"rolling back to {timestamp_ms} ms", target)


def set_current_snapshot(
    table: PyIcebergTable, *, snapshot_id: int | None = None, ref: str | None = None
) -> SnapshotChange:
    """Make a snapshot current, by id or by the ref (branch or tag) pointing at it; any snapshot,
    an ancestor or not (Java's ``set_current_snapshot`` procedure).

    Raises:
        InvalidArgumentError: Neither or both of ``snapshot_id`` and ``ref``.
        NoSuchSnapshotError: No such snapshot or ref.
    """
    table_name = _name(table)
    if (snapshot_id is None) == (ref is None):
        msg = f"set_current_snapshot of {table_name}: give either snapshot_id or ref, not both"
        raise InvalidArgumentError(msg)

    def target(metadata: TableMetadata) -> int:
        if ref is None:
            return _snapshot(
                metadata, snapshot_id, table_name, "cannot set the current snapshot to unknown snapshot"
            )
        found = metadata.refs.get(ref)
        if found is None:
            msg = f"cannot set the current snapshot of {table_name}: no ref {ref!r}"
            raise NoSuchSnapshotError(msg)
        return found.snapshot_id

    what = f"setting the current snapshot to {ref or snapshot_id}"
    return _set_main(table, what, target, pinned=() if ref is None else (ref,))


def fast_forward(table: PyIcebergTable, branch: str, to: str) -> FastForward:
    """Move ``branch`` forward to the snapshot of ref ``to``, of which its snapshot must be an
    ancestor; a missing ``branch`` is created there (Java's ``fast_forward`` procedure).

    Raises:
        NoSuchSnapshotError: No ref ``to``.
        InvalidArgumentError: ``branch`` is a tag, or not an ancestor of ``to``.
    """
    table_name = _name(table)
    seen: list[FastForward] = []

    def refs(metadata: TableMetadata) -> dict[str, SnapshotRef | None] | None:
        target = metadata.refs.get(to)
        if target is None:
            msg = f"cannot fast-forward {branch!r} of {table_name}: no ref {to!r}"
            raise NoSuchSnapshotError(msg)
        existing = metadata.refs.get(branch)
        seen.append(FastForward(branch, existing.snapshot_id if existing else None, target.snapshot_id))
        if existing is None:
            return {branch: _branch(target.snapshot_id)}
        current = _checked_kind(existing, branch, SnapshotRefType.BRANCH, table_name)
        if current.snapshot_id == target.snapshot_id:
            return None
        if current.snapshot_id not in _ancestor_ids(metadata, target.snapshot_id):
            msg = f"cannot fast-forward {branch!r} of {table_name}: it is not an ancestor of {to!r}"
            raise InvalidArgumentError(msg)
        return {branch: current.model_copy(update={"snapshot_id": target.snapshot_id})}

    _commit_refs(table, f"fast-forwarding {branch} to {to}", refs, pinned=(to,))
    return seen[-1]


def _ancestor_ids(metadata: TableMetadata, snapshot_id: int | None = None) -> set[int]:
    """The ids of the snapshot and its ancestors (of the current snapshot by default)."""
    start = metadata.current_snapshot() if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    return {s.snapshot_id for s in ancestors_of(start, metadata)}


def _current_id(metadata: TableMetadata) -> int | None:
    current = metadata.current_snapshot()
    return current.snapshot_id if current is not None else None


def _branch(snapshot_id: int) -> SnapshotRef:
    return SnapshotRef(snapshot_id=snapshot_id, snapshot_ref_type=SnapshotRefType.BRANCH)  # type: ignore[call-arg]


def _set_main(
    table: PyIcebergTable, what: str, target: Callable[[TableMetadata], int], *, pinned: Sequence[str] = ()
) -> SnapshotChange:
    """Point ``main`` at ``target(metadata)`` (its retention kept, as Java's ``setBranchSnapshot``)."""
    seen: list[SnapshotChange] = []

    def refs(metadata: TableMetadata) -> dict[str, SnapshotRef | None]:
        snapshot_id = target(metadata)
        seen.append(SnapshotChange(_current_id(metadata), snapshot_id))
        main = metadata.refs.get(MAIN_BRANCH)
        moved = _branch(snapshot_id) if main is None else main.model_copy(update={"snapshot_id": snapshot_id})
        return {MAIN_BRANCH: moved}

    _commit_refs(table, what, refs, pinned=pinned)
    return seen[-1]


# ---------------------------------------------------------------------------------- partition specs


def add_partition_field(table: PyIcebergTable, transform_text: str, *, name: str | None = None) -> None:
    """Add a partition field to the current spec (``ALTER TABLE t ADD PARTITION FIELD bucket(16, id)
    [AS name]``): ``col``, ``bucket(N, col)``, ``truncate(W, col)``, ``years|months|days|hours(col)``.

    Existing files keep their spec; new writes use the new one. The field is named as Iceberg
    Java names it (``id_bucket_16``, ``s_trunc_4``, ``ts_day``) unless ``name`` is given, and on
    a v2 table a field dropped before gets its old field id back.

    Raises:
        InvalidArgumentError: Not one partition field, an unknown column, a transform that does
            not apply to it, or a field or name the spec has already.
    """
    table_name = _name(table)

    def change(metadata: TableMetadata) -> _Change | None:
        field = _one_field(metadata.schema(), transform_text, table_name)
        for existing in metadata.spec().fields:
            if existing.source_id == field.source_id and existing.transform == field.transform:
                msg = (
                    f"cannot add partition field {transform_text!r} to {table_name}: "
                    f"the spec has it already, as {existing.name!r}"
                )
                raise InvalidArgumentError(msg)
        column = str(metadata.schema().find_column_name(field.source_id))  # found by the parse
        return spec_update_change(
            table, f"adding partition field {transform_text!r} to {table_name}",
            lambda update: update.add_field(column, field.transform, name),
        )  # fmt: skip

    commit_metadata_change(table, f"adding partition field {transform_text}", change)


def drop_partition_field(table: PyIcebergTable, transform_text_or_name: str) -> None:
    """Remove a field from the current spec (``ALTER TABLE t DROP PARTITION FIELD days(ts)``), by
    its transform or, for a name that is no column, by the partition field's name (as Java).

    Raises:
        InvalidArgumentError: The current spec has no such field.
    """
    table_name = _name(table)
    text = transform_text_or_name.strip()

    def change(metadata: TableMetadata) -> _Change | None:
        spec, schema = metadata.spec(), metadata.schema()
        if "(" not in text and not _has_column(schema, text):
            found = [f for f in spec.fields if f.name == text]
        else:
            field = _one_field(schema, text, table_name)
            found = [
                f for f in spec.fields if f.source_id == field.source_id and f.transform == field.transform
            ]
        if not found:
            have = ", ".join(f"{f.name}={f.transform}" for f in spec.fields) or "none"
            msg = f"cannot find partition field {text!r} to remove from {table_name} (its fields: {have})"
            raise InvalidArgumentError(msg)
        return spec_update_change(
            table, f"removing partition field {text!r} from {table_name}",
            lambda update: update.remove_field(found[0].name),
        )  # fmt: skip

    commit_metadata_change(table, f"removing partition field {text}", change)


def _one_field(schema: Schema, text: str, table_name: str) -> PartitionField:
    fields = parse_partition_spec([text], schema).fields
    if len(fields) != 1:
        msg = f"give one partition field for {table_name}, got {text!r}"
        raise InvalidArgumentError(msg)
    return fields[0]


# ------------------------------------------------------------------------------------------ columns


def drop_column(table: PyIcebergTable, name: str) -> None:
    """Drop a column (``ALTER TABLE t DROP COLUMN c``) and, as Iceberg Java does, its column-scoped
    properties (``write.metadata.metrics.column.c``, ...), in a second metadata commit.

    Raises:
        InvalidArgumentError: An unknown column, an identifier field, or the source of a field of
            the current partition spec or sort order.
    """
    SchemaChange(table).drop_column(name).commit()
    unset_properties(table, [prefix + name for prefix in _COLUMN_PREFIXES])


def widen_column(table: PyIcebergTable, name: str, field_type: str | IcebergType) -> None:
    """Promote a column's type (``ALTER TABLE t ALTER COLUMN c TYPE BIGINT``): ``int -> long``,
    ``float -> double``, a larger decimal precision.

    Raises:
        InvalidArgumentError: An unknown column or type, or a change that is not a promotion.
    """
    SchemaChange(table).widen_column(name, field_type).commit()
