"""``spark.read.format("icemor")`` in a Python client served by ``table.to_spark``'s plan.

Why: a Python data source cannot use Spark's own Parquet reader, and Spark plans it in new Python
processes per query; ``to_spark`` reads files without equality deletes with Spark's reader and
plans in the client. Measured (docs/spark.md, "Data source"), the registered source costs
several times ``to_spark``'s time on a table without deletes. So ``icemor.spark.register(spark)``
also puts a front before the session's ``spark.read``: for the format ``icemor`` its ``load``
returns ``icemor.spark.read(...)``'s DataFrame (the same options, the same rows); for any other
format, or with ``.schema(...)``, it hands every call to PySpark's own reader. SQL, streams and
non-Python clients keep the registered data source.

What is borrowed (PySpark 4.x, classic and Connect): the ``read`` property of the session classes
(``pyspark.sql.session.SparkSession.read``, ``pyspark.sql.connect.session.SparkSession.read``) is
replaced, once, by one that wraps the reader of a registered session; and the reader's public
methods ``format``, ``option``, ``options``, ``schema`` and ``load(path, format, schema,
**options)`` are mirrored. ``tests_spark4/test_datasource.py`` checks each of them, so a PySpark
release that moves one fails there, by name.
"""

from __future__ import annotations

import importlib
import threading
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame

__all__ = ["BORROWED", "SESSION_CLASSES", "IcemorReadFront", "install", "uninstall"]

BORROWED: tuple[tuple[str, str], ...] = (
    ("pyspark.sql.session", "SparkSession.read"),
    ("pyspark.sql.connect.session", "SparkSession.read"),
    ("pyspark.sql.readwriter", "DataFrameReader.load"),
    ("pyspark.sql.connect.readwriter", "DataFrameReader.load"),
)

SESSION_CLASSES = ("pyspark.sql.session", "pyspark.sql.connect.session")
"""Modules whose ``SparkSession.read`` the front wraps (Connect's only where its client is installed)."""

_LOCK = threading.Lock()
_SESSIONS: weakref.WeakKeyDictionary[Any, Callable[[Any, str | None, dict[str, Any]], DataFrame]] = (
    weakref.WeakKeyDictionary()
)
_ORIGINAL: dict[type, property] = {}


def _session_classes() -> list[type]:
    found = []
    for module in SESSION_CLASSES:
        try:
            found.append(importlib.import_module(module).SparkSession)
        except ImportError:  # the Connect client's libraries (grpc) are optional
            continue
    return found


def install(spark: Any, read: Callable[[Any, str | None, dict[str, Any]], DataFrame]) -> None:
    """Serve ``spark.read.format("icemor")...load(...)`` of this session with ``read(spark,
    table, options)``; other sessions and other formats are untouched."""
    with _LOCK:
        for cls in _session_classes():
            if cls in _ORIGINAL:
                continue
            original = cls.__dict__.get("read")
            if not isinstance(original, property) or original.fget is None:
                continue  # not the shape this front knows: leave the class alone
            _ORIGINAL[cls] = original
            cls.read = property(_wrapped(original), doc=original.__doc__)  # type: ignore[attr-defined]
        _SESSIONS[spark] = read


def uninstall(spark: Any) -> None:
    """``spark.read.format("icemor")`` of this session goes to the registered data source again."""
    with _LOCK:
        _SESSIONS.pop(spark, None)


def _wrapped(original: property) -> Callable[[Any], Any]:
    fget = original.fget
    assert fget is not None

    def read(session: Any) -> Any:
        reader = fget(session)
        served = _SESSIONS.get(session)
        return reader if served is None else IcemorReadFront(session, reader, served)

    return read


class IcemorReadFront:
    """A session's ``spark.read``: PySpark's reader, except that ``load`` of the format ``icemor``
    (without ``.schema()``) returns the read function's DataFrame. Every call also goes to
    PySpark's reader, so anything else it offers (``csv``, ``table``, ``parquet``...) is its own."""

    def __init__(
        self, session: Any, reader: Any, read: Callable[[Any, str | None, dict[str, Any]], DataFrame]
    ):
        self._session = session
        self._reader = reader
        self._read = read
        self._format: str | None = None
        self._options: dict[str, Any] = {}
        self._schema: Any = None

    def format(self, source: str) -> IcemorReadFront:
        self._reader = self._reader.format(source)
        self._format = source
        return self

    def option(self, key: str, value: Any) -> IcemorReadFront:
        self._reader = self._reader.option(key, value)
        self._options[key] = value
        return self

    def options(self, **options: Any) -> IcemorReadFront:
        self._reader = self._reader.options(**options)
        self._options.update(options)
        return self

    def schema(self, schema: Any) -> IcemorReadFront:
        self._reader = self._reader.schema(schema)
        self._schema = schema
        return self

    def load(
        self, path: Any = None, format: str | None = None, schema: Any = None, **options: Any
    ) -> DataFrame:
        source = format or self._format
        if (
            source is not None
            and source.lower() == "icemor"
            and schema is None
            and self._schema is None
            and (path is None or isinstance(path, str))
        ):
            return self._read(self._session, path, {**self._options, **options})
        return self._reader.load(path, format, schema, **options)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)
