"""Manifests and manifest lists read with the v3 schema, through pyiceberg's Avro reader.

Borrowed: pyiceberg's Avro layer (``AvroFile`` with ``read_types`` / ``read_enums`` and its
``_read_header``, ``_SCHEMA_KEY``, ``new_decoder``, ``resolve_reader``) and the entry and list
schemas ``MANIFEST_ENTRY_SCHEMAS`` / ``MANIFEST_LIST_FILE_SCHEMAS``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import _SCHEMA_KEY, AvroFile
from pyiceberg.avro.resolver import resolve_reader
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)

if TYPE_CHECKING:
    from pyiceberg.io import InputFile

__all__ = ["read_manifest_entries_v3", "read_manifest_list_v3"]

# (module, name) of every internal used below; tests/_compat/test_pyiceberg.py imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.avro.file", "AvroFile"),
    ("pyiceberg.avro.file", "AvroFile._read_header"),
    ("pyiceberg.avro.file", "_SCHEMA_KEY"),
    ("pyiceberg.avro.decoder", "new_decoder"),
    ("pyiceberg.avro.resolver", "resolve_reader"),
    ("pyiceberg.manifest", "MANIFEST_ENTRY_SCHEMAS"),
    ("pyiceberg.manifest", "MANIFEST_LIST_FILE_SCHEMAS"),
)

_READERS: dict[tuple[str, int, int, int], tuple[Any, Any]] = {}
_READERS_LOCK = threading.Lock()


class _ResolvedAvroFile(AvroFile[Any]):
    """pyiceberg's ``AvroFile``, with the file schema's conversion and the reader tree resolved
    once per (writer schema, read schema) in the process.

    Why: pyiceberg converts each file's Avro schema to an Iceberg schema and resolves a reader
    tree on every open: measured, ~80 % of the time to read a small manifest (a commit reads
    every manifest of its parent; a scan of many manifests pays it per manifest). Manifests of
    one table share a handful of writer schemas, and a resolved reader is a stateless tree.
    """

    __slots__ = ()

    def __enter__(self) -> _ResolvedAvroFile:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        text = self.header.meta.get(_SCHEMA_KEY)
        key = (text or "", id(self.read_schema), id(self.read_types), id(self.read_enums))
        found = _READERS.get(key) if text is not None and self.read_schema is not None else None
        if found is None:
            schema = self.header.get_schema()
            read_schema = self.read_schema or schema
            found = (schema, resolve_reader(schema, read_schema, self.read_types, self.read_enums))
            if text is not None and self.read_schema is not None:
                with _READERS_LOCK:
                    if len(_READERS) > 256:  # bounded: a few schemas per table in practice
                        _READERS.clear()
                    _READERS[key] = found
        self.schema, self.reader = found
        if not self.read_schema:
            self.read_schema = self.schema
        return self


_ENTRY_READ_TYPES: dict[int, Any] = {-1: ManifestEntry, 2: DataFile}
_ENTRY_READ_ENUMS: dict[int, Any] = {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}


def read_manifest_entries_v3(input_file: InputFile) -> list[ManifestEntry]:
    """Every entry of one manifest (DELETED ones too), decoded with the v3 entry schema.

    Why: pyiceberg 0.12 reads every manifest with its v2 read schema, which drops the v3 fields
    a merge-on-read reader needs; its own Avro reader with its v3 schema keeps them (a superset:
    v1/v2 manifests resolve to it with the new optional fields null). Sequence numbers are not
    inherited here, nor is ``spec_id`` set (:func:`set_spec_id`).
    """
    with _ResolvedAvroFile(
        input_file, MANIFEST_ENTRY_SCHEMAS[3], read_types=_ENTRY_READ_TYPES, read_enums=_ENTRY_READ_ENUMS
    ) as reader:
        return list(reader)


_LIST_READ_TYPES: dict[int, Any] = {-1: ManifestFile, 508: PartitionFieldSummary}
_LIST_READ_ENUMS: dict[int, Any] = {517: ManifestContent}


def read_manifest_list_v3(input_file: InputFile) -> list[ManifestFile]:
    """The manifests of a manifest list decoded with the v3 schema (``first_row_id`` kept).

    Why: pyiceberg 0.12 reads manifest lists with its v2 schema, which drops ``first_row_id``;
    a v3 writer must carry it over unchanged.
    """
    with _ResolvedAvroFile(
        input_file, MANIFEST_LIST_FILE_SCHEMAS[3], read_types=_LIST_READ_TYPES, read_enums=_LIST_READ_ENUMS
    ) as reader:
        return list(reader)
