"""Spark Connect's task DataFrames: a Python data source whose partitions are icemor's tasks.

On a classic session, a scan's (or a maintenance action's) tasks are an RDD
(``SparkContext.parallelize``), one partition each, which Spark's planner sizes as unknown, so
as large: a join never broadcasts a scan read from it. A Connect client has no RDDs. Its local
relations and ranges are sized by their few rows, so a scan built on them looked a few
kilobytes large and Spark broadcast whole tables joined with it (seen: the 900 k-row scan side
of a join broadcast instead of a 100 k-row range). A Python data source (PySpark 4, public)
reports no size either; its partitions are exactly the task groups, and its reader runs the
work function itself (no second Python hop through ``mapInArrow``).

The tasks travel in one option (base64 of the pickled groups, function and Arrow schema) to the
server's planning worker, which makes one input partition per group. The reader is pickled for
every Spark task before that: it drops the groups when pickled, so each task carries its own
group only (in its partition), with the function and the schema.
"""

from __future__ import annotations

import base64
import pickle
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ["NAME", "TASKS_OPTION", "TaskSource", "encode_tasks"]

NAME = "icemor_tasks"
TASKS_OPTION = "tasks"
TASK_COLUMN = "task"


def encode_tasks(
    groups: Sequence[Sequence[bytes]],
    fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    schema: pa.Schema,
) -> str:
    """The option value: ``groups`` (one list of task blobs per partition), the function each
    partition's task runs over its blobs, and the Arrow schema it yields (Spark's schema of the
    read, as Spark checks the batches against it)."""
    # the work apart, pickled once more: the planning worker unpickles the groups only (the
    # work's functions are icemor's: only the executors' workers import them)
    work = pickle.dumps((fn, schema))
    return base64.b64encode(pickle.dumps(([list(g) for g in groups], work))).decode("ascii")


class TaskSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.read.format("icemor_tasks").schema(S).option("tasks", encode_tasks(...)).load()``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def reader(self, schema: Any) -> DataSourceReader:
        return _TaskReader(self.options[TASKS_OPTION])


class _TaskReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    def __init__(self, encoded: str) -> None:
        groups, self._work = pickle.loads(base64.b64decode(encoded))
        self._groups: list[list[bytes]] | None = groups

    def __getstate__(self) -> dict[str, Any]:
        # every Spark task gets the reader: the blobs go in the partitions, each to its own task
        return {**self.__dict__, "_groups": None}

    def partitions(self) -> list[InputPartition]:
        assert self._groups is not None
        return [InputPartition(group) for group in self._groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        fn, schema = pickle.loads(self._work)
        tasks = pa.record_batch([pa.array(partition.value, pa.binary())], names=[TASK_COLUMN])
        for batch in fn(iter([tasks])):
            # Spark checks each batch's schema exactly (mapInArrow is lenient about nullability)
            yield batch if batch.schema.equals(schema) else batch.cast(schema)
