"""The local engine: scan tasks on a thread pool, batches streamed through a bounded queue.

pyarrow releases the GIL while decoding Parquet and in its compute kernels, and the numpy
mask work is vectorised, so threads scale across cores. Memory stays bounded: at most
``queue_size`` finished batches wait for the consumer, plus one batch in flight per worker.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pyarrow as pa

from icemor.io.reader import count_task, read_run, read_task

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from pyiceberg.io import FileIO

    from icemor.engines import Runner
    from icemor.io.reader import ReadOptions
    from icemor.planning.scan_job import ScanJob
    from icemor.spec.tasks import FileScanTask

__all__ = ["count_rows", "default_workers", "map_ordered", "read_batches", "runner", "stream"]

T = TypeVar("T")
R = TypeVar("R")

_DONE = object()


def default_workers() -> int:
    return int(os.environ.get("ICEMOR_WORKERS", "0")) or (os.cpu_count() or 1)


def stream(
    tasks: Sequence[T],
    produce: Callable[[T], Iterable[R]],
    *,
    workers: int | None = None,
    queue_size: int = 4,
) -> Iterator[R]:
    """Run ``produce`` over ``tasks`` on a pool and yield results as they come.

    Errors in a worker are raised in the consumer; closing the iterator early stops the workers.
    """
    workers = max(1, min(workers or default_workers(), len(tasks) or 1))
    if not tasks:
        return
    q: queue.Queue[object] = queue.Queue(maxsize=queue_size + workers)
    stop = threading.Event()
    next_task = iter(range(len(tasks)))
    lock = threading.Lock()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    i = next(next_task, None)
                if i is None:
                    break
                for item in produce(tasks[i]):
                    if not put(("item", item)):
                        return
        except BaseException as e:
            put(("error", e))
        finally:
            put(("done", None))

    threads = [threading.Thread(target=worker, daemon=True, name=f"icemor-scan-{i}") for i in range(workers)]
    for t in threads:
        t.start()
    finished = 0
    try:
        while finished < workers:
            kind, value = cast("tuple[str, Any]", q.get())
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                finished += 1
    finally:
        stop.set()
        for t in threads:
            t.join()


def map_ordered(tasks: Sequence[T], fn: Callable[[T], R], *, workers: int | None = None) -> list[R]:
    """``fn`` over ``tasks`` on a pool; results in task order."""
    if not tasks:
        return []
    if len(tasks) == 1:  # a pool costs ~1 ms to start and join, and a hand-off: nothing to share
        return [fn(tasks[0])]
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(fn, tasks))


def read_batches(job: ScanJob, *, workers: int | None = None) -> Iterator[pa.RecordBatch]:
    """The scan's live rows, streamed from a thread pool (in no particular order)."""
    pieces = [t for ct in job.plan_tasks() for t in ct.tasks]
    # biggest first keeps all threads busy to the end
    pieces.sort(key=lambda t: -t.size_in_bytes())
    io, opts = job.io, job.options
    workers = workers or default_workers()
    if len(pieces) >= 2 * workers:
        # a file per core already keeps every core busy: parallel column decoding on Arrow's
        # pool would only add hand-offs (measured ~5% of a wide scan)
        opts = replace(opts, decode_threads=False)
    if len(pieces) > SMALL_PIECES * workers:
        # many small pieces (a streamed table's files): runs of them per hand-off, their batches
        # coalesced, so that the queue and the consumer see thousands of rows at a time, not
        # one 100-row batch per file (20,000 hand-offs fought the workers for the GIL)
        size = min(64, len(pieces) // (SMALL_PIECES * workers))
        runs = [pieces[i : i + size] for i in range(0, len(pieces), size)]
        batches = stream(runs, lambda run: _coalesced(io, run, opts), workers=workers)
    else:
        batches = stream(pieces, lambda t: read_task(io, t, opts), workers=workers)
    if job.residual is None:
        return batches
    from icemor.expr.duck import filter_batches  # noqa: PLC0415 - cost: duckdb ~0.1 s (a plain read)

    return filter_batches(batches, job.residual, job.arrow_schema.names)


SMALL_PIECES = 16
"""Pieces per worker above which pieces are read in runs (see :func:`read_batches`)."""
COALESCE_ROWS = 65_536
"""Rows, and :data:`COALESCE_BYTES` bytes, at which small batches joined so far are handed off."""
COALESCE_BYTES = 16 << 20


def _coalesced(io: FileIO, run: Sequence[FileScanTask], opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The batches of a run of pieces in order, small ones joined into batches of ~``COALESCE_ROWS`` rows."""
    held: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in read_run(io, run, opts):  # small files' deletes applied to many at once
        if batch.num_rows >= COALESCE_ROWS:
            if held:  # rows read before it go first: the order is the uncoalesced one
                yield from _joined(held)
                held, rows, size = [], 0, 0
            yield batch
            continue
        held.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= COALESCE_ROWS or size >= COALESCE_BYTES:
            yield from _joined(held)
            held, rows, size = [], 0, 0
    if held:
        yield from _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """``batches`` (one schema) as one batch; ``pa.concat_batches`` needs pyarrow 19."""
    if len(batches) == 1:
        return batches
    # one chunk per column after combining, unless a column outgrows its offsets: then several
    joined: list[pa.RecordBatch] = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return joined


def count_rows(job: ScanJob, *, workers: int | None = None) -> int:
    """Number of live rows, without reading data where position deletes alone apply."""
    if job.residual is not None:  # the condition needs the rows
        return sum(b.num_rows for b in read_batches(job, workers=workers))
    pieces = [t for ct in job.plan_tasks() for t in ct.tasks]
    io, opts = job.io, job.options
    workers = workers or default_workers()
    # runs of pieces per hand-off: 20,000 small files were 20,000 futures
    size = max(1, min(64, len(pieces) // (SMALL_PIECES * workers)))
    runs = [pieces[i : i + size] for i in range(0, len(pieces), size)]
    return sum(map_ordered(runs, lambda run: sum(count_task(io, t, opts) for t in run), workers=workers))


def runner(
    io: FileIO, *, workers: int | None = None, progress: Callable[[int, int], None] | None = None
) -> Runner:
    """Run per-item work ``fn(io, item)`` on the thread pool, results in item order.

    ``progress(done, total)`` is called (from the workers, serialised) as each item finishes.
    """

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        if progress is None:
            return map_ordered(items, lambda item: fn(io, item), workers=workers)
        lock = threading.Lock()
        done = [0]

        def one(item: Any) -> Any:
            result = fn(io, item)
            with lock:
                done[0] += 1
                progress(done[0], len(items))
            return result

        return map_ordered(items, one, workers=workers)

    return run
