"""Writers of small Parquet data and delete files with Iceberg field ids, shared by the io tests."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from icemor.spec.files import DeleteFileRef, FileContent

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

FIELD_ID = b"PARQUET:field_id"
PATH_ID, POS_ID = 2147483546, 2147483545


def field(name: str, t: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, t, nullable=nullable, metadata={FIELD_ID: str(fid).encode()})


def write(path: Path, table: pa.Table, row_group_size: int | None = None) -> str:
    pq.write_table(table, path, row_group_size=row_group_size)
    return str(path)


def position_delete_file(tmp: Path, name: str, rows: Sequence[tuple[str, int]]) -> DeleteFileRef:
    schema = pa.schema(
        [field("file_path", pa.string(), PATH_ID, False), field("pos", pa.int64(), POS_ID, False)]
    )
    table = pa.table({"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]}, schema=schema)
    path = write(tmp / name, table)
    return delete_ref(FileContent.POSITION_DELETES, path, len(rows))


def equality_delete_file(
    tmp: Path, name: str, columns: dict[str, tuple[pa.DataType, int, list[Any]]]
) -> DeleteFileRef:
    fields = [field(col, t, fid) for col, (t, fid, _) in columns.items()]
    table = pa.table({col: v for col, (_, _, v) in columns.items()}, schema=pa.schema(fields))
    path = write(tmp / name, table)
    ids = tuple(fid for _, fid, _ in columns.values())
    return delete_ref(FileContent.EQUALITY_DELETES, path, table.num_rows, equality_ids=ids)


def delete_ref(content: FileContent, path: str, count: int, **kw: Any) -> DeleteFileRef:
    return DeleteFileRef(
        content=content,
        path=path,
        file_format=kw.pop("file_format", "PARQUET"),
        record_count=count,
        file_size_in_bytes=os.path.getsize(path),
        spec_id=0,
        partition=(),
        data_sequence_number=2,
        **kw,
    )
