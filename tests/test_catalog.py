"""The embedded catalog: opened once per process, never reused across a replaced database."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from icemor.catalog import load_catalog

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_embedded_catalog_is_reused_while_its_database_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ICEMOR_HOME", str(home))
    first = load_catalog()
    assert load_catalog() is first
    first.create_namespace("ns")
    first.create_table("ns.t", pa.schema([pa.field("x", pa.int64())]))
    assert load_catalog().list_tables("ns") == [("ns", "t")]

    # the database replaced by a new one at the same path: a new engine, which sees the new file
    first.engine.dispose()
    (home / "catalog.db").unlink()
    again = load_catalog()
    assert again is not first
    assert again.list_namespaces() == []


def test_other_homes_and_properties_get_their_own_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "a"))
    a = load_catalog()
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "b"))
    b = load_catalog()
    assert a is not b
    assert load_catalog(echo="false") is not b
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "a"))
    assert load_catalog() is a
