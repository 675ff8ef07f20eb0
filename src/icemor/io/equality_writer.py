"""Write equality-delete files: the key columns only, with their field ids, sorted, full metrics.

Spec, "Equality Delete Files": the file holds the equality columns (it may hold more; icemor
writes the key alone, as a CDC writer that knows only the key must) and its manifest entry
lists their ``equality_ids``. The rows come sorted by key, so the row groups' statistics and
the file's bounds are tight; metrics are ``full`` for every key column whatever the table's
``write.metadata.metrics.*`` say (no truncated string bounds), so readers can prune data files
whose key range does not overlap the file's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.io.data_writer import write_parquet_tables
from icemor.spec.files import FileContent

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema

    from icemor.io.writers import DeleteFileTarget
    from icemor.spec.files import WrittenFile

__all__ = ["write_equality_deletes"]

_FULL_METRICS = {"write.metadata.metrics.default": "full"}
_ROWS_PER_GROUP = 1 << 20


def write_equality_deletes(
    io: FileIO,
    target: DeleteFileTarget,
    keys: pa.Table,
    schema: Schema,
    equality_ids: Sequence[int],
) -> list[WrittenFile]:
    """Write ``keys`` (in the file's Arrow schema, with field ids; sorted) as equality-delete files.

    A new file is started once the current one reaches ``target.target_file_size``. On failure
    the files written are removed.

    Args:
        io: The table's FileIO.
        target: Directory, name prefix, spec and partition (an unpartitioned spec: global deletes).
        keys: One row per deleted key.
        schema: The Iceberg schema of ``keys``: the table's key fields, ids kept.
        equality_ids: The field ids of the key, in key order.
    """
    step = max(1, _ROWS_PER_GROUP)
    groups = (keys.slice(start, step) for start in range(0, keys.num_rows, step))

    return write_parquet_tables(
        io,
        target,
        groups,
        content=FileContent.EQUALITY_DELETES,
        schema=schema,
        metrics_properties=_FULL_METRICS,
        equality_ids=tuple(equality_ids),
    )
