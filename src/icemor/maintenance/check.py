"""An integrity check of a snapshot's delete layer (``icemor check``): it reports everything it finds.

Unlike a read, which stops at the first problem, the check goes on and names each finding with a
stable name (docs/health.md lists them):

* ``missing-file`` / ``size-mismatch``: a manifest, data file, delete file or Puffin file is
  absent, or its length differs from the recorded ``file_size_in_bytes``;
* ``corrupt-file``: a manifest list, manifest or position-delete file that cannot be decoded, or
  whose row count differs from its entry (``record-count-mismatch``);
* ``puffin-footer``: bad Puffin magic, footer size, flags or JSON, or a DV blob the footer does
  not list; ``puffin-crc``: a DV blob's CRC fails; ``dv-corrupt``: any other undecodable DV;
  ``dv-cardinality``: the DV's positions differ from the entry's ``record_count``;
* ``duplicate-dv``: two live DVs for one data file; ``dv-dangling``: a DV whose
  ``referenced_data_file`` is not a live data file; ``position-dangling`` (warning): a position
  delete naming a data file that is no longer live (harmless; minor compaction drops them);
  ``position-scope``: a file-scoped position-delete file naming another data file;
* ``position-out-of-range``: a deleted position at or past its data file's row count;
* ``sequence-order``: a position delete or DV older (data sequence number) than the data file it
  names, which therefore does not apply to it;
* ``equality-field-missing``: an equality field id no schema ever had; ``equality-field-dropped``
  (warning): one the current schema dropped (the delete still applies, by the spec);
* ``key-index-mismatch``: a key-index sidecar (:mod:`icemor.io.key_index`) beside a live data
  file, naming that file, that does not describe it: a key not at the position it gives when
  every row of the data file is compared, rows that do not hash to its recorded digest,
  undecodable, or not a regular file (a symlink, FIFO). It is removed (a sidecar is a cache: the
  next position-mode lookup builds it again from the data file), and the message says whether
  it could be; a lookup would have rebuilt most such sidecars anyway, but a forgery that passes
  a lookup's cheap checks is found only here.
"""

from __future__ import annotations

import contextlib
import json
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import ManifestContent
from pyiceberg.schema import index_by_id
from pyiceberg.transforms import IdentityTransform

from icemor.exceptions import CorruptFileError, IcemorError, MissingFileError
from icemor.io.key_index import IndexedFile, data_path_of, sidecar_key_ids, verify_sidecar
from icemor.maintenance.expire import key_sidecars
from icemor.planning.manifest_reader import read_manifest_entries, read_manifest_list
from icemor.planning.scan_job import resolve_snapshot
from icemor.spec.dv import DV_BLOB_TYPE, deserialize_dv
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from pyiceberg.io import FileIO
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table.metadata import TableMetadata

    from icemor.planning.manifest_reader import ManifestFileEntry

__all__ = ["CheckReport", "Finding", "check_table"]

