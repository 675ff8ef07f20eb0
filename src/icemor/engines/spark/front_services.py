"""What ``icemor.spark.attach``'s front needs from the layers above the engine
(:class:`FrontServices`, given by :mod:`icemor.spark_catalog`), the names it routes (metadata
tables, procedures), and the one way a metadata table becomes a DataFrame (:func:`small_frame`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icemor.engines.spark._compat import spark_schema_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyspark.sql import DataFrame, SparkSession

__all__ = ["METADATA_TABLES", "PROCEDURES", "FrontServices", "small_frame"]

METADATA_TABLES = (
    "snapshots",
    "history",
    "refs",
    "files",
    "data_files",
    "delete_files",
    "manifests",
    "entries",
    "partitions",
    "position_deletes",
    "all_data_files",
    "all_delete_files",
    "all_files",
    "all_manifests",
    "metadata_log_entries",
    "changes",
)
"""The metadata tables ``shop.orders.<name>`` reads (Iceberg's names; ``changes``: icemor's feed)."""


@dataclass(frozen=True)
class FrontServices:
    """What the front needs from the layers above the engine, given by ``icemor.spark.attach``.

    Attributes:
        identifier: ``parts`` -> ``namespace.table`` when the attached catalog has that table.
        read: ``(spark, identifier, options)`` -> the table's DataFrame (``icemor.spark.read``'s
            options; ``ref`` names a branch or tag).
        metadata: ``(spark, identifier, name)`` -> a metadata table's DataFrame.
        write: ``(df, identifier, mode, where)``: ``append``, ``overwrite`` (``where``: a
            condition or None for every row) or ``replace-partitions`` (the partitions the rows
            fall in), one commit.
        dml: ``(spark, text)``: one MERGE / UPDATE / DELETE statement whose target is the
            attached catalog's ``namespace.table``.
        create: ``(identifier, df_or_schema, partition_by, properties, if_not_exists)``.
        drop: ``(identifier, purge)``.
        columns: ``identifier`` -> the table's columns (name, Spark type), in order.
        call: ``(spark, procedure, arguments)`` -> the procedure's result (a DDL schema and rows).
        describe: ``(identifier, extended)`` -> DESCRIBE's rows, as Iceberg's runtime gives them.
        properties: ``identifier`` -> SHOW TBLPROPERTIES' rows (Iceberg's reserved ones too).
        tables: ``namespace`` -> its tables' names, or None if the catalog has no such namespace.
        alter: ``(identifier, actions)``: one ALTER TABLE's actions (``(kind, *arguments)``:
            :data:`icemor.expr.ddl.ALTER_ACTIONS`), each committed as Iceberg's runtime commits it.
        partition_fields: ``identifier`` -> how many fields the table's current spec has.
    """

    identifier: Callable[[Sequence[str]], str | None]
    read: Callable[[SparkSession, str, Mapping[str, Any]], DataFrame]
    metadata: Callable[[SparkSession, str, str], DataFrame]
    write: Callable[[DataFrame, str, str, str | None], object]
    dml: Callable[[SparkSession, str], object]
    create: Callable[[str, Any, Sequence[str], Mapping[str, str], bool], object]
    drop: Callable[[str, bool], bool]
    columns: Callable[[str], list[tuple[str, Any]]]
    call: Callable[[SparkSession, str, Mapping[str, Any]], tuple[str, list[tuple[Any, ...]]]]
    describe: Callable[[str, bool], list[tuple[str, str, str | None]]]
    properties: Callable[[str], list[tuple[str, str]]]
    tables: Callable[[str], list[str] | None]
    alter: Callable[[str, Sequence[tuple[Any, ...]]], object]
    partition_fields: Callable[[str], int]


def small_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A metadata table (small, on the driver) as a DataFrame, maps and structs included: as
    Python rows, since PySpark 3.5's Arrow path from pandas refuses map columns."""
    # an unpartitioned table's ``partition`` is an empty struct, which Spark cannot hold (Java's
    # metadata tables leave the column out)
    empty = [f.name for f in table.schema if pa.types.is_struct(f.type) and f.type.num_fields == 0]
    table = table.drop_columns(empty)
    rows = table.to_pylist(maps_as_pydicts="strict")
    names = table.column_names
    return spark.createDataFrame(
        [tuple(r[n] for n in names) for r in rows], schema=spark_schema_of(table.schema)
    )


PROCEDURES: dict[str, tuple[str, ...]] = {
    "rewrite_data_files": ("table", "strategy", "sort_order", "options", "where"),
    "rewrite_position_delete_files": ("table", "options", "where"),
    "expire_snapshots": (
        "table",
        "older_than",
        "retain_last",
        "max_concurrent_deletes",
        "stream_results",
        "snapshot_ids",
        "clean_expired_metadata",
    ),
    "remove_orphan_files": ("table", "older_than", "location", "dry_run", "max_concurrent_deletes"),
    "rollback_to_snapshot": ("table", "snapshot_id"),
    "rollback_to_timestamp": ("table", "timestamp"),
    "set_current_snapshot": ("table", "snapshot_id", "ref"),
    "fast_forward": ("table", "branch", "to"),
    "create_changelog_view": (
        "table",
        "changelog_view",
        "options",
        "net_changes",
        "compute_updates",
        "identifier_columns",
    ),
    "convert_equality_deletes": ("table",),
    "optimize": ("table", "dry_run"),
}
"""The procedures ``CALL <name>.system.<procedure>(…)`` runs, with Iceberg's parameter names in
Iceberg's order (positional arguments follow it); the last two are icemor's."""
