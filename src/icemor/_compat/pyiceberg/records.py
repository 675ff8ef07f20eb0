"""The fields of pyiceberg's ``DataFile`` and ``ManifestFile`` records it has no attributes for.

pyiceberg 0.12 knows format versions 1 and 2: its records of a v3 manifest (read with the v3
schema, :mod:`.manifest_read`) keep the v3-only fields at their schema positions, found here
by name. Borrowed: ``DATA_FILE_TYPE`` and ``MANIFEST_LIST_FILE_SCHEMAS`` (the positions),
``DataFile.from_args`` with its private ``_table_format_version``, the ``spec_id`` setter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DATA_FILE_TYPE, MANIFEST_LIST_FILE_SCHEMAS, DataFile

if TYPE_CHECKING:
    from pyiceberg.manifest import ManifestFile

__all__ = [
    "V3_DATA_FILE_POSITIONS",
    "V3_FIRST_ROW_ID",
    "content_size",
    "first_row_id_of",
    "manifest_first_row_id",
    "set_spec_id",
    "set_v3_field",
    "v3_data_file",
    "v3_fields",
]

# (module, name) of every internal used below; tests/_compat/test_pyiceberg.py imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.manifest", "DATA_FILE_TYPE"),
    ("pyiceberg.manifest", "MANIFEST_LIST_FILE_SCHEMAS"),
    ("pyiceberg.manifest", "DataFile.from_args"),
    ("pyiceberg.manifest", "DataFile.spec_id"),
)


def _v3_positions() -> dict[str, int]:
    """Positions of the v3-only data_file fields in pyiceberg's DataFile record.

    pyiceberg 0.12 reads manifests with its v2 schema and drops these fields; icemor reads with
    the v3 schema, where the record keeps them at these positions (found by name, not assumed).
    """
    names = [f.name for f in DATA_FILE_TYPE[3].fields]
    wanted = ("first_row_id", "referenced_data_file", "content_offset", "content_size_in_bytes")
    return {name: names.index(name) for name in wanted}


V3_DATA_FILE_POSITIONS: dict[str, int] = _v3_positions()
_REFERENCED_DATA_FILE = V3_DATA_FILE_POSITIONS["referenced_data_file"]
_CONTENT_OFFSET = V3_DATA_FILE_POSITIONS["content_offset"]
_CONTENT_SIZE = V3_DATA_FILE_POSITIONS["content_size_in_bytes"]

V3_FIRST_ROW_ID = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields].index("first_row_id")
"""The position of ``first_row_id`` in a v3 ``ManifestFile`` record."""


def v3_fields(data_file: DataFile) -> tuple[str | None, int | None, int | None]:
    """``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes`` of a data file
    read by :func:`read_manifest_entries_v3`.

    Why: pyiceberg 0.12's ``DataFile`` has no attributes for them; the record keeps them at
    their v3 schema positions (:data:`V3_DATA_FILE_POSITIONS`).
    """
    return data_file[_REFERENCED_DATA_FILE], data_file[_CONTENT_OFFSET], data_file[_CONTENT_SIZE]


def content_size(data_file: DataFile) -> int | None:
    """The ``content_size_in_bytes`` of a v3 ``DataFile`` record (None for a v2 record)."""
    return data_file[_CONTENT_SIZE] if len(data_file) > _CONTENT_SIZE else None


def set_spec_id(data_file: DataFile, spec_id: int) -> None:
    """Give a decoded data file its manifest's partition spec id.

    Why: the spec id is not a manifest field; pyiceberg's own manifest reader sets it the same
    way (on the private ``_spec_id`` behind the setter), and its writers and summaries read it.
    """
    data_file.spec_id = spec_id


def v3_data_file(**fields: Any) -> DataFile:
    """A ``DataFile`` record with the v3 fields (for :class:`ManifestWriterV3`).

    Why: ``DataFile.from_args`` builds v2 records unless given pyiceberg's private
    ``_table_format_version``.
    """
    return DataFile.from_args(_table_format_version=3, **fields)


def set_v3_field(data_file: DataFile, name: str, value: Any) -> None:
    """Set a v3-only field (``first_row_id`` ...) of a v3 ``DataFile`` record by its position."""
    data_file[V3_DATA_FILE_POSITIONS[name]] = value


def first_row_id_of(data_file: DataFile) -> int | None:
    """The ``first_row_id`` of a v3 ``DataFile`` record (None for a v2 record)."""
    pos = V3_DATA_FILE_POSITIONS["first_row_id"]
    return data_file[pos] if len(data_file) > pos else None


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    """The ``first_row_id`` of a manifest read by :func:`read_manifest_list_v3` (None otherwise).

    Why: pyiceberg 0.12's ``ManifestFile`` has no attribute for it; the record keeps it at its
    v3 schema position.
    """
    return manifest[V3_FIRST_ROW_ID] if len(manifest) > V3_FIRST_ROW_ID else None