PUFFIN_MAGIC = b"PFA1"
_POS_PATH_FIELD_ID = 2147483546
_POS_POS_FIELD_ID = 2147483545

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem: its stable name, severity, the file it concerns and what is wrong."""

    name: str
    severity: Severity
    path: str
    message: str


@dataclass(frozen=True)
class CheckReport:
    """Every finding of one check, and how much was looked at."""

    table_name: str
    snapshot_id: int | None
    data_files: int
    delete_files: int
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def clean(self) -> bool:
        """No errors (warnings allowed): ``icemor check`` exits 0."""
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "table_name": self.table_name,
            "snapshot_id": self.snapshot_id,
            "data_files": self.data_files,
            "delete_files": self.delete_files,
            "clean": self.clean,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [asdict(f) for f in self.findings],
        }


class _Findings:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def error(self, name: str, path: str, message: str) -> None:
        self.items.append(Finding(name, "error", path, message))

    def warning(self, name: str, path: str, message: str) -> None:
        self.items.append(Finding(name, "warning", path, message))


def check_table(
    metadata: TableMetadata, io: FileIO, *, name: str, snapshot_id: int | None = None
) -> CheckReport:
    """Check the delete layer of ``snapshot_id`` (default: the current snapshot); never raises for
    what it finds.

    Raises:
        NoSuchSnapshotError: Unknown snapshot.
    """
    out = _Findings()
    snapshot, _ = resolve_snapshot(metadata, snapshot_id, None, None)
    if snapshot is None:
        return CheckReport(name, None, 0, 0, ())
    try:
        manifests = read_manifest_list(io, snapshot)
    except IcemorError as err:
        out.error(_error_name(err), snapshot.manifest_list, str(err))
        return CheckReport(name, snapshot.snapshot_id, 0, 0, tuple(out.items))

    data: list[ManifestFileEntry] = []
    deletes: list[ManifestFileEntry] = []
    for m in manifests:
        try:
            entries = read_manifest_entries(io, m)
        except IcemorError as err:
            out.error(_error_name(err), m.manifest_path, str(err))
            continue
        for e in entries:
            if m.content == ManifestContent.DATA and e.content == FileContent.DATA:
                data.append(e)
            elif e.content != FileContent.DATA:
                deletes.append(e)

    live = {e.data_file.file_path: e for e in data}
    _check_sizes(io, [*data, *deletes], out)
    _check_puffin_and_dvs(io, metadata, [e for e in deletes if _is_dv(e)], live, out)
    for e in deletes:
        if e.content == FileContent.POSITION_DELETES and not _is_dv(e):
            _check_position_file(io, e, live, out)
        elif e.content == FileContent.EQUALITY_DELETES:
            _check_equality_ids(metadata, e, out)
    _check_key_indexes(io, metadata, live, out)
    return CheckReport(name, snapshot.snapshot_id, len(data), len(deletes), tuple(out.items))


def _error_name(e: BaseException) -> str:
    return "missing-file" if isinstance(e, MissingFileError | FileNotFoundError) else "corrupt-file"


def _is_dv(e: ManifestFileEntry) -> bool:
    return e.content == FileContent.POSITION_DELETES and str(e.data_file.file_format).upper().endswith(
        "PUFFIN"
    )


def _check_sizes(io: FileIO, entries: list[ManifestFileEntry], out: _Findings) -> None:
    """Every referenced file exists with its recorded size (each Puffin file once)."""
    recorded: dict[str, int] = {}
    for e in entries:
        recorded.setdefault(e.data_file.file_path, e.data_file.file_size_in_bytes)

    def size(path: str) -> int | None:
        try:
            return len(io.new_input(path))
        except FileNotFoundError:
            return None

    paths = list(recorded)
    with ThreadPoolExecutor(max_workers=8) as pool:
        sizes = list(pool.map(size, paths))
    for path, actual in zip(paths, sizes, strict=True):
        if actual is None:
            out.error("missing-file", path, "the file does not exist")
        elif actual != recorded[path]:
            out.error("size-mismatch", path, f"{actual} bytes, the manifest entry says {recorded[path]}")


def _read_footer(io: FileIO, path: str) -> tuple[bytes, list[dict[str, Any]]]:
    """The Puffin file's bytes and its footer's blob list; CorruptFileError says what is wrong."""
    with io.new_input(path).open() as f:
        raw = f.read()
    if len(raw) < 4 + 4 + 12 or raw[:4] != PUFFIN_MAGIC or raw[-4:] != PUFFIN_MAGIC:
        msg = "bad Puffin magic at the start or end of the file"
        raise CorruptFileError(msg)
    payload_size, flags = struct.unpack_from("<iI", raw, len(raw) - 12)
    start = len(raw) - 12 - payload_size
    if payload_size < 0 or start - 4 < 4 or raw[start - 4 : start] != PUFFIN_MAGIC:
        msg = f"footer payload size {payload_size} does not lead to the footer magic"
        raise CorruptFileError(msg)
    if flags & 1:
        msg = "compressed footers (LZ4) are not supported"
        raise CorruptFileError(msg)
    try:
        footer = json.loads(raw[start : len(raw) - 12])
        blobs = footer["blobs"]
        if not isinstance(blobs, list):
            raise TypeError(blobs)
    except (ValueError, KeyError, TypeError) as e:
        msg = f"footer is not valid Puffin JSON: {e}"
        raise CorruptFileError(msg) from None
    return raw, blobs


def _check_puffin_and_dvs(
    io: FileIO,
    metadata: TableMetadata,
    dvs: list[ManifestFileEntry],
    live: dict[str, ManifestFileEntry],
    out: _Findings,
) -> None:
    by_file: dict[str, list[ManifestFileEntry]] = {}
    for e in dvs:
        by_file.setdefault(e.data_file.file_path, []).append(e)
    for path, entries in by_file.items():
        try:
            raw, blobs = _read_footer(io, path)
        except FileNotFoundError:
            continue  # reported by the size check
        except CorruptFileError as err:
            out.error("puffin-footer", path, str(err))
            continue
        listed = {(b.get("offset"), b.get("length")): b for b in blobs if isinstance(b, dict)}
        for e in entries:
            where = f"{path}@{e.content_offset}"
            blob_meta = listed.get((e.content_offset, e.content_size_in_bytes))
            if blob_meta is None or blob_meta.get("type") != DV_BLOB_TYPE:
                out.error(
                    "puffin-footer", where, "the footer lists no deletion-vector blob at this offset/length"
                )
            elif (blob_meta.get("properties") or {}).get("referenced-data-file") not in (
                None,
                e.referenced_data_file,
            ):
                out.error(
                    "puffin-footer", where, "the blob's referenced-data-file differs from the manifest's"
                )
            if e.content_offset is None or e.content_size_in_bytes is None:
                out.error(
                    "dv-corrupt", where, "no content_offset/content_size_in_bytes in the manifest entry"
                )
                continue
            blob = raw[e.content_offset : e.content_offset + e.content_size_in_bytes]
            try:
                positions = deserialize_dv(blob, source=f"deletion vector {where}")
            except CorruptFileError as err:
                out.error("puffin-crc" if "CRC" in str(err) else "dv-corrupt", where, str(err))
                continue
            if len(positions) != e.data_file.record_count:
                out.error(
                    "dv-cardinality",
                    where,
                    f"{len(positions)} positions, the manifest entry says {e.data_file.record_count}",
                )
            _check_positions(
                e, where, e.referenced_data_file, int(positions.max(initial=-1)), live, out, dv=True
            )
    # at most one DV per data file (v3)
    per_data: dict[str | None, list[ManifestFileEntry]] = {}
    for e in dvs:
        per_data.setdefault(e.referenced_data_file, []).append(e)
    for ref, entries in per_data.items():
        if len(entries) > 1 and metadata.format_version >= 3:
            out.error(
                "duplicate-dv",
                str(ref),
                f"{len(entries)} live deletion vectors: "
                + ", ".join(f"{x.data_file.file_path}@{x.content_offset}" for x in entries),
            )


def _check_positions(
    e: ManifestFileEntry,
    where: str,
    data_path: str | None,
    max_pos: int,
    live: dict[str, ManifestFileEntry],
    out: _Findings,
    *,
    dv: bool,
) -> None:
    """A delete's positions for ``data_path``: a live file, not newer than the delete, in range."""
    target = live.get(data_path) if data_path is not None else None
    if target is None:
        if dv:
            out.error("dv-dangling", where, f"references {data_path}, which is not a live data file")
        else:
            out.warning("position-dangling", where, f"names {data_path}, which is not a live data file")
        return
    if max_pos >= target.data_file.record_count:
        out.error(
            "position-out-of-range",
            where,
            f"position {max_pos} in {data_path}, which has {target.data_file.record_count} rows",
        )
    if e.data_sequence_number < target.data_sequence_number:
        out.error(
            "sequence-order",
            where,
            f"data sequence number {e.data_sequence_number} is older than {data_path}'s "
            f"{target.data_sequence_number}: it does not apply to it",
        )


