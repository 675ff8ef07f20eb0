"""Table-health commands: ``inspect``, ``check`` and ``optimize``, with their printing."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from pathlib import Path  # noqa: TC003 (typer resolves annotations at runtime)
from typing import TYPE_CHECKING, Annotated

import typer

from icemor.cli.app import Engine, JsonOpt, TableArg, engine_spark, open_table

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

    from icemor.maintenance.health import HealthReport, PartitionHealth
    from icemor.maintenance.optimize import OptimizeResult

__all__ = ["check", "inspect", "optimize", "print_report"]

_SnapshotOpt = Annotated[
    int | None, typer.Option("--snapshot-id", help="Report on this snapshot (default: the current one).")
]


def inspect(
    table: TableArg,
    snapshot_id: _SnapshotOpt = None,
    as_json: JsonOpt = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML page with plots.")
    ] = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Count the rows equality deletes remove (reads those data files).")
    ] = False,
) -> None:
    """Health report: files, deletes by kind, deleted rows, read amplification, dangling deletes,
    a score from 0 to 100 and the maintenance command that would help (docs/health.md)."""
    report = open_table(table).inspect(snapshot_id=snapshot_id, exact=exact)
    if html is not None:
        from icemor.cli.report_html import write_html  # noqa: PLC0415 - cost: ~5 ms at CLI start-up

        write_html(report, html)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    print_report(report)
    if html is not None:
        typer.echo(f"HTML report written to {html}")


def _kinds(p: PartitionHealth) -> str:
    names = {"position": "pos", "dv": "dv", "equality_global": "eq(global)", "equality_partition": "eq"}
    parts = [f"{names[k]} {v.files} ({v.bytes} B)" for k, v in p.delete_files.items() if v.files]
    return ", ".join(parts) or "-"


def print_report(report: HealthReport) -> None:
    """The report as rich tables: the table's figures, then one row per partition."""
    from rich.console import Console  # noqa: PLC0415 - cost: rich ~30 ms at CLI start-up
    from rich.table import Table  # noqa: PLC0415 - cost: rich ~30 ms at CLI start-up

    console = Console(width=200)
    h = report.table
    deleted = f"{h.deleted_rows}" + (
        "" if h.equality_deleted_rows is not None or not h.live_equality_keys else "+?"
    )
    summary = Table(
        title=f"{report.table_name}: health {h.score} / 100 (snapshot {report.snapshot_id})",
        show_header=False,
    )
    summary.add_column("figure")
    summary.add_column("value")
    amp = h.read_amplification
    for name, value in (
        ("data files", f"{h.data_files} ({h.data_bytes} bytes), {h.small_files} small"),
        ("rows", f"{h.data_rows} in data files, {deleted} deleted, ratio {h.delete_ratio:.4f}"),
        ("delete files", _kinds(h)),
        (
            "read amplification",
            f"min {amp.min:g} / median {amp.median:g} / max {amp.max:g} (mean {amp.mean:.2f})",
        ),
        ("live equality keys", f"{h.live_equality_keys} probed against {h.equality_probed_rows} rows"),
        ("dangling deletes", f"{h.dangling_delete_files} files ({h.dangling_delete_bytes} bytes)"),
        ("scan overhead (est.)", f"+{100 * h.scan_overhead:.1f}%"),
        ("points lost", ", ".join(f"{k} {v:g}" for k, v in h.penalties.items() if v) or "none"),
    ):
        summary.add_row(name, value)
    console.print(summary)
    if len(report.partitions) > 1 or (report.partitions and report.partitions[0].partition):
        t = Table(title="partitions")
        for col in ("partition", "spec", "data files", "rows", "deleted", "ratio", "delete files", "amp max",
                    "eq keys", "dangling", "score"):  # fmt: skip
            t.add_column(col)
        for p in report.partitions:
            t.add_row(
                p.partition or "(unpartitioned)",
                str(p.spec_id),
                f"{p.data_files} ({p.small_files} small)",
                str(p.data_rows),
                str(p.deleted_rows),
                f"{p.delete_ratio:.4f}",
                _kinds(p),
                f"{p.read_amplification.max:g}",
                str(p.live_equality_keys),
                str(p.dangling_delete_files),
                f"{p.score}",
            )
        console.print(t)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)
    if not report.recommendations:
        console.print("recommendation: none, the table is healthy", highlight=False)
    for r in report.recommendations:
        console.print(f"recommendation: {r.action} ({r.reason}):\n  {r.command}", highlight=False)


