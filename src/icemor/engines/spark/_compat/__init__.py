"""The PySpark internals icemor borrows, one module per PySpark version range, each wrapped once.

This is the PySpark counterpart of :mod:`icemor._compat.pyiceberg`. It lives in
``icemor.engines.spark``, not in ``icemor._compat``, because the import contract keeps pyspark
out of every package but ``icemor.engines.spark`` (``[tool.importlinter]``, "pyspark"):
``icemor._compat`` is the bottom layer that the local engine imports too.

What counts as borrowed (``tools/check_borrowed.py`` refuses each outside this package, in
``make lint``): any ``_``-prefixed name or attribute of PySpark (``SparkContext._jvm`` and
``._gateway``, ``DataFrame._collect_as_arrow``; the py4j handles ``_jsc``, ``_jdf``,
``_jconf``... are refused too, icemor uses none), the ``pyspark.sql.pandas`` modules
(``to_arrow_schema``, ``from_arrow_schema``) and Spark's internal column
``_tmp_metadata_row_index``.

The module for the running PySpark is chosen once, by ``pyspark.__version__``:
:mod:`.spark35` for 3.5.x, :mod:`.spark4` for 4.x; any other version is refused with one
line. Each lists its internals in ``BORROWED``; ``tests/_compat/test_pyspark.py`` (3.5, main
suite) and ``tests_spark4/test_compat.py`` (4.x, ``make test-spark4``) check that each still
exists and behaves, so a PySpark release that moves one fails there, by name.
"""

from __future__ import annotations

import inspect
import sys
import types
import zipimport
from typing import TYPE_CHECKING, Any

from icemor.exceptions import UnsupportedFeatureError

try:
    import pyspark
except ModuleNotFoundError as e:  # PySpark is optional: say what to install, in one line
    if e.name not in ("pyspark", "py4j"):
        raise
    _msg = "the Spark engine needs PySpark 3.5 or 4.x: pip install 'icemor[spark]'"
    raise UnsupportedFeatureError(_msg) from None

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "BORROWED",
    "HIDE_TRACEBACK_ENV",
    "ROW_INDEX_COLUMN",
    "SPARK_RANGE",
    "arrow_schema_of",
    "collect_arrow_batches",
    "jvm_and_gateway",
    "spare_zip_rescans",
    "spark_schema_of",
    "version_module",
    "worker_input_stream",
]


def version_module(version: str) -> types.ModuleType:
    """The compat module for PySpark ``version`` (``"3.5.9"``, ``"4.3.0"``).

    Raises:
        UnsupportedFeatureError: A PySpark outside 3.5 and 4.x.
    """
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    if (major, minor) == (3, 5):
        from icemor.engines.spark._compat import spark35  # noqa: PLC0415 - optional: the running PySpark's only

        return spark35
    if major == 4:
        from icemor.engines.spark._compat import spark4  # noqa: PLC0415 - optional: the running PySpark's only

        return spark4
    msg = f"icemor's Spark engine needs PySpark 3.5 or 4.x, not {version}: pip install 'icemor[spark]'"
    raise UnsupportedFeatureError(msg)


_impl = version_module(pyspark.__version__)

SPARK_RANGE: str = _impl.SPARK_RANGE
BORROWED: tuple[tuple[str, str], ...] = _impl.BORROWED
ROW_INDEX_COLUMN: str = _impl.ROW_INDEX_COLUMN
HIDE_TRACEBACK_ENV: str | None = _impl.HIDE_TRACEBACK_ENV
arrow_schema_of = _impl.arrow_schema_of
collect_arrow_batches = _impl.collect_arrow_batches
jvm_and_gateway = _impl.jvm_and_gateway
spark_schema_of = _impl.spark_schema_of
WORKER_MODULE: str = _impl.WORKER_MODULE

_SPARK_ARCHIVES = ("pyspark.zip",)


def spare_zip_rescans() -> int:
    """Stop this Python worker from re-reading PySpark's archives at the start of every task.

    Why: PySpark's worker calls ``importlib.invalidate_caches()`` before each task
    (:data:`WORKER_MODULE`), and from Python 3.10 that makes every ``zipimporter`` on
    ``sys.path`` read its archive's whole directory again. Spark puts ``pyspark.zip``, py4j's
    zip and the 15 MB ``spark-core`` jar there: measured, 50-140 ms of CPU per task, more than
    the rest of a small task. These archives do not change while a worker lives, so their
    importers keep their directory; any other archive is left alone. Idempotent.

    Returns:
        How many importers were changed by this call.
    """
    spared = 0
    for finder in list(sys.path_importer_cache.values()):
        if not isinstance(finder, zipimport.zipimporter) or "invalidate_caches" in vars(finder):
            continue
        archive = finder.archive.replace("\\", "/").rsplit("/", 1)[-1]
        if archive.endswith(".jar") or archive in _SPARK_ARCHIVES or archive.startswith("py4j-"):
            finder.invalidate_caches = _unchanged  # type: ignore[method-assign]
            spared += 1
    return spared


def worker_input_stream(batches: Iterable[Any]) -> Any:
    """The buffered socket file a Spark Python worker reads ``batches`` (a ``mapInArrow``
    function's or a data source writer's input) from, or None where it is not found.

    Borrowed: how PySpark 3.5 and 4.x hand the input over, ``map(<flatten>,
    <serializer>.load_stream(stream))``: follows ``map`` objects (their ``__reduce__`` names the
    iterators they map) and generators not yet started (their arguments) down to
    ``load_stream``'s local ``stream``, a few steps at most. ``tests/_compat/test_pyspark.py`` and
    ``tests_spark4/test_compat.py`` find it inside a real task.
    """
    todo: list[Any] = [batches]
    for _ in range(8):
        if not todo:
            return None
        obj = todo.pop()
        if isinstance(obj, map):
            todo.extend(obj.__reduce__()[1][1:])
        elif isinstance(obj, types.GeneratorType) and obj.gi_frame is not None:
            found = inspect.getgeneratorlocals(obj)
            stream = found.get("stream")
            if obj.gi_code.co_name == "load_stream" and callable(getattr(stream, "peek", None)):
                return stream
            todo.extend(v for v in found.values() if isinstance(v, map | types.GeneratorType))
    return None


def _unchanged() -> None:
    """An archive's directory as it was: nothing to invalidate."""
