"""A Spark Connect server of its own for a test or a benchmark: PySpark 4.x's pip package ships it.

``builder.remote("local")`` would start the server inside the client's process and always on
port 15002, which another run on the machine may hold. Here the server is a separate process
(``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``) on a free
port, with a temp directory of its own: the client shares nothing with it but the table
storage (and the catalog). Its Python workers run this interpreter (with this environment's
``PYTHONPATH``), as a server's workers must have icemor.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def connect_server(
    work: Path,
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> Iterator[str]:
    """Run a Connect server until the block ends; yields its URL (``sc://127.0.0.1:PORT``).

    Its log is ``work/connect-server.log``; its temp directory ``work/server-tmp``.
    """
    import pyspark

    port = _free_port()
    tmp = work / "server-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp}",
        "spark.local.dir": str(tmp),
        **(conf or {}),
    }
    args = [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        "--master",
        master,
        "--class",
        SERVER_CLASS,
    ]
    for key, value in settings.items():
        args += ["--conf", f"{key}={value}"]
    args.append("spark-internal")
    env = {**os.environ, "TMPDIR": str(tmp), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_REMOTE", None)
    with (work / "connect-server.log").open("w") as log:
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if server.poll() is not None:
                    msg = (
                        f"the Connect server exited ({server.returncode}): see {work / 'connect-server.log'}"
                    )
                    raise RuntimeError(msg)
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if time.monotonic() > deadline:
                    msg = f"the Connect server did not listen on {port} in {timeout:.0f} s"
                    raise RuntimeError(msg)
                time.sleep(0.5)
            yield f"sc://127.0.0.1:{port}"
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