def check(table: TableArg, snapshot_id: _SnapshotOpt = None, as_json: JsonOpt = False) -> None:
    """Integrity check of the delete layer: reports every finding by name; exit 0 when there is no
    error (warnings allowed), 1 when there is one (docs/health.md lists the names)."""
    report = open_table(table).check(snapshot_id=snapshot_id)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        for f in report.findings:
            typer.echo(f"{f.severity} {f.name}: {f.path}: {f.message}")
        typer.echo(
            f"{report.table_name} (snapshot {report.snapshot_id}): {report.data_files} data files, "
            f"{report.delete_files} delete files checked; {len(report.errors)} errors, "
            f"{len(report.warnings)} warnings"
        )
    if not report.clean:
        raise typer.Exit(code=1)


def optimize(
    table: TableArg,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan and the scores before and expected after; run nothing."
        ),
    ] = False,
    watch: Annotated[
        float | None,
        typer.Option("--watch", help="Plan and run again every SECONDS until interrupted.", min=0.1),
    ] = None,
    engine: Annotated[
        Engine | None, typer.Option("--engine", help="Where the work runs (default: the global --engine).")
    ] = None,
) -> None:
    """Self-optimizing maintenance, planned per partition as Apache Amoro does (minor: equality ->
    position, delete-file compaction; major: data-file rewrite; full when enabled), with thresholds
    from icemor.optimize.* table properties (docs/health.md). With --watch, a service: one line
    per round; SIGTERM ends it cleanly (exit 0) after the group commit under way."""
    spark = engine_spark(engine)
    t = open_table(table)
    if watch is None or dry_run:
        result = t.optimize(dry_run=dry_run, spark=spark, note=lambda line: typer.echo(f"  {line}"))
        _print_optimize(result, None)
        return
    from icemor.maintenance.optimize import describe_round  # noqa: PLC0415 - cost: ~1.5 s at CLI start-up

    with _stop_on_sigterm() as stopping:
        rounds = t.watch(
            watch, spark=spark, stop=stopping.is_set, on_round=lambda r: typer.echo(describe_round(r))
        )
    typer.echo(f"{t.name}: stopped (SIGTERM) after {rounds} rounds")


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[threading.Event]:
    """SIGTERM sets the event (the service ends after the group commit under way); a second one
    raises as the CLI's usual SIGTERM does (the work under way is abandoned, its files removed)."""
    stopping = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stopping.is_set() and callable(previous):
            previous(signum, frame)
        stopping.set()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield stopping
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_optimize(result: OptimizeResult, round_no: int | None) -> None:
    plan = result.plan
    head = f"round {round_no}: " if round_no is not None else ""
    if not plan.actions:
        typer.echo(f"{head}{plan.table_name}: score {plan.score_before}, nothing to optimize")
        return
    if result.score_after is None:
        typer.echo(
            f"{head}{plan.table_name}: score {plan.score_before}, expected {plan.score_expected} after: "
            + ", ".join(plan.actions)
        )
        for pp in plan.partitions:
            typer.echo(
                f"  {pp.partition or '(unpartitioned)'} (score {pp.score}): {pp.level}: "
                f"{', '.join(pp.actions)} ({'; '.join(pp.reasons)})"
            )
        return
    typer.echo(
        f"{head}{plan.table_name}: score {plan.score_before} -> {result.score_after} "
        f"(expected {plan.score_expected}) in {result.seconds:.3f} s"
    )
