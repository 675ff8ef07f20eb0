"""SQL hardening at the CLI, on the local engine and on Spark.

- Names that differ only in case (``id`` and ``ID``) in a MERGE source, CDC changes or the
  target table are refused with one line naming both: SQL names are case-insensitive (Spark's
  default ``spark.sql.caseSensitive=false``), and a MERGE once matched on one and inserted the
  other, writing a key that already existed.
- SQL text is never a template: ``'{target}'`` in a SET value is stored as written on Spark
  too (Spark's statement was built by replacing ``{target}`` everywhere in it).
- Functions outside docs/sql.md's allow-list (``current_setting``) are refused on both engines.

Expected rows come from the rows written here, read back by pyiceberg or Iceberg Java, never
from icemor's own output.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

import icemor
from icemor.cli import run
from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pathlib import Path

    from oracle import IcebergJava

ROWS = [(1, "a"), (2, "b"), (3, "c")]
COLLISION = "'id' and 'ID'"


def _catalog(home: Path) -> SqlCatalog:
    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        "icemor", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )


@pytest.fixture
def local_table(home: Path) -> str:
    """``db.t`` (id, note) with ROWS in one data file, written by pyiceberg."""
    cat = _catalog(home)
    cat.create_namespace("db")
    data = pa.table({"id": pa.array([r[0] for r in ROWS], pa.int64()), "note": [r[1] for r in ROWS]})
    cat.create_table("db.t", data.schema).append(data)
    return "db.t"


def _rows(home: Path, name: str = "db.t") -> list[tuple[object, ...]]:
    """The live rows as pyiceberg reads them (an independent reader)."""
    data = _catalog(home).load_table(name).scan().to_arrow()
    return sorted(tuple(r.values()) for r in data.to_pylist())


def _snapshots(home: Path, name: str = "db.t") -> int:
    return len(_catalog(home).load_table(name).metadata.snapshots)


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("icemor: error: "), err
    return err[0]


def _colliding_source(path: Path) -> str:
    """A MERGE source whose ``id`` matches key 2 and whose ``ID`` matches nothing."""
    pq.write_table(
        pa.table({"id": pa.array([2], pa.int64()), "ID": pa.array([9], pa.int64()), "note": ["x"]}), path
    )
    return str(path)


# ---- names that differ only in case ---------------------------------------------------------


def test_merge_refuses_source_columns_differing_only_in_case(
    home: Path, local_table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once "0 updated, 1 inserted": the key range came from ``ID``, the join used ``id``."""
    source = _colliding_source(tmp_path / "src.parquet")
    assert run(["merge", local_table, "--source", source, "--on", "id"]) == 2
    line = _error(capsys)
    assert COLLISION in line and "differ only in case" in line, line
    assert _rows(home) == ROWS
    assert _snapshots(home) == 1


@pytest.mark.parametrize("on", ["t.id = s.id", ["id"], "t.ID = s.ID"])
def test_merge_api_refuses_case_collisions_whatever_the_on(
    home: Path, local_table: str, on: str | list[str]
) -> None:
    source = pa.table({"id": pa.array([2], pa.int64()), "ID": pa.array([9], pa.int64()), "note": ["x"]})
    table = icemor.load_table(local_table)
    with pytest.raises(InvalidArgumentError, match=COLLISION):
        table.merge(source, on=on).when_matched_update_all().when_not_matched_insert_all().execute()
    assert _rows(home) == ROWS


def test_merge_refuses_a_source_column_named_like_the_row_index(home: Path, local_table: str) -> None:
    """``__SRC_ROW`` is ``__src_row`` to SQL: it would decide which source rows count as matched."""
    source = pa.table(
        {"id": pa.array([2], pa.int64()), "note": ["x"], "__SRC_ROW": pa.array([5], pa.int64())}
    )
    table = icemor.load_table(local_table)
    with pytest.raises(InvalidArgumentError, match="__src_row"):
        table.merge(source, on=["id"]).when_matched_update_all().when_not_matched_insert_all().execute()
    assert _rows(home) == ROWS


def test_merge_key_matches_a_source_column_case_insensitively(home: Path, local_table: str) -> None:
    """``--on id`` with a source column ``ID``: SQL (and Spark) read them as one name."""
    source = pa.table({"ID": pa.array([2, 7], pa.int64()), "note": ["x", "y"]})
    table = icemor.load_table(local_table)
    m = table.merge(source, on=["id"]).when_matched_update_all().when_not_matched_insert_all().execute()
    assert (m.rows_updated, m.rows_inserted) == (1, 1)
    assert _rows(home) == [(1, "a"), (2, "x"), (3, "c"), (7, "y")]


