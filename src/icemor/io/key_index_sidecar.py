"""The sidecar of a key index: where it lies, what it records, and its files opened with care.

A sidecar (what it is for, and what it records: :mod:`icemor.io.key_index`) is a hidden Parquet
file beside its data file (:func:`sidecar_path`): the index's key columns and ``pos`` in index
order, with the identity of the data file and the digests in its key-value metadata
(:data:`META`).

**Sidecar files are opened with care.** On a local disk, only a regular file at a sidecar's
path is read (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``): a symlink there
is never followed, a FIFO or device never opened for reading (a FIFO would block forever);
such a file is not used, and is replaced by the rebuilt sidecar. A sidecar is written into a
new temporary file beside it (``O_CREAT | O_EXCL | O_NOFOLLOW``), flushed to disk and renamed
over the sidecar's path: a rename replaces a symlink (or FIFO) itself, never its target, and a
reader sees the old sidecar or the new one, whole. On object stores (no symlinks, no FIFOs)
a sidecar is one object, written from memory in one piece.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import stat
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO

from icemor.exceptions import CorruptFileError, IcemorError
from icemor.io.deletes import local_path, open_parquet, reaching
from icemor.io.equality import encode_keys

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.io import FileIO

    from icemor.io.key_index_core import KeyIndex

__all__ = [
    "FORMAT",
    "META",
    "SIDECAR_SUFFIX",
    "Unfit",
    "data_path_of",
    "footer_digest",
    "open_sidecar",
    "read_footer",
    "rows_digest",
    "save_key_index",
    "sidecar_identity",
    "sidecar_key_ids",
    "sidecar_path",
]

_log = logging.getLogger("icemor.io.key_index")  # one logger for the key index and its sidecars

FORMAT = 2
"""The sidecar's layout and meaning; an index of another format is rebuilt, never read (2: the
SHA-256 of its rows is recorded, ``keys-sha256``)."""
SIDECAR_SUFFIX = ".icemor-keys.parquet"
_TEMP_TAIL = re.compile(r"\.[0-9a-f]{16}\.tmp$")
"""What a sidecar's temporary file adds to its name (:func:`_replace_local`)."""
META = b"icemor.key-index"


def sidecar_path(data_path: str, key_ids: Sequence[int]) -> str:
    """Where the key index of ``data_path`` on ``key_ids`` is stored: beside it, hidden."""
    directory, _, name = data_path.rpartition("/")
    return f"{directory}/.{name}.k{'-'.join(str(i) for i in key_ids)}{SIDECAR_SUFFIX}"


def data_path_of(sidecar: str) -> str | None:
    """The data file a sidecar path belongs to, or None when ``sidecar`` is not one.

    A sidecar's temporary file (``<sidecar>.<16 hex digits>.tmp``, left by a process killed while
    writing it) belongs to the data file too: expiry and orphan removal take it with the file.
    """
    parsed = _parse_sidecar(_TEMP_TAIL.sub("", sidecar))
    return None if parsed is None else parsed[0]


def sidecar_key_ids(sidecar: str) -> tuple[int, ...] | None:
    """The key field ids of a sidecar path (not of a temporary file), or None when it is not one."""
    parsed = _parse_sidecar(sidecar)
    return None if parsed is None else parsed[1]


def _parse_sidecar(sidecar: str) -> tuple[str, tuple[int, ...]] | None:
    directory, _, name = sidecar.rpartition("/")
    if not (name.startswith(".") and name.endswith(SIDECAR_SUFFIX)):
        return None
    stem = name[1 : -len(SIDECAR_SUFFIX)]
    base, dot, ids = stem.rpartition(".k")
    parts = ids.split("-")
    if not dot or not base or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return f"{directory}/{base}", tuple(int(p) for p in parts)


def footer_digest(io: FileIO, path: str, size: int) -> str:
    """SHA-256 of the Parquet footer of ``path`` (its file metadata), read from the file's end.

    Raises:
        MissingFileError: The file cannot be opened.
        CorruptFileError: It does not end like a Parquet file of ``size`` bytes.
    """
    return hashlib.sha256(read_footer(io, path, size)).hexdigest()


def read_footer(io: FileIO, path: str, size: int) -> bytes:
    """The Parquet footer (file metadata) of ``path``, read from the file's end."""
    with reaching("data file", path), io.new_input(path).open() as f:
        f.seek(size - 8)
        tail = f.read(8)
        if len(tail) != 8 or tail[4:] != b"PAR1":
            msg = f"data file {path} does not end as a Parquet file of {size} bytes"
            raise CorruptFileError(msg)
        length = int.from_bytes(tail[:4], "little")
        if length <= 0 or length > size - 12:
            msg = f"data file {path} has a footer length of {length} bytes in {size}"
            raise CorruptFileError(msg)
        f.seek(size - 8 - length)
        footer: bytes = f.read(length)
    if len(footer) != length:
        msg = f"data file {path} is truncated (its footer is incomplete)"
        raise CorruptFileError(msg)
    return footer


def sidecar_identity(path: str, size: int, rows: int, key_ids: Sequence[int], digest: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "data-file": path,
        "size": size,
        "rows": rows,
        "key-ids": list(key_ids),
        "footer-sha256": digest,
    }


