"""The native Spark strategy: Spark's vectorised Parquet reader, deletes applied in the plan.

The semantics stay in the shared core: the planner decides which delete files apply to which
data file (sequence numbers, scoping, pruning), and position deletes and deletion vectors
are decoded by :func:`icemor.io.deletes.deleted_positions`. Spark only executes the result
as plans:

- data files are read by Iceberg field id (``spark.sql.parquet.fieldId.read.enabled``); each
  row's position is the row index Spark's Parquet reader generates into a read-schema column
  named ``_tmp_metadata_row_index`` (the column ``_metadata.row_index`` is built from, which Delta
  Lake reads the same way). Read directly it is a plain long column; through ``_metadata`` every
  row would also box it into a struct (measured: ~10% of a narrow dv10 read);
- deleted positions are decoded on the driver into one bitmap per data file; the bitmaps are
  an array literal of the plan, and each row tests its own bit in a filter (no hash relation
  to build and broadcast per query, no join, no shuffle). The row's file is known by its
  ordinal: on a local master, files with position deletes are read through a directory of
  links, one subdirectory ``__icemor_file=<ordinal>`` per data file, so Spark's own partition
  discovery appends the ordinal as a constant column (free per row, like symlink manifests
  expose file sets to other engines). Elsewhere the file is found by ``_metadata.file_size``
  (a constant long per file, but read through a struct built per row): the low bits of the
  sizes index an array of bitmap ordinals. When neither can be exact (equal sizes, a file the
  driver cannot stat, bitmaps too large), deleted positions are decoded on the executors
  instead and anti-join on (``_metadata.file_path``, position), which builds a hash relation
  per query;
- equality deletes anti-join, per group of data files sharing the same applicable delete
  files, on NULL-safe equality (``<=>``) of the equality columns.

A scan this strategy cannot express exactly returns None and the caller uses the Python-
worker strategy instead; the conditions are in :func:`_ineligible`.
"""

from __future__ import annotations

import atexit
import os
import pickle
import re
import shutil
import tempfile
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
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
    BoundNotStartsWith,
    BoundStartsWith,
    Not,
    Or,
)
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.schema import index_by_id
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
    UUIDType,
)
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as st

from icemor.engines.spark._compat import ROW_INDEX_COLUMN
from icemor.engines.spark.session_kind import (
    cache_scope,
    driver_disk_is_executors,
    jvm_handles,
    map_tasks,
    parallelism,
)
from icemor.engines.spark.types import spark_type
from icemor.engines.spark.worker import file_io, io_spec
from icemor.io import deletes as io_deletes
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import numpy.typing as npt
    from pyiceberg.expressions import BooleanExpression
    from pyspark.sql import DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

    from icemor.planning.scan_job import ScanJob
    from icemor.spec.tasks import PlannedFile

__all__ = ["listing_skips", "native_dataframe", "native_ineligibility", "parquet_reader", "spark_file_path"]

_FP, _POS = "__icemor_fp", "__icemor_pos"
# The column Spark's Parquet reader fills with each row's position when the read schema names it.
# A Spark that did not fill it would leave it null: the bitmap filter raises on a null position
# rather than keep the row.
_ROW_INDEX = ROW_INDEX_COLUMN
# The partition column of the linked directories: each data file's ordinal in its bitmap set.
_ORDINAL = "__icemor_file"
# Bits of all bitmaps of one scan (16 MiB): they travel in every query's task binary.
_MAX_BITS = 1 << 27
# Entries of the size-slot array (4 MiB); enough for about a thousand files with position deletes.
_MAX_SLOTS = 1 << 22
# Paths whose URI form Spark reports unchanged (no percent-encoding can differ).
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9._/=:+-]+$")
# Types whose equality Spark's <=> decides exactly as Iceberg Java does (floats are excluded:
# Spark normalises -0.0 to 0.0 in joins, Java's Double.equals does not).
_EQ_TYPES = (IntegerType, LongType, StringType, DateType, DecimalType, BooleanType)
_FILTER_TYPES = (IntegerType, LongType, StringType, DateType, DecimalType, BooleanType, FloatType, DoubleType)


