"""The native Spark strategy: Spark's vectorised Parquet reader, deletes applied as anti-joins.

The semantics stay in the shared core: the planner decides which delete files apply to which
data file (sequence numbers, scoping, pruning), and position deletes and deletion vectors
are decoded on the executors by :func:`icemor.io.deletes.deleted_positions`. Spark only
executes the result as plans:

- data files are read by Iceberg field id (``spark.sql.parquet.fieldId.read.enabled``), with
  ``_metadata.file_path`` / ``_metadata.row_index`` as each row's position;
- deleted positions anti-join on (file, position);
- equality deletes anti-join, per group of data files sharing the same applicable delete
  files, on NULL-safe equality (``<=>``) of the equality columns.

A scan this strategy cannot express exactly returns None and the caller uses the Python-
worker strategy instead; the conditions are in :func:`_ineligible`.
"""

from __future__ import annotations

import pickle
import re
from functools import reduce
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundEqualTo,
    BoundGreaterThan,
    BoundGreaterThanOrEqual,
    BoundIn,
    BoundIsNaN,
    BoundIsNull,
    BoundLessThan,
    BoundLessThanOrEqual,
    BoundNotEqualTo,
    BoundNotIn,
    BoundNotNaN,
    BoundNotNull,
    BoundStartsWith,
    Not,
    Or,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
)

from icemor.engines.spark.types import spark_type
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyiceberg.expressions import BooleanExpression
    from pyspark.sql import Column, DataFrame, SparkSession

    from icemor.planning.planner import PlannedFile
    from icemor.table import Scan

__all__ = ["native_dataframe", "native_ineligibility", "spark_file_path"]

_FP, _POS, _FID = "__icemor_fp", "__icemor_pos", "__icemor_fid"
# Paths whose URI form Spark reports unchanged (no percent-encoding can differ).
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9._/=:+-]+$")
# Types whose equality Spark's <=> decides exactly as Iceberg Java does (floats are excluded:
# Spark normalises -0.0 to 0.0 in joins, Java's Double.equals does not).
_EQ_TYPES = (IntegerType, LongType, StringType, DateType, DecimalType, BooleanType)
_FILTER_TYPES = (IntegerType, LongType, StringType, DateType, DecimalType, BooleanType, FloatType, DoubleType)


def spark_file_path(path: str) -> str | None:
    """``_metadata.file_path`` as Spark 3.5 reports it for ``path``; None if not provably known."""
    if not _PLAIN_PATH.match(path):
        return None
    if path.startswith("file:///"):
        return "file:/" + path[len("file:///") :]
    if path.startswith("file:/"):
        return path
    if path.startswith("/"):
        return "file:" + path
    # other schemes (s3a://, hdfs://) are not verified here: the Python-worker strategy reads them
    return None


def _ineligible(scan: Scan, planned: list[PlannedFile], needed: set[int]) -> str | None:
    """Why the native strategy cannot read this scan exactly, or None if it can."""
    opts = scan.options
    metadata = scan.table.metadata
    if opts.include_deleted:
        return "include_deleted"
    if any(not isinstance(f.field_type, PrimitiveType) for f in opts.projected_schema.fields):
        return "nested columns"
    for fid in needed:
        types = {s.find_field(fid).field_type for s in metadata.schemas if fid in s._lazy_id_to_field}
        if len(types) > 1:
            return f"field {fid} changed type"
        for s in metadata.schemas:
            field = s._lazy_id_to_field.get(fid)
            if field is not None and field.initial_default is not None:
                return f"field {fid} has an initial default"
    for spec in metadata.specs().values():
        for pf in spec.fields:
            if isinstance(pf.transform, IdentityTransform) and pf.source_id in needed:
                return "identity-partition column (may be absent from imported files)"
    for p in planned:
        if p.data_file.file_format.upper() != "PARQUET" or spark_file_path(p.data_file.path) is None:
            return f"data file {p.data_file.path}"
        for d in p.delete_files:
            if d.file_format.upper() not in ("PARQUET", "PUFFIN"):
                return f"delete file {d.path}"
            if d.content == FileContent.EQUALITY_DELETES:
                if spark_file_path(d.path) is None:
                    return f"delete file {d.path}"
                for fid in d.equality_ids:
                    if not isinstance(opts.field_types.get(fid), _EQ_TYPES):
                        return f"equality field {fid} type"
    return None


