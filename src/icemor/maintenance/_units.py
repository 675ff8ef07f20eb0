"""What the rewriting maintenance actions share: the table check, and units of work that never lose files.

A unit of work runs on a local thread or a Spark executor and writes files. If one unit fails
while others succeed, a runner that raises would drop the successful units' results, and with
them the only record of the files they wrote. So each unit runs guarded: an error is returned,
not raised (after the unit removed what it wrote itself), the driver sees every result,
removes the files of the successful units and raises the first error.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pyiceberg.typedef import Record

from icemor.commit.files import delete_quietly
from icemor.commit.validation import Validation, validate
from icemor.exceptions import CommitConflictError, IcemorError, InvalidArgumentError, UnsupportedFeatureError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata

    from icemor.engines import Runner
    from icemor.spec.files import DataFileRef

__all__ = [
    "check_rewritable",
    "partition_directory",
    "raise_if_none_committed",
    "run_guarded",
    "touched_since",
]

R = TypeVar("R")


def check_rewritable(table: PyIcebergTable) -> None:
    """Refuse tables whose files icemor cannot rewrite: v1 (no sequence numbers) and versions above 3.
    Copy-on-write tables are fine: a rewrite changes no row."""
    version = table.metadata.format_version
    if version < 2:
        msg = (
            f"{'.'.join(table.name())} is a format-version 1 table: rewrites keep data sequence numbers, "
            "which need format version 2 (set the table property format-version=2)"
        )
        raise InvalidArgumentError(msg)
    if version > 3:
        msg = f"rewriting format-version {version} tables is not supported (icemor writes up to 3)"
        raise UnsupportedFeatureError(msg)


def partition_directory(table: PyIcebergTable, spec_id: int, partition: tuple[Any, ...]) -> str:
    """The data directory of a partition as the table lays it out (``write.data.path`` etc.)."""
    data_dir = table.location_provider().new_data_location("x").rsplit("/", 1)[0]
    spec = table.metadata.specs()[spec_id]
    if spec.is_unpartitioned():
        return data_dir
    return f"{data_dir}/{spec.partition_to_path(Record(*partition), table.metadata.schema())}"


def touched_since(
    metadata: TableMetadata,
    io: FileIO,
    start_snapshot_id: int,
    data_files: Mapping[str, DataFileRef],
    *,
    ignore_equality_deletes: bool = False,
) -> bool:
    """Whether a commit after ``start_snapshot_id`` removed one of ``data_files`` or added deletes
    that apply to one (the checks a rewrite of them would fail): reads only those commits' own
    manifests, so a group of a partial-progress run is planned again only when it has to be."""
    paths = set(data_files)
    check = Validation(
        start_snapshot_id,
        serializable=False,
        removed_data_files=paths,
        no_new_deletes_for=paths,
        data_files=data_files,
        ignore_equality_deletes=ignore_equality_deletes,
    )
    try:
        validate(metadata, io, check)
    except CommitConflictError:
        return True
    return False


@dataclass(frozen=True)
class _Failed:
    error: BaseException


def _picklable(e: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return IcemorError(f"{type(e).__name__}: {e}")
    return e


def guarded(io: FileIO, item: tuple[Callable[[FileIO, Any], Any], Any]) -> Any:
    """Run ``fn(io, unit)``; return its error instead of raising it (module level: Spark pickles it)."""
    fn, unit = item
    try:
        return fn(io, unit)
    except Exception as e:
        return _Failed(_picklable(e))


def run_guarded(
    io: FileIO,
    run: Runner,
    fn: Callable[[FileIO, Any], R],
    units: Sequence[Any],
    written: Callable[[R], Iterable[str]],
    *,
    lost: Callable[[], None] | None = None,
) -> list[R]:
    """Run every unit; if any failed, remove what the others wrote and raise the first error.

    ``fn`` must remove what it wrote itself before it raises. If the runner itself fails (a
    Spark job lost), the results are gone: ``lost`` removes what it can find, best effort.
    """
    try:
        outcomes = run(guarded, [(fn, u) for u in units])
    except BaseException:
        if lost is not None:
            lost()
        raise
    failed = [o.error for o in outcomes if isinstance(o, _Failed)]
    if failed:
        delete_quietly(io, [p for o in outcomes if not isinstance(o, _Failed) for p in written(o)])
        raise failed[0]
    return outcomes


def raise_if_none_committed(failed: Sequence[str], done: Sequence[object]) -> None:
    """With partial progress, a run whose every group commit failed is a conflict (naming the
    first failure); a run that committed some groups returns them, its failures in the metrics.

    Raises:
        CommitConflictError: ``failed`` holds failures and ``done`` no commit.
    """
    if failed and not done:
        msg = failed[0] if len(failed) == 1 else f"{failed[0]} (and {len(failed) - 1} more commits)"
        raise CommitConflictError(msg)
