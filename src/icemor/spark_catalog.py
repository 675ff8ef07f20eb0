"""What ``icemor.spark.attach`` serves a session: icemor's catalog as the front's services.

:mod:`icemor.engines.spark.front` routes statements; this module gives it the catalog, the
reads, the writes and the DDL of the layers above the engine (:class:`FrontServices`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import icemor
from icemor.catalog import list_tables, load_catalog
from icemor.engines.spark.front_services import FrontServices, small_frame
from icemor.engines.spark.table_writes import new_table_schema_of
from icemor.engines.spark.types import spark_type
from icemor.exceptions import InvalidArgumentError
from icemor.io.deletes import position_delete_rows
from icemor.ops import table_meta
from icemor.ops.alter import SchemaChange
from icemor.planning.manifest_reader import live_delete_files
from icemor.spec.partitioning import partition_field_text
from icemor.table import Table

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["services"]


def services(
    catalog: str | None,
    *,
    read_table: Callable[..., DataFrame],
    write_table: Callable[..., object],
    run_dml: Callable[..., object],
) -> FrontServices:
    """The front's services over icemor's catalog ``catalog`` (a name; None: the embedded one).

    ``read_table``, ``write_table`` and ``run_dml`` are ``icemor.spark``'s ``read``, ``write``
    and ``sql`` (given by it: this module sits below it).
    """

    def the_catalog() -> Catalog:
        return load_catalog(catalog)

    def identifier(parts: Sequence[str]) -> str | None:
        name = ".".join(parts)
        try:
            return name if the_catalog().table_exists(name) else None
        except (ValueError, InvalidArgumentError):  # not a namespace.table name
            return None

    def read(spark: SparkSession, name: str, options: Mapping[str, Any]) -> DataFrame:
        given = dict(options)
        if (ref := given.pop("ref", None)) is not None:
            refs = Table.load(name, catalog=catalog).metadata.refs
            if ref not in refs:
                msg = f"no branch or tag {ref!r} in {name}"
                raise InvalidArgumentError(msg)
            given[str(refs[ref].snapshot_ref_type.value)] = ref
        return read_table(spark, name, catalog=catalog, **given)

    def metadata(spark: SparkSession, name: str, which: str) -> DataFrame:
        if which == "changes":
            return read_table(spark, name, catalog=catalog, read_change_feed=True)
        table = Table.load(name, catalog=catalog).pyiceberg
        if which == "position_deletes":
            snapshot = table.current_snapshot()
            deletes = [] if snapshot is None else live_delete_files(table.io, snapshot)
            return small_frame(spark, position_delete_rows(table.io, deletes))
        rows: pa.Table = getattr(table.inspect, which)()
        return small_frame(spark, rows)

    def write(df: DataFrame, name: str, mode: str, where: str | None) -> object:
        options: dict[str, str] = {"where": where} if where is not None else {}
        if mode == "replace-partitions":
            mode, options["overwrite_mode"] = "overwrite", "dynamic"
        return write_table(df, name, mode=mode, catalog=catalog, **options)

    def dml(spark: SparkSession, text: str) -> object:
        return run_dml(spark, text, catalog=catalog)

    def create(
        name: str,
        df: DataFrame,
        partition_by: Sequence[str],
        properties: Mapping[str, str],
        if_not_exists: bool,
    ) -> object:
        if if_not_exists and the_catalog().table_exists(name):
            return None
        props = dict(properties)
        version = int(props.pop("format-version", "2"))
        icemor.create_table(
            name,
            new_table_schema_of(df),
            partition_by=list(partition_by),
            properties=props,
            format_version=version,
            catalog=catalog,
        )
        if df.columns and not df.isEmpty():
            try:
                write_table(df, name, mode="append", catalog=catalog)
            except BaseException:
                Table.load(name, catalog=catalog).drop(purge=True)
                raise
        return None

    def drop(name: str, purge: bool) -> bool:
        Table.load(name, catalog=catalog).drop(purge=purge)
        return True

    def columns(name: str) -> list[tuple[str, Any]]:
        return [(f.name, spark_type(f.field_type)) for f in Table.load(name, catalog=catalog).schema().fields]

    def describe(name: str, extended: bool) -> list[tuple[str, str, str | None]]:
        return describe_rows(Table.load(name, catalog=catalog), extended)

    def properties(name: str) -> list[tuple[str, str]]:
        return property_rows(Table.load(name, catalog=catalog))

    def tables(namespace: str) -> list[str] | None:
        try:
            return [t.rsplit(".", 1)[-1] for t in list_tables(the_catalog(), namespace)]
        except InvalidArgumentError:  # no such namespace
            return None

    def call(
        spark: SparkSession, procedure: str, arguments: Mapping[str, Any]
    ) -> tuple[str, list[tuple[Any, ...]]]:
        return run_procedure(
            spark, Table.load(str(arguments["table"]), catalog=catalog), procedure, arguments, read_table
        )

    def alter(name: str, actions: Sequence[tuple[Any, ...]]) -> object:
        for action in actions:
            alter_table(Table.load(name, catalog=catalog), action, the_catalog())
        return None

    return FrontServices(
        identifier=identifier,
        read=read,
        metadata=metadata,
        write=write,
        dml=dml,
        create=create,
        drop=drop,
        columns=columns,
        call=call,
        describe=describe,
        properties=properties,
        tables=tables,
        alter=alter,
        partition_fields=lambda name: len(Table.load(name, catalog=catalog).pyiceberg.spec().fields),
    )


# ---- DESCRIBE, SHOW TBLPROPERTIES -----------------------------------------------------------


def describe_rows(table: Table, extended: bool) -> list[tuple[str, str, str | None]]:
    """DESCRIBE's rows as Iceberg's runtime gives them: the columns, then the partitioning
    (EXTENDED: and the table's details)."""
    rows: list[tuple[str, str, str | None]] = [
        (f.name, spark_type(f.field_type).simpleString(), f.doc) for f in table.schema().fields
    ]
    spec = table.metadata.spec()
    rows += [("", "", ""), ("# Partitioning", "", "")]
    if spec.fields:
        rows += [
            (f"Part {i}", partition_field_text(table.schema(), f), "") for i, f in enumerate(spec.fields)
        ]
    else:
        rows.append(("Not partitioned", "", ""))
    if extended:
        props = ",".join(f"{k}={v}" for k, v in property_rows(table))
        rows += [
            ("", "", ""),
            ("# Detailed Table Information", "", ""),
            ("Name", table.name, ""),
            ("Location", table.metadata.location, ""),
            ("Provider", "iceberg", ""),
            ("Table Properties", f"[{props}]", ""),
        ]
    return rows


_RESERVED = frozenset({"provider", "location", "comment", "owner", "external", "is_managed_location"})


def property_rows(table: Table) -> list[tuple[str, str]]:
    """The table's properties with those Iceberg's runtime adds (current-snapshot-id, format,
    format-version, sort-order, identifier-fields), sorted by key as Spark shows them."""
    metadata = table.metadata
    # Spark hides its catalogs' reserved properties (CatalogV2Util.TABLE_RESERVED_PROPERTIES)
    shown = {k: v for k, v in table.properties.items() if k not in _RESERVED}
    current = metadata.current_snapshot()
    if current is not None:
        shown["current-snapshot-id"] = str(current.snapshot_id)
    else:
        shown["current-snapshot-id"] = "none"
    shown["format"] = "iceberg/parquet"
    shown["format-version"] = str(metadata.format_version)
    identifiers = table.schema().identifier_field_names()
    if identifiers:
        shown["identifier-fields"] = "[" + ",".join(sorted(identifiers)) + "]"
    return sorted(shown.items())


# ---- CALL ----------------------------------------------------------------------------------


def run_procedure(
    spark: SparkSession,
    table: Table,
    procedure: str,
    arguments: Mapping[str, Any],
    read_table: Callable[..., DataFrame],
) -> tuple[str, list[tuple[Any, ...]]]:
    """Run ``CALL <name>.system.<procedure>`` on ``table``: Iceberg's result columns and rows.

    Raises:
        InvalidArgumentError: An argument or option icemor does not run (named), or a bad value.
    """
    given = {k: v for k, v in arguments.items() if v is not None and k != "table"}
    maintenance = table.maintenance
    if procedure == "rewrite_data_files":
        _refuse(procedure, given, ("options", "where", "strategy"))
        if str(given.get("strategy", "binpack")).lower() != "binpack":
            msg = f"rewrite_data_files: strategy {given['strategy']!r} is not supported (binpack only)"
            raise InvalidArgumentError(msg)
        kwargs = _options(procedure, given.get("options") or {}, _REWRITE_DATA_OPTIONS)
        if "where" in given:
            kwargs["where"] = str(given["where"])
        m = maintenance.rewrite_data_files(spark=spark, **kwargs)
        schema = (
            "rewritten_data_files_count int, added_data_files_count int, rewritten_bytes_count bigint, "
            "failed_data_files_count int, removed_delete_files_count int"
        )
        return schema, [
            (m.data_files_rewritten, m.data_files_added, m.bytes_rewritten, 0, m.delete_files_removed)
        ]
    if procedure == "rewrite_position_delete_files":
        _refuse(procedure, given, ("options",))
        _options(procedure, given.get("options") or {}, {})
        pm = maintenance.rewrite_position_deletes(spark=spark)
        schema = (
            "rewritten_delete_files_count int, added_delete_files_count int, rewritten_bytes_count bigint, "
            "added_bytes_count bigint"
        )
        return schema, [
            (pm.delete_files_rewritten + pm.dangling_delete_files_removed, pm.delete_files_added, 0, 0)
        ]
    if procedure == "expire_snapshots":
        _refuse(procedure, given, ("older_than", "retain_last", "max_concurrent_deletes", "stream_results"))
        em = maintenance.expire_snapshots(
            older_than=given.get("older_than"), retain_last=given.get("retain_last")
        )
        schema = (
            "deleted_data_files_count bigint, deleted_position_delete_files_count bigint, "
            "deleted_equality_delete_files_count bigint, deleted_manifest_files_count bigint, "
            "deleted_manifest_lists_count bigint, deleted_statistics_files_count bigint"
        )
        return schema, [
            (
                em.data_files_deleted,
                em.delete_files_deleted,
                0,
                em.manifests_deleted,
                em.manifest_lists_deleted,
                em.statistics_files_deleted,
            )
        ]
    if procedure == "remove_orphan_files":
        _refuse(procedure, given, ("older_than", "dry_run", "max_concurrent_deletes"))
        om = maintenance.remove_orphan_files(
            older_than=given.get("older_than"), dry_run=bool(given.get("dry_run"))
        )
        return "orphan_file_location string", [(f,) for f in om.files]
    if procedure == "convert_equality_deletes":
        cm = maintenance.rewrite_equality_deletes(spark=spark)
        schema = (
            "data_files_converted int, position_delete_files_added int, equality_delete_files_removed int"
        )
        return schema, [
            (cm.data_files_converted, cm.position_delete_files_added, cm.equality_delete_files_removed)
        ]
    if procedure == "optimize":
        _refuse(procedure, given, ("dry_run",))
        result = table.optimize(dry_run=bool(given.get("dry_run")), spark=spark)
        rows = [(a.action, a.snapshot_id, float(a.seconds)) for a in result.actions]
        return "action string, snapshot_id bigint, seconds double", rows
    py = table.pyiceberg
    snapshots = "previous_snapshot_id bigint, current_snapshot_id bigint"
    if procedure == "rollback_to_snapshot":
        change = table_meta.rollback_to_snapshot(py, int(_required(procedure, given, "snapshot_id")))
        return snapshots, [(change.previous_snapshot_id, change.current_snapshot_id)]
    if procedure == "rollback_to_timestamp":
        change = table_meta.rollback_to_timestamp(py, int(_required(procedure, given, "timestamp")))
        return snapshots, [(change.previous_snapshot_id, change.current_snapshot_id)]
    if procedure == "set_current_snapshot":
        _refuse(procedure, given, ("snapshot_id", "ref"))
        snapshot = given.get("snapshot_id")
        change = table_meta.set_current_snapshot(
            py, snapshot_id=None if snapshot is None else int(snapshot), ref=given.get("ref")
        )
        return snapshots, [(change.previous_snapshot_id, change.current_snapshot_id)]
    if procedure == "fast_forward":
        ff = table_meta.fast_forward(
            py, str(_required(procedure, given, "branch")), str(_required(procedure, given, "to"))
        )
        return "branch_updated string, previous_ref bigint, updated_ref bigint", [
            (ff.branch_updated, ff.previous_ref, ff.updated_ref)
        ]
    if procedure == "create_changelog_view":
        return _changelog_view(spark, table, given, read_table)
    msg = f"CALL {procedure} is not supported yet through attach"
    raise InvalidArgumentError(msg)


def _changelog_view(
    spark: SparkSession, table: Table, given: Mapping[str, Any], read_table: Callable[..., DataFrame]
) -> tuple[str, list[tuple[Any, ...]]]:
    """``create_changelog_view``: icemor's change feed (deletes included, which Java refuses) as
    a temporary view named ``changelog_view`` (default ``<table>_changes``)."""
    _refuse("create_changelog_view", given, ("changelog_view", "options"))
    options = dict(given.get("options") or {})
    feed: dict[str, Any] = {"read_change_feed": True}
    names = {
        "start-snapshot-id": "starting_snapshot_id",
        "end-snapshot-id": "ending_snapshot_id",
        "start-timestamp": "starting_timestamp",
        "end-timestamp": "ending_timestamp",
    }
    for key, value in options.items():
        if key not in names:
            msg = f"create_changelog_view: option {key!r} is not supported ({', '.join(names)})"
            raise InvalidArgumentError(msg)
        feed[names[key]] = int(value)
    view = str(given.get("changelog_view") or f"{table.name.rsplit('.', 1)[-1]}_changes")
    read_table(spark, table.name, **feed).createOrReplaceTempView(view)
    return "changelog_view string", [(view,)]


_REWRITE_DATA_OPTIONS = {
    "delete-ratio-threshold": ("delete_ratio_threshold", float),
    "delete-file-threshold": ("delete_file_threshold", int),
    "target-file-size-bytes": ("target_file_size_bytes", int),
    "use-starting-sequence-number": ("use_starting_sequence_number", lambda v: str(v).lower() == "true"),
    "partial-progress.enabled": ("partial_progress_enabled", lambda v: str(v).lower() == "true"),
    "partial-progress.max-commits": ("partial_progress_max_commits", int),
}


def _options(
    procedure: str, options: Mapping[str, Any], known: Mapping[str, tuple[str, Any]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key not in known:
            runs = ", ".join(known) or "none"
            msg = f"{procedure}: option {key!r} is not supported (icemor runs: {runs})"
            raise InvalidArgumentError(msg)
        name, convert = known[key]
        try:
            out[name] = convert(value)
        except ValueError as e:
            msg = f"{procedure}: option {key!r}: bad value {value!r}"
            raise InvalidArgumentError(msg) from e
    return out


def _required(procedure: str, given: Mapping[str, Any], name: str) -> Any:
    if name not in given:
        msg = f"{procedure} needs its {name} argument"
        raise InvalidArgumentError(msg)
    return given[name]


def _refuse(procedure: str, given: Mapping[str, Any], runs: Sequence[str]) -> None:
    extra = [k for k in given if k not in runs]
    if extra:
        runs_text = ", ".join(("table", *runs))
        msg = f"{procedure}: argument {extra[0]} is not supported through attach (icemor runs: {runs_text})"
        raise InvalidArgumentError(msg)


# ---- ALTER TABLE ---------------------------------------------------------------------------


def alter_table(table: Table, action: tuple[Any, ...], catalog: Catalog) -> None:
    """Commit one ALTER TABLE action (:data:`icemor.expr.ddl.ALTER_ACTIONS`) as Iceberg's runtime does.

    Raises:
        InvalidArgumentError: A change Iceberg refuses (named), or one icemor does not make.
    """
    kind, *args = action
    py = table.pyiceberg
    if kind == "set_properties":
        values = dict(args[0])
        version = values.pop("format-version", None)
        if version is not None:
            table.upgrade(format_version=int(version))
        if values:
            table_meta.set_properties(py, values)
    elif kind == "unset_properties":
        table_meta.unset_properties(py, args[0], if_exists=args[1])
    elif kind in ("add_columns", "rename_column", "drop_columns", "alter_type", "drop_not_null"):
        change = SchemaChange(py)
        if kind == "add_columns":
            for column, type_text, comment in args[0]:
                change.add_column(column, type_text, doc=comment)
        elif kind == "rename_column":
            change.rename_column(args[0], args[1])
        elif kind == "drop_columns":
            for column in args[0]:
                change.drop_column(column)
        elif kind == "alter_type":
            change.widen_column(args[0], args[1])
        else:
            msg = f"ALTER COLUMN {args[0]} DROP NOT NULL is not supported through attach"
            raise InvalidArgumentError(msg)
        change.commit()
    elif kind == "rename_table":
        new = str(args[0])
        if "." not in new:
            new = f"{table.name.rsplit('.', 1)[0]}.{new}"
        catalog.rename_table(table.name, new)
    elif kind == "create_ref":
        ref_kind, name, snapshot, create, replace, if_not_exists, retain_ms = args
        common = {
            "snapshot_id": snapshot,
            "create": create,
            "replace": replace,
            "if_not_exists": if_not_exists,
        }
        if ref_kind == "branch":
            table_meta.create_branch(py, name, **common, max_ref_age_ms=retain_ms)
        else:
            table_meta.create_tag(py, name, **common, max_ref_age_ms=retain_ms)
    elif kind == "drop_ref":
        ref_kind, name, if_exists = args
        (table_meta.drop_branch if ref_kind == "branch" else table_meta.drop_tag)(
            py, name, if_exists=if_exists
        )
    elif kind == "add_partition_field":
        table_meta.add_partition_field(py, args[0])
    elif kind == "drop_partition_field":
        table_meta.drop_partition_field(py, args[0])
    elif kind == "set_identifier_fields":
        schema = table.schema()
        for column in args[0]:
            found = schema.find_field(column)
            if not found.required:  # Iceberg's runtime does not make it required, it refuses
                msg = f"Cannot add field {column} as an identifier field: not a required field"
                raise InvalidArgumentError(msg)
        SchemaChange(py).set_identifier_fields(*args[0]).commit()
    else:
        msg = f"ALTER TABLE … {kind.replace('_', ' ').upper()} is not supported through attach"
        raise InvalidArgumentError(msg)
