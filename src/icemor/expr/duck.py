"""Evaluate SQL over Arrow with DuckDB: the local engine's SQL.

Why DuckDB (not DataFusion): its SQL matches Spark SQL on the documented subset where
DataFusion's does not (``/`` on integers is a fractional division in both Spark and DuckDB,
integer division in DataFusion), it streams Arrow in and out without copies, and its hash
join takes a MERGE of a million source rows against a streamed target scan in one pass.
docs/sql.md has the subset, the differences left, and the settings and macros below that
make DuckDB agree with Spark where it otherwise would not.

One connection per thread (DuckDB connections are not shared across threads); Arrow inputs
are registered by name on it for one query and unregistered after.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from icemor.exceptions import InvalidArgumentError
from icemor.exceptions import first_line as _first_line
from icemor.expr.type_names import sql_type_name

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence

    from pyiceberg.types import IcebergType

__all__ = [
    "DuckSession",
    "duck_type",
    "empty_table",
    "filter_batches",
    "first_line",
    "is_boolean_type",
    "query_batches",
    "session",
]

_local = threading.local()


def first_line(e: BaseException) -> str:
    """DuckDB's error without its multi-line caret diagram or 'LINE 1:' echo."""
    line = _first_line(e)
    for prefix in ("Binder Error: ", "Parser Error: ", "Conversion Error: ", "Invalid Input Error: "):
        line = line.replace(prefix, "")
    return line


# Where DuckDB's SQL differs from Spark SQL's (3.5, non-ANSI) on the documented subset and a
# setting or a macro makes it agree (docs/sql.md; tests/expr/test_dialect_parity.py checks it).
_SETTINGS = (
    # x % 0 is NULL in Spark; DuckDB raises unless told otherwise
    "SET error_on_division_by_zero=false",
    # x / 0 is NULL in Spark; DuckDB's IEEE mode gives ±inf or NaN (sqrt(-1), ln(0) then raise
    # where Spark gives NaN or NULL: loud, unlike a silent inf in a division)
    "SET ieee_floating_point_ops=false",
    # icemor's Spark sessions run in UTC (spark.sql.session.timeZone): timestamptz to date,
    # hour(), a date or TIMESTAMP literal stored into a timestamptz column, the same instants
    # here whatever the machine's time zone
    "SET TimeZone='UTC'",
)

_MAX_CONCAT_ARGS = 16


def _macros() -> list[str]:
    """Spark's meaning for built-in function names DuckDB spells the same but means otherwise.

    A temporary macro shadows the built-in of its name for this connection only; the macro
    reaches the built-in as ``system.main.<name>``.
    """
    # substring/substr: position 0 means 1; a negative length gives '' (DuckDB counts backwards)
    pos = "CASE WHEN p = 0 THEN 1 ELSE p END"
    length = "CASE WHEN n < 0 THEN 0 ELSE n END"
    out = [
        f"CREATE OR REPLACE TEMP MACRO {name}(s, p) AS system.main.substring(s, {pos}), "
        f"(s, p, n) AS system.main.substring(s, {pos}, {length})"
        for name in ("substring", "substr")
    ]
    # left/right with a negative length: '' in Spark, all but -n characters in DuckDB
    out += [
        f'CREATE OR REPLACE TEMP MACRO "{name}"(s, n) AS system.main."{name}"(s, {length})'
        for name in ("left", "right")  # keywords: quoted
    ]
    # dayofweek: 1 (Sunday) to 7 in Spark, 0 to 6 in DuckDB
    out.append("CREATE OR REPLACE TEMP MACRO dayofweek(d) AS system.main.dayofweek(d) + 1")
    # isnan(NULL): false in Spark, NULL in DuckDB
    out.append("CREATE OR REPLACE TEMP MACRO isnan(x) AS coalesce(system.main.isnan(x), false)")
    # concat: NULL if any argument is NULL in Spark (as ||); DuckDB's skips NULLs
    overloads = ["(a1) AS CAST(a1 AS VARCHAR)"]
    for n in range(2, _MAX_CONCAT_ARGS + 1):
        names = [f"a{i}" for i in range(1, n + 1)]
        overloads.append(f"({', '.join(names)}) AS {' || '.join(names)}")
    out.append(f"CREATE OR REPLACE TEMP MACRO concat{', '.join(overloads)}")
    return out


