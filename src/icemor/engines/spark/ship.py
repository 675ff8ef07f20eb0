"""Ship icemor to executors that do not have it: the driver's packages as one archive.

On a cluster, Spark's Python workers run the executors' own interpreter, which usually has
neither icemor nor most of what it imports. Much of that is compiled (pyarrow, numpy, pandas,
pyroaring, pyiceberg, pydantic-core, mmh3, zstandard), and Python loads extension modules only
from files, never from a zip on the path: ``addPyFile`` / ``addArtifacts(pyfile=True)`` could
ship icemor's own code but not what it needs. So :func:`ship` packs icemor and every
distribution it requires, exactly as the driver has them, into one zip; Spark copies it to each
executor and unpacks it in the executor's working directory (``SparkContext.addArchive``), and
the Python workers get that directory first on their path (``PYTHONPATH`` in the context's
worker environment, which PySpark reads whenever it sends a function). The executors need only
a Python of the driver's version and platform (PySpark itself refuses workers of another minor
version); for executors without one, a packed environment with its own interpreter is set at
session start instead (docs/spark.md, "Running on a cluster").

:func:`build_archive` makes the zip (cached: it is rebuilt when a version or icemor's code
changes), for ``spark-submit --archives`` and Spark Connect servers too; :func:`check_executors`
asks the executors to import icemor and turns a failure into one line.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import platform
import re
import sys
import sysconfig
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from icemor.engines.spark.session_kind import is_connect, parallelism
from icemor.exceptions import UnsupportedFeatureError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyspark.sql import SparkSession

__all__ = [
    "ENV_PREFIX",
    "EXECUTOR_MODULES",
    "EnvironmentArchive",
    "build_archive",
    "check_executors",
    "default_cache_dir",
    "ship",
]

ENV_PREFIX = "icemor-env-"
"""Archives are named ``icemor-env-<key>.zip`` and unpacked on executors as ``./icemor-env-<key>``."""

EXECUTOR_MODULES = (
    "icemor.engines.spark.worker",
    "icemor.engines.spark.write",
    "icemor.engines.spark.table_writes",
    "icemor.io.reader",
)
"""What :func:`check_executors` imports on the executors: the modules of the functions icemor
sends there (they import the rest: pyarrow, pyiceberg, pyroaring, ...)."""

# Spark brings its own on every executor (pyspark.zip and py4j's zip come first on the workers'
# path), and they must match its JVM: never shipped.
_SPARK_OWN = frozenset({"pyspark", "py4j"})
_FORMAT = "1"  # part of the cache key: bump when the archive's layout changes
_STALE_SECONDS = 24 * 3600
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True)
class EnvironmentArchive:
    """A zip of icemor and the distributions it requires, as the driver has them.

    Attributes:
        path: The zip (in the cache directory).
        distributions: ``name==version`` of each distribution in it, sorted (icemor included).
        size: The zip's size in bytes.
        built: True when this call wrote it, False when an identical one was in the cache.
    """

    path: Path
    distributions: tuple[str, ...]
    size: int
    built: bool

    @property
    def folder(self) -> str:
        """The directory Spark unpacks it to in each executor's working directory."""
        return self.path.stem


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/icemor/ship``, else ``~/.cache/icemor/ship``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "icemor" / "ship"


