"""The data source's options: each read, change feed and sink as a picklable request.

Option names match case-insensitively and ignoring ``-``/``_`` (Spark's style and Python's); an
unknown option is refused in one line (a typo must not read every row). ``icemor.spark.read``
parses its keyword arguments here too, so the function form and the data source take the same
options and refuse the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icemor.exceptions import InvalidArgumentError
from icemor.spec.partitioning import split_partition_fields

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "ChangeRequest",
    "ReadRequest",
    "SinkRequest",
    "TableRequest",
    "change_request",
    "check_change_mode",
    "is_change_feed",
    "read_request",
    "sink_request",
]


def _canon(key: str) -> str:
    """Option names match case-insensitively and ignoring ``-``/``_``: ``snapshot-id``,
    ``snapshot_id`` and ``snapshotId`` are one option (Spark's own style and Python's)."""
    return key.lower().replace("-", "").replace("_", "")


_READ = (
    "path",
    "catalog",
    "snapshot-id",
    "as-of-timestamp",
    "branch",
    "tag",
    "columns",
    "filter",
    "metadata-columns",
)
_CHANGES = (
    "path",
    "catalog",
    "read-change-feed",
    "starting-snapshot-id",
    "starting-timestamp",
    "starting-offsets",
    "stream-from-timestamp",
    "ending-snapshot-id",
    "ending-timestamp",
    "columns",
    "filter",
    "key",
    "max-snapshots-per-trigger",
)
_SINK = (
    "path",
    "catalog",
    "key",
    "op-column",
    "order-by",
    "allow-nullable-key",
    "app-id",
    "partition-by",
    "format-version",
    "checkpointLocation",
)
_SPARK_OWN = {
    _canon(k) for k in ("checkpointLocation", "queryName", "path", "owner", "provider", "location", "comment")
}
"""Options Spark itself passes to a source or sink (``CREATE TABLE ... USING icemor`` adds its owner)."""


class _Options:
    """Options by canonical name, refusing unknown ones in one line (a typo must not read all rows)."""

    def __init__(self, options: Mapping[str, Any], known: Sequence[str], what: str) -> None:
        names = {_canon(k): k for k in known}
        self.values: dict[str, Any] = {}
        for key, value in options.items():
            canon = _canon(str(key))
            if canon not in names:
                if canon in _SPARK_OWN:
                    continue
                shown = ", ".join(k for k in known if k not in ("path", "checkpointLocation"))
                msg = f"unknown option {key!r} for {what}: the options are {shown}"
                raise InvalidArgumentError(msg)
            if value is not None:
                self.values[canon] = value

    def text(self, name: str) -> str | None:
        value = self.values.get(_canon(name))
        if value is None:
            return None
        text = str(value).strip()
        return text or None

    def integer(self, name: str) -> int | None:
        value = self.values.get(_canon(name))
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        text = str(value).strip()
        if text.lstrip("-").isdigit():
            return int(text)
        msg = f"option {name} must be an integer, got {value!r}"
        raise InvalidArgumentError(msg)

    def flag(self, name: str) -> bool:
        value = self.values.get(_canon(name), False)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        msg = f"option {name} must be true or false, got {value!r}"
        raise InvalidArgumentError(msg)

    def names(self, name: str) -> tuple[str, ...] | None:
        value = self.values.get(_canon(name))
        if value is None:
            return None
        parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
        if not parts or any(not p for p in parts):
            msg = f"option {name} must name columns, comma-separated (a,b), got {value!r}"
            raise InvalidArgumentError(msg)
        return tuple(parts)

    def time(self, name: str, epoch_ms: Callable[[Any], int]) -> int | None:
        value = self.values.get(_canon(name))
        return None if value is None else epoch_ms(value)

    def table(self, table: str | None) -> str:
        name = table or self.text("path")
        if not name:
            msg = "name the table: .load('db.t') (or the path option)"
            raise InvalidArgumentError(msg)
        return name


@dataclass(frozen=True)
class TableRequest:
    """What every read asks for: the table, its columns and a row filter (picklable)."""

    table: str
    catalog: str | None = None
    columns: tuple[str, ...] = ("*",)
    row_filter: str | None = None


@dataclass(frozen=True)
class ReadRequest(TableRequest):
    """A batch read of one snapshot, as options describe it."""

    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    branch: str | None = None
    tag: str | None = None
    metadata_columns: bool = False


@dataclass(frozen=True)
class ChangeRequest(TableRequest):
    """A read of the change feed, batch (``(start, end]``) or streamed."""

    start_snapshot_id: int | None = None
    start_timestamp: int | None = None
    end_snapshot_id: int | None = None
    end_timestamp: int | None = None
    key: tuple[str, ...] | None = None
    max_snapshots: int | None = None
    starting_offsets: str | None = None
    """A stream's ``startingOffsets``: ``earliest`` (before the table's first snapshot: every row it
    ever had) or ``latest`` (after the current snapshot, as without a start)."""


@dataclass(frozen=True)
class SinkRequest:
    """The CDC sink's options (picklable)."""

    table: str
    catalog: str | None
    key: tuple[str, ...]
    op_column: str
    order_by: str | None
    allow_nullable_key: bool
    app_id: str
    partition_by: tuple[str, ...] | None = None
    """A missing target's partition fields (``day(ts), bucket(16, id)``); None: the source's."""
    format_version: int | None = None
    """A missing target's format version; None: the source's (else 2)."""


