"""The PySpark classes ``icemor.spark.attach`` stands in front of: ``DataFrameReader.table`` (and
its ``option``/``options``, so that the read options reach icemor) and, on classic sessions,
``DataFrameWriterV2`` (``df.writeTo(name)``: ``append``, ``overwritePartitions``, ``create``).
Patched on the classes while any session is attached (:func:`patch`), put back when none is
(:func:`unpatch`); a reader or writer of a session that is not attached, or of a table that is
not icemor's, is PySpark's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.readwriter import DataFrameReader, DataFrameWriterV2

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame


__all__ = ["patch", "unpatch"]

# ``attached(session)`` gives the session's icemor.engines.spark.front.Attached (typed Any here:
# that module imports this one)


def patch(attached: Callable[[Any], Any]) -> None:
    """Patch the classes (once), asking ``attached(session)`` for a session's attachment."""
    _patch_readers(attached)
    _patch_writers(attached)


def unpatch() -> None:
    """Put the classes back."""
    _unpatch_readers()
    _unpatch_writers()


_READERS: list[tuple[type, Callable[..., Any], Callable[..., Any], Callable[..., Any]]] = []


def _reader_classes() -> list[type]:
    classes: list[type] = [DataFrameReader]
    try:
        from pyspark.sql.connect.readwriter import DataFrameReader as ConnectReader  # noqa: PLC0415 - optional: Connect's libraries

        classes.append(ConnectReader)
    except ImportError:  # no Connect client libraries
        pass
    return classes


def _patch_readers(attached: Callable[[Any], Any]) -> None:
    """``spark.read.option(...).table(name)``: the reader notes its options and asks the
    session's attachment first. Patched on the classes once, undone when no session is attached."""
    if _READERS:
        return
    for cls in _reader_classes():
        table, option, options = cls.table, cls.option, cls.options  # type: ignore[attr-defined]

        def noted_option(self: Any, key: str, value: Any, _option: Any = option) -> Any:
            self.__dict__.setdefault("_icemor_options", {})[key] = value
            return _option(self, key, value)

        def noted_options(self: Any, _options: Any = options, **kw: Any) -> Any:
            self.__dict__.setdefault("_icemor_options", {}).update(kw)
            return _options(self, **kw)

        def routed_table(self: Any, name: str, _table: Any = table) -> Any:
            # the classic reader holds its session as _spark, the Connect one as _client
            session: Any = getattr(self, "_spark", None) or getattr(self, "_client", None)
            front = attached(session)
            if front is None:
                return _table(self, name)
            # Spark's table goes to this reader's own method: a Connect session's table() is
            # read.table(), which would come back here
            options = self.__dict__.get("_icemor_options")
            return front.read_table(name, options, spark_table=lambda: _table(self, name))

        cls.option, cls.options, cls.table = noted_option, noted_options, routed_table  # type: ignore[attr-defined]
        _READERS.append((cls, table, option, options))


def _unpatch_readers() -> None:
    while _READERS:
        cls, table, option, options = _READERS.pop()
        cls.table, cls.option, cls.options = table, option, options  # type: ignore[attr-defined]


_WRITERS: list[tuple[type, dict[str, Any]]] = []


def _patch_writers(attached: Callable[[Any], Any]) -> None:
    """``df.writeTo(name)`` of a classic session: for an icemor table, the writer notes its
    ``partitionedBy`` / ``tableProperty`` and icemor writes on ``append``, ``overwritePartitions``
    and ``create``. Patched on the class once, undone when no session is attached."""
    if _WRITERS:
        return
    cls = DataFrameWriterV2
    saved = {
        n: cls.__dict__[n]
        for n in (
            "__init__",
            "partitionedBy",
            "tableProperty",
            "append",
            "overwrite",
            "overwritePartitions",
            "create",
            "createOrReplace",
            "replace",
        )
    }

    def init(self: Any, df: DataFrame, table: str) -> None:
        front = attached(df.sparkSession)
        found = front.writer_target(table) if front is not None else None
        if front is None or found is None:
            saved["__init__"](self, df, table)
            return
        self._df, self._spark = df, df.sparkSession
        name, exists = found
        self._icemor = {"front": front, "table": name, "exists": exists, "partitions": [], "props": {}}

    def noted(name: str) -> Any:
        def method(self: Any, *args: Any) -> Any:
            state = self.__dict__.get("_icemor")
            if state is None:
                return saved[name](self, *args)
            if name == "partitionedBy":
                state["partitions"] += [c if isinstance(c, str) else str(c._jc.toString()) for c in args]
                return self
            if name == "tableProperty":
                state["props"][args[0]] = args[1]
                return self
            front: Any = state["front"]
            if name in ("append", "overwritePartitions"):
                mode = "append" if name == "append" else "replace-partitions"
                front.services.write(front.stored(self._df, state["table"]), state["table"], mode, None)
                return None
            if name == "create":
                if state["exists"]:
                    msg = f"Table {state['table']} already exists"
                    raise InvalidArgumentError(msg)
                front.services.create(state["table"], self._df, state["partitions"], state["props"], False)
                return None
            shown = "overwrite(condition)" if name == "overwrite" else name + "()"
            msg = f"df.writeTo(...).{shown} on an icemor table is not supported yet: use INSERT OVERWRITE"
            raise InvalidArgumentError(msg)

        return method

    cls.__init__ = init  # type: ignore[method-assign]
    for name in saved:
        if name != "__init__":
            setattr(cls, name, noted(name))
    _WRITERS.append((cls, saved))


def _unpatch_writers() -> None:
    while _WRITERS:
        cls, saved = _WRITERS.pop()
        for name, fn in saved.items():
            setattr(cls, name, fn)
