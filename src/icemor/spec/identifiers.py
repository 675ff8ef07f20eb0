"""Table and namespace names icemor creates, and when one table location lies inside another.

A catalog turns a name into a directory: pyiceberg's SQL catalog puts ``ns.t`` at
``<warehouse>/ns/t`` (Hive-style catalogs at ``<warehouse>/ns.db/t``, Iceberg Java's JDBC
catalog at ``<warehouse>/<level>/<level>/t``), and the table writes
``metadata/<5 digits>-<uuid>.metadata.json``, ``data/<partition>/<…>-<uuid>.parquet`` below
it. So a name part must be one safe path component, and must not change the meaning of the
location URI it becomes. What is refused, and why:

* ``/`` and ``\\``: a part would become several directories, ``db.t/data`` a folder inside
  ``db.t``, whose orphan removal then deletes the other table's files;
* empty parts (``a..b``, a leading or trailing dot; so ``.`` and ``..``, which would name the
  directory itself or its parent, cannot occur) and whitespace-only parts;
* control characters (NUL, newline, …, and the Unicode line/paragraph separators): they break
  paths, logs and the one-line errors;
* ``#``, ``?`` and ``%``: a location is a URI, where ``#`` starts a fragment and ``?`` a query
  (pyiceberg then writes ``db.u?x``'s metadata to a *file* named ``db/u``) and ``%`` starts an
  escape some engines decode (``p%2Fq`` read back as ``p/q``);
* more than :data:`MAX_NAME_BYTES` UTF-8 bytes in the table name or in the namespace (its
  parts joined by dots: pyiceberg's SQL catalog makes the whole namespace one directory).

These rules apply to names icemor *creates* (a namespace is created with its first table).
Tables that exist already (made by another engine or an older icemor) are loaded and dropped
by whatever name the catalog has for them.
"""

from __future__ import annotations

import posixpath
import unicodedata
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "DATA_PATH_PROPERTIES",
    "LOCATION_PROPERTIES",
    "MAX_NAME_BYTES",
    "STAGING_DIR",
    "check_table_identifier",
    "location_key",
    "location_within",
]

# NAME_MAX is 255 bytes per path component on Linux and macOS file systems (255 UTF-16 units
# on Windows), and ADLS caps a path segment at 255 too. The name is not always written alone:
# Hive-style catalogs add ".db" to the namespace, catalogs with unique table locations add
# "-<32 hex>" to the table, and eCryptfs (encrypted home directories) allows only 143 bytes.
# 128 bytes stays under every one of these (and is far above any name people choose); a
# 300-character name used to fail half-way with "File name too long".
MAX_NAME_BYTES = 128

_URI_SPECIAL = {"#": "starts a URI fragment", "?": "starts a URI query", "%": "starts a URI escape"}
_SEPARATORS = {"/": "is a path separator", "\\": "is a path separator"}
# Cc: C0/C1 controls and DEL (NUL, newline, tab, escape); Zl/Zp: U+2028/U+2029 line breaks
_CONTROL_CATEGORIES = ("Cc", "Zl", "Zp")


def check_table_identifier(identifier: str) -> tuple[str, ...]:
    """Check a ``namespace.table`` name for creating a table; return its parts.

    Raises:
        InvalidArgumentError: Fewer than two parts, or a part or length the module doc refuses.
    """
    parts = _check_parts(identifier, "table name")
    if len(parts) < 2:
        msg = f"table name must be namespace.table, got {_shown(identifier)}"
        raise InvalidArgumentError(msg)
    _check_length(".".join(parts[:-1]), "namespace", identifier, "table name")
    _check_length(parts[-1], "table name", identifier, "table name")
    return parts


def _shown(name: str) -> str:
    """The name quoted for a one-line message: escapes control characters, shortens long names."""
    text = ascii(name) if any(unicodedata.category(c) in _CONTROL_CATEGORIES for c in name) else repr(name)
    return text if len(text) <= 80 else f"{text[:60]}…{text[-10:]} ({len(name)} characters)"


def _check_parts(name: str, what: str) -> tuple[str, ...]:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates: undecodable bytes on the command line
        msg = f"invalid {what} {_shown(name)}: not valid UTF-8 ({e.reason})"
        raise InvalidArgumentError(msg) from None
    parts = tuple(name.split("."))
    for part in parts:
        problem = None
        if not part.strip():
            problem = "an empty part (two dots in a row, a leading or trailing dot, or only spaces)"
        elif bad := next((c for c in part if c in _SEPARATORS or c in _URI_SPECIAL), None):
            problem = f"{bad!r}, which {_SEPARATORS.get(bad) or _URI_SPECIAL[bad]}"
        elif bad := next((c for c in part if unicodedata.category(c) in _CONTROL_CATEGORIES), None):
            problem = f"the control character {bad!r}"
        if problem is not None:
            msg = f"invalid {what} {_shown(name)}: it contains {problem}; names become directories"
            raise InvalidArgumentError(msg)
    return parts


def _check_length(part: str, what: str, name: str, kind: str) -> None:
    size = len(part.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        msg = (
            f"invalid {kind} {_shown(name)}: the {what} is {size} bytes (UTF-8), at most "
            f"{MAX_NAME_BYTES} are allowed so that every file path the table writes stays under "
            "the file system's limit"
        )
        raise InvalidArgumentError(msg)


# Where a table may write besides its location (Iceberg Java's TableProperties; the last two
# are deprecated spellings of write.data.path that Java still honours).
LOCATION_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.folder-storage.path",
    "write.object-storage.path",
)

# Where a table's data files go, newest spelling first (the last two are deprecated ones)
DATA_PATH_PROPERTIES = ("write.data.path", "write.object-storage.path", "write.folder-storage.path")

STAGING_DIR = "_icemor-staging"
"""The directory, in a data path, of the markers Spark writes announce their files under (written
by ``icemor.engines.spark.write``, cleaned by ``icemor.maintenance.orphans``)."""

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "wasbs": "wasb", "abfss": "abfs"}


def location_key(location: str) -> str:
    """A location compared regardless of how it is spelled (``file:/x``, ``file:///x``, ``/x``, s3a).

    Local paths are normalised (``//``, ``/./``, ``/../``, a trailing ``/``); object-store keys
    only lose a trailing ``/`` (``a//b`` is another key there).
    """
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return posixpath.normpath(parsed.path) if parsed.path else parsed.path
    scheme = _SCHEME_ALIASES.get(parsed.scheme, parsed.scheme)
    path = parsed.path.rstrip("/") or "/"
    return f"{scheme}://{parsed.netloc}{path}"


def location_within(path: str, locations: Iterable[str]) -> str | None:
    """The first of ``locations`` that ``path`` equals or lies under (any spelling), else None.

    A percent-encoded spelling counts too: one writer's ``a%20b`` may be another's ``a b``.
    """
    keys = {location_key(path)}
    keys |= {unquote(k) for k in keys}
    for location in locations:
        base = location_key(location)
        for b in {base, unquote(base)}:
            prefix = b if b.endswith("/") else b + "/"
            if any(k == b or k.startswith(prefix) for k in keys):
                return location
    return None