class DuckSession:
    """A thread's DuckDB connection with Arrow inputs registered for the queries it runs."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        for statement in (*_SETTINGS, *_macros()):
            self.con.execute(statement)

    @contextmanager
    def inputs(self, tables: Mapping[str, object]) -> Iterator[DuckSession]:
        """Register Arrow tables, batches or readers under the given names for the block.

        A uuid column is seen as its lowercase text, as Spark SQL sees Iceberg's uuid (so
        ``u = 'ABC…'`` is false there too); rows written back turn the text into bytes again.
        """
        views = []
        for name, data in tables.items():
            texts = [f.name for f in getattr(data, "schema", ()) if _is_uuid_extension(f.type)]
            if not texts:
                self.con.register(name, data)
                continue
            raw = f"{name}__uuid_bytes"
            self.con.register(raw, data)
            as_text = ", ".join(f"CAST({_quote(n)} AS VARCHAR) AS {_quote(n)}" for n in texts)
            view = f"SELECT * REPLACE ({as_text}) FROM {_quote(raw)}"
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW {_quote(name)} AS {view}")
            views.append((name, raw))
        try:
            yield self
        finally:
            for name, raw in views:
                with suppress(duckdb.Error):
                    self.con.execute(f"DROP VIEW IF EXISTS {_quote(name)}")
                with suppress(duckdb.Error):
                    self.con.unregister(raw)
            for name in tables:
                with suppress(duckdb.Error):
                    self.con.unregister(name)

    def reader(self, sql: str, *, batch_rows: int = 1 << 17) -> pa.RecordBatchReader:
        """Run ``sql``; its rows as a stream of Arrow batches (user errors: InvalidArgumentError)."""
        try:
            return self.con.sql(sql).to_arrow_reader(batch_rows)
        except duckdb.Error as e:
            raise InvalidArgumentError(first_line(e)) from e

    def table(self, sql: str) -> pa.Table:
        try:
            return self.con.sql(sql).to_arrow_table()
        except duckdb.Error as e:
            raise InvalidArgumentError(first_line(e)) from e

    def types(self, sql: str) -> list[tuple[str, str]]:
        """The (name, DuckDB type) of each output column of ``sql``, without running it."""
        try:
            rel = self.con.sql(sql)
        except duckdb.Error as e:
            raise InvalidArgumentError(first_line(e)) from e
        return [(n, str(t)) for n, t in zip(rel.columns, rel.types, strict=True)]


def _is_uuid_extension(t: pa.DataType) -> bool:
    return isinstance(t, pa.BaseExtensionType) and bool(t.extension_name == "arrow.uuid")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def session() -> DuckSession:
    """This thread's DuckDB session."""
    s: DuckSession | None = getattr(_local, "session", None)
    if s is None:
        s = DuckSession()
        _local.session = s
    return s


def query_batches(sql: str, inputs: Mapping[str, object]) -> Generator[pa.RecordBatch, None, None]:
    """The rows of ``sql`` over ``inputs`` (registered by name, as :meth:`DuckSession.inputs`), as
    they come; the inputs stay registered until the stream ends or is closed."""
    s = session()
    with s.inputs(inputs):
        yield from s.reader(sql)


def duck_type(t: IcebergType) -> str:
    """The DuckDB type an Iceberg primitive type is stored as in Arrow (:func:`sql_type_name`)."""
    return sql_type_name(t, "duckdb")


def is_boolean_type(value_type: str) -> bool:
    """Whether a DuckDB type name can be a condition: BOOLEAN, or the type of a bare NULL."""
    return value_type.upper() in ("BOOLEAN", "NULL", '"NULL"')


def empty_table(schema: pa.Schema) -> pa.Table:
    """No rows, ``schema``'s columns: what binding a query against a table needs."""
    return pa.Table.from_batches([], schema=schema)


def filter_batches(
    batches: Iterable[pa.RecordBatch], condition: str, keep: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    """The rows of each batch for which the SQL ``condition`` is TRUE, with the ``keep`` columns.

    DuckDB computes only the mask; Arrow filters, so column types come through unchanged.
    """
    s = session()
    sql = f"SELECT COALESCE(({condition}\n), FALSE) AS m FROM __batch"
    for batch in batches:
        if not batch.num_rows:
            continue
        with s.inputs({"__batch": batch}):
            mask = s.table(sql).column(0)
        out = batch.filter(mask).select(list(keep))
        if out.num_rows:
            yield out
