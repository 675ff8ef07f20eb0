"""Executor-side helpers of the Spark engine: FileIO per executor process, task decoding.

Tasks travel pickled; a FileIO does not, so it travels as (properties, location) and each
Python worker keeps one FileIO per such key (workers are reused, so it lives across tasks).
"""

from __future__ import annotations

import gc
import pickle
import sys
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.io import load_file_io

from icemor.engines.spark import _compat
from icemor.io.uuids import to_text_batch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

    from pyiceberg.io import FileIO

    from icemor.io.reader import ReadOptions
    from icemor.spec.tasks import CombinedScanTask

__all__ = [
    "RESULT_SCHEMA",
    "ROWS_COLUMN",
    "IOSpec",
    "file_io",
    "freeze_survivors",
    "io_spec",
    "item_blob",
    "read_partition",
    "result_batch",
    "results",
    "run_blobs",
    "run_items",
    "task_blob",
]

IOSpec = tuple[tuple[tuple[str, str], ...], str]
"""A FileIO as it can be pickled: its sorted properties and the table location."""

_IO_CACHE: dict[IOSpec, FileIO] = {}


def io_spec(io: FileIO, location: str) -> IOSpec:
    """The picklable description of ``io`` for executors."""
    return tuple(sorted((str(k), str(v)) for k, v in io.properties.items())), location


def file_io(properties: tuple[tuple[str, str], ...], location: str) -> FileIO:
    """The FileIO of this worker process for ``(properties, location)`` (created once).

    Every icemor task on a Python worker starts here, so this is also where the worker stops
    re-reading PySpark's archives before each later task (:func:`spare_zip_rescans`).
    """
    _compat.spare_zip_rescans()
    key = (properties, location)
    io = _IO_CACHE.get(key)
    if io is None:
        io = _IO_CACHE[key] = load_file_io(dict(properties), location)
    return io


def task_blob(spec: IOSpec, combined: CombinedScanTask, options: ReadOptions) -> bytes:
    """One Spark row's payload: a combined task with what reading it needs."""
    return pickle.dumps((spec, combined, options))


ROWS_COLUMN = "_icemor_rows"
"""The all-null column a scan of no columns carries through Spark (see ``_python_dataframe``)."""


def read_partition(batches: Iterator[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Unpickle each task row and stream its batches in the Spark Arrow schema ``target``."""
    # not at the top: every Python worker that unpickles a function of this package imports it
    # (the task-row workers of map_tasks too, which read nothing)
    from icemor.io.reader import read_run  # noqa: PLC0415 - cost: ~1 s a worker

    for batch in batches:
        for blob in batch.column(0).to_pylist():
            (props, location), combined, opts = pickle.loads(blob)
            io = file_io(props, location)
            # the pieces in a row: small files' deletes and projection applied to many at once
            for out in read_run(io, combined.tasks, opts):
                if not out.num_columns and target.names == [ROWS_COLUMN]:
                    yield pa.record_batch([pa.nulls(out.num_rows, pa.bool_())], schema=target)
                else:
                    yield to_text_batch(out, target)
    freeze_survivors()


_PEAK_AT_FULL = [0]
"""This worker's peak memory (bytes) right after its last full collection (see :func:`freeze_survivors`)."""
MEMORY_SLACK = 256 << 20
"""Bytes of peak memory allowed beyond twice the peak at the last full collection before another."""
TASKS_PER_FULL = 256
"""Where the platform does not tell the peak memory: tasks between full collections."""
_TASKS_SINCE_FULL = [0]


def freeze_survivors(*, collect: bool = True) -> None:
    """End of a task in a reused Python worker: collect its garbage, then exempt what survives
    (the delete cache, equality verdicts, memos) from later full collections.

    PySpark's worker runs ``gc.collect()`` after every task; over the ~0.5 M objects a worker
    holds once it has read a table of 20,000 small files, each took 0.1-1 s, most of a small
    task (647 tasks of 31 files: most of the scan). Frozen objects are still freed when no
    longer referenced; a reference cycle among them would outlive its use, so once the
    process's peak memory exceeds twice its peak at the last full collection (plus
    :data:`MEMORY_SLACK`), everything is thawed and collected in full: frozen garbage cannot
    grow without bound, and full collections stay rare. The signal is the peak resident memory
    (one system call): counting the frozen objects (``gc.get_freeze_count``) walks all of them,
    57 ms a task over that worker's heap, which was 90% of the scan.

    Args:
        collect: Collect the young generations first (False when PySpark just did).
    """
    peak = _peak_memory()
    _TASKS_SINCE_FULL[0] += 1
    due = peak > 2 * _PEAK_AT_FULL[0] + MEMORY_SLACK if peak else _TASKS_SINCE_FULL[0] >= TASKS_PER_FULL
    if due:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _PEAK_AT_FULL[0] = _peak_memory()
        _TASKS_SINCE_FULL[0] = 0
        return
    if collect:
        gc.collect()
    gc.freeze()


def _peak_memory() -> int:
    """This process's peak resident memory in bytes; 0 where the platform does not tell it."""
    try:
        import resource  # noqa: PLC0415 - optional: POSIX only
    except ImportError:  # (Windows)
        return 0
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024  # (Linux counts KiB)


RESULT_SCHEMA = "result binary"
"""The ``mapInArrow`` output schema of tasks whose rows are :func:`result_batch`'s."""


def result_batch(result: Any) -> pa.RecordBatch:
    """A task's result as one row of :data:`RESULT_SCHEMA`: only this travels to the driver, pickled."""
    return pa.record_batch([pa.array([pickle.dumps(result)], pa.binary())], names=["result"])


def results(rows: Iterable[Any]) -> list[Any]:
    """The task results in collected rows of :data:`RESULT_SCHEMA` (undoing :func:`result_batch`)."""
    return [pickle.loads(r["result"]) for r in rows]


def run_items(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run each pickled ``(io spec, fn, item)`` row as ``fn(io, item)``; yield the pickled results."""
    for batch in batches:
        for blob in batch.column(0).to_pylist():
            (props, location), fn, item = pickle.loads(blob)
            yield result_batch(fn(file_io(props, location), item))


def run_blobs(blobs: Iterable[bytes]) -> Iterator[bytes]:
    """:func:`run_items` over an RDD's elements: each pickled ``(io spec, fn, item)`` run as
    ``fn(io, item)``, its result pickled."""
    for blob in blobs:
        (props, location), fn, item = pickle.loads(blob)
        yield pickle.dumps(fn(file_io(props, location), item))


def item_blob(spec: IOSpec, fn: Callable[[FileIO, Any], Any], item: Any) -> bytes:
    """One Spark row's payload for :func:`run_items`."""
    return pickle.dumps((spec, fn, item))
