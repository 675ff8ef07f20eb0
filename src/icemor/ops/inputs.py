"""Rows handed to an operation (appended data, MERGE source, CDC changes) as Arrow, one way.

Inputs: an Arrow table, record batch or reader (or anything with ``__arrow_c_stream__``), a
pandas or polars DataFrame, or Parquet file path(s). :func:`input_batches` streams them,
:func:`read_arrow` reads them whole; :class:`TableRows` converts them to the table's columns
by one set of rules (promotions, NULL-typed columns, nanosecond timestamps) for every write.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from icemor.dependencies import is_pandas_dataframe, is_polars_dataframe, is_polars_lazyframe
from icemor.exceptions import IcemorError, InvalidArgumentError, first_line

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from icemor.io.data_writer import TableDataWriter


__all__ = [
    "InputRows",
    "TableRows",
    "check_distinct_names",
    "input_batches",
    "new_table_schema",
    "open_parquet",
    "read_arrow",
    "schema_of",
]

_Arrow = TypeVar("_Arrow", pa.Table, pa.RecordBatch)


def check_distinct_names(names: Iterable[str], *, what: str) -> None:
    """Refuse column names that SQL cannot tell apart: equal, or differing only in case.

    SQL names are case-insensitive in DuckDB and in Spark by default
    (``spark.sql.caseSensitive=false``): with ``id`` and ``ID`` in a MERGE source, one part of
    a MERGE once read one and another part the other, and inserted a key that existed.

    Args:
        names: The column names.
        what: How the message names their owner (``the MERGE source``, ``table db.t``).

    Raises:
        InvalidArgumentError: Two names that are equal ignoring case (the message names both).
    """
    seen: dict[str, str] = {}
    for name in names:
        other = seen.get(name.lower())
        if other is None:
            seen[name.lower()] = name
            continue
        if other == name:
            msg = f"{what} has two columns named {name!r}"
        else:
            msg = (
                f"{what} has columns {other!r} and {name!r}, whose names differ only in case: SQL "
                "names are case-insensitive (as in Spark by default), so they cannot be told apart; "
                "rename one"
            )
        raise InvalidArgumentError(msg)


def open_parquet(path: Path) -> pq.ParquetFile:
    """Open a local Parquet file, with one-line errors for a missing, directory or bad file."""
    if not path.exists():
        msg = f"no such file: {path}"
        raise InvalidArgumentError(msg)
    if path.is_dir():
        msg = f"{path} is a directory, not a Parquet file"
        raise InvalidArgumentError(msg)
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as e:
        msg = f"cannot read Parquet file {path}: {first_line(e)}"
        raise InvalidArgumentError(msg) from e


def read_arrow(rows: Any, *, what: str, convert: TableRows | None = None) -> pa.Table:
    """``rows`` as one Arrow table: a table, record batch or reader, a pandas or polars DataFrame,
    or Parquet file path(s) (read whole; their schemas may differ only by missing columns).

    Args:
        rows: The input.
        what: How errors name it (``the MERGE source``, ``the changes``).
        convert: Convert the columns named like table columns by its rules (non-strict).

    Raises:
        InvalidArgumentError: A missing or unreadable file, no file, schemas that differ, an
            input of another kind, or columns whose names differ only in case
            (:func:`check_distinct_names`).
    """
    table = _read_arrow(rows, what=what)
    check_distinct_names(table.column_names, what=what)
    if convert is not None:
        table = convert.convert_table(table, what=what)
    return table


def _read_arrow(rows: Any, *, what: str) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    if isinstance(rows, pa.RecordBatchReader):
        return rows.read_all()
    if is_pandas_dataframe(rows):
        return _from_pandas(rows, what=what)
    if _is_polars(rows):
        return _from_polars(rows)
    if hasattr(rows, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(rows).read_all()
    paths = _paths(rows, what=what)
    tables = []
    for path in paths:
        try:
            tables.append(open_parquet(path).read())
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {path}: {first_line(e)}"
            raise InvalidArgumentError(msg) from e
    try:
        return pa.concat_tables(tables, promote_options="default")
    except pa.ArrowInvalid as e:
        msg = f"the files of {what} have schemas that differ: {first_line(e)}"
        raise InvalidArgumentError(msg) from e


def _paths(rows: Any, *, what: str) -> list[Path]:
    paths = [rows] if isinstance(rows, str | Path) else rows
    if not isinstance(paths, list | tuple) or not all(isinstance(p, str | Path) for p in paths):
        kind = type(rows).__name__
        msg = (
            f"{what} must be an Arrow table or reader, a pandas or polars DataFrame or Parquet file "
            f"paths, not {kind}"
        )
        raise InvalidArgumentError(msg)
    if not paths:
        msg = f"{what}: no file given"
        raise InvalidArgumentError(msg)
    return [Path(p) for p in paths]


def _from_pandas(df: Any, *, what: str) -> pa.Table:
    return _pandas_to_arrow(pa.Table.from_pandas, df, what=what)


def _pandas_to_arrow(convert: Callable[..., _Arrow], df: Any, *, what: str) -> _Arrow:
    """``convert(df)`` (a table's or a batch's ``from_pandas``); Arrow's refusal as one line."""
    try:
        return convert(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        msg = f"cannot convert {what} (a pandas DataFrame) to Arrow: {first_line(e)}"
        raise InvalidArgumentError(msg) from e


def _is_polars(rows: Any) -> bool:
    return is_polars_dataframe(rows) or is_polars_lazyframe(rows)


def _from_polars(df: Any) -> pa.Table:
    if is_polars_lazyframe(df):
        df = df.collect()
    table: pa.Table = df.to_arrow()
    return table


def schema_of(rows: Any, *, what: str) -> tuple[pa.Schema | Schema, Any]:
    """The schema a new table takes from ``rows``, and the data to append (None for a schema).

    ``rows``: a pyiceberg or Arrow schema; or data (what :func:`input_batches` takes), whose
    Arrow schema is read without consuming it (a reader's, the first Parquet file's, a pandas
    DataFrame's inferred one). View and dictionary types become their plain types.

    Raises:
        InvalidArgumentError: An input of another kind, or a column of Arrow's null type (all
            NULL: its type is unknown).
    """
    if isinstance(rows, Schema | pa.Schema):
        return rows, None
    if _is_polars(rows):
        rows = _from_polars(rows)
    if isinstance(rows, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        schema = rows.schema
    elif is_pandas_dataframe(rows):
        try:  # object columns are typed by their values
            schema = pa.Schema.from_pandas(rows, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            msg = f"cannot convert {what} (a pandas DataFrame) to Arrow: {first_line(e)}"
            raise InvalidArgumentError(msg) from e
    elif hasattr(rows, "__arrow_c_stream__"):
        rows = pa.RecordBatchReader.from_stream(rows)
        schema = rows.schema
    else:
        schema = open_parquet(_paths(rows, what=what)[0]).schema_arrow
    fields = []
    for f in schema:
        if pa.types.is_null(f.type):
            msg = (
                f"column {f.name!r} of {what} is all NULL, so its type is unknown: give it a type or a schema"
            )
            raise InvalidArgumentError(msg)
        fields.append(f.with_type(_plain(f.type)))
    return pa.schema(fields), rows


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    return t


# Iceberg's decimals hold at most 38 digits (Spark's DecimalType.MAX_PRECISION too)
_MAX_DECIMAL_PRECISION = 38


def new_table_schema(schema: pa.Schema, *, what: str) -> pa.Schema:
    """The Arrow schema a table created from input columns of ``schema`` takes: for each column,
    the type that :class:`TableRows` then converts the same input to, so that create and append
    follow one set of rules (docs/semantics.md, "Input rows").

    - zoned timestamps in any zone -> ``timestamptz`` (UTC, the same instant);
    - ``decimal32/64/256(p, s)`` with ``p <= 38`` -> ``decimal(p, s)``; more digits are refused;
    - ``uint8/16`` -> ``int``, ``uint32/64`` -> ``long`` (``uint64`` values beyond a long are
      refused when rows are written);
    - ``time32`` -> ``time``, ``date64`` -> ``date``;
    - dictionary-encoded columns -> their value type;
    - durations and intervals are refused (Iceberg has no such type); so are empty column names
      and names equal ignoring case (SQL cannot tell them apart), at any depth.

    Raises:
        InvalidArgumentError: One of the refusals above, naming the column.
    """
    return pa.schema(_new_table_fields(list(schema), what=what, path=""), metadata=schema.metadata)


def _new_table_fields(fields: list[pa.Field], *, what: str, path: str) -> list[pa.Field]:
    for i, f in enumerate(fields):
        if not f.name:
            where = f"column {i + 1}" + (f" of struct {path!r}" if path else "")
            msg = f"{where} of {what} has an empty name: Iceberg columns need a name; rename it"
            raise InvalidArgumentError(msg)
    check_distinct_names([f.name for f in fields], what=f"struct {path!r} of {what}" if path else what)
    return [f.with_type(_new_table_type(f.type, what=what, path=f"{path}{f.name}")) for f in fields]


def _new_table_type(t: pa.DataType, *, what: str, path: str) -> pa.DataType:
    types = pa.types
    if types.is_dictionary(t):
        return _new_table_type(t.value_type, what=what, path=path)
    if types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="UTC")
    if types.is_unsigned_integer(t):
        return pa.int32() if t.bit_width < 32 else pa.int64()
    if types.is_time32(t):
        return pa.time64("us")
    if types.is_date64(t):
        return pa.date32()
    if types.is_decimal(t):
        if t.precision > _MAX_DECIMAL_PRECISION:
            msg = (
                f"column {path!r} of {what} is {t}: Iceberg decimals hold at most "
                f"{_MAX_DECIMAL_PRECISION} digits"
            )
            raise InvalidArgumentError(msg)
        return pa.decimal128(t.precision, t.scale)
    if types.is_duration(t) or types.is_interval(t):
        msg = (
            f"column {path!r} of {what} is {t}: Iceberg has no duration or interval type; store it "
            "as a number (e.g. a long of microseconds) or a string"
        )
        raise InvalidArgumentError(msg)
    if types.is_struct(t):
        fields = _new_table_fields(list(t), what=what, path=f"{path}.")
        return pa.struct(fields)
    if types.is_map(t):
        key = t.key_field.with_type(_new_table_type(t.key_type, what=what, path=f"{path}.key"))
        item = t.item_field.with_type(_new_table_type(t.item_type, what=what, path=f"{path}.value"))
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t) or types.is_list_view(t):
        element = t.value_field.with_type(_new_table_type(t.value_type, what=what, path=f"{path}.element"))
        return pa.large_list(element) if types.is_large_list(t) else pa.list_(element)
    return t


class InputRows:
    """An input streamed as record batches: ``schemas`` are known before any row is read (the
    Parquet files'), checked first; ``batches`` yields ``(what, batch)``, ``what`` naming the
    batch's origin in errors."""

    def __init__(self, schemas: list[tuple[str, pa.Schema]], batches: Iterator[tuple[str, pa.RecordBatch]]):
        self.schemas = schemas
        self.batches = batches


def input_batches(rows: Any, *, what: str, batch_rows: int) -> InputRows:
    """Stream ``rows`` (see :func:`read_arrow` for the kinds) in batches of at most ``batch_rows``.

    Arrow readers and Parquet files are read batch by batch; a pandas DataFrame is converted
    ``batch_rows`` rows at a time; a polars DataFrame is handed over as Arrow (zero-copy).

    Raises:
        InvalidArgumentError: A missing or unreadable file, no file, an input of another kind.
    """
    limit = max(1, batch_rows)
    if isinstance(rows, pa.Table):
        return InputRows([], ((what, b) for b in rows.to_batches(max_chunksize=limit)))
    if isinstance(rows, pa.RecordBatch):
        return InputRows([], ((what, rows.slice(i, limit)) for i in range(0, rows.num_rows, limit)))
    if is_pandas_dataframe(rows):
        return InputRows([], _pandas_batches(rows, what=what, limit=limit))
    if _is_polars(rows):
        return input_batches(_from_polars(rows), what=what, batch_rows=limit)
    if isinstance(rows, pa.RecordBatchReader) or hasattr(rows, "__arrow_c_stream__"):
        reader = rows if isinstance(rows, pa.RecordBatchReader) else pa.RecordBatchReader.from_stream(rows)
        return InputRows([], _reader_batches(reader, what=what, limit=limit))
    opened = [(path, open_parquet(path)) for path in _paths(rows, what=what)]
    return InputRows(
        [(str(path), pf.schema_arrow) for path, pf in opened], _parquet_batches(opened, limit=limit)
    )


def _pandas_batches(df: Any, *, what: str, limit: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    for start in range(0, len(df), limit):
        yield what, from_pandas_batch(df.iloc[start : start + limit], what=what)


def from_pandas_batch(df: Any, *, what: str) -> pa.RecordBatch:
    return _pandas_to_arrow(pa.RecordBatch.from_pandas, df, what=what)


def _reader_batches(
    reader: pa.RecordBatchReader, *, what: str, limit: int
) -> Iterator[tuple[str, pa.RecordBatch]]:
    for batch in reader:
        for start in range(0, batch.num_rows, limit):
            yield what, batch.slice(start, limit)


def _parquet_batches(
    opened: list[tuple[Path, pq.ParquetFile]], *, limit: int
) -> Iterator[tuple[str, pa.RecordBatch]]:
    for path, pf in opened:
        try:
            for batch in pf.iter_batches(batch_size=limit):
                yield str(path), batch
        except (OSError, pa.ArrowInvalid) as e:
            msg = f"cannot read Parquet file {path}: {first_line(e)}"
            raise InvalidArgumentError(msg) from e


# ---------------------------------------------------------------------------- input coercion

_NS_UNIT = "ns"


class TableRows:
    """Convert rows handed to a write into the table's Arrow schema, by one set of rules.

    The rules (docs/semantics.md, "Input rows"), for each column named like a table column:

    - Iceberg's promotions: ``int -> long``, ``float -> double``, a wider decimal precision at
      the same scale; and, as Spark's and Java's inserts do, ``int``/``long -> double`` when the
      table column is ``double``. Any other type change (a narrowing, string -> long) is refused.
    - Arrow's null type (an all-null pandas column) becomes nulls of the table column's type.
    - ``timestamp[ns]`` becomes microseconds (a ``timestamp``/``timestamptz`` column's unit), rounded
      down to the microsecond that holds the instant (as Spark converts an ``Instant``); the
      values that lose digits are counted, and :meth:`summary` says so once per command.
    - Zoned timestamps are stored in UTC (same instant); a zoned value for a timestamp column
      without zone, or the reverse, is refused.
    - Dictionary-encoded columns (pandas categoricals) are decoded; string, binary and list
      flavours (large, view) become the table's.

    ``strict`` (append, overwrite): every column must be a table column, missing optional
    columns are NULL, missing or NULL required columns are refused (one line naming the
    column). Otherwise (MERGE sources, CDC changes, which carry other columns and rows whose
    required columns may be NULL) only the columns named like table columns are converted, and
    a column that does not convert is left as it is for the operation's own checks.
    """

    def __init__(self, schema: Schema, *, table: str, strict: bool = True) -> None:
        self.schema = schema
        self.table = table
        self.strict = strict
        self.arrow_schema: pa.Schema = schema_to_pyarrow(schema, include_field_ids=False)
        self.truncated: dict[str, int] = {}
        self._checked: set[pa.Schema] = set()

    def check(self, schema: pa.Schema, *, what: str) -> None:
        """Refuse an input schema that cannot be written (before any row is), naming the column.

        Raises:
            InvalidArgumentError: See the class rules; the message starts with ``what``.
        """
        if schema in self._checked:
            return
        check_distinct_names(schema.names, what=what)
        empty = _empty_batch(schema)
        self._convert(empty, what=what, count=False)
        self._checked.add(schema)

    def convert(self, batch: pa.RecordBatch, *, what: str) -> pa.RecordBatch:
        """``batch`` in the table's Arrow schema (strict) or with its table columns converted.

        Raises:
            InvalidArgumentError: A column that does not fit (strict), NULL in a required column.
        """
        self.check(batch.schema, what=what)
        return self._convert(batch, what=what, count=True)

    def write(self, writer: TableDataWriter, batch: pa.RecordBatch, *, what: str) -> None:
        """Write ``batch``, converted (:meth:`convert`), with ``writer``: how every write stores
        its rows, locally and in Spark tasks.

        Raises:
            InvalidArgumentError: As :meth:`convert`; rows the writer's Arrow refuses (the
                message names ``what`` and the table).
        """
        converted = self.convert(batch, what=what)
        try:
            writer.write(converted)
        except (pa.ArrowInvalid, ValueError) as e:
            if isinstance(e, IcemorError):
                raise
            msg = f"cannot write the rows of {what} to {self.table}: {first_line(e)}"
            raise InvalidArgumentError(msg) from e

    def convert_table(self, table: pa.Table, *, what: str) -> pa.Table:
        """:meth:`convert` for each batch of ``table``, as one table."""
        if table.num_rows == 0:
            self.check(table.schema, what=what)
            empty = _empty_batch(table.schema)
            return pa.Table.from_batches([self._convert(empty, what=what, count=False)])
        batches = [self.convert(b, what=what) for b in table.to_batches()]
        return pa.Table.from_batches(batches)

    def summary(self) -> str | None:
        """One line saying how many timestamp values lost sub-microsecond digits, if any did."""
        lost = {name: n for name, n in self.truncated.items() if n}
        if not lost:
            return None
        total = sum(lost.values())
        columns = ", ".join(f"{name} ({n})" for name, n in lost.items())
        return (
            f"{total} nanosecond timestamp value(s) truncated to microseconds (the table's timestamp "
            f"columns hold microseconds): {columns}"
        )

    def _convert(self, batch: pa.RecordBatch, *, what: str, count: bool) -> pa.RecordBatch:
        names = batch.schema.names
        if not self.strict:
            arrays, fields = [], []
            for i, f in enumerate(batch.schema):
                arr = batch.column(i)
                if f.name in self.arrow_schema.names:
                    target = self.arrow_schema.field(f.name)
                    try:
                        arr = self._column(arr, target, count=count)
                        f = f.with_type(arr.type)
                    except _OutOfRange as e:  # the type converts, these values do not
                        msg = f"cannot write {what} to {self.table}: {e}"
                        raise InvalidArgumentError(msg) from None
                    except _Mismatch:
                        pass  # the operation's own check names it
                arrays.append(arr)
                fields.append(f)
            return pa.RecordBatch.from_arrays(
                arrays, schema=pa.schema(fields, metadata=batch.schema.metadata)
            )
        if extra := [n for n in names if n not in self.arrow_schema.names]:
            msg = f"{what} does not match the schema of {self.table}: column {extra[0]!r} is not in the table"
            raise InvalidArgumentError(msg)
        arrays = []
        for target in self.arrow_schema:
            if target.name not in names:
                if not target.nullable:
                    msg = (
                        f"{what} does not match the schema of {self.table}: it has no column "
                        f"{target.name!r}, which is required (NOT NULL)"
                    )
                    raise InvalidArgumentError(msg)
                arrays.append(pa.nulls(batch.num_rows, target.type))
                continue
            try:
                arr = self._column(batch.column(target.name), target, count=count)
            except _Mismatch as e:
                msg = f"{what} does not match the schema of {self.table}: {e}"
                raise InvalidArgumentError(msg) from None
            if not target.nullable and arr.null_count:
                msg = (
                    f"column {target.name!r} of {self.table} is required (NOT NULL) but {arr.null_count} "
                    f"row(s) of {what} hold NULL in it"
                )
                raise InvalidArgumentError(msg)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _column(self, arr: pa.Array, target: pa.Field, *, count: bool) -> pa.Array:
        source = arr.type
        if source == target.type:
            return arr
        if pa.types.is_dictionary(source):
            arr = arr.dictionary_decode()
        try:
            converted = _convert_array(arr, target.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise _Mismatch(self._mismatch(target.name, source)) from e
        except _Overflow as e:
            field = self.schema.find_field(target.name)
            text = (
                f"column {target.name!r} is {source} and {e.count} value(s) exceed the table's "
                f"{field.field_type} (at most {e.limit}), the first {e.value}"
            )
            raise _OutOfRange(text) from None
        if converted is None:
            raise _Mismatch(self._mismatch(target.name, source))
        out, lost = converted
        if count and lost:
            self.truncated[target.name] = self.truncated.get(target.name, 0) + lost
        return out

    def _mismatch(self, name: str, source: pa.DataType) -> str:
        field = self.schema.find_field(name)
        return f"column {name!r} is {source}, the table's is {field.field_type}"


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of no rows of ``schema`` (``from_pylist`` cannot build a nested uuid column)."""
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


class _Mismatch(Exception):
    """A column whose type cannot be written to its table column (the message says both)."""


class _OutOfRange(_Mismatch):
    """A column whose type converts but some of whose values do not fit (unsigned integers)."""


def _floor_to_micros(arr: pa.Array, target: pa.DataType) -> tuple[pa.Array, int]:
    """``timestamp[ns]`` values as ``target`` microseconds, rounded down; and how many lost digits."""
    nanos = arr.cast(pa.int64())
    valid = np.asarray(nanos.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(nanos.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    micros, rest = np.divmod(values, 1000)
    lost = int(np.count_nonzero(rest[valid])) if len(values) else 0
    out = pa.array(micros, pa.int64(), mask=None if valid.all() else ~valid)
    return out.cast(target), lost


class _Overflow(Exception):
    """Unsigned values beyond the table's signed integer type (a type that fits otherwise)."""

    def __init__(self, count: int, value: int, limit: int) -> None:
        super().__init__(count, value, limit)
        self.count, self.value, self.limit = count, value, limit


def _check_unsigned_fits(arr: pa.Array, target: pa.DataType) -> None:
    """Raise :class:`_Overflow` when an unsigned value of ``arr`` exceeds ``target``'s maximum."""
    limit = (1 << (target.bit_width - 1)) - 1
    over = pc.fill_null(pc.greater(arr, pa.scalar(limit, arr.type)), False)
    count = pc.sum(over).as_py() or 0
    if count:
        raise _Overflow(count, arr[pc.index(over, True).as_py()].as_py(), limit)


def _convert_array(arr: pa.Array, target: pa.DataType) -> tuple[pa.Array, int] | None:
    """``arr`` as ``target`` by the rules of :class:`TableRows`, with the count of values that lost
    sub-microsecond digits; None when the types do not convert."""
    source = arr.type
    if source == target:
        return arr, 0
    t = pa.types
    if t.is_null(source):
        return pa.nulls(len(arr), target), 0
    if t.is_timestamp(source) and t.is_timestamp(target):
        if (source.tz is None) != (target.tz is None):
            return None
        if source.unit == _NS_UNIT and target.unit != _NS_UNIT:
            return _floor_to_micros(arr, target)
        return arr.cast(target), 0
    if t.is_integer(source) and t.is_integer(target):
        if not t.is_signed_integer(target):
            return None
        if t.is_signed_integer(source):
            return (arr.cast(target), 0) if source.bit_width <= target.bit_width else None
        if source.bit_width >= target.bit_width:  # uint32 -> int, uint64 -> long: values may not fit
            _check_unsigned_fits(arr, target)
        return arr.cast(target), 0
    if t.is_integer(source) and t.is_float64(target):
        return arr.cast(target, safe=False), 0  # as Spark's insert: a long beyond 2^53 rounds
    if t.is_floating(source) and t.is_floating(target):
        return (arr.cast(target), 0) if source.bit_width <= target.bit_width else None
    if t.is_decimal(source) and t.is_decimal(target):
        fits = source.scale == target.scale and source.precision <= target.precision
        return (arr.cast(target), 0) if fits else None
    kinds = (
        (t.is_string, t.is_large_string, t.is_string_view),
        (t.is_binary, t.is_large_binary, t.is_binary_view),
        (t.is_date,),
        (t.is_time,),
    )
    for kind in kinds:
        if any(k(source) for k in kind) and any(k(target) for k in kind):
            return arr.cast(target), 0
    if t.is_fixed_size_binary(target) and t.is_fixed_size_binary(source):
        return (arr, 0) if source.byte_width == target.byte_width else None
    if t.is_nested(source) and t.is_nested(target):
        try:
            return arr.cast(target), 0
        except pa.ArrowInvalid:
            # nanoseconds inside: truncated (counted as one value per row that changed is not
            # known here; nested nanosecond timestamps are rare)
            return arr.cast(target, safe=False), 0
    return None