def is_change_feed(options: Mapping[str, Any]) -> bool:
    """Whether the options ask for the change feed: ``read-change-feed`` (Delta's
    ``readChangeFeed``) or any starting/ending bound. Spark asks a source for one schema whether
    it is read or streamed, so the options alone decide between the table and its changes."""
    keys = {_canon(str(k)) for k, v in options.items() if v is not None}
    bounds = {_canon(k) for k in _CHANGES if k.startswith(("starting", "ending", "stream-from"))}
    if keys & bounds:
        return True
    value = next((v for k, v in options.items() if _canon(str(k)) == _canon("read-change-feed")), False)
    return value is True or str(value).strip().lower() == "true"


def read_request(
    options: Mapping[str, Any], epoch_ms: Callable[[Any], int], *, table: str | None = None
) -> ReadRequest:
    """Parse a batch read's options (``spark.read.format("icemor").option(...)``, or the keyword
    arguments of ``icemor.spark.read``): strings or Python values.

    Raises:
        InvalidArgumentError: An unknown option, a malformed value, more than one snapshot selector.
    """
    o = _Options(options, _READ, "an icemor read")
    request = ReadRequest(
        table=o.table(table),
        catalog=o.text("catalog"),
        snapshot_id=o.integer("snapshot-id"),
        as_of_timestamp=o.time("as-of-timestamp", epoch_ms),
        branch=o.text("branch"),
        tag=o.text("tag"),
        columns=o.names("columns") or ("*",),
        row_filter=o.text("filter"),
        metadata_columns=o.flag("metadata-columns"),
    )
    given = [
        n
        for n, v in (
            ("snapshot-id", request.snapshot_id),
            ("as-of-timestamp", request.as_of_timestamp),
            ("branch", request.branch),
            ("tag", request.tag),
        )
        if v is not None
    ]
    if len(given) > 1:
        msg = f"give at most one of snapshot-id, as-of-timestamp, branch and tag, not {' and '.join(given)}"
        raise InvalidArgumentError(msg)
    return request


