"""Every catalog commit goes through icemor.commit's one door: ``tools/check_commit_path.py``.

``make lint`` runs the tool on ``src/icemor``; these tests prove it finds each kind of commit
(the calls that were outside ``commit/`` before: ``ops/append.py``'s transaction,
``ops/apply_changes.py``'s ``update_schema`` and ``commit_table``, ``ops/add_files.py``'s
``table.add_files``) and that the tree has none; that the tree has exactly one ``commit_table``
call site (``commit/door.py``), and that pyiceberg's own commit paths fail inside ``commit/`` too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "check_commit_path", ROOT / "tools" / "check_commit_path.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_commit_path"] = module
    spec.loader.exec_module(module)
    return module


check = _tool()


def test_no_commit_outside_the_commit_package() -> None:
    assert check.check_tree(ROOT / "src" / "icemor") == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(table):\n    table.catalog.commit_table(table, (), ())\n",
        "def f(table):\n    with table.transaction() as tx:\n        pass\n",
        "def f(table):\n    with table.update_schema() as u:\n        u.set_identifier_fields('id')\n",
        "def f(table):\n    with table.update_spec() as u:\n        pass\n",
        "def f(tx):\n    tx.update_snapshot().fast_append()\n",
        "def f(producer):\n    producer.new_snapshot()\n",
        "from pyiceberg.table import Table\ndef f(t: Table, df):\n    t.append(df)\n",
        "from pyiceberg.table import Table as PyIcebergTable\ndef f(t: 'PyIcebergTable', df):\n    t.overwrite(df)\n",
        "from pyiceberg.table import Table as PyIcebergTable\ndef f(table: PyIcebergTable, paths):\n    table.add_files(paths)\n",
        "from pyiceberg.table import Table\ndef f(m, io, c):\n    t = Table(('a', 'b'), m, 'x', io, c)\n    t.append(None)\n",
    ],
)
def test_each_kind_of_commit_is_found(source: str) -> None:
    found = check.check_source(source, "mod.py")
    assert len(found) >= 1
    assert found[0].startswith("mod.py:")


@pytest.mark.parametrize(
    "source",
    [
        "def f(xs):\n    xs.append(1)\n",  # a list
        "from icemor.table import Table\ndef f(t: Table, files):\n    t.add_files(files)\n",  # icemor's facade
        "def f(catalog, name, schema):\n    catalog.create_table_transaction(name, schema=schema)\n",  # stages, writes nothing
    ],
)
def test_other_calls_are_not_commits(source: str) -> None:
    assert check.check_source(source, "mod.py") == []


def test_the_tool_fails_on_a_commit_outside_commit(tmp_path: Path) -> None:
    (tmp_path / "commit").mkdir()
    (tmp_path / "commit" / "ok.py").write_text("def f(t):\n    t.catalog.commit_table(t, (), ())\n")
    assert check.main(["check", str(tmp_path)]) == 0
    (tmp_path / "ops.py").write_text("def f(t):\n    t.catalog.commit_table(t, (), ())\n")
    assert check.main(["check", str(tmp_path)]) == 1


def test_the_tree_has_exactly_one_commit_table_call_site() -> None:
    src = ROOT / "src" / "icemor"
    sites = [s for p in sorted(src.rglob("*.py")) for s in check.commit_table_calls(p.read_text(), str(p))]
    assert len(sites) == 1 and sites[0].startswith(str(src / "commit" / "door.py")), sites


def test_a_second_commit_table_call_site_in_commit_fails(tmp_path: Path) -> None:
    """Two doors are one too many, even inside ``commit/``: no call site at all fails too."""
    (tmp_path / "commit").mkdir()
    assert check.main(["check", str(tmp_path)]) == 1  # none
    (tmp_path / "commit" / "door.py").write_text("def f(t):\n    t.catalog.commit_table(t, (), ())\n")
    assert check.main(["check", str(tmp_path)]) == 0
    (tmp_path / "commit" / "other.py").write_text("def g(c, t):\n    c.commit_table(t, (), ())\n")
    found = check.check_tree(tmp_path)
    assert len(found) == 1 and found[0].startswith("2 commit_table call sites"), found


@pytest.mark.parametrize(
    "source",
    [
        "def f(tx):\n    tx.commit_transaction()\n",
        "def f(t, u, r):\n    t._do_commit(u, r)\n",
        "def f(t):\n    with t.transaction() as tx:\n        tx.set_properties(a='b')\n",
        "def f(t):\n    with t.update_schema() as u:\n        u.add_column('x', 'string')\n",
        "def f(tx):\n    with tx.update_snapshot().fast_append() as a:\n        pass\n",
    ],
)
def test_pyiceberg_commit_paths_fail_inside_commit_too(tmp_path: Path, source: str) -> None:
    (tmp_path / "commit").mkdir()
    (tmp_path / "commit" / "door.py").write_text("def f(t):\n    t.catalog.commit_table(t, (), ())\n")
    (tmp_path / "commit" / "append.py").write_text(source)
    found = check.check_tree(tmp_path)
    assert len(found) == 1 and "around icemor.commit.door" in found[0], found
