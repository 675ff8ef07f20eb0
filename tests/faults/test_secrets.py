"""Secrets are never printed (issue 51, defects 1 and 8).

A catalog configured with credentials (a password in its URI, a token in the URI's query, an
OAuth ``credential``, a ``token``, ``s3.secret-access-key``) is made to fail every way these
tests can reach: a server that is not there, a server that refuses and quotes back what it got
(at load and at first use), a SQL catalog whose database does not open. Everything a user or a
log could see is captured and searched for each secret: the CLI's stdout and stderr (one-line
errors and ``--debug`` tracebacks), exception messages, reprs and formatted tracebacks of the
API, every log record (caplog, DEBUG and up), and the event log of one Spark application.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

PASSWORD = "PW-uri-pass-1"  # the URI's userinfo
QUERY_TOKEN = "TOK-query-1"  # ?token= of the URI
CLIENT_SECRET = "PW-cred-1"  # the secret half of the OAuth credential
TOKEN = "PW-token-1"
S3_SECRET = "PW-s3cr3t-1"
CREDENTIAL = f"client-id:{CLIENT_SECRET}"
SECRETS = (PASSWORD, QUERY_TOKEN, CLIENT_SECRET, TOKEN, S3_SECRET)
# requests sends a URI's userinfo as Basic auth: a server quoting that header shows it encoded
BASIC = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()


def leaks(text: str) -> list[str]:
    """The secrets (or the Basic header made of the URI's password) found in ``text``."""
    return [s for s in (*SECRETS, BASIC) if s in text]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _uri(port: int) -> str:
    return f"http://bob:{PASSWORD}@127.0.0.1:{port}/?token={QUERY_TOKEN}"


def _rest_env(name: str, port: int, *, credential: bool = True) -> dict[str, str]:
    """A REST catalog ``name`` on ``port`` configured with every kind of secret."""
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    env = {
        f"{prefix}TYPE": "rest",
        f"{prefix}URI": _uri(port),
        f"{prefix}TOKEN": TOKEN,
        f"{prefix}S3__SECRET_ACCESS_KEY": S3_SECRET,  # pyiceberg reads s3.secret-access-key
    }
    if credential:
        env[f"{prefix}CREDENTIAL"] = CREDENTIAL
    return env


class EchoServer:
    """A REST catalog that answers its configuration (GET /v1/config) and refuses everything else
    (401), quoting back what it got: the Authorization header, the path with its query, the
    body (an OAuth request's client secret). The worst a real server's error can do."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode(errors="replace") if length else ""
                got = f"Authorization: {self.headers.get('Authorization')} for {self.path} with {body!r}"
                if "/v1/config" in self.path and self.command == "GET":
                    status, answer = 200, {"defaults": {}, "overrides": {}}
                elif "/oauth/tokens" in self.path:
                    status, answer = 401, {"error": "invalid_client", "error_description": f"rejected {got}"}
                else:
                    status = 401
                    answer = {
                        "error": {"message": f"rejected {got}", "type": "NotAuthorizedException", "code": 401}
                    }
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_HEAD = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icemor", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory, echo: EchoServer) -> dict[str, str]:
    """The environment of the CLI runs: catalog ``x`` where nothing listens, ``e`` (OAuth
    credential, refused at load) and ``t`` (token only, refused at first use) on the echo server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    env["ICEMOR_HOME"] = str(tmp_path_factory.mktemp("secrets-home"))
    env.update(_rest_env("x", _free_port()))
    env.update(_rest_env("e", echo.port))
    env.update(_rest_env("t", echo.port, credential=False))
    return env


# Every command that reaches a catalog fails; each is run plain (one error line, exit 2) and some
# with --debug (a traceback, exit 1), for the three ways a REST catalog fails.
_COMMANDS = [
    ("tables",),
    ("namespaces",),
    ("count", "ns.t"),
    ("scan", "ns.t"),
    ("describe", "ns.t"),
    ("check", "ns.t"),
    ("snapshots", "ns.t"),
]
_CASES = [
    *((catalog, False, c) for catalog in ("x",) for c in _COMMANDS),
    *((catalog, False, c) for catalog in ("e", "t") for c in (("tables",), ("count", "ns.t"))),
    *((catalog, True, c) for catalog in ("x", "e", "t") for c in (("tables",), ("scan", "ns.t"))),
]


@pytest.mark.parametrize(
    ("catalog", "debug", "command"),
    _CASES,
    ids=[f"{c}-{'debug-' if d else ''}{'-'.join(cmd)}" for c, d, cmd in _CASES],
)
def test_cli_prints_no_secret(
    cli_env: dict[str, str], catalog: str, debug: bool, command: tuple[str, ...]
) -> None:
    p = _cli(cli_env, *(["--debug"] if debug else []), "--catalog", catalog, *command)
    output = p.stdout + p.stderr
    assert leaks(output) == [], output
    lines = p.stderr.strip().splitlines()
    if debug:
        # the traceback is printed, redacted (not lost): a masked secret is in it
        assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr, output
        assert "***" in lines[-1], output
    else:
        assert (p.returncode, len(lines)) == (2, 1), output
        assert lines[0].startswith("icemor: error: ") and "Traceback" not in output, output
    # the error still says which catalog and where: the URI's host with its userinfo masked
    if catalog == "x":
        assert "cannot reach catalog 'x' at http://***@127.0.0.1:" in output, output
    elif not debug:
        assert f"catalog {catalog!r} refused the request" in output, output


def test_cli_warnings_show_no_secret(cli_env: dict[str, str]) -> None:
    """Warnings shown (``-W default``): pyiceberg's deprecation notice quotes the whole URI."""
    p = _cli({**cli_env, "PYTHONWARNINGS": "default"}, "--catalog", "x", "tables")
    assert leaks(p.stdout + p.stderr) == [], p.stderr
    assert "DeprecationWarning" in p.stderr and "http://***@127.0.0.1:" in p.stderr, p.stderr


# ------------------------------------------------------------------------------------------- the API


def _everything_about(e: BaseException) -> str:
    """All an application could print of ``e``: str, repr, the formatted traceback (causes too)."""
    return "\n".join([str(e), repr(e), "".join(traceback.format_exception(e))])


# pyiceberg's own deprecation notice for a REST catalog with a credential and no
# oauth2-server-uri quotes the whole URI (a DeprecationWarning: hidden by Python's default
# filters outside __main__; the CLI shows it redacted, test_cli_warnings_show_no_secret). The
# API leaves Python's warnings to the application: pytest would show it in its summary.
_PYICEBERG_NOTICE = "ignore:Deprecated in 0.8.0:DeprecationWarning"


@pytest.fixture
def pyiceberg_env(monkeypatch: pytest.MonkeyPatch, echo: EchoServer, tmp_path: Path) -> None:
    """Catalogs ``x``, ``e`` and ``t`` (as for the CLI) in this process's environment: pyiceberg
    reads it once, at import, so its configuration is read again."""
    from pyiceberg.utils.config import Config

    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "home"))
    for key, value in {
        **_rest_env("x", _free_port()),
        **_rest_env("e", echo.port),
        **_rest_env("t", echo.port, credential=False),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("pyiceberg.catalog._ENV_CONFIG", Config())


@pytest.mark.filterwarnings(_PYICEBERG_NOTICE)
@pytest.mark.parametrize("catalog", ["x", "e"])
def test_load_table_error_shows_no_secret(
    pyiceberg_env: None, catalog: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    import icemor
    from icemor.exceptions import InvalidArgumentError

    caplog.set_level("DEBUG")
    with pytest.raises(InvalidArgumentError) as raised:
        icemor.load_table("ns.t", catalog=catalog)
    seen = _everything_about(raised.value) + caplog.text + "".join(capsys.readouterr())
    assert leaks(seen) == [], seen
    assert (
        "cannot reach catalog 'x' at http://***@127.0.0.1:" if catalog == "x" else "refused the request"
    ) in str(raised.value)


@pytest.mark.filterwarnings(_PYICEBERG_NOTICE)
def test_load_catalog_with_secret_properties_shows_none(
    caplog: pytest.LogCaptureFixture, echo: EchoServer
) -> None:
    """Properties given in code (not in the environment) are kept out of the messages too."""
    from icemor.catalog import load_catalog
    from icemor.exceptions import InvalidArgumentError

    caplog.set_level("DEBUG")
    props = {
        "uri": _uri(_free_port()),
        "credential": CREDENTIAL,
        "token": TOKEN,
        "s3.secret-access-key": S3_SECRET,
    }
    with pytest.raises(InvalidArgumentError) as unreachable:
        load_catalog("secretive", type="rest", **props)
    with pytest.raises(InvalidArgumentError) as refused:
        load_catalog("secretive", type="rest", **{**props, "uri": _uri(echo.port)})
    # a catalog type pyiceberg cannot infer: its error quotes every property given
    with pytest.raises(InvalidArgumentError) as unknown:
        load_catalog("secretive", **{**props, "uri": f"ftp://bob:{PASSWORD}@127.0.0.1/"})
    seen = "\n".join(_everything_about(r.value) for r in (unreachable, refused, unknown)) + caplog.text
    assert leaks(seen) == [], seen
    assert "cannot reach catalog 'secretive' at http://***@127.0.0.1:" in str(unreachable.value)
    assert "catalog 'secretive' refused the request (OAuth error" in str(refused.value)
    assert str(unknown.value).startswith("cannot load catalog 'secretive': ")


def test_redact() -> None:
    """Each form a secret takes in a text, and what is kept around it."""
    from icemor.exceptions import redact, redact_properties

    assert redact(f"at {_uri(5)}/v1/config") == "at http://***@127.0.0.1:5/?token=***"
    assert redact("s3://b/k?X-Amz-Signature=abc&X-Amz-Credential=AK%2F&part=1&sig=zz") == (
        "s3://b/k?X-Amz-Signature=***&X-Amz-Credential=***&part=1&sig=***"
    )
    assert redact("{'token': 'abc', 'uri': 'u'} Foo(password='p', name='n') {\"credential\": \"c\"}") == (
        "{'token': '***', 'uri': 'u'} Foo(password='***', name='n') {\"credential\": \"***\"}"
    )
    assert redact("Authorization: Bearer abc.def-1 sent") == "Authorization: Bearer *** sent"
    # nothing else: paths, plain URIs, row filters on columns named like secrets
    kept = "sqlite:////nonexistent-dir/x.db file:///tmp/a@b key = 5 and token_count=3 s3://b/k?part=1"
    assert redact(kept) == kept
    assert redact_properties({"s3.secret-access-key": "x", "adls.account-key": "y", "warehouse": "w"}) == {
        "s3.secret-access-key": "***",
        "adls.account-key": "***",
        "warehouse": "w",
    }
    # a column-scoped table property is about a column, whatever its name
    assert redact_properties({"write.metadata.metrics.column.token": "full"}) == {
        "write.metadata.metrics.column.token": "full"
    }


def test_cli_log_records_are_redacted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warning logged while the CLI runs (icemor's notes, another library's warnings through
    logging's last resort) is printed redacted."""
    import logging

    from icemor.cli import runner

    def warn(_: object) -> int:
        logging.getLogger("icemor").warning("reaching %s", _uri(9))
        logging.getLogger("some.library").warning("with token=%s, {'token': '%s'}", TOKEN, TOKEN)
        return 0

    monkeypatch.setattr(runner, "_run", warn)
    monkeypatch.setattr(logging.getLogger("some.library"), "propagate", False)  # as if unconfigured
    assert runner.run([]) == 0
    err = capsys.readouterr().err
    assert leaks(err) == [], err
    assert "icemor: note: reaching http://***@127.0.0.1:9/?token=***" in err
    assert "{'token': '***'}" in err


# ------------------------------------------------------------------------------------------- defect 8

# (catalog, what is at its database's path): the embedded catalog makes its home, so a missing
# directory is a named catalog's case only
_UNOPENABLE = [
    ("named", "missing-dir"),
    ("named", "directory"),
    ("named", "not-sqlite"),
    ("embedded", "directory"),
    ("embedded", "not-sqlite"),
]


@pytest.mark.parametrize(("catalog", "kind"), _UNOPENABLE, ids=[f"{c}-{k}" for c, k in _UNOPENABLE])
def test_sql_catalog_that_does_not_open_is_one_line(tmp_path: Path, catalog: str, kind: str) -> None:
    """A SQL catalog whose SQLite database cannot be opened: one line naming the catalog and the
    database, exit 2 (not SQLAlchemy's traceback and exit 1)."""
    home = tmp_path / "home"
    named = catalog == "named"
    db = tmp_path / "y.db" if named else home / "catalog.db"
    if kind == "missing-dir":
        db = tmp_path / "nonexistent-dir" / "x.db"
    elif kind == "directory":
        db.mkdir(parents=True)
    else:
        db.parent.mkdir(parents=True, exist_ok=True)
        db.write_text("this is not a SQLite database, " * 20)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    env["ICEMOR_HOME"] = str(home)
    if named:
        env["PYICEBERG_CATALOG__Y__URI"] = f"sqlite:///{db}"
    which = "catalog 'y'" if named else "the embedded catalog"
    reason = "file is not a database" if kind == "not-sqlite" else "unable to open database file"
    for command in (["tables"], ["count", "ns.t"]):
        p = _cli(env, *(["--catalog", "y"] if named else []), *command)
        lines = p.stderr.strip().splitlines()
        assert (p.returncode, len(lines)) == (2, 1), p.stderr
        assert lines[0] == f"icemor: error: cannot open {which}: sqlite:///{db}: {reason}", p.stderr
        assert "Traceback" not in p.stderr and "sqlalchemy" not in p.stderr.lower()


# ------------------------------------------------------------------------------------------- Spark

_SPARK_JOB = r"""
import json, sys, traceback
from pathlib import Path

import pyarrow as pa

import icemor
import icemor.spark

events = Path(sys.argv[1])
spark = icemor.spark.session(
    master="local[1]",
    conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(), "spark.ui.enabled": "false"},
)
out = {}
try:
    icemor.spark.read(spark, "ns.t", catalog="x").collect()
except Exception as e:
    out["error"] = "\n".join([str(e), repr(e), "".join(traceback.format_exception(e))])
# a job that runs: the table's FileIO (with the catalog's secrets) travels to the executors
icemor.create_table("ns.t", pa.table({"id": [1, 2, 3]}), catalog="s")
out["rows"] = len(icemor.spark.read(spark, "ns.t", catalog="s").collect())
spark.stop()
print(json.dumps(out))
"""


def _decoded_blobs(text: str) -> str:
    """Long base64 runs of ``text`` decoded (pickled options travel so): a secret inside shows."""
    out = []
    for run in re.findall(r"[A-Za-z0-9+/]{64,}={0,2}", text):
        with contextlib.suppress(ValueError):
            out.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode("latin-1"))
    return "\n".join(out)


@pytest.mark.oracle
def test_spark_job_and_its_event_log_show_no_secret(tmp_path: Path) -> None:
    """One Spark application: the read of the unreachable catalog fails with a clean error, a read
    of a SQL catalog carrying the secrets runs; neither its output nor its event log shows one."""
    from oracle import load_oracle_env

    events = tmp_path / "events"
    events.mkdir()
    (tmp_path / "s").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    env.update(_rest_env("x", _free_port()))
    env.update(
        {
            "ICEMOR_HOME": str(tmp_path / "home"),
            "JAVA_HOME": load_oracle_env()["java_home"],
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYICEBERG_CATALOG__S__TYPE": "sql",
            "PYICEBERG_CATALOG__S__URI": f"sqlite:///{tmp_path / 's' / 'cat.db'}",
            "PYICEBERG_CATALOG__S__WAREHOUSE": (tmp_path / "s" / "wh").as_uri(),
            "PYICEBERG_CATALOG__S__TOKEN": TOKEN,
            "PYICEBERG_CATALOG__S__CREDENTIAL": CREDENTIAL,
            "PYICEBERG_CATALOG__S__S3__SECRET_ACCESS_KEY": S3_SECRET,
        }
    )
    env.pop("SPARK_LOCAL_IP", None)
    p = subprocess.run(
        [sys.executable, "-c", _SPARK_JOB, str(events)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["rows"] == 3
    assert "cannot reach catalog 'x' at http://***@127.0.0.1:" in out["error"], out["error"]
    logs = [f.read_text(errors="replace") for f in events.rglob("*") if f.is_file()]
    assert logs and any("SparkListenerJobEnd" in log for log in logs), [f.name for f in events.rglob("*")]
    seen = p.stdout + p.stderr + "\n".join(logs)
    assert leaks(seen) == [], [line for line in seen.splitlines() if leaks(line)][:5]
    assert leaks(_decoded_blobs(seen)) == []
