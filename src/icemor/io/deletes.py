"""Load delete files once per process: position deletes, deletion vectors, equality deletes."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO, pyarrow_to_schema

from icemor.exceptions import CorruptFileError, MissingFileError, UnsupportedFeatureError
from icemor.io.cache import DELETE_CACHE, cached_file_schema, memo
from icemor.io.columns import equality_key_columns, field_path, top_level_names
from icemor.io.equality import EqualityDeleteSet
from icemor.spec.dv import deserialize_dv
from icemor.spec.files import DataFileRef, DeleteFileRef, FileContent
from icemor.spec.rules import DELETE_FILE_PATH_FIELD_ID, DELETE_FILE_POS_FIELD_ID

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.types import IcebergType

__all__ = [
    "deleted_positions",
    "equality_delete_sets",
    "fully_deleted",
    "local_path",
    "open_parquet",
    "position_delete_rows",
    "reaching",
    "read_columns",
    "remember_written",
    "sorted_unique",
    "union_sorted",
]

_EMPTY = np.zeros(0, dtype=np.int64)


def sorted_unique(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``np.unique(positions)``, without its sort when they already increase strictly.

    Positions usually arrive sorted (the spec orders delete files by ``file_path, pos``; Spark
    tasks get theirs sorted): one comparison pass (~0.1 ms per 100k) instead of a sort
    (15-25 ms per 100k on the bench host).
    """
    if len(positions) < 2 or bool((positions[1:] > positions[:-1]).all()):
        return positions
    return np.unique(positions)


