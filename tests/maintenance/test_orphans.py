"""Orphan removal never deletes another table's files: not those of a table nested in this one's
location, nor (when this table is the nested one) those of the table around it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run
from oracle import local_path

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.catalog import Catalog

FAR_FUTURE = "2100-01-01T00:00:00"  # every unreferenced file counts as old enough


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _count(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    code = run(["count", name])
    captured = capsys.readouterr()
    return captured.out.strip() if code == 0 else f"exit {code}: {captured.err.strip()}"


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_a_table_named_into_another_tables_data_folder_loses_no_data(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """create-table "db.t/data" once put a table in db.t's data folder; expiring db.t with
    --remove-orphans then deleted its files. The name is refused now, so nothing is lost."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    capsys.readouterr()
    created = run(["create-table", "db.t/data", "--schema-from", str(parquet)])
    create_err = _err_lines(capsys)
    appended = run(["append", "db.t/data", str(parquet)])
    assert run(["expire", "db.t", "--remove-orphans", "--older-than", FAR_FUTURE]) == 0
    inner = _count("db.t/data", capsys)
    # either the inner table still has its rows, or it was never made: never a lost table
    assert inner == "4" or (created == appended == 2 and "does not exist" in inner), inner
    assert created == 2 and len(create_err) == 1 and "'/'" in create_err[0], create_err
    assert _count("db.t", capsys) == "4"


def _create(catalog: Catalog, name: str, schema_from: Path, location: str | None, **properties: str) -> None:
    """A table made by pyiceberg directly where ``location`` says, bypassing icemor's create check
    (as Iceberg Java's ``LOCATION`` or an older icemor would)."""
    namespace = name.rpartition(".")[0]
    catalog.create_namespace_if_not_exists(namespace)
    catalog.create_table(name, schema=pq.read_schema(schema_from), location=location, properties=properties)


