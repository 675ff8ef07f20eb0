"""Catalog resolution: the embedded SQLite catalog by default, any pyiceberg catalog by name."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from pyiceberg import exceptions as pe

from icemor.exceptions import (
    CorruptFileError,
    IcemorError,
    InvalidArgumentError,
    MissingFileError,
    RedactFilter,
    UnsupportedFeatureError,
    first_line,
    redact,
    redacted,
    register_secrets,
)
from icemor.spec.identifiers import LOCATION_PROPERTIES

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import SqlCatalog

__all__ = [
    "DEFAULT_CATALOG_NAME",
    "catalog_error",
    "icemor_home",
    "list_namespaces",
    "list_tables",
    "load_catalog",
    "metadata_location",
    "table_locations",
]

# The embedded catalog's name is also the `catalog_name` column of its SQLite tables, so a
# JDBC catalog of Iceberg Java must use the same name to see the same tables.
DEFAULT_CATALOG_NAME = "icemor"


def icemor_home() -> Path:
    """Return ``$ICEMOR_HOME`` (default ``~/.icemor``), where the embedded catalog lives."""
    home = os.environ.get("ICEMOR_HOME")
    return Path(home).expanduser().resolve() if home else Path.home() / ".icemor"


def load_catalog(name: str | None = None, **properties: str) -> Catalog:
    """Load the embedded catalog (``name`` None) or a named pyiceberg catalog.

    Named catalogs are configured the pyiceberg way: ``.pyiceberg.yaml`` or
    ``PYICEBERG_CATALOG__<NAME>__<KEY>`` environment variables.
    """
    if name is None or (name == DEFAULT_CATALOG_NAME and not _configured(name)):
        from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415 - cost: pyiceberg.catalog.sql ~1.4 s

        home = icemor_home()
        (home / "warehouse").mkdir(parents=True, exist_ok=True)
        db = home / "catalog.db"
        props = {"uri": f"sqlite:///{db}", "warehouse": (home / "warehouse").as_uri()}
        props.update(properties)
        register_secrets(props)
        key = tuple(sorted(props.items()))
        with _EMBEDDED_LOCK:
            hit = _EMBEDDED.get(key)
            if hit is not None and hit[0] == _identity(db):
                return hit[1]
        try:
            catalog = SqlCatalog(DEFAULT_CATALOG_NAME, **props)
        except Exception as e:
            # its database cannot be opened: a directory, an unreadable file, not SQLite
            known = catalog_error(e, None, uri=props["uri"])
            if known is None:
                raise
            raise known from redacted(e)
        with _EMBEDDED_LOCK:
            _EMBEDDED[key] = (_identity(db), catalog)
            while len(_EMBEDDED) > _EMBEDDED_MAX:
                _, (_, old) = _EMBEDDED.popitem(last=False)
                old.engine.dispose()
        return catalog

    from pyiceberg.catalog import load_catalog as _pyiceberg_load_catalog  # noqa: PLC0415 - cost: pyiceberg.catalog ~0.9 s

    register_secrets(properties)
    _redact_request_logs()
    try:
        named = _pyiceberg_load_catalog(name, **properties)
    except Exception as e:
        # the secrets of its configuration (.pyiceberg.yaml too) stay out of what is printed
        register_secrets(_configuration(name))
        if isinstance(e, ValueError | KeyError | NotImplementedError) and not _is_database_error(e):
            msg = f"cannot load catalog {name!r}: {first_line(e)}"
            raise InvalidArgumentError(msg) from redacted(e)
        # a REST catalog asks its server for its configuration here: unreachable, refused; a
        # SQL catalog opens its database
        known = catalog_error(e, name, uri=properties.get("uri"))
        if known is None:
            raise
        raise known from redacted(e)
    register_secrets(named.properties)
    return named


# urllib3 logs every request's URL (a token in its query) at DEBUG: redacted where it is logged,
# so that every handler (the application's own) gets it redacted
_REQUEST_LOGGERS = ("urllib3.connectionpool",)
_REDACT_FILTER = RedactFilter()


def _redact_request_logs() -> None:
    for name in _REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACT_FILTER not in logger.filters:
            logger.addFilter(_REDACT_FILTER)


# the drivers of icemor's extras (`pip install "icemor[glue]"`), by pyiceberg's extra name; for
# others pyiceberg's own advice stands (`[s3]` is pyarrow's S3, already in pyarrow's wheel)
_EXTRAS = {"glue": "glue", "hive": "hive"}


def catalog_error(
    error: BaseException, name: str | None = None, *, uri: str | None = None
) -> IcemorError | None:
    """The one-line icemor error for a catalog that cannot be used, or None for any other error.

    A missing driver (pyiceberg's ``NotInstalledError``: the extra to install), a server that
    cannot be reached (connection refused, unknown host, timeout), a server that refuses
    the request (401/403, an expired token, a 5xx) and a SQL catalog's database that cannot be
    opened (a missing directory, a directory or a file that is no SQLite database; its ``uri``,
    default the configured one). Raised while the catalog loads, or later by any call the CLI
    makes to it. No credential is in the message (:func:`icemor.exceptions.redact`).
    """
    which = f"catalog {name!r}" if name else "the catalog"
    if _is_database_error(error):
        where = uri or _catalog_uri(name)
        cause = getattr(error, "orig", None) or error  # SQLAlchemy's wraps the driver's
        reason = re.sub(r"^\([\w.]+\) ", "", first_line(cause))  # "(sqlite3.OperationalError) ..."
        which = which if name else "the embedded catalog"
        msg = f"cannot open {which}: {redact(where) + ': ' if where else ''}{reason}"
        return InvalidArgumentError(msg)
    if isinstance(error, pe.NotInstalledError):
        wanted = re.search(r"pyiceberg\[([\w-]+)\]", str(error))
        extra = _EXTRAS.get(wanted.group(1)) if wanted else None
        fix = f'pip install "icemor[{extra}]"' if extra else str(error).rpartition(": ")[2]
        what = str(error).partition(":")[0]
        msg = f"{which} cannot be used: {what}; install it with {fix}"
        return UnsupportedFeatureError(msg)
    if isinstance(
        error, pe.UnauthorizedError | pe.ForbiddenError | pe.OAuthError | pe.AuthorizationExpiredError
    ):
        status = {
            pe.UnauthorizedError: "401 Unauthorized",
            pe.ForbiddenError: "403 Forbidden",
            pe.AuthorizationExpiredError: "authorization expired",
        }.get(type(error), "OAuth error")
        msg = f"{which} refused the request ({status}: {first_line(error)}); check its credentials"
        return InvalidArgumentError(msg)
    if isinstance(error, pe.RESTError) and not isinstance(error, pe.CommitStateUnknownException):
        msg = f"{which} failed the request: {first_line(error)}"
        return InvalidArgumentError(msg)
    try:
        import requests  # noqa: PLC0415 - cost: requests ~140 ms
    except ImportError:  # pragma: no cover - pyiceberg requires it
        return None
    if isinstance(error, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        request = getattr(error, "request", None)
        url = getattr(request, "url", None)
        where = f" at {redact(url.split('?')[0])}" if url else ""
        reason = _connection_reason(error)
        msg = f"cannot reach {which}{where}: {reason}; check its uri and that the server runs"
        return InvalidArgumentError(msg)
    return None


def _connection_reason(error: BaseException) -> str:
    """``connection refused``, ``timed out``, ``name or service not known``: the cause in a few words."""
    text = str(error)
    if "timed out" in text.lower() or "timeout" in type(error).__name__.lower():
        return "timed out"
    found = re.findall(r"\[Errno -?\d+\] ([^'\")]+)", text)
    return found[-1].strip().lower() if found else "connection failed"


def _is_database_error(error: BaseException) -> bool:
    """Whether ``error`` is a SQL catalog's database refusing to open or to answer (SQLAlchemy's
    ``OperationalError``/``DatabaseError``, a malformed URL's ``ArgumentError``, sqlite3's)."""
    import sqlite3  # noqa: PLC0415 - cost: sqlite3 ~2 ms on import icemor.table

    from sqlalchemy import exc  # noqa: PLC0415 - cost: sqlalchemy ~330 ms

    return isinstance(error, exc.DBAPIError | exc.ArgumentError | sqlite3.Error)


def _catalog_uri(name: str | None) -> str | None:
    """The database URI of catalog ``name`` as configured (the embedded one's for None)."""
    if name is None or (name == DEFAULT_CATALOG_NAME and not _configured(name)):
        return f"sqlite:///{icemor_home() / 'catalog.db'}"
    uri = _configuration(name).get("uri")
    return uri if isinstance(uri, str) else None


def _configuration(name: str) -> dict[str, object]:
    """Catalog ``name``'s configuration (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__*``), as
    pyiceberg reads it; empty when it cannot be read."""
    from pyiceberg.utils.config import Config  # noqa: PLC0415 - cost: pyiceberg.utils.config ~300 ms

    try:
        return dict(Config().get_catalog_config(name) or {})
    except Exception:  # only a message is at stake
        return {}


# Opening the embedded catalog (an SQLAlchemy engine, then table checks) cost ~4 ms of every
# small query, so each process keeps a few open. One is reused only in the process that opened
# it and while its database is the same file: a catalog.db deleted and made again (or a fork)
# gets a new engine, never a connection to a file that is gone.
_EMBEDDED: OrderedDict[tuple[tuple[str, str], ...], tuple[tuple[int, int, int] | None, SqlCatalog]] = (
    OrderedDict()
)
_EMBEDDED_LOCK = threading.Lock()
_EMBEDDED_MAX = 8


def _identity(db: Path) -> tuple[int, int, int] | None:
    """(process, device, inode) of the catalog database, None when it does not exist."""
    try:
        st = db.stat()
    except OSError:
        return None
    return (os.getpid(), st.st_dev, st.st_ino)


def _configured(name: str) -> bool:
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    if any(k.startswith(prefix) for k in os.environ):
        return True
    from pyiceberg.utils.config import Config  # noqa: PLC0415 - cost: pyiceberg.utils.config ~300 ms

    return name in (Config().config.get("catalog") or {})


def list_namespaces(catalog: Catalog) -> list[str]:
    """Every namespace of ``catalog`` (nested ones too), dotted, sorted."""
    out: list[str] = []
    pending: list[tuple[str, ...]] = [()]
    while pending:
        parent = pending.pop()
        for ns in catalog.list_namespaces(parent):
            if tuple(ns) == tuple(parent):
                continue  # some catalogs list the parent itself
            out.append(".".join(ns))
            if len(ns) > len(parent):
                pending.append(tuple(ns))
    return sorted(set(out))


def list_tables(catalog: Catalog, namespace: str | None = None) -> list[str]:
    """The tables of ``namespace`` (every namespace when None) as ``namespace.table``, sorted.

    Raises:
        InvalidArgumentError: The namespace does not exist.
    """
    namespaces = [namespace] if namespace is not None else list_namespaces(catalog)
    out = []
    for ns in namespaces:
        try:
            out += [".".join(t) for t in catalog.list_tables(ns)]
        except pe.NoSuchNamespaceError as e:
            msg = f"namespace {ns!r} does not exist in catalog {catalog.name!r}"
            raise InvalidArgumentError(msg) from e
    return sorted(out)


def metadata_location(catalog: Catalog, identifier: str) -> str | None:
    """The current metadata file of a table as the catalog records it, without reading the file.

    Names the file when it cannot be parsed. Known for SQL catalogs (the embedded one
    included); None for others, whose ``load_table`` offers no way to ask.
    """
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog  # noqa: PLC0415 - cost: pyiceberg.catalog.sql ~1.4 s

    if not isinstance(catalog, SqlCatalog):
        return None
    from sqlalchemy import select  # noqa: PLC0415 - cost: sqlalchemy ~330 ms
    from sqlalchemy.orm import Session  # noqa: PLC0415 - cost: sqlalchemy ~330 ms

    try:
        namespace = catalog.namespace_to_string(catalog.namespace_from(identifier))
        name = catalog.table_name_from(identifier)
        with Session(catalog.engine) as session:
            location = session.scalar(
                select(IcebergTables.metadata_location).where(
                    IcebergTables.catalog_name == catalog.name,
                    IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == name,
                )
            )
    except Exception:  # only a better message is at stake: never mask the original error
        return None
    return location if isinstance(location, str) else None


def table_locations(catalog: Catalog, *, strict: bool) -> dict[str, tuple[str, ...]]:
    """Every table of ``catalog`` (``namespace.table``) with the locations it writes under.

    Its location, and ``write.data.path``/``write.metadata.path`` when set. Each table's
    metadata is loaded, so this costs one metadata read per table.

    Args:
        catalog: The catalog.
        strict: Raise when a table's metadata cannot be read (its location is then unknown); when
            False such a table is left out.

    Raises:
        MissingFileError: ``strict`` and a table's metadata file is missing or unreadable.
        CorruptFileError: ``strict`` and a table's metadata cannot be parsed.
        UnsupportedFeatureError: The catalog cannot list its namespaces or tables.
    """
    identifiers = []
    try:
        for ns in list_namespaces(catalog):
            try:
                identifiers += catalog.list_tables(ns)
            except pe.NoSuchNamespaceError:
                continue  # dropped meanwhile
    except NotImplementedError as e:  # pyiceberg's NoopCatalog (a StaticTable's)
        msg = f"catalog {catalog.name!r} cannot list its tables: {e or type(e).__name__}"
        raise UnsupportedFeatureError(msg) from e
    out: dict[str, tuple[str, ...]] = {}
    for identifier in identifiers:
        name = ".".join(identifier)
        try:
            table = catalog.load_table(identifier)
        except pe.NoSuchTableError:
            continue  # dropped meanwhile
        except Exception as e:
            if not strict:
                continue
            kind = MissingFileError if isinstance(e, OSError) else CorruptFileError
            first = first_line(e)
            msg = (
                f"cannot tell where table {name!r} lies, its metadata cannot be read ({first}); "
                "repair or drop that table first"
            )
            raise kind(msg) from e
        props = table.metadata.properties
        paths = [table.metadata.location, *(props[p] for p in LOCATION_PROPERTIES if props.get(p))]
        out[name] = tuple(dict.fromkeys(p.rstrip("/") for p in paths))
    return out
