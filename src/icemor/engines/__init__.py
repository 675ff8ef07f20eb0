"""Schedulers: where scan tasks and per-file write work run. No delete semantics live here.

A :data:`Runner` runs ``fn(io, item)`` for every item and returns the results in order; the
local engine does it on threads, the Spark engine on executors. The operations in ``ops/``
pass their per-file work to whichever runner the caller chose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO

__all__ = ["Runner"]

Runner: TypeAlias = "Callable[[Callable[[FileIO, Any], Any], Sequence[Any]], list[Any]]"