def test_a_table_created_inside_another_keeps_its_files(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    catalog = icemor.load_catalog()
    outer = catalog.load_table("db.t").metadata.location
    _create(catalog, "other.inner", parquet, f"{outer}/data/inner")
    assert run(["append", "other.inner", str(parquet)]) == 0
    inner_files = _files(local_path(f"{outer}/data/inner"))
    stray = local_path(outer) / "data" / "stray.parquet"
    stray.write_bytes(b"x")  # a real orphan of db.t: still deleted
    capsys.readouterr()

    assert run(["expire", "db.t", "--remove-orphans", "--older-than", FAR_FUTURE]) == 0
    captured = capsys.readouterr()
    assert "delete 1 orphan files (1 bytes)" in captured.out, captured.out
    notes = [line for line in captured.err.splitlines() if line.strip()]
    assert len(notes) == 1 and "other.inner" in notes[0] and "left alone" in notes[0], notes
    assert not stray.exists()
    assert _files(local_path(f"{outer}/data/inner")) == inner_files
    assert _count("other.inner", capsys) == "4"
    assert _count("db.t", capsys) == "4"

    # the nested table's own orphan removal: db.t lies around it, so nothing is deleted
    inner_stray = local_path(f"{outer}/data/inner") / "stray.parquet"
    inner_stray.write_bytes(b"y")
    m = icemor.load_table("other.inner").maintenance.remove_orphan_files(older_than=4_102_444_800_000)
    assert m.files == () and inner_stray.exists()
    assert m.skipped == (("db.t", outer),)


def test_a_table_registered_before_the_one_around_it_keeps_its_files(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same layout made the other way round: the inner table first, at the outer's
    ``data/`` folder, where the outer then writes its data files."""
    catalog = icemor.load_catalog()
    root = f"{(home / 'warehouse').as_uri()}/db/t"
    _create(catalog, "db.inner", parquet, f"{root}/data")
    _create(catalog, "db.t", parquet, root)
    assert run(["append", "db.inner", str(parquet)]) == 0
    assert run(["append", "db.t", str(parquet)]) == 0
    before = _files(local_path(root))
    capsys.readouterr()

    # db.t's data files lie under db.inner's location: they are no orphans of db.inner
    assert run(["expire", "db.inner", "--remove-orphans", "--older-than", FAR_FUTURE]) == 0
    captured = capsys.readouterr()
    assert "delete 0 orphan files" in captured.out, captured.out
    assert "db.t at " in captured.err
    assert run(["expire", "db.t", "--remove-orphans", "--older-than", FAR_FUTURE]) == 0
    captured = capsys.readouterr()
    assert "delete 0 orphan files" in captured.out and "db.inner at " in captured.err, captured
    assert _files(local_path(root)) == before
    assert _count("db.inner", capsys) == "4"
    assert _count("db.t", capsys) == "4"


def test_a_table_writing_its_data_inside_another_keeps_its_files(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """write.data.path counts as a location of its table too."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    outer = icemor.load_table("db.t").metadata.location
    _create(icemor.load_catalog(), "db.u", parquet, None, **{"write.data.path": f"{outer}/data/u"})
    assert run(["append", "db.u", str(parquet)]) == 0
    m = icemor.load_table("db.t").maintenance.remove_orphan_files(older_than=4_102_444_800_000)
    assert m.files == () and m.skipped == (("db.u", f"{outer}/data/u"),)
    assert _count("db.u", capsys) == "4"


def test_a_table_whose_location_cannot_be_read_stops_orphan_removal(
    home: Path, parquet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where a table with unreadable metadata keeps its files is unknown: delete nothing."""
    assert run(["create-table", "db.t", "--schema-from", str(parquet)]) == 0
    assert run(["create-table", "db.broken", "--schema-from", str(parquet)]) == 0
    broken = local_path(icemor.load_table("db.broken").metadata.location)
    for f in (broken / "metadata").iterdir():
        f.unlink()
    stray = local_path(icemor.load_table("db.t").metadata.location) / "stray.parquet"
    stray.write_bytes(b"x")
    capsys.readouterr()
    assert run(["expire", "db.t", "--remove-orphans", "--older-than", FAR_FUTURE]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "'db.broken'" in lines[0] and "cannot tell where" in lines[0], lines
    assert stray.exists()


def test_key_index_sidecars_go_with_their_data_files(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A key index (a hidden sidecar beside its data file) stays while its data file is referenced and
    is an orphan once it is not; other hidden files stay, as Java's hidden-path filter keeps them."""
    import pyarrow as pa

    from icemor.io.key_index import sidecar_path

    t = icemor.create_table("db.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]), format_version=3)

    def cdc(ops: list[str], ids: list[int]) -> None:
        t.apply_changes(
            pa.table({"op": ops, "id": pa.array(ids, pa.int64())}), key=["id"], deletes="position"
        )

    cdc(["I", "I"], [1, 2])
    [old] = [p.data_file.path for p in t.scan().plan_files()]
    sidecar = local_path(sidecar_path(old, [1]))
    assert sidecar.is_file()
    cdc(["D", "D"], [1, 2])  # removes it
    checksum = local_path(old).parent / ".other.crc"
    checksum.write_bytes(b"x")
    # a sidecar expiry cannot know of (left by a crashed run, or beside a file expired by another tool)
    stray = local_path(sidecar_path(old, [7]))
    stray.write_bytes(b"x")
    assert run(["expire", "db.t", "--retain-last", "1", "--older-than", FAR_FUTURE]) == 0
    # expiry removes the data file's sidecars with it (it lists the file's directory)
    assert not local_path(old).exists() and not sidecar.exists() and not stray.exists()
    assert checksum.exists()
    capsys.readouterr()
    cdc(["I"], [3])
    [live] = [p.data_file.path for p in t.refresh().scan().plan_files()]
    stray.write_bytes(b"x")  # an orphan sidecar: its data file is referenced by no metadata
    assert run(["expire", "db.t", "--remove-orphans", "--older-than", FAR_FUTURE]) == 0
    assert not stray.exists() and checksum.exists()
    assert local_path(sidecar_path(live, [1])).is_file()  # the live file's index stays
