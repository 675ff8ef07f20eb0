"""``icemor.engines.spark.ship``: the archive of icemor and its requirements, without a JVM.

That executors without icemor run it from the archive is ``test_spark_cluster.py``'s (a
``local-cluster`` whose executors run a bare venv).
"""

from __future__ import annotations

import os
import shutil
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import icemor
from icemor.engines.spark import ship as ship_module
from icemor.engines.spark.ship import ENV_PREFIX, _last_error_line, build_archive, requirement_closure, ship
from icemor.exceptions import UnsupportedFeatureError
from spark_connect_fake import as_connect_session_class

# the heavy ones, left out where a test only looks at how the archive is made
HEAVY = ("pyarrow", "numpy", "pandas", "duckdb", "pyiceberg-core", "sqlalchemy", "zstandard")


def _names(dists: list[metadata.Distribution]) -> set[str]:
    return {d.metadata["Name"].lower().replace("_", "-") for d in dists}


def test_closure_follows_requirements_and_the_extras_asked_only() -> None:
    names = _names(requirement_closure("icemor"))
    # direct, and through pyiceberg (mmh3), pydantic (its compiled core), pandas (dateutil)
    assert {"icemor", "pyiceberg", "pyarrow", "pyroaring", "numpy", "pandas"} <= names
    assert {"mmh3", "pydantic", "pydantic-core", "python-dateutil"} <= names
    # pyiceberg[sql-sqlite,pyiceberg-core] as icemor asks: their requirements come along ...
    assert {"sqlalchemy", "pyiceberg-core"} <= names
    # ... not those of extras nobody asked for (boto3 is installed here, for moto), nor Spark's own
    metadata.distribution("boto3")
    assert "boto3" not in names
    assert not {"pyspark", "py4j"} & names


def test_closure_leaves_out_what_is_excluded() -> None:
    names = _names(requirement_closure("icemor", exclude=["DuckDB", "pyroaring"]))
    assert "pyiceberg" in names
    assert not {"duckdb", "pyroaring"} & names


def test_closure_of_a_package_that_is_not_installed_is_one_line() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"^cannot ship no-such-dist: it is not installed"):
        requirement_closure("no-such-dist")


def test_archive_holds_the_driver_code_and_compiled_requirements(tmp_path: Path) -> None:
    archive = build_archive(cache_dir=tmp_path, exclude=HEAVY[:-1])
    assert archive.built and archive.path.parent == tmp_path
    assert archive.path.name.startswith(ENV_PREFIX) and archive.folder == archive.path.stem
    with zipfile.ZipFile(archive.path) as z:
        names = z.namelist()
        # icemor as the driver imports it (here: this checkout), byte for byte
        package = Path(icemor.__file__).parent
        assert (
            z.read("icemor/engines/spark/ship.py") == (package / "engines" / "spark" / "ship.py").read_bytes()
        )
    assert any(n.startswith("icemor-") and n.endswith(".dist-info/METADATA") for n in names)
    # compiled modules, as files: what addPyFile could not ship
    assert any(n.startswith("pyroaring") and n.endswith(".so") for n in names)
    assert any(n.startswith("zstandard/") and n.endswith(".so") for n in names)
    assert "pydantic/__init__.py" in names and "pyiceberg/__init__.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pth"))]
    assert not [n for n in names if n.startswith(("pyspark/", "py4j/", "pyarrow/", "duckdb", "../"))]
    assert len(names) == len(set(names))
    dists = {d.split("==")[0].lower() for d in archive.distributions}
    assert "pyarrow" not in dists and {"icemor", "pyroaring", "zstandard"} <= dists


