"""Key-index sidecars (icemor.io.key_index) that are not what icemor wrote (issue 51, defects 2 and 3).

- A symlink at a sidecar's path is never followed: the file it points to (outside the table)
  keeps its bytes, a dangling one creates nothing; a FIFO there is never opened for reading, so
  position-mode CDC does not hang on it. Either is replaced by the rebuilt sidecar (a rename
  replaces the link or FIFO itself).
- A forged sidecar changes no result: every key + 1 with its identity metadata kept (rows edited,
  the recorded digest stale), the same forged whole with icemor's own writer (digest recomputed,
  the key bounds then differ from the data file's statistics), and two keys swapped (digest and
  bounds alike: only the comparison with the data file's rows finds it). ``apply_changes(D of id
  100, deletes="position")`` deletes exactly id 100 (the table read back with icemor's scan, and
  once with Iceberg Java, equals the model), and ``icemor check`` reports the forged sidecar and
  removes it.

Each case runs on a v2 and a v3 table (``format-version``). The process caches of key indexes are
cleared before the batch, as in a new process, so that the batch reads the sidecar from disk.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icemor
from icemor.cli import run
from icemor.io import key_index as ki
from icemor.io import key_index_verify
from icemor.io.cache import DELETE_CACHE
from icemor.ops import key_lookup
from oracle import local_path

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icemor.table import Table
    from oracle import IcebergJava

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
)
IDS = range(200)
VERSIONS = [2, 3]


def _changes(rows: list[tuple[str, int, str | None]]) -> pa.Table:
    return pa.table(
        {
            "op": [r[0] for r in rows],
            "id": pa.array([r[1] for r in rows], pa.int64()),
            "v": [r[2] for r in rows],
        }
    )


def _table(catalog: SqlCatalog, ns: str, version: int) -> tuple[Table, str, Path]:
    """A table of ids 0..199 in one data file written by position-mode CDC (with its sidecar);
    returns it, its data file's path and the sidecar's local path."""
    t = icemor.create_table(f"{ns}.t", SCHEMA, format_version=version, catalog=catalog)
    assert t.metadata.format_version == version
    t.apply_changes(_changes([("I", i, f"a{i}") for i in IDS]), key=["id"], deletes="position")
    (data,) = [f.data_file.path for f in t.scan().plan_files()]
    sidecar = local_path(ki.sidecar_path(data, [1]))
    assert sidecar.is_file() and not sidecar.is_symlink()
    return t, data, sidecar


def _new_process() -> None:
    """Forget the key indexes this process holds: the next lookup loads the sidecar from disk."""
    DELETE_CACHE.clear()
    key_lookup._MERGED.clear()


def _delete_100(catalog: SqlCatalog, ns: str) -> None:
    _new_process()
    t = icemor.load_table(f"{ns}.t", catalog=catalog)
    m = t.apply_changes(_changes([("D", 100, None)]), key=["id"], deletes="position")
    assert m.position_deletes == 1 and m.equality_deletes == 0


def _model() -> list[tuple[int, str]]:
    return [(i, f"a{i}") for i in IDS if i != 100]


def _rows(catalog: SqlCatalog, ns: str) -> list[tuple[Any, ...]]:
    t = icemor.load_table(f"{ns}.t", catalog=catalog)
    return sorted((r["id"], r["v"]) for r in t.scan().to_arrow().to_pylist())


def _left_behind(sidecar: Path) -> list[str]:
    """Temporary files of sidecar writes beside the data file (there must be none)."""
    return sorted(p.name for p in sidecar.parent.iterdir() if p.name.endswith(".tmp"))


def _size(data: str) -> int:
    return local_path(data).stat().st_size


def _genuine(data: str, sidecar: Path) -> None:
    """The sidecar now at the path is a regular file that describes the data file, row by row."""
    assert sidecar.is_file() and not sidecar.is_symlink()
    f = ki.IndexedFile(data, _size(data), len(IDS), {})
    assert ki.verify_sidecar(PyArrowFileIO(), f, [1], {1: LongType(), 2: StringType()}) is None
    assert pq.read_table(sidecar).column("k0").to_pylist() == list(IDS)


# ------------------------------------------------------------------------------ not regular files


@pytest.mark.parametrize("target", ["existing", "dangling"])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_symlink_at_the_sidecar_path_is_not_followed(
    catalog: SqlCatalog, ns: str, tmp_path: Path, version: int, target: str
) -> None:
    _, data, sidecar = _table(catalog, ns, version)
    outside = tmp_path / "outside" / "precious.bin"
    outside.parent.mkdir()
    if target == "existing":
        outside.write_bytes(b"bytes that are not icemor's\n" * 10)
    sidecar.unlink()
    sidecar.symlink_to(outside)
    _delete_100(catalog, ns)
    if target == "existing":
        assert outside.read_bytes() == b"bytes that are not icemor's\n" * 10
    else:
        assert not outside.exists()  # nothing created where the link points
    assert sorted(p.name for p in outside.parent.iterdir()) == (
        [outside.name] if target == "existing" else []
    )
    assert _rows(catalog, ns) == _model()
    _genuine(data, sidecar)  # the link itself was replaced by the rebuilt sidecar
    assert _left_behind(sidecar) == []


_FIFO_BATCH = """
import json, sys, time
import pyarrow as pa
import icemor
t = icemor.load_table(sys.argv[1])
changes = pa.table({"op": ["D"], "id": pa.array([100], pa.int64()), "v": pa.array([None], pa.string())})
started = time.monotonic()
m = t.apply_changes(changes, key=["id"], deletes="position")
print(json.dumps({"seconds": time.monotonic() - started, "position_deletes": m.position_deletes}))
"""


@pytest.mark.parametrize("version", VERSIONS)
def test_a_fifo_at_the_sidecar_path_does_not_hang_the_batch(
    catalog: SqlCatalog, ns: str, icemor_home: Path, version: int
) -> None:
    """In a new process (a hung open of a FIFO cannot be interrupted in this one): it finishes
    within seconds, and the FIFO is replaced by the rebuilt sidecar."""
    import json

    _, data, sidecar = _table(catalog, ns, version)
    sidecar.unlink()
    os.mkfifo(sidecar)
    env = {**os.environ, "ICEMOR_HOME": str(icemor_home)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_FIFO_BATCH), f"{ns}.t"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("apply_changes hung on the FIFO at the sidecar's path (killed after 60 s)")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["position_deletes"] == 1
    assert out["seconds"] < 10, out
    assert _rows(catalog, ns) == _model()
    _genuine(data, sidecar)
    assert _left_behind(sidecar) == []


# ---------------------------------------------------------------------------------- forged ones

FORGERIES = ["rows-edited-metadata-kept", "forged-whole-digest-recomputed", "two-keys-swapped"]


def _forge(data: str, sidecar: Path, how: str) -> None:
    """Replace the sidecar by one that lies about the data file, as ``how`` says."""
    if how == "rows-edited-metadata-kept":
        stored = pq.read_table(sidecar)
        plus_one = pc.add(stored.column("k0"), 1)
        forged = stored.set_column(0, "k0", plus_one)
        pq.write_table(forged.replace_schema_metadata(stored.schema.metadata), sidecar)
        return
    keys = list(IDS)
    if how == "forged-whole-digest-recomputed":
        keys = [k + 1 for k in keys]
    else:  # ids 100 and 101 trade places: the same key bounds, the same multiset of keys
        keys[100], keys[101] = keys[101], keys[100]
    index = ki.build_key_index([pa.array(keys, pa.int64())])
    # icemor's own writer: the identity metadata and every digest are those of a genuine sidecar
    assert ki.save_key_index(PyArrowFileIO(), data, _size(data), [1], index) == ki.sidecar_path(data, [1])


@pytest.mark.parametrize("how", FORGERIES)
@pytest.mark.parametrize("version", VERSIONS)
def test_a_forged_sidecar_changes_no_result(
    catalog: SqlCatalog, ns: str, version: int, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, data, sidecar = _table(catalog, ns, version)
    _forge(data, sidecar, how)
    with caplog.at_level(logging.WARNING, logger="icemor.io.key_index"):
        _delete_100(catalog, ns)
    assert _rows(catalog, ns) == _model()  # id 100 gone, id 99 (or 101) kept
    warnings = [r for r in caplog.records if r.name == "icemor.io.key_index" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "rebuilt from its data file" in warnings[0].getMessage(), warnings
    assert "\n" not in warnings[0].getMessage()
    _genuine(data, sidecar)  # stored again, from the data file
    assert _left_behind(sidecar) == []


@pytest.mark.parametrize("how", FORGERIES)
@pytest.mark.parametrize("version", VERSIONS)
def test_check_reports_a_forged_sidecar_and_removes_it(
    catalog: SqlCatalog, ns: str, version: int, how: str
) -> None:
    t, data, sidecar = _table(catalog, ns, version)
    assert t.check().findings == ()  # the genuine sidecar verifies, row by row
    _forge(data, sidecar, how)
    report = icemor.load_table(f"{ns}.t", catalog=catalog).check()
    assert [(f.name, f.severity, f.path) for f in report.findings] == [
        ("key-index-mismatch", "error", ki.sidecar_path(data, [1]))
    ]
    assert not report.clean
    assert "removed" in report.findings[0].message and "\n" not in report.findings[0].message
    assert not sidecar.exists()
    assert icemor.load_table(f"{ns}.t", catalog=catalog).check().clean
    _delete_100(catalog, ns)  # the next batch builds it again
    assert _rows(catalog, ns) == _model()
    _genuine(data, sidecar)


def test_the_cli_check_exits_1_on_a_forged_sidecar(
    catalog: SqlCatalog, ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, data, sidecar = _table(catalog, ns, 3)
    _forge(data, sidecar, "two-keys-swapped")
    capsys.readouterr()
    assert run(["check", f"{ns}.t"]) == 1
    assert "key-index-mismatch" in capsys.readouterr().out
    assert run(["check", f"{ns}.t"]) == 0  # removed by the first check


def test_java_reads_what_a_batch_against_a_forged_sidecar_wrote(
    catalog: SqlCatalog, ns: str, oracle: IcebergJava
) -> None:
    """Iceberg Java reads the table (v3: the deletion vector the batch wrote) as the model says."""
    _, data, sidecar = _table(catalog, ns, 3)
    _forge(data, sidecar, "forged-whole-digest-recomputed")
    _delete_100(catalog, ns)
    assert oracle.rows(f"{ns}.t") == _model()


# ------------------------------------------------------------------ the checks, file by file

FIELD_TYPES = {1: LongType(), 2: StringType()}


def _parquet(path: Path, ids: list[int], *, row_group_size: int | None = None) -> ki.IndexedFile:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"}),
            pa.field("v", pa.string(), metadata={b"PARQUET:field_id": b"2"}),
        ]
    )
    pq.write_table(
        pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=schema), path, row_group_size=row_group_size
    )
    return ki.IndexedFile(str(path), path.stat().st_size, len(ids), {})


def _lookup(
    f: ki.IndexedFile, key_id: int, keys: pa.Array, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], int]:
    """The positions of ``keys`` in a new process, and how many times the index was built from the file."""
    _new_process()
    builds = []
    real = ki._build_from_file

    def counted(*args: Any) -> Any:
        builds.append(1)
        return real(*args)

    with monkeypatch.context() as m:
        m.setattr(ki, "_build_from_file", counted)
        _, positions = ki.key_index(PyArrowFileIO(), f, (key_id,), FIELD_TYPES).lookup([keys])
    return sorted(positions.tolist()), len(builds)


def test_hashed_keys_swapped_in_a_whole_forged_sidecar_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """String keys (the hash index): two keys traded between positions, digest recomputed."""
    f = _parquet(tmp_path / "d.parquet", list(range(10)))
    keys = pa.array(["v3", "v4"])
    assert _lookup(f, 2, keys, monkeypatch) == ([3, 4], 1)
    assert _lookup(f, 2, keys, monkeypatch) == ([3, 4], 0)  # the genuine sidecar is used
    forged = [f"v{i}" for i in range(10)]
    forged[3], forged[4] = "v9", "v3"  # position 4 said to hold v3, position 3 v9
    index = ki.build_key_index([pa.array(forged, pa.large_string())])  # the table's string type
    assert ki.save_key_index(PyArrowFileIO(), f.path, f.size, [2], index) is not None
    assert _lookup(f, 2, keys, monkeypatch) == ([3, 4], 1)  # rebuilt: the data file's positions
    assert ki.verify_sidecar(PyArrowFileIO(), f, [2], FIELD_TYPES) is None
    assert ki.save_key_index(PyArrowFileIO(), f.path, f.size, [2], index) is not None
    assert "position 3" in (ki.verify_sidecar(PyArrowFileIO(), f, [2], FIELD_TYPES) or "")


def test_the_sampled_slice_is_at_the_positions_of_its_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four row groups of 50 rows: a genuine sidecar passes whichever group is sampled; two keys
    swapped in the third group (bounds and digest kept) are found when it is, and always by the
    full check."""
    ids = [(i * 37) % 200 for i in range(200)]  # unsorted: the index stores positions
    f = _parquet(tmp_path / "d.parquet", ids, row_group_size=50)
    assert pq.ParquetFile(f.path).metadata.num_row_groups == 4
    keys = pa.array([ids[120], ids[121]], pa.int64())
    assert _lookup(f, 1, keys, monkeypatch) == ([120, 121], 1)

    class Fixed:
        def __init__(self, group: int) -> None:
            self.group = group

        def randrange(self, n: int) -> int:
            assert n == 4
            return self.group

    for group in range(4):
        monkeypatch.setattr(key_index_verify, "_RANDOM", Fixed(group))
        assert _lookup(f, 1, keys, monkeypatch) == ([120, 121], 0), group
    forged = list(ids)
    forged[120], forged[121] = forged[121], forged[120]
    index = ki.build_key_index([pa.array(forged, pa.int64())])
    assert ki.save_key_index(PyArrowFileIO(), f.path, f.size, [1], index) is not None
    assert "position 120" in (ki.verify_sidecar(PyArrowFileIO(), f, [1], FIELD_TYPES) or "")
    monkeypatch.setattr(key_index_verify, "_RANDOM", Fixed(2))
    assert _lookup(f, 1, keys, monkeypatch) == ([120, 121], 1)


def test_check_reports_a_symlink_at_the_sidecar_path_and_removes_the_link(
    catalog: SqlCatalog, ns: str, tmp_path: Path
) -> None:
    t, _, sidecar = _table(catalog, ns, 2)
    outside = tmp_path / "precious.parquet"
    outside.write_bytes(sidecar.read_bytes())  # even a genuine sidecar, elsewhere, is not followed
    sidecar.unlink()
    sidecar.symlink_to(outside)
    (finding,) = t.check().findings
    assert finding.name == "key-index-mismatch" and "not a regular file" in finding.message
    assert not sidecar.is_symlink() and not sidecar.exists()
    assert outside.read_bytes()[:4] == b"PAR1" and outside.is_file()
