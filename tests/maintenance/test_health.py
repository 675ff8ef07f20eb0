"""`Table.inspect` / `icemor inspect`: the health report's figures on a table whose deletes are known.

Every expected number below is worked out by hand from how the table is built, and the score
from the formula of docs/health.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(lo, hi), pa.int64()), "v": pa.array([f"r{i}" for i in range(lo, hi)])}
    )


@pytest.fixture
def known(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """db.h: 4 data files of 1000 rows (file i holds ids i*1000..i*1000+999); a DELETE of 10 rows
    in each of files 0-2 (3 file-scoped position-delete files, 30 positions); then one CDC batch
    deleting 54 keys: 3000-3049 (50 live rows of file 3), id 0 (already deleted) and 3 absent ids.
    """
    first = tmp_path / "f0.parquet"
    pq.write_table(_rows(0, 1000), first)
    assert run(["create-table", "db.h", "--schema-from", str(first)]) == 0
    t = icemor.load_table("db.h")
    for i in range(4):
        path = tmp_path / f"f{i}.parquet"
        pq.write_table(_rows(i * 1000, i * 1000 + 1000), path)
        t.append_files([path])
    t.delete("id % 100 = 0 and id < 3000")
    keys = [*range(3000, 3050), 0, 9997, 9998, 9999]
    t.apply_changes(
        pa.table({"id": pa.array(keys, pa.int64()), "v": [None] * len(keys), "op": ["D"] * len(keys)}),
        key=["id"],
        allow_nullable_key=True,
    )
    capsys.readouterr()
    return "db.h"


def test_report_numbers_are_exact(known: str) -> None:
    t = icemor.load_table(known)
    assert t.scan().count() == 4000 - 30 - 50  # the table is what the fixture says
    r = t.inspect()
    h = r.table
    assert (h.data_files, h.data_rows, h.small_files) == (4, 4000, 4)
    assert h.delete_files["position"].files == 3 and h.delete_files["position"].records == 30
    assert h.delete_files["dv"].files == 0 and h.delete_files["equality_partition"].files == 0
    assert (h.delete_files["equality_global"].files, h.delete_files["equality_global"].records) == (1, 54)
    assert h.position_deleted_rows == 30
    assert h.equality_deleted_rows is None and h.deleted_rows == 30  # needs a scan: not counted
    assert h.live_equality_keys == 54 and h.equality_probed_rows == 4000
    # files 0-2: a position-delete file and the equality delete; file 3: the equality delete
    amp = h.read_amplification
    assert (amp.min, amp.median, amp.mean, amp.max) == (1.0, 2.0, 1.75, 2.0)
    assert h.dangling_delete_files == 0
    # docs/health.md: 35*min(1, 0.0075/0.2) + 25*1 + 15*(0.75/4) + 0 + 10*(4-1)/4
    assert h.penalties == {
        "delete_ratio": 1.31,
        "equality_deletes": 25.0,
        "read_amplification": 2.81,
        "dangling_deletes": 0.0,
        "small_files": 7.5,
    }
    assert h.score == 63.4 == r.to_json()["score"]
    assert any("--exact" in n for n in r.notes)
    assert r.deleted_fraction_histogram == (4, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert dict(r.amplification_histogram) == {1: 1, 2: 3}
    assert [x.action for x in r.recommendations] == [
        "equality-to-position",
        "compact-position-deletes",
        "rewrite-data-files",
        "optimize",
    ]
    assert r.recommendations[0].command == "icemor compact db.h --equality-to-position"
    # history: create has no snapshot; 4 appends, the delete, the CDC batch
    assert [p.operation for p in r.history] == ["append"] * 4 + ["delete", "overwrite"]
    assert [p.total_delete_files for p in r.history] == [0, 0, 0, 0, 3, 4]

    e = t.inspect(exact=True).table
    # id 0 was deleted by position already: the equality delete removes 50 more rows, not 51
    assert (e.equality_deleted_rows, e.deleted_rows, e.live_rows) == (50, 80, 3920)
    assert e.delete_ratio == 0.02
    assert e.penalties["delete_ratio"] == 3.5 and e.score == 61.2


def test_inspect_an_older_snapshot_and_dangling(known: str) -> None:
    t = icemor.load_table(known)
    delete_snapshot = t.history()[4].snapshot_id
    h = t.inspect(snapshot_id=delete_snapshot).table
    assert (h.position_deleted_rows, h.live_equality_keys, h.delete_files["equality_global"].files) == (
        30,
        0,
        0,
    )
    assert h.penalties["equality_deletes"] == 0.0
    # pyiceberg's copy-on-write delete drops file 0 whole and leaves its position deletes dangling
    t.pyiceberg.delete("id < 1000")
    t.refresh()
    h = t.inspect().table
    assert h.data_files == 3
    assert h.dangling_delete_files == 1 and h.dangling_delete_bytes > 0
    assert h.penalties["dangling_deletes"] == round(15 * 1 / 4, 2)


def test_cli_json_schema(known: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["inspect", known, "--json", "--exact"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["exact"] is True and doc["score"] == 61.2
    assert set(doc) == {
        "schema_version", "table_name", "snapshot_id", "format_version", "exact", "score", "weights",
        "table", "partitions", "recommendations", "history", "deleted_fraction_histogram",
        "amplification_histogram", "thresholds", "notes",
    }  # fmt: skip
    assert sum(doc["weights"].values()) == 100
    part = doc["partitions"][0]
    assert part["partition"] == "" and part["deleted_rows"] == 80 and part["live_rows"] == 3920
    assert part["delete_files"]["equality_global"] == {
        "files": 1,
        "bytes": part["delete_files"]["equality_global"]["bytes"],
        "records": 54,
    }
    assert part["read_amplification"] == {"min": 1.0, "median": 2.0, "mean": 1.75, "max": 2.0}
    assert run(["inspect", known]) == 0
    out = capsys.readouterr().out
    assert "63.4" in out and "icemor compact db.h --equality-to-position" in out, out
    assert run(["inspect", known, "--snapshot-id", "1"]) == 2
    assert "snapshot 1 does not exist" in capsys.readouterr().err


def _every_transform_row() -> pa.Table:
    """One row, a column per partition transform (pyiceberg's writer refuses two partition fields
    on one source column)."""
    import datetime as dt
    import decimal

    at = dt.datetime(2024, 5, 1, 10, 30, 15)
    utc = at.replace(tzinfo=dt.UTC)
    return pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "s": ["a b"],
            "b": pa.array([b"\x00\x01"], pa.binary()),
            "fx": pa.array([b"ab"], pa.binary(2)),
            "d": pa.array([dt.date(2024, 5, 1)], pa.date32()),
            "ts": pa.array([at], pa.timestamp("us")),
            "tz": pa.array([utc], pa.timestamp("us", tz="UTC")),
            "tm": pa.array([dt.time(10, 30, 15)], pa.time64("us")),
            "dec": pa.array([decimal.Decimal("-3.50")], pa.decimal128(9, 2)),
            "f": pa.array([1.5], pa.float64()),
            "bo": [True],
            "i": pa.array([7], pa.int32()),
            "nul": pa.array([None], pa.int64()),
            "bk": pa.array([34], pa.int64()),
            "tr": ["xyz"],
            "y": pa.array([at], pa.timestamp("us")),
            "m": pa.array([dt.date(2024, 5, 1)], pa.date32()),
            "dd": pa.array([utc], pa.timestamp("us", tz="UTC")),
            "h": pa.array([at], pa.timestamp("us")),
            "v": pa.array([5], pa.int64()),
        }
    )


# the expected rendering, worked out by hand: Iceberg's human strings (Java's
# Transform.toHumanString), as the data file directories name them; bucket(4) of the long 34 is
# the spec's example hash 2017239379 mod 4 = 3
_EVERY_TRANSFORM_LABEL = "/".join(
    [
        "s=a b",
        "b=AAE=",
        "fx=YWI=",
        "d=2024-05-01",
        "ts=2024-05-01T10:30:15",
        "tz=2024-05-01T10:30:15+00:00",
        "tm=10:30:15",
        "dec=-3.50",
        "f=1.5",
        "bo=true",
        "i=7",
        "nul=null",
        "bk_bucket=3",
        "tr_trunc=xy",
        "y_year=2024",
        "m_month=2024-05",
        "dd_day=2024-05-01",
        "h_hour=2024-05-01-10",
        "v_null=null",
    ]
)


def test_partitions_read_as_the_data_file_directories_do(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """inspect (text and JSON, hence the HTML report) and optimize show a partition as `files`
    shows it in the data file paths (`ts_day=2024-05-01`), never as the stored day number, for
    the identity of every type and every transform. (uuid is left out: icemor's writer cannot
    partition by it yet, Arrow cannot group its extension type.)"""
    from urllib.parse import unquote_plus

    fields = ["s", "b", "fx", "d", "ts", "tz", "tm", "dec", "f", "bo", "i", "nul"]
    fields += ["bucket(4,bk)", "truncate(2,tr)", "year(y)", "month(m)", "day(dd)", "hour(h)", "void(v)"]
    t = icemor.create_table("db.every", _every_transform_row(), partition_by=fields)
    t.append(_every_transform_row())  # two small files: optimize plans the partition
    capsys.readouterr()

    assert run(["inspect", "db.every", "--json"]) == 0
    (part,) = json.loads(capsys.readouterr().out)["partitions"]
    assert part["partition"] == _EVERY_TRANSFORM_LABEL
    # the directories `files` lists, unescaped, say the same
    for planned in t.scan().plan_files():
        directory = planned.data_file.path.split("/data/", 1)[1].rsplit("/", 1)[0]
        assert unquote_plus(directory) == _EVERY_TRANSFORM_LABEL
    assert run(["inspect", "db.every"]) == 0
    assert "d=2024-05-01" in capsys.readouterr().out  # the text table (it may wrap the rest)
    (planned_partition,) = t.optimize(dry_run=True).plan.partitions
    assert planned_partition.partition == _EVERY_TRANSFORM_LABEL
