"""The CLI: informative help, one-line errors with exit code 2, and the commands end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.main import get_command_name

from icemor.cli import run
from icemor.cli.app import app, echo_commit, split_names

if TYPE_CHECKING:
    from pathlib import Path

# Read from the app itself, so that a command added to the CLI is checked here without listing it.
COMMANDS = [c.name or get_command_name(c.callback.__name__) for c in app.registered_commands if c.callback]


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_commands_are_read_from_the_app() -> None:
    # the commands README documents; more may come, none may go
    assert {"scan", "count", "delete", "update", "merge", "apply-changes", "compact", "drop-table"} <= set(
        COMMANDS
    )
    assert len(COMMANDS) == len(set(COMMANDS)) == len(app.registered_commands)


def test_help_lists_every_command_and_global_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    # a row of the Commands table: the name, then its help (not a substring such as "changes"
    # of "apply-changes")
    rows = [line.replace("│", " ").split() for line in out.split("Commands", 1)[1].splitlines()]
    assert set(COMMANDS) <= {row[0] for row in rows if row}
    for word in ["--catalog", "--engine", "--debug"]:
        assert word in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_informative_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage:" in out
    assert len(out.splitlines()) >= 4


def test_create_append_scan_count_files(
    home: Path, parquet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet), "--partition-by", "day(ts),cat"]) == 0
    assert run(["append", "db.t", str(parquet), str(parquet)]) == 0
    capsys.readouterr()
    assert run(["count", "db.t"]) == 0
    assert capsys.readouterr().out.strip() == "8"
    assert run(["count", "db.t", "--where", "cat = 'a'"]) == 0
    assert capsys.readouterr().out.strip() == "4"
    out = tmp_path / "out.jsonl"
    assert run(["scan", "db.t", "--columns", "id,cat", "--where", "id > 2", "--output", str(out)]) == 0
    rows = sorted((r["id"], r["cat"]) for r in map(json.loads, out.read_text().splitlines()))
    assert rows == [(3, None), (3, None), (4, "a"), (4, "a")]
    csv_out = tmp_path / "out.csv"
    assert run(["scan", "db.t", "--limit", "3", "--output", str(csv_out)]) == 0
    assert len(csv_out.read_text().splitlines()) == 4  # header + 3 rows
    assert run(["files", "db.t", "--where", "cat = 'b'"]) == 0
    assert "1 data files" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["scan", "nope.missing"], "does not exist"),
        (["count", "nope.missing"], "does not exist"),
        (
            ["create-table", "db.x", "--schema-from", "/does/not/exist.parquet"],
            "cannot read a Parquet schema",
        ),
        (["append", "db.t", "/does/not/exist.parquet"], "no such file: /does/not/exist.parquet"),
        (["scan", "db.t", "--columns", "nope"], "unknown column"),
        (["scan", "db.t", "--where", "nope = 1"], "invalid row filter"),
        (["scan", "db.t", "--where", "id >>> 1"], "cannot parse row filter"),
        (["scan", "db.t", "--snapshot-id", "42"], "snapshot 42 does not exist"),
        (["scan", "db.t", "--ref", "nope"], "ref 'nope' does not exist"),
        (["scan", "db.t", "--output", "x.txt"], "--output must end in"),
        (["count", "db.t", "--as-of-timestamp", "1"], "no snapshot is older"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    capsys.readouterr()
    assert run(argv) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("icemor: error: ") and needle in lines[0]


@pytest.mark.parametrize(
    ("partition", "needle"),
    [
        ("bucket(16,nope)", "no column 'nope'"),
        ("frobnicate(id)", "bad partition field"),
        ("day(cat)", "cannot apply"),
    ],
)
def test_bad_partition_spec(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str], partition: str, needle: str
) -> None:
    assert run(["create-table", "db.p", "--schema-from", str(parquet), "--partition-by", partition]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and needle in lines[0]
    # nothing was created
    assert run(["count", "db.p"]) == 2


def test_unknown_format_version_is_refused_up_front(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A format version icemor cannot write: refuse before anything is created (2 and 3 are written)."""
    assert run(["create-table", "db.v3", "--schema-from", str(parquet), "--format-version", "4"]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "--format-version must be 2 or 3" in lines[0], lines
    assert run(["count", "db.v3"]) == 2  # nothing was created
    assert "does not exist" in _err_lines(capsys)[0]


def test_failed_append_commits_nothing(
    home: Path, parquet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet), str(bad)]) == 2
    capsys.readouterr()
    assert run(["count", "db.t"]) == 0
    assert capsys.readouterr().out.strip() == "0"


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["scan"]) == 2
    assert "Missing argument" in capsys.readouterr().err


