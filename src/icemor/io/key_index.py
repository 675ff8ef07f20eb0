"""Key index: per data file, its key values sorted, each with its row position.

What position-mode CDC (:mod:`icemor.ops.key_lookup`) asks of a data file is "at which positions
are these keys?", for a few thousand keys of a batch against a file of millions of rows. Reading
the file's key column for every batch costs a Parquet decode of the whole column per file per
batch; the index answers with two binary searches per key:

- one integer-like key column without NULLs (long, int, date, time, timestamp): the values,
  sorted, and the positions in that order; a lookup is ``np.searchsorted`` (exact);
- anything else (strings, decimals, binary, UUIDs, several columns, NULLs, floats): a 64-bit
  hash per row (:func:`icemor.io.equality.hash_keys`, the equality probe's hash), sorted, with
  the positions and the key values in that order; every hash match is checked against the
  values, so a collision costs time, never a wrong position.

**Sidecar.** An index is built once from the file's key columns and stored next to the data
file as a hidden Parquet file (``.<data file name>.k<key ids>.icemor-keys.parquet``: the key
values and ``pos``, in index order). It is not part of the table: no metadata names it, Iceberg
readers never list directories, and hidden names are skipped by Java's and icemor's orphan
removal (icemor's removes a sidecar once its data file is gone). CDC writes the sidecars of the
files it writes (their rows are in memory); any other data file gets its sidecar the first time
a lookup needs it, if it lies under the table's location (a file registered where it lies, with
add-files, is never written beside: its index is kept in the process only).

**Nothing read from a sidecar can change a result unchecked.** Its metadata names the data
file (path, size, row count), the key field ids, the format version, a SHA-256 of the data
file's Parquet footer and a SHA-256 of its own rows; on load it is checked against all of them
and, cheaply, against the data file itself (:mod:`icemor.io.key_index_verify`); ``icemor
check`` checks every row (:func:`verify_sidecar`). An index that fails any check, or cannot be
read, is rebuilt from the data file (and stored again), with one warning. In a process the
index is kept in :data:`icemor.io.cache.DELETE_CACHE` (kind ``key-index``), keyed by path, size
and row count. How a sidecar is named, written and read safely (no symlink followed, no FIFO
opened): :mod:`icemor.io.key_index_sidecar`. The index itself and its lookups:
:mod:`icemor.io.key_index_core`; many small files' indexes searched as one:
:mod:`icemor.io.key_index_merged`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyiceberg.io.pyarrow import schema_to_pyarrow

from icemor.io.cache import DELETE_CACHE
from icemor.io.columns import equality_key_columns
from icemor.io.deletes import read_columns
from icemor.io.key_index_core import IndexedFile, KeyIndex, build_key_index, key_names
from icemor.io.key_index_merged import MergedKeyIndex
from icemor.io.key_index_sidecar import (
    FORMAT,
    Unfit,
    data_path_of,
    footer_digest,
    save_key_index,
    sidecar_key_ids,
    sidecar_path,
)
from icemor.io.key_index_verify import DataUnreadable, load_sidecar

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.types import IcebergType

__all__ = [
    "FORMAT",
    "IndexedFile",
    "KeyIndex",
    "MergedKeyIndex",
    "build_key_index",
    "data_path_of",
    "footer_digest",
    "key_index",
    "remember_key_index",
    "save_key_index",
    "sidecar_key_ids",
    "sidecar_path",
    "verify_sidecar",
]

_log = logging.getLogger(__name__)


def key_index(
    io: FileIO,
    f: IndexedFile,
    key_ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None = None,
) -> KeyIndex:
    """The key index of data file ``f``: from this process's cache, its verified sidecar, or built
    from the file's key columns (and then stored as its sidecar).

    Raises:
        MissingFileError, CorruptFileError: The data file cannot be read.
    """
    ids = tuple(key_ids)
    types = _arrow_types(field_types, ids)

    def load() -> tuple[KeyIndex, int]:
        stored = None
        if f.store:
            try:
                stored = load_sidecar(io, f, ids, types, field_types, name_mapping)
            except Unfit as e:
                _log.warning(
                    "key index %s not used, rebuilt from its data file: %s", sidecar_path(f.path, ids), e
                )
            except DataUnreadable as e:
                _log.debug("key index of %s not checked: %s", f.path, e)
        if stored is None:
            built, digest = _build_from_file(io, f, ids, field_types, name_mapping)
            if f.store:
                save_key_index(io, f.path, f.size, ids, built, digest=digest)
            stored = built
        index = stored.lean()
        return index, index.nbytes

    return DELETE_CACHE.get_or_load("key-index", (f.path, f.size, f.rows, ids), load)


def verify_sidecar(
    io: FileIO,
    f: IndexedFile,
    key_ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None = None,
) -> str | None:
    """Check the sidecar of ``f`` on ``key_ids`` fully, every key against the data file (``icemor
    check``): what is wrong with it, or None when it verifies or a lookup would not use it
    anyway (there is none, or it is of another format or names another file or footer)."""
    ids = tuple(key_ids)
    try:
        load_sidecar(io, f, ids, _arrow_types(field_types, ids), field_types, name_mapping, full=True)
    except Unfit as e:
        return str(e)
    except DataUnreadable:
        return None  # the data file's own problem: the check reports it as such
    return None


def _arrow_types(field_types: Mapping[int, IcebergType], ids: Sequence[int]) -> tuple[pa.DataType, ...]:
    return tuple(schema_to_pyarrow(field_types[i], include_field_ids=False) for i in ids)


def remember_key_index(path: str, size: int, key_ids: Sequence[int], index: KeyIndex) -> None:
    """Keep an index this process built itself (for a file it wrote) in the process cache."""
    lean = index.lean()
    DELETE_CACHE.put("key-index", (path, size, index.rows, tuple(key_ids)), lean, lean.nbytes)


def _build_from_file(
    io: FileIO,
    f: IndexedFile,
    ids: tuple[int, ...],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None,
) -> tuple[KeyIndex, str]:
    digest = footer_digest(io, f.path, f.size)
    table, file_schema = read_columns(
        io,
        f.path,
        f.rows,
        "data file",
        lambda s: key_names(s, ids),
        name_mapping=name_mapping,
        use_threads=False,
    )
    cols = equality_key_columns(table, file_schema, ids, field_types, {}, f.constants)
    return build_key_index(cols), digest