def change_request(
    options: Mapping[str, Any],
    epoch_ms: Callable[[Any], int],
    *,
    table: str | None = None,
    stream: bool | None,
) -> ChangeRequest:
    """Parse the change feed's options (batch: ``(starting, ending]``; stream: from ``starting``;
    None: either, as when Spark asks for the schema).

    Raises:
        InvalidArgumentError: An unknown option, a malformed value, both an id and a time for one
            bound, an ending bound or ``read-change-feed=false`` on a stream.
    """
    o = _Options(options, _CHANGES, "an icemor change feed")
    starts = [
        n
        for n in ("starting-snapshot-id", "starting-timestamp", "starting-offsets", "stream-from-timestamp")
        if _canon(n) in o.values
    ]
    if len(starts) > 1:
        msg = f"give one start of the change feed, not {' and '.join(starts)}"
        raise InvalidArgumentError(msg)
    offsets = (o.text("starting-offsets") or "").lower()
    if offsets not in ("", "earliest", "latest"):
        msg = (
            "startingOffsets must be earliest (every change since the table's first snapshot) or latest "
            f"(changes after the current snapshot), got {o.text('starting-offsets')!r}; "
            "from a snapshot: starting-snapshot-id"
        )
        raise InvalidArgumentError(msg)
    start_timestamp = o.time("starting-timestamp", epoch_ms)
    if (inclusive := o.time("stream-from-timestamp", epoch_ms)) is not None:
        start_timestamp = inclusive - 1  # Iceberg's: the snapshots committed at or after it
    request = ChangeRequest(
        table=o.table(table),
        catalog=o.text("catalog"),
        start_snapshot_id=o.integer("starting-snapshot-id"),
        start_timestamp=start_timestamp,
        starting_offsets=offsets or None,
        end_snapshot_id=o.integer("ending-snapshot-id"),
        end_timestamp=o.time("ending-timestamp", epoch_ms),
        columns=o.names("columns") or ("*",),
        row_filter=o.text("filter"),
        key=o.names("key"),
        max_snapshots=o.integer("max-snapshots-per-trigger"),
    )
    check_change_mode(request, stream=stream)
    if request.max_snapshots is not None and request.max_snapshots < 1:
        msg = f"max-snapshots-per-trigger must be at least 1, got {request.max_snapshots}"
        raise InvalidArgumentError(msg)
    if "readchangefeed" in o.values and not o.flag("read-change-feed"):
        msg = "read-change-feed is false but a starting or ending bound asks for the change feed"
        raise InvalidArgumentError(msg)
    return request


def check_change_mode(request: ChangeRequest, *, stream: bool | None) -> None:
    """Refuse what a change feed's mode does not take: an end on a stream, a trigger limit on a
    batch read (None: either mode; the data source parses once, then knows the mode).

    Raises:
        InvalidArgumentError: An ending bound on a stream, ``max-snapshots-per-trigger`` on a batch read.
    """
    if stream is True and (request.end_snapshot_id is not None or request.end_timestamp is not None):
        msg = "a stream has no end: ending-snapshot-id and ending-timestamp are for batch reads of changes"
        raise InvalidArgumentError(msg)
    if stream is False and request.max_snapshots is not None:
        msg = "max-snapshots-per-trigger is for streams, not batch reads"
        raise InvalidArgumentError(msg)
    if stream is False and request.starting_offsets is not None:
        msg = (
            "startingOffsets is for streams: a batch read of changes starts at the table's first "
            "snapshot, or at starting-snapshot-id / starting-timestamp"
        )
        raise InvalidArgumentError(msg)


def sink_request(options: Mapping[str, Any]) -> SinkRequest:
    """Parse the CDC sink's options; the app id defaults to the query's checkpoint location.

    Raises:
        InvalidArgumentError: An unknown option, no key, no app id and no checkpoint location.
    """
    o = _Options(options, _SINK, "the icemor streaming sink")
    key = o.names("key")
    if not key:
        msg = "the icemor sink needs the key columns: .option('key', 'id') (comma-separated)"
        raise InvalidArgumentError(msg)
    app_id = o.text("app-id")
    if app_id is None:
        checkpoint = o.text("checkpointLocation")
        if checkpoint is None:
            msg = (
                "the icemor sink needs a stable identity for exactly-once commits: "
                ".option('checkpointLocation', ...) (its path becomes the app id) or .option('app-id', ...)"
            )
            raise InvalidArgumentError(msg)
        app_id = f"checkpoint:{checkpoint.rstrip('/')}"
    return SinkRequest(
        table=o.table(None),
        catalog=o.text("catalog"),
        key=key,
        op_column=o.text("op-column") or "op",
        order_by=o.text("order-by"),
        allow_nullable_key=o.flag("allow-nullable-key"),
        app_id=app_id,
        partition_by=_fields(o.text("partition-by")),
        format_version=o.integer("format-version"),
    )


def _fields(text: str | None) -> tuple[str, ...] | None:
    """Partition fields separated by commas outside parentheses (``day(ts), bucket(16, id)``)."""
    if text is None:
        return None
    bare = text.replace(" ", "")
    if (
        not bare
        or bare.startswith(",")
        or bare.endswith(",")
        or ",," in bare
        or bare.count("(") != bare.count(")")
    ):
        msg = (
            "option partition-by must list partition fields, comma-separated "
            f"(day(ts), bucket(16, id)), got {text!r}"
        )
        raise InvalidArgumentError(msg)
    return tuple(split_partition_fields([text]))