def union_sorted(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``np.union1d`` of two sorted unique arrays, merged in linear time (``union1d`` sorts the
    concatenation again: 50 ms for 80k positions, this 0.3 ms)."""
    if not len(a):
        return b
    if not len(b):
        return a
    at = np.searchsorted(a, b)
    inside = at < len(a)
    dup = np.zeros(len(b), dtype=bool)
    dup[inside] = a[at[inside]] == b[inside]
    if dup.any():
        b, at = b[~dup], at[~dup]
    return np.insert(a, at, b)


@contextmanager
def reaching(what: str, path: str) -> Iterator[None]:
    """Turn a FileIO failure to reach ``path`` into one MissingFileError naming it."""
    try:
        yield
    except FileNotFoundError as e:
        msg = f"{what} not found: {path}"
        raise MissingFileError(msg) from e
    except OSError as e:
        msg = f"cannot open {what} {path}: {e}"
        raise MissingFileError(msg) from e


def open_parquet(
    io: FileIO,
    path: str,
    *,
    what: str = "data file",
    memory_map: bool = False,
    read_dictionary: Sequence[str] = (),
) -> pq.ParquetFile:
    """Open a Parquet file through the table's FileIO with one clear error when it cannot be read.

    Page checksums are verified wherever the writer stored them (Iceberg Java's Parquet writer
    and icemor's delete writer do): a flipped byte in a page is then a ``CorruptFileError``
    when the page is decoded, not silently wrong values. Pages without a CRC read as before.

    ``memory_map``: a local file (pyarrow's FileIO, ``file:`` path) is mapped instead of read
    into fresh buffers. Copying a wide scan's column chunks into new memory cost 0.4-0.7 s of
    kernel time (page faults) per 10 M-row scan here, 0.2 s mapped, and made its wall time
    swing by a third; a mapping reads the page cache in place. Iceberg never rewrites a file,
    so a mapping stays valid (a file unlinked meanwhile stays readable); only a file truncated
    *during* the read by something outside Iceberg could fault the process. A small file is
    read, not mapped: mapping and unmapping 20,000 files of 2 KB from two threads contend for
    the process's address-space lock and cost more than the reads (issue 41).

    ``read_dictionary``: columns decoded as dictionary arrays (those the file has).
    """
    with reaching(what, path):
        stream, local = _open_stream(io, path, memory_map=memory_map)
    try:
        try:
            return pq.ParquetFile(
                stream,
                pre_buffer=not local,
                page_checksum_verification=True,
                read_dictionary=list(read_dictionary) or None,
            )
        except KeyError:  # a column of read_dictionary is not in the file: all read plain
            return pq.ParquetFile(stream, pre_buffer=not local, page_checksum_verification=True)
    except (pa.ArrowInvalid, OSError) as e:
        stream.close()
        msg = f"{what} {path} is not a readable Parquet file: {e}"
        raise CorruptFileError(msg) from e


def _open_stream(io: FileIO, path: str, *, memory_map: bool = False) -> tuple[pa.NativeFile, bool]:
    """(a stream of ``path``, whether it is a local file opened directly).

    A local file of pyarrow's FileIO is opened as that FileIO would, without its per-call
    Python (a third of a small file's or a deletion vector's load); mapped when ``memory_map``.
    """
    local = local_path(io, path)
    if local is None:
        return io.new_input(path).open(), False
    return (pa.memory_map(local) if memory_map else pa.OSFile(local)), True


def local_path(io: FileIO, path: str) -> str | None:
    """The local path of ``path`` when pyarrow's FileIO would read it from the local disk.

    Only for pyarrow's FileIO itself: a subclass may do more on each open.
    """
    if type(io) is not PyArrowFileIO:
        return None
    if path.startswith("file:///") and not any(c in path for c in "?#;"):
        return path[7:]  # what parse_location returns for it, without urlparse (per file)
    if path.startswith("/") and os.name != "nt":
        # likewise (a path without a scheme: add_files); abspath only normalises these
        normal = "//" not in path and "/." not in path and not path.endswith("/")
        return path if normal else os.path.abspath(path)
    scheme, netloc, local = PyArrowFileIO.parse_location(path)
    return local if scheme == "file" and not netloc else None


def iceberg_file_schema(arrow: pa.Schema, name_mapping: NameMapping | None, *, downcast: bool) -> Schema:
    """The Iceberg schema of a Parquet file whose Arrow schema is ``arrow``, converted once per process.

    pyiceberg's conversion (~1 ms a file) is a pure function of the Arrow schema (field ids are
    in its field metadata), the name mapping (files without ids: add_files) and ``downcast``
    (of ns timestamps): 20,000 small files of one writer, or a v2 table's position delete files,
    share one result.

    Raises:
        ValueError: The file has no field ids and there is no name mapping.
    """
    mapping = (
        None
        if name_mapping is None
        else memo(("name-mapping", id(name_mapping)), name_mapping, name_mapping.model_dump_json)
    )
    return cached_file_schema(
        arrow,
        (downcast, mapping),
        lambda: pyarrow_to_schema(arrow, name_mapping, downcast_ns_timestamp_to_us=downcast),
    )


def _file_schema(pf: pq.ParquetFile, name_mapping: NameMapping | None, what: str, path: str) -> Schema:
    arrow = pf.schema_arrow
    if any(pa.types.is_dictionary(f.type) for f in arrow):  # read as dictionaries: typed as stored
        arrow = pa.schema(
            [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in arrow],
            metadata=arrow.metadata,
        )
    try:
        return iceberg_file_schema(arrow, name_mapping, downcast=True)
    except ValueError as e:
        msg = f"{what} {path} has no Iceberg field ids and the table has no name mapping: {e}"
        raise CorruptFileError(msg) from e


def read_columns(
    io: FileIO,
    path: str,
    record_count: int,
    what: str,
    columns: Callable[[Schema], list[str]],
    *,
    name_mapping: NameMapping | None = None,
    read_dictionary: Sequence[str] = (),
    use_threads: bool = True,
) -> tuple[pa.Table, Schema]:
    """Read the columns ``columns(file_schema)`` names, checking the row count against the entry.

    ``columns`` raises CorruptFileError when the file's schema does not fit its content type.
    """
    pf = open_parquet(io, path, what=what, read_dictionary=read_dictionary)
    try:
        file_schema = _file_schema(pf, name_mapping, what, path)
        table = pf.read(columns=columns(file_schema), use_threads=use_threads)
    except (pa.ArrowInvalid, OSError) as e:
        msg = f"{what} {path} is truncated or corrupt: {e}"
        raise CorruptFileError(msg) from e
    finally:
        pf.close()
    if table.num_rows != record_count:
        msg = f"{what} {path} has {table.num_rows} rows, its manifest entry says {record_count}"
        raise CorruptFileError(msg)
    return table, file_schema


def _position_file(io: FileIO, ref: DeleteFileRef) -> tuple[dict[str, npt.NDArray[np.int64]], int]:
    """Decode a position delete file into sorted positions per referenced data file."""
    what = "position delete file"

    def columns(file_schema: Schema) -> list[str]:
        ids = {f.field_id: f.name for f in file_schema.as_struct().fields}
        if DELETE_FILE_PATH_FIELD_ID not in ids or DELETE_FILE_POS_FIELD_ID not in ids:
            msg = f"{what} {ref.path} does not have the position delete schema (file_path, pos)"
            raise CorruptFileError(msg)
        return [ids[DELETE_FILE_PATH_FIELD_ID], ids[DELETE_FILE_POS_FIELD_ID]]

    # file_path decoded as its dictionary: a file's 100-character path repeated on each of 1 M
    # rows was most of a cold v2 read (decoded as strings, then hashed to group them)
    table, _ = read_columns(io, ref.path, ref.record_count, what, columns, read_dictionary=("file_path",))
    path_col, pos_col = table.column_names
    paths, pos = table.column(path_col), table.column(pos_col)
    if paths.null_count or pos.null_count:
        msg = f"{what} {ref.path} has a NULL file_path or pos"
        raise CorruptFileError(msg)
    if not pa.types.is_dictionary(paths.type):
        paths = pc.dictionary_encode(paths)
    codes = paths.unify_dictionaries().combine_chunks() if paths.num_chunks else pa.array([], paths.type)
    names = codes.dictionary.to_pylist()
    if len(set(names)) != len(names):  # (a dictionary page repeating a value: another writer's)
        codes = pc.dictionary_encode(codes.cast(codes.type.value_type))
        names = codes.dictionary.to_pylist()
    index = codes.indices.to_numpy(zero_copy_only=False)
    positions = np.asarray(pos.to_numpy(), dtype=np.int64)
    counts = np.bincount(index, minlength=len(names))
    if len(names) <= 1:
        groups = [positions] if names else []
    else:  # positions of each path, in file order within it
        groups = np.split(positions[np.argsort(index, kind="stable")], np.cumsum(counts)[:-1])
    # unique: the spec does not forbid a position twice, and counts must not see it twice
    out = {name: sorted_unique(group) for name, group, n in zip(names, groups, counts, strict=True) if n}
    return out, table.nbytes + 8 * table.num_rows


def _deletion_vector(io: FileIO, ref: DeleteFileRef) -> tuple[npt.NDArray[np.int64], int]:
    if ref.content_offset is None or ref.content_size_in_bytes is None:
        msg = f"deletion vector {ref.path} has no content_offset/content_size_in_bytes"
        raise CorruptFileError(msg)
    with reaching("deletion vector file", ref.path):
        stream, _ = _open_stream(io, ref.path)
    with stream as f:
        f.seek(ref.content_offset)
        blob = f.read(ref.content_size_in_bytes)
    if len(blob) != ref.content_size_in_bytes:
        msg = f"deletion vector {ref.path} is truncated at offset {ref.content_offset}"
        raise CorruptFileError(msg)
    positions = deserialize_dv(blob, source=f"deletion vector {ref.path}@{ref.content_offset}")
    if len(positions) != ref.record_count:
        msg = (
            f"deletion vector {ref.path} holds {len(positions)} positions, its entry says {ref.record_count}"
        )
        raise CorruptFileError(msg)
    return positions, positions.nbytes


def _position_refs(deletes: Sequence[DeleteFileRef]) -> tuple[DeleteFileRef, ...]:
    """The position delete files and DVs among ``deletes``, memoised per tuple object.

    The planner gives files with the same delete files one tuple: 20,000 small files under 50
    global equality-delete files looked at a million refs for none.
    """

    def pick() -> tuple[DeleteFileRef, ...]:
        return tuple(ref for ref in deletes if ref.content == FileContent.POSITION_DELETES)

    if not isinstance(deletes, tuple):  # a list can change under its id
        return pick()
    return memo(("position-refs", id(deletes)), deletes, pick)


def deleted_positions(io: FileIO, data_path: str, deletes: Sequence[DeleteFileRef]) -> npt.NDArray[np.int64]:
    """Sorted, unique positions deleted from ``data_path`` by its position deletes and DVs."""
    parts: list[npt.NDArray[np.int64]] = []
    for ref in _position_refs(deletes) if deletes else ():
        if ref.is_deletion_vector:
            if ref.referenced_data_file != data_path:
                msg = f"deletion vector {ref.path} references {ref.referenced_data_file}, not {data_path}"
                raise CorruptFileError(msg)
            parts.append(
                DELETE_CACHE.get_or_load(
                    "dv", (ref.path, ref.content_offset), partial(_deletion_vector, io, ref)
                )
            )
        elif ref.file_format.upper() == "PARQUET":
            by_path = DELETE_CACHE.get_or_load("position", ref.path, partial(_position_file, io, ref))
            if data_path in by_path:
                parts.append(by_path[data_path])
        else:
            msg = f"position delete file {ref.path}: format {ref.file_format} is not supported (Parquet only)"
            raise UnsupportedFeatureError(msg)
    if not parts:
        return _EMPTY
    if len(parts) == 1:
        return parts[0]
    return sorted_unique(np.concatenate(parts))


POSITION_DELETE_ROWS = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False),
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("spec_id", pa.int32(), nullable=False),
        pa.field("delete_file_path", pa.string(), nullable=False),
    ]
)
"""Iceberg's ``position_deletes`` metadata table, without its ``row`` and ``partition``."""


def position_delete_rows(io: FileIO, deletes: Sequence[DeleteFileRef]) -> pa.Table:
    """One row per position that ``deletes``' position delete files and deletion vectors delete
    (equality deletes left out): the ``position_deletes`` metadata table (:data:`POSITION_DELETE_ROWS`)."""

    def repeated(value: str, n: int) -> pa.Array:
        return pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([value])).cast(pa.string())

    parts: list[pa.Table] = []
    # not _position_refs: its memo is for the planner's shared tuples, not a one-off list
    for ref in (r for r in deletes if r.content == FileContent.POSITION_DELETES):
        if ref.is_deletion_vector:
            by_path = {str(ref.referenced_data_file): _deletion_vector(io, ref)[0]}
        elif ref.file_format.upper() == "PARQUET":
            by_path = _position_file(io, ref)[0]
        else:
            msg = f"position delete file {ref.path}: format {ref.file_format} is not supported (Parquet only)"
            raise UnsupportedFeatureError(msg)
        for path, positions in by_path.items():
            n = len(positions)
            columns = [repeated(path, n), pa.array(positions), pa.array(np.full(n, ref.spec_id, np.int32))]
            parts.append(pa.Table.from_arrays([*columns, repeated(ref.path, n)], schema=POSITION_DELETE_ROWS))
    return pa.concat_tables(parts) if parts else POSITION_DELETE_ROWS.empty_table()


def remember_written(written: Sequence[Any], deletes: Sequence[tuple[str, npt.NDArray[np.int64]]]) -> None:
    """Keep the positions of delete files this process just wrote as if decoded from them.

    ``written``: the :class:`~icemor.spec.files.WrittenFile` records of one writer call,
    ``deletes``: the ``(data file, sorted unique positions)`` it was given. Files are immutable,
    so the next operation on the same data files (a CDC batch merging its older deletes, its
    lookup dropping rows already deleted) need not read back what was written a moment ago. Only
    what maps one to one is kept: each DV, and a Parquet file scoped to one data file.
    """
    given = dict(deletes)
    for w in written:
        positions = given.get(w.referenced_data_file) if w.referenced_data_file is not None else None
        if positions is None or len(positions) != w.record_count:
            continue
        if w.content_offset is not None:  # a DV: one blob of a Puffin file
            DELETE_CACHE.put("dv", (w.path, w.content_offset), positions, positions.nbytes)
        elif w.file_format.upper() == "PARQUET":
            DELETE_CACHE.put("position", w.path, {w.referenced_data_file: positions}, positions.nbytes)


def fully_deleted(io: FileIO, data_file: DataFileRef, deletes: Sequence[DeleteFileRef]) -> bool:
    """Whether position deletes and DVs remove every row of ``data_file`` (then it need not be read).

    A metadata pre-check (delete record counts against the file's) avoids decoding in the
    common case; the answer itself comes from the decoded, de-duplicated positions.
    """
    pos = _position_refs(deletes)
    if not pos or sum(d.record_count for d in pos) < data_file.record_count:
        return False
    positions = deleted_positions(io, data_file.path, pos)
    return int(np.count_nonzero(positions < data_file.record_count)) >= data_file.record_count


def _equality_file(
    io: FileIO,
    ref: DeleteFileRef,
    field_types: Mapping[int, IcebergType],
    field_parents: Mapping[int, tuple[int, ...]],
) -> tuple[list[pa.ChunkedArray], int]:
    what = "equality delete file"

    def columns(file_schema: Schema) -> list[str]:
        missing = [fid for fid in ref.equality_ids if field_path(file_schema, fid) is None]
        if missing:
            msg = f"{what} {ref.path} lacks equality field id(s) {missing}: schema does not match its content"
            raise CorruptFileError(msg)
        return top_level_names(file_schema, set(ref.equality_ids))

    table, file_schema = read_columns(io, ref.path, ref.record_count, what, columns)
    unknown = [fid for fid in ref.equality_ids if fid not in field_types]
    if unknown:
        msg = f"{what} {ref.path}: equality field id(s) {unknown} are not fields of any table schema"
        raise CorruptFileError(msg)
    keys = equality_key_columns(table, file_schema, ref.equality_ids, field_types, field_parents)
    return [c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c]) for c in keys], table.nbytes


