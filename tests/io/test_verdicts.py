"""The on-disk equality verdict store: bounded, atomic, and never trusted blindly."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import pytest

from icemor.io.verdicts import VerdictStore, verdict_store

if TYPE_CHECKING:
    from pathlib import Path


def test_round_trip_keeps_positions_and_narrows_them(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    positions = np.array([0, 5, 1_000_000], dtype=np.int64)
    store.save(("a",), positions, 2_000_000)
    (entry,) = tmp_path.glob("*/*.npy")
    assert np.load(entry).dtype == np.int32  # half the bytes when positions fit
    loaded = store.load(("a",), 2_000_000)
    assert loaded is not None and loaded.dtype == np.int64
    assert loaded.tolist() == positions.tolist()
    assert store.load(("b",), 2_000_000) is None
    huge = np.array([3, (1 << 31) + 7], dtype=np.int64)
    store.save(("big",), huge, 1 << 32)
    got = store.load(("big",), 1 << 32)
    assert got is not None and got.tolist() == huge.tolist()


def test_entry_that_does_not_fit_the_file_is_removed(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    store.save(("k",), np.array([1, 9], dtype=np.int64), 10)
    assert store.load(("k",), 9) is None  # position 9 is past a 9-row file
    assert not list(tmp_path.glob("*/*.npy"))


def test_trim_removes_least_recently_used_first(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 3 * 4096)
    entries = {}
    for i, key in enumerate(("old", "used", "new")):
        store.save((key,), np.arange(900, dtype=np.int64), 1000)  # ~3.7 KB each as int32
        (entries[key],) = set(tmp_path.glob("*/*.npy")) - set(entries.values())
        os.utime(entries[key], (1000 + i, 1000 + i))
    assert store.load(("used",), 1000) is not None  # touched: now the most recent
    store.max_bytes = 2 * 4096
    store.trim()
    left = set(tmp_path.glob("*/*.npy"))
    assert entries["old"] not in left
    assert {entries["used"], entries["new"]} == left


def test_store_location_and_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ICEMOR_VERDICT_DIR", raising=False)
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "home"))
    store = verdict_store()
    assert store is not None and store.root == tmp_path / "home" / "cache" / "equality-verdicts"
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(tmp_path / "elsewhere"))
    store = verdict_store()
    assert store is not None and store.root == tmp_path / "elsewhere"
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE", "off")
    assert verdict_store() is None
