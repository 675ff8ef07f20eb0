"""Points in time as icemor's API takes them, and their one parser.

``as_of_timestamp``, the change feed's bounds, expiry and orphan cut-offs and the CLI's options
all accept a :data:`Timestamp` and read it with :func:`to_epoch_ms`, so every one of them takes
the same forms and refuses the same things with the same one-line error.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from icemor.exceptions import InvalidArgumentError

__all__ = ["Timestamp", "optional_ms", "to_epoch_ms"]

Timestamp = datetime | date | str | int
"""A point in time: a datetime (naive means UTC), a date (its midnight, UTC), ISO-8601 text
(``2024-05-01``, ``2024-05-01T12:00:00+02:00``) or milliseconds since the epoch."""


def to_epoch_ms(value: Timestamp, *, what: str = "the timestamp") -> int:
    """Milliseconds since the epoch of a :data:`Timestamp`; icemor's one parser of points in time
    (``as_of_timestamp``, change-feed bounds, expiry cut-offs, and the CLI's options).

    Example::

        to_epoch_ms("2024-05-01T00:00:00+00:00")   # 1714521600000
        to_epoch_ms(date(2024, 5, 1))              # the same instant

    Args:
        value: The point in time.
        what: How the error names it (``as_of_timestamp``, ``--older-than``).

    Raises:
        InvalidArgumentError: Anything else, or text that is neither digits nor ISO-8601 (one line).
    """
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(value, date):
        return int(datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            return to_epoch_ms(datetime.fromisoformat(text), what=what)
        except ValueError:
            pass
    msg = (
        f"{what} must be a datetime, ISO-8601 text (2024-05-01T12:00:00, UTC unless zoned) or "
        f"milliseconds since the epoch, got {value!r}"
    )
    raise InvalidArgumentError(msg)


def optional_ms(value: Timestamp | None, what: str) -> int | None:
    """:func:`to_epoch_ms` of ``value``, None for None (an option left out)."""
    return None if value is None else to_epoch_ms(value, what=what)
