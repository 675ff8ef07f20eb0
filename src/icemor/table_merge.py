"""The MERGE builder of the table facade: ``table.merge(source, on)``, its clauses, ``execute()``.

The clauses are collected here and handed to :func:`icemor.ops.merge.merge_rows`, which plans
and commits the MERGE; the operation is imported when it runs, as :mod:`icemor.table` imports
its operations (``import icemor.table`` stays light).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from icemor.dependencies import is_spark_dataframe
from icemor.table_engine import runner, spark_errors

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyspark.sql import SparkSession

    from icemor.ops.merge import MergeClause, MergeMetrics
    from icemor.table_engine import TableHandle

__all__ = ["MergeBuilder"]

_log = logging.getLogger("icemor")


class MergeBuilder:
    """Clauses of a MERGE, in the order given (the first whose condition holds acts), as in Spark.

    Made by :meth:`icemor.table.Table.merge`; each ``when_*`` method adds a clause and returns
    the builder, :meth:`execute` runs them.

    Example::

        (table.merge(updates, on="t.id = s.id")
            .when_matched_delete("s.op = 'D'")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute())
    """

    def __init__(
        self,
        table: TableHandle,
        source: Any,
        on: str | Sequence[str],
        *,
        source_alias: str,
        target_alias: str,
        spark: SparkSession | None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self._note = note or _log.warning
        self._table = table
        self._source = source
        self._on = on
        self._aliases = (source_alias, target_alias)
        self._spark = spark
        self._clauses: list[MergeClause] = []

    def _add(self, kind: str, condition: str | None, values: Mapping[str, str] | None) -> MergeBuilder:
        from icemor.ops.merge import MergeClause  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        self._clauses.append(MergeClause(kind, condition, values))  # type: ignore[arg-type]
        return self

    def when_matched_update(self, set: Mapping[str, str], condition: str | None = None) -> MergeBuilder:
        """``WHEN MATCHED [AND condition] THEN UPDATE SET col = value, …`` (values are SQL)."""
        return self._add("update", condition, dict(set))

    def when_matched_update_all(self, condition: str | None = None) -> MergeBuilder:
        """``WHEN MATCHED [AND condition] THEN UPDATE SET *``: every column from the source."""
        return self._add("update", condition, None)

    def when_matched_delete(self, condition: str | None = None) -> MergeBuilder:
        """``WHEN MATCHED [AND condition] THEN DELETE``."""
        return self._add("delete", condition, {})

    def when_not_matched_insert(
        self, values: Mapping[str, str], condition: str | None = None
    ) -> MergeBuilder:
        """``WHEN NOT MATCHED [AND condition] THEN INSERT (cols) VALUES (…)``; other columns NULL."""
        return self._add("insert", condition, dict(values))

    def when_not_matched_insert_all(self, condition: str | None = None) -> MergeBuilder:
        """``WHEN NOT MATCHED [AND condition] THEN INSERT *``: every column from the source."""
        return self._add("insert", condition, None)

    def execute(self, *, progress: Callable[[int, int], None] | None = None) -> MergeMetrics:
        """Run the MERGE as one merge-on-read snapshot; ``progress`` is called with (files done,
        files) as the per-file work proceeds.

        Example::

            metrics = table.merge(updates, on=["id"]).when_matched_update_all().execute()
            metrics.rows_updated, metrics.rows_inserted

        Returns:
            Rows updated, deleted and inserted, files added and removed, the snapshot id.

        Raises:
            InvalidArgumentError: Unknown column, source without the key columns, a value that
                does not fit its column, a non-boolean condition, a target row matched by
                several source rows, ``*`` with a source that lacks table columns.
            CommitConflictError: A concurrent commit conflicts (``write.merge.isolation-level``).
        """
        from icemor.ops.inputs import TableRows  # noqa: PLC0415 - cost: ~1 s on import icemor.table
        from icemor.ops.merge import merge_rows, read_source  # noqa: PLC0415 - cost: ~1 s on import icemor.table

        t = self._table
        convert = TableRows(t.schema(), table=t.name, strict=False)
        source = read_source(self._source)
        if not is_spark_dataframe(source):  # a Spark DataFrame stays on the executors, typed by Spark
            source = convert.convert_table(source, what="the MERGE source")
        source_alias, target_alias = self._aliases
        with spark_errors(self._spark, t.metadata.location):
            metrics = merge_rows(
                t.pyiceberg,
                source,
                self._on,
                self._clauses,
                source_alias=source_alias,
                target_alias=target_alias,
                run=runner(t, self._spark, progress),
                spark=self._spark,
            )
        # no refresh: merge_rows refreshed t.pyiceberg, and its commit left it at the new snapshot
        if (text := convert.summary()) is not None:
            self._note(text)
        return metrics