def test_apply_changes_refuses_columns_differing_only_in_case(
    home: Path, local_table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "changes.parquet"
    pq.write_table(
        pa.table(
            {"id": pa.array([2], pa.int64()), "ID": pa.array([9], pa.int64()), "note": ["x"], "op": ["U"]}
        ),
        path,
    )
    args = ["apply-changes", local_table, "--changes", str(path), "--key", "id", "--allow-nullable-key"]
    assert run(args) == 2
    line = _error(capsys)
    assert COLLISION in line and "differ only in case" in line, line
    assert _rows(home) == ROWS


def test_update_refuses_a_table_whose_columns_differ_only_in_case(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Iceberg allows ``id`` and ``ID`` side by side; SQL cannot tell them apart."""
    cat = _catalog(home)
    cat.create_namespace("db")
    data = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "ID": pa.array([10, 20], pa.int64()), "note": ["a", "b"]}
    )
    cat.create_table("db.t", data.schema).append(data)
    assert run(["update", "db.t", "--set", "note = 'x'", "--where", "id = 1"]) == 2
    line = _error(capsys)
    assert COLLISION in line and "db.t" in line, line
    assert _rows(home) == [(1, 10, "a"), (2, 20, "b")]


# ---- SQL text is no template ----------------------------------------------------------------


def test_local_update_stores_braces_as_written(
    home: Path, local_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["update", local_table, "--set", "note='{target}'", "--where", "id = 3"]) == 0
    assert _rows(home) == [(1, "a"), (2, "b"), (3, "{target}")]


# ---- functions outside the allow-list, subqueries: refused at the CLI -----------------------


@pytest.mark.parametrize(
    ("value", "function"),
    [("current_setting('secret_directory')", "current_setting"), ("current_query()", "current_query")],
)
def test_local_update_refuses_functions_that_expose_internals(
    home: Path, local_table: str, capsys: pytest.CaptureFixture[str], value: str, function: str
) -> None:
    assert run(["update", local_table, "--set", f"note={value}", "--where", "id = 3"]) == 2
    line = _error(capsys)
    assert f"function {function}() is not allowed" in line and "docs/sql.md" in line, line
    assert _rows(home) == ROWS


@pytest.mark.parametrize("command", [["scan"], ["count"], ["delete"], ["update", "--set", "note='x'"]])
def test_a_subquery_gets_one_message_everywhere(
    home: Path, local_table: str, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert run([command[0], local_table, *command[1:], "--where", "id in (select 1)"]) == 2
    line = _error(capsys)
    assert "'id in (select 1)' uses a subquery, which is not supported" in line, line
    assert _rows(home) == ROWS


@pytest.mark.parametrize("command", [["scan"], ["delete"], ["update", "--set", "note='x'"]])
def test_a_deeply_nested_filter_is_refused_at_once(
    home: Path, local_table: str, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A filter nested 50,000 levels deep once took 127 s to fail."""
    deep = "(id = 1 and " * 50_000 + "id = 2" + ")" * 50_000
    started = time.monotonic()
    assert run([command[0], local_table, *command[1:], "--where", deep]) == 2
    assert time.monotonic() - started < 10
    line = _error(capsys)
    assert "nests too deeply (more than 100 levels" in line and len(line) < 300, line
    assert _rows(home) == ROWS


# ---- the Spark engine, judged by Iceberg Java ----------------------------------------------


@pytest.fixture
def java_table(oracle: IcebergJava, ns: str) -> str:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, note STRING")
    values = ", ".join(f"({i}, '{n}')" for i, n in ROWS)
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES {values}")
    return name


@pytest.mark.oracle
def test_spark_update_stores_braces_as_written(
    oracle: IcebergJava, java_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once stored ``__icemor_target_<hex>``: the view name replaced ``{target}`` in the value."""
    argv = ["--engine", "spark", "update", java_table, "--set", "note='{target}'", "--where", "id = 3"]
    assert run(argv) == 0, capsys.readouterr().err
    assert oracle.rows(java_table) == [(1, "a"), (2, "b"), (3, "{target}")]


@pytest.mark.oracle
def test_spark_merge_stores_braces_as_written(
    oracle: IcebergJava, catalog: SqlCatalog, java_table: str
) -> None:
    source = pa.table({"id": pa.array([2, 7], pa.int64()), "note": ["{source}", "{unmatched}"]})
    table = icemor.load_table(java_table, catalog=catalog)
    m = (
        table.merge(source, on="t.id = s.id", spark=oracle.spark)
        .when_matched_update({"note": "concat(s.note, '{target}')"})
        .when_not_matched_insert({"id": "s.id", "note": "concat('{source}', s.note)"})
        .execute()
    )
    assert (m.rows_updated, m.rows_inserted) == (1, 1)
    assert oracle.rows(java_table) == [
        (1, "a"),
        (2, "{source}{target}"),
        (3, "c"),
        (7, "{source}{unmatched}"),
    ]


@pytest.mark.oracle
def test_spark_and_local_refuse_case_collisions_alike(
    oracle: IcebergJava, java_table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _colliding_source(tmp_path / "src.parquet")
    lines = []
    for engine in ("local", "spark"):
        assert run(["--engine", engine, "merge", java_table, "--source", source, "--on", "id"]) == 2
        lines.append(_error(capsys))
    assert lines[0] == lines[1] and COLLISION in lines[0], lines
    assert oracle.rows(java_table) == ROWS  # no second key 2


@pytest.mark.oracle
def test_spark_and_local_refuse_functions_alike(
    oracle: IcebergJava, java_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = []
    for engine in ("local", "spark"):
        argv = ["--engine", engine, "update", java_table, "--set", "note=current_setting('secret_directory')"]
        assert run(argv) == 2
        lines.append(_error(capsys))
    assert lines[0] == lines[1] and "function current_setting() is not allowed" in lines[0], lines
    assert oracle.rows(java_table) == ROWS
