"""Table and namespace names: refused before anything is written, in one line, and the
location comparisons that keep tables from nesting."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import icemor
from icemor.cli import run
from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pathlib import Path

# (name, words the one-line error must contain)
BAD_NAMES = [
    ("db.t/data", "'/'"),
    ("db/x.t", "'/'"),
    ("db.t\\data", "'\\\\'"),
    ("db..t", "empty part"),
    ("db.t.", "empty part"),
    (".t", "empty part"),
    ("..", "empty part"),
    ("db. .t", "empty part"),
    ("db.t\x00x", "control character"),
    ("db.t\nx", "control character"),
    ("db\tx.t", "control character"),
    ("db.t\x7f", "control character"),
    ("db.t\u2028x", "control character"),
    ("db.t#x", "URI fragment"),
    ("db.u?x", "URI query"),
    ("db.p%2Fq", "URI escape"),
    ("db.t\udcff", "UTF-8"),  # an undecodable byte of argv, as Python passes it on
    ("db." + "x" * 300, "300 bytes"),
    ("db." + "é" * 65, "130 bytes"),
    ("x" * 129 + ".t", "129 bytes"),
    (".".join(["n" * 50] * 3) + ".t", "152 bytes"),  # one directory in pyiceberg's SQL catalog
    ("t", "namespace.table"),
]


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.mark.parametrize(("name", "needle"), BAD_NAMES)
def test_a_bad_table_name_is_refused_in_one_line_and_nothing_is_created(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str], name: str, needle: str
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    before, namespaces = _tree(home), icemor.list_namespaces()
    capsys.readouterr()
    assert run(["create-table", name, "--schema-from", str(parquet)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("icemor: error: ") and needle in lines[0], lines
    assert (home / "catalog.db").exists()
    assert {p for p in _tree(home) if p.name != "catalog.db"} == {p for p in before if p.name != "catalog.db"}
    assert icemor.list_namespaces() == namespaces
    assert icemor.list_tables() == ["db.t"]


@pytest.mark.parametrize(
    "name", ["db." + "x" * 128, "n" * 128 + ".t", "db.Ünïcødé table-1_x:y", ".".join(["n" * 42] * 3) + ".t"]
)
def test_names_up_to_the_limit_are_created(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert run(["create-table", name, "--schema-from", str(parquet)]) == 0
    assert run(["append", name, str(parquet)]) == 0
    capsys.readouterr()
    assert run(["count", name]) == 0
    assert capsys.readouterr().out.strip() == "4"


@pytest.mark.parametrize("command", [["count"], ["describe"], ["drop-table"], ["expire"]])
@pytest.mark.parametrize("name", [n for n, _ in BAD_NAMES])
def test_a_bad_name_given_to_load_or_drop_is_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], command: list[str], name: str
) -> None:
    assert run([*command, name]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("icemor: error: "), lines


def test_limits() -> None:
    from icemor.spec.identifiers import MAX_NAME_BYTES, check_table_identifier

    # NAME_MAX is 255 bytes, eCryptfs' 143: the name plus a unique location's "-<32 hex>" fits both
    assert MAX_NAME_BYTES + len("-") + 32 < 255 and MAX_NAME_BYTES < 143
    assert check_table_identifier("a.b.c") == ("a", "b", "c")
    with pytest.raises(InvalidArgumentError, match="'/'"):
        check_table_identifier("a/b.c")


@pytest.mark.parametrize(
    ("path", "locations", "expected"),
    [
        ("file:///w/db/t/data/x.parquet", ["file:/w/db/t"], "file:/w/db/t"),
        ("/w/db/t", ["file:///w/db/t/"], "file:///w/db/t/"),  # the location itself
        ("file:/w/db/t2/x", ["/w/db/t"], None),  # a sibling sharing a prefix
        ("file:/w/db/t", ["/w/db/t/data"], None),  # around, not inside
        ("/w/db/x/../t/f", ["/w/db/t"], "/w/db/t"),
        ("/w/db/a b/f", ["file:/w/db/a%20b"], "file:/w/db/a%20b"),
        ("s3a://bucket/w/t/f", ["s3://bucket/w/t"], "s3://bucket/w/t"),
        ("s3://bucket/w/t/f", ["s3://other/w/t"], None),
        ("s3://bucket/w/t/f", ["/w/t"], None),
    ],
)
def test_location_within(path: str, locations: list[str], expected: str | None) -> None:
    from icemor.spec.identifiers import location_within

    assert location_within(path, locations) == expected


def test_a_table_that_exists_under_a_refused_name_can_still_be_read_and_dropped(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tables made by an older icemor or another engine keep working: the rules apply to creation."""
    import pyarrow.parquet as pq

    catalog = icemor.load_catalog()
    catalog.create_namespace("db")
    catalog.create_table("db.t/data", schema=pq.read_schema(parquet))
    assert run(["append", "db.t/data", str(parquet)]) == 0
    capsys.readouterr()
    assert run(["count", "db.t/data"]) == 0
    assert capsys.readouterr().out.strip() == "4"
    assert run(["drop-table", "db.t/data", "--purge"]) == 0
    assert icemor.list_tables() == []
