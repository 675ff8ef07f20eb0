"""Another writer's commit, made deterministically while a rewrite runs: after its work, before its commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icemor.engines.local import runner

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO


def meanwhile(io: FileIO, action: Callable[[], None]) -> Callable[..., list[Any]]:
    """A local runner that runs ``action`` once, after the first work it ran (before the commit)."""
    local = runner(io)
    pending = [action]

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        out = local(fn, items)
        while pending:
            pending.pop()()
        return out

    return run
