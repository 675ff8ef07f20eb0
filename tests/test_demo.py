"""`icemor demo --engine local`: the whole pipeline runs, every read matches the model, the score rises."""

from __future__ import annotations

from pathlib import Path

import pytest

from icemor.cli import run


def test_demo_pipeline_on_the_local_engine(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["demo", "--engine", "local", "--rows", "200000"]) == 0
    out = capsys.readouterr().out
    # every step's reads were checked against the model (a mismatch is an error, exit 2)
    assert out.count("as expected") == 13, out
    before = float(out.split("health score before: ")[1].split(" ")[0])
    after = float(out.split("health score after: ")[1].split(" ")[0])
    assert before < 90 <= after, out
    html = Path(out.split("HTML report: ")[1].split()[0])
    assert html.is_file() and html.read_text().count("<svg") == 4
    assert "0 errors, 0 warnings" in out and "demo finished in" in out