def test_archive_is_reused_until_icemor_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a copy of the package stands for an editable install whose code changes
    package = tmp_path / "src" / "icemor"
    shutil.copytree(Path(icemor.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(ship_module, "_package_dir", lambda: package)
    cache = tmp_path / "cache"
    first = build_archive(cache_dir=cache, exclude=HEAVY)
    again = build_archive(cache_dir=cache, exclude=HEAVY)
    assert first.built and not again.built and again.path == first.path

    edited = package / "engines" / "spark" / "worker.py"
    edited.write_text(edited.read_text() + "\n# changed\n")
    changed = build_archive(cache_dir=cache, exclude=HEAVY)
    assert changed.built and changed.path != first.path
    with zipfile.ZipFile(changed.path) as z:
        assert z.read("icemor/engines/spark/worker.py").endswith(b"# changed\n")
    # another exclusion is another archive
    assert build_archive(cache_dir=cache, exclude=HEAVY[:-1]).path not in {first.path, changed.path}


def test_archives_unused_for_a_day_are_removed(tmp_path: Path) -> None:
    old, recent = tmp_path / f"{ENV_PREFIX}old.zip", tmp_path / f"{ENV_PREFIX}recent.zip"
    partial = tmp_path / f"{ENV_PREFIX}crashed.zip.123.partial"
    other = tmp_path / "notes.txt"
    for path in (old, recent, partial, other):
        path.write_bytes(b"x")
    two_days_ago = time.time() - 2 * 24 * 3600
    for path in (old, partial, other):
        os.utime(path, (two_days_ago, two_days_ago))
    archive = build_archive(cache_dir=tmp_path, exclude=HEAVY)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([archive.path.name, recent.name, other.name])


def test_build_leaves_no_partial_file_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> object:
        yield Path(icemor.__file__), "icemor/__init__.py"
        raise OSError("disk full")

    monkeypatch.setattr(ship_module, "_entries", broken)
    with pytest.raises(OSError, match="disk full"):
        build_archive(cache_dir=tmp_path, exclude=HEAVY)
    assert list(tmp_path.iterdir()) == []


def test_ship_refuses_a_spark_connect_session_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect_class = type("SparkSession", (), {})
    as_connect_session_class(monkeypatch, connect_class)
    connect_session = connect_class()
    with pytest.raises(UnsupportedFeatureError, match=r"^icemor.spark.ship needs a classic session") as e:
        ship(connect_session, cache_dir=tmp_path)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing built


def test_last_error_line_of_a_spark_failure() -> None:
    text = (
        "An error occurred while calling o71.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure:\n"
        "Traceback (most recent call last):\n"
        '  File "worker.py", line 1, in main\n'
        "RuntimeError: Python in worker has different version 3.10 than that in driver 3.11\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException\n"
    )
    assert _last_error_line(RuntimeError(text)) == (
        "RuntimeError: Python in worker has different version 3.10 than that in driver 3.11"
    )
    assert _last_error_line(RuntimeError("no error line here\nsecond")) == "no error line here"
    assert _last_error_line(RuntimeError("")) == "RuntimeError"


def test_facade_session_ships_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import icemor.engines.spark
    import icemor.spark

    # the front's names are the engine's functions, not wrappers restating them
    assert icemor.spark.session is icemor.engines.spark.session
    assert icemor.spark.ship is ship
    assert icemor.spark.pack is build_archive
    spark = object()
    shipped: list[object] = []
    monkeypatch.setattr(icemor.engines.spark.SparkSession, "getActiveSession", lambda: spark)
    monkeypatch.setattr(icemor.engines.spark, "ship_environment", lambda s, **_: shipped.append(s))
    assert icemor.spark.session() is spark
    assert shipped == []
    assert icemor.spark.session(ship=True) is spark
    assert shipped == [spark]


def test_facade_pack_is_the_archive_ship_adds(tmp_path: Path) -> None:
    import icemor.spark

    packed = icemor.spark.pack(cache_dir=tmp_path, exclude=HEAVY)
    assert packed.built and packed.path.is_file()
    assert build_archive(cache_dir=tmp_path, exclude=HEAVY).path == packed.path
