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

Rows another engine writes as data files (a Spark DataFrame, on its executors) reach the
operations as :class:`ExternalRows`: the engine writes, the operation commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.spec.files import WrittenFile

__all__ = ["ExternalFiles", "ExternalRows", "Runner"]

Runner: TypeAlias = "Callable[[Callable[[FileIO, Any], Any], Sequence[Any]], list[Any]]"


class ExternalFiles(Protocol):
    """Data files another engine wrote for one operation (nothing committed yet)."""

    @property
    def rows(self) -> int: ...
    @property
    def files(self) -> list[WrittenFile]: ...

    def finish(self, keep: Collection[str]) -> list[str]:
        """Remove every file the write made but ``keep``; return those that could not be removed."""
        ...


@dataclass(frozen=True)
class ExternalRows:
    """Rows that another engine writes as data files (a Spark DataFrame, on its executors).

    ``write(table, convert)`` checks the rows' schema by ``convert`` (the input rules, an
    :class:`icemor.ops.inputs.TableRows`) before writing any, writes them by the same rules, adds
    its counts of truncated values to ``convert``'s, and removes what it wrote if it fails. The
    operation that called it then calls :meth:`ExternalFiles.finish` once, whatever happens: with
    the files it committed (or all of them when the catalog may have committed), else with none.
    """

    write: Callable[[PyIcebergTable, Any], ExternalFiles]
    what: str
