"""All errors icemor raises on purpose; each carries a one-line message fit for a user."""

from __future__ import annotations

import errno
import logging
import os
import re
import traceback
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.exceptions import NoSuchTableError as _PyIcebergNoSuchTable

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = [
    "MASK",
    "NO_ROOM_ERRNOS",
    "CommitConflictError",
    "CommitFailedError",
    "CommitStateUnknownError",
    "CorruptFileError",
    "IcemorError",
    "InvalidArgumentError",
    "MissingFileError",
    "NoSuchSnapshotError",
    "NoSuchTableError",
    "RedactFilter",
    "RedactedError",
    "UnsupportedFeatureError",
    "WriteFailedError",
    "first_line",
    "formatted_traceback",
    "is_secret_name",
    "redact",
    "redact_properties",
    "redacted",
    "register_secrets",
    "shortened",
    "table_lookup_errors",
]


class IcemorError(Exception):
    """Base class of every error icemor raises deliberately (CLI exit code 2)."""


class InvalidArgumentError(IcemorError, ValueError):
    """A user-supplied argument (column, expression, option) is not valid for this table."""


class NoSuchTableError(IcemorError):
    """The table does not exist in the catalog."""


class NoSuchSnapshotError(IcemorError):
    """The requested snapshot, timestamp or ref does not exist."""


class MissingFileError(IcemorError):
    """A data or delete file referenced by table metadata cannot be opened."""


class CorruptFileError(IcemorError):
    """A data or delete file is unreadable or inconsistent with its metadata (CRC, schema, truncation)."""


class UnsupportedFeatureError(IcemorError):
    """The table uses a feature icemor does not implement; failing beats returning wrong rows."""


class CommitConflictError(IcemorError):
    """A concurrent commit conflicts with this one (Iceberg's ValidationException); nothing was committed."""


class NewDeletesConflictError(CommitConflictError):
    """A concurrent commit added deletes for a data file this commit rewrites (a rewrite that can
    carry position deletes onto its new files does so and validates again)."""


class CommitFailedError(IcemorError):
    """The catalog refused the commit (every retry lost, or it refused to write: a read-only
    catalog); nothing was committed."""


class CommitStateUnknownError(IcemorError):
    """The catalog call failed after it may have committed; files are kept, check the table."""


# errors that only a write can meet: no room left, or a file system that takes no writes
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


class WriteFailedError(IcemorError):
    """A file could not be written (disk full, permission denied, read-only file system, ...).

    Nothing was committed, and the files written for the operation were removed.
    """

    @classmethod
    def of(cls, path: str, error: OSError) -> WriteFailedError:
        """The error for ``error`` raised while writing ``path``: names the path and the reason."""
        return cls(f"cannot write {path}: {os_reason(error)}")


def os_reason(error: OSError) -> str:
    """The reason of an OSError in a few words (``No space left on device``), without its path.

    pyarrow's errors carry the errno with a longer text (``Error writing bytes to file.
    Detail: [errno 28] ...``): the errno's standard text is what a user needs.
    """
    if error.errno:
        return os.strerror(error.errno)
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


@contextmanager
def table_lookup_errors(identifier: str, catalog_name: str) -> Iterator[None]:
    """Map the catalog's errors for a table that is missing or misnamed to one clear error each."""
    try:
        yield
    except (_PyIcebergNoSuchTable, NoSuchNamespaceError) as e:
        msg = f"table {identifier!r} does not exist in catalog {catalog_name!r}"
        raise NoSuchTableError(msg) from e
    except ValueError as e:
        msg = f"invalid table identifier {identifier!r}: {redact(str(e))}"
        raise InvalidArgumentError(msg) from e


# --------------------------------------------------------------------------- secrets never printed
# Every error line, traceback, log record and shown property list passes through redact(): a
# catalog's URI, its properties and the server's errors carry credentials (a password in the
# URI, a token in its query, s3.secret-access-key, an OAuth credential).

MASK = "***"

_SECRET_WORDS = ("credential", "secret", "token", "password", "passwd", "pwd", "key", "signature")

# scheme://userinfo@: up to the last @ of the authority, as urllib splits it (a password may hold @)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#'\"<>]+@")
# ?name=value / &name=value of a query string
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[^\s=&#?;'\"<>]+)=)(?P<value>[^\s&#;'\"<>]*)")
# 'name': 'value' (a dict's repr, JSON) and name='value' (keyword arguments, a dataclass's repr)
_QUOTED_ITEM = re.compile(
    r"""(?P<head>(?P<q>['"])(?P<name>[^'"\n]{1,200})(?P=q)\s*:\s*|(?P<bare>\b[A-Za-z_][\w.\-]{0,200})=)"""
    r"""(?P<vq>['"])(?P<value>(?:\\.|(?!(?P=vq))[^\n])*)(?P=vq)"""
)
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Authorization:\s*\w+)\s+)[\w\-.~+/]+=*")

# secret values seen in catalog properties (redact() also masks them where no pattern shows them)
_REGISTERED: set[str] = set()
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no"})


