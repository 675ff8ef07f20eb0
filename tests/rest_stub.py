"""A small Iceberg REST catalog on 127.0.0.1 for tests, told how to answer the next commits.

It speaks enough of the REST protocol (``open-api/rest-catalog-open-api.yaml`` of apache/iceberg)
for pyiceberg's ``RestCatalog``: config, namespaces, table create (staged too, unless told to
refuse staging as servers without ``stage-create`` do), load, exists, drop, and commits. It keeps
its tables in a pyiceberg ``SqlCatalog`` (the server side writes every metadata JSON, as a real
REST server does; the client writes data files and manifests into the same warehouse).

``answer_next_commit`` queues what the next commit requests get instead of a plain answer: an
HTTP status (with the spec's error body), after committing or without; an answer that arrives
too late (the client's read timeout fires); or a dropped connection.

The real REST server comes later (another issue); this one is enough to test how icemor reads the
spec's commit responses.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from pyiceberg.catalog.rest import CreateTableRequest, RestCatalog, TableResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableRequest

if TYPE_CHECKING:
    from collections.abc import Iterator

# the error type the spec names for each status (ErrorModel.type)
ERROR_TYPES = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NoSuchTableException",
    405: "UnsupportedOperationException",
    406: "UnsupportedOperationException",
    409: "CommitFailedException",
    419: "AuthorizationExpiredException",
    500: "ServerError",
    501: "NotImplementedException",
    502: "BadGateway",
    503: "ServiceUnavailableException",
    504: "GatewayTimeout",
}


@dataclass
class Fault:
    """How to answer one commit request."""

    status: int | None = None
    """The HTTP status to answer with (an error body); None: answer late or not at all."""
    commit_first: bool = False
    """Commit the request first (then fail): an attempt that landed although it failed."""
    late: float = 0.0
    """Seconds to wait before answering (past the client's read timeout: a timeout)."""
    drop: bool = False
    """Close the connection without an answer."""


class _Named:
    """What ``SqlCatalog.commit_table`` needs of a table: its name."""

    def __init__(self, identifier: tuple[str, ...]) -> None:
        self.identifier = identifier

    def name(self) -> tuple[str, ...]:
        return self.identifier


class RestStub:
    """The server; ``uri`` to connect, ``catalog()`` a pyiceberg ``RestCatalog`` on it."""

    def __init__(self, root: Path, *, staging: bool = True, staging_refusal: int = 400) -> None:
        (root / "warehouse").mkdir(parents=True, exist_ok=True)
        self.backing = SqlCatalog(
            "stub", uri=f"sqlite:///{root / 'stub.db'}", warehouse=(root / "warehouse").as_uri()
        )
        self.staging = staging
        self.staging_refusal = staging_refusal
        self.faults: list[Fault] = []
        self.commits: list[str] = []
        """Each commit request's answer: ``"200"``, ``"403"``, ``"500 after commit"``, ``"late"``, ..."""
        self.staged_creates = 0
        self.refused_stagings = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def uri(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def catalog(self, *, read_timeout: float | None = None) -> RestCatalog:
        """A pyiceberg REST catalog on this server; ``read_timeout`` bounds each request (pyiceberg
        sets none, so the test sets it on its HTTP session)."""
        catalog = RestCatalog("rest", uri=self.uri)
        if read_timeout is not None:
            session = catalog._session
            send = session.request

            def request(*args: Any, **kwargs: Any) -> Any:
                kwargs.setdefault("timeout", read_timeout)
                return send(*args, **kwargs)

            session.request = request  # type: ignore[method-assign]
        return catalog

    def answer_next_commit(self, fault: Fault, times: int = 1) -> None:
        with self._lock:
            self.faults.extend([fault] * times)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.backing.engine.dispose()


def _error(status: int, message: str, kind: str | None = None) -> tuple[int, dict[str, Any]]:
    return status, {
        "error": {
            "message": message,
            "type": kind or ERROR_TYPES.get(status, "RESTException"),
            "code": status,
        }
    }


def _table_json(metadata_location: str | None, metadata: Any) -> dict[str, Any]:
    response = TableResponse(metadata_location=metadata_location, metadata=metadata, config={})
    out: dict[str, Any] = json.loads(response.model_dump_json())
    return out


def _handler(stub: RestStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data and self.command != "HEAD":
                    self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                return

        def _route(self) -> tuple[list[str], dict[str, list[str]]]:
            url = urlsplit(self.path)
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            return parts[1:] if parts and parts[0] == "v1" else parts, parse_qs(url.query)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_HEAD(self) -> None:
            self._answer("HEAD")

        def do_POST(self) -> None:
            self._answer("POST")

        def do_DELETE(self) -> None:
            self._answer("DELETE")

        def _answer(self, method: str) -> None:
            parts, query = self._route()
            body = self._body() if method == "POST" else b""
            if method == "POST" and len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "tables":
                self._commit(tuple(parts[1].split("\x1f")), parts[3], body)
                return
            with stub._lock:
                try:
                    status, out = _dispatch(stub, method, parts, query, body)
                except Exception as e:  # a stub bug: say so in the answer
                    status, out = _error(500, f"stub: {type(e).__name__}: {e}")
            self._send(status, out)

        def _commit(self, namespace: tuple[str, ...], name: str, body: bytes) -> None:
            with stub._lock:
                fault = stub.faults.pop(0) if stub.faults else None
                if fault is None or fault.commit_first:
                    status, out = _commit(stub, (*namespace, name), body)
                    if fault is None:
                        stub.commits.append(str(status))
                        self._send(status, out)
                        return
                label = "dropped" if fault.drop else "late" if fault.status is None else str(fault.status)
                stub.commits.append(f"{label} after commit" if fault.commit_first else label)
            if fault.drop:
                self.close_connection = True
                return
            if fault.late:
                time.sleep(fault.late)
            if fault.status is None:
                self.close_connection = True  # answered nothing in time: the client timed out
                return
            status, out = _error(fault.status, f"told to answer {fault.status}")
            self._send(status, out)

    return Handler


def _commit(stub: RestStub, identifier: tuple[str, ...], body: bytes) -> tuple[int, dict[str, Any] | None]:
    request = CommitTableRequest.model_validate_json(body)
    try:
        response = stub.backing.commit_table(
            _Named(identifier),  # type: ignore[arg-type]
            request.requirements,
            request.updates,
        )
    except CommitFailedException as e:
        return _error(409, str(e))
    except TableAlreadyExistsError as e:
        return _error(409, str(e), "AlreadyExistsException")
    except NoSuchTableError as e:
        return _error(404, str(e))
    except ValueError as e:
        return _error(400, str(e))
    out: dict[str, Any] = json.loads(response.model_dump_json())
    return 200, out


def _namespaces(stub: RestStub, parent: tuple[str, ...]) -> Iterator[list[str]]:
    for ns in stub.backing.list_namespaces(parent):
        yield list(ns)


def _dispatch(
    stub: RestStub, method: str, parts: list[str], query: dict[str, list[str]], body: bytes
) -> tuple[int, dict[str, Any] | None]:
    backing = stub.backing
    if parts == ["config"]:
        return 200, {"defaults": {}, "overrides": {}}
    if parts == ["namespaces"] and method == "GET":
        parent = tuple(query["parent"][0].split("\x1f")) if "parent" in query else ()
        return 200, {"namespaces": list(_namespaces(stub, parent))}
    if parts == ["namespaces"] and method == "POST":
        request = json.loads(body)
        try:
            backing.create_namespace(tuple(request["namespace"]), request.get("properties") or {})
        except NamespaceAlreadyExistsError as e:
            return _error(409, str(e), "AlreadyExistsException")
        return 200, {"namespace": request["namespace"], "properties": request.get("properties") or {}}
    if len(parts) < 2 or parts[0] != "namespaces":
        return _error(400, f"not served: {method} /{'/'.join(parts)}")
    namespace = tuple(parts[1].split("\x1f"))
    if len(parts) == 2:
        try:
            if method == "DELETE":
                backing.drop_namespace(namespace)
                return 204, None
            properties = backing.load_namespace_properties(namespace)
        except NoSuchNamespaceError as e:
            return _error(404, str(e), "NoSuchNamespaceException")
        except NamespaceNotEmptyError as e:
            return _error(409, str(e), "NamespaceNotEmptyException")
        return (
            (204, None)
            if method == "HEAD"
            else (200, {"namespace": list(namespace), "properties": properties})
        )
    if parts[2] != "tables":
        return _error(400, f"not served: {method} /{'/'.join(parts)}")
    if len(parts) == 3:
        if method == "GET":
            try:
                tables = backing.list_tables(namespace)
            except NoSuchNamespaceError as e:
                return _error(404, str(e), "NoSuchNamespaceException")
            return 200, {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in tables]}
        return _create(stub, namespace, body)
    identifier = (*namespace, parts[3])
    try:
        if method == "DELETE":
            if [v.lower() for v in query.get("purgeRequested", [])] == ["true"]:
                backing.purge_table(identifier)
            else:
                backing.drop_table(identifier)
            return 204, None
        table = backing.load_table(identifier)
    except NoSuchTableError as e:
        return _error(404, str(e))
    return (204, None) if method == "HEAD" else (200, _table_json(table.metadata_location, table.metadata))


def _create(stub: RestStub, namespace: tuple[str, ...], body: bytes) -> tuple[int, dict[str, Any] | None]:
    data = json.loads(body)
    for optional in ("location", "partition-spec", "write-order"):  # left out when None
        data.setdefault(optional, None)
    request = CreateTableRequest.model_validate(data)
    identifier = (*namespace, request.name)
    args: dict[str, Any] = {"schema": request.table_schema, "location": request.location}
    args["properties"] = request.properties
    if request.partition_spec is not None:
        args["partition_spec"] = request.partition_spec
    if request.write_order is not None:
        args["sort_order"] = request.write_order
    try:
        if request.stage_create:
            if not stub.staging:
                stub.refused_stagings += 1
                return _error(stub.staging_refusal, "Staged table creation is not implemented")
            stub.staged_creates += 1
            transaction = stub.backing.create_table_transaction(identifier, **args)
            return 200, _table_json(None, transaction.table_metadata)
        table = stub.backing.create_table(identifier, **args)
    except TableAlreadyExistsError as e:
        return _error(409, str(e), "AlreadyExistsException")
    except NoSuchNamespaceError as e:
        return _error(404, str(e), "NoSuchNamespaceException")
    return 200, _table_json(table.metadata_location, table.metadata)
