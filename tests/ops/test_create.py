"""create-table refuses a location inside another table's, at it, or around it: the
outer table's orphan removal would take the inner one's files for orphans. Nothing is left behind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run

if TYPE_CHECKING:
    from pathlib import Path


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("other_location", "name", "needle"),
    [
        ("db2", "db2.t", "inside 'other.x'"),  # the new table would lie inside other.x
        ("db/u", "db.u", "inside 'other.x'"),  # the same location
        ("db/v/data2", "db.v", "around 'other.x'"),  # other.x would lie inside the new table
    ],
)
def test_a_location_nested_with_another_tables_is_refused(
    home: Path,
    parquet: Path,
    capsys: pytest.CaptureFixture[str],
    other_location: str,
    name: str,
    needle: str,
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    catalog = icemor.load_catalog()
    catalog.create_namespace("other")
    location = f"{(home / 'warehouse').as_uri()}/{other_location}"
    catalog.create_table("other.x", schema=pq.read_schema(parquet), location=location)
    before, namespaces = set((home / "warehouse").rglob("*")), icemor.list_namespaces()
    capsys.readouterr()

    assert run(["create-table", name, "--schema-from", str(parquet)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and needle in lines[0] and location in lines[0], lines
    assert set((home / "warehouse").rglob("*")) == before
    assert icemor.list_namespaces() == namespaces  # db2, made for the table, is gone again
    assert icemor.list_tables() == ["db.t", "other.x"]


def test_a_data_path_inside_another_table_is_refused(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    outer = icemor.load_table("db.t").metadata.location
    capsys.readouterr()
    argv = ["create-table", "db.u", "--schema-from", str(parquet)]
    assert run([*argv, "--property", f"write.data.path={outer}/data/u"]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "inside 'db.t'" in lines[0], lines
    assert icemor.list_tables() == ["db.t"]


def test_existing_and_side_by_side_tables(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tables next to each other (``t`` and ``t2``: a shared prefix is no nesting) are created;
    an existing name is still "already exists"."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["create-table", "db.t2", "--schema-from", str(parquet)]) == 0
    assert run(["create-table", "db2.t", "--schema-from", str(parquet)]) == 0
    capsys.readouterr()
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "already exists" in lines[0], lines
    assert icemor.list_tables() == ["db.t", "db.t2", "db2.t"]
