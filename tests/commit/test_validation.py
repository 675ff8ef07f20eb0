"""The named conflict checks of ``icemor.commit.validation``, each against Iceberg Java's behaviour.

Every test commits real snapshots (manifests written by ``RowDelta``; the data and delete files
are metadata only: validation never opens them), then runs :func:`validate` with the snapshot
the "operation" read as the start. The Java behaviour each one mirrors is cited (Iceberg 1.10,
``core/src/main/java/org/apache/iceberg/MergingSnapshotProducer.java``, ``DeleteFileIndex.java``,
``BaseRowDelta.java``; tests in ``TestRowDelta.java``).
"""

from __future__ import annotations

import itertools

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from icemor.commit.row_delta import RowDelta
from icemor.commit.validation import Validation, validate
from icemor.exceptions import CommitConflictError
from icemor.spec.files import DataFileRef, FileContent, WrittenFile

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "p", StringType(), required=True),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="p"))
_names = itertools.count()


@pytest.fixture
def table(tmp_path) -> Table:  # type: ignore[no-untyped-def]
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("ns")
    return catalog.create_table(
        "ns.t",
        SCHEMA,
        partition_spec=SPEC,
        properties={"format-version": "2", "commit.retry.num-retries": "0"},
    )


def _file(table: Table, content: FileContent, partition: str | None, **kw: object) -> WrittenFile:
    spec_id = 0 if partition is not None else _unpartitioned(table)
    return WrittenFile(
        content=content,
        path=f"{table.location()}/data/f{next(_names)}.parquet",
        record_count=1,
        file_size_in_bytes=100,
        spec_id=spec_id,
        partition=(partition,) if partition is not None else (),
        column_sizes={},
        value_counts={},
        null_value_counts={},
        **{"lower_bounds": {}, "upper_bounds": {}, **kw},  # type: ignore[arg-type]
    )


def _unpartitioned(table: Table) -> int:
    from icemor.commit.schema import add_unpartitioned_spec

    return add_unpartitioned_spec(table)


def _commit(
    table: Table, *files: WrittenFile, removed: set[str] | None = None, op: Operation | None = None
) -> int:
    start = table.refresh().metadata.current_snapshot()
    delta = RowDelta(
        table,
        Validation(start_snapshot_id=start.snapshot_id if start else None, serializable=False),
        added_files=list(files),
        removed_paths=removed or set(),
        operation=op,
    )
    return delta.commit().snapshot_id


def _pos_bounds(path: str) -> dict[str, dict[int, bytes]]:
    # file_path (field 2147483546) bounds naming one data file: a file-scoped position delete
    b = path.encode()
    return {"lower_bounds": {2147483546: b}, "upper_bounds": {2147483546: b}}


def _setup(table: Table) -> tuple[WrittenFile, WrittenFile, int]:
    """Data files in partitions a and b; returns them and the snapshot the operation reads."""
    a = _file(table, FileContent.DATA, "a")
    b = _file(table, FileContent.DATA, "b")
    start = _commit(table, a, b, op=Operation.APPEND)
    return a, b, start


def _ref(table: Table, f: WrittenFile) -> DataFileRef:
    seq = table.refresh().metadata.current_snapshot().sequence_number  # type: ignore[union-attr]
    return DataFileRef(f.path, "PARQUET", 1, 100, f.spec_id, f.partition, seq)


def _rewrite_of(
    table: Table, start: int, f: WrittenFile, ref: DataFileRef | None = None, **kw: object
) -> Validation:
    """What UPDATE/MERGE/compaction pass: ``f``'s rows live on in new files."""
    return Validation(
        start_snapshot_id=start,
        serializable=False,
        removed_data_files={f.path},
        no_new_deletes_for={f.path},
        data_files={f.path: ref} if ref is not None else {},
        **kw,  # type: ignore[arg-type]
    )


def _validate(table: Table, v: Validation) -> None:
    metadata = table.refresh().metadata
    validate(metadata, table.io, v)


