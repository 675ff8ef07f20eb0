"""``icemor inspect --html``: the health report as one self-contained HTML page.

Plots are drawn with matplotlib and inlined as SVG: no JavaScript, no font or script loaded
from anywhere, so the page opens offline and in a sandbox. matplotlib is imported only here,
and only when a page is written (extra ``icemor[report]``); its object API is used, not pyplot,
so nothing global (a GUI backend, pyplot's figure registry) is touched.
"""

from __future__ import annotations

import html
import io
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icemor.exceptions import InvalidArgumentError, UnsupportedFeatureError

if TYPE_CHECKING:
    from pathlib import Path

    from icemor.maintenance.health import HealthReport

__all__ = ["render_html", "write_html"]

_KIND_LABELS = {
    "position": "position",
    "dv": "deletion vector",
    "equality_partition": "equality (partition)",
    "equality_global": "equality (global)",
}
_MAX_PARTITIONS = 40
"""Partitions shown in the per-partition plot (those with the most delete files)."""


def _figure(width: float = 7.0, height: float = 3.2) -> Any:
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 - optional: matplotlib
    except ImportError:
        msg = "--html needs matplotlib: pip install 'icemor[report]'"
        raise UnsupportedFeatureError(msg) from None
    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Any) -> str:
    import matplotlib as mpl  # noqa: PLC0415 - optional: matplotlib

    buf = io.StringIO()
    # the same report gives the same page (ids in the SVG are otherwise random)
    with mpl.rc_context({"svg.hashsalt": "icemor", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    # the XML prolog and DOCTYPE do not belong inside HTML; the RDF metadata names URLs
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg") :], flags=re.S)


def _deletes_per_partition(report: HealthReport) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    parts = sorted(report.partitions, key=lambda p: -sum(k.files for k in p.delete_files.values()))
    parts = parts[:_MAX_PARTITIONS]
    labels = [p.partition or "(unpartitioned)" for p in parts]
    bottom = [0] * len(parts)
    for kind, label in _KIND_LABELS.items():
        values = [p.delete_files[kind].files for p in parts]
        ax.bar(range(len(parts)), values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(range(len(parts)), labels, rotation=45 if len(parts) > 4 else 0, ha="right", fontsize=8)
    ax.set_ylabel("delete files")
    ax.set_title(
        "Delete files per partition"
        + (f" (top {_MAX_PARTITIONS})" if len(report.partitions) > _MAX_PARTITIONS else "")
    )
    ax.legend(fontsize=8)
    return _svg(fig)


def _deleted_fraction(report: HealthReport) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    counts = report.deleted_fraction_histogram
    ax.bar([i / 10 for i in range(10)], counts, width=0.1, align="edge", edgecolor="white")
    ax.set_xlim(0, 1)
    ax.set_xlabel(
        "deleted fraction of the data file" + ("" if report.exact else " (position deletes and DVs)")
    )
    ax.set_ylabel("data files")
    ax.set_title("Deleted fraction per data file")
    return _svg(fig)


def _amplification(report: HealthReport) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    items = sorted(report.amplification_histogram.items())
    ax.bar([str(k) for k, _ in items], [v for _, v in items])
    ax.set_xlabel("delete files that apply to the data file")
    ax.set_ylabel("data files")
    amp = report.table.read_amplification
    ax.set_title(f"Read amplification (min {amp.min:g}, median {amp.median:g}, max {amp.max:g})")
    return _svg(fig)


def _history(report: HealthReport) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    points = report.history
    when = [datetime.fromtimestamp(p.timestamp_ms / 1000, UTC) for p in points]
    ax.plot(
        when, [p.total_delete_files or 0 for p in points], marker="o", color="tab:blue", label="delete files"
    )
    ax.set_ylabel("delete files", color="tab:blue")
    ax2 = ax.twinx()
    ratios = [p.delete_ratio if p.delete_ratio is not None else 0.0 for p in points]
    ax2.plot(when, ratios, marker="s", color="tab:red", label="delete ratio")
    ax2.set_ylabel("position deletes / rows", color="tab:red")
    ax2.set_ylim(bottom=0)
    ax.set_title("Snapshot history")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    return _svg(fig)


def render_html(report: HealthReport) -> str:
    """The page: the figures, the recommendations and four plots, all inline."""
    e = html.escape
    h = report.table
    rows = [
        ("score", f"{h.score} / 100"),
        ("snapshot", str(report.snapshot_id)),
        ("data files", f"{h.data_files} ({h.data_bytes} bytes), {h.small_files} small"),
        ("rows", f"{h.data_rows} in data files, {h.deleted_rows} deleted (ratio {h.delete_ratio:.4f})"),
        (
            "delete files",
            ", ".join(f"{_KIND_LABELS[k]} {v.files} ({v.bytes} bytes)" for k, v in h.delete_files.items()),
        ),
        ("live equality keys", str(h.live_equality_keys)),
        ("dangling delete files", str(h.dangling_delete_files)),
        ("scan overhead (estimate)", f"+{100 * h.scan_overhead:.1f}%"),
        ("points lost", ", ".join(f"{k} {v:g}" for k, v in h.penalties.items() if v) or "none"),
    ]
    table = "\n".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
    recs = (
        "\n".join(
            f"<li><b>{e(r.action)}</b>: {e(r.reason)}<br><code>{e(r.command)}</code></li>"
            for r in report.recommendations
        )
        or "<li>none: the table is healthy</li>"
    )
    notes = "".join(f"<p class=note>{e(n)}</p>" for n in report.notes)
    plots = [
        ("deletes-per-partition", _deletes_per_partition(report)),
        ("deleted-fraction", _deleted_fraction(report)),
        ("read-amplification", _amplification(report)),
        ("history", _history(report)),
    ]
    figures = "\n".join(f'<figure id="{name}" class="plot">{svg}</figure>' for name, svg in plots)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>icemor health: {e(report.table_name)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; }} th, td {{ text-align: left; padding: 2px 12px 2px 0; }}
figure.plot {{ display: inline-block; margin: 0.5em; }} figure.plot svg {{ max-width: 100%; height: auto; }}
code {{ background: #f3f3f3; padding: 1px 4px; }} .note {{ color: #666; }}
</style></head>
<body>
<h1>{e(report.table_name)}: health {h.score} / 100</h1>
<table>{table}</table>
{notes}
<h2>Recommendation</h2>
<ul>{recs}</ul>
<h2>Plots</h2>
{figures}
</body></html>
"""


def write_html(report: HealthReport, path: Path) -> None:
    """Write :func:`render_html` to ``path`` (replacing it).

    Raises:
        InvalidArgumentError: The file cannot be written.
        UnsupportedFeatureError: matplotlib is not installed.
    """
    page = render_html(report)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as err:
        msg = f"cannot write --html {path}: {err.strerror or err}"
        raise InvalidArgumentError(msg) from err