def test_console_script_exit_code(home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "icemor", "count", "nope.missing"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "icemor: error: table 'nope.missing' does not exist in catalog 'icemor'"
    ]
    assert "Traceback" not in proc.stderr


@pytest.mark.oracle
def test_oracle_round_trip_through_the_cli(
    oracle: object, catalog: object, ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Iceberg Java creates a table with a merge-on-read DELETE; icemor's catalog lists it and
    reads it with the delete applied; ``icemor append`` commits through pyiceberg; Java sees it."""
    from oracle import IcebergJava, sorted_rows

    assert isinstance(oracle, IcebergJava)
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, data STRING")
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} SELECT /*+ COALESCE(1) */ id, 'java' FROM range(0, 6)")
    oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id = 4")
    assert (ns, "t") in catalog.list_tables(ns)  # type: ignore[attr-defined]
    capsys.readouterr()
    assert run(["count", name]) == 0
    assert capsys.readouterr().out.strip() == "5"

    extra = tmp_path / "extra.parquet"
    pq.write_table(pa.table({"id": pa.array([10, 11], pa.int64()), "data": ["cli", None]}), extra)
    assert run(["append", name, str(extra)]) == 0
    expected = sorted_rows([(i, "java") for i in (0, 1, 2, 3, 5)] + [(10, "cli"), (11, None)])
    assert oracle.rows(name) == expected
    out = tmp_path / "rows.jsonl"
    assert run(["scan", name, "--output", str(out)]) == 0
    got = sorted_rows((r["id"], r["data"]) for r in map(json.loads, out.read_text().splitlines()))
    assert got == expected


def test_named_catalog_from_pyiceberg_env_config(tmp_path: Path, parquet: Path) -> None:
    """--catalog NAME loads a pyiceberg catalog the usual way (PYICEBERG_CATALOG__NAME__*).

    In subprocesses: pyiceberg reads its environment configuration once, at import.
    """
    import os

    other = tmp_path / "other"
    other.mkdir()
    env = {
        **os.environ,
        "ICEMOR_HOME": str(tmp_path / "home"),
        "PYICEBERG_CATALOG__OTHER__TYPE": "sql",
        "PYICEBERG_CATALOG__OTHER__URI": f"sqlite:///{other}/cat.db",
        "PYICEBERG_CATALOG__OTHER__WAREHOUSE": (other / "wh").as_uri(),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "icemor", *args], capture_output=True, text=True, env=env, check=False
        )

    assert cli("--catalog", "other", "create-table", "db.t", "--schema-from", str(parquet)).returncode == 0
    assert cli("--catalog", "other", "append", "db.t", str(parquet)).returncode == 0
    counted = cli("--catalog", "other", "count", "db.t")
    assert (counted.returncode, counted.stdout.strip()) == (0, "4")
    assert (other / "cat.db").exists() and (other / "wh" / "db" / "t").is_dir()
    assert cli("count", "db.t").returncode == 2  # the embedded catalog did not get the table
    missing = cli("--catalog", "nope", "count", "db.t")
    assert (
        missing.returncode == 2 and "nope" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    )


def test_delete_prints_metrics_and_reads_back(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    capsys.readouterr()
    assert run(["delete", "db.t", "--where", "cat = 'a'"]) == 0
    out = capsys.readouterr().out
    assert "deleted 2 rows" in out and "1 data files" not in out
    assert run(["count", "db.t"]) == 0
    assert capsys.readouterr().out.strip() == "2"
    assert run(["delete", "db.t", "--where", "id > 100"]) == 0
    assert "nothing committed" in capsys.readouterr().out
    assert run(["delete", "db.t", "--all"]) == 0
    assert "deleted 2 rows" in capsys.readouterr().out
    assert run(["count", "db.t"]) == 0
    assert capsys.readouterr().out.strip() == "0"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["delete", "db.t"], "exactly one of --where EXPR and --all"),
        (["delete", "db.t", "--where", "id > 1", "--all"], "exactly one of"),
        (["delete", "db.t", "--where", "nope = 1"], "nope"),
        (["delete", "db.t", "--where", "id >"], "cannot parse"),
        (["delete", "db.missing", "--all"], "does not exist"),
    ],
)
def test_delete_bad_input_is_one_line_and_changes_nothing(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    capsys.readouterr()
    assert run(argv) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and needle in lines[0], lines
    assert run(["count", "db.t"]) == 0
    assert capsys.readouterr().out.strip() == "4"


def test_files_json_lists_data_and_delete_files(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    assert run(["delete", "db.t", "--where", "id = 2"]) == 0
    capsys.readouterr()
    assert run(["files", "db.t", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan) == 1 and plan[0]["record_count"] == 4 and plan[0]["path"].startswith("file:///")
    [delete] = plan[0]["deletes"]
    assert delete["kind"] == "position" and delete["record_count"] == 1
    assert delete["sequence_number"] > plan[0]["sequence_number"]


def _metadata_file(home: Path, table: str) -> Path:
    from pathlib import Path as _Path

    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("icemor", uri=f"sqlite:///{home}/catalog.db", warehouse=(home / "warehouse").as_uri())
    location = cat.load_table(table).metadata_location
    return _Path(location.removeprefix("file://"))


@pytest.mark.parametrize("damage", ["truncated", "not utf-8", "deleted"])
def test_damaged_metadata_file_is_one_line_naming_it(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A truncated metadata JSON gave "1 validation error for TableMetadataWrapper", no file name."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    path = _metadata_file(home, "db.t")
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "not utf-8":
        path.write_bytes(raw[:40] + b"\xff\xfe" + raw[42:])
    else:
        path.unlink()
    capsys.readouterr()
    for command in ("count", "scan"):
        assert run([command, "db.t"]) == 2
        lines = _err_lines(capsys)
        assert len(lines) == 1, lines
        assert str(path) in lines[0] and "metadata" in lines[0], lines[0]


@pytest.mark.parametrize("where", ["under a regular file", "missing directory", "a directory"])
def test_bad_output_path_is_one_line_naming_it(
    home: Path, parquet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """--output under a regular file gave a NotADirectoryError traceback."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    if where == "under a regular file":
        out = parquet / "out.parquet"
    elif where == "missing directory":
        out = tmp_path / "nope" / "out.csv"
    else:
        out = tmp_path / "dir.jsonl"
        out.mkdir()
    capsys.readouterr()
    assert run(["scan", "db.t", "--output", str(out)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("icemor: error: ") and str(out) in lines[0], lines[0]
    assert not list(tmp_path.glob("**/.*icemor-tmp"))


def test_every_json_option_prints_one_document_and_jsonl_lines(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # snapshots/history --json once printed JSON Lines while the others printed arrays
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    assert run(["delete", "db.t", "--where", "id = 2"]) == 0
    capsys.readouterr()
    # every command with --json (read from the app, so a new one is checked too)
    argv_of = {"namespaces": [], "tables": ["db"]}
    with_json = [
        c.name or get_command_name(c.callback.__name__)
        for c in app.registered_commands
        if c.callback and "as_json" in c.callback.__code__.co_varnames
    ]
    assert {"namespaces", "tables", "describe", "snapshots", "history", "files"} <= set(with_json)
    for command in with_json:
        assert run([command, *argv_of.get(command, ["db.t"]), "--json"]) == 0, command
        out = capsys.readouterr().out
        json.loads(out)  # one document: raises on JSON Lines of more than one value
        assert out.strip().startswith(("[", "{")), command
    for command, count in [("snapshots", 2), ("history", 2), ("files", 1)]:
        assert run([command, "db.t", "--jsonl"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == count, command
        assert all(isinstance(json.loads(line), dict) for line in lines)
    assert run(["snapshots", "db.t", "--json"]) == 0
    snaps = json.loads(capsys.readouterr().out)
    assert [s["operation"] for s in snaps] == ["append", "delete"]


@pytest.mark.parametrize(
    ("given", "names"),
    [(None, []), ("a", ["a"]), (" a, b ,,c ", ["a", "b", "c"]), (["a,b", " c", ""], ["a", "b", "c"])],
)
def test_split_names_of_one_or_repeated_comma_separated_values(
    given: str | list[str] | None, names: list[str]
) -> None:
    assert split_names(given) == names


@pytest.mark.parametrize(
    ("snapshot_id", "line"),
    [(None, "none of db.t: nothing committed (1.235 s)"), (7, "did db.t, snapshot 7 (1.235 s)")],
)
def test_a_committing_command_ends_its_line_one_way(
    snapshot_id: int | None, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    echo_commit(
        SimpleNamespace(snapshot_id=snapshot_id, seconds=1.23456), done="did db.t, ", nothing="none of db.t: "
    )
    assert capsys.readouterr().out == line + "\n"
