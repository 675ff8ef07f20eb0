"""Engines: where scan tasks and per-file write work run, and the Spark engine's fast paths.

A :data:`Runner` runs ``fn(io, item)`` for every item and returns the results in order; the
local engine does it on threads, the Spark engine on executors. The operations in ``ops/``
pass their per-file work to whichever runner the caller chose.

The semantics (which delete applies to which row, what a change is) are decided by the shared
core in ``planning/`` and ``io/``. Two Spark modules also express them as Spark plans, as fast
paths whose results are tested equal to the core's and to Iceberg Java's:
``spark/native.py`` (Spark's own Parquet reader, position deletes and DVs as per-file bitmap
filters or anti-joins, equality deletes as NULL-safe anti-joins) and ``spark/feed.py`` (the
change feed's carry-overs, update pairs and net changes in Spark SQL). Both take which delete
files apply, and where, from the shared planner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.io import FileIO

__all__ = ["Runner"]

Runner: TypeAlias = "Callable[[Callable[[FileIO, Any], Any], Sequence[Any]], list[Any]]"
