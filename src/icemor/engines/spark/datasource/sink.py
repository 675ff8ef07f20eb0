"""The CDC sink (``df.writeStream.format("icemor")``): tasks stage rows, the driver applies them.

Each task stages its rows as Parquet under the table's data path (the engine's other staged
files' directory, ``engines/spark/write.py``); ``commit`` (a Python worker on the driver's host)
reads the micro-batch's staged rows and applies them through :attr:`Services.apply_changes`
(docs/cdc.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO

from icemor.engines.spark import _arrow_schema
from icemor.engines.spark.datasource.api import DataSourceStreamArrowWriter, WriterCommitMessage
from icemor.engines.spark.datasource.batch import FEED_SOURCE
from icemor.engines.spark.errors import worker_errors
from icemor.engines.spark.worker import file_io, io_spec
from icemor.engines.spark.write import data_path
from icemor.exceptions import NoSuchTableError
from icemor.io.changes import CHANGE_TYPE
from icemor.spec.identifiers import STAGING_DIR

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pyiceberg.io import FileIO
    from pyspark.sql.types import StructType

    from icemor.engines.spark.datasource.options import SinkRequest
    from icemor.engines.spark.datasource.services import Services
    from icemor.engines.spark.worker import IOSpec

__all__ = ["SINK_STAGING", "IcemorStreamWriter", "StagedRows", "feed_source", "sink_writer"]

SINK_STAGING = STAGING_DIR
"""Under the table's data path, as the engine's other staged files (engines/spark/write.py)."""


@dataclass
class StagedRows(WriterCommitMessage):  # type: ignore[misc,unused-ignore]
    """One sink task's rows, staged as a Parquet file under the table (None: the task had none)."""

    path: str | None
    rows: int


def sink_writer(services: Services, request: SinkRequest, schema: StructType) -> IcemorStreamWriter:
    """The sink of ``request``'s table, staging under a prefix of its own per app id; a missing
    table is created, like the feed's source table where the stream is icemor's change feed."""
    try:
        table = services.load_table(request.table, request.catalog)
    except NoSuchTableError:
        table = services.create_mirror(
            request.table,
            request.catalog,
            _arrow_schema(schema),
            key=request.key,
            source=feed_source(schema),
            partition_by=request.partition_by,
            format_version=request.format_version,
        )
    digest = hashlib.sha256(request.app_id.encode()).hexdigest()[:24]
    prefix = f"{data_path(table.metadata.location, table.metadata.properties)}/{SINK_STAGING}/sink-{digest}"
    return IcemorStreamWriter(services, request, schema, io_spec(table.io, table.metadata.location), prefix)


class IcemorStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc,unused-ignore]
    """The CDC sink: each task stages its rows as Parquet under the table's location
    (``<data path>/_icemor-staging/sink-<app id hash>/``); ``commit(messages, batch_id)`` (a Python
    worker on the driver's host) reads the micro-batch's staged rows, applies them as one
    ``apply_changes`` commit recording the app id and batch id (a batch already committed is
    skipped: exactly once across restarts), then removes every staged file of the sink. Memory:
    the commit holds one micro-batch's rows (docs/cdc.md); ``icemor.spark.cdc_sink`` with
    ``foreachBatch`` applies on the executors instead.
    """

    def __init__(
        self, services: Services, request: SinkRequest, schema: StructType, spec: IOSpec, prefix: str
    ) -> None:
        self.services = services
        self.request = request
        self.schema = schema
        self.spec = spec
        self.prefix = prefix

    @worker_errors()
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        io = file_io(*self.spec)
        path = f"{self.prefix}/{uuid.uuid4().hex}.parquet"
        writer = None
        rows = 0
        output = None
        try:
            for batch in iterator:
                if not batch.num_rows:
                    continue
                if writer is None:
                    output = io.new_output(path).create(overwrite=True)
                    writer = pq.ParquetWriter(output, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
            if output is not None:
                output.close()
        return StagedRows(path if rows else None, rows)

    def _staged(self, messages: Sequence[Any]) -> list[str]:
        return [m.path for m in messages if isinstance(m, StagedRows) and m.path is not None]

    @worker_errors()
    def commit(self, messages: list[Any], batchId: int) -> None:
        io = file_io(*self.spec)
        try:
            parts = []
            for path in self._staged(messages):
                with io.new_input(path).open() as f:
                    parts.append(pq.read_table(f))
            rows = pa.concat_tables(parts) if parts else _arrow_schema(self.schema).empty_table()
            r = self.request
            self.services.apply_changes(
                r.table,
                r.catalog,
                rows,
                key=r.key,
                op_column=r.op_column,
                order_by=r.order_by,
                allow_nullable_key=r.allow_nullable_key,
                app_id=r.app_id,
                batch_id=batchId,
            )
        finally:
            self._clean(io, self._staged(messages))

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._clean(file_io(*self.spec), self._staged(messages))

    def _clean(self, io: FileIO, known: Sequence[str]) -> None:
        """Remove this batch's staged files and any a failed or killed attempt left (micro-batches
        of one query run one at a time, so nothing under the sink's prefix is still wanted)."""
        for path in [*known, *_listed(io, self.prefix)]:
            with contextlib.suppress(OSError):
                io.delete(path)


def feed_source(schema: StructType) -> tuple[str, str | None] | None:
    """The table a change feed's rows come from, as its ``_change_type`` column names it (None:
    not icemor's feed, or a column made anew in the query)."""
    for field in schema.fields:
        if field.name == CHANGE_TYPE and FEED_SOURCE in (field.metadata or {}):
            named = json.loads(field.metadata[FEED_SOURCE])
            return str(named["table"]), named.get("catalog")
    return None


def _listed(io: FileIO, prefix: str) -> list[str]:
    """Files under ``prefix`` (pyiceberg's PyArrowFileIO can list; another FileIO lists nothing)."""
    if not isinstance(io, PyArrowFileIO):
        return []
    scheme, netloc, path = PyArrowFileIO.parse_location(prefix)
    fs = io.fs_by_scheme(scheme, netloc)
    try:
        found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    except OSError:
        return []
    root = "" if scheme == "file" else f"{scheme}://"
    return [f"{root}{f.path}" for f in found if f.type == pafs.FileType.File]
