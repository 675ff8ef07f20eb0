"""Split planned files into byte ranges and combine small ones into tasks (Iceberg's TableScanUtil).

As Iceberg Java plans them: files are split at their ``split_offsets`` (Parquet row-group starts)
into pieces of about ``read.split.target-size``; pieces are bin-packed into tasks of that size
where each piece weighs at least ``read.split.open-file-cost`` per file opened (data and
delete files alike), looking back over ``read.split.planning-lookback`` open bins.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icemor.spec.tasks import CombinedScanTask, FileScanTask

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

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


def _weight(task: FileScanTask, open_file_cost: int) -> int:
    return max(task.size_in_bytes(), (1 + len(task.delete_files)) * open_file_cost)


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
    bins: list[tuple[int, list[FileScanTask]]] = []
    done: list[CombinedScanTask] = []
    for piece in pieces:
        w = _weight(piece, options.open_file_cost)
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
