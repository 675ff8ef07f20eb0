"""Fault injection on the read path: every damaged file ends in the right rows or one clean error.

Iceberg Java writes small tables (v2 with position and equality deletes, v3 with deletion
vectors). Each of their files (data, position delete, equality delete, DV, data and delete
manifests, manifest list, metadata JSON) is in turn truncated, byte-flipped and deleted, and
``icemor scan`` and ``icemor count`` run on the damaged table through the CLI. Every case
must end either with exit 0 and exactly the intact table's rows (or count), or with exit 2
and one ``icemor: error:`` line on stderr: no traceback, no wrong values.

Cases run in-process (``run``) with icemor's delete cache cleared, restoring the file after
each; the long-filter tests, where a native crash is the failure, run the CLI in a subprocess.

Every case runs twice, once with the equality verdict store off and once with a warm store
(``icemor.io.verdicts``, filled by reading the intact tables first, kept warm by restoring
each file with its modification time): a fresh process with verdicts on disk must notice
the same damage, not answer from the store. The session's store is never used here, so the
outcome does not depend on which tests ran before.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run
from icemor.io.cache import DELETE_CACHE
from oracle import local_path

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

_counter = itertools.count(1)


@dataclass(frozen=True)
class Target:
    table: str
    kind: str
    path: Path


def _targets(catalog: SqlCatalog, name: str) -> dict[str, Path]:
    """One file of each kind the table has, by kind (data file: one that has deletes)."""
    from pyiceberg.manifest import ManifestContent

    table = icemor.load_table(name, catalog=catalog)
    planned = table.scan().plan_files()
    out: dict[str, Path] = {}
    for pf in planned:
        if pf.delete_files:
            out.setdefault("data", local_path(pf.data_file.path))
        for d in pf.delete_files:
            out.setdefault(d.kind, local_path(d.path))
    snapshot = table.pyiceberg.current_snapshot()
    assert snapshot is not None
    for m in snapshot.manifests(table.io):
        kind = "data manifest" if m.content == ManifestContent.DATA else "delete manifest"
        out.setdefault(kind, local_path(m.manifest_path))
    out["manifest list"] = local_path(snapshot.manifest_list)
    out["metadata"] = local_path(table.pyiceberg.metadata_location)
    return out


def _flip_offset(kind: str, path: Path) -> int:
    """Where a byte flips: inside the ``id`` column's pages for Parquet files, else mid-file.

    Parquet pages carry CRCs (Java writes them); the footer does not (see docs/reliability.md).
    """
    if path.suffix == ".parquet":
        md = pq.ParquetFile(path).metadata
        col = md.row_group(0).column(0)
        start = col.dictionary_page_offset or col.data_page_offset
        return int(start + col.total_compressed_size * 3 // 4)
    return path.stat().st_size // 2


def _truncate(kind: str, path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(kind: str, path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[_flip_offset(kind, path)] ^= 0x55
    path.write_bytes(bytes(data))


def _delete(kind: str, path: Path) -> None:
    path.unlink()


FAULTS: dict[str, Callable[[str, Path], None]] = {
    "truncated": _truncate,
    "flipped": _flip,
    "deleted": _delete,
}


def _rows(path: Path) -> list[tuple[object, ...]]:
    t = pq.read_table(path)
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def _outcome(
    argv: list[str], capsys: pytest.CaptureFixture[str], check: Callable[[str], bool]
) -> tuple[str, str]:
    """('right' | 'clean error' | 'BAD', detail) of one CLI run."""
    DELETE_CACHE.clear()  # a fresh process would decode the damaged delete file again
    capsys.readouterr()
    try:
        code = run(argv)
    except BaseException as e:  # a traceback is the failure being counted
        return "BAD", f"raised {type(e).__name__}: {e}"[:300]
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.strip()]
    if code == 2 and len(err) == 1 and err[0].startswith("icemor: error: ") and "Traceback" not in err[0]:
        return "clean error", err[0]
    if code == 0 and not err and check(captured.out):
        return "right", ""
    return "BAD", f"exit {code}, stderr {err[:3]}, stdout {captured.out[-200:]!r}"


@pytest.fixture(scope="module")
def tables(oracle: IcebergJava, catalog: SqlCatalog) -> dict[str, tuple[list[tuple[object, ...]], list[str]]]:
    """name -> (the intact rows as Iceberg Java reads them, kinds of file to damage)."""
    ns = f"fault_{next(_counter)}"
    catalog.create_namespace(ns)
    v2, v3 = f"{ns}.v2", f"{ns}.v3"
    for name, version in ((v2, 2), (v3, 3)):
        oracle.create_table(name, "id BIGINT, data STRING", format_version=version)
        oracle.sql(
            f"INSERT INTO {oracle.qualified(name)} "
            "SELECT /*+ REPARTITION(2) */ id, concat('row-', id) FROM range(0, 4000)"
        )
        oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id % 7 = 3")
    ids = oracle.field_ids(v2)
    oracle.write_equality_deletes(v2, pa.table({"id": pa.array([5, 6, 100], pa.int64())}), [ids["id"]])
    out = {}
    for name in (v2, v3):
        kinds = sorted(_targets(catalog, name))
        out[name] = (oracle.rows(name), kinds)
    assert out[v2][1] == sorted(
        ["data", "position", "equality", "data manifest", "delete manifest", "manifest list", "metadata"]
    )
    assert out[v3][1] == sorted(
        ["data", "dv", "data manifest", "delete manifest", "manifest list", "metadata"]
    )
    return out


def _warm(
    tables: dict[str, tuple[list[tuple[object, ...]], list[str]]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    store: Path,
) -> None:
    """Scan every intact table, so the store holds their equality verdicts."""
    for name, (expected, _) in tables.items():
        out = tmp_path / f"warm-{name}.parquet"

        def intact(_: str, out: Path = out, expected: list[tuple[object, ...]] = expected) -> bool:
            return _rows(out) == expected

        assert _outcome(["scan", name, "--output", str(out)], capsys, intact)[0] == "right"
    assert [p for p in store.glob("*/*") if p.is_file()], "nothing stored: the warm runs are not warm"
    # a fresh process reads the equality-deleted table from the store: no equality set decoded
    v2 = next(n for n in tables if n.endswith(".v2"))
    n = len(tables[v2][0])
    assert _outcome(["count", v2, "--where", "id >= 0"], capsys, lambda s: s.strip() == str(n))[0] == "right"
    assert DELETE_CACHE.loads["equality-set"] == 0


@pytest.mark.parametrize("store", ["store off", "warm store"])
def test_every_damaged_file_gives_the_right_rows_or_one_clean_error(
    tables: dict[str, tuple[list[tuple[object, ...]], list[str]]],
    catalog: SqlCatalog,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: str,
) -> None:
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE_BYTES", raising=False)
    if store == "store off":
        monkeypatch.setenv("ICEMOR_VERDICT_CACHE", "0")
    else:
        monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
        monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(tmp_path / "verdicts"))
        _warm(tables, capsys, tmp_path, tmp_path / "verdicts")
    results: list[tuple[str, str, str, str, str, str]] = []
    for name, (expected, _) in tables.items():
        for kind, path in sorted(_targets(catalog, name).items()):
            for fault, damage in FAULTS.items():
                backup = tmp_path / "backup"
                shutil.copy2(path, backup)  # with its modification time: the store stays warm
                damage(kind, path)
                try:
                    out = tmp_path / f"out-{len(results)}.parquet"

                    def scan_ok(
                        _: str, out: Path = out, expected: list[tuple[object, ...]] = expected
                    ) -> bool:
                        return _rows(out) == expected

                    def count_ok(stdout: str, n: int = len(expected)) -> bool:
                        return stdout.strip() == str(n)

                    for command, argv, check in (
                        ("scan", ["scan", name, "--output", str(out)], scan_ok),
                        ("count", ["count", name], count_ok),
                    ):
                        outcome, detail = _outcome(argv, capsys, check)
                        if outcome == "clean error" and path.name not in detail:
                            outcome, detail = "BAD", f"error does not name {path.name}: {detail}"
                        if fault != "flipped" and outcome == "right":
                            # a missing or cut file must never go unnoticed, not even by count
                            outcome, detail = "BAD", "a number/rows although the file is damaged"
                        results.append((name, kind, fault, command, outcome, detail))
                finally:
                    shutil.copy2(backup, path)
    # the restored table reads intact again (from the store, when it is warm)
    for name, (expected, _) in tables.items():
        n = len(expected)
        assert _outcome(["count", name], capsys, lambda s, n=n: s.strip() == str(n))[0] == "right"
        if store == "warm store":
            assert DELETE_CACHE.loads["equality-set"] == 0

    tried = len(results)
    clean = sum(r[4] == "clean error" for r in results)
    right = sum(r[4] == "right" for r in results)
    bad = [r for r in results if r[4] == "BAD"]
    with capsys.disabled():
        print(
            f"\nfault injection ({store}): {tried} tried, {clean} clean errors, {right} right results, "
            f"{len(bad)} bad"
        )
        for r in results:
            print("  ", " | ".join(r[:5]), "|", r[5][:160])
    assert tried == 2 * 3 * (7 + 6)
    assert not bad, "\n".join(" | ".join(r) for r in bad)
    assert clean >= 2 * 2 * (7 + 6)  # at least every truncated and deleted file


def _long_or(n: int) -> str:
    return " or ".join(f"id = {i}" for i in range(n))


# 10,000 terms fit in one command-line argument (Linux caps one at 128 KiB); 50,000 do not,
# so that run passes the filter through a file to run() in the child. pyiceberg's parser
# takes ~0.5 ms per term, so 50,000 terms are parsed in ~25 s: count only.
@pytest.mark.parametrize(("terms", "command"), [(10_000, "count"), (10_000, "scan"), (50_000, "count")])
def test_long_or_filter_in_a_subprocess(
    tables: dict[str, tuple[list[tuple[object, ...]], list[str]]], command: str, terms: int, tmp_path: Path
) -> None:
    """A 10,000-term OR once crashed the process (exit 139, nothing on stderr)."""
    name = next(n for n in tables if n.endswith(".v2"))
    expected = [r for r in tables[name][0] if isinstance(r[0], int) and r[0] < terms]
    out = tmp_path / "out.parquet"
    argv = [command, name]
    if command == "scan":
        argv += ["--output", str(out)]
    if terms <= 10_000:
        cmd = [sys.executable, "-m", "icemor", *argv, "--where", _long_or(terms)]
    else:
        where = tmp_path / "where.txt"
        where.write_text(_long_or(terms))
        code = (
            "import sys, pathlib; from icemor.cli import run; "
            f"sys.exit(run({argv!r} + ['--where', pathlib.Path({str(where)!r}).read_text()]))"
        )
        cmd = [sys.executable, "-c", code]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ}, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.strip() == ""
    if command == "count":
        assert proc.stdout.strip() == str(len(expected))
    else:
        assert _rows(out) == expected


def test_long_filter_that_cannot_become_in_is_read_in_pieces(
    tables: dict[str, tuple[list[tuple[object, ...]], list[str]]], tmp_path: Path
) -> None:
    """10,000 ANDed inequalities stay 10,000 predicates: evaluated in pieces, not one Arrow tree."""
    name = next(n for n in tables if n.endswith(".v2"))
    expected = [r for r in tables[name][0] if isinstance(r[0], int) and r[0] % 2 == 0]
    where = tmp_path / "where.txt"
    where.write_text(" and ".join(f"id != {i}" for i in range(1, 10_000, 2)) + " and id < 10000")
    code = (
        "import sys, pathlib; from icemor.cli import run; "
        f"sys.exit(run(['count', {name!r}, '--where', pathlib.Path({str(where)!r}).read_text()]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert (proc.returncode, proc.stderr.strip(), proc.stdout.strip()) == (0, "", str(len(expected)))
