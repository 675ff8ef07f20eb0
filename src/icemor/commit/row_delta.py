"""RowDelta: one snapshot that adds data and delete files and removes files, validated and retried.

Each attempt reads the catalog's current metadata, validates the commits made since the
operation's scan (:mod:`icemor.commit.validation`), writes manifests against the current head
and swaps the table pointer with a compare-and-swap (``AssertRefSnapshotId``) through
:func:`icemor.commit.door.commit`, with one snapshot id for every attempt. A lost swap is
retried with backoff, following ``commit.retry.*`` as Iceberg Java does; a conflict is not.
When the commit certainly did not happen, whatever the reason (a conflict, a full disk, a
read-only catalog, an interrupt), every file written for it (manifests, manifest lists, the
metadata JSON of a refused swap and the caller's data/delete files) is removed, best effort;
when the catalog may have committed, every file stays.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

from icemor._compat.pyiceberg import ManifestListWriterV3, manifest_list_writer, snapshot_summary
from icemor.commit.data_file_struct import to_data_file
from icemor.commit.door import Change, commit, may_have_committed
from icemor.commit.files import delete_quietly, writing
from icemor.commit.manifest_writer import write_snapshot_manifests
from icemor.commit.v3 import is_v3, next_row_id, snapshot_manifests, validate_no_concurrent_dvs
from icemor.commit.validation import Validation, validate
from icemor.exceptions import CommitConflictError, IcemorError, NewDeletesConflictError
from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Summary

    from icemor.spec.files import WrittenFile

__all__ = ["CarriedDeletes", "RowDelta"]


@dataclass(frozen=True)
class CarriedDeletes:
    """Deletes a rewrite carried onto its new data files: every position deleted concurrently so
    far, as new delete files (which replace those of an earlier carry of the same commit)."""

    files: tuple[WrittenFile, ...]
    data_files: frozenset[str]
    """The rewritten data files whose position deletes are carried (:attr:`Validation.carried`)."""
    removals: frozenset[str]
    """Concurrent delete files (DVs by :func:`icemor.spec.dv.dv_removal_key`) that applied only to
    rewritten data files: they apply to nothing after the commit."""


@dataclass
class RowDelta:
    """The changes of one row-level operation, committed as one snapshot by :meth:`commit`."""

    table: PyIcebergTable
    validation: Validation
    extra_validations: list[Validation] = field(default_factory=list)
    """Further checks, each from its own starting snapshot (a commit that completes earlier ones)."""
    added_files: list[WrittenFile] = field(default_factory=list)
    removed_paths: set[str] = field(default_factory=set)
    """Data and delete files to remove; each must still be live at the head. A deletion vector
    is named by :func:`icemor.spec.dv.dv_removal_key` (its Puffin file holds others)."""
    optional_removals: set[str] = field(default_factory=set)
    """Paths of ``removed_paths`` that may be gone already: removed if still live, else not a
    conflict (delete files a rewrite leaves dangling, which a concurrent commit may remove first)."""
    data_sequence_numbers: dict[str, int] = field(default_factory=dict)
    """Explicit data sequence numbers of added files by path (rewrites); others get the commit's."""
    snapshot_properties: dict[str, str] = field(default_factory=dict)
    operation: Operation | None = None
    """Default: ``delete`` when no data file is added, else ``overwrite`` (as Java's RowDelta)."""
    owns_added_files: bool = True
    """Remove the added files when the commit fails; False for files the caller registers
    (``add-files``), which are never the commit's to delete."""
    carry: Callable[[TableMetadata], CarriedDeletes] | None = None
    """A rewrite's carry-over: when a concurrent commit added position deletes or DVs for a data
    file it removes (:class:`NewDeletesConflictError`), called with the head's metadata to map
    them onto the new data files; then validated again. It raises CommitConflictError when it
    cannot (the commit then fails as without it)."""
    base_is_current: bool = False
    """The table's metadata was read from the catalog for this operation (and the validation
    starts from it): the first attempt is made on it without reading the table again
    (:func:`icemor.commit.door.commit`'s ``current``; a stale one costs one attempt, not a retry)."""

    _carried_paths: set[str] = field(default_factory=set, init=False, repr=False)

    def commit(self) -> Snapshot:
        """Commit through :func:`icemor.commit.door.commit`; on failure remove what was written.

        One snapshot id for every attempt. Whatever the failure (a conflict, a full disk, a
        read-only catalog, an interrupt), every file written for the commit is removed, the
        caller's data and delete files too, unless the catalog may have committed: then every
        file stays.

        Raises:
            CommitConflictError: A concurrent commit conflicts (nothing committed).
            CommitFailedError: The catalog refused every attempt (nothing committed).
            WriteFailedError: A manifest, manifest list or metadata file could not be written
                (nothing committed).
            CommitStateUnknownError: The catalog call failed in a way that leaves unknown whether
                the commit happened; every written file is kept.
        """
        snapshot_id = self.table.metadata.new_snapshot_id()
        name = ".".join(self.table.name())
        built: list[Snapshot] = []

        def prepare(metadata: TableMetadata, attempt: int) -> Change:
            change, snapshot = self._attempt(metadata, attempt, snapshot_id)
            built.append(snapshot)
            return change

        try:
            done = commit(
                self.table,
                prepare,
                what=f"the commit to {name}",
                snapshot_id=snapshot_id,
                current=self.table.metadata if self.base_is_current else None,
            )
        except BaseException as e:
            if may_have_committed(e):
                raise  # the commit may have happened: its files must stay
            owned = [f.path for f in self.added_files] if self.owns_added_files else []
            failed = delete_quietly(self.table.io, owned)
            if failed and isinstance(e, IcemorError):
                msg = f"{e}; also could not remove {len(failed)} written file(s), e.g. {failed[0]}"
                raise type(e)(msg) from e
            raise
        # (the table's own record, unless a concurrent expiry removed it already)
        return done.metadata.snapshot_by_id(snapshot_id) or built[-1]

    def _validate_carrying(self, metadata: TableMetadata) -> None:
        """:func:`validate` the main validation; with :attr:`carry`, carry the concurrent position
        deletes of rewritten files over and validate again, while each carry takes on more."""
        while True:
            try:
                validate(metadata, self.table.io, self.validation)
                return
            except NewDeletesConflictError:
                head = metadata.current_snapshot()
                through = (head.sequence_number or 0) if head is not None else 0
                if self.carry is None or through <= self.validation.carried_through:
                    raise  # nothing newer to carry: a delete it cannot take on
                carried = self.carry(metadata)  # every position so far: replaces an earlier carry's files
                before = self._carried_paths
                self.added_files = [f for f in self.added_files if f.path not in before]
                self.added_files.extend(carried.files)
                self._carried_paths = {f.path for f in carried.files}
                delete_quietly(self.table.io, sorted(before - self._carried_paths))
                self.validation.carried = set(carried.data_files)
                self.validation.carried_through = through
                self.removed_paths |= carried.removals
                self.optional_removals |= carried.removals

    def _attempt(self, metadata: TableMetadata, attempt: int, snapshot_id: int) -> tuple[Change, Snapshot]:
        """Validate against ``metadata`` and write the manifests and manifest list of the snapshot."""
        io = self.table.io
        self._validate_carrying(metadata)
        for v in self.extra_validations:
            validate(metadata, io, v)
        # v3: a data file may have one live DV only (Java's validateAddedDVs)
        dv_files = {f.referenced_data_file for f in self.added_files if f.is_deletion_vector}
        validate_no_concurrent_dvs(
            metadata, io, self.validation.start_snapshot_id, {p for p in dv_files if p is not None}
        )
        parent = metadata.current_snapshot()
        v3 = is_v3(metadata)
        added = [to_data_file(f, format_version=metadata.format_version) for f in self.added_files]
        changes = write_snapshot_manifests(
            metadata,
            io,
            snapshot_manifests(metadata, io, parent),
            snapshot_id=snapshot_id,
            added=added,
            removed_paths=self.removed_paths,
            data_sequence_numbers=self.data_sequence_numbers,
        )
        written = list(changes.written_paths)
        try:
            missing = self.removed_paths - self.optional_removals - set(changes.removed_keys)
            if missing:
                gone = sorted(missing)[0].split("\x00")[0]
                msg = f"file {gone} is no longer in the table: a concurrent commit removed it"
                raise CommitConflictError(msg)
            sequence_number = metadata.next_sequence_number()
            list_path = f"{metadata.location}/metadata/snap-{snapshot_id}-{attempt}-{uuid.uuid4()}.avro"
            written.append(list_path)
            parent_id = parent.snapshot_id if parent is not None else None
            first_row_id = next_row_id(metadata)
            list_writer = (
                ManifestListWriterV3(
                    io.new_output(list_path),
                    snapshot_id=snapshot_id,
                    parent_snapshot_id=parent_id,
                    sequence_number=sequence_number,
                    first_row_id=first_row_id,
                )
                if v3
                else manifest_list_writer(
                    io.new_output(list_path),
                    snapshot_id=snapshot_id,
                    parent_snapshot_id=parent_id,
                    sequence_number=sequence_number,
                )
            )
            with writing(list_path), list_writer as writer:
                writer.add_manifests(changes.manifests)
            # v3 row lineage: the rows of data manifests given ids here (the catalog update
            # advances the table's next-row-id by them)
            lineage: dict[str, Any] = (
                {"first_row_id": first_row_id, "added_rows": list_writer.next_row_id - first_row_id}
                if isinstance(list_writer, ManifestListWriterV3)
                else {}
            )
            snapshot = Snapshot(  # type: ignore[call-arg]  # pydantic aliases
                **lineage,
                snapshot_id=snapshot_id,
                parent_snapshot_id=parent_id,
                sequence_number=sequence_number,
                timestamp_ms=int(time.time() * 1000),
                manifest_list=list_path,
                summary=self._summary(metadata, parent, added, changes.removed),
                schema_id=metadata.current_schema_id,
            )
        except BaseException:
            delete_quietly(io, written)
            raise
        requirements = (
            AssertRefSnapshotId(  # type: ignore[call-arg]  # pydantic aliases
                snapshot_id=parent_id, ref=MAIN_BRANCH
            ),
        )
        updates = (
            AddSnapshotUpdate(snapshot=snapshot),
            SetSnapshotRefUpdate(  # type: ignore[call-arg]
                ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id
            ),
        )
        return Change(requirements, updates, written), snapshot

    def _summary(
        self,
        metadata: TableMetadata,
        parent: Snapshot | None,
        added: list[DataFile],
        removed: list[DataFile],
    ) -> Summary:
        limit = P.int_property(metadata.properties, "write.summary.partition-limit", 0)
        # as Java's BaseRowDelta: overwrite when it adds rows, even rows only (an insert-only MERGE
        # asks for append itself: Spark plans it as one), delete when it only deletes
        adds_data = any(int(f.content) == 0 for f in added)
        operation = self.operation or (Operation.OVERWRITE if adds_data else Operation.DELETE)
        # pyiceberg's totals know append/overwrite/delete only; a replace changes files, not rows
        counted = Operation.OVERWRITE if operation == Operation.REPLACE else operation
        return snapshot_summary(
            metadata,
            operation=operation,
            counted_as=counted,
            added=added,
            removed=removed,
            properties=self.snapshot_properties,
            partition_summary_limit=limit,
            previous=parent.summary if parent is not None else None,
        )
