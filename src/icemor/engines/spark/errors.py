"""icemor's errors across Spark: raised again on the driver as themselves, one line each.

An icemor error raised in a Spark Python worker (an executor task, a data source's planning,
a stream's commit) reaches the driver inside Spark's exception: a ``Py4JJavaError``,
``PythonException``, ``AnalysisException`` (``PYTHON_DATA_SOURCE_ERROR``),
``StreamingQueryException`` or a Spark Connect exception, whose text holds the worker's Python
traceback, icemor's line (``icemor.exceptions.InvalidArgumentError: ...``) somewhere inside.

- :func:`icemor_error` finds that line and makes the icemor error again (same class, same one
  line); :func:`spark_errors` re-raises it, chained from Spark's exception (so the whole trace
  stays available as ``__cause__``), where icemor runs Spark jobs on the driver: the function forms
  (``icemor.spark.read/write/sql``), the engine's runner and scans, writes of DataFrames. Any
  other error passes through unchanged.
- A worker cannot shorten Spark's wrapping (``[PYTHON_DATA_SOURCE_ERROR] Failed to create Python
  data source instance: ...``), but it can drop the traceback before it: :func:`worker_errors`,
  around the data source's methods, has an icemor error leave the worker as its one line, so that
  line follows Spark's header on the first line of the driver's exception.
- Where user code waits (``query.awaitTermination()``, ``df.collect()`` of a DataFrame icemor
  returned), icemor cannot intervene: ``with icemor.spark.errors(): ...`` (this module's
  :func:`spark_errors`) gives the user the same unwrapping.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from icemor import exceptions
from icemor.engines.spark._compat import HIDE_TRACEBACK_ENV
from icemor.exceptions import IcemorError, MissingFileError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["icemor_error", "spark_errors", "worker_errors", "worker_iterator"]

# icemor's line in a Python traceback: at the start of a line, or after Spark's header on one
_LINE = re.compile(r"(?:^|: )(icemor(?:\.\w+)*)\.(\w+): ([^\n]*)", re.MULTILINE)
# after the error found: the worker went on to raise another one (it is not icemor's then)
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# Spark's modules whose exceptions carry a worker's error (classic, Connect, py4j)
_SPARK_MODULES = ("pyspark.", "py4j.")
_T = TypeVar("_T")
# Spark's reader on a missing file: when the DataFrame is made (PATH_NOT_FOUND), or when a task
# opens it (3.5: SparkFileNotFoundException; 4.x: FAILED_READ_FILE.FILE_NOT_EXIST)
_MISSING = (
    re.compile(r"\[PATH_NOT_FOUND\] Path does not exist: (\S+?)\.?(?:\s|$)"),
    re.compile(r"SparkFileNotFoundException: File (\S+) does not exist"),
    re.compile(r"\[FAILED_READ_FILE\.FILE_NOT_EXIST\] Encountered error while reading file (\S+?)\.?\s"),
)


def icemor_error(error: BaseException, *, location: str | None = None) -> IcemorError | None:
    """The icemor error that ``error``, an exception of Spark, carries; None when it carries none.

    The error's class is looked up by the name in the line (icemor's own classes only), its
    message is the rest of the line. ``error`` itself when it already is an icemor error.

    Args:
        error: The exception the driver got.
        location: The location of the table icemor had Spark read: Spark's error for a missing
            file under it is the :class:`~icemor.exceptions.MissingFileError` the local engine
            raises for that file (a file of another table, or a user's, stays Spark's error).
    """
    if isinstance(error, IcemorError):
        return error
    if not type(error).__module__.startswith(_SPARK_MODULES):
        return None
    text = _text(error)
    found = list(_LINE.finditer(text))
    if found:
        last = found[-1]
        if not any(marker in text[last.end() :] for marker in _CHAINED):
            cls = _icemor_class(last.group(1), last.group(2))
            if cls is not None:
                return _made(cls, last.group(3).strip())
    if location is not None:
        for pattern in _MISSING:
            missing = pattern.search(text)
            if missing is not None and _under(missing.group(1), location):
                return MissingFileError(f"file not found: {_table_uri(missing.group(1))}")
    return None


@contextmanager
def spark_errors(*, location: str | None = None) -> Iterator[None]:
    """Re-raise an exception of Spark that carries an icemor error as that error (its one line),
    chained from Spark's; any other exception goes on unchanged.

    Example::

        with spark_errors():
            query.awaitTermination()   # an icemor sink's error: InvalidArgumentError, one line

    Args:
        location: See :func:`icemor_error`.
    """
    try:
        yield
    except Exception as e:
        found = icemor_error(e, location=location)
        if found is None or found is e:
            raise
        raise found from e


@contextmanager
def worker_errors() -> Iterator[None]:
    """In a Spark Python worker: an icemor error raised in the block leaves the worker as its last
    line only (``icemor.exceptions.X: message``), without the traceback before it.

    The process is about to report the error and exit (PySpark's workers end after an exception),
    so the setting dies with it; outside a worker (a data source called on the driver) nothing
    changes. Other errors keep their traceback.
    """
    try:
        yield
    except IcemorError:
        if HIDE_TRACEBACK_ENV is not None and _in_spark_worker():
            os.environ[HIDE_TRACEBACK_ENV] = "1"
        raise


def worker_iterator(items: Iterable[_T]) -> Iterator[_T]:
    """``items`` iterated under :func:`worker_errors` (a reader's batches fail while consumed)."""
    with worker_errors():
        yield from items


def _text(error: BaseException) -> str:
    """What ``error`` says: its message (py4j's holds the Java exception with the task's error;
    PySpark's captured exceptions add the JVM's trace when configured so)."""
    try:
        return str(error)
    except Exception:  # a captured exception whose JVM is gone (a stopped session)
        return repr(error.args)


def _icemor_class(module: str, name: str) -> type[IcemorError] | None:
    """icemor's exception class ``module.name``; None for anything else."""
    if module == exceptions.__name__:
        cls = getattr(exceptions, name, None)
    else:
        try:
            cls = getattr(sys.modules.get(module) or importlib.import_module(module), name, None)
        except ImportError:
            return None
    return cls if isinstance(cls, type) and issubclass(cls, IcemorError) else None


def _table_uri(path: str) -> str:
    """A path as Spark names it (``file:/x``) in the form table metadata has (``file:///x``)."""
    if path.startswith("file:/") and not path.startswith("file://"):
        return "file://" + path.removeprefix("file:")
    return path


def _under(path: str, location: str) -> bool:
    """Whether ``path`` (as Spark names it) is under ``location`` (as table metadata does), whatever
    each says of the scheme (``file:/x`` and ``file:///x``, ``s3a://b/x`` and ``s3://b/x``)."""

    def bare(uri: str) -> str:
        rest = uri.split("://", 1)[1] if "://" in uri else uri.split(":", 1)[-1]
        return "/" + rest.lstrip("/")

    return bare(path).startswith(bare(location).rstrip("/") + "/")


def _made(cls: type[IcemorError], message: str) -> IcemorError:
    try:
        return cls(message)
    except Exception:  # a class whose constructor takes more than a message
        return IcemorError(message)


def _in_spark_worker() -> bool:
    """Whether this process is one of PySpark's Python workers (its main module is PySpark's)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return bool(spec is not None and str(getattr(spec, "name", "")).startswith("pyspark."))
