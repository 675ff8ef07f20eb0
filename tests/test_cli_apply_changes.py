"""``icemor apply-changes``: batches of CDC files from the command line, on both engines, and its errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icemor
from icemor.cli import run


@pytest.fixture
def table(home: Path) -> str:
    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
    catalog.create_table("db.t", schema=schema, properties={"format-version": "2"})
    return "db.t"


def _file(path: Path, rows: list[tuple[Any, ...]], columns: tuple[str, ...] = ("op", "id", "v")) -> str:
    data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    data["id"] = pa.array(data["id"], pa.int64())
    pq.write_table(pa.table(data), path)
    return str(path)


def _rows(name: str) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["v"]) for r in icemor.load_table(name).scan().to_arrow().to_pylist())


def test_files_of_one_batch_in_one_commit(
    table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _file(tmp_path / "a.parquet", [("I", 1, "a"), ("I", 2, "b"), ("I", 3, "c")])
    second = _file(tmp_path / "b.parquet", [("U", 1, "a1"), ("D", 2, None), ("I", 4, "d"), ("U", 4, "d1")])
    assert run(["apply-changes", table, "--changes", first, "--changes", second, "--key", "id"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("applied 7 changes (4 I, 2 U, 1 D, 0 -U ignored) to db.t: 6 rows written")
    assert "3 keys deleted by equality, 3 rows by position" in out and "snapshot" in out
    assert _rows(table) == [(1, "a1"), (3, "c"), (4, "d1")]
    assert len(icemor.load_table(table).snapshots()) == 1


def test_order_by_and_exactly_once(table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(
        tmp_path / "a.parquet", [("U", 1, "late", 2), ("I", 1, "early", 1)], ("op", "id", "v", "lsn")
    )
    args = ["apply-changes", table, "--changes", path, "--key", "id", "--order-by", "lsn"]
    assert run([*args, "--app-id", "job", "--batch-id", "5"]) == 0
    assert run([*args, "--app-id", "job", "--batch-id", "5"]) == 0
    assert "batch 5 of app 'job' is already in db.t: nothing done" in capsys.readouterr().out
    assert _rows(table) == [(1, "late")]


@pytest.mark.parametrize(
    ("rows", "args", "needle"),
    [
        ([("X", 1, "a")], [], "unknown op 'X' in column 'op' (1 rows)"),
        ([("I", 1, "a")], ["--op-column", "kind"], "the changes have no op column 'kind'"),
        ([("I", 1, "a")], ["--key", "v"], "key column 'v' is optional"),
        ([("I", None, "a")], [], "key column 'id' is NULL in row 0 of the changes (1 row(s) in all)"),
    ],
)
def test_errors_are_one_line_and_commit_nothing(
    table: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rows: list[Any],
    args: list[str],
    needle: str,
) -> None:
    path = _file(tmp_path / "a.parquet", rows)
    key = [] if "--key" in args else ["--key", "id"]
    assert run(["apply-changes", table, "--changes", path, *key, *args]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("icemor: error: ") and needle in err[0], err
    assert icemor.load_table(table).snapshots() == []
    assert not list(
        (Path(icemor.load_table(table).metadata.location.removeprefix("file://")) / "data").glob("*")
    )


def test_missing_file(table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["apply-changes", table, "--changes", str(tmp_path / "nope.parquet"), "--key", "id"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.oracle
def test_spark_engine(table: str, home: Path, tmp_path: Path) -> None:
    import os

    from oracle import load_oracle_env

    first = _file(tmp_path / "a.parquet", [("I", 1, "a"), ("I", 2, "b")])
    second = _file(tmp_path / "b.parquet", [("U", 1, "a1"), ("D", 2, None), ("I", 3, "c"), ("D", 3, None)])
    env = {**os.environ, "JAVA_HOME": load_oracle_env()["java_home"], "ICEMOR_SPARK_MASTER": "local[2]"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent / "src"), env.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "icemor",
            "--engine",
            "spark",
            "apply-changes",
            table,
            "--changes",
            first,
            "--changes",
            second,
            "--key",
            "id",
        ],
        capture_output=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith("applied 6 changes")
    assert _rows(table) == [(1, "a1")]


@pytest.mark.oracle
def test_spark_engine_refuses_a_file_spark_would_read_as_empty(
    table: str, home: Path, tmp_path: Path
) -> None:
    """Spark's listing skips ``_…`` and ``.…`` files even when named: an error, not 0 changes."""
    import os

    from oracle import load_oracle_env

    hidden = _file(tmp_path / "_changes.parquet", [("I", 1, "a")])
    env = {**os.environ, "JAVA_HOME": load_oracle_env()["java_home"], "ICEMOR_SPARK_MASTER": "local[1]"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent / "src"), env.get("PYTHONPATH", "")]
    )
    args = ["--engine", "spark", "apply-changes", table, "--changes", hidden, "--key", "id"]
    done = subprocess.run([sys.executable, "-m", "icemor", *args], capture_output=True, env=env, check=False)
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(err) == 1 and "Spark skips files named like this" in err[0], err
    assert _rows(table) == []


def test_icemor_warnings_are_notes_on_the_terminal(table: str, tmp_path: Path) -> None:
    """A warning of icemor's (here: a verdict-store setting it cannot read) is one ``icemor: note:``
    line on stderr, not a bare log line, and the command still succeeds."""
    first = _file(tmp_path / "a.parquet", [("I", 1, "a"), ("I", 2, "b")])
    second = _file(tmp_path / "b.parquet", [("U", 1, "c")])
    assert run(["apply-changes", table, "--changes", first, "--key", "id"]) == 0
    assert run(["apply-changes", table, "--changes", second, "--key", "id"]) == 0  # an equality delete
    import os

    env = {**os.environ, "ICEMOR_VERDICT_CACHE_BYTES": "lots"}
    done = subprocess.run(
        [sys.executable, "-m", "icemor", "count", table], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    notes = [line for line in done.stderr.splitlines() if line.strip()]
    assert notes and all(line.startswith("icemor: note: ") for line in notes), notes
    assert any("ICEMOR_VERDICT_CACHE_BYTES" in line for line in notes), notes
