"""Another writer's commit, made deterministically while a rewrite runs: after its work, before its commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icemor.engines.local import runner

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO


def meanwhile(
    io: FileIO, action: Callable[[], None], *, base: Callable[..., list[Any]] | None = None
) -> Callable[..., list[Any]]:
    """A runner (``base``, default local threads) that runs ``action`` once, after the first work
    it ran (before the commit)."""
    local = base or runner(io)
    pending = [action]

    def run(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        out = local(fn, items)
        while pending:
            pending.pop()()
        return out

    return run
