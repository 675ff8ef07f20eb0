"""Where a table's operations run: on local threads, or on a SparkSession's executors.

Shared by the table facade's modules (:mod:`icemor.table`, :mod:`icemor.table_merge`,
:mod:`icemor.table_maintenance`). Those below :mod:`icemor.table` cannot import it (no import
cycle, not even a type-only one), so they see the table as a :class:`TableHandle`.

The engines are imported when a runner is asked for: the local one loads pyiceberg's reading
machinery, the Spark one PySpark (an optional dependency), and ``import icemor.table`` loads
neither.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as PyIcebergTable
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import SparkSession

    from icemor.engines import Runner

__all__ = ["TableHandle", "runner", "spark_errors"]


class TableHandle(Protocol):
    """An :class:`icemor.table.Table`, as the facade's modules below it use one."""

    catalog: Catalog

    @property
    def pyiceberg(self) -> PyIcebergTable: ...

    @property
    def name(self) -> str: ...

    @property
    def io(self) -> FileIO: ...

    @property
    def metadata(self) -> TableMetadata: ...

    def schema(self) -> Schema: ...

    def refresh(self) -> object: ...


def runner(
    table: TableHandle, spark: SparkSession | None, progress: Callable[[int, int], None] | None = None
) -> Runner:
    """The runner of ``table``'s per-file work: local threads, or ``spark``'s executors.

    Args:
        table: The table whose files the work reads and writes.
        spark: Run on this session's executors; None: on local threads.
        progress: Called with (items done, items) as the work proceeds.
    """
    if spark is None:
        from icemor.engines.local import runner as local_runner  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        return local_runner(table.io, progress=progress)
    from icemor.engines.spark import runner as spark_runner  # noqa: PLC0415 - optional: pyspark

    return spark_runner(spark, table.io, table.metadata.location, progress=progress)


def spark_errors(spark: object, location: str) -> AbstractContextManager[None]:
    """Where Spark runs the work (``spark``: a session or a DataFrame, None: it does not), a Spark
    exception carrying an icemor error (a task's, a file of the table missing) raised as that
    error, its one line (:mod:`icemor.engines.spark.errors`)."""
    if spark is None:
        return nullcontext()
    from icemor.engines.spark.errors import spark_errors as translated  # noqa: PLC0415 - optional: pyspark

    return translated(location=location)