def equality_delete_sets(
    io: FileIO,
    deletes: Sequence[DeleteFileRef],
    field_types: Mapping[int, IcebergType],
    field_parents: Mapping[int, tuple[int, ...]] | None = None,
) -> list[tuple[tuple[int, ...], EqualityDeleteSet]]:
    """One probe structure per distinct equality-id set, built from all its applicable files.

    Cached by the exact set of files so tasks sharing the same deletes share one structure.
    Subsumption (as Velox simplifies its equality-delete expressions): a multi-column delete
    row whose value on column c is already deleted by a single-column delete on c can never
    delete anything more, so it is dropped before the multi-column set is built.
    """
    parents = field_parents or {}
    groups: dict[tuple[int, ...], list[DeleteFileRef]] = {}
    for ref in deletes:
        if ref.content == FileContent.EQUALITY_DELETES:
            groups.setdefault(tuple(sorted(ref.equality_ids)), []).append(ref)
    built: dict[tuple[int, ...], tuple[tuple[Any, ...], EqualityDeleteSet]] = {}
    for ids in sorted(groups, key=len):  # single-column sets first: they subsume others
        refs = groups[ids]
        # subsumers: single-column sets on a top-level column (nested keys carry an extra column)
        singles = [
            (ids.index(s[0]), built[s])
            for s in built
            if len(s) == 1 and s[0] in ids and len(ids) > 1 and built[s][1].width == 1
        ]
        # the nested fields' parents decide the indicator columns, so they are part of the key
        nesting = tuple(parents.get(fid, ()) for fid in ids)
        key = (ids, nesting, tuple(sorted(r.path for r in refs)), tuple(k for _, (k, _) in singles))

        def build(
            ids: tuple[int, ...] = ids,
            refs: list[DeleteFileRef] = refs,
            singles: list[tuple[int, tuple[Any, EqualityDeleteSet]]] = singles,
            nesting: tuple[tuple[int, ...], ...] = nesting,
        ) -> tuple[EqualityDeleteSet, int]:
            def one(r: DeleteFileRef) -> list[pa.ChunkedArray]:
                return DELETE_CACHE.get_or_load(
                    "equality",
                    (r.path, ids, nesting),
                    partial(_equality_file, io, _sorted_ids(r, ids), field_types, parents),
                )

            # the other readers wait for this set: its files are decoded side by side
            workers = min(len(refs), os.cpu_count() or 1)
            if workers > 1:
                with ThreadPoolExecutor(workers, thread_name_prefix="icemor-eq") as pool:
                    per_file = list(pool.map(one, refs))
            else:
                per_file = [one(r) for r in refs]
            columns = [
                pa.chunked_array([c for cols in per_file for c in cols[i].chunks], type=per_file[0][i].type)
                for i in range(len(per_file[0]))  # the keys, then nested-field indicators
            ]
            if singles and columns[0].length():
                covered = np.zeros(columns[0].length(), dtype=bool)
                for i, (_, single) in singles:
                    covered |= single.matches([columns[i]])
                if covered.any():
                    keep = pa.array(~covered)
                    columns = [c.filter(keep) for c in columns]
            eq = EqualityDeleteSet(columns)
            return eq, eq.nbytes

        built[ids] = (key, DELETE_CACHE.get_or_load("equality-set", key, build))
    return [(ids, eq) for ids, (_, eq) in built.items()]


def _sorted_ids(ref: DeleteFileRef, ids: tuple[int, ...]) -> DeleteFileRef:
    return replace(ref, equality_ids=ids)
