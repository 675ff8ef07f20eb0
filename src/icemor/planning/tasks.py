"""Split planned files into byte ranges and combine small ones into tasks (Iceberg's TableScanUtil).

As Iceberg Java plans them: files are split at their ``split_offsets`` (Parquet row-group starts)
into pieces of about ``read.split.target-size``; pieces are bin-packed into tasks of that size
where each piece weighs at least ``read.split.open-file-cost`` per file opened (data and
delete files alike), looking back over ``read.split.planning-lookback`` open bins.

One difference: a delete file that applies to several pieces is decoded once per process
(:mod:`icemor.io.cache`), not once per piece as Java's weight assumes, so its open cost and
bytes are shared out over the pieces it applies to. A delete file of one piece weighs as in
Java. With 50 global equality-delete files, Java's weight (1 + 50) x 4 MiB put each of 20,000
small files in a task of its own (20,000 Spark tasks); shared out, they combine to the target.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icemor.spec.tasks import CombinedScanTask, FileScanTask

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from icemor.spec.files import DeleteFileRef
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "READ_SPLIT_LOOKBACK",
    "READ_SPLIT_OPEN_FILE_COST",
    "READ_SPLIT_TARGET_SIZE",
    "SplitOptions",
    "plan_tasks",
]

# Table property names and defaults exactly as Iceberg Java's TableProperties.
READ_SPLIT_TARGET_SIZE = "read.split.target-size"
READ_SPLIT_OPEN_FILE_COST = "read.split.open-file-cost"
READ_SPLIT_LOOKBACK = "read.split.planning-lookback"


@dataclass(frozen=True, slots=True)
class SplitOptions:
    target_size: int = 128 * 1024 * 1024
    open_file_cost: int = 4 * 1024 * 1024
    lookback: int = 10

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: int | None) -> SplitOptions:
        def pick(key: str, prop: str, default: int) -> int:
            value = overrides.get(key)
            if value is not None:
                return value
            return int(properties.get(prop, default))

        d = cls()
        return cls(
            target_size=pick("target_size", READ_SPLIT_TARGET_SIZE, d.target_size),
            open_file_cost=pick("open_file_cost", READ_SPLIT_OPEN_FILE_COST, d.open_file_cost),
            lookback=pick("lookback", READ_SPLIT_LOOKBACK, d.lookback),
        )


def split_file(planned: PlannedFile, target_size: int) -> list[FileScanTask]:
    """Split a data file larger than ``target_size`` into one piece per row group (its offsets).

    As Iceberg Java's OffsetsAwareSplitScanTaskIterator; bin packing then recombines pieces.
    Files without valid offsets stay whole (a reader assigns row groups by start offset).
    """
    f = planned.data_file
    offsets = [o for o in (f.split_offsets or ()) if 0 <= o < f.file_size_in_bytes]
    valid = len(offsets) > 1 and all(a < b for a, b in itertools.pairwise(offsets))
    if not valid or f.file_size_in_bytes <= target_size:
        return [FileScanTask(f, planned.delete_files, 0, f.file_size_in_bytes)]
    bounds = [*offsets, f.file_size_in_bytes]
    # the first piece starts at 0 so it also owns anything before the first offset
    starts = [0, *offsets[1:]]
    return [
        FileScanTask(f, planned.delete_files, start, end - start)
        for start, end in zip(starts, bounds[1:], strict=True)
    ]


def _delete_shares(pieces: Sequence[FileScanTask]) -> dict[int, tuple[float, float]]:
    """For each delete-file tuple (by id): (its files' bytes, their count), each delete file
    divided by the number of pieces it applies to.

    The planner gives pieces with the same delete files one tuple object, so the work is per
    distinct tuple, not per piece.
    """
    tuples: dict[int, tuple[tuple[DeleteFileRef, ...], int]] = {}
    for piece in pieces:
        deletes = piece.delete_files
        if deletes:
            known = tuples.get(id(deletes))
            tuples[id(deletes)] = (deletes, 1 if known is None else known[1] + 1)
    uses: dict[str, int] = {}
    for deletes, n in tuples.values():
        for d in deletes:
            uses[d.path] = uses.get(d.path, 0) + n
    shares: dict[int, tuple[float, float]] = {}
    for key, (deletes, _) in tuples.items():
        size = sum((d.content_size_in_bytes or d.file_size_in_bytes) / uses[d.path] for d in deletes)
        shares[key] = (size, sum(1 / uses[d.path] for d in deletes))
    return shares


def _weight(task: FileScanTask, open_file_cost: int, shares: Mapping[int, tuple[float, float]]) -> int:
    """Java's ``max(bytes, files opened x open cost)``, with shared delete files shared out."""
    size, files = shares.get(id(task.delete_files), (0.0, 0.0)) if task.delete_files else (0.0, 0.0)
    return max(task.length + math.ceil(size), math.ceil((1 + files) * open_file_cost))


def plan_tasks(
    files: Iterable[PlannedFile], options: SplitOptions, *, split: bool = True
) -> list[CombinedScanTask]:
    """Split then bin-pack (first fit over the last ``lookback`` open bins, as Iceberg's BinPacking).

    ``split=False`` keeps every file whole: each one is read by one task, from its first row.
    """
    size = options.target_size
    pieces = [
        t
        for pf in files
        for t in split_file(pf, size if split else max(size, pf.data_file.file_size_in_bytes))
    ]
    shares = _delete_shares(pieces)
    bins: list[tuple[int, list[FileScanTask]]] = []
    done: list[CombinedScanTask] = []
    for piece in pieces:
        w = _weight(piece, options.open_file_cost, shares)
        for i, (used, items) in enumerate(bins):
            if used + w <= options.target_size:
                items.append(piece)
                bins[i] = (used + w, items)
                break
        else:
            bins.append((w, [piece]))
            if len(bins) > options.lookback:
                # as Iceberg's BinPacking (largest bin first): open the new bin, then close the
                # fullest of lookback + 1 bins, which may be the new one
                fullest = max(range(len(bins)), key=lambda i: bins[i][0])
                done.append(CombinedScanTask(tuple(bins.pop(fullest)[1])))
    done.extend(CombinedScanTask(tuple(items)) for _, items in bins)
    return done
