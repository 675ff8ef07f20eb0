"""A CDC batch held in a Spark DataFrame (:func:`apply_changes_dataframe`): repartitioned by key,
each task runs one unit on the executors, the driver commits once; and the ``foreachBatch``
sink of Structured Streaming (:class:`ChangeSink`). pyspark is imported only when they run."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from icemor.exceptions import InvalidArgumentError
from icemor.ops.cdc.cleanup import WrittenFiles
from icemor.ops.cdc.commit import already_committed, commit_changes, skipped
from icemor.ops.cdc.prepare import prepare_changes
from icemor.ops.cdc.units import change_unit
from icemor.ops.units import DeleteUnit, UnitResult, delete_unit, delete_units

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import Runner
    from icemor.ops.cdc.options import ChangeOptions
    from icemor.ops.cdc.types import ChangeContext, ChangeMetrics, ChangeUnitResult
    from icemor.ops.key_lookup import KeyLookup

__all__ = ["ChangeSink", "apply_changes_dataframe"]

_SEQ = "__icemor_seq"
"""Row order of a Spark DataFrame, captured before it is shuffled by key."""


def apply_changes_dataframe(table: PyIcebergTable, changes: Any, options: ChangeOptions) -> ChangeMetrics:
    """Apply one batch of changes held in a Spark DataFrame (``changes``); the writing runs on the executors.

    The DataFrame is repartitioned by key (``options.partitions`` tasks, default the session's
    default parallelism); each task writes the files of its keys. In position mode each task also
    finds its keys' live rows; a second Spark job writes each data file's deletion vector or
    position deletes (DELETE's per-file units, on the executors). Otherwise as
    :func:`icemor.ops.cdc.local.apply_changes`.

    The tasks announce their files under a staging prefix (:mod:`icemor.engines.spark.write`): a
    failed job leaves none of them, and once the batch is committed (or refused) the files of
    attempts Spark did not keep go too.
    """
    from icemor.engines.spark import runner  # noqa: PLC0415 - pyspark is optional
    from icemor.engines.spark.changes import arrow_schema, run_per_key  # noqa: PLC0415 - pyspark is optional
    from icemor.engines.spark.session_kind import parallelism  # noqa: PLC0415 - pyspark is optional
    from icemor.engines.spark.write import Staging  # noqa: PLC0415 - pyspark is optional

    started = time.monotonic()
    table = table.refresh()
    if already_committed(table, options):
        return skipped(started)
    schema = arrow_schema(changes)
    if _SEQ in schema.names:
        msg = f"the changes have a column named {_SEQ}, which icemor uses itself"
        raise InvalidArgumentError(msg)
    sequence = None if options.order_by is not None else _SEQ
    ctx = prepare_changes(table, schema, options, sequence_column=sequence)
    start = table.metadata.current_snapshot()
    spark = changes.sparkSession
    run = _grouped(runner(spark, table.io, table.metadata.location), parallelism(spark))
    unit: _ContextUnit | _OneTaskUnit = _ContextUnit(ctx)
    if (options.partitions or parallelism(spark)) == 1 and ctx.lookup is not None and ctx.lookup.files:
        unit = _OneTaskUnit(ctx, _unit_templates(table, ctx.lookup))
    staging = Staging(table.io, table.metadata.location, table.metadata.properties)
    keep: set[str] = set()
    try:
        # a failed job removes every file it wrote before it raises (run_per_key)
        results = run_per_key(
            changes,
            table.io,
            table.metadata.location,
            unit,
            key=ctx.key,
            sequence_column=sequence,
            staging=staging,
            partitions=options.partitions,
        )
        done: dict[frozenset[str], UnitResult] = {}
        if isinstance(unit, _OneTaskUnit):
            done = {paths: r for _, units in results for paths, r in units}
            results = [r for r, _ in results]
            run = _RunAlready(table.io, done, run)
        # given to the commit: it removes them itself when refused, keeps them when it may have
        # happened; every other announced file (failed or lost attempts) goes below
        keep = {w.path for r in results for w in r.written} | {p for r in results for p in r.sidecars}
        keep |= {w.path for r in done.values() for w in r.written}
        return commit_changes(
            table,
            ctx,
            results,
            options,
            start_snapshot_id=start.snapshot_id if start else None,
            started=started,
            run=run,
        )
    finally:
        staging.finish(keep)


class ChangeSink:
    """A ``foreachBatch`` function: each micro-batch applied by :func:`apply_changes_dataframe`
    with the stream's ``app_id`` and the batch id, so a batch already committed is skipped
    (see :func:`icemor.spark.cdc_sink`).

    Picklable, because Spark Connect runs a ``foreachBatch`` function in a Python process of its
    server, not in the client: the function travels there pickled. A table does not pickle (its
    catalog holds a connection), so the sink travels as the way to load the table again (the
    catalog's class, name and properties, and the table's identifier) and loads it once in the
    process that runs it. Where it was made (a classic session calls it in this process) it uses
    the table it was given, which each batch refreshes (and its commit leaves current).

    Args:
        table: An icemor Table or a pyiceberg table.
        options: How each batch is applied; its app and batch ids are the stream's.
        app_id: The stream's stable identity.
        progress: Called with the batch id and the batch's metrics.
        after_commit: Called with the table and the batch's session after a batch committed
            (the facade's compaction between batches; a module-level function: it is pickled).
    """

    def __init__(
        self,
        table: Any,
        options: ChangeOptions,
        *,
        app_id: str,
        progress: Callable[[int, ChangeMetrics], None] | None = None,
        after_commit: Callable[[PyIcebergTable, Any], None] | None = None,
    ) -> None:
        # the options of the stream's first batch (app_id checked with them); each batch gives its id
        self._options = replace(options, app_id=app_id, batch_id=0)
        self._table: Any = table  # an icemor Table or a pyiceberg table
        iceberg = getattr(table, "pyiceberg", table)
        catalog = iceberg.catalog
        self._reference = (type(catalog), catalog.name, dict(catalog.properties), tuple(iceberg.name()))
        self._progress = progress
        self._after_commit = after_commit

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_table"] = None  # loaded again where it runs (see the class)
        return state

    def _loaded(self) -> Any:
        if self._table is None:
            cls, name, properties, identifier = self._reference
            self._table = cls(name, **properties).load_table(identifier)
        return self._table

    def __call__(self, df: Any, batch_id: int) -> None:
        table = self._loaded()
        options = replace(self._options, batch_id=batch_id)
        iceberg = getattr(table, "pyiceberg", table)
        metrics = apply_changes_dataframe(iceberg, df, options)
        if self._after_commit is not None and metrics.snapshot_id is not None:
            self._after_commit(iceberg, df.sparkSession)
        if self._progress is not None:
            self._progress(batch_id, metrics)


def _unit_templates(table: PyIcebergTable, lookup: KeyLookup) -> tuple[DeleteUnit, ...]:
    """DELETE's per-file units for every file the keys are looked up in, positions to be found:
    a one-task batch keeps those of the files it found rows in (as the position commit makes
    them for those files)."""
    planned = [p for p, _ in lookup.files]
    none = np.zeros(0, np.int64)
    positions = {p.data_file.path: none for p in planned}
    return tuple(delete_units(table, planned, lookup.options, positions=positions, dvs_per_partition=True))


@dataclass(frozen=True)
class _OneTaskUnit:
    """Position mode in one Spark task (``partitions=1``): the task holds every key of the batch,
    so it has every position of each data file and also runs DELETE's per-file units, on the
    executor: no second Spark job. Returns the unit's result and, per delete unit, its data
    files and result."""

    ctx: ChangeContext
    templates: tuple[DeleteUnit, ...]

    def __call__(
        self, io: FileIO, rows: pa.Table, task: int
    ) -> tuple[ChangeUnitResult, list[tuple[frozenset[str], UnitResult]]]:
        result = change_unit(io, self.ctx, rows, task)
        if result.error is not None or not result.positions:
            return result, []
        found = dict(result.positions)
        units = []
        for template in self.templates:
            files = tuple(f for f in template.files if f.data_file.path in found)
            if files:
                units.append(
                    replace(template, files=files, positions=tuple(found[f.data_file.path] for f in files))
                )
        with WrittenFiles(io) as written:
            written.add_results([result])
            for u in units:
                written.add_target(u.target)
            done = [(_paths(u), delete_unit(io, u)) for u in units]
        return result, done


def _paths(unit: DeleteUnit) -> frozenset[str]:
    return frozenset(p.data_file.path for p in unit.files)


@dataclass(frozen=True)
class _RunAlready:
    """The runner of the position commit after a one-task batch: the delete units it asks for
    were run by that task (the same data files, found by the same rule), so their results are
    returned; anything else runs on ``run`` (the task's delete files removed first)."""

    io: FileIO
    done: dict[frozenset[str], UnitResult]
    run: Runner

    def __call__(self, fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        if (
            fn is delete_unit
            and {_paths(u) for u in items} == set(self.done)
            and len(items) == len(self.done)
        ):
            return [self.done[_paths(u)] for u in items]
        stale = WrittenFiles(self.io)
        stale.add(w for r in self.done.values() for w in r.written)
        stale.remove()
        return self.run(fn, items)


def _grouped(run: Runner, groups: int) -> Runner:
    """``run`` with the items dealt into at most ``groups`` tasks: a batch touches a few data files
    each, and a Spark task per data file cost ~0.5 s apiece on 2 busy cores (10 s a batch)."""

    def run_grouped(fn: Callable[[FileIO, Any], Any], items: Sequence[Any]) -> list[Any]:
        chunks = [(fn, tuple(items[i::groups])) for i in range(min(groups, len(items)))]
        return [r for part in run(_each, chunks) for r in part]

    return run_grouped


def _each(io: FileIO, item: tuple[Callable[[FileIO, Any], Any], Sequence[Any]]) -> list[Any]:
    fn, chunk = item
    return [fn(io, x) for x in chunk]


@dataclass(frozen=True)
class _ContextUnit:
    """``change_unit`` bound to a context: a picklable callable for the executors."""

    ctx: ChangeContext

    def __call__(self, io: FileIO, rows: pa.Table, task: int) -> ChangeUnitResult:
        return change_unit(io, self.ctx, rows, task)
