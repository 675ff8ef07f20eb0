"""The ``icemor`` Spark data source: batch reads, the change feed as a stream, and a CDC sink.

``icemor.spark.register(spark)`` registers :class:`IcemorDataSource` (PySpark 4.2+'s Python Data
Source API) under the name ``icemor``; ``icemor.spark.read`` is the same read as a function on
every PySpark version. Both parse their options here (:func:`read_request`, ``options.py``), plan
with the shared planner (:func:`plan_scan`, :func:`icemor.planning.changes.prepare_changes`,
``batch.py``) and read with the shared reader (:func:`icemor.io.reader.read_task`,
:func:`icemor.planning.changes.snapshot_changes`): the delete semantics live in the core only.
The stream is ``stream.py``, the sink ``sink.py``; ``df.write.format("icemor")`` is
``icemor.engines.spark.table_writes``'s ``IcemorBatchWriter``.

Where each part runs: Spark calls ``schema()``, ``partitions()``, the stream's
offsets and the sink's ``commit`` in Python workers on the driver's host (with the JVM's
environment: ``ICEMOR_HOME``, pyiceberg's catalog settings); ``read()`` and the sink's
``write()`` in the executors' Python workers. Only pickled tasks (file paths and delete-file
references) travel to the executors; rows never reach the driver, except in the sink's
``commit``, which reads its micro-batch's staged rows to apply them (docs/cdc.md).

Once per read: Spark pickles the data source after ``schema()`` and calls ``reader()`` on that
copy in another worker, so what ``schema()`` parsed and planned travels with the instance and
the reader plans nothing again. Each ``spark.read...load()`` makes a new instance (a new
DataFrame sees the table as it is then); nothing is kept across instances.

The data source needs what lives above the engine layer (the catalog, the timestamp parser, the
CDC apply, the write operations): :class:`Services`, given by the facade at registration and
carried by the registered class (pickled with it to Spark's Python workers).

Errors: Spark wraps what a data source raises in its own exception (``[PYTHON_DATA_SOURCE_ERROR]
Failed to create Python data source instance: ...``) around the worker's Python traceback. An
icemor error leaves the worker as its one line instead (:func:`~icemor.engines.spark.errors.worker_errors`
around each method Spark calls), so the first line the user sees ends with icemor's, and
``icemor.spark.errors()`` raises it as icemor's error.

No ``pushFilters``: Spark 4.3 keeps a Python source's planned read (partitions and read
function) on the DataFrame's relation and reuses it for a later query of that DataFrame that
pushes no filter, so ``df.where("id > 100").count()`` then ``df.count()`` counts the filtered
rows again (measured; ``PythonDataSourceV2.getOrCreateReadInfo``). Spark evaluates its filters
over the source's rows instead; the ``filter`` option prunes, and ``register``'s front gives
Python clients ``to_spark``'s plan, whose Parquet scans take Spark's pushed filters.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import pyspark

from icemor.engines.spark._compat import front as _front
from icemor.engines.spark.datasource.api import HAS_DATA_SOURCES, DataSource
from icemor.engines.spark.datasource.batch import (
    IcemorReader,
    change_output_schema,
    changes_shape,
    ordered_names,
    output_schema,
    plan_changes_job,
    plan_scan,
)
from icemor.engines.spark.datasource.options import (
    ChangeRequest,
    ReadRequest,
    SinkRequest,
    change_request,
    check_change_mode,
    is_change_feed,
    read_request,
    sink_request,
)
from icemor.engines.spark.datasource.services import Services
from icemor.engines.spark.datasource.sink import IcemorStreamWriter, sink_writer
from icemor.engines.spark.datasource.stream import IcemorStreamReader, RefusedStreamReader
from icemor.engines.spark.errors import worker_errors
from icemor.engines.spark.table_writes import IcemorBatchWriter
from icemor.exceptions import IcemorError, InvalidArgumentError, UnsupportedFeatureError
from icemor.planning.changes import ChangeJob

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from icemor.planning.scan_job import ScanJob

__all__ = [
    "HAS_DATA_SOURCES",
    "NAME",
    "ChangeRequest",
    "IcemorDataSource",
    "ReadRequest",
    "Services",
    "SinkRequest",
    "change_request",
    "data_source_class",
    "is_change_feed",
    "ordered_names",
    "output_schema",
    "plan_changes_job",
    "plan_scan",
    "read_request",
    "register",
    "sink_request",
]

NAME = "icemor"


def _as_dict(options: Any) -> dict[str, Any]:
    return {str(k): v for k, v in dict(options).items()}


class IcemorDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.read.format("icemor")``, ``readStream`` (the change feed) and ``writeStream`` (CDC).

    Registered by ``icemor.spark.register(spark)``, which gives the :class:`Services`
    (:func:`data_source_class`). ``df.write.format("icemor")`` is ``icemor.engines.spark.table_writes``'s
    ``IcemorBatchWriter``.
    """

    services: ClassVar[Services | None] = None
    request: ReadRequest | ChangeRequest | None = None
    """The options, parsed once (a change feed's for either mode: ``reader`` and
    ``streamReader`` check their own)."""
    planned: ScanJob | ChangeJob | None = None
    """What ``schema()`` planned, on the table state it loaded: the DataFrame reads that state
    (as ``to_spark`` plans when called), not a later one, and ``reader()`` plans it not again."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _services(self) -> Services:
        if self.services is None:
            msg = "register the icemor data source with icemor.spark.register(spark)"
            raise UnsupportedFeatureError(msg)
        return self.services

    def _request(self) -> ReadRequest | ChangeRequest:
        """The options as a request, parsed on the first call only."""
        if self.request is None:
            services = self._services()
            options = _as_dict(self.options)
            if is_change_feed(options):
                self.request = change_request(options, services.epoch_ms, stream=None)
            else:
                self.request = read_request(options, services.epoch_ms)
        return self.request

    @worker_errors()
    def schema(self) -> StructType:
        request = self._request()
        planned = self.planned
        if planned is None:
            table = self._services().load_table(request.table, request.catalog)
            if isinstance(request, ChangeRequest):
                planned = changes_shape(table.metadata, table.io, request)
            else:
                planned = plan_scan(table.metadata, table.io, request)
            self.planned = planned
        if isinstance(planned, ChangeJob):
            return change_output_schema(planned, request.columns, source=(request.table, request.catalog))
        return output_schema(planned, request.columns)

    @worker_errors()
    def reader(self, schema: StructType) -> IcemorReader:
        request = self._request()
        if isinstance(request, ChangeRequest):
            check_change_mode(request, stream=False)
        return IcemorReader(self._services(), request, schema, self.planned)

    def streamReader(self, schema: StructType) -> IcemorStreamReader:
        try:
            services = self._services()
            if not is_change_feed(_as_dict(self.options)):
                msg = (
                    "a stream of an icemor table is its change feed: add .option('readChangeFeed', "
                    "'true') (changes after the current snapshot) or .option('starting-snapshot-id', "
                    "...) / .option('starting-timestamp', ...)"
                )
                raise InvalidArgumentError(msg)
            request = self._request()
            assert isinstance(request, ChangeRequest)
            check_change_mode(request, stream=True)
        except IcemorError as e:
            # raised at Spark's first call: PySpark 4.3's stream runner loses an error raised here
            # (its cleanup calls stop() on the reader it never got: an UnboundLocalError instead)
            return RefusedStreamReader(e, schema)
        return IcemorStreamReader(services, request, schema)

    @worker_errors()
    def writer(self, schema: StructType, overwrite: bool) -> Any:
        """``df.write.format("icemor")``: the executors write data files, the driver commits once."""
        assert IcemorBatchWriter is not None  # this class exists only where PySpark has data sources
        return IcemorBatchWriter(self._services(), _as_dict(self.options), schema, overwrite)

    @worker_errors()
    def streamWriter(self, schema: StructType, overwrite: bool) -> IcemorStreamWriter:
        if overwrite:
            msg = "the icemor sink applies changes: use outputMode('append') or 'update', not 'complete'"
            raise InvalidArgumentError(msg)
        return sink_writer(self._services(), sink_request(_as_dict(self.options)), schema)


_CLASSES: dict[Services, type[IcemorDataSource]] = {}
_REGISTERED: weakref.WeakKeyDictionary[Any, type[IcemorDataSource]] = weakref.WeakKeyDictionary()


def data_source_class(services: Services) -> type[IcemorDataSource]:
    """:class:`IcemorDataSource` with ``services`` (one class per services): a class made here is
    pickled by value, so Spark's Python workers get the services with it."""
    cls = _CLASSES.get(services)
    if cls is None:
        attrs = {"services": services, "__module__": __name__}
        cls = _CLASSES[services] = type(NAME.capitalize() + "DataSource", (IcemorDataSource,), attrs)
    return cls


