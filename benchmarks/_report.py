"""What a benchmark measured, kept as data: ``benchmarks/results/<bench>.json`` (docs/benchmarks.md).

Each ``bench_*.py`` that ``make bench`` runs makes one :class:`Report` when its run starts (the
date, the exact command and the load average are taken then), adds a row per figure it prints
(:meth:`Report.add`) and writes the file when the run ends (:meth:`Report.write`, which takes the
machine, the end's load average and the duration). ``tools/render_benchmarks.py`` turns the files
into docs/benchmarks.md's tables; nothing else writes figures there.

Only the standard library: the module also runs in ``.venv-spark4`` (``bench_datasource.py``).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
ORACLE_ENV = REPO_ROOT / ".cache" / "oracle" / "oracle.env.json"
SCHEMA = 1  # bump when the file's shape changes (tools/render_benchmarks.py reads it)
VERSIONS = ("pyarrow", "pyiceberg", "pyspark", "icemor")  # the distributions whose versions are kept


@dataclass
class Row:
    """One figure: ``value`` in ``unit``; a ratio to ``versus``; a target and whether it was met."""

    name: str
    value: float | int | str | None
    unit: str = "s"
    ratio: float | None = None
    versus: str | None = None
    target: str | None = None
    status: str | None = None  # "pass", "fail" or None (no target)
    note: str | None = None


def _tidy(value: Any) -> Any:
    """Floats to 6 significant digits: a figure's noise is far above that, and diffs stay short."""
    return float(f"{value:.6g}") if isinstance(value, float) else value


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _relative(path: str) -> str:
    """``path`` relative to the repository when it is inside it (how `make bench` names it)."""
    try:
        return str(Path(path).absolute().relative_to(REPO_ROOT))
    except ValueError:
        return path


def command() -> str:
    """The command line of this process, as run from the repository's root."""
    return shlex.join([_relative(sys.executable), _relative(sys.argv[0]), *sys.argv[1:]])


def _proc(name: str, prefix: str) -> str | None:
    path = Path("/proc") / name
    lines = path.read_text().splitlines() if path.exists() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(prefix)), None)


def _run(args: list[str], *, stderr: bool = False) -> str | None:
    try:
        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stderr if stderr else done.stdout).strip()


def _os_name() -> str:
    release = Path("/etc/os-release")
    lines = release.read_text().splitlines() if release.exists() else []
    pretty = next((ln.split("=", 1)[1].strip('"') for ln in lines if ln.startswith("PRETTY_NAME=")), None)
    kernel = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{pretty} ({kernel})" if pretty else kernel


def _java() -> dict[str, str | None]:
    """The Java the benchmarks' JVMs use: $JAVA_HOME (the oracle sets it), else the oracle's, else PATH's."""
    home = os.environ.get("JAVA_HOME")
    if not home and ORACLE_ENV.exists():
        home = json.loads(ORACLE_ENV.read_text()).get("java_home")
    binary = str(Path(home) / "bin" / "java") if home else "java"
    banner = _run([binary, "-version"], stderr=True)  # `java -version` writes to stderr
    first = banner.splitlines()[0] if banner else None
    version = first.split('"')[1] if first and first.count('"') >= 2 else first
    return {"java": version, "java_home": home}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> dict[str, Any]:
    """HEAD's commit and whether tracked files differ from it."""
    head = _run(["git", "rev-parse", "HEAD"])
    changed = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {"commit": head, "dirty": None if changed is None else bool(changed)}


def machine() -> dict[str, Any]:
    """The machine and the software a figure was measured with."""
    mem_kb = _proc("meminfo", "MemTotal:")
    return {
        "cpu": _proc("cpuinfo", "model name") or platform.processor() or None,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(int(mem_kb.split()[0]) / 2**20, 1) if mem_kb else None,
        "os": _os_name(),
        "python": platform.python_version(),
        **{dist: _version(dist) for dist in VERSIONS},
        **_java(),
        "git": git_commit(),
    }


@dataclass
class Report:
    """The rows of one run of ``bench``; made when the run starts, written when it ends."""

    bench: str
    command: str = field(default_factory=command)
    started: float = field(default_factory=time.time)
    load_start: tuple[float, ...] = field(default_factory=os.getloadavg)
    context: dict[str, Any] = field(default_factory=dict)  # what else the run names (Spark, sizes)
    rows: list[Row] = field(default_factory=list)

    @classmethod
    def of(cls, script: str) -> Report:
        """The report of the benchmark ``script`` (its ``__file__``)."""
        return cls(Path(script).stem)

    def add(
        self,
        name: str,
        value: float | int | str | None,
        unit: str = "s",
        *,
        ratio: float | None = None,
        versus: str | None = None,
        target: str | None = None,
        passed: bool | None = None,
        note: str | None = None,
    ) -> None:
        """One figure; ``passed`` is None where the row has no target."""
        status = None if passed is None else ("pass" if passed else "fail")
        self.rows.append(Row(name, value, unit, ratio, versus, target, status, note))

    def against(
        self,
        name: str,
        value: float,
        reference: float,
        versus: str,
        *,
        limit: float | None = None,
        note: str | None = None,
    ) -> None:
        """A time with its ratio to ``reference`` (``versus`` names it); the target: at most ``limit``×."""
        self.add(
            name,
            value,
            ratio=value / reference if reference else None,
            versus=versus,
            target=None if limit is None else f"≤ {limit}× {versus}",
            passed=None if limit is None else value <= limit * reference,
            note=note,
        )

    def to_json(self) -> dict[str, Any]:
        ended = time.time()
        return {
            "schema": SCHEMA,
            "benchmark": self.bench,
            "command": self.command,
            "started": _utc(self.started),
            "seconds": round(ended - self.started, 1),
            "load_average": {
                "start": [round(x, 2) for x in self.load_start],
                "end": [round(x, 2) for x in os.getloadavg()],
            },
            "machine": machine(),
            "context": self.context,
            "rows": [{k: _tidy(v) for k, v in asdict(r).items()} for r in self.rows],
        }

    def write(self, results: Path = RESULTS_DIR) -> Path:
        """``results/<bench>.json``, replacing the last run's (git keeps the earlier ones)."""
        results.mkdir(parents=True, exist_ok=True)
        path = results / f"{self.bench}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")
        tmp.replace(path)  # a run cut short mid-write leaves the previous file whole
        print(f"Wrote {_relative(str(path))}", flush=True)
        return path
