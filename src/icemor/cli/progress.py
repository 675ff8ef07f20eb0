"""Progress bars of the CLI: rich bars on stderr when stdout and stderr are both terminals, and
nothing at all otherwise (piped or redirected output carries no progress characters).

This is the CLI's one progress system: every bar (a command's files, units or rows, the Spark
jobs' tasks) is a row of one shared rich display; nothing else opens a rich ``Progress`` (rich
allows one live display at a time). Each bar is transient (it disappears when the work ends) and
never redirects stdout, so rows or metrics printed meanwhile are not captured by it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    import pyarrow as pa
    from rich.progress import Progress, TaskID

__all__ = ["Bar", "counting_rows", "enabled", "rows_bar", "work_bar"]


def enabled() -> bool:
    """Whether progress is shown: stdout and stderr are terminals."""
    try:
        return sys.stderr.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


# One live display for every bar of the process (rich allows one at a time): a command's own
# bar and the Spark jobs' bar share it, each a row of its own.
_LOCK = threading.RLock()


class _Shared:
    display: Progress | None = None
    bars = 0


def _acquire() -> Progress:
    with _LOCK:
        if _Shared.display is None:
            from rich.console import Console  # noqa: PLC0415 - cost: rich ~30 ms at CLI start-up
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415 - cost: rich ~30 ms at CLI start-up
            from rich.progress import Progress as RichProgress  # noqa: PLC0415 - cost: rich ~30 ms at CLI start-up

            display = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            display.start()
            _Shared.display = display
        _Shared.bars += 1
        return _Shared.display


def _release() -> None:
    with _LOCK:
        _Shared.bars -= 1
        if _Shared.bars == 0 and _Shared.display is not None:
            _Shared.display.stop()
            _Shared.display = None


class Bar:
    """One transient progress bar (a row of the shared display on stderr); thread-safe, for
    callbacks from worker threads. Shown from :meth:`start` to :meth:`stop`."""

    def __init__(self, label: str, unit: str, *, total: int | None = None) -> None:
        self._label, self._unit, self._total = label, unit, total
        self._display: Progress | None = None
        self._task: TaskID | None = None

    def start(self) -> None:
        with _LOCK:
            if self._display is None:
                self._display = _acquire()
                self._task = self._display.add_task(self._label, total=self._total, unit=self._unit)

    def stop(self) -> None:
        with _LOCK:
            if self._display is not None and self._task is not None:
                self._display.remove_task(self._task)
                self._display, self._task = None, None
                _release()

    def update(self, done: int, total: int | None = None, *, label: str | None = None) -> None:
        """Set the work done (and the total, once known; a new label)."""
        with _LOCK:
            if self._display is None or self._task is None:
                return
            fields: dict[str, object] = {"completed": done}
            if total is not None:
                fields["total"] = total
            if label is not None:
                fields["description"] = label
            self._display.update(self._task, **fields)  # type: ignore[arg-type]

    def advance(self, n: int) -> None:
        with _LOCK:
            if self._display is not None and self._task is not None:
                self._display.advance(self._task, n)


@contextlib.contextmanager
def work_bar(label: str, unit: str) -> Iterator[Callable[[int, int], None] | None]:
    """``update(done, total)`` for work counted in units (files, tasks) on a bar, or None when
    progress is not shown. Before the first update the bar shows its label alone."""
    if not enabled():
        yield None
        return
    bar = Bar(label, unit)
    bar.start()
    try:
        yield bar.update
    finally:
        bar.stop()


@contextlib.contextmanager
def rows_bar(label: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """``advance(rows)`` on a bar of rows (``total`` if known), or None when progress is not shown."""
    if not enabled():
        yield None
        return
    bar = Bar(label, "rows", total=total)
    bar.start()
    try:
        yield bar.advance
    finally:
        bar.stop()


def counting_rows(
    batches: Iterable[pa.RecordBatch], advance: Callable[[int], None] | None
) -> Iterator[pa.RecordBatch]:
    """``batches`` unchanged, calling ``advance`` with each one's rows once it has been consumed."""
    for batch in batches:
        yield batch
        if advance is not None:
            advance(batch.num_rows)
