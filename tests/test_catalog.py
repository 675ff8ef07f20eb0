"""The embedded catalog: opened once per process, never reused across a replaced database."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from icemor.catalog import load_catalog

if TYPE_CHECKING:
    from pathlib import Path


def test_embedded_catalog_is_reused_while_its_database_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ICEMOR_HOME", str(home))
    first = load_catalog()
    assert load_catalog() is first
    first.create_namespace("ns")
    first.create_table("ns.t", pa.schema([pa.field("x", pa.int64())]))
    assert load_catalog().list_tables("ns") == [("ns", "t")]

    # the database replaced by a new one at the same path: a new engine, which sees the new file
    first.engine.dispose()
    (home / "catalog.db").unlink()
    again = load_catalog()
    assert again is not first
    assert again.list_namespaces() == []


def test_other_homes_and_properties_get_their_own_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "a"))
    a = load_catalog()
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "b"))
    b = load_catalog()
    assert a is not b
    assert load_catalog(echo="false") is not b
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "a"))
    assert load_catalog() is a


# ---------------------------------------------------------------------- a catalog that cannot serve
# each of these was once a traceback and exit code 1; now one line on stderr and exit 2.


def _cli_errors(
    env: dict[str, str], argv: list[str], *, hidden: tuple[str, ...] = ()
) -> tuple[int, list[str]]:
    """Run the CLI in a process of its own (pyiceberg reads its environment once per process);
    ``hidden`` modules cannot be imported there, as when their extra is not installed."""
    code = (
        f"import sys\nfor m in {list(hidden)!r}: sys.modules[m] = None\nfrom icemor.cli import main\nmain()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, [line for line in proc.stderr.splitlines() if line.strip()]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_rest_catalog_is_one_line_and_exit_2(tmp_path: Path) -> None:
    port = _closed_port()
    env = {"PYICEBERG_CATALOG__PROD__URI": f"http://127.0.0.1:{port}", "ICEMOR_HOME": str(tmp_path)}
    code, err = _cli_errors(env, ["--catalog", "prod", "tables"])
    assert code == 2
    assert len(err) == 1
    assert err[0].startswith("icemor: error: cannot reach catalog 'prod'")
    assert f"127.0.0.1:{port}" in err[0] and "refused" in err[0]


@pytest.mark.parametrize(("status", "words"), [(401, "401 Unauthorized"), (403, "403 Forbidden")])
def test_a_rest_catalog_refusing_the_credentials_is_one_line_and_exit_2(
    status: int, words: str, tmp_path: Path
) -> None:
    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(
                {
                    "error": {
                        "message": "credentials refused",
                        "type": "NotAuthorizedException",
                        "code": status,
                    }
                }
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            "PYICEBERG_CATALOG__PROD__URI": f"http://127.0.0.1:{server.server_port}",
            "PYICEBERG_CATALOG__PROD__TOKEN": "wrong",
            "ICEMOR_HOME": str(tmp_path),
        }
        code, err = _cli_errors(env, ["--catalog", "prod", "namespaces"])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2
    assert len(err) == 1
    assert err[0].startswith("icemor: error: catalog 'prod' refused the request")
    assert words in err[0] and "credentials refused" in err[0]


@pytest.mark.parametrize(
    ("kind", "modules", "extra"), [("glue", ["boto3"], "glue"), ("hive", ["thrift"], "hive")]
)
def test_a_catalog_type_without_its_extra_says_which_to_install(
    kind: str, modules: list[str], extra: str, tmp_path: Path
) -> None:
    # the driver is not installed: importing it fails (None in sys.modules), as without the extra
    env = {
        "PYICEBERG_CATALOG__PROD__TYPE": kind,
        "PYICEBERG_CATALOG__PROD__URI": f"thrift://127.0.0.1:{_closed_port()}",
        "ICEMOR_HOME": str(tmp_path),
    }
    code, err = _cli_errors(env, ["--catalog", "prod", "tables"], hidden=tuple(modules))
    assert code == 2
    assert len(err) == 1
    assert err[0].startswith("icemor: error: catalog 'prod' cannot be used")
    assert f'pip install "icemor[{extra}]"' in err[0]


def test_the_extras_name_what_each_catalog_needs() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"rest", "glue", "hive", "s3"} <= set(extras)
    assert any(r.startswith("pyiceberg[glue]") for r in extras["glue"])
    assert any(r.startswith("pyiceberg[hive]") for r in extras["hive"])
