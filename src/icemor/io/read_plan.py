"""A data file planned for one task's read: its row groups, columns, filter and batch sizes.

Opening the file checks it against its manifest entry (format, field ids, row count); the plan
names the row groups the task's split holds, the columns read (projection, filter, equality
keys, row lineage), the filter bound to the file's schema and the identity-partition values it
does not store. What depends only on the file's schema is memoised per shared schema
(:func:`icemor.io.cache.memo`).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyarrow.fs import FileType
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.visitors import bind, extract_field_ids, translate_column_names
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.typedef import Record
from pyiceberg.types import ListType, MapType

from icemor._compat.pyiceberg import partition_constants
from icemor.exceptions import CorruptFileError, UnsupportedFeatureError
from icemor.io.cache import memo, memo_get, memo_put
from icemor.io.columns import top_level_names
from icemor.io.deletes import iceberg_file_schema, local_path, open_parquet, reaching
from icemor.io.read_filter import arrow_filter
from icemor.spec.metadata_columns import LAST_UPDATED_SEQUENCE_NUMBER, ROW_ID

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow.parquet as pq
    from pyiceberg.io import FileIO

    from icemor.io.read_filter import ArrowFilter
    from icemor.io.read_options import ReadOptions
    from icemor.spec.files import DataFileRef, DeleteFileRef
    from icemor.spec.tasks import FileScanTask

__all__ = [
    "BATCH_BYTES",
    "MAP_MIN_BYTES",
    "MIN_BATCH_ROWS",
    "FilePlan",
    "batch_rows",
    "check_present",
    "decoded",
    "leaf_indices",
    "plan_file",
]

BATCH_BYTES = 16 << 20
"""Bytes of the columns read that a batch holds, when the scan asks for no batch size (:func:`batch_rows`)."""
MIN_BATCH_ROWS = 1 << 13


def _row_group_starts(md: pq.FileMetaData) -> tuple[list[int], list[int]]:
    """(byte offset, first row position) of each row group."""
    offsets, rows, pos = [], [], 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        col = rg.column(0)
        dict_off = col.dictionary_page_offset
        offsets.append(
            dict_off
            if col.has_dictionary_page and dict_off is not None and dict_off > 0
            else col.data_page_offset
        )
        rows.append(pos)
        pos += rg.num_rows
    return offsets, rows


@dataclass
class FilePlan:
    """How a task reads its data file (:func:`plan_file`); ``pf`` stays open until the read ends."""

    pf: pq.ParquetFile
    file_schema: Schema
    columns: list[str]
    file_project_schema: Schema
    row_groups: list[int]
    rg_first_row: list[int]
    pyarrow_filter: ArrowFilter | None
    missing_fields: dict[int, Any]
    leaves: list[int]
    lineage_columns: dict[int, str] = field(default_factory=dict)
    """Row-lineage field id -> name of the column the file stores it in (asked for, present)."""
    out_columns: list[str] | None = None
    """The columns kept once the deletes are applied (projection and filter); None: all read.
    Columns read only for equality keys are dropped before rows are filtered out: copying the
    kept rows of a 72-character key nobody asked for cost more than probing it."""


MAP_MIN_BYTES = 1 << 20
"""Data files of at least this size are memory-mapped when local (see :func:`open_parquet`)."""


def plan_file(io: FileIO, task: FileScanTask, opts: ReadOptions, extra_ids: set[int]) -> FilePlan:
    """Open the task's data file, check it against its manifest entry and plan its read.

    ``extra_ids``: fields read besides the projection and the filter (equality keys).

    Raises:
        UnsupportedFeatureError: The file is not Parquet.
        CorruptFileError: It has no field ids (and there is no name mapping), or another row count.
    """
    f = task.data_file
    if f.file_format.upper() != "PARQUET":
        msg = f"data file {f.path}: format {f.file_format} is not supported (Parquet only)"
        raise UnsupportedFeatureError(msg)
    pf = open_parquet(io, f.path, memory_map=f.file_size_in_bytes >= MAP_MIN_BYTES)
    arrow_schema = pf.schema_arrow  # built anew on each access
    try:
        # files written alike share one Schema and its memos below
        file_schema = iceberg_file_schema(arrow_schema, opts.name_mapping, downcast=opts.format_version <= 2)
    except ValueError as e:
        pf.close()
        msg = f"data file {f.path} has no Iceberg field ids and the table has no name mapping: {e}"
        raise CorruptFileError(msg) from e
    md = pf.metadata
    if md.num_rows != f.record_count:
        pf.close()
        msg = f"data file {f.path} has {md.num_rows} rows, its manifest entry says {f.record_count}"
        raise CorruptFileError(msg)
    if task.is_whole_file and md.num_row_groups == 1:  # (a small file's: no offsets needed)
        row_groups, first_rows = [0], [0]
    else:
        offsets, first_rows = _row_group_starts(md)
        end = task.start + task.length
        row_groups = [i for i, off in enumerate(offsets) if task.start <= off < end]
        if task.is_whole_file:
            row_groups = list(range(md.num_row_groups))

    missing: dict[int, Any] = {}
    spec = opts.specs.get(f.spec_id)
    if spec is not None and not spec.is_unpartitioned():
        data_file = DataFile.from_args(partition=Record(*f.partition))
        # for every field, not only projected ones: filters and equality keys read them too
        missing = partition_constants(data_file, opts.schema, spec, _field_ids(file_schema))

    pyarrow_filter = None
    filter_ids: set[int] = set()
    if not isinstance(opts.row_filter, AlwaysTrue):
        if missing:  # the partition values are part of the translation
            pyarrow_filter, filter_ids = _file_filter(opts, file_schema, missing)
        else:
            # ~0.3 ms a file of expression visitors: once per file schema and filter (an entry
            # holds the filter and table schema, so their ids in the key stay theirs)
            fkey = ("filter", id(file_schema), id(opts.row_filter), id(opts.schema), opts.case_sensitive)
            hit = memo_get(fkey, file_schema)
            if hit is None or hit[0] is not opts.row_filter or hit[1] is not opts.schema:
                hit = (opts.row_filter, opts.schema, _file_filter(opts, file_schema, missing))
                memo_put(fkey, file_schema, hit)
            pyarrow_filter, filter_ids = hit[2]
    wanted = opts.projected_ids | filter_ids if filter_ids else opts.projected_ids

    def prune() -> tuple[Schema, list[str]]:
        # a list's or map's own id is not projectable (prune_columns selects it by its element,
        # key and value ids, which field_ids holds too), as in pyiceberg's own reader
        prunable = {i for i in wanted & file_schema.field_ids if not _is_collection(file_schema, i)}
        pruned = prune_columns(file_schema, prunable, select_full_types=False)
        return pruned, top_level_names(file_schema, set(wanted))

    file_project_schema, out_columns = memo(("prune", id(file_schema), wanted), file_schema, prune)
    columns = out_columns
    lineage_ids = {
        mf.field_id
        for flag, mf in (
            (opts.row_id_column, ROW_ID),
            (opts.last_updated_column, LAST_UPDATED_SEQUENCE_NUMBER),
        )
        if flag and mf.field_id in _field_ids(file_schema)
    }
    extra_ids = extra_ids | lineage_ids
    if extra_ids - wanted:
        columns = memo(
            ("columns", id(file_schema), frozenset(wanted | extra_ids)),
            file_schema,
            lambda: top_level_names(file_schema, set(wanted | extra_ids)),
        )
    leaves = memo(
        ("leaves", id(file_schema), tuple(columns)), file_schema, lambda: leaf_indices(arrow_schema, columns)
    )
    return FilePlan(
        pf,
        file_schema,
        columns,
        file_project_schema,
        row_groups,
        first_rows,
        pyarrow_filter,
        missing,
        leaves,
        {fid: file_schema.find_field(fid).name for fid in lineage_ids},
        out_columns if out_columns != columns else None,
    )


def _file_filter(
    opts: ReadOptions, file_schema: Schema, missing: dict[int, Any]
) -> tuple[ArrowFilter, set[int]]:
    """The scan's row filter bound to a file's schema, as Arrow, and the field ids it reads."""
    bound = bind(opts.schema, opts.row_filter, case_sensitive=opts.case_sensitive)
    translated = translate_column_names(
        bound, file_schema, opts.case_sensitive, projected_field_values=missing
    )
    bound_file = bind(file_schema, translated, case_sensitive=opts.case_sensitive)
    return arrow_filter(bound_file, file_schema), extract_field_ids(bound_file)


def _field_ids(schema: Schema) -> set[int]:
    """``schema.field_ids`` (a new set on each access), memoised per shared file Schema."""
    return memo(("field-ids", id(schema)), schema, lambda: schema.field_ids)


def _is_collection(schema: Schema, field_id: int) -> bool:
    return isinstance(schema.find_type(field_id), ListType | MapType)


def batch_rows(plan: FilePlan, rg: int) -> int:
    """Rows of about ``BATCH_BYTES`` of the columns read, from the row group's uncompressed sizes."""
    meta = plan.pf.metadata.row_group(rg)
    rows = int(meta.num_rows)
    if rows <= MIN_BATCH_ROWS:  # one batch whatever its size (the sizes cost more to look up)
        return MIN_BATCH_ROWS
    size = sum(int(meta.column(i).total_uncompressed_size) for i in plan.leaves)
    if size <= 0 or rows <= 0:
        return max(rows, MIN_BATCH_ROWS)
    return max(MIN_BATCH_ROWS, BATCH_BYTES * rows // size)


def leaf_indices(schema: pa.Schema, columns: list[str]) -> list[int]:
    """Parquet leaf-column indices of the top-level ``columns`` (leaves are depth-first)."""

    def leaves(t: pa.DataType) -> int:
        if pa.types.is_struct(t):
            return sum(leaves(f.type) for f in t)
        if pa.types.is_map(t):
            return leaves(t.key_type) + leaves(t.item_type)
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return leaves(t.value_type)
        return 1

    wanted, at = set(columns), 0
    out: list[int] = []
    for f in schema:
        n = leaves(f.type)
        if f.name in wanted:
            out.extend(range(at, at + n))
        at += n
    return out


def decoded(
    plan: FilePlan, rg: int, batch_size: int, path: str, *, threads: bool
) -> Iterator[pa.RecordBatch]:
    """Decode one row group; only errors of decoding the file's bytes mean the file is corrupt."""
    try:
        # the consumer's own errors are not thrown in here: only decoding is inside this try
        yield from plan.pf.iter_batches(
            batch_size=batch_size, row_groups=[rg], columns=plan.columns, use_threads=threads
        )
    except (pa.ArrowInvalid, OSError) as e:
        msg = f"data file {path} is truncated or corrupt: {e}"
        raise CorruptFileError(msg) from e


def check_present(io: FileIO, data_file: DataFileRef | DeleteFileRef, what: str = "data file") -> int | None:
    """One stat: the file exists and has the size its manifest entry records.

    Returns:
        Its modification time in nanoseconds, None when the FileIO does not tell (pyiceberg's
        PyArrowFileIO does, for local files, S3, GCS, ADLS and HDFS, from the same stat).

    Raises:
        MissingFileError: The file does not exist or cannot be reached.
        CorruptFileError: Its size differs from the manifest's ``file_size_in_bytes``.
    """
    path = data_file.path
    mtime: int | None = None
    with reaching(what, path):
        if isinstance(io, PyArrowFileIO):
            local = None if "DEFAULT_SCHEME" in io.properties else local_path(io, path)
            if local is not None:  # (parse_location's urlparse, per file of a count)
                scheme, netloc, fs_path = "file", "", local
            else:
                scheme, netloc, fs_path = PyArrowFileIO.parse_location(path, io.properties)
            info = io.fs_by_scheme(scheme, netloc).get_file_info(fs_path)
            if info.type != FileType.File:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            size, mtime = int(info.size), info.mtime_ns
        else:
            size = len(io.new_input(path))
    if size != data_file.file_size_in_bytes:
        msg = (
            f"{what} {path} is {size} bytes, its manifest entry says "
            f"{data_file.file_size_in_bytes}: truncated or replaced"
        )
        raise CorruptFileError(msg)
    return mtime
