"""Evaluate SQL over Arrow with DuckDB: the local engine's SQL.

Why DuckDB (not DataFusion): its SQL matches Spark SQL on the documented subset where
DataFusion's does not (``/`` on integers is a fractional division in both Spark and DuckDB,
integer division in DataFusion), it streams Arrow in and out without copies, and its hash
join takes a MERGE of a million source rows against a streamed target scan in one pass.

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

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from pyiceberg.types import IcebergType

__all__ = ["DuckSession", "duck_type", "empty_table", "filter_batches", "first_line", "session"]

_local = threading.local()


def first_line(e: BaseException) -> str:
    """DuckDB's error without its multi-line caret diagram or 'LINE 1:' echo."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    for prefix in ("Binder Error: ", "Parser Error: ", "Conversion Error: ", "Invalid Input Error: "):
        line = line.replace(prefix, "")
    return line


class DuckSession:
    """A thread's DuckDB connection with Arrow inputs registered for the queries it runs."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        # Spark (non-ANSI) gives NULL for x % 0 and x DIV 0; DuckDB raises unless told otherwise
        self.con.execute("SET error_on_division_by_zero=false")

    @contextmanager
    def inputs(self, tables: Mapping[str, object]) -> Iterator[DuckSession]:
        """Register Arrow tables, batches or readers under the given names for the block."""
        for name, data in tables.items():
            self.con.register(name, data)
        try:
            yield self
        finally:
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


def session() -> DuckSession:
    """This thread's DuckDB session."""
    s: DuckSession | None = getattr(_local, "session", None)
    if s is None:
        s = DuckSession()
        _local.session = s
    return s


def duck_type(t: IcebergType) -> str:
    """The DuckDB type an Iceberg primitive type is stored as in Arrow."""
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FixedType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    simple: dict[type, str] = {
        BooleanType: "BOOLEAN",
        IntegerType: "INTEGER",
        LongType: "BIGINT",
        FloatType: "FLOAT",
        DoubleType: "DOUBLE",
        DateType: "DATE",
        TimeType: "TIME",
        TimestampType: "TIMESTAMP",
        TimestamptzType: "TIMESTAMPTZ",
        StringType: "VARCHAR",
        BinaryType: "BLOB",
        FixedType: "BLOB",
        UUIDType: "UUID",
    }
    if isinstance(t, DecimalType):
        return f"DECIMAL({t.precision}, {t.scale})"
    for cls, name in simple.items():
        if isinstance(t, cls):
            return name
    msg = f"SQL expressions on columns of type {t} are not supported"
    raise InvalidArgumentError(msg)


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
