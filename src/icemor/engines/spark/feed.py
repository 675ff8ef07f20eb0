"""The change feed on Spark: changed rows read by icemor's reader in the Python workers, per-snapshot
carry-overs, update pairs and the net change computed by Spark SQL.

The driver plans from metadata only (:func:`icemor.planning.changes.plan_changes`). One task per
changed file finds its changed positions (:func:`icemor.io.changes.row_sets`, delete files read
there) and reads those rows, as the scan's Python-worker strategy does: neither positions nor
rows come back to the driver. The SQL then does what :mod:`icemor.io.changes` does locally:
equal delete/insert pairs of a snapshot cancel, a key's single delete and insert in a snapshot
become an update, and with ``net`` the balance of each distinct row over the range remains.
"""

from __future__ import annotations

import pickle
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as st

from icemor.engines.spark import _arrow_schema
from icemor.engines.spark.session_kind import map_tasks
from icemor.engines.spark.types import spark_schema
from icemor.engines.spark.worker import file_io, io_spec
from icemor.io.changes import (
    CHANGE_COLUMNS,
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    FileChange,
    RowSet,
    read_rows,
    row_sets,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.io import FileIO
    from pyspark.sql import Column, DataFrame, SparkSession

    from icemor.io.reader import ReadOptions
    from icemor.planning.changes import ChangeJob

__all__ = ["changes_to_dataframe"]

_RANK = {DELETE: 0, UPDATE_BEFORE: 1, UPDATE_AFTER: 2, INSERT: 3}


def _may_insert(change: FileChange) -> bool:
    """Whether a changed file can yield inserted rows: it is new, or a delete file stopped applying."""
    return change.before is None or (change.after is not None and not set(change.before) <= set(change.after))


def _may_delete(change: FileChange) -> bool:
    return change.before is not None


def _read_part(batches: Iterator[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Each row: a pickled (io spec, file change, find options, read options, ordinal, snapshot
    id); find its changed rows and yield them in ``target`` (the whole table's columns, those not
    read NULL, then the change columns). Positions never leave the executor."""
    for batch in batches:
        for blob in batch.column(0).to_pylist():
            (props, location), change, find_opts, opts, ordinal, snapshot_id = pickle.loads(blob)
            io = file_io(props, location)
            for rows in row_sets(io, change, find_opts):
                yield from _rows_as(target, io, rows, opts, ordinal, snapshot_id)


def _rows_as(
    target: pa.Schema, io: FileIO, rows: RowSet, opts: ReadOptions, ordinal: int, snapshot_id: int
) -> Iterator[pa.RecordBatch]:
    for out in read_rows(io, rows, opts):
        n = out.num_rows
        columns = [
            out.column(f.name).cast(f.type) if f.name in out.schema.names else pa.nulls(n, f.type)
            for f in target
            if f.name not in CHANGE_COLUMNS
        ]
        columns += [
            pa.repeat(pa.scalar(rows.kind, pa.string()), n),
            pa.repeat(pa.scalar(ordinal, pa.int32()), n),
            pa.repeat(pa.scalar(snapshot_id, pa.int64()), n),
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=target)


def changes_to_dataframe(job: ChangeJob, spark: SparkSession) -> DataFrame:
    """The change feed as a DataFrame computed on the executors (rows as the local engine's)."""
    io = job.io
    spec = io_spec(io, job.metadata.location)
    full = job.full_options
    table_fields = spark_schema(full.projected_schema, full.arrow_schema).fields
    schema = st.StructType(
        [st.StructField(f.name, f.dataType, True) for f in table_fields]
        + [
            st.StructField(CHANGE_TYPE, st.StringType(), False),
            st.StructField(CHANGE_ORDINAL, st.IntegerType(), False),
            st.StructField(COMMIT_SNAPSHOT_ID, st.LongType(), False),
        ]
    )
    target = _arrow_schema(schema)
    blobs = []
    for step in (s for s in job.planned if s.files):
        # carry-overs need every column where a snapshot may both delete and insert: judged from
        # metadata, so that the changed positions are found and read in one task per file
        both = any(_may_insert(c) for c in step.files) and any(_may_delete(c) for c in step.files)
        opts = full if both or job.net else job.options  # the options read the condition's columns
        blobs += [
            pickle.dumps((spec, c, job.options, opts, step.ordinal, step.snapshot_id)) for c in step.files
        ]
    if not blobs:
        df = spark.createDataFrame([], schema)
    else:
        df = map_tasks(spark, blobs, partial(_read_part, target=target), schema)
    if job.residual is not None:
        df = df.filter(F.expr(job.residual))
    columns = [f.name for f in table_fields]
    df = _cancel_carryovers(df, columns)
    if job.net:
        df = _net(df, columns)
        if job.key:
            df = _pair_updates(df, [F.lit(0)], list(job.key))
    elif job.key:
        df = _pair_updates(df, [F.col(CHANGE_ORDINAL)], list(job.key))
    rank = F.create_map(*[x for k, v in _RANK.items() for x in (F.lit(k), F.lit(v))])
    out = [*job.output_names, *CHANGE_COLUMNS]
    return df.orderBy(CHANGE_ORDINAL, rank[F.col(CHANGE_TYPE)], *job.key or ()).select(*out)


def _is_insert() -> Column:
    return F.col(CHANGE_TYPE).isin(INSERT, UPDATE_AFTER)


def _cancel_carryovers(df: DataFrame, columns: list[str]) -> DataFrame:
    """Drop equal (delete, insert) pairs of one snapshot, as a multiset."""
    group = [CHANGE_ORDINAL, *columns]
    n = F.row_number().over(Window.partitionBy(*group, CHANGE_TYPE).orderBy(F.lit(1)))
    inserts = F.sum(F.when(_is_insert(), 1).otherwise(0)).over(Window.partitionBy(*group))
    deletes = F.sum(F.when(_is_insert(), 0).otherwise(1)).over(Window.partitionBy(*group))
    return (
        df.withColumn("__n", n)
        .withColumn("__pairs", F.least(inserts, deletes))
        .filter(F.col("__n") > F.col("__pairs"))
        .drop("__n", "__pairs")
    )


def _net(df: DataFrame, columns: list[str]) -> DataFrame:
    """Per distinct row, its balance over the range: the last inserts or the first deletes remain."""
    balance = F.sum(F.when(_is_insert(), 1).otherwise(-1)).over(Window.partitionBy(*columns))
    side = Window.partitionBy(*columns, _is_insert())
    newest = F.row_number().over(side.orderBy(F.col(CHANGE_ORDINAL).desc()))
    oldest = F.row_number().over(side.orderBy(F.col(CHANGE_ORDINAL).asc()))
    kept = (
        df.withColumn("__b", balance)
        .withColumn("__new", newest)
        .withColumn("__old", oldest)
        .filter(
            (_is_insert() & (F.col("__b") > 0) & (F.col("__new") <= F.col("__b")))
            | (~_is_insert() & (F.col("__b") < 0) & (F.col("__old") <= -F.col("__b")))
        )
        .drop("__b", "__new", "__old")
    )
    return kept.withColumn(CHANGE_TYPE, F.when(_is_insert(), F.lit(INSERT)).otherwise(F.lit(DELETE)))


def _pair_updates(df: DataFrame, scope: list[Any], key: list[str]) -> DataFrame:
    """A key's one delete and one insert within ``scope`` become update_before / update_after."""
    w = Window.partitionBy(*scope, *key)
    inserts = F.sum(F.when(_is_insert(), 1).otherwise(0)).over(w)
    deletes = F.sum(F.when(_is_insert(), 0).otherwise(1)).over(w)
    pair = (inserts == 1) & (deletes == 1)
    kind = (
        F.when(pair & _is_insert(), F.lit(UPDATE_AFTER))
        .when(pair, F.lit(UPDATE_BEFORE))
        .when(_is_insert(), F.lit(INSERT))
        .otherwise(F.lit(DELETE))
    )
    return df.withColumn(CHANGE_TYPE, kind)
