"""Read manifest entries with the v3 entry schema.

pyiceberg 0.12 reads every manifest with its v2 read schema, which drops the v3 fields a
merge-on-read reader needs (``referenced_data_file``, ``content_offset``,
``content_size_in_bytes``, ``first_row_id``). We read with pyiceberg's own Avro reader and
its v3 schema instead (:func:`icemor._compat.pyiceberg.read_manifest_entries_v3`): the v3
entry schema is a superset, so v1/v2 manifests resolve to it with the new optional fields null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.manifest import (
    DataFile,
    FileFormat,
    ManifestContent,
    ManifestEntryStatus,
)

from icemor._compat.pyiceberg import (
    first_row_id_of,
    manifest_first_row_id,
    read_manifest_entries_v3,
    read_manifest_list_v3,
    set_spec_id,
    v3_fields,
)
from icemor.exceptions import CorruptFileError, MissingFileError
from icemor.io.cache import DELETE_CACHE
from icemor.spec.files import DataFileRef, DeleteFileRef, FileContent
from icemor.spec.rules import file_path_bounds_scope

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestEntry, ManifestFile
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "ManifestFileEntry",
    "live_delete_files",
    "live_with_first_row_ids",
    "manifest_entries_cached",
    "read_manifest_entries",
    "read_manifest_list",
]


@dataclass(slots=True)
class ManifestFileEntry:
    """A live manifest entry with inherited sequence numbers and the v3 fields kept."""

    data_file: DataFile
    data_sequence_number: int
    file_sequence_number: int | None
    spec_id: int
    referenced_data_file: str | None
    content_offset: int | None
    content_size_in_bytes: int | None
    first_row_id: int | None = None
    """v3 data files: explicit or inherited (spec, "First Row ID Inheritance")."""
    _data_ref: DataFileRef | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def content(self) -> FileContent:
        return FileContent(int(self.data_file.content))

    def partition_tuple(self) -> tuple[object, ...]:
        partition = self.data_file.partition
        return tuple(partition[i] for i in range(len(partition))) if partition is not None else ()

    def to_data_ref(self) -> DataFileRef:
        """The slim descriptor a scan task carries (built once per entry).

        Entries are cached with their manifest and never changed: a repeated plan of a table of
        20,000 files spent ~60 ms building the same descriptors again.
        """
        if self._data_ref is None:
            self._data_ref = self._new_data_ref()
        return self._data_ref

    def _new_data_ref(self) -> DataFileRef:
        f = self.data_file
        return DataFileRef(
            *self._ref_fields(),
            split_offsets=tuple(f.split_offsets) if f.split_offsets else None,
            first_row_id=self.first_row_id,
        )

    def _ref_fields(self) -> tuple[str, str, int, int, int, tuple[object, ...], int]:
        """The :class:`ContentFileRef` fields, in their order."""
        f = self.data_file
        return (
            f.file_path,
            _format_name(f.file_format),
            f.record_count,
            f.file_size_in_bytes,
            self.spec_id,
            self.partition_tuple(),
            self.data_sequence_number,
        )

    def to_delete_ref(self) -> DeleteFileRef:
        f = self.data_file
        return DeleteFileRef(
            *self._ref_fields(),
            content=self.content,
            equality_ids=tuple(f.equality_ids or ()),
            referenced_data_file=self.referenced_data_file or _path_bounds_scope(f),
            content_offset=self.content_offset,
            content_size_in_bytes=self.content_size_in_bytes,
        )


def _path_bounds_scope(f: DataFile) -> str | None:
    if int(f.content) != FileContent.POSITION_DELETES:
        return None
    return file_path_bounds_scope(f.lower_bounds, f.upper_bounds)


def _format_name(file_format: FileFormat | str) -> str:
    return file_format.value if isinstance(file_format, FileFormat) else str(file_format)


def _corrupt(what: str, path: str, e: Exception) -> CorruptFileError:
    """The error for an Avro file that does not decode.

    Avro files carry no checksum; damaged bytes surface as whatever the decoder trips over
    (``UnicodeDecodeError``, ``EOFError``, ``ValueError``, ``KeyError``, ``zlib.error``…), so
    every exception of the decoding becomes one error naming the file.
    """
    detail = str(e).strip().splitlines()
    reason = f"{type(e).__name__}: {detail[0]}" if detail else type(e).__name__
    return CorruptFileError(f"{what} {path} is truncated or corrupt ({reason[:200]})")


def read_manifest_list(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The manifests of ``snapshot``, read from its manifest list with one clear error when unreadable.

    Raises:
        MissingFileError: The manifest list does not exist.
        CorruptFileError: It does not decode (truncated or damaged).
    """
    path = snapshot.manifest_list

    def load() -> tuple[tuple[ManifestFile, ...], int]:
        try:
            # a v3 snapshot's list carries each manifest's first_row_id, which pyiceberg's
            # (v2) read schema drops; row lineage needs it
            v3 = getattr(snapshot, "first_row_id", None) is not None
            manifests = tuple(read_manifest_list_v3(io.new_input(path)) if v3 else snapshot.manifests(io))
        except FileNotFoundError as e:
            msg = f"manifest list not found: {path}"
            raise MissingFileError(msg) from e
        except Exception as e:
            raise _corrupt("manifest list", path, e) from e
        return manifests, 1024 * (1 + len(manifests))

    # written once, never changed (a commit writes a new one): decoded once per process, as
    # repeated small queries paid ~2 ms of Avro decoding for it every time
    return list(DELETE_CACHE.get_or_load("manifest-list", path, load))


