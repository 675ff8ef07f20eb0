"""The maintenance namespace of the table facade (``table.maintenance.<action>()``), and the
self-optimizing rounds of ``table.optimize()`` and ``table.watch()``, which call its actions.

Each action runs one procedure of :mod:`icemor.maintenance` on the table (on local threads, or
on a SparkSession's executors where the action takes ``spark``), commits at most one snapshot,
refreshes the table and returns the procedure's metrics. Each procedure is imported when its
action runs, as :mod:`icemor.table` imports its operations (``import icemor.table`` stays light).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from icemor.catalog import table_locations
from icemor.table_engine import runner
from icemor.timestamps import optional_ms

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.expressions import BooleanExpression
    from pyspark.sql import SparkSession

    from icemor.maintenance.data_files import DataRewriteMetrics
    from icemor.maintenance.equality_to_position import ConversionMetrics
    from icemor.maintenance.expire import ExpireMetrics
    from icemor.maintenance.optimize import OptimizeResult, RoundResult
    from icemor.maintenance.orphans import OrphanMetrics
    from icemor.maintenance.position_deletes import PositionDeleteMetrics
    from icemor.table_engine import TableHandle
    from icemor.timestamps import Timestamp

__all__ = ["Maintenance", "optimize", "watch"]


class Maintenance:
    """Maintenance of one table; each action commits at most one snapshot and returns its metrics.

    Example::

        table.maintenance.rewrite_equality_deletes()
        table.maintenance.rewrite_data_files(where="day < '2024-05-01'")
        table.maintenance.expire_snapshots(older_than="2024-05-01", retain_last=10)
    """

    def __init__(self, table: TableHandle) -> None:
        self._table = table

    def rewrite_equality_deletes(self, *, spark: SparkSession | None = None) -> ConversionMetrics:
        """Rewrite every equality delete as position deletes (rows unchanged, reads much faster).

        Example::

            table.maintenance.rewrite_equality_deletes().equality_delete_files_removed

        Args:
            spark: Run the per-file work on this SparkSession's executors instead of local threads.
        """
        from icemor.maintenance.equality_to_position import rewrite_equality_deletes  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        t = self._table
        metrics = rewrite_equality_deletes(t.pyiceberg, run=runner(t, spark))
        t.refresh()
        return metrics

    def rewrite_position_deletes(
        self,
        *,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> PositionDeleteMetrics:
        """Minor compaction: merge the position-delete files of each partition (``write.delete.
        granularity=partition``) or data file (``file``) into one sorted file; drop dangling deletes.

        Rows are unchanged; the new files keep the largest data sequence number of the files
        they replace (as Iceberg Java). One ``replace`` snapshot, or none when nothing is to do.

        Example::

            table.maintenance.rewrite_position_deletes().delete_files_rewritten

        Args:
            spark: Run the per-group work on this SparkSession's executors instead of local threads.
            progress: Called with (groups done, groups) as the work proceeds.
        """
        from icemor.maintenance.position_deletes import rewrite_position_deletes  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        t = self._table
        metrics = rewrite_position_deletes(t.pyiceberg, run=runner(t, spark, progress))
        t.refresh()
        return metrics

    def rewrite_data_files(
        self,
        delete_ratio_threshold: float = 0.3,
        delete_file_threshold: int | None = None,
        target_file_size_bytes: int | None = None,
        where: str | BooleanExpression | None = None,
        *,
        use_starting_sequence_number: bool = True,
        partial_progress_enabled: bool = False,
        partial_progress_max_commits: int = 10,
        spark: SparkSession | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> DataRewriteMetrics:
        """Major compaction: rewrite data files with every delete applied, and bin-pack small ones.

        Iceberg Java's selection and defaults: a file whose deleted fraction reaches
        ``delete_ratio_threshold``, or to which ``delete_file_threshold`` or more delete files
        apply (None: never), or whose size is outside 75-180 % of the target, is a candidate;
        a partition's candidates are rewritten when one has too many deletes, or there are 5
        or more, or more than the target's bytes. One ``replace`` snapshot removes the old data
        files and the delete files that then apply to nothing.

        Example::

            table.maintenance.rewrite_data_files(delete_ratio_threshold=0.1, where="day = '2024-05-01'")

        Args:
            delete_ratio_threshold: Java's ``delete-ratio-threshold`` (position deletes, counted exactly).
            delete_file_threshold: Java's ``delete-file-threshold``.
            target_file_size_bytes: Default: the table's ``write.target-file-size-bytes`` (512 MiB).
                pyiceberg's writer sizes files by in-memory Arrow bytes: files on disk are smaller.
            where: Only data files that may hold rows matching this filter (whole files).
            use_starting_sequence_number: Java's ``use-starting-sequence-number``: the new files
                keep the starting snapshot's sequence number, so equality deletes committed
                meanwhile still apply to them.
            partial_progress_enabled: Java's ``partial-progress.enabled``: the file groups are
                committed in several commits, each validated on its own; a conflicting one is
                planned again (up to 3 times), the others stand (``metrics.failed_commits``).
            partial_progress_max_commits: Java's ``partial-progress.max-commits``.
            spark: Run the per-unit work on this SparkSession's executors instead of local threads.
            progress: Called with (units done, units) as the work proceeds.

        Raises:
            CommitConflictError: A concurrent commit removed a file being rewritten or added
                deletes for one (nothing committed, no file left); with partial progress, only
                when no commit succeeded.
        """
        from icemor.maintenance._units import PartialProgress  # noqa: PLC0415 - cost: ~1 s on import icemor.table
        from icemor.maintenance.data_files import rewrite_data_files  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        t = self._table
        metrics = rewrite_data_files(
            t.pyiceberg,
            run=runner(t, spark, progress),
            delete_ratio_threshold=delete_ratio_threshold,
            delete_file_threshold=delete_file_threshold,
            target_file_size_bytes=target_file_size_bytes,
            where=where,
            use_starting_sequence_number=use_starting_sequence_number,
            partial=PartialProgress(
                enabled=partial_progress_enabled, max_commits=partial_progress_max_commits
            ),
        )
        t.refresh()
        return metrics

    def expire_snapshots(
        self,
        older_than: Timestamp | None = None,
        retain_last: int | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExpireMetrics:
        """Expire snapshots as Iceberg Java does, then delete the files no remaining snapshot reaches.

        Every ref's head is kept, and along each branch the ancestors younger than
        ``older_than`` or among its ``retain_last`` newest; refs older than their
        ``max-ref-age-ms`` go. Deleted: manifest lists and manifests of removed snapshots, the
        data, delete and Puffin files only they reached, and their statistics files.

        Example::

            table.maintenance.expire_snapshots(older_than="2024-05-01", dry_run=True).snapshots_expired

        Args:
            older_than: A datetime (naive means UTC) or ms since the epoch; default now minus
                ``history.expire.max-snapshot-age-ms`` (5 days).
            retain_last: Default ``history.expire.min-snapshots-to-keep`` (1).
            dry_run: Commit and delete nothing; the metrics say what would go.
            progress: Called with (files deleted, files to delete).
        """
        from icemor.maintenance.expire import expire_snapshots  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        t = self._table
        metrics = expire_snapshots(
            t.pyiceberg,
            older_than_ms=optional_ms(older_than, "older_than"),
            retain_last=retain_last,
            dry_run=dry_run,
            progress=progress,
        )
        t.refresh()
        return metrics

    def remove_orphan_files(
        self,
        older_than: Timestamp | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> OrphanMetrics:
        """Delete files under the table location that no metadata references and that are older
        than ``older_than`` (default 3 days ago, Java's safety window: younger files may belong to
        a commit in flight).

        Example::

            table.maintenance.remove_orphan_files(dry_run=True).files

        Args:
            older_than: A datetime (naive means UTC) or ms since the epoch.
            dry_run: List them, delete nothing.
            progress: Called with (files deleted, orphan files).

        Files under another table's location (one nested in this table's location) are never
        deleted, and nothing is when this table lies inside another's: ``skipped`` in the
        metrics names those tables. Every table of the catalog is loaded to learn where it lies.

        Raises:
            MissingFileError, CorruptFileError: Some table's metadata cannot be read, so where it
                lies is unknown; nothing is deleted.
        """
        from icemor.maintenance.orphans import remove_orphan_files  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        t = self._table
        return remove_orphan_files(
            t.pyiceberg,
            tables=lambda: table_locations(t.catalog, strict=True),
            older_than_ms=optional_ms(older_than, "older_than"),
            dry_run=dry_run,
            progress=progress,
        )


def optimize(
    table: TableHandle, *, dry_run: bool, spark: SparkSession | None, note: Callable[[str], None] | None
) -> OptimizeResult:
    """One round of self-optimizing of ``table``: what :meth:`icemor.table.Table.optimize` runs."""
    from icemor.maintenance.optimize import optimize as optimize_round  # noqa: PLC0415 - cost: ~1 s on import icemor.table

    actions = Maintenance(table)
    result = optimize_round(
        table.pyiceberg,
        name=table.name,
        run=runner(table, spark),
        dry_run=dry_run,
        expire=actions.expire_snapshots,
        remove_orphans=actions.remove_orphan_files,
        note=note,
    )
    table.refresh()
    return result


def watch(
    table: TableHandle,
    every: float,
    *,
    spark: SparkSession | None,
    stop: Callable[[], bool] | None,
    on_round: Callable[[RoundResult], None] | None,
) -> int:
    """Rounds of self-optimizing of ``table`` every ``every`` seconds until ``stop()``, the number
    of rounds returned: what :meth:`icemor.table.Table.watch` runs."""
    from icemor.maintenance.optimize import WatchState, watch_round  # noqa: PLC0415 - cost: ~1 s on import icemor.table

    state = WatchState()
    run = runner(table, spark)
    actions = Maintenance(table)
    while stop is None or not stop():
        r = watch_round(
            table.pyiceberg,
            state,
            name=table.name,
            run=run,
            expire=actions.expire_snapshots,
            remove_orphans=actions.remove_orphan_files,
            stop=stop,
        )
        if on_round is not None:
            on_round(r)
        waited = 0.0
        while waited < every and (stop is None or not stop()):
            time.sleep(min(0.05, every - waited))
            waited += 0.05
    table.refresh()
    return state.rounds