def register(
    spark: SparkSession,
    services: Services,
    *,
    front: Callable[[Any, str | None, dict[str, Any]], Any] | None = None,
) -> None:
    """Register the ``icemor`` data source on ``spark`` (classic or Connect).

    Args:
        spark: The session.
        services: What the source needs from above the engine.
        front: ``read(spark, table, options) -> DataFrame`` serving this session's Python
            ``spark.read.format("icemor")...load()`` instead of the data source
            (:mod:`icemor.engines.spark._compat.front`); None: the data source serves it.

    Raises:
        UnsupportedFeatureError: PySpark older than 4.2 (no Python data sources with streaming
            admission control).
    """
    if not HAS_DATA_SOURCES:
        msg = (
            f"the icemor Spark data source needs PySpark 4.2 or later (Python data sources), not "
            f"{pyspark.__version__}: use icemor.spark.read(spark, 'db.t', ...) and "
            "icemor.spark.cdc_sink(...) with foreachBatch, which work on every version"
        )
        raise UnsupportedFeatureError(msg)
    cls = data_source_class(services)
    if _REGISTERED.get(spark) is not cls:  # registering again makes Spark's next reads cold
        # PySpark 3.5's stubs (what mypy sees in the main venv) have no dataSource
        spark.dataSource.register(cls)  # type: ignore[attr-defined,unused-ignore]
        _REGISTERED[spark] = cls
    if front is not None:  # classic or Connect: to_spark's plan serves both
        _front.install(spark, front)
    else:
        _front.uninstall(spark)
