"""The on-disk equality verdict store: bounded, atomic, private, and never trusted blindly.

Whatever its files hold, ``load`` returns the positions ``save`` was given for that very key,
or None: an entry that is damaged, moved, planted where others can write, or reached through
a symbolic link is "not stored".
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from icemor.io import verdicts
from icemor.io.verdicts import VerdictStore, parse_size, verdict_store

OTHER_UID = 65534  # nobody


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store refused and no warning given yet, as in a new process."""
    monkeypatch.setattr(verdicts, "_STORES", {})
    monkeypatch.setattr(verdicts, "_WARNED", set())


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.is_file() and not p.name.startswith("."))


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "icemor.io.verdicts"]


def test_round_trip_keeps_positions_and_narrows_them(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    positions = np.arange(0, 1_000_000, 1000, dtype=np.int64)  # 1,000 positions
    store.save(("a",), positions, 2_000_000)
    (entry,) = entries(tmp_path)
    assert entry.stat().st_size < 4 * 1000 + 100  # int32 when the positions fit: half the bytes
    loaded = store.load(("a",), 2_000_000)
    assert loaded is not None and loaded.dtype == np.int64
    assert loaded.tolist() == positions.tolist()
    loaded[0] = 7  # an owned, writable array
    assert store.load(("b",), 2_000_000) is None
    huge = np.array([3, (1 << 31) + 7], dtype=np.int64)
    store.save(("big",), huge, 1 << 32)
    got = store.load(("big",), 1 << 32)
    assert got is not None and got.tolist() == huge.tolist()
    empty = np.zeros(0, dtype=np.int64)  # the deletes remove nothing from this file: a verdict too
    store.save(("none",), empty, 10)
    got = store.load(("none",), 10)
    assert got is not None and got.tolist() == []


def test_zero_byte_entry_is_not_stored_and_is_removed(tmp_path: Path) -> None:
    """What a crash between create and write could leave: np.load raised EOFError on it."""
    store = VerdictStore(tmp_path, 1 << 20)
    store.save(("k",), np.array([1, 2], dtype=np.int64), 10)
    (entry,) = entries(tmp_path)
    entry.write_bytes(b"")
    assert store.load(("k",), 10) is None
    assert not entry.exists()
    store.save(("k",), np.array([1, 2], dtype=np.int64), 10)
    got = store.load(("k",), 10)
    assert got is not None and got.tolist() == [1, 2]


def test_every_flipped_byte_and_every_cut_is_refused(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    positions = np.array([1, 5, 7, 300], dtype=np.int64)
    store.save(("k",), positions, 1000)
    (entry,) = entries(tmp_path)
    intact = entry.read_bytes()
    damaged = []
    for i in range(len(intact)):
        for mask in (0x01, 0x80, 0xFF):
            data = bytearray(intact)
            data[i] ^= mask
            damaged.append(bytes(data))
    damaged += [intact[:n] for n in range(len(intact))]
    damaged += [intact + b"\0", intact + intact]
    wrong = []
    for data in damaged:
        entry.write_bytes(data)
        got = store.load(("k",), 1000)
        if got is not None:
            wrong.append(got.tolist())
        assert not entry.exists()  # dropped: the next read probes and stores it anew
    assert wrong == []
    entry.write_bytes(intact)
    got = store.load(("k",), 1000)
    assert got is not None and got.tolist() == positions.tolist()


@pytest.mark.parametrize(
    "values",
    [[5, 1], [1, 1, 2], [-1, 3], [3, 10], list(range(11)), [2, 9, 4]],
    ids=["unsorted", "duplicate", "negative", "past-the-end", "too-long", "unsorted-inside"],
)
def test_arrays_that_are_not_verdicts_are_never_returned(tmp_path: Path, values: list[int]) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    bad = np.array(values, dtype=np.int64)
    store.save(("k",), bad, 10)  # not stored...
    assert store.load(("k",), 10) is None
    # ...and refused on load even with a valid checksum (what a bug or a same-user edit could write)
    name, sub, key_bytes = verdicts._locate(("k",))
    (tmp_path / sub).mkdir(mode=0o700, exist_ok=True)
    entry = tmp_path / sub / name
    entry.write_bytes(verdicts._encode(key_bytes, bad, 10))
    entry.chmod(0o600)
    assert store.load(("k",), 10) is None
    assert not entry.exists()


def test_an_entry_moved_to_another_keys_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    store.save(("a",), np.array([1, 2], dtype=np.int64), 10)
    (entry_a,) = entries(tmp_path)
    store.save(("b",), np.array([3], dtype=np.int64), 10)
    (entry_b,) = set(entries(tmp_path)) - {entry_a}
    entry_b.write_bytes(entry_a.read_bytes())
    assert store.load(("b",), 10) is None
    got = store.load(("a",), 10)
    assert got is not None and got.tolist() == [1, 2]
    # another format (layout or meaning of a verdict) is another key: old entries are not found
    monkeypatch.setattr(verdicts, "FORMAT", verdicts.FORMAT + 1)
    assert store.load(("a",), 10) is None


def _as_other_user(path: Path) -> None:
    os.chown(path, OTHER_UID, OTHER_UID)


@pytest.mark.parametrize("how", ["root 0777", "root 0770", "root of another user", "subdir 0777"])
def test_a_store_others_can_write_is_not_used(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    if how == "root of another user" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    root = tmp_path / "store"
    store = VerdictStore(root, 1 << 20)
    store.save(("k",), np.array([1, 2], dtype=np.int64), 10)
    (entry,) = entries(root)
    if how == "root 0777":
        root.chmod(0o777)
    elif how == "root 0770":
        root.chmod(0o770)
    elif how == "subdir 0777":
        entry.parent.chmod(0o777)
    else:
        _as_other_user(root)
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    fresh = VerdictStore(root, 1 << 20)  # what another process finds
    for _ in range(3):
        assert fresh.load(("k",), 10) is None
        fresh.save(("new",), np.array([4], dtype=np.int64), 10)
    assert entries(root) == [entry]  # nothing written into it either
    assert fresh.refused is not None
    (warning,) = warnings_of(caplog)  # one line, not one per read
    assert str(root) in warning


def test_an_entry_of_another_user_is_not_trusted(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    store = VerdictStore(tmp_path, 1 << 20)
    store.save(("k",), np.array([1, 2], dtype=np.int64), 10)
    (entry,) = entries(tmp_path)
    _as_other_user(entry)
    assert store.load(("k",), 10) is None
    assert entry.exists()  # not ours to remove


def test_shared_store_refused_through_verdict_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(root))
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    store = verdict_store()
    assert store is not None
    assert store.load(("k",), 10) is None
    assert verdict_store() is None  # off for the rest of the process
    assert verdict_store() is None
    assert len(warnings_of(caplog)) == 1


def test_entries_and_directories_are_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = VerdictStore(tmp_path / "a" / "store", 1 << 20)
        store.save(("k",), np.array([1], dtype=np.int64), 10)
    finally:
        os.umask(old)
    (entry,) = entries(tmp_path / "a" / "store")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "store").stat().st_mode) == 0o700


def test_entry_is_fsynced_before_it_replaces_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(*args: object, **kwargs: object) -> None:
        events.append("replace")
        real_replace(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    VerdictStore(tmp_path, 1 << 20).save(("k",), np.array([1], dtype=np.int64), 10)
    assert events == ["fsync", "replace"]
    assert not [p for p in tmp_path.glob("*/*") if p.name.endswith(".tmp")]


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    store = VerdictStore(tmp_path, 1 << 20)
    store.save(("k",), np.array([1], dtype=np.int64), 10)  # costs the cache only
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert store.load(("k",), 10) is None


OUTSIDE_FILES = ("x.npy", "y.verdict", ".z.tmp")


def test_trim_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    """trim() once globbed through a linked subdirectory and removed the ``*.npy`` files there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in OUTSIDE_FILES:  # files a store would list and remove
        (outside / name).write_bytes(b"precious" * 1000)
        os.utime(outside / name, (1, 1))  # older than anything: first to go, were they listed
    root = tmp_path / "store"
    store = VerdictStore(root, 1 << 20)
    store.save(("k",), np.array([1], dtype=np.int64), 10)
    (entry,) = entries(root)
    linked = "ab" if entry.parent.name != "ab" else "cd"
    (root / linked).symlink_to(outside, target_is_directory=True)
    (entry.parent / ("0" * 64 + ".verdict")).symlink_to(outside / "y.verdict")
    (entry.parent / "old.npy").symlink_to(outside / "x.npy")
    store.max_bytes = 0
    store.trim()
    assert sorted(p.name for p in outside.iterdir()) == sorted(OUTSIDE_FILES)
    assert not entry.exists()  # its own entry does go


def test_a_symbolic_link_in_place_of_an_entry_is_not_followed(tmp_path: Path) -> None:
    """The target is a valid entry of the same key (another store's): still not read through a link."""
    elsewhere = VerdictStore(tmp_path / "elsewhere", 1 << 20)
    elsewhere.save(("k",), np.array([1, 2], dtype=np.int64), 10)
    (target,) = entries(tmp_path / "elsewhere")
    store = VerdictStore(tmp_path / "store", 1 << 20)
    store.save(("other",), np.array([3], dtype=np.int64), 10)  # creates the store
    link = tmp_path / "store" / target.parent.name / target.name
    link.parent.mkdir(mode=0o700, exist_ok=True)
    link.symlink_to(target)
    assert store.load(("k",), 10) is None
    assert not link.is_symlink()  # the link is removed...
    assert target.exists()  # ...not what it points to


@pytest.mark.parametrize("which", ["root", "subdir"])
def test_a_symbolic_link_in_place_of_a_directory_is_refused(
    tmp_path: Path, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    real = tmp_path / "real"
    VerdictStore(real, 1 << 20).save(("k",), np.array([1, 2], dtype=np.int64), 10)
    (entry,) = entries(real)
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    if which == "root":
        root = tmp_path / "link"
        root.symlink_to(real, target_is_directory=True)
    else:
        root = tmp_path / "store"
        VerdictStore(root, 1 << 20).save(("other",), np.array([3], dtype=np.int64), 10)
        (root / entry.parent.name).symlink_to(entry.parent, target_is_directory=True)
    store = VerdictStore(root, 1 << 20)
    assert store.load(("k",), 10) is None
    store.save(("new",), np.array([4], dtype=np.int64), 10)
    assert entries(real) == [entry]
    assert len(warnings_of(caplog)) == 1


def test_a_store_that_cannot_be_created_is_off_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("not a directory")
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    store = VerdictStore(tmp_path / "file" / "store", 1 << 20)
    for _ in range(3):
        store.save(("k",), np.array([1], dtype=np.int64), 10)
        assert store.load(("k",), 10) is None
    assert len(warnings_of(caplog)) == 1


def test_trim_removes_least_recently_used_first(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 3 * 4096)
    paths = {}
    for i, key in enumerate(("old", "used", "new")):
        store.save((key,), np.arange(900, dtype=np.int64), 1000)  # ~3.7 KB each as int32
        (paths[key],) = set(entries(tmp_path)) - set(paths.values())
        os.utime(paths[key], (1000 + i, 1000 + i))
    assert store.load(("used",), 1000) is not None  # touched: now the most recent
    store.max_bytes = 2 * 4096
    store.trim()
    assert set(entries(tmp_path)) == {paths["used"], paths["new"]}


def test_trim_removes_old_format_entries_and_stale_temporary_files(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path, 1 << 20)
    store.save(("k",), np.array([1], dtype=np.int64), 10)
    (entry,) = entries(tmp_path)
    legacy = entry.parent / "ab12.npy"
    legacy.write_bytes(b"format 1")
    stale, fresh = entry.parent / ".a.1.x.tmp", entry.parent / ".b.2.y.tmp"
    stale.write_bytes(b"left by a crash")
    fresh.write_bytes(b"being written now")
    os.utime(stale, (1, 1))
    store.trim()
    assert sorted(p.name for p in entry.parent.iterdir()) == sorted([entry.name, fresh.name])


def test_store_location_and_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ICEMOR_VERDICT_DIR", raising=False)
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE_BYTES", raising=False)
    monkeypatch.setenv("ICEMOR_HOME", str(tmp_path / "home"))
    store = verdict_store()
    assert store is not None and store.root == tmp_path / "home" / "cache" / "equality-verdicts"
    assert store.max_bytes == 256 * 1024 * 1024
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(tmp_path / "elsewhere"))
    store = verdict_store()
    assert store is not None and store.root == tmp_path / "elsewhere"
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE", "off")
    assert verdict_store() is None


def test_no_home_directory_turns_the_store_off_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    for name in ("ICEMOR_VERDICT_DIR", "ICEMOR_HOME", "ICEMOR_VERDICT_CACHE", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    assert [verdict_store() for _ in range(3)] == [None, None, None]
    (warning,) = warnings_of(caplog)
    assert "ICEMOR_VERDICT_DIR" in warning


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("268435456", 256 << 20),
        ("256MiB", 256 << 20),
        ("256M", 256 << 20),
        (" 256 mb ", 256 << 20),
        ("1.5G", 3 << 29),
        ("512k", 512 << 10),
        ("2TiB", 2 << 40),
        ("100b", 100),
        ("0", 0),
        ("", None),
        ("-5", None),
        ("lots", None),
        ("256 MiBs", None),
        ("1e9", None),
    ],
)
def test_parse_size(text: str, size: int | None) -> None:
    assert parse_size(text) == size


def test_cache_bytes_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ICEMOR_VERDICT_DIR", str(tmp_path))
    monkeypatch.delenv("ICEMOR_VERDICT_CACHE", raising=False)
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE_BYTES", "64MiB")
    store = verdict_store()
    assert store is not None and store.max_bytes == 64 << 20
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE_BYTES", "0")
    assert verdict_store() is None
    caplog.set_level(logging.WARNING, logger="icemor.io.verdicts")
    monkeypatch.setenv("ICEMOR_VERDICT_CACHE_BYTES", "lots")
    assert [verdict_store() for _ in range(3)] == [None, None, None]
    (warning,) = warnings_of(caplog)
    assert "ICEMOR_VERDICT_CACHE_BYTES" in warning


def _hammer(root: str, seed: int) -> list[str]:
    """Save, load and trim one small store from a child process; what it loaded that was wrong."""
    store = VerdictStore(Path(root), 3 * 1024)
    rng = np.random.default_rng(seed)
    wrong = []
    for i in range(150):
        k = int(rng.integers(0, 6))
        positions = np.arange(k, 10 * (k + 1) + k, k + 1, dtype=np.int64)  # one array per key
        if rng.random() < 0.5:
            store.save((k,), positions, 1000)
        got = store.load((k,), 1000)
        if got is not None and got.tolist() != positions.tolist():
            wrong.append(f"key {k}: {got.tolist()}")
        if i % 25 == 0:
            store.trim()
    return wrong


def test_processes_sharing_a_store_never_read_a_wrong_entry(tmp_path: Path) -> None:
    """As Spark executors' Python workers on one host do: unique temporary names, atomic renames."""
    import multiprocessing

    root = tmp_path / "store"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.starmap(_hammer, [(str(root), seed) for seed in range(4)])
    assert [w for r in results for w in r] == []
    assert entries(root)  # they did store
    assert not [p for p in root.glob("*/*") if p.name.endswith(".tmp")]