def rows_digest(table: pa.Table) -> str:
    """SHA-256 of a sidecar's rows (each key column, then ``pos``, in index order), over their
    canonical form (:func:`icemor.io.equality.encode_keys`): alike for the columns written and
    the columns read back, whatever their chunks, offsets or NULL slots hold."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(f"{name}:{col.type}:{len(col)}:{col.null_count};".encode())
        encoded = encode_keys([col])
        if encoded is None:
            msg = f"key column of type {col.type} cannot be indexed"
            raise CorruptFileError(msg)
        e = encoded[0]
        if e.valid is not None:
            h.update(np.packbits(e.valid).tobytes())
        if e.words is not None:
            h.update(np.ascontiguousarray(e.words).data)
            continue
        assert e.values is not None
        values = e.values.cast(pa.large_binary())
        if values.null_count:
            values = values.fill_null(pa.scalar(b"", pa.large_binary()))
        buffers = values.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64, count=len(values) + 1, offset=values.offset * 8)
        start, stop = int(offsets[0]), int(offsets[-1])
        h.update((offsets - start).data)
        if buffers[2] is not None:
            h.update(memoryview(buffers[2])[start:stop])
    return h.hexdigest()


def save_key_index(
    io: FileIO, path: str, size: int, key_ids: Sequence[int], index: KeyIndex, *, digest: str | None = None
) -> str | None:
    """Store ``index`` as the sidecar of data file ``path``; returns its path, or None if it could
    not be written (only the next lookup's time is lost; nothing of it is left behind).

    The file is written whole or not at all: on a local disk into a new temporary file beside it,
    then renamed over the sidecar's path (a rename replaces a symlink, FIFO or device found
    there, never what it points to); elsewhere (object stores) as one object.
    """
    rows = index.rows
    location = sidecar_path(path, key_ids)
    local = _local(io, location)
    try:
        digest = digest or footer_digest(io, path, size)
        assert index.columns is not None
        identity = {
            **sidecar_identity(path, size, rows, key_ids, digest),
            "keys-sha256": rows_digest(index.columns),
        }
        table = index.columns.replace_schema_metadata({META: json.dumps(identity, sort_keys=True).encode()})
        deltas = [
            name
            for name, t in zip(table.column_names, table.schema.types, strict=True)
            if pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)
        ]
        sink = pa.BufferOutputStream()
        pq.write_table(
            table,
            sink,
            compression="zstd",
            # sorted integers and positions: deltas of a few bits each
            use_dictionary=[c for c in table.column_names if c not in deltas],
            column_encoding=dict.fromkeys(deltas, "DELTA_BINARY_PACKED"),
            write_page_checksum=True,
        )
        data = sink.getvalue()
        if local is not None:
            _replace_local(local, data)
        else:
            with io.new_output(location).create(overwrite=True) as out:
                out.write(data)
    except (OSError, pa.ArrowException, IcemorError) as e:
        _log.debug("key index of %s not stored: %s", path, e)
        if local is None:
            with contextlib.suppress(OSError):
                io.delete(location)
        return None
    return location


def _local(io: FileIO, path: str) -> str | None:
    """The local path of ``path`` when ``io`` keeps it on the local disk (pyarrow's or fsspec's
    FileIO, a ``file:`` or plain path), where symlinks, FIFOs and devices exist; else None."""
    local = local_path(io, path)
    if local is None and (isinstance(io, PyArrowFileIO) or type(io).__module__ == "pyiceberg.io.fsspec"):
        scheme, netloc, where = PyArrowFileIO.parse_location(path)
        local = where if scheme == "file" and not netloc else None
    return local


def _replace_local(local: str, data: pa.Buffer) -> None:
    """Write ``data`` to a new file beside ``local`` (never an existing one: ``O_EXCL``, no
    symlink followed), then rename it over ``local``; on failure remove it."""
    temp = f"{local}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # no fsync: a sidecar torn by a crash fails its digest on load and is rebuilt, and a
            # CDC batch writes one per new data file
        finally:
            os.close(fd)
        os.replace(temp, local)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _read_local(local: str) -> bytes | None:
    """The bytes of the regular file at ``local``; None when there is none.

    Raises:
        Unfit: Something else is there (a symlink, FIFO, device, directory): never followed,
            never read (a FIFO would block the read forever).
    """
    try:
        mode = os.lstat(local).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        msg = "it is not a regular file (a symlink, FIFO, device or directory): not followed or read"
        raise Unfit(msg)
    # a file swapped for a symlink or FIFO since: O_NOFOLLOW fails, O_NONBLOCK does not wait
    fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            msg = "it is not a regular file: not read"
            raise Unfit(msg)
        chunks = []
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class Unfit(Exception):
    """A sidecar found at its path, naming its data file or not readable, that is not used: it
    does not describe the data file (forged, damaged, or not a regular file)."""

    def __str__(self) -> str:
        return " ".join(super().__str__().split())  # one line (pyarrow's messages may have more)


def open_sidecar(io: FileIO, location: str) -> pq.ParquetFile | None:
    """The sidecar at ``location`` opened (read whole, from a regular file if local), or None."""
    local = _local(io, location)
    if local is None:
        if not io.new_input(location).exists():
            return None
        return open_parquet(io, location, what="key index")
    raw = _read_local(local)
    if raw is None:
        return None
    return pq.ParquetFile(pa.BufferReader(raw), page_checksum_verification=True)
