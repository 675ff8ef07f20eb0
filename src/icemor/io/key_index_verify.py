"""A key index's sidecar loaded only when it verifies against its data file.

**Nothing read from a sidecar can change a result unchecked.** On load the data file's footer is
read again (one small read) and must hash as the sidecar records, the row count must match,
the positions must be a permutation of ``0 .. rows - 1``, the rows must hash to the recorded
digest, and the sidecar's own pages carry CRCs; then it is checked against the data file
itself, cheaply: for one integer-like key, its least and greatest keys must be the footer's
statistics of the key column, and the keys of a slice of the file's rows (up to
:data:`_SAMPLE_ROWS` at the start of a row group chosen at random) must be at those positions
in the index. ``icemor check`` checks every row (``full``). A sidecar edited with its metadata
kept fails the digest; one forged whole (digest recomputed) with shifted keys fails the bounds
or the slice. A file rewritten in place with the same footer byte for byte (the same row
groups, sizes and statistics), which no Iceberg writer does, is caught by the slice only where
it differs there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import pyarrow_to_schema

from icemor.exceptions import CorruptFileError, IcemorError
from icemor.io.columns import equality_key_columns
from icemor.io.deletes import reaching
from icemor.io.equality import encode_keys, equal_keys, int_key
from icemor.io.key_index_core import POS, indexed, key_names
from icemor.io.key_index_sidecar import (
    META,
    Unfit,
    open_sidecar,
    read_footer,
    rows_digest,
    sidecar_identity,
    sidecar_path,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.types import IcebergType

    from icemor.io.key_index_core import IndexedFile, KeyIndex

__all__ = ["DataUnreadable", "load_sidecar"]

_log = logging.getLogger("icemor.io.key_index")  # one logger for the key index and its sidecars

_SAMPLE_ROWS = 4096
"""Rows of the data file whose keys are checked against a sidecar loaded (one slice)."""
_RANDOM = random.Random()  # which row group is sampled: not predictable by whoever writes a sidecar


class DataUnreadable(Exception):
    """The data file cannot be read to check its sidecar (a problem of the data file, not the
    sidecar's: the build from the data file reports it)."""


def load_sidecar(
    io: FileIO,
    f: IndexedFile,
    key_ids: Sequence[int],
    types: Sequence[pa.DataType],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None,
    *,
    full: bool = False,
) -> KeyIndex | None:
    """The stored index of ``f`` if it verifies against the data file (see the module).

    ``full``: every row of the data file is checked against it (``icemor check``), not a sample.
    Returns None when there is no sidecar of this very file (none, of another format, naming
    another file or another footer: harmless, rebuilt); raises :class:`Unfit` for one naming
    this file that does not verify.
    """
    location = sidecar_path(f.path, key_ids)
    try:
        pf = open_sidecar(io, location)
        if pf is None:
            return None
        try:
            stored = json.loads((pf.metadata.metadata or {}).get(META, b"{}"))
            if not isinstance(stored, dict):
                return None
            keys_digest = stored.pop("keys-sha256", None)
            footer_sha = stored.get("footer-sha256", "")
            if stored != sidecar_identity(f.path, f.size, f.rows, key_ids, footer_sha):
                return None
            try:
                footer = read_footer(io, f.path, f.size)
            except IcemorError as e:  # the data file's own problem: the build says it
                _log.debug("key index %s not used: %s", location, e)
                return None
            if footer_sha != hashlib.sha256(footer).hexdigest():
                return None
            table = pf.read(use_threads=False)
        finally:
            pf.close()
    except Unfit:
        raise
    except (OSError, pa.ArrowException, IcemorError, ValueError) as e:
        msg = f"it cannot be read: {e}"
        raise Unfit(msg) from e
    names = [f"k{i}" for i in range(len(key_ids))]
    if table.num_rows != f.rows or table.column_names != [*names, POS]:
        msg = f"it has {table.num_rows} rows of columns {table.column_names}, not the data file's"
        raise Unfit(msg)
    positions = np.asarray(table.column(POS).to_numpy(), dtype=np.int64)
    if not _permutation(positions, f.rows):
        msg = "its positions are not a permutation of the data file's rows"
        raise Unfit(msg)
    cols = []
    for name, t in zip(names, types, strict=True):
        c = table.column(name).combine_chunks()
        if c.type != t:
            msg = f"its key column {name} is of type {c.type}, not {t}"
            raise Unfit(msg)
        cols.append(c)
    try:
        if keys_digest != rows_digest(table):
            msg = "its rows do not hash to the SHA-256 of the keys it records"
            raise Unfit(msg)
        index = indexed(cols, positions)
    except (pa.ArrowException, IcemorError, ValueError) as e:
        msg = f"its keys cannot be indexed: {e}"
        raise Unfit(msg) from e
    _verify_against(io, f, key_ids, field_types, name_mapping, index, footer, full=full)
    return index


def _verify_against(
    io: FileIO,
    f: IndexedFile,
    ids: Sequence[int],
    field_types: Mapping[int, IcebergType],
    name_mapping: NameMapping | None,
    index: KeyIndex,
    footer: bytes,
    *,
    full: bool,
) -> None:
    """Check ``index`` against the data file ``f`` (whose Parquet footer is ``footer``): its key
    bounds against the footer's statistics (one integer-like key), and the keys at a slice of
    positions (up to :data:`_SAMPLE_ROWS` at the start of a row group chosen at random; every
    position when ``full``) against the data file's.

    Raises:
        Unfit: The index does not describe the data file.
        DataUnreadable: The data file cannot be read (the build says why).
    """
    try:
        metadata = pq.read_metadata(
            pa.BufferReader(b"PAR1" + footer + len(footer).to_bytes(4, "little") + b"PAR1")
        )
        with reaching("data file", f.path):
            stream = io.new_input(f.path).open()
        try:
            pf = pq.ParquetFile(stream, metadata=metadata, page_checksum_verification=True)
            try:
                file_schema = pyarrow_to_schema(
                    pf.schema_arrow, name_mapping, downcast_ns_timestamp_to_us=True
                )
            except ValueError as e:
                msg = f"data file {f.path} has no Iceberg field ids and the table has no name mapping: {e}"
                raise CorruptFileError(msg) from e
            names = key_names(file_schema, ids)
            if index.exact and len(names) == 1:
                _check_bounds(metadata, pf.schema_arrow.field(names[0]).type, names[0], index)
            start = 0
            if full:
                table: pa.Table | pa.RecordBatch = pf.read(columns=names, use_threads=False)
            elif metadata.num_row_groups:
                group = _RANDOM.randrange(metadata.num_row_groups)
                start = sum(metadata.row_group(g).num_rows for g in range(group))
                batches = pf.iter_batches(
                    batch_size=_SAMPLE_ROWS, row_groups=[group], columns=names, use_threads=False
                )
                table = next(iter(batches), pa.table({}))
            else:
                return
        finally:
            stream.close()
        cols = equality_key_columns(table, file_schema, ids, field_types, {}, f.constants)
    except (OSError, pa.ArrowException, IcemorError, ValueError, KeyError) as e:
        msg = f"data file {f.path} could not be read to check its key index: {e}"
        raise DataUnreadable(msg) from e
    bad = _mismatches(index, cols, start)
    if bad is not None:
        msg = f"it maps the key of position {bad} of the data file elsewhere (the key is not the file's)"
        raise Unfit(msg)


def _check_bounds(metadata: pq.FileMetaData, file_type: pa.DataType, name: str, index: KeyIndex) -> None:
    """The least and greatest keys of an exact index are the data file's column bounds (its
    footer's statistics), where the file has statistics of the column as stored in the index."""
    t = index.types[0]
    if not len(index.values) or not (
        file_type == t or (pa.types.is_signed_integer(file_type) and pa.types.is_signed_integer(t))
    ):
        return
    column = next((j for j in range(metadata.num_columns) if metadata.schema.column(j).path == name), None)
    if column is None:
        return
    lo: int | None = None
    hi: int | None = None
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if not group.num_rows:
            continue
        s = group.column(column).statistics
        if s is None or not s.has_min_max or not isinstance(s.min_raw, int) or not isinstance(s.max_raw, int):
            return  # no bounds to compare with: the sample still checks
        lo = s.min_raw if lo is None else min(lo, s.min_raw)
        hi = s.max_raw if hi is None else max(hi, s.max_raw)
    least, greatest = int(index.values[0]), int(index.values[-1])
    if lo is not None and hi is not None and (lo, hi) != (least, greatest):
        msg = f"its keys span [{least}, {greatest}], the data file's statistics say [{lo}, {hi}]"
        raise Unfit(msg)


def _mismatches(index: KeyIndex, cols: Sequence[pa.Array | pa.ChunkedArray], start: int) -> int | None:
    """The first position in ``start .. start + len(cols[0])`` whose key in the data file
    (``cols``, those rows) is not the index's at that position, or None when all are."""
    n = len(cols[0]) if cols else 0
    if not n:
        return None
    stop = start + n
    if stop > index.rows:  # more rows than the manifest entry says: not this index's file
        return index.rows
    if index.positions is None:
        entries = np.arange(start, stop, dtype=np.int64)
    else:  # the entry holding each position (the positions are a permutation)
        inside = np.flatnonzero((index.positions >= start) & (index.positions < stop))
        entries = np.empty(n, dtype=np.int64)
        entries[index.positions[inside] - start] = inside
    if index.exact:
        col = cols[0]
        q = int_key(col.cast(index.types[0]) if col.type != index.types[0] else col)
        if q is None:  # NULLs in the file: it cannot be exact
            return start
        same = np.asarray(index.values, dtype=np.int64)[entries] == q
    else:
        encoded = encode_keys(cols, index.types)
        if encoded is None or index.keys is None:
            return start
        same = equal_keys(encoded, np.arange(n, dtype=np.int64), index.keys, entries)
    wrong = np.flatnonzero(~same)
    return int(start + wrong[0]) if len(wrong) else None


def _permutation(positions: npt.NDArray[np.int64], rows: int) -> bool:
    if len(positions) != rows:
        return False
    if rows == 0:
        return True
    if int(positions.min()) < 0 or int(positions.max()) >= rows:
        return False
    seen = np.zeros(rows, dtype=bool)
    seen[positions] = True
    return bool(seen.all())