def _check_position_file(
    io: FileIO, e: ManifestFileEntry, live: dict[str, ManifestFileEntry], out: _Findings
) -> None:
    path = e.data_file.file_path
    try:
        with io.new_input(path).open() as f:
            pf = pq.ParquetFile(f)
            names = {
                int(fid): fld.name
                for fld in pf.schema_arrow
                if (fid := (fld.metadata or {}).get(b"PARQUET:field_id")) is not None
            }
            if _POS_PATH_FIELD_ID not in names or _POS_POS_FIELD_ID not in names:
                out.error("corrupt-file", path, "not the position-delete schema (file_path, pos)")
                return
            table = pf.read(columns=[names[_POS_PATH_FIELD_ID], names[_POS_POS_FIELD_ID]])
    except FileNotFoundError:
        return  # reported by the size check
    except (OSError, pa.ArrowException) as err:
        out.error("corrupt-file", path, f"undecodable position-delete file: {err}")
        return
    if table.num_rows != e.data_file.record_count:
        out.error(
            "record-count-mismatch",
            path,
            f"{table.num_rows} rows, the manifest entry says {e.data_file.record_count}",
        )
    table = table.rename_columns(["file_path", "pos"])
    grouped = table.group_by("file_path").aggregate([("pos", "max")])
    names_seen: Iterable[str] = grouped.column("file_path").to_pylist()
    maxima = grouped.column("pos_max").to_pylist()
    ref = e.referenced_data_file
    for data_path, max_pos in zip(names_seen, maxima, strict=True):
        if ref is not None and data_path != ref:
            out.error("position-scope", path, f"names {data_path}; its referenced_data_file is {ref}")
        _check_positions(e, path, data_path, int(max_pos), live, out, dv=False)
    if pc.any(pc.less(table.column("pos"), 0)).as_py():
        out.error("position-out-of-range", path, "a negative position")