def native_ineligibility(scan: Scan) -> str:
    """Why :func:`native_dataframe` returns None for this scan (for error messages)."""
    opts = scan.options
    planned = scan.plan_files()
    if not planned:
        return "no data files"
    needed = set(opts.projected_schema.field_ids) | {
        fid for p in planned for d in p.delete_files for fid in d.equality_ids
    }
    if not isinstance(opts.row_filter, AlwaysTrue):
        needed |= _bound_ids(bind(opts.schema, opts.row_filter, opts.case_sensitive))
    return _ineligible(scan, planned, needed) or "row filter not translatable to Spark"


def _hidden(fid: int) -> str:
    return f"__icemor_f{fid}"


def native_dataframe(scan: Scan, spark: SparkSession) -> DataFrame | None:
    """The scan as Spark plans, or None when only the Python-worker strategy is exact."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as st

    opts = scan.options
    planned = scan.plan_files()
    bound = (
        None
        if isinstance(opts.row_filter, AlwaysTrue)
        else bind(opts.schema, opts.row_filter, opts.case_sensitive)
    )
    filter_ids = _bound_ids(bound) if bound is not None else set()
    eq_ids = {fid for p in planned for d in p.delete_files for fid in d.equality_ids}
    projected = {f.field_id: f.name for f in opts.projected_schema.fields}
    needed = set(projected) | filter_ids | eq_ids
    if _ineligible(scan, planned, needed) is not None or not planned:
        return None
    where = None
    if bound is not None:
        where = _to_column(bound, lambda fid: F.col(_hidden(fid)), opts.field_types)
        if where is None:
            return None

    # every needed field is read under a hidden name, by field id
    read_schema = st.StructType(
        [
            st.StructField(_hidden(fid), spark_type(opts.field_types[fid]), True, {"parquet.field.id": fid})
            for fid in sorted(needed)
        ]
    )
    spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
    spark.conf.set("spark.sql.parquet.fieldId.read.ignoreMissing", "true")

    files = [(i, p.data_file.path, spark_file_path(p.data_file.path)) for i, p in enumerate(planned)]
    mapping = spark.createDataFrame(
        [(i, sp, path) for i, path, sp in files], f"{_FID} int, {_FP} string, __icemor_path string"
    )

    def read(paths: list[str]) -> DataFrame:
        df = spark.read.schema(read_schema).parquet(*paths)
        df = df.select("*", F.col("_metadata.file_path").alias(_FP), F.col("_metadata.row_index").alias(_POS))
        if where is not None:
            df = df.where(where)
        return df.join(F.broadcast(mapping), _FP)

    # group data files by their applicable equality deletes: one scan and join chain per group
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, p in enumerate(planned):
        key = tuple(sorted(d.path for d in p.delete_files if d.content == FileContent.EQUALITY_DELETES))
        groups.setdefault(key, []).append(i)

    positions = _positions_df(scan, spark, planned)
    parts = []
    for eq_paths, members in groups.items():
        df = read([planned[i].data_file.path for i in members])
        if positions is not None:
            df = df.join(positions, [_FID, _POS], "left_anti")
        by_ids: dict[tuple[int, ...], list[str]] = {}
        for d in planned[members[0]].delete_files:
            if d.content == FileContent.EQUALITY_DELETES and d.path in eq_paths:
                by_ids.setdefault(tuple(sorted(d.equality_ids)), []).append(d.path)
        for ids, paths in by_ids.items():
            key_schema = st.StructType(
                [
                    st.StructField(
                        f"__icemor_k{fid}", spark_type(opts.field_types[fid]), True, {"parquet.field.id": fid}
                    )
                    for fid in ids
                ]
            )
            keys = spark.read.schema(key_schema).parquet(*paths).distinct()
            cond = reduce(
                lambda a, b: a & b, [df[_hidden(fid)].eqNullSafe(keys[f"__icemor_k{fid}"]) for fid in ids]
            )
            df = df.join(F.broadcast(keys), cond, "left_anti")
        parts.append(df)
    df = reduce(lambda a, b: a.unionByName(b), parts)

    cols = [F.col(_hidden(f.field_id)).alias(f.name) for f in opts.projected_schema.fields]
    if opts.file_column:
        cols.append(F.col("__icemor_path").alias("_file"))
    if opts.pos_column:
        cols.append(F.col(_POS).alias("_pos"))
    return df.select(*cols)


def _positions_df(scan: Scan, spark: SparkSession, planned: list[PlannedFile]) -> DataFrame | None:
    """(file id, position) of every row deleted by position deletes or DVs, decoded on executors."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    work = [
        (i, p.data_file.path, tuple(d for d in p.delete_files if d.content == FileContent.POSITION_DELETES))
        for i, p in enumerate(planned)
    ]
    work = [w for w in work if w[2]]
    if not work:
        return None
    io = scan.io
    io_props = tuple(sorted((str(k), str(v)) for k, v in io.properties.items()))
    location = scan.table.metadata.location
    rows = [(pickle.dumps((io_props, location, fid, path, deletes)),) for fid, path, deletes in work]
    tasks = spark.createDataFrame(
        spark.sparkContext.parallelize(rows, min(len(rows), spark.sparkContext.defaultParallelism)),
        StructType([StructField("task", BinaryType(), nullable=False)]),
    )

    def decode(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return _decode_positions(iter(batches))

    from pyspark.sql import functions as F

    out = tasks.mapInArrow(decode, f"{_FID} int, {_POS} long")
    return F.broadcast(out)


def _decode_positions(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from icemor.engines.spark import _file_io
    from icemor.io.deletes import deleted_positions

    for batch in batches:
        for blob in batch.column(0).to_pylist():
            io_props, location, fid, path, deletes = pickle.loads(blob)
            positions = deleted_positions(_file_io(io_props, location), path, deletes)
            yield pa.record_batch(
                [pa.array([fid] * len(positions), pa.int32()), pa.array(positions, pa.int64())],
                names=[_FID, _POS],
            )


def _bound_ids(expr: BooleanExpression) -> set[int]:
    from pyiceberg.expressions.visitors import extract_field_ids

    return extract_field_ids(expr)


def _literal(value: Any, ftype: Any) -> Column | None:
    from pyspark.sql import functions as F

    if isinstance(ftype, DateType):
        return F.expr(f"date_from_unix_date({int(value)})")
    if isinstance(ftype, DecimalType):
        return F.lit(value).cast(f"decimal({ftype.precision},{ftype.scale})")
    return F.lit(value)


def _to_column(expr: BooleanExpression, col: Any, types: Any) -> Column | None:
    """A bound Iceberg expression as a Spark Column; None for anything not translated exactly."""
    from pyspark.sql import functions as F

    if isinstance(expr, AlwaysTrue):
        return F.lit(True)
    if isinstance(expr, AlwaysFalse):
        return F.lit(False)
    if isinstance(expr, And | Or):
        left, right = _to_column(expr.left, col, types), _to_column(expr.right, col, types)
        if left is None or right is None:
            return None
        return (left & right) if isinstance(expr, And) else (left | right)
    if isinstance(expr, Not):
        child = _to_column(expr.child, col, types)
        return None if child is None else ~child
    term = getattr(expr, "term", None)
    if term is None:
        return None
    fid = term.ref().field.field_id
    ftype = types.get(fid)
    if not isinstance(ftype, _FILTER_TYPES):
        return None
    c: Column = col(fid)
    if isinstance(expr, BoundIsNull):
        return c.isNull()
    if isinstance(expr, BoundNotNull):
        return c.isNotNull()
    if isinstance(expr, BoundIsNaN):
        return F.isnan(c)
    if isinstance(expr, BoundNotNaN):
        return ~F.isnan(c)
    if isinstance(expr, BoundIn | BoundNotIn):
        lits = [_literal(lit.value, ftype) for lit in expr.literals]
        if any(v is None for v in lits):
            return None
        inside = c.isin(*lits)
        return inside if isinstance(expr, BoundIn) else ~inside
    literal = getattr(expr, "literal", None)
    if literal is None:
        return None
    v = _literal(literal.value, ftype)
    if v is None:
        return None
    ops: dict[type, Any] = {
        BoundEqualTo: lambda: c == v,
        BoundNotEqualTo: lambda: c != v,
        BoundLessThan: lambda: c < v,
        BoundLessThanOrEqual: lambda: c <= v,
        BoundGreaterThan: lambda: c > v,
        BoundGreaterThanOrEqual: lambda: c >= v,
        BoundStartsWith: lambda: c.startswith(v),
    }
    for cls, make in ops.items():
        if isinstance(expr, cls):
            return cast("Column", make())
    return None