def is_secret_name(name: str) -> bool:
    """Whether a property, option or query parameter named ``name`` holds a credential.

    Its name contains credential, secret, token, password, passwd, pwd, key or signature, is an
    ``X-Amz-*`` parameter of a presigned URL or has a part ``sig`` (an Azure SAS signature). A
    column-scoped table property (``write.metadata.metrics.column.<name>``) is judged by its
    property, not by the column it names.
    """
    lower = name.lower().split(".column.", 1)[0]
    if lower.startswith("x-amz-"):
        return True
    return any(w in lower for w in _SECRET_WORDS) or "sig" in re.split(r"[^a-z0-9]+", lower)


def redact_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` to show: the value of each secret-named one (:func:`is_secret_name`) masked."""
    return {k: (MASK if v and is_secret_name(k) else v) for k, v in properties.items()}


def register_secrets(properties: Mapping[str, object]) -> None:
    """Remember the secrets of catalog ``properties`` (the values of secret-named ones, a
    password in ``uri``), so that :func:`redact` masks them in any text: a server's error that
    echoes a token, a log line."""
    _REGISTERED.update(_secrets_of(properties.items()))


def _secrets_of(items: Iterable[tuple[str, object]]) -> set[str]:
    found: set[str] = set()
    for key, value in items:
        if not isinstance(value, str):
            continue
        if is_secret_name(key):
            # an OAuth credential is client_id:client_secret: a server may echo its secret alone
            found.update((value, value.partition(":")[2]))
        elif key.lower() == "uri" and "@" in value:
            with suppress(ValueError):
                found.add(urlsplit(value).password or "")
    # a short, numeric or boolean value (token-expires-in-ms=3600) would mask common words
    return {v for v in found if len(v) >= 6 and not v.isdigit() and v.lower() not in _NOT_SECRET_VALUES}


def _known_secrets() -> list[str]:
    """The registered secrets and those of ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables."""
    env = (
        (var.split("__", 2)[-1], v) for var, v in os.environ.items() if var.upper().startswith("PYICEBERG_")
    )
    # the longest first: one secret may contain another
    return sorted(_REGISTERED | _secrets_of(env), key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every credential masked (``***``): the userinfo of a URI
    (``http://***@host``), secret-named query parameters (``?token=***``), the values of
    secret-named items (``'s3.secret-access-key': '***'``), bearer tokens, and any value of a
    catalog's secret properties (:func:`register_secrets`, ``PYICEBERG_CATALOG__*`` variables)."""
    for value in _known_secrets():
        text = text.replace(value, MASK)
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    text = _QUERY_PARAM.sub(_masked_if_secret, text)
    text = _QUOTED_ITEM.sub(_masked_if_secret, text)
    return _BEARER.sub(rf"\g<head>{MASK}", text)


def _masked_if_secret(m: re.Match[str]) -> str:
    name = m.group("name") or m.groupdict().get("bare") or ""
    if not m.group("value") or not is_secret_name(name):
        return m.group(0)
    quote = m.groupdict().get("vq") or ""
    return f"{m.group('head')}{quote}{MASK}{quote}"


def first_line(e: BaseException | str, *, default: str | None = None) -> str:
    """The first line of an error's text, redacted (:func:`redact`): every one-line message
    that quotes another error says it with this.

    Args:
        e: The error, or its text.
        default: What to say when the text is empty (an error's type name by default).
    """
    lines = str(e).strip().splitlines()
    if lines:
        return redact(lines[0])
    return default if default is not None else type(e).__name__ if isinstance(e, BaseException) else ""


def shortened(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters for a one-line message (``...`` marks a cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def formatted_traceback(e: BaseException) -> str:
    """The traceback Python would print for ``e`` (its causes too), redacted (:func:`redact`)."""
    return redact("".join(traceback.format_exception(e)))


class RedactedError(Exception):
    """Stands in for an error whose text held a credential (:func:`redacted`): its type's name and
    its redacted text, with its traceback."""


def redacted(error: BaseException) -> BaseException:
    """``error`` for an icemor error to be raised from (``raise ... from redacted(e)``): itself when
    no text of its chain of causes holds a credential, else a :class:`RedactedError` chain with
    their redacted texts and their tracebacks, so that the traceback printed shows no secret."""
    if formatted_traceback(error) == "".join(traceback.format_exception(error)):
        return error
    return _stand_in(error, {})


def _stand_in(error: BaseException, seen: dict[int, BaseException]) -> BaseException:
    if id(error) in seen:  # a cycle of causes
        return seen[id(error)]
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    out = seen[id(error)] = RedactedError(f"{name}: {redact(str(error))}")
    out.__traceback__ = error.__traceback__
    out.__suppress_context__ = error.__suppress_context__
    if error.__cause__ is not None:
        out.__cause__ = _stand_in(error.__cause__, seen)
    if error.__context__ is not None:
        out.__context__ = _stand_in(error.__context__, seen)
    return out


class RedactFilter(logging.Filter):
    """Redacts every record a handler emits: its message, traceback and stack (:func:`redact`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redact("".join(traceback.format_exception(record.exc_info[1]))).rstrip("\n")
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