def read_manifest_entries(io: FileIO, manifest: ManifestFile) -> list[ManifestFileEntry]:
    """Read the live (ADDED or EXISTING) entries of one manifest, inheriting sequence numbers.

    Sequence-number inheritance (spec, "Sequence Number Inheritance"): a null data sequence
    number is inherited from the manifest, which is only valid for ADDED entries; v1
    manifests have sequence number 0.
    """
    key = _entries_key(manifest)
    # manifests are written once and never changed: decoded once per process (~0.7 ms of Avro
    # for a 10-entry manifest, paid by every small query before)
    return list(
        DELETE_CACHE.get_or_load("manifest-entries", key, lambda: _sized(_decode_entries(io, manifest)))
    )


def manifest_entries_cached(manifest: ManifestFile) -> bool:
    """Whether :func:`read_manifest_entries` of ``manifest`` would read nothing."""
    return DELETE_CACHE.peek("manifest-entries", _entries_key(manifest)) is not None


def _entries_key(manifest: ManifestFile) -> tuple[str, int, int, int | None]:
    # the sequence number ADDED entries inherit is the manifest list's, not the file's; so is
    # the first_row_id (a manifest written before a v3 upgrade gets one later)
    return (
        manifest.manifest_path,
        manifest.sequence_number or 0,
        manifest.partition_spec_id,
        manifest_first_row_id(manifest),
    )


def live_with_first_row_ids(
    manifest: ManifestFile, entries: Iterable[ManifestEntry]
) -> Iterator[tuple[ManifestEntry, int | None]]:
    """The live (ADDED, EXISTING) entries of ``manifest``, each with its data file's first_row_id.

    Inheritance as the spec's "First Row ID Inheritance" and Java's ``ManifestReader.idAssigner``:
    a data file without one gets the manifest's plus the record counts of the live data files
    before it that had none; DELETED entries take no ids (the manifest list advanced by added
    and existing rows only). A manifest without one (listed before a v3 upgrade) gives none.
    """
    next_id = manifest_first_row_id(manifest) if manifest.content == ManifestContent.DATA else None
    for entry in entries:
        if entry.status == ManifestEntryStatus.DELETED:
            continue
        first_row_id = first_row_id_of(entry.data_file)
        if first_row_id is None and next_id is not None:
            first_row_id = next_id
            next_id += entry.data_file.record_count
        yield entry, first_row_id


def _sized(entries: list[ManifestFileEntry]) -> tuple[tuple[ManifestFileEntry, ...], int]:
    # decoded entries (metrics maps, partition records) are roughly 2 KiB each
    return tuple(entries), 1024 + 2048 * len(entries)


def _decode_entries(io: FileIO, manifest: ManifestFile) -> list[ManifestFileEntry]:
    try:
        raw = read_manifest_entries_v3(io.new_input(manifest.manifest_path))
    except FileNotFoundError as e:
        msg = f"manifest file not found: {manifest.manifest_path}"
        raise MissingFileError(msg) from e
    except Exception as e:
        raise _corrupt("manifest", manifest.manifest_path, e) from e

    out: list[ManifestFileEntry] = []
    manifest_seq = manifest.sequence_number or 0
    for entry, first_row_id in live_with_first_row_ids(manifest, raw):
        data_seq = entry.sequence_number
        if data_seq is None:
            if entry.status != ManifestEntryStatus.ADDED and manifest_seq != 0:
                msg = f"manifest {manifest.manifest_path}: EXISTING entry without a data sequence number"
                raise CorruptFileError(msg)
            data_seq = manifest_seq
        file_seq = entry.file_sequence_number
        if file_seq is None and entry.status == ManifestEntryStatus.ADDED:
            file_seq = manifest_seq
        df = entry.data_file
        set_spec_id(df, manifest.partition_spec_id)
        referenced_data_file, content_offset, content_size_in_bytes = v3_fields(df)
        out.append(
            ManifestFileEntry(
                data_file=df,
                data_sequence_number=data_seq,
                file_sequence_number=file_seq,
                spec_id=manifest.partition_spec_id,
                referenced_data_file=referenced_data_file,
                content_offset=content_offset,
                content_size_in_bytes=content_size_in_bytes,
                first_row_id=first_row_id,
            )
        )
    return out


def live_delete_files(io: FileIO, snapshot: Snapshot) -> list[DeleteFileRef]:
    """Every live delete file of ``snapshot`` (whether or not it still applies to a data file)."""
    return [
        e.to_delete_ref()
        for m in read_manifest_list(io, snapshot)
        if m.content == ManifestContent.DELETES
        for e in read_manifest_entries(io, m)
    ]