# -- validateNoNewDeletesForDataFiles (MergingSnapshotProducer): DeleteFileIndex.forDataFile rules


def test_equality_delete_in_another_partition_does_not_conflict(table: Table) -> None:
    # Java: DeleteFileIndex indexes a partitioned spec's equality deletes by (spec, partition);
    # forDataFile only returns those of the data file's partition
    a, _, start = _setup(table)
    ref = _ref(table, a)
    _commit(table, _file(table, FileContent.EQUALITY_DELETES, "b", equality_ids=(1,)), op=Operation.OVERWRITE)
    _validate(table, _rewrite_of(table, start, a, ref))


def test_equality_delete_in_the_same_partition_conflicts(table: Table) -> None:
    # Java: "Cannot commit, found new delete for replaced data file" (TestRowDelta
    # testValidateNoConflictsFromSnapshot / RewriteFiles with concurrent equality deletes)
    a, _, start = _setup(table)
    ref = _ref(table, a)
    _commit(table, _file(table, FileContent.EQUALITY_DELETES, "a", equality_ids=(1,)), op=Operation.OVERWRITE)
    with pytest.raises(CommitConflictError, match="added delete file"):
        _validate(table, _rewrite_of(table, start, a, ref))


def test_global_equality_delete_conflicts(table: Table) -> None:
    # Java: equality deletes of an unpartitioned spec are global: forDataFile returns them for
    # a data file of any partition
    a, _, start = _setup(table)
    ref = _ref(table, a)
    _commit(
        table, _file(table, FileContent.EQUALITY_DELETES, None, equality_ids=(1,)), op=Operation.OVERWRITE
    )
    with pytest.raises(CommitConflictError, match="added delete file"):
        _validate(table, _rewrite_of(table, start, a, ref))


def test_equality_delete_of_an_unknown_partition_conflicts(table: Table) -> None:
    # without the data file's partition nothing rules the delete out: it may apply
    a, _, start = _setup(table)
    _commit(table, _file(table, FileContent.EQUALITY_DELETES, "b", equality_ids=(1,)), op=Operation.OVERWRITE)
    with pytest.raises(CommitConflictError):
        _validate(table, _rewrite_of(table, start, a))


def test_equality_delete_with_an_older_sequence_number_does_not_conflict(table: Table) -> None:
    # Java: an equality delete applies only to data files with a lower data sequence number
    # (DeleteFileIndex: deleteSequenceNumber > dataSequenceNumber)
    a, _, start = _setup(table)
    ref = _ref(table, a)
    newer = DataFileRef(
        ref.path, ref.file_format, 1, 100, ref.spec_id, ref.partition, ref.data_sequence_number + 5
    )
    _commit(table, _file(table, FileContent.EQUALITY_DELETES, "a", equality_ids=(1,)), op=Operation.OVERWRITE)
    _validate(table, _rewrite_of(table, start, a, newer))


def test_position_delete_for_another_file_does_not_conflict(table: Table) -> None:
    # Java: position deletes apply by file_path (DeleteFileIndex's path index / path bounds)
    a, b, start = _setup(table)
    ref = _ref(table, a)
    _commit(
        table, _file(table, FileContent.POSITION_DELETES, "a", **_pos_bounds(b.path)), op=Operation.DELETE
    )
    _validate(table, _rewrite_of(table, start, a, ref))


def test_position_delete_for_the_file_conflicts(table: Table) -> None:
    # Java: "Cannot commit, found new position delete for replaced data file"
    a, _, start = _setup(table)
    ref = _ref(table, a)
    _commit(
        table, _file(table, FileContent.POSITION_DELETES, "a", **_pos_bounds(a.path)), op=Operation.DELETE
    )
    with pytest.raises(CommitConflictError, match="rewrites"):
        _validate(table, _rewrite_of(table, start, a, ref))