def _normal(name: str) -> str:
    """A distribution or extra name as PEP 503 / 685 compare them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(
    dist: metadata.Distribution, extras: frozenset[str]
) -> Iterator[tuple[str, frozenset[str]]]:
    """The (name, extras) each requirement of ``dist`` asks for, given the extras asked of it.

    A requirement whose marker names extras applies when one of them was asked; other markers
    (Python version, platform) are not evaluated: such a requirement is shipped when installed,
    which costs bytes at worst.
    """
    for text in dist.requires or ():
        match = _REQUIREMENT.match(text)
        if match is None:
            continue
        wanted = {_normal(e) for e in _EXTRA.findall(text.partition(";")[2])}
        if wanted and not wanted & extras:
            continue
        asked = frozenset(_normal(e) for e in (match.group(2) or "").split(",") if e.strip())
        yield match.group(1), asked


def requirement_closure(root: str = "icemor", *, exclude: Iterable[str] = ()) -> list[metadata.Distribution]:
    """The installed distributions ``root`` needs at run time (``root`` first), without Spark's own.

    Raises:
        UnsupportedFeatureError: ``root`` has no installed metadata.
    """
    skip = _SPARK_OWN | {_normal(n) for n in exclude}
    try:
        first = metadata.distribution(root)
    except metadata.PackageNotFoundError as e:
        msg = f"cannot ship {root}: it is not installed (pip install {root}; in a checkout, pip install -e .)"
        raise UnsupportedFeatureError(msg) from e
    found: dict[str, tuple[metadata.Distribution, frozenset[str]]] = {_normal(root): (first, frozenset())}
    todo = [(first, frozenset[str]())]
    while todo:
        dist, extras = todo.pop()
        for name, asked in _requirements(dist, extras):
            key = _normal(name)
            if key in skip:
                continue
            seen = found.get(key)
            if seen is not None and asked <= seen[1]:
                continue
            try:
                child = seen[0] if seen is not None else metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue  # a requirement for another Python or platform
            merged = asked | (seen[1] if seen is not None else frozenset())
            found[key] = (child, merged)
            todo.append((child, merged))
    return [d for d, _ in found.values()]


def _package_dir() -> Path:
    """The ``icemor`` package this process runs (an installed one, an editable checkout's)."""
    return Path(__file__).resolve().parents[2]


def _package_files(package_dir: Path) -> list[Path]:
    found = package_dir.rglob("*")
    return sorted(p for p in found if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def _entries(dists: list[metadata.Distribution], package_dir: Path) -> Iterator[tuple[Path, str]]:
    """(source file, name in the zip) of every file to ship, relative to site-packages.

    icemor's own code comes from the package the driver imported (an editable install, a
    checkout on ``sys.path``), the rest from each distribution's installed-files record.
    Compiled bytecode is left out (executors compile what they import), and so is anything
    installed outside site-packages (console scripts).
    """
    for path in _package_files(package_dir):
        yield path, PurePosixPath("icemor", *path.relative_to(package_dir).parts).as_posix()
    for dist in dists:
        name = dist.metadata["Name"]
        files = dist.files
        if files is None:
            msg = f"cannot ship {name}: its installed files are not recorded (no RECORD): reinstall it"
            raise UnsupportedFeatureError(msg)
        own = _normal(name) == "icemor"
        for f in files:
            parts = PurePosixPath(f.as_posix()).parts
            if not parts or ".." in parts or "__pycache__" in parts or f.suffix in {".pyc", ".pth"}:
                continue
            if own and not parts[0].endswith(".dist-info"):
                continue  # the package itself comes from package_dir
            source = Path(str(dist.locate_file(f)))
            if source.is_file():
                yield source, PurePosixPath(*parts).as_posix()


def _key(dists: list[metadata.Distribution], package_dir: Path, exclude: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for part in (_FORMAT, sys.implementation.cache_tag or "", sysconfig.get_platform()):
        digest.update(part.encode() + b"\0")
    for dist in sorted(dists, key=lambda d: _normal(d.metadata["Name"])):
        digest.update(f"{_normal(dist.metadata['Name'])}=={dist.version}\0".encode())
    for name in sorted(_normal(n) for n in exclude):
        digest.update(f"-{name}\0".encode())
    for path in _package_files(package_dir):  # the code as the driver has it (editable installs)
        stat = path.stat()
        digest.update(
            f"{path.relative_to(package_dir).as_posix()}:{stat.st_size}:{stat.st_mtime_ns}\0".encode()
        )
    return digest.hexdigest()[:20]


def build_archive(*, cache_dir: str | Path | None = None, exclude: Iterable[str] = ()) -> EnvironmentArchive:
    """The zip of icemor and its requirements for executors: from the cache, else built now.

    ``icemor.spark.pack()``, for sessions set up outside Python: ``spark-submit --archives
    PATH#icemor-env --conf spark.executorEnv.PYTHONPATH=./icemor-env app.py``, or a Spark Connect
    server started with the same options (docs/spark.md, "Running on a cluster").

    Every installed distribution icemor requires at run time, followed through their own
    requirements and extras (pyarrow, pyiceberg, pyroaring, numpy, pandas, ...), except
    pyspark and py4j, which Spark supplies. Wheels for the driver's Python and platform: the
    executors need that Python (see the module's docstring). Built once per set of versions
    and icemor code (about 160 MB, seconds to build); archives of this environment unused for
    a day are removed from the cache.

    Args:
        cache_dir: Where the zip is kept (default :func:`default_cache_dir`).
        exclude: Distribution names to leave out (executors that have them, or do not need
            them: the local engine's ``duckdb``, the CLI's ``typer`` and ``rich``).

    Raises:
        UnsupportedFeatureError: icemor or a requirement's files are not recorded as installed.
    """
    exclude = tuple(exclude)
    package_dir = _package_dir()
    dists = requirement_closure("icemor", exclude=exclude)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = folder / f"{ENV_PREFIX}{_key(dists, package_dir, exclude)}.zip"
    names = tuple(sorted(f"{d.metadata['Name']}=={d.version}" for d in dists))
    if path.is_file():
        os.utime(path)  # in use: not stale
        return EnvironmentArchive(path, names, path.stat().st_size, built=False)
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        seen: set[str] = set()
        # level 1: most of the gain (460 -> 160 MB) at a fraction of the time of the default
        with zipfile.ZipFile(
            partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1, strict_timestamps=False
        ) as out:
            for source, name in _entries(dists, package_dir):
                if name not in seen:
                    seen.add(name)
                    out.write(source, name)
        os.replace(partial, path)  # whole or absent, also with a concurrent build of the same key
    finally:
        partial.unlink(missing_ok=True)
    _prune(folder, keep=path)
    return EnvironmentArchive(path, names, path.stat().st_size, built=True)


def _prune(folder: Path, *, keep: Path) -> None:
    """Remove this cache's archives (and abandoned partial builds) unused for a day."""
    cutoff = time.time() - _STALE_SECONDS
    for old in folder.glob(f"{ENV_PREFIX}*.zip*"):
        try:
            if old != keep and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            continue  # another process's: it removes or uses it


def ship(
    spark: SparkSession,
    *,
    cache_dir: str | Path | None = None,
    exclude: Iterable[str] = (),
    check: bool = True,
) -> EnvironmentArchive:
    """Make icemor importable on ``spark``'s executors, which need not have it installed.

    Packs icemor and every distribution it requires at run time (pyarrow, pyiceberg, pyroaring,
    numpy, pandas, ...; not pyspark and py4j, which Spark brings) exactly as the driver has them
    into one zip (:func:`build_archive`, cached), adds it to the session
    (``SparkContext.addArchive``: each executor fetches and unpacks it once) and puts its
    directory first on the Python workers' path, for every Spark job started afterwards. The
    executors need a Python of the driver's version on the driver's platform (PySpark already
    requires the version); otherwise use a packed environment with its interpreter
    (docs/spark.md, "Running on a cluster"). Idempotent per archive; a later call after icemor
    changed ships the new code in place of the old.

    Example::

        spark = icemor.spark.session(master="spark://head:7077")
        icemor.spark.ship(spark)        # or icemor.spark.session(..., ship=True)
        table.delete("day < '2024-01-01'", spark=spark)

    Args:
        spark: A classic session (any master; on ``local[*]`` the workers already run the
            driver's Python, and the archive only costs its copy).
        cache_dir: See :func:`build_archive`.
        exclude: See :func:`build_archive`.
        check: Then run :func:`check_executors` (a short Spark job).

    Returns:
        The archive: its ``path``, ``distributions`` (``name==version``) and ``size``.

    Raises:
        UnsupportedFeatureError: A Spark Connect session (its server's executors are set up
            when the server starts: docs/spark.md), an archive that cannot be built, or
            executors that cannot import icemor from it.
    """
    if is_connect(spark):
        msg = (
            "icemor.spark.ship needs a classic session (SparkContext.addArchive): give a Spark "
            "Connect server the archive when it starts (docs/spark.md, Running on a cluster)"
        )
        raise UnsupportedFeatureError(msg)
    archive = build_archive(cache_dir=cache_dir, exclude=exclude)
    context = spark.sparkContext
    entry = f"./{archive.folder}"
    # PySpark sends the context's `environment` with every Python function; the workers'
    # PYTHONPATH comes after pyspark.zip and py4j and before their own site-packages
    paths = [p for p in context.environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entry not in paths:
        context.addArchive(f"{archive.path}#{archive.folder}")
        others = [p for p in paths if not p.startswith(f"./{ENV_PREFIX}")]  # an earlier icemor
        context.environment["PYTHONPATH"] = os.pathsep.join([entry, *others])
    if check:
        check_executors(spark, shipped=archive)
    return archive


def check_executors(
    spark: SparkSession, *, shipped: EnvironmentArchive | None = None, tasks: int | None = None
) -> None:
    """Ask ``spark``'s executors to import icemor (:data:`EXECUTOR_MODULES`); fail in one line if they cannot.

    A short job of ``tasks`` tasks (default two per core of the cluster, so that each executor
    is likely asked) running a function that does not itself need icemor.

    Raises:
        UnsupportedFeatureError: An executor cannot import one of them; the message names the
            error, the executor's Python and platform, and what to do.
    """
    modules = EXECUTOR_MODULES

    # Nested, so cloudpickle sends it by value: it runs where icemor cannot be imported.
    def probe(_: int) -> str:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as e:
                machine = f"{platform.system()} {platform.machine()}"
                where = f"Python {platform.python_version()} at {sys.executable}, {machine}"
                return f"{type(e).__name__}: {e} ({where})"
        return ""

    if tasks is None:
        tasks = 2 * parallelism(spark)
    try:
        rows = spark.range(0, tasks, 1, tasks).select(F.udf(probe, StringType())("id")).collect()
    except Exception as e:
        msg = f"the executors could not run a Python function: {_last_error_line(e)}"
        raise UnsupportedFeatureError(msg) from e
    errors = sorted({r[0] for r in rows if r[0]})
    if not errors:
        return
    if shipped is None:
        hint = "ship it with icemor.spark.ship(spark) (docs/spark.md, Running on a cluster)"
    else:
        hint = (
            f"the shipped {shipped.folder} holds the driver's packages for Python "
            f"{platform.python_version()} on {sysconfig.get_platform()}; executors with another Python "
            "or platform need a packed environment (docs/spark.md, Running on a cluster)"
        )
    msg = f"the executors cannot import icemor: {errors[0]}: {hint}"
    raise UnsupportedFeatureError(msg)


def _last_error_line(error: BaseException) -> str:
    """The last ``SomethingError: ...`` line of a Spark failure (a Python traceback inside a
    Java one), else its first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    found = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return found[-1] if found else (lines[0] if lines else type(error).__name__)
