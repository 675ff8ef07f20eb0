"""Streaming writers against ``optimize --watch`` (issue 41), on a v2 and a v3 table.

Run as ``.venv/bin/python benchmarks/bench_streams.py`` (``make bench``). The race of
``tests/streams.py`` (also ``tests/maintenance/test_optimize.py::test_watch_keeps_up_with_three_writers``):
CDC every second, DELETE and MERGE every two seconds (UPDATE every three on v3) for
``--seconds`` (60) on a 200,000-row table of ten partitions, with ``icemor optimize --watch 1``
in a process of its own. Printed per table: the writers' commits and conflicts, the optimizer's
commits in each 20 s window (target: at least one in each), the health score at the start and
the end (target: not lower), whether the final rows equal the model's and Iceberg Java's read,
and the load average seen (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _report import Report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--java", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    report = Report.of(__file__)
    report.context.update(seconds=args.seconds)
    with tempfile.TemporaryDirectory(prefix="icemor-streams-") as tmp:
        home = Path(tmp)
        (home / "warehouse").mkdir()
        os.environ["ICEMOR_HOME"] = str(home)
        from streams import run_streams

        java = None
        failed = False
        for version in (2, 3):
            name = f"bench.streams_v{version}"
            r = run_streams(name, home, format_version=version, seconds=args.seconds)
            windows = r.windows(20.0)
            rounds = sum(line.startswith("round ") for line in r.optimizer_output.splitlines())
            exact = r.rows == r.model
            java_exact = None
            if args.java:
                if java is None:  # started once the catalog has its tables
                    from oracle import IcebergJava

                    java = IcebergJava(home)
                java_exact = dict(java.rows(name, columns=["id", "v"])) == r.model
            load = "/".join(f"{x:.1f}" for x in os.getloadavg())
            ok = exact and java_exact is not False and all(windows) and r.score_end >= r.score_start
            failed |= not ok or bool(r.errors) or r.optimizer_returncode != 0
            print(f"v{version}: {args.seconds:.0f} s, {rounds} optimize rounds, load average {load}")
            print(f"  writer commits {r.writer_commits}, conflicts {r.writer_conflicts}")
            print(f"  optimize commits per 20 s window: {windows} (target: >= 1 each)")
            print(f"  score {r.score_start} -> {r.score_end} (target: not lower)")
            print(f"  rows equal the model: {exact}; Iceberg Java reads them exactly: {java_exact}")
            print(f"  optimizer exit code {r.optimizer_returncode}; writer errors: {r.errors or 'none'}")
            print(f"  targets {'met' if ok else 'NOT met'}", flush=True)
            v = f"v{version}"
            report.add(f"{v}: optimize rounds", rounds, "", note=f"load average {load}")
            report.add(f"{v}: writer commits", r.writer_commits, "", note=f"conflicts {r.writer_conflicts}")
            report.add(
                f"{v}: optimize commits per 20 s window",
                str(windows),
                "",
                target="≥ 1 each",
                passed=all(windows),
            )
            report.add(
                f"{v}: health score at the end",
                r.score_end,
                "",
                target=f"≥ the start's ({r.score_start})",
                passed=r.score_end >= r.score_start,
            )
            report.add(
                f"{v}: final rows equal the model's and Iceberg Java's read",
                f"{exact} / {java_exact}",
                "",
                target="True / True (or not read)",
                passed=exact and java_exact is not False,
                note=f"optimizer exit code {r.optimizer_returncode}; writer errors: {r.errors or 'none'}",
            )
        report.write()
        return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