def test_ignore_equality_deletes_skips_them_not_position_deletes(table: Table) -> None:
    # Java: validateNoNewDeletesForDataFiles(..., ignoreEqualityDeletes=true) for a rewrite that
    # keeps the starting sequence number: only position deletes count
    a, _, start = _setup(table)
    ref = _ref(table, a)
    _commit(table, _file(table, FileContent.EQUALITY_DELETES, "a", equality_ids=(1,)), op=Operation.OVERWRITE)
    _validate(table, _rewrite_of(table, start, a, ref, ignore_equality_deletes=True))
    _commit(
        table, _file(table, FileContent.POSITION_DELETES, "a", **_pos_bounds(a.path)), op=Operation.DELETE
    )
    with pytest.raises(CommitConflictError):
        _validate(table, _rewrite_of(table, start, a, ref, ignore_equality_deletes=True))


# -- validateNoConflictingDeleteFiles (RowDelta; MergingSnapshotProducer.validateNoNewDeleteFiles)


def test_delete_for_a_file_whose_rows_are_updated_conflicts(table: Table) -> None:
    # UPDATE/MERGE reference a file (new position deletes) and copy its row: Java's RowDelta
    # validateNoConflictingDeleteFiles refuses a concurrent delete that applies to it
    a, b, start = _setup(table)
    ref = _ref(table, a)
    v = Validation(
        start_snapshot_id=start,
        serializable=False,
        referenced_data_files={a.path},
        no_new_deletes_for={a.path},
        data_files={a.path: ref},
    )
    _commit(
        table, _file(table, FileContent.POSITION_DELETES, "b", **_pos_bounds(b.path)), op=Operation.DELETE
    )
    _validate(table, v)  # another file's delete: no conflict
    _commit(
        table, _file(table, FileContent.POSITION_DELETES, "a", **_pos_bounds(a.path)), op=Operation.DELETE
    )
    with pytest.raises(CommitConflictError, match="updates rows of"):
        _validate(table, v)


# -- validateDataFilesExist (MergingSnapshotProducer)


def test_referenced_file_removed_by_an_overwrite_conflicts_not_by_a_delete(table: Table) -> None:
    # Java: RowDelta.validateDataFilesExist(referenced) with validateDeletedFiles off skips
    # ``delete`` snapshots (VALIDATE_DATA_FILES_EXIST_SKIP_DELETE_OPERATIONS)
    a, b, start = _setup(table)
    v = Validation(start_snapshot_id=start, serializable=False, referenced_data_files={a.path, b.path})
    _commit(table, removed={a.path}, op=Operation.DELETE)
    _validate(table, v)
    _commit(table, _file(table, FileContent.DATA, "b"), removed={b.path}, op=Operation.OVERWRITE)
    with pytest.raises(CommitConflictError, match="was removed by concurrent snapshot"):
        _validate(table, v)


def test_removed_file_removed_by_a_delete_conflicts(table: Table) -> None:
    # Java: a file the commit removes must still exist (``delete`` snapshots count too)
    a, _, start = _setup(table)
    _commit(table, removed={a.path}, op=Operation.DELETE)
    with pytest.raises(CommitConflictError, match="was removed by concurrent snapshot"):
        _validate(table, Validation(start_snapshot_id=start, serializable=False, removed_data_files={a.path}))


# -- validateNoConflictingDataFiles (RowDelta; MergingSnapshotProducer.validateAddedDataFiles)


def test_appended_file_matching_the_condition_conflicts_when_serializable(table: Table) -> None:
    # Java: at serializable isolation a new data file that may hold rows matching the conflict
    # detection filter conflicts (by partition here); at snapshot isolation it does not
    _, _, start = _setup(table)
    _commit(table, _file(table, FileContent.DATA, "b"), op=Operation.APPEND)
    in_a = Validation(start_snapshot_id=start, conflict_filter=EqualTo("p", "a"))
    _validate(table, in_a)
    _commit(table, _file(table, FileContent.DATA, "a"), op=Operation.APPEND)
    with pytest.raises(CommitConflictError, match="serializable"):
        _validate(table, in_a)
    _validate(
        table, Validation(start_snapshot_id=start, conflict_filter=EqualTo("p", "a"), serializable=False)
    )
