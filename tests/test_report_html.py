"""`icemor inspect --html`: a self-contained page whose four plots render in headless Chromium with
no console error, and nothing loaded from the network."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icemor
from icemor.cli import run

PLOTS = ("deletes-per-partition", "deleted-fraction", "read-amplification", "history")


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(
            "headless Chromium is missing: apt-get install -y chromium (make test does)", pytrace=False
        )
    return path


@pytest.fixture
def page(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The report of a partitioned table with position deletes in one partition, a CDC batch."""
    rows = pa.table(
        {"id": pa.array(range(600), pa.int64()), "p": pa.array([i % 3 for i in range(600)], pa.int32())}
    )
    src = tmp_path / "rows.parquet"
    pq.write_table(rows, src)
    assert run(["create-table", "db.r", "--schema-from", str(src), "--partition-by", "p"]) == 0
    t = icemor.load_table("db.r")
    t.append_files([src])
    t.delete("p = 0 and id < 100")
    t.delete("p = 1 and id < 30")
    t.apply_changes(
        pa.table({"id": pa.array([5, 7], pa.int64()), "p": pa.array([2, 1], pa.int32()), "op": ["D", "D"]}),
        key=["id"],
        allow_nullable_key=True,
    )
    out = tmp_path / "report.html"
    assert run(["inspect", "db.r", "--html", str(out)]) == 0
    assert f"HTML report written to {out}" in capsys.readouterr().out
    return out


def test_page_is_self_contained(page: Path) -> None:
    text = page.read_text()
    assert "<script" not in text.lower()
    # the only URLs are XML namespaces; every href is a fragment of the page itself
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert not re.search(r"(?:src|href)=\"(?!#)", text)
    for name in PLOTS:
        assert f'id="{name}"' in text
    assert "icemor compact db.r --equality-to-position" in text


def test_import_icemor_does_not_import_matplotlib() -> None:
    code = "import sys, icemor, icemor.cli, icemor.maintenance.health; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_chromium_renders_every_plot(page: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    base = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [*base, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Failed to load" in line]
    assert console == [], console
    for name in PLOTS:
        figure = re.search(rf'<figure id="{name}" class="plot">(.*?)</figure>', dom.stdout, re.S)
        assert figure is not None, name
        svg = figure.group(1)
        assert svg.lstrip().startswith("<svg"), name
        # axes, ticks and the bars or lines themselves: a plot with data has many paths
        assert len(re.findall(r"<path", svg)) >= 10, name
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1200,1800", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[0] == 1800 and pixels.shape[1] == 1200
    # not a blank page: many distinct colours (the plots' bars and lines, text)
    flat = (pixels[..., :3] * 255).astype("uint8").reshape(-1, 3)
    assert len({tuple(c) for c in flat[::97]}) > 20