# Per-read options of Spark's Parquet source: values are proleptic Gregorian, as the Iceberg spec
# (and every writer without Spark's legacy-calendar footer keys) stores them. Spark's default
# (EXCEPTION) refuses dates before 1582-10-15 and timestamps before 1900 in such files; a file whose
# footer says Spark wrote it in the legacy calendar is still rebased (the footer wins over these).
REBASE_OPTIONS = {"datetimeRebaseMode": "CORRECTED", "int96RebaseMode": "CORRECTED"}


def parquet_reader(spark: SparkSession, schema: StructType | None = None) -> DataFrameReader:
    """``spark.read`` for Parquet files icemor reads: calendar options set on this read only
    (:data:`REBASE_OPTIONS`; the session's settings stay the user's), ``schema`` if given."""
    reader = spark.read.options(**REBASE_OPTIONS)
    return reader if schema is None else reader.schema(schema)


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


def _file_size(spark_path: str) -> int | None:
    """The size Spark's listing reports for a local ``file:`` path; None if the driver cannot see it."""
    try:
        return os.stat(spark_path.removeprefix("file:")).st_size
    except OSError:
        return None


def _ineligible(job: ScanJob, planned: list[PlannedFile], needed: set[int]) -> str | None:
    """Why the native strategy cannot read this scan exactly, or None if it can."""
    opts = job.options
    metadata = job.metadata
    if opts.include_deleted and any(p.delete_files for p in planned):
        return "include_deleted"
    if opts.row_id_column or opts.last_updated_column:
        return "row lineage columns (computed from each file's first_row_id and sequence number)"
    if any(not isinstance(f.field_type, PrimitiveType) for f in opts.projected_schema.fields):
        return "nested columns"
    for fid in needed:
        if opts.field_parents.get(fid):
            return f"nested field {fid} (read by top-level field id only)"
        fields = [f for f in (index_by_id(s).get(fid) for s in metadata.schemas) if f is not None]
        if len({f.field_type for f in fields}) > 1:
            return f"field {fid} changed type"
        if any(f.initial_default is not None for f in fields):
            return f"field {fid} has an initial default"
        if any(isinstance(f.field_type, UUIDType) for f in fields):
            return f"uuid field {fid} (Spark's Parquet reader has no UUID type; Spark reads it as text)"
    for spec in metadata.specs().values():
        for pf in spec.fields:
            if isinstance(pf.transform, IdentityTransform) and pf.source_id in needed:
                return "identity-partition column (may be absent from imported files)"
    # imported files may carry no field ids: Spark would read every column of them as NULL
    if metadata.name_mapping() is not None:
        return "name-mapped table (imported data files may lack field ids)"
    for p in planned:
        path = p.data_file.path
        if p.data_file.file_format.upper() != "PARQUET" or spark_file_path(path) is None:
            return f"data file {path}"
        if listing_skips(path):
            return f"data file {path} (a name Spark's listing skips)"
        for d in p.delete_files:
            if d.file_format.upper() not in ("PARQUET", "PUFFIN"):
                return f"delete file {d.path}"
            if d.content == FileContent.EQUALITY_DELETES:
                if spark_file_path(d.path) is None or listing_skips(d.path):
                    return f"delete file {d.path}"
                for fid in d.equality_ids:
                    if not isinstance(opts.field_types.get(fid), _EQ_TYPES):
                        return f"equality field {fid} type"
    return None


