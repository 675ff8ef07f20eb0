"""Run per-key work over a Spark DataFrame: every row of a key in one task, results to the driver.

A change batch is written by units that own disjoint sets of keys: the DataFrame is
repartitioned by the key columns, so all changes of one key meet in one task (which can then
order them and see which were superseded), and each task hands its rows, as one Arrow table, to
the work function. Only the pickled results come back to the driver. When no order column is
given, the row order of the DataFrame is captured first, before the shuffle, with
``monotonically_increasing_id`` (increasing with partition, then row, as the input was read).

The tasks write through the write's staging (:class:`icemor.engines.spark.write.Staging`): a
failed job leaves nothing (see :func:`run_per_key`), and files of attempts Spark did not keep go
when the caller finishes the staging after its commit.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import functions as F

from icemor.engines.spark import _arrow_schema
from icemor.engines.spark.native import listing_skips, parquet_reader, spark_file_path
from icemor.engines.spark.session_kind import parallelism
from icemor.engines.spark.worker import RESULT_SCHEMA, file_io, io_spec, result_batch, results
from icemor.engines.spark.write import Staging, job_group, settle, staged_io, whole_input
from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence

    from pyiceberg.io import FileIO
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["arrow_schema", "read_parquet_in_order", "run_per_key", "staged_parquet"]


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of the batches Spark hands to Python for ``df`` (timestamps in UTC)."""
    return _arrow_schema(df.schema)


def read_parquet_in_order(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The rows of Parquet files as one DataFrame whose row order is the files' order, then theirs.

    ``spark.read.parquet(*paths)`` packs files into partitions largest first; a union of one
    read per file keeps the partitions of each file, and the files, in the order given.

    Raises:
        InvalidArgumentError: A file named as Spark's listing skips it (it would read as empty).
    """
    for p in paths:
        if listing_skips(p):
            msg = f"{p}: Spark skips files named like this (hidden or temporary); rename it"
            raise InvalidArgumentError(msg)
    # proleptic dates as the local engine reads the same files (pyarrow), not Spark's refusal
    frames = [parquet_reader(spark).parquet(p) for p in paths]
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


@contextmanager
def staged_parquet(
    spark: SparkSession,
    io: FileIO,
    location: str,
    paths: Sequence[str],
    properties: Mapping[str, str] | None = None,
) -> Generator[DataFrame, None, None]:
    """Parquet files on the driver's disk as a DataFrame that executors anywhere can read.

    Executors on other hosts cannot open a driver-local path. Each file is copied, a chunk at a
    time, under a staging directory in the table's data path (``<write.data.path>/_icemor-staging/
    <id>/``, :class:`icemor.engines.spark.write.Staging`; the warehouse is the one storage every
    executor shares) and read from there in the given order
    (:func:`read_parquet_in_order`); the copies are removed when the block ends.

    Raises:
        InvalidArgumentError: A file named as Spark's listing skips it (as
            :func:`read_parquet_in_order`, so both ways of handing changes to Spark agree).
    """
    for p in paths:
        if listing_skips(p):
            msg = f"{p}: Spark skips files named like this (hidden or temporary); rename it"
            raise InvalidArgumentError(msg)
    staging = Staging(io, location, properties)
    staged: list[str] = []
    try:
        for i, p in enumerate(paths):
            target = f"{staging.root}/{i:05d}.parquet"
            staged.append(target)
            with open(p, "rb") as src, io.new_output(target).create(overwrite=True) as out:
                shutil.copyfileobj(src, out, 8 << 20)
        # Spark's own form of a local path; any other scheme as the warehouse names it
        yield read_parquet_in_order(spark, [spark_file_path(s) or s for s in staged])
    finally:
        for s in staged:
            with contextlib.suppress(OSError):
                io.delete(s)
        staging.finish()  # nothing announced is left: it removes the prefix


def run_per_key(
    df: DataFrame,
    io: FileIO,
    location: str,
    fn: Callable[[FileIO, pa.Table, int], Any],
    *,
    key: Sequence[str],
    sequence_column: str | None,
    staging: Staging,
    partitions: int | None = None,
) -> list[Any]:
    """Run ``fn(io, rows, task)`` on the executors, once per non-empty partition of ``df`` by key.

    Every file ``fn`` writes is announced under ``staging`` first
    (:func:`~icemor.engines.spark.write.staged_io`). When the job fails, nothing it wrote stays:
    a task that raises removes its files, a task whose input Spark cut short fails before
    ``fn`` runs (:func:`~icemor.engines.spark.write.whole_input`), and here, once no task of the
    job runs any more, every announced file is removed (``staging.finish(())``) before the
    error goes on. After a success the caller finishes ``staging`` keeping the files it commits.

    Args:
        df: The rows.
        io: The table's FileIO (rebuilt on each executor from its properties).
        location: The table location (for the FileIO).
        fn: A picklable function; ``rows`` are all the rows of the task's keys, ``task`` the
            partition number (unique within this call).
        key: The columns whose values decide the task.
        sequence_column: When given, add this column holding each row's place in ``df``'s order.
        staging: Where the tasks announce their files.
        partitions: The number of tasks; default the session's default parallelism. One task
            takes the DataFrame's partitions unshuffled (``coalesce(1)``): for small batches.
    """
    spark = df.sparkSession
    if sequence_column is not None:
        df = df.withColumn(sequence_column, F.monotonically_increasing_id())
    n = partitions or parallelism(spark)
    # one task holds every key anyway: no shuffle then (a Spark job and stage less)
    shuffled = df.coalesce(1) if n == 1 else df.repartition(n, *[df[k] for k in key])
    spec = io_spec(io, location)
    target = arrow_schema(df)
    prefix = staging.prefix

    def work(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # the whole input or a failure: never the batches before a cut taken for all of them
        held = [b for b in whole_input(batches) if b.num_rows]
        if not held:
            return
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        rows = pa.Table.from_batches(held)
        if rows.schema != target:
            rows = rows.cast(target)
        staged, recorder = staged_io(file_io(*spec), prefix)
        with recorder.removed_on_failure():
            result = fn(staged, rows, task)
        yield result_batch(result)

    group = f"icemor-cdc-{uuid.uuid4().hex}"
    try:
        with job_group(spark, group) as group:
            collected = shuffled.mapInArrow(work, RESULT_SCHEMA).collect()
    except BaseException:
        settle(spark, group, failed=True)  # tasks Spark still cancels write on meanwhile
        staging.finish(())
        raise
    settle(spark, group, failed=False)  # a speculative copy still running may write more
    return results(collected)
