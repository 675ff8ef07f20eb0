"""The everyday CLI and its Python API: browsing, history, lifecycle, real-world input, output, errors."""

from __future__ import annotations

import csv
import datetime
import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

import icemor
from icemor.cli import run


def _pyiceberg_catalog(home: Path) -> SqlCatalog:
    """The embedded catalog opened directly with pyiceberg: the independent view of the truth."""
    return SqlCatalog(
        "icemor", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )


@pytest.fixture
def table(home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    capsys.readouterr()
    return "db.t"


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("icemor: error: ")
    assert captured.out == "", captured.out
    return lines[0]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "icemor", *args], capture_output=True, env=env, check=False)


# --------------------------------------------------------------------------------- browsing


def test_namespaces_and_tables(home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("db.b", "db.a", "other.c"):
        assert run(["create-table", name, "--schema-from", str(parquet)]) == 0
    _pyiceberg_catalog(home).create_namespace("empty")
    capsys.readouterr()
    assert run(["namespaces"]) == 0
    assert capsys.readouterr().out.split() == ["db", "empty", "other"]
    assert run(["tables"]) == 0
    assert capsys.readouterr().out.split() == ["db.a", "db.b", "other.c"]
    assert run(["tables", "db", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ["db.a", "db.b"]
    assert run(["tables", "empty"]) == 0
    assert capsys.readouterr().out == ""
    assert icemor.list_namespaces() == ["db", "empty", "other"]
    assert icemor.list_tables("other") == ["other.c"]


def test_tables_of_a_missing_namespace(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tables", "nope"]) == 2
    assert "namespace 'nope' does not exist" in _one_error(capsys)


def test_describe(home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["create-table", "db.t", "--schema-from", str(parquet), "--partition-by", "day(ts),bucket(4,id)"]
    assert run([*argv, "--property", "owner=me"]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    capsys.readouterr()
    truth = _pyiceberg_catalog(home).load_table("db.t")
    assert run(["describe", "db.t"]) == 0
    out = capsys.readouterr().out
    for f in truth.schema().fields:
        assert any(line.split()[:2] == [str(f.field_id), f.name] for line in out.splitlines()), f
    assert truth.metadata.location in out
    assert str(truth.metadata.current_snapshot_id) in out
    assert "owner=me" in out and "format version   2" in out
    assert "day(ts)" in out and "bucket[4](id)" in out

    d = icemor.load_table("db.t").describe()
    assert [(f.field_id, f.name, f.required) for f in d.fields] == [
        (f.field_id, f.name, f.required) for f in truth.schema().fields
    ]
    assert d.current_snapshot_id == truth.metadata.current_snapshot_id
    assert d.format_version == 2 and d.properties["owner"] == "me"
    assert run(["describe", "db.t", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["location"] == truth.metadata.location


def test_snapshots_and_history(table: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["delete", table, "--where", "id = 2"]) == 0
    truth = _pyiceberg_catalog(home).load_table(table)
    first, second = truth.snapshots()
    truth.manage_snapshots().create_tag(first.snapshot_id, "v1").commit()
    capsys.readouterr()

    assert run(["snapshots", table, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)  # one JSON document
    assert [r["snapshot_id"] for r in rows] == [first.snapshot_id, second.snapshot_id]
    assert [r["parent_id"] for r in rows] == [None, first.snapshot_id]
    assert [r["operation"] for r in rows] == ["append", "delete"]
    assert rows[0]["added_records"] == 4 and rows[0]["total_records"] == 4
    assert rows[1]["added_delete_files"] == int(second.summary["added-delete-files"]) == 1  # type: ignore[index]
    assert rows[1]["added_position_deletes"] == 1
    assert "tag v1" in rows[0]["refs"] and "branch main" in rows[1]["refs"]
    assert rows[1]["is_current"] and not rows[0]["is_current"]

    assert run(["snapshots", table]) == 0
    out = capsys.readouterr().out
    assert str(first.snapshot_id) in out and "tag v1" in out

    assert run(["history", table]) == 0
    out = capsys.readouterr().out
    assert str(second.snapshot_id) in out and "delete" in out
    h = icemor.load_table(table).history()
    assert [(e.snapshot_id, e.is_current_ancestor) for e in h] == [
        (first.snapshot_id, True),
        (second.snapshot_id, True),
    ]
    assert [e.made_current_at_ms for e in h] == [e.timestamp_ms for e in truth.metadata.snapshot_log]

    # a snapshot id from the listing works with --snapshot-id
    assert run(["count", table, "--snapshot-id", str(rows[0]["snapshot_id"])]) == 0
    assert capsys.readouterr().out.strip() == "4"


@pytest.mark.parametrize("command", ["describe", "snapshots", "history", "drop-table"])
def test_browsing_a_missing_table(home: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([command, "db.nope"]) == 2
    assert "does not exist" in _one_error(capsys)


def test_version() -> None:
    import importlib.metadata

    proc = _cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.decode().strip() == f"icemor {importlib.metadata.version('icemor')}"


# -------------------------------------------------------------------------------- lifecycle


def test_drop_table_keeps_files_unless_purge(
    table: str, home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = Path(_pyiceberg_catalog(home).load_table(table).metadata.location.removeprefix("file://"))
    data = sorted((location / "data").rglob("*.parquet"))
    assert data
    assert run(["drop-table", table]) == 0
    assert run(["count", table]) == 2
    assert all(p.exists() for p in data)
    assert table not in icemor.list_tables("db")

    assert run(["create-table", "db.p", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.p", str(parquet)]) == 0
    p_loc = Path(_pyiceberg_catalog(home).load_table("db.p").metadata.location.removeprefix("file://"))
    p_files = sorted(p_loc.rglob("*.*"))
    assert any(p.suffix == ".parquet" for p in p_files)
    icemor.drop_table("db.p", purge=True)
    assert not any(p.exists() for p in p_files)
    assert icemor.list_tables("db") == []
    capsys.readouterr()
    assert run(["drop-table", "db.p", "--purge"]) == 2
    assert "does not exist" in _one_error(capsys)


def test_add_files_registers_without_copying(
    table: str, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = tmp_path / "extra.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([10, 11], pa.int64()),
                "cat": ["x", "y"],
                "ts": pa.array([5, 6], pa.timestamp("us")),
            }
        ),
        extra,
    )
    assert run(["add-files", table, str(extra)]) == 0
    assert "2 rows" in capsys.readouterr().out
    truth = _pyiceberg_catalog(home).load_table(table)
    paths = {t.file.file_path for t in truth.scan().plan_files()}
    assert str(extra) in paths  # referenced where it lies
    assert run(["count", table, "--where", "cat = 'y'"]) == 0
    assert capsys.readouterr().out.strip() == "1"
    assert run(["add-files", table, str(extra)]) == 2  # already in the table
    assert "already referenced" in _one_error(capsys)


@pytest.mark.parametrize(
    ("columns", "needle"),
    [
        ({"id": pa.array(["1"], pa.string())}, "id"),
        ({"id": pa.array([1], pa.int64()), "zzz": pa.array([1], pa.int64())}, "zzz"),
    ],
)
def test_add_files_schema_mismatch(
    table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], columns: dict[str, pa.Array], needle: str
) -> None:
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), bad)
    assert run(["add-files", table, str(bad)]) == 2
    line = _one_error(capsys)
    assert "do not match the schema" in line and needle in line
    assert run(["count", table]) == 0
    assert capsys.readouterr().out.strip() == "4"


def test_add_files_missing(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["add-files", table, "/nope/missing.parquet"]) == 2
    assert "no such file: /nope/missing.parquet" in _one_error(capsys)


# ----------------------------------------------------------------------- what users have


def test_pandas_written_parquet_round_trips(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pandas writes timestamp[ns]: create-table and append take it, stored as microseconds."""
    import pandas as pd

    df = pd.DataFrame(
        {
            "id": [1, 2, 3],
            "ts": pd.to_datetime(
                ["2024-01-01 10:00:00.123456", "2024-02-01 00:00:00", "2024-03-01 23:59:59"], format="ISO8601"
            ),
            "tz": pd.to_datetime(["2024-01-01", "2024-02-01", "2024-03-01"], utc=True),
            "s": ["a", None, "c"],
        }
    )
    path = tmp_path / "pandas.parquet"
    df.to_parquet(path)
    assert pq.read_schema(path).field("ts").type == pa.timestamp("ns")  # really pandas' nanoseconds

    assert run(["create-table", "db.pd", "--schema-from", str(path), "--partition-by", "month(ts)"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("icemor: note:") and "ts, tz" in err[0]
    assert run(["append", "db.pd", str(path)]) == 0
    capsys.readouterr()
    got = icemor.load_table("db.pd").scan().to_arrow().sort_by("id")
    assert got.schema.field("ts").type == pa.timestamp("us")
    assert got.schema.field("tz").type == pa.timestamp("us", tz="UTC")
    expected = pa.Table.from_pandas(df, preserve_index=False)
    for name in ("id", "s"):
        assert got.column(name).to_pylist() == expected.column(name).to_pylist()
    for name in ("ts", "tz"):
        assert got.column(name).to_pylist() == [t.to_pydatetime() for t in df[name]]


def test_append_of_sub_microsecond_nanos_truncates_with_one_note(
    table: str,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nanosecond digits are floored to the microsecond (docs/semantics.md, "Input rows"), across
    chunks, with one note for the command counting the values that lost digits."""
    import icemor.ops.append as append_mod

    monkeypatch.setattr(append_mod, "BATCH_ROWS", 2)
    path = tmp_path / "ns.parquet"
    ns = [0, 1_000, -2_999, 3_001]  # two have nanosecond digits, one before the epoch
    pq.write_table(
        pa.table(
            {
                "id": pa.array([11, 12, 13, 14], pa.int64()),
                "cat": ["a"] * 4,
                "ts": pa.array(ns, pa.timestamp("ns")),
            }
        ),
        path,
    )
    assert run(["append", table, str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("icemor: note:") == 1 and "2 nanosecond timestamp value(s)" in err, err
    got = icemor.load_table(table).scan(row_filter="id > 10").to_arrow().sort_by("id")
    assert got.column("ts").cast(pa.int64()).to_pylist() == [0, 1, -3, 3]  # microseconds, floored


def test_append_streams_in_bounded_chunks_and_commits_once(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import icemor.ops.append as append_mod

    held: list[int] = []
    monkeypatch.setattr(append_mod, "BATCH_ROWS", 3)
    monkeypatch.setattr(append_mod, "observe_chunk", held.append)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), a, row_group_size=4)
    pq.write_table(pa.table({"id": pa.array(range(100, 107), pa.int64())}), b)
    assert run(["create-table", "db.s", "--schema-from", str(a)]) == 0
    assert run(["append", "db.s", str(a), str(b)]) == 0
    assert "appended 17 rows" in capsys.readouterr().out
    assert max(held) <= 3 and sum(held) == 17
    truth = _pyiceberg_catalog(home).load_table("db.s")
    assert len(truth.snapshots()) == 1  # one commit
    assert sorted(truth.scan().to_arrow().column("id").to_pylist()) == [*range(10), *range(100, 107)]


@pytest.mark.parametrize(
    ("columns", "needles"),
    [
        ({"id": pa.array(["x"], pa.string())}, ["id", "string"]),
        ({"id": pa.array([1], pa.int64()), "extra": pa.array([1], pa.int64())}, ["extra"]),
    ],
)
def test_append_schema_mismatch_names_the_fields(
    table: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    columns: dict[str, pa.Array],
    needles: list[str],
) -> None:
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), bad)
    assert run(["append", table, str(bad)]) == 2
    line = _one_error(capsys)  # also: nothing on stdout
    assert "does not match the schema" in line and all(n in line for n in needles), line
    assert "Mismatch in fields" not in line


# --------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("where", "needles"),
    [
        ("id >> 4", ["column 5", "expected a value"]),
        ("id = ", ["at the end", "expected a value"]),
        ("cat = abc", ["unknown column 'abc'", "quotes: 'abc'"]),
        ("id > 1 foo", ["column 8", "'and', 'or'"]),
    ],
)
def test_bad_filter_says_where_in_plain_words(
    table: str, capsys: pytest.CaptureFixture[str], where: str, needles: list[str]
) -> None:
    assert run(["scan", table, "--where", where]) == 2
    line = _one_error(capsys)
    assert len(line) < 200 and ("cannot parse row filter" in line or "invalid row filter" in line)
    assert all(n in line for n in needles), line


def test_date_literal_against_a_timestamp_means_midnight(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # ts values: 1970-01-01 00:00:00, 00:00:00.000003, 1970-01-02, 1970-01-03
    assert run(["count", table, "--where", "ts >= '1970-01-02'"]) == 0
    assert capsys.readouterr().out.strip() == "2"
    assert run(["count", table, "--where", "ts = '1970-01-02'"]) == 0
    assert capsys.readouterr().out.strip() == "1"
    assert run(["count", table, "--where", "ts in ('1970-01-01', '1970-01-03')"]) == 0
    assert capsys.readouterr().out.strip() == "2"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["scan", "db.t", "--snapshot-id", "1", "--ref", "main"],
            "--snapshot-id, --as-of-timestamp and --ref",
        ),
        (["count", "db.t", "--as-of-timestamp", "1", "--ref", "main"], "--snapshot-id, --as-of-timestamp"),
        (["scan", "db.t", "--output", "/no/such/dir/out.csv"], "cannot write /no/such/dir/out.csv"),
        (["scan", "db.t", "--format", "csv"], "--format needs --output"),
        (["scan", "db.t", "--output", "-"], "--output - needs --format"),
    ],
)
def test_more_one_line_errors(
    table: str, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert run(argv) == 2
    line = _one_error(capsys)
    assert needle in line and "icemor-tmp" not in line


# --------------------------------------------------------------------------------- output


def test_output_refuses_to_overwrite(table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.csv"
    out.write_text("precious\n")
    assert run(["scan", table, "--output", str(out)]) == 2
    assert "--overwrite" in _one_error(capsys)
    assert out.read_text() == "precious\n"
    assert run(["scan", table, "--output", str(out), "--overwrite"]) == 0
    assert len(out.read_text().splitlines()) == 5


def test_timestamps_print_the_same_in_csv_and_jsonl(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    when = [datetime.datetime(2024, 2, 1, 10, 0, 0), datetime.datetime(2024, 2, 1, 10, 0, 0, 123456)]
    src = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "ts": pa.array(when, pa.timestamp("us")),
                "tz": pa.array([w.replace(tzinfo=datetime.UTC) for w in when], pa.timestamp("us", tz="UTC")),
            }
        ),
        src,
    )
    assert run(["create-table", "db.ts", "--schema-from", str(src)]) == 0
    assert run(["append", "db.ts", str(src)]) == 0
    c, j = tmp_path / "o.csv", tmp_path / "o.jsonl"
    assert run(["scan", "db.ts", "--output", str(c)]) == 0
    assert run(["scan", "db.ts", "--output", str(j)]) == 0
    from_csv = sorted((r["ts"], r["tz"]) for r in csv.DictReader(c.open()))
    from_json = sorted((r["ts"], r["tz"]) for r in map(json.loads, j.read_text().splitlines()))
    assert from_csv == from_json
    iso = sorted(
        (
            w.isoformat(timespec="microseconds"),
            w.replace(tzinfo=datetime.UTC).isoformat(timespec="microseconds"),
        )
        for w in when
    )
    assert from_csv == iso


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_output_dash_streams_to_stdout(table: str, home: Path, fmt: str) -> None:
    proc = _cli("scan", table, "--where", "id > 1", "--output", "-", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    if fmt == "parquet":
        ids = pq.read_table(io.BytesIO(proc.stdout)).column("id").to_pylist()
    elif fmt == "csv":
        ids = [int(r["id"]) for r in csv.DictReader(io.StringIO(proc.stdout.decode()))]
    else:
        ids = [json.loads(line)["id"] for line in proc.stdout.decode().splitlines()]
    assert sorted(ids) == [2, 3, 4]


def test_display_cap_is_adjustable_with_limit(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "many.parquet"
    pq.write_table(pa.table({"id": pa.array(range(1_005), pa.int64())}), src)
    assert run(["create-table", "db.m", "--schema-from", str(src)]) == 0
    assert run(["append", "db.m", str(src)]) == 0
    capsys.readouterr()

    def shown(*extra: str) -> tuple[int, str]:
        assert run(["scan", "db.m", *extra]) == 0
        out = capsys.readouterr().out
        return sum(1 for line in out.splitlines() if line.startswith("│")), out

    n, out = shown()
    assert n == 1_000 and "display limit" in out and "--limit" in out
    n, out = shown("--limit", "1003")
    assert n == 1_003
    n, out = shown("--limit", "2000")
    assert n == 1_005 and "display limit" not in out


def test_files_shows_every_path_in_one_uri_form(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["delete", table, "--where", "id = 2"]) == 0
    capsys.readouterr()
    assert run(["files", table]) == 0
    out = capsys.readouterr().out
    assert "position" in out  # a delete file is listed
    assert out.count("file:") >= 2 and out.count("file:") == out.count("file:///")


def test_readme_lists_every_command() -> None:
    from icemor.cli.app import app

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    cli_section = readme[readme.index("icemor [--catalog NAME]") :]
    names = [c.name or c.callback.__name__ for c in app.registered_commands]  # type: ignore[union-attr]
    assert names
    for name in names:
        assert f"\n  {name} " in cli_section or f"\n  {name}\n" in cli_section, name


@pytest.mark.oracle
def test_spark_engine_prints_no_warn_lines_unless_debug(table: str, home: Path) -> None:
    """A plain --engine spark run prints the answer and nothing on stderr; --debug shows Spark's WARN
    lines (which proves this machine has some to hide)."""
    import os

    from oracle import load_oracle_env

    env = {**os.environ, "JAVA_HOME": load_oracle_env()["java_home"], "ICEMOR_SPARK_MASTER": "local[1]"}
    env.pop("SPARK_LOCAL_IP", None)
    plain = _cli("--engine", "spark", "count", table, env=env)
    assert (plain.returncode, plain.stdout.decode().strip()) == (0, "4"), plain.stderr
    assert plain.stderr.decode().strip() == ""
    debug = _cli("--debug", "--engine", "spark", "count", table, env=env)
    assert debug.returncode == 0 and " WARN " in debug.stderr.decode()