def listing_skips(path: str) -> bool:
    """Whether Spark's file listing skips the file as hidden or temporary, even when a read
    names it (``_…``, ``.…``, ``…._COPYING_``): such a file reads as no rows, not an error."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith(("_", ".")) or name.endswith("._COPYING_")


def _bound_filter(job: ScanJob) -> BooleanExpression | None:
    opts = job.options
    if isinstance(opts.row_filter, AlwaysTrue):
        return None
    return bind(opts.schema, opts.row_filter, opts.case_sensitive)


def _needed_ids(job: ScanJob, planned: list[PlannedFile], bound: BooleanExpression | None) -> set[int]:
    """Field ids the read needs: projected, filtered on, and compared by equality deletes."""
    needed = set(job.options.projected_schema.field_ids)
    needed |= {fid for p in planned for d in p.delete_files for fid in d.equality_ids}
    if bound is not None:
        needed |= _bound_ids(bound)
    return needed


def native_ineligibility(job: ScanJob, planned: list[PlannedFile]) -> str:
    """Why :func:`native_dataframe` returns None for these files (for error messages)."""
    if not planned:
        return "no data files"
    reason = _ineligible(job, planned, _needed_ids(job, planned, _bound_filter(job)))
    return reason or "row filter not translatable to Spark"


def _hidden(fid: int) -> str:
    return f"__icemor_f{fid}"


def native_dataframe(
    job: ScanJob,
    spark: SparkSession,
    planned: list[PlannedFile] | None = None,
    *,
    bitmaps_only: bool = False,
) -> DataFrame | None:
    """``planned`` (default: all of the scan's files) as Spark plans; None when not exact.

    With ``include_deleted`` only files without deletes qualify (every row is live). With
    ``bitmaps_only``, also None when position deletes would need the keyed anti-join (the
    caller prefers the Python workers to it).
    """
    opts = job.options
    planned = list(job.planned) if planned is None else planned
    bound = _bound_filter(job)
    needed = _needed_ids(job, planned, bound)
    if _ineligible(job, planned, needed) is not None or not planned:
        return None
    spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
    spark.conf.set("spark.sql.parquet.fieldId.read.ignoreMissing", "true")
    # the same scan again (same files, deletes, projection, filter) reuses its DataFrame: building
    # it costs ~40 ms of py4j round trips and JVM analysis per query, more than a narrow read's
    # deletes do; files are immutable, so the plan stays exact
    key = (
        bitmaps_only,
        tuple((p.data_file.path, tuple(sorted(d.path for d in p.delete_files))) for p in planned),
        repr(bound),
        tuple((f.field_id, f.name, str(f.field_type)) for f in opts.projected_schema.fields),
        tuple((fid, str(opts.field_types[fid])) for fid in sorted(needed)),
        opts.file_column,
        opts.pos_column,
        opts.include_deleted,
    )
    _forget_plans_of_removed_links()
    return _reused(spark, key, lambda: _build(job, spark, planned, bound, needed, bitmaps_only=bitmaps_only))


def _build(
    job: ScanJob,
    spark: SparkSession,
    planned: list[PlannedFile],
    bound: BooleanExpression | None,
    needed: set[int],
    *,
    bitmaps_only: bool,
) -> DataFrame | None:
    opts = job.options
    where = None
    if bound is not None:
        where = _to_column(bound, lambda fid: F.col(_hidden(fid)), opts.field_types)
        if where is None:
            return None

    found = _bitmaps(job, spark, planned)
    bitmaps = None if found is None else found.live
    positions = None
    if bitmaps is None and any(_position_deletes(p) for p in planned):
        if bitmaps_only:
            return None
        positions = _positions_df(job, spark, planned)

    # every needed field is read under a hidden name, by field id; the row index only when used
    fields = [
        st.StructField(_hidden(fid), spark_type(opts.field_types[fid]), True, {"parquet.field.id": fid})
        for fid in sorted(needed)
    ]
    if bitmaps is not None or positions is not None or opts.pos_column:
        fields.append(st.StructField(_ROW_INDEX, st.LongType(), True))
    read_schema = st.StructType(fields)
    linked = found.linked if found is not None else None

    # Spark's _metadata columns cost a lot per row (the path string most): only the needed ones
    meta = []
    if positions is not None or opts.file_column:
        meta.append(F.col("_metadata.file_path").alias(_FP))
    if positions is not None or opts.pos_column:
        meta.append(_row_index().alias(_POS))

    def read(paths: list[str], live: Column | None) -> DataFrame:
        # few DataFrame steps: each one is analysed anew in the JVM
        links = linked if live is not None else None  # only files with position deletes are linked
        if links is not None:
            ordinal = st.StructField(_ORDINAL, st.IntegerType(), True)  # nullable: the guard stays
            reader = parquet_reader(spark, st.StructType([*read_schema.fields, ordinal]))
            df = reader.option("basePath", links.base).parquet(*(links.dirs[p] for p in paths))
        else:
            df = parquet_reader(spark, read_schema).parquet(*paths)
        cond = live if where is None else where if live is None else where & live
        if cond is not None:
            df = df.where(cond)
        if meta or links is not None:  # the ordinal column goes
            df = df.select(*(F.col(f.name) for f in read_schema.fields), *meta)
        return df

    # group data files by their applicable equality deletes (one scan and join chain per group),
    # and by whether position deletes apply (only those read the bitmaps)
    groups: dict[tuple[tuple[str, ...], bool], list[int]] = {}
    for i, p in enumerate(planned):
        eq = tuple(sorted(d.path for d in p.delete_files if d.content == FileContent.EQUALITY_DELETES))
        groups.setdefault((eq, bitmaps is not None and bool(_position_deletes(p))), []).append(i)

    parts = []
    for (eq_paths, deleted_bits), members in groups.items():
        df = read([planned[i].data_file.path for i in members], bitmaps if deleted_bits else None)
        if positions is not None:
            df = df.join(F.broadcast(positions), [_FP, _POS], "left_anti")
        by_ids: dict[tuple[int, ...], list[str]] = {}
        for d in planned[members[0]].delete_files:
            if d.content == FileContent.EQUALITY_DELETES and d.path in eq_paths:
                by_ids.setdefault(tuple(sorted(d.equality_ids)), []).append(d.path)
        for ids, paths in by_ids.items():
            keys = _equality_keys(spark, ids, paths, opts.field_types)
            cond = reduce(lambda a, b: a & b, [df[_hidden(fid)].eqNullSafe(keys[_key(fid)]) for fid in ids])
            df = df.join(F.broadcast(keys), cond, "left_anti")
        parts.append(df)
    df = reduce(lambda a, b: a.unionByName(b), parts)

    cols = [F.col(_hidden(f.field_id)).alias(f.name) for f in opts.projected_schema.fields]
    if opts.file_column:
        # back from Spark's form of each path (a link's, for linked files) to the table's path
        read_as = linked.files if linked is not None else {}
        rows = [
            (read_as.get(p.data_file.path) or spark_file_path(p.data_file.path), p.data_file.path)
            for p in planned
        ]
        if all(spark_path == path for spark_path, path in rows):
            # Spark reports every path as the table has it: no join (measured: a string-keyed
            # broadcast join costs ~0.15 s per million rows, 1.5 s of a MERGE's 10 M-row scan)
            cols.append(F.col(_FP).alias("_file"))
        else:
            df = df.join(F.broadcast(_path_mapping(spark, rows)), _FP)
            cols.append(F.col("_file"))
    if opts.pos_column:
        cols.append(F.col(_POS).alias("_pos"))
    if opts.include_deleted:
        cols.append(F.lit(False).alias("_deleted"))  # only delete-free files get here
    return df.select(*cols)


# Files up to which the path mapping is one literal expression rather than a Python-made DataFrame
# (measured: parsing the expression costs about what it saves once past ~100 files).
_LITERAL_FILES = 128


def _path_mapping(spark: SparkSession, rows: list[tuple[str | None, str]]) -> DataFrame:
    """(Spark's path, the table's path) of each data file, to broadcast-join the rows' paths to.

    Up to :data:`_LITERAL_FILES` files, a relation of literals (one call, folded by the
    optimizer): a DataFrame made from Python rows runs a Python task on every query to ship
    them (measured: 0.1-0.25 s of a 1.3-1.5 s Spark DELETE of 1 M rows). Paths go hex-encoded:
    no quoting.
    """
    if len(rows) > _LITERAL_FILES:
        return spark.createDataFrame(rows, f"{_FP} string, _file string")

    def text(value: str | None) -> str:
        hexed = "NULL" if value is None else f"unhex('{value.encode().hex()}')"
        return f"CAST({hexed} AS STRING)"

    pairs = ", ".join(f"struct({text(a)} AS {_FP}, {text(b)} AS _file)" for a, b in rows)
    return spark.range(1).select(F.expr(f"inline(array({pairs}))"))


def _key(fid: int) -> str:
    return f"__icemor_k{fid}"


def _equality_keys(spark: SparkSession, ids: tuple[int, ...], paths: list[str], types: Any) -> DataFrame:
    """Distinct delete keys of equality delete files, read by field id; cached per file set."""
    key_schema = st.StructType(
        [st.StructField(_key(fid), spark_type(types[fid]), True, {"parquet.field.id": fid}) for fid in ids]
    )
    return _cached(
        spark,
        ("keys", ids, tuple(sorted(paths))),
        lambda: parquet_reader(spark, key_schema).parquet(*paths).distinct(),
    )


def _position_deletes(p: PlannedFile) -> tuple[Any, ...]:
    return tuple(d for d in p.delete_files if d.content == FileContent.POSITION_DELETES)


def _unless_null(pos: Column, value: Column, ordinal: Column | None = None) -> Column:
    """``value``, or a query error where ``pos`` (or the file's ``ordinal``) is null: a Spark that
    stopped filling either column fails the query instead of returning deleted rows."""
    missing = pos.isNull() if ordinal is None else pos.isNull() | ordinal.isNull()
    error = F.raise_error(F.lit(f"icemor: Spark did not fill {_ROW_INDEX} or {_ORDINAL} (row positions)"))
    return F.when(missing, error.cast("bigint")).otherwise(value.cast("bigint"))


def _row_index() -> Column:
    """Each row's position in its data file, as Spark's Parquet reader generates it (never null)."""
    return _unless_null(F.col(_ROW_INDEX), F.col(_ROW_INDEX))


def _live(bits: Column, ordinal: Column, *, linked: bool) -> Column:
    """True for a row whose position (the reader's row index column) is not set in its file's bitmap.

    ``bits`` (array<array<bigint>>) holds the 64-bit words of each file's bitmap; ``ordinal``
    picks the row's: the links' ordinal column, or ``_metadata.file_size`` through the slots.
    """
    pos = F.col(_ROW_INDEX)
    # get() is null out of range: rows past their file's bitmap stay (a null position or link
    # ordinal fails; the check sits in the fallback, so a row with a bit pays nothing for it)
    word = F.get(F.get(bits, ordinal), F.shiftright(pos, 6).cast("int"))
    bit = F.call_function("shiftright", word, pos.bitwiseAND(F.lit(63)).cast("int")).bitwiseAND(F.lit(1))
    return F.coalesce(bit, _unless_null(pos, F.lit(0), ordinal if linked else None)) == 0


@dataclass(frozen=True)
class _Linked:
    """Data files read through a directory of links: ``<base>/__icemor_file=<ordinal>/data.parquet``."""

    base: str  # the basePath of the read (where partition discovery starts)
    dirs: dict[str, str]  # data file path -> its ordinal's directory
    files: dict[str, str]  # data file path -> the link, as Spark's _metadata.file_path reports it


@dataclass(frozen=True)
class _Bitmaps:
    """The filter that keeps the rows position deletes leave, and how the files must be read."""

    live: Column
    linked: _Linked | None  # None: read the files themselves (known by _metadata.file_size)


_LINKS_LOCK = threading.Lock()
_LINK_ROOT: list[Path] = []  # this process's directory of links, made on first use
_LINK_SETS: list[Path] = []  # every set of links made in it, checked before a plan is reused


def _remove_links(root: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked child inherits the handler, not the directory
        shutil.rmtree(root, ignore_errors=True)  # unlinks the links, never their targets


def _forget_links() -> None:
    _LINK_ROOT.clear()
    _LINK_SETS.clear()


os.register_at_fork(after_in_child=_forget_links)


def _link_root() -> Path:
    with _LINKS_LOCK:
        if not _LINK_ROOT:
            root = Path(tempfile.gettempdir()) / f"icemor-spark-{os.getpid()}-{uuid.uuid4().hex}"
            root.mkdir(mode=0o700)
            atexit.register(_remove_links, root, os.getpid())
            _LINK_ROOT.append(root)
        return _LINK_ROOT[0]


def _forget_plans_of_removed_links() -> None:
    """Plans and bitmaps are made anew when a set of links is gone (a temp cleaner took it)."""
    if all(os.path.isdir(base) for base in _LINK_SETS):
        return
    _PLANS.clear()
    for stale in [k for k in _CACHE if k[2] == "bitmaps-linked"]:
        del _CACHE[stale]
    _LINK_SETS[:] = [base for base in _LINK_SETS if os.path.isdir(base)]


def _link_files(spark: SparkSession, paths: list[str]) -> _Linked | None:
    """One directory per data file, named for its ordinal in ``paths``, holding a link to it.

    Only on a classic session's local master: its executors see the driver's file system, so
    the links resolve where the tasks run (never on Spark Connect). None when that is not so, or
    a file or link cannot be had.
    """
    if not driver_disk_is_executors(spark):
        return None
    uris = [spark_file_path(p) for p in paths]
    if None in uris:  # not a local file (s3://, hdfs://): nothing to link to
        return None
    targets = [cast("str", u).removeprefix("file:") for u in uris]
    if not all(os.path.isfile(t) for t in targets):
        return None
    base = _link_root() / uuid.uuid4().hex
    # file: URIs, so that a default file system elsewhere (HDFS, S3) is not asked for them
    uri = spark_file_path(str(base))
    if uri is None:
        return None
    dirs, files = {}, {}
    try:
        for ordinal, (path, target) in enumerate(zip(paths, targets, strict=True)):
            name = f"{_ORDINAL}={ordinal}"
            (base / name).mkdir(parents=True)
            # not the file's own name, which Spark's listing might skip
            (base / name / "data.parquet").symlink_to(target)
            dirs[path], files[path] = f"{uri}/{name}", f"{uri}/{name}/data.parquet"
    except OSError:
        return None  # a partial set serves no plan; it goes with the root at exit
    _LINK_SETS.append(base)
    return _Linked(uri, dirs, files)


def _size_mask(sizes: list[int]) -> int | None:
    """The smallest ``2**k - 1`` under which ``sizes`` stay pairwise distinct (None: none found)."""
    if len(set(sizes)) != len(sizes):
        return None
    slots = 1
    while slots <= _MAX_SLOTS:
        if len({size & (slots - 1) for size in sizes}) == len(sizes):
            return slots - 1
        slots *= 2
    return None


def _bitmaps(job: ScanJob, spark: SparkSession, planned: list[PlannedFile]) -> _Bitmaps | None:
    """A filter keeping the rows position deletes and DVs leave; None when none apply or not exact.

    Bitmaps decoded on the driver by the shared core, cached per exact set of (data file,
    deletes) with the filter built on them (it is the same for every query). The row's file is
    its ordinal where the files can be read through links (:func:`_link_files`); otherwise its
    size (``_metadata.file_size``), so the sizes must differ in their low bits.
    """
    work = [(p, deletes) for p in planned if (deletes := _position_deletes(p))]
    if not work or jvm_handles(spark) is None:  # Spark Connect, PySpark 4: no plan literals
        return None
    if sum(p.data_file.record_count for p, _ in work) > _MAX_BITS:
        return None
    paths = [p.data_file.path for p, _ in work]
    deletes_key = tuple((p.data_file.path, tuple(d.path for d in deletes)) for p, deletes in work)

    def words_of() -> list[npt.NDArray[np.int64]]:
        words = []
        for p, deletes in work:
            positions = io_deletes.deleted_positions(job.io, p.data_file.path, deletes)
            rows = max(p.data_file.record_count, int(positions[-1]) + 1 if len(positions) else 0)
            flags = np.zeros(-(-rows // 64) * 64, np.bool_)
            flags[positions] = True
            # bit (pos & 63) of word pos >> 6, as deleted() reads it
            words.append(np.packbits(flags, bitorder="little").view("<i8"))
        return words

    def build_linked() -> _Bitmaps | None:
        linked = _link_files(spark, paths)
        if linked is None:
            return None
        literals = _array_literals(spark, words_of(), None)
        if literals is None:
            return None
        return _Bitmaps(_live(literals[0], F.col(_ORDINAL), linked=True), linked)

    if driver_disk_is_executors(spark):
        found = _cached(spark, ("bitmaps-linked", deletes_key), build_linked)
        if found is not None:
            return found

    sizes = [_file_size(cast("str", spark_file_path(path))) for path in paths]
    mask = _size_mask(cast("list[int]", sizes)) if None not in sizes else None
    if mask is None:
        return None

    def build_sized() -> _Bitmaps | None:
        slots = np.full(mask + 1, -1, np.int32)
        for ordinal, size in enumerate(sizes):
            slots[cast("int", size) & mask] = ordinal
        literals = _array_literals(spark, words_of(), slots)
        if literals is None or literals[1] is None:
            return None
        # slots (array<int>) map ``file size & mask`` to an index into the bitmaps (-1: none)
        slot = F.col("_metadata.file_size").bitwiseAND(F.lit(mask)).cast("int")
        return _Bitmaps(_live(literals[0], F.get(literals[1], slot), linked=False), None)

    return _cached(spark, ("bitmaps", deletes_key, tuple(sizes)), build_sized)


def _array_literals(
    spark: SparkSession, words: list[npt.NDArray[np.int64]], slots: npt.NDArray[np.int32] | None
) -> tuple[Column, Column | None] | None:
    """``words`` as an array<array<bigint>> literal and ``slots`` (if any) as an array<int> literal.

    Built in the JVM from one transfer of bytes each: a Python list would cost a py4j call
    per element, and a broadcast row would cost a relation per query. UnsafeArrayData keeps
    the literals compact in the task binary and prints as a short name in plans. Its words
    are read in the JVM's native order, so that must be little-endian like the bitmaps.
    """
    handles = jvm_handles(spark)
    if handles is None:
        return None
    jvm, gateway = handles
    nio = jvm.java.nio
    if nio.ByteOrder.nativeOrder() != nio.ByteOrder.LITTLE_ENDIAN:
        return None
    expressions, types = jvm.org.apache.spark.sql.catalyst.expressions, jvm.org.apache.spark.sql.types
    unsafe = expressions.UnsafeArrayData

    def java_array(values: npt.NDArray[Any], kind: Any, view: str) -> Any:
        # one transfer of the bytes, then a JVM-side copy into a primitive array we hold by reference
        array = gateway.new_array(kind, len(values))
        buffer = nio.ByteBuffer.wrap(bytearray(values.tobytes())).order(nio.ByteOrder.LITTLE_ENDIAN)
        getattr(buffer, view)().get(array)
        return array

    platform = jvm.org.apache.spark.unsafe.Platform
    longs = java_array(np.concatenate(words).astype("<i8"), jvm.long, "asLongBuffer")
    arrays = gateway.new_array(jvm.java.lang.Object, len(words))
    start = 0
    for i, w in enumerate(words):
        arrays[i] = unsafe.fromPrimitiveArray(longs, platform.LONG_ARRAY_OFFSET + start * 8, len(w), 8)
        start += len(w)
    long_array = types.ArrayType.apply(types.DataTypes.LongType, False)
    bits = expressions.Literal(
        jvm.org.apache.spark.sql.catalyst.util.GenericArrayData(arrays),
        types.ArrayType.apply(long_array, False),
    )
    column = jvm.org.apache.spark.sql.Column
    if slots is None:
        return Column(column(bits)), None
    slot_literal = expressions.Literal(
        unsafe.fromPrimitiveArray(java_array(slots.astype("<i4"), jvm.int, "asIntBuffer")),
        types.ArrayType.apply(types.DataTypes.IntegerType, False),
    )
    return Column(column(bits)), Column(column(slot_literal))


def _positions_df(job: ScanJob, spark: SparkSession, planned: list[PlannedFile]) -> DataFrame | None:
    """(Spark path, position) of every row deleted by position deletes or DVs.

    Decoded on the executors by the shared core; cached per exact set of (data file, deletes).
    """
    work = [
        (
            spark_file_path(p.data_file.path),
            p.data_file.path,
            _position_deletes(p),
        )
        for p in planned
    ]
    work = [w for w in work if w[2]]
    if not work:
        return None
    key = ("positions", tuple((path, tuple(d.path for d in deletes)) for _, path, deletes in work))
    return _cached(spark, key, lambda: _decode_job(job, spark, work))


def _decode_job(job: ScanJob, spark: SparkSession, work: list[Any]) -> DataFrame:
    spec = io_spec(job.io, job.metadata.location)
    blobs = [pickle.dumps((spec, sp, path, deletes)) for sp, path, deletes in work]
    schema = st.StructType([st.StructField(_FP, st.StringType()), st.StructField(_POS, st.LongType())])
    return map_tasks(spark, blobs, _decode_positions, schema, partitions=min(len(blobs), parallelism(spark)))


_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_ENTRIES = 16
_T = TypeVar("_T")


def _cached(spark: SparkSession, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
    """What was built from an immutable set of delete files, per application or Connect session (LRU).

    Committed delete files never change, so what was decoded from them serves every later
    query of the session, as the per-process delete cache does for the local engine.
    DataFrames are persisted while cached.
    """
    full = (*cache_scope(spark), *key)
    if full in _CACHE:
        _CACHE.move_to_end(full)
        return cast("_T", _CACHE[full])
    value = build()
    if isinstance(value, DataFrame):
        value.persist()
    _CACHE[full] = value
    while len(_CACHE) > _CACHE_ENTRIES:
        _, old = _CACHE.popitem(last=False)
        if isinstance(old, DataFrame):
            old.unpersist()
    return value


_PLANS: OrderedDict[tuple[Any, ...], tuple[SparkSession, DataFrame | None]] = OrderedDict()
_PLAN_ENTRIES = 32


def _reused(
    spark: SparkSession, key: tuple[Any, ...], build: Callable[[], DataFrame | None]
) -> DataFrame | None:
    """The DataFrame built for ``key`` in this session before, else ``build()`` (LRU, not persisted)."""
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is spark:  # a DataFrame belongs to its session (and context)
        _PLANS.move_to_end(key)
        return hit[1]
    value = build()
    _PLANS[key] = (spark, value)
    while len(_PLANS) > _PLAN_ENTRIES:
        _PLANS.popitem(last=False)
    return value


def _decode_positions(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for blob in batch.column(0).to_pylist():
            (io_props, location), spark_path, path, deletes = pickle.loads(blob)
            positions = io_deletes.deleted_positions(file_io(io_props, location), path, deletes)
            paths = pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(len(positions), np.int32)), pa.array([spark_path])
            )
            yield pa.record_batch(
                [paths.cast(pa.string()), pa.array(positions, pa.int64())], names=[_FP, _POS]
            )


def _bound_ids(expr: BooleanExpression) -> set[int]:
    return extract_field_ids(expr)


def _literal(value: Any, ftype: Any) -> Column | None:
    if isinstance(ftype, DateType):
        return F.expr(f"date_from_unix_date({int(value)})")
    if isinstance(ftype, DecimalType):
        return F.lit(value).cast(f"decimal({ftype.precision},{ftype.scale})")
    return F.lit(value)


def _to_column(expr: BooleanExpression, col: Any, types: Any) -> Column | None:
    """A bound Iceberg expression as a Spark Column; None for anything not translated exactly.

    Two-valued, as :mod:`icemor.expr.condition` means it (and :mod:`icemor.io.filters` evaluates
    it locally): a NULL fails every positive predicate and passes its negation, and a NaN fails
    every comparison, where Spark SQL would give NULL, or TRUE for NaN > x.
    """
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
    floating = isinstance(ftype, FloatType | DoubleType)

    def known(e: Column) -> Column:
        return F.coalesce(e, F.lit(False))

    if isinstance(expr, BoundIsNull):
        return c.isNull()
    if isinstance(expr, BoundNotNull):
        return c.isNotNull()
    if isinstance(expr, BoundIsNaN | BoundNotNaN):
        nan = known(F.isnan(c))
        return nan if isinstance(expr, BoundIsNaN) else ~nan
    if isinstance(expr, BoundIn | BoundNotIn):
        lits = [_literal(lit.value, ftype) for lit in expr.literals]
        if any(v is None for v in lits):
            return None
        inside = c.isin(*lits)
        if floating and any(lit.value == 0 for lit in expr.literals):
            inside = inside | (c == F.lit(0.0))  # -0.0 equals 0.0, also where Spark hashes the set
        return known(inside) if isinstance(expr, BoundIn) else ~known(inside)
    literal = getattr(expr, "literal", None)
    if literal is None:
        return None
    v = _literal(literal.value, ftype)
    if v is None:
        return None
    ops: dict[type, Any] = {
        BoundEqualTo: lambda: c == v,
        BoundNotEqualTo: lambda: c == v,
        BoundLessThan: lambda: c < v,
        BoundLessThanOrEqual: lambda: c <= v,
        BoundGreaterThan: lambda: c > v,
        BoundGreaterThanOrEqual: lambda: c >= v,
        BoundStartsWith: lambda: c.startswith(v),
        BoundNotStartsWith: lambda: c.startswith(v),
    }
    for cls, make in ops.items():
        if isinstance(expr, cls):
            positive = known(make())
            if floating and cls in (BoundGreaterThan, BoundGreaterThanOrEqual):
                positive = positive & ~known(F.isnan(c))  # Spark orders NaN above every value
            negated = cls in (BoundNotEqualTo, BoundNotStartsWith)
            return ~positive if negated else positive
    return None
