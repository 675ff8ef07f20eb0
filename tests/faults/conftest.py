"""The fault suite says what ran: as which user, and every variant it did not run, with why.

`make test` runs tests/faults twice, as root and as ``nobody`` (tools/run_as_nonroot.py; the second
run leaves out the tests that start Spark or Iceberg Java, which permissions do not change). Some
variants need one of them (a real tmpfs needs mount rights; a directory without write permission
stops only a non-root process), so each run prints its own list of what it did not run, skipped
or deselected, never dropping one silently.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

_OUTCOMES: Counter[str] = Counter()
_NOT_RUN: list[tuple[str, str]] = []
_DESELECTED: list[str] = []


def pytest_deselected(items: list[pytest.Item]) -> None:
    _DESELECTED.extend(i.nodeid for i in items if i.nodeid.startswith("tests/faults/"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _OUTCOMES[report.outcome] += 1
        if report.outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            _NOT_RUN.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _OUTCOMES:
        return
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root)"
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(_OUTCOMES.items()))
    terminalreporter.write_sep("=", f"fault suite as {who}: {counts}")
    for nodeid, reason in _NOT_RUN:
        terminalreporter.write_line(f"not run as {who}: {nodeid}: {reason}")
    if _DESELECTED:
        modules = Counter(nodeid.split("::", 1)[0] for nodeid in _DESELECTED)
        listed = ", ".join(f"{m} ({n})" for m, n in sorted(modules.items()))
        terminalreporter.write_line(f"not run as {who} (deselected): {len(_DESELECTED)} tests of {listed}")
