"""Table metadata files: which ones a catalog commit writes, reuse of those it wrote, v3 JSON.

Borrowed: ``MetastoreCatalog._write_metadata`` (wrapped per catalog object, to see the file a
commit writes), ``FromInputFile.table_metadata`` (wrapped once, to reuse the metadata this process
wrote), and for format version 3, which pyiceberg 0.12 refuses to write:
``SUPPORTED_TABLE_FORMAT_VERSION``, ``TableMetadataV3.model_dump_json``, the ``_apply_table_update``
dispatch of ``UpgradeFormatVersionUpdate`` and ``TableMetadataUtil._construct_without_validation``.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg import serializers
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.table import metadata as _pyiceberg_metadata
from pyiceberg.table import update as _pyiceberg_update
from pyiceberg.table.update import UpgradeFormatVersionUpdate
from pyiceberg.typedef import IcebergBaseModel

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO, InputFile
    from pyiceberg.table.metadata import TableMetadata

__all__ = [
    "PYICEBERG_WRITES_V3",
    "MetadataWrite",
    "metadata_writes",
    "record_metadata_writes",
    "remember_committed_metadata",
    "v3_metadata_json",
]

# (module, name) of every internal used below; tests/_compat/test_pyiceberg.py imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.catalog", "MetastoreCatalog._write_metadata"),
    ("pyiceberg.serializers", "FromInputFile.table_metadata"),
    ("pyiceberg.table.metadata", "SUPPORTED_TABLE_FORMAT_VERSION"),
    ("pyiceberg.table.metadata", "TableMetadataV3.model_dump_json"),
    ("pyiceberg.table.update", "_apply_table_update"),
    ("pyiceberg.table.metadata", "TableMetadataUtil._construct_without_validation"),
)


@dataclass
class MetadataWrite:
    """A metadata JSON file a catalog began to write in :func:`metadata_writes`."""

    path: str
    done: bool = False
    """The file was written completely (the catalog's pointer swap comes after this)."""


_METADATA_WRITES: ContextVar[list[MetadataWrite] | None] = ContextVar("icemor_metadata_writes", default=None)
_HOOK_LOCK = threading.Lock()


def record_metadata_writes(catalog: Catalog) -> bool:
    """Make ``catalog`` report the metadata JSON files it writes to :func:`metadata_writes`.

    Returns False for a catalog that writes none itself (REST: the server writes them).

    Why: a metastore catalog's ``commit_table`` writes ``<location>/metadata/NNNNN-<uuid>.
    metadata.json`` (the private ``_write_metadata``) and then swaps the table's pointer; when
    the swap is refused, that file is left and nothing public names it. The hook wraps the
    method on this catalog object only, once; it records the path before the write starts,
    so a half-written file is known too.
    """
    if not isinstance(catalog, MetastoreCatalog):
        return False
    with _HOOK_LOCK:
        if getattr(catalog, "_icemor_records_metadata", False):
            return True
        original = catalog._write_metadata
        signature = inspect.signature(original)

        def write_metadata(*args: Any, **kwargs: Any) -> None:
            frame = _METADATA_WRITES.get()
            record = MetadataWrite(str(signature.bind(*args, **kwargs).arguments["metadata_path"]))
            if frame is not None:
                frame.append(record)
            original(*args, **kwargs)
            record.done = True

        try:
            catalog._write_metadata = write_metadata  # type: ignore[method-assign]
            catalog._icemor_records_metadata = True  # type: ignore[attr-defined]
        except AttributeError:  # a catalog class with __slots__: nothing to record
            return False
    return True


@contextmanager
def metadata_writes() -> Iterator[list[MetadataWrite]]:
    """The metadata JSON files written in this block (this thread/context) by hooked catalogs."""
    frame: list[MetadataWrite] = []
    token = _METADATA_WRITES.set(frame)
    try:
        yield frame
    finally:
        _METADATA_WRITES.reset(token)


PYICEBERG_WRITES_V3: bool = _pyiceberg_metadata.SUPPORTED_TABLE_FORMAT_VERSION >= 3
"""Whether pyiceberg itself writes v3 metadata; :func:`v3_metadata_json` steps aside when it does."""


_V3_JSON: ContextVar[bool] = ContextVar("icemor_v3_json", default=False)
_V3_LOCK = threading.Lock()


def _install_v3_json() -> None:
    """Let ``TableMetadataV3.model_dump_json`` serialise inside :func:`v3_metadata_json` only.

    pyiceberg 0.12 raises ``NotImplementedError`` there; its pydantic model has every v3 field
    (``next-row-id``, snapshots' ``first-row-id`` and ``added-rows``), so the base model's dump
    is the spec's JSON. Outside the block (pyiceberg's own writers) it still raises.
    """
    with _V3_LOCK:
        cls = _pyiceberg_metadata.TableMetadataV3
        if getattr(cls, "_icemor_v3_json", False):
            return
        refuse = cls.model_dump_json

        def model_dump_json(self: Any, *args: Any, **kwargs: Any) -> str:
            if not _V3_JSON.get():
                return refuse(self, *args, **kwargs)
            if self.next_row_id is None:  # required in v3 JSON; a new table starts at 0
                self = self.model_copy(update={"next_row_id": 0})
            return IcebergBaseModel.model_dump_json(self, *args, **kwargs)

        cls.model_dump_json = model_dump_json  # type: ignore[method-assign]
        cls._icemor_v3_json = True  # type: ignore[attr-defined]


def _install_v3_upgrade() -> None:
    """Let pyiceberg's ``UpgradeFormatVersionUpdate`` handler take a table to format version 3
    inside :func:`v3_metadata_json` only (it refuses versions above 2, also for a table created
    as v3: a staged create applies its updates to pyiceberg's empty v1 metadata, so v1 -> 3 is let
    through for metadata without snapshots); ``next-row-id`` starts at 0 (spec, "Row Lineage":
    existing rows have no ids).
    """
    with _V3_LOCK:
        apply = _pyiceberg_update._apply_table_update
        if getattr(apply, "_icemor_v3_upgrade", False):
            return
        original = apply.dispatch(UpgradeFormatVersionUpdate)

        def upgrade(update: UpgradeFormatVersionUpdate, base: TableMetadata, context: Any) -> TableMetadata:
            # v1 -> 3 only without snapshots: a staged create starts from pyiceberg's empty v1 metadata
            from_v1 = base.format_version == 1 and not base.snapshots
            if (
                not _V3_JSON.get()
                or update.format_version != 3
                or not (base.format_version in (2, 3) or from_v1)
            ):
                return original(update, base, context)
            if base.format_version == 3:
                return base
            context.add_update(update)
            v3 = _pyiceberg_metadata.TableMetadataUtil._construct_without_validation(
                base.model_copy(update={"format_version": 3})
            )
            return v3.model_copy(update={"next_row_id": 0})

        apply.register(UpgradeFormatVersionUpdate)(upgrade)
        apply._icemor_v3_upgrade = True  # type: ignore[attr-defined]


_WRITTEN_METADATA: OrderedDict[str, tuple[TableMetadata, bytes]] = OrderedDict()
_WRITTEN_METADATA_MAX = 8
_WRITTEN_LOCK = threading.Lock()


def _file_digest(input_file: InputFile) -> bytes:
    with input_file.open() as f:
        return hashlib.sha256(f.read()).digest()


def remember_committed_metadata(location: str, metadata: TableMetadata, io: FileIO) -> None:
    """Keep the metadata a commit of this process wrote to ``location`` (the catalog's answer)
    with the SHA-256 of the file's bytes, so that reading that file again (the next refresh, the
    SQL catalog's read inside its next ``commit_table``) returns it instead of parsing the JSON
    again, as long as the file's bytes are still the ones written.

    Why: pyiceberg parses a metadata file on every ``load_table`` (pydantic, ~4-8 ms for a table
    with 100 snapshots, twice a CDC batch); reading and hashing it costs a tenth of that. Only
    files this process's commits wrote are kept (the last ``_WRITTEN_METADATA_MAX``), by path;
    pyiceberg's ``FromInputFile.table_metadata``, which every metastore catalog reads metadata
    files with, is wrapped once to look here first. A file that is gone, shorter or otherwise
    changed is parsed as pyiceberg would (and its damage reported): the kept model never
    stands in for bytes it did not come from. Best effort: a file that cannot be read back
    now is simply not kept. The model is frozen (pydantic); pyiceberg's updates copy it.
    """
    try:
        digest = _file_digest(io.new_input(location))
    except Exception:  # a hint only: nothing is kept
        return
    _install_metadata_reuse()
    with _WRITTEN_LOCK:
        _WRITTEN_METADATA[location] = (metadata, digest)
        _WRITTEN_METADATA.move_to_end(location)
        while len(_WRITTEN_METADATA) > _WRITTEN_METADATA_MAX:
            _WRITTEN_METADATA.popitem(last=False)


def _install_metadata_reuse() -> None:
    with _WRITTEN_LOCK:
        reader = serializers.FromInputFile.__dict__["table_metadata"]
        if getattr(reader, "_icemor_reuse", False):
            return
        original = reader.__func__

        def table_metadata(input_file: InputFile, *args: Any, **kwargs: Any) -> TableMetadata:
            with _WRITTEN_LOCK:
                kept = _WRITTEN_METADATA.get(input_file.location)
            if kept is not None:
                try:
                    same = _file_digest(input_file) == kept[1]
                except Exception:  # pyiceberg's own read below reports it
                    same = False
                if same:
                    return kept[0]
            parsed: TableMetadata = original(input_file, *args, **kwargs)
            return parsed

        wrapped = staticmethod(table_metadata)
        wrapped._icemor_reuse = True  # type: ignore[attr-defined]
        serializers.FromInputFile.table_metadata = wrapped  # type: ignore[method-assign]


@contextmanager
def v3_metadata_json() -> Iterator[None]:
    """Inside the block, v3 table metadata serialises and a table may be upgraded (or created)
    at format version 3 (pyiceberg 0.12 refuses both elsewhere)."""
    if PYICEBERG_WRITES_V3:
        yield
        return
    _install_v3_json()
    _install_v3_upgrade()
    token = _V3_JSON.set(True)
    try:
        yield
    finally:
        _V3_JSON.reset(token)
