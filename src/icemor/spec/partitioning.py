"""Parse partition fields given as text: ``col``, ``bucket(16,col)``, ``truncate(4,col)``, ``day(ts)``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pyiceberg.schema import Schema

__all__ = ["parse_partition_spec", "partition_field_text", "partition_label", "split_partition_fields"]

_CALL = re.compile(r"^\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([\w.]+)\s*\)\s*$")
_NAME = re.compile(r"^\s*([\w.]+)\s*$")
_UNARY: dict[str, Callable[[], Transform]] = {  # type: ignore[type-arg]
    "year": YearTransform,
    "years": YearTransform,
    "month": MonthTransform,
    "months": MonthTransform,
    "day": DayTransform,
    "days": DayTransform,
    "hour": HourTransform,
    "hours": HourTransform,
    "void": VoidTransform,
    "identity": IdentityTransform,
}
_TIME = (YearTransform, MonthTransform, DayTransform, HourTransform)
_USAGE = "use col, bucket(N,col), truncate(W,col), year|month|day|hour(col)"
_SUFFIX = {
    YearTransform: "year",
    MonthTransform: "month",
    DayTransform: "day",
    HourTransform: "hour",
    VoidTransform: "null",
}


_SPARK_WORDS = {"year": "years", "month": "months", "day": "days", "hour": "hours"}


def partition_field_text(schema: Schema, field: PartitionField) -> str:
    """A partition field as Spark's DDL writes it, which :func:`parse_partition_spec` reads back:
    ``col``, ``bucket(16, col)``, ``truncate(4, col)``, ``days(ts)``, ``void(col)``."""
    source = schema.find_column_name(field.source_id)
    name, _, arg = str(field.transform).partition("[")  # bucket[16], day, identity, truncate[4]
    if name == "identity":
        return str(source)
    if arg:
        return f"{name}({arg.rstrip(']')}, {source})"
    return f"{_SPARK_WORDS.get(name, name)}({source})"


def split_partition_fields(values: Sequence[str]) -> list[str]:
    """Split each value on commas outside parentheses: ``"day(ts),bucket(16,id)"`` -> two fields."""
    out: list[str] = []
    for value in values:
        depth, start = 0, 0
        for i, ch in enumerate(value):
            depth += ch == "("
            depth -= ch == ")"
            if ch == "," and depth == 0:
                out.append(value[start:i])
                start = i + 1
        out.append(value[start:])
    return [v.strip() for v in out if v.strip()]


def parse_partition_spec(fields: Sequence[str], schema: Schema) -> PartitionSpec:
    """Build a partition spec; field ids are assigned by the catalog when the table is created."""
    parts: list[PartitionField] = []
    for i, text in enumerate(split_partition_fields(fields)):
        transform: Transform  # type: ignore[type-arg]
        if m := _NAME.match(text):
            column, transform, name = m.group(1), IdentityTransform(), m.group(1)
        elif m := _CALL.match(text):
            fn, arg, column = m.group(1).lower(), m.group(2), m.group(3)
            if fn in ("bucket", "truncate") and arg is not None and int(arg) <= 0:
                msg = f"bad partition field {text!r}: {fn} width must be > 0"
                raise InvalidArgumentError(msg)
            if fn == "bucket" and arg is not None:
                transform, name = BucketTransform(int(arg)), f"{column}_bucket"
            elif fn == "truncate" and arg is not None:
                transform, name = TruncateTransform(int(arg)), f"{column}_trunc"
            elif fn in _UNARY and arg is None:
                transform = _UNARY[fn]()
                name = (
                    column
                    if isinstance(transform, IdentityTransform)
                    else f"{column}_{_SUFFIX[type(transform)]}"
                )
            else:
                msg = f"bad partition field {text!r}: {_USAGE}"
                raise InvalidArgumentError(msg)
        else:
            msg = f"bad partition field {text!r}: {_USAGE}"
            raise InvalidArgumentError(msg)
        try:
            source = schema.find_field(column)
        except ValueError as e:
            msg = f"bad partition field {text!r}: no column {column!r} in the schema"
            raise InvalidArgumentError(msg) from e
        if not transform.can_transform(source.field_type):
            msg = f"bad partition field {text!r}: {transform} cannot apply to {source.field_type}"
            raise InvalidArgumentError(msg)
        if any(p.name == name for p in parts):
            msg = f"bad partition field {text!r}: partition name {name!r} is used more than once"
            raise InvalidArgumentError(msg)
        if isinstance(transform, _TIME) and any(
            p.source_id == source.field_id and isinstance(p.transform, _TIME) for p in parts
        ):
            msg = f"bad partition field {text!r}: redundant time partition of column {column!r}"
            raise InvalidArgumentError(msg)
        parts.append(
            PartitionField(source_id=source.field_id, field_id=1000 + i, transform=transform, name=name)
        )
    return PartitionSpec(*parts)


def partition_label(spec: PartitionSpec, schema: Schema, values: Sequence[Any]) -> str:
    """A partition as people read it: ``field=value/...`` with each value as its transform's
    human string (``ts_day=2024-05-01``, ``ts_hour=2024-05-01-10``, a date or timestamp
    identity as ISO, binary as base64, NULL as ``null``): the directory names of
    ``PartitionSpec.partition_to_path`` (what ``icemor files`` shows in the data file paths),
    without their URL escaping. Empty for an unpartitioned spec.

    A field whose source column was dropped from ``schema`` shows its stored value as it is.
    """
    parts = []
    for pf, value in zip(spec.fields, values, strict=False):
        try:
            source = schema.find_field(pf.source_id).field_type
            text = pf.transform.to_human_string(pf.transform.result_type(source), value)
        except ValueError:  # the source column was dropped: its type, and the human form, are gone
            text = "null" if value is None else str(value)
        parts.append(f"{pf.name}={text}")
    return "/".join(parts)
