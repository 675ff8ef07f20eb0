"""No import cycle among the modules of src/icemor: ``tools/check_import_cycles.py`` (``make lint``).

Each test writes a small package with (or without) a cycle and runs the tool on it: a cycle
must be found however its imports are written (module level, function-local, type-only,
relative, through a package's ``__init__``), and a package without one must pass.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "check_import_cycles", ROOT / "tools" / "check_import_cycles.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_import_cycles"] = module
    spec.loader.exec_module(module)
    return module


check = _tool()


def _package(root: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``root`` with ``files`` (relative path -> source)."""
    pkg = root / "pkg"
    for name, source in {"__init__.py": "", **files}.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return pkg


CYCLES = {
    "module level": {"a.py": "from pkg.b import g\n", "b.py": "import pkg.a\n"},
    "function-local": {
        "a.py": "from pkg.b import g\n",
        "b.py": "def g():\n    from pkg.a import f\n    return f\n",
    },
    "method in a try": {
        "a.py": "import pkg.b\n",
        "b.py": "class C:\n    def m(self):\n        try:\n            import pkg.a\n        except ImportError:\n"
        "            pass\n",
    },
    "type-only": {
        "a.py": "from pkg.b import g\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
    },
    "relative": {"a.py": "from .b import g\n", "b.py": "from . import a\n"},
    "relative, two levels": {
        "sub/__init__.py": "",
        "sub/c.py": "from ..a import f\n",
        "a.py": "from pkg.sub import c\n",
    },
    "through a package's __init__": {
        "sub/__init__.py": "from pkg.sub.c import h\n",
        "sub/c.py": "from pkg.a import f\n",
        "a.py": "from pkg.sub import h\n",  # h is no module: this imports pkg.sub itself
    },
    "three modules": {
        "a.py": "import pkg.b\n",
        "b.py": "import pkg.c\n",
        "c.py": "def f():\n    import pkg.a\n",
    },
}


@pytest.mark.parametrize("files", CYCLES.values(), ids=CYCLES.keys())
def test_each_kind_of_cycle_is_found(tmp_path: Path, files: dict[str, str]) -> None:
    found = check.find_cycles(_package(tmp_path, files))
    assert len(found) == 1, found
    assert found[0].startswith("import cycle: pkg.")


def test_the_report_names_each_step_with_its_line(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "a.py": "import os\n\nimport pkg.b\n",
            "b.py": "def g():\n    return 1\n\n\ndef h():\n    from pkg.c import k\n",
            "c.py": "from pkg import a\n",
        },
    )
    assert check.find_cycles(pkg) == [
        "import cycle: pkg.a (pkg/a.py:3) -> pkg.b (pkg/b.py:6) -> pkg.c (pkg/c.py:1) -> pkg.a"
    ]


def test_two_separate_cycles_are_two_findings(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "a.py": "import pkg.b\n",
            "b.py": "import pkg.a\n",
            "c.py": "import pkg.d\n",
            "d.py": "import pkg.c\n",
        },
    )
    found = check.find_cycles(pkg)
    assert [line.split(" (")[0] for line in found] == ["import cycle: pkg.a", "import cycle: pkg.c"]


@pytest.mark.parametrize(
    "files",
    [
        # a chain, function-local imports too
        {"a.py": "import pkg.b\n", "b.py": "def f():\n    import pkg.c\n", "c.py": "import os\n"},
        # a module importing its own package's __init__, which imports nothing back
        {"a.py": "from pkg import VERSION\n", "__init__.py": "VERSION = 1\n"},
        # a package's __init__ importing its modules, which import a sibling: no edge to the parent
        {
            "sub/__init__.py": "from pkg.sub.c import h\n",
            "sub/c.py": "from pkg.sub.d import k\n",
            "sub/d.py": "",
        },
        # names of other packages that share a prefix are not ours
        {"a.py": "import pkgx\nimport pkg_b\n"},
        # a module importing itself is no cycle between modules
        {"a.py": "def f():\n    from pkg.a import f\n"},
    ],
    ids=["chain", "own package", "init imports children", "other packages", "self"],
)
def test_no_cycle_passes(tmp_path: Path, files: dict[str, str]) -> None:
    assert check.find_cycles(_package(tmp_path, files)) == []


def test_the_command_fails_on_a_cycle_and_passes_without(tmp_path: Path) -> None:
    tool = [sys.executable, str(ROOT / "tools" / "check_import_cycles.py")]
    bad = _package(tmp_path / "bad", CYCLES["function-local"])
    good = _package(tmp_path / "good", {"a.py": "import pkg.b\n", "b.py": ""})
    failed = subprocess.run([*tool, str(bad)], capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    assert "import cycle: pkg.a" in failed.stdout
    passed = subprocess.run([*tool, str(good)], capture_output=True, text=True, check=False)
    assert (passed.returncode, passed.stdout) == (0, "")


def test_the_cli_modules_import_no_cycle() -> None:
    """cli_health used to import cli's private helpers while cli imported cli_health."""
    found = check.find_cycles(ROOT / "src" / "icemor")
    assert [line for line in found if "icemor.cli" in line] == []


def test_src_icemor_has_no_import_cycle() -> None:
    assert check.find_cycles(ROOT / "src" / "icemor") == []