def _check_equality_ids(metadata: TableMetadata, e: ManifestFileEntry, out: _Findings) -> None:
    current = set(index_by_id(metadata.schema()))
    ever: set[int] = set()
    for schema in metadata.schemas:
        ever |= set(index_by_id(schema))
    for fid in e.data_file.equality_ids or ():
        if fid in current:
            continue
        if fid in ever:
            out.warning(
                "equality-field-dropped",
                e.data_file.file_path,
                f"equality field id {fid} was dropped from the schema (the delete still applies)",
            )
        else:
            out.error(
                "equality-field-missing", e.data_file.file_path, f"equality field id {fid} is in no schema"
            )


def _check_key_indexes(
    io: FileIO, metadata: TableMetadata, live: dict[str, ManifestFileEntry], out: _Findings
) -> None:
    """Every key-index sidecar beside a live data file, checked row by row against the data file;
    one that does not describe it is reported and removed."""
    field_types = {fid: fld.field_type for fid, fld in index_by_id(metadata.schema()).items()}
    name_mapping = metadata.name_mapping()
    specs = metadata.specs()
    work: list[tuple[str, IndexedFile, tuple[int, ...]]] = []
    for sidecar in sorted(key_sidecars(io, set(live))):
        ids = sidecar_key_ids(sidecar)
        entry = live.get(data_path_of(sidecar) or "")
        if ids is None or entry is None or not all(i in field_types for i in ids):
            continue  # a temporary file, or keys of no current field: no lookup reads it
        work.append((sidecar, _indexed_file(entry, ids, specs), ids))
    if not work:
        return

    def verify(item: tuple[str, IndexedFile, tuple[int, ...]]) -> str | None:
        return verify_sidecar(io, item[1], item[2], field_types, name_mapping)

    with ThreadPoolExecutor(max_workers=4) as pool:
        problems = list(pool.map(verify, work))
    for (sidecar, _, _), problem in zip(work, problems, strict=True):
        if problem is None:
            continue
        removed = False
        with contextlib.suppress(OSError):
            io.delete(sidecar)
            removed = True
        then = "removed (rebuilt from the data file when next needed)" if removed else "could not be removed"
        out.error(
            "key-index-mismatch", sidecar, f"key index does not describe its data file: {problem}; {then}"
        )


def _indexed_file(
    entry: ManifestFileEntry, ids: tuple[int, ...], specs: Mapping[int, PartitionSpec]
) -> IndexedFile:
    """The data file of ``entry`` as a key lookup indexes it: with the identity-partition values
    of key fields, which a file may not store."""
    f = entry.data_file
    partition = entry.partition_tuple()
    constants: dict[int, Any] = {}
    spec = specs.get(entry.spec_id)
    if spec is not None:
        for i, pf in enumerate(spec.fields):
            if isinstance(pf.transform, IdentityTransform) and pf.source_id in ids and i < len(partition):
                constants[pf.source_id] = partition[i]
    return IndexedFile(f.file_path, f.file_size_in_bytes, f.record_count, constants)
