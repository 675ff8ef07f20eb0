"""Write deletion vectors (Iceberg v3) into a Puffin file: one ``deletion-vector-v1`` blob per data file.

Puffin layout (``format/puffin-spec.md``): the magic ``PFA1``, the blobs, then the footer: magic,
the footer payload (UTF-8 JSON, uncompressed), its length (4-byte little-endian), 4 flag bytes
(0: payload not compressed), magic. Each blob's metadata names its ``type``, ``fields`` (the
``_pos`` column), ``snapshot-id`` and ``sequence-number`` (-1: inherited from the manifest
entry, as Iceberg Java writes them), ``offset``, ``length`` and the ``referenced-data-file`` and
``cardinality`` properties the spec requires for DVs; DV blobs are never compressed.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

from icemor.exceptions import WriteFailedError
from icemor.spec.dv import DV_BLOB_TYPE, DV_POSITION_FIELD_ID, serialize_dv
from icemor.spec.files import FileContent, WrittenFile

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import numpy.typing as npt
    from pyiceberg.io import FileIO

    from icemor.io.writers import DeleteFileTarget

__all__ = ["PUFFIN_MAGIC", "write_deletion_vectors"]

PUFFIN_MAGIC = b"PFA1"
CREATED_BY = "icemor"


# how object stores word a refused PUT (pyarrow: "AWS Error ACCESS_DENIED"; S3: "AccessDenied")
_DENIED = ("ACCESS_DENIED", "AccessDenied", "Access Denied", "Forbidden")
_OBJECT_STORES = (
    "s3://",
    "s3a://",
    "s3n://",
    "gs://",
    "abfs://",
    "abfss://",
    "wasb://",
    "wasbs://",
    "oss://",
)


def _refusal_hint(location: str, error: OSError) -> str:
    """The likely cause when an object store refuses a Puffin file: some keep tables in buckets that
    take only the file kinds they expect (SeaweedFS's table buckets refuse ``.puffin`` keys)."""
    if not location.startswith(_OBJECT_STORES) or not any(d in str(error) for d in _DENIED):
        return ""
    return (
        "; the store refused a .puffin object (v3 deletion vectors): if it takes the table's Parquet "
        "files, it likely refuses .puffin keys in this bucket (SeaweedFS's table buckets do): set the "
        "table property write.data.path to a location outside the table bucket (docs/rest-s3.md)"
    )


def write_deletion_vectors(
    io: FileIO, target: DeleteFileTarget, deletes: Sequence[tuple[str, npt.NDArray[np.int64]]]
) -> list[WrittenFile]:
    """Write one DV per ``(data file path, sorted unique positions)`` into one Puffin file.

    Returns one :class:`WrittenFile` per DV (the same Puffin path, each with its blob's offset
    and size; ``record_count`` is the DV's cardinality), in path order. Nothing is written for
    no positions.

    Raises:
        WriteFailedError: The file could not be written; what was written of it is removed.
    """
    pending = sorted((d for d in deletes if len(d[1])), key=lambda d: d[0])
    if not pending:
        return []
    location = target.location(0)
    body = bytearray(PUFFIN_MAGIC)
    blobs: list[dict[str, object]] = []
    for path, positions in pending:
        blob = serialize_dv(positions)
        blobs.append(
            {
                "type": DV_BLOB_TYPE,
                "fields": [DV_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": len(body),
                "length": len(blob),
                "properties": {"referenced-data-file": path, "cardinality": str(len(positions))},
            }
        )
        body += blob
    footer = json.dumps({"blobs": blobs, "properties": {"created-by": CREATED_BY}}, separators=(",", ":"))
    payload = footer.encode("utf-8")
    body += PUFFIN_MAGIC + payload + len(payload).to_bytes(4, "little") + bytes(4) + PUFFIN_MAGIC
    try:
        with io.new_output(location).create(overwrite=True) as out:
            out.write(bytes(body))
    except OSError as e:
        with contextlib.suppress(OSError):
            io.delete(location)
        raise WriteFailedError(f"{WriteFailedError.of(location, e)}{_refusal_hint(location, e)}") from e
    return [
        WrittenFile(
            content=FileContent.POSITION_DELETES,
            path=location,
            record_count=len(positions),
            file_size_in_bytes=len(body),
            spec_id=target.spec_id,
            partition=target.partition,
            column_sizes={},
            value_counts={},
            null_value_counts={},
            lower_bounds={},
            upper_bounds={},
            referenced_data_file=path,
            file_format="PUFFIN",
            content_offset=int(meta["offset"]),  # type: ignore[call-overload]
            content_size_in_bytes=int(meta["length"]),  # type: ignore[call-overload]
        )
        for (path, positions), meta in zip(pending, blobs, strict=True)
    ]
