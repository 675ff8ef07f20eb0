"""docs/benchmarks.md is generated: ``tools/render_benchmarks.py`` (``make bench-doc``).

A results file (``benchmarks/results/<bench>.json``, written by ``benchmarks/_report.py``)
becomes one table under its date, command and machine; a benchmark of the ``bench`` recipe
without one gets a line saying it has not been run, with its command; the page in git is what
the tool writes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


render_benchmarks = _load("render_benchmarks", ROOT / "tools" / "render_benchmarks.py")
report = _load("_report", ROOT / "benchmarks" / "_report.py")

MAKEFILE = """\
VENV := .venv
PY := $(VENV)/bin/python
OTHER = $$(echo hi)

bench: stamp
\t$(PY) benchmarks/bench_demo.py
\t@# a comment naming benchmarks/bench_commented.py
\tJAVA_HOME=$(OTHER) $(PY) benchmarks/bench_other.py --data-dir bench-data

later:
\t$(PY) benchmarks/bench_not_in_bench.py
"""
STATIC = "# Benchmarks\n\nThe method.\n\n<!-- results -->\n\n## Where the time goes\n\nProse.\n"


def _results() -> dict[str, Any]:
    return {
        "schema": 1,
        "benchmark": "bench_demo",
        "command": ".venv/bin/python benchmarks/bench_demo.py --rows 1000",
        "started": "2031-05-06T07:08:09Z",
        "seconds": 12.5,
        "load_average": {"start": [0.25, 0.5, 1.0], "end": [1.75, 1.0, 1.0]},
        "machine": {
            "cpu": "Example CPU 9000",
            "cores": 2,
            "memory_gib": 23.5,
            "os": "Debian GNU/Linux 12 (bookworm) (Linux 6.1 x86_64)",
            "python": "3.11.7",
            "pyarrow": "26.0.1",
            "pyspark": "3.5.9",
            "java": "17.0.15",
            "icemor": "0.1.0",
            "git": {"commit": "0123456789abcdef", "dirty": False},
        },
        "context": {"rows": 1000},
        "rows": [
            {"name": "read | narrow", "value": 0.04213, "unit": "s"},
            {
                "name": "write",
                "value": 1.5,
                "unit": "s",
                "ratio": 0.75,
                "versus": "Iceberg Java",
                "target": "≤ Java",
                "status": "pass",
            },
            {"name": "rate", "value": 268392.4, "unit": "changes/s", "target": "≥ 300,000", "status": "fail"},
            {"name": "crashed", "value": None, "unit": "s", "note": "error: boom"},
        ],
    }


def _render(tmp_path: Path, results: dict[str, dict[str, Any]]) -> str:
    folder = tmp_path / "results"
    folder.mkdir(parents=True)
    for bench, data in results.items():
        (folder / f"{bench}.json").write_text(json.dumps(data))
    page: str = render_benchmarks.render(STATIC, MAKEFILE, folder)
    return page


def _section(page: str, bench: str) -> str:
    return page.split(f"### {bench}.py\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


def test_a_results_file_is_a_table_under_its_date_command_and_machine(tmp_path: Path) -> None:
    page = _render(tmp_path, {"bench_demo": _results()})
    section = _section(page, "bench_demo")
    assert (
        "Run 2031-05-06 07:08:09 UTC, 12.5 s: `.venv/bin/python benchmarks/bench_demo.py --rows 1000`"
        in section
    )
    assert "2 cores (Example CPU 9000), 23.5 GiB, Debian GNU/Linux 12 (bookworm)" in section
    assert "Python 3.11.7, pyarrow 26.0.1, PySpark 3.5.9, Java 17.0.15" in section
    assert "git 0123456789" in section and "uncommitted" not in section
    assert "load average (1 min) 0.25 at the start, 1.75 at the end" in section
    assert "Settings: rows 1,000" in section
    table = [line for line in section.splitlines() if line.startswith("|")]
    assert table == [
        "| measurement | value | ratio | target | met | note |",
        "|---|---|---|---|---|---|",
        "| read \\| narrow | 0.042 s |  |  |  |  |",
        "| write | 1.500 s | 0.75× Iceberg Java | ≤ Java | yes |  |",
        "| rate | 268,392 changes/s |  | ≥ 300,000 | **no** |  |",
        "| crashed | – |  |  |  | error: boom |",
    ]
    # the tables stand where the static part marks them, in the Makefile's order
    assert page.index("The method.") < page.index("## Latest figures") < page.index("## Where the time goes")
    assert page.index("### bench_demo.py") < page.index("### bench_other.py")
    assert "<!-- results -->" not in page


def test_a_benchmark_without_a_results_file_gets_a_not_run_line_and_its_command(tmp_path: Path) -> None:
    page = _render(tmp_path, {"bench_demo": _results()})
    section = _section(page, "bench_other").strip()
    assert section == (
        "Not run since its figures are generated (no `benchmarks/results/bench_other.json`): `make bench`"
        " runs it; alone, from the repository's root:"
        " `JAVA_HOME=$(echo hi) .venv/bin/python benchmarks/bench_other.py --data-dir bench-data`."
    )
    # a recipe comment and another target's lines are not benchmarks of `make bench`
    assert "bench_commented" not in page and "bench_not_in_bench" not in page
    # with no results at all, every benchmark says so
    empty = _render(tmp_path / "empty", {})
    assert empty.count("Not run since its figures are generated") == 2


def test_a_results_file_of_another_benchmark_is_rendered_after_the_recipes(tmp_path: Path) -> None:
    other = _results() | {
        "benchmark": "bench_equality",
        "command": ".venv/bin/python benchmarks/bench_equality.py",
    }
    page = _render(tmp_path, {"bench_equality": other})
    assert page.index("### bench_other.py") < page.index("### bench_equality.py")
    assert "`.venv/bin/python benchmarks/bench_equality.py`" in _section(page, "bench_equality")


def test_a_results_file_of_another_shape_is_refused(tmp_path: Path) -> None:
    with pytest.raises(render_benchmarks.RenderError, match=r"bench_demo\.json: results schema 2"):
        _render(tmp_path, {"bench_demo": _results() | {"schema": 2}})


def test_what_a_benchmark_writes_is_what_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "bench_demo.py"), "--runs", "1"])
    run = report.Report.of(str(ROOT / "benchmarks" / "bench_demo.py"))
    run.context["rows"] = 10
    run.add("narrow", 0.5, ratio=1.25, versus="raw", target="≤ 1.5×", passed=True)
    run.add("count", 42, "rows")
    path = run.write(tmp_path / "results")
    assert path == tmp_path / "results" / "bench_demo.json"
    data = json.loads(path.read_text())
    assert data["command"].endswith("benchmarks/bench_demo.py --runs 1")
    assert data["machine"]["cores"] >= 1 and data["machine"]["python"]
    assert len(data["load_average"]["start"]) == 3 and len(data["load_average"]["end"]) == 3
    page = render_benchmarks.render(STATIC, MAKEFILE, tmp_path / "results")
    section = _section(page, "bench_demo")
    assert f"`{data['command']}`" in section
    assert "| narrow | 0.500 s | 1.25× raw | ≤ 1.5× | yes |" in section
    assert "| count | 42 rows |  |  |  |" in section


def test_the_makefile_bench_recipe_runs_every_benchmark_named_and_renders_last() -> None:
    makefile = (ROOT / "Makefile").read_text()
    commands = render_benchmarks.bench_commands(makefile)
    assert commands[0] == ("bench_scan", ".venv/bin/python benchmarks/bench_scan.py")
    for bench, _ in commands:
        assert (ROOT / "benchmarks" / f"{bench}.py").is_file(), bench
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0].splitlines()
    assert recipe[-1].strip() == "$(PYTHON) tools/render_benchmarks.py"
    assert "\nbench-doc:\n\t$(PYTHON) tools/render_benchmarks.py\n" in makefile


def test_docs_benchmarks_md_is_what_the_tool_writes() -> None:
    assert render_benchmarks.MARKER in (ROOT / "benchmarks" / "README.md").read_text()
    assert render_benchmarks.main(["--check"]) == 0, "docs/benchmarks.md is out of date: make bench-doc"
    assert "docs/benchmarks.md" in (ROOT / "README.md").read_text()  # the README's link to it


def test_check_fails_on_a_page_that_differs(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text("hand-edited\n")
    assert render_benchmarks.main(["--check", "--out", str(out)]) == 1
    assert render_benchmarks.main(["--out", str(out)]) == 0
    assert render_benchmarks.main(["--check", "--out", str(out)]) == 0
