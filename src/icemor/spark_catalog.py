"""What ``icemor.spark.attach`` serves a session: icemor's catalog as the front's services.

:mod:`icemor.engines.spark.front` routes statements; this module gives it the catalog, the
reads, the writes and the DDL of the layers above the engine (:class:`FrontServices`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icemor.catalog import load_catalog
from icemor.engines.spark.front import FrontServices, small_frame
from icemor.engines.spark.table_writes import new_table_schema_of
from icemor.engines.spark.types import spark_type
from icemor.exceptions import InvalidArgumentError
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
        inspect = Table.load(name, catalog=catalog).pyiceberg.inspect
        rows: pa.Table = getattr(inspect, which)()
        return small_frame(spark, rows)

    def write(df: DataFrame, name: str, mode: str, where: str | None) -> object:
        options = {"where": where} if where is not None else {}
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
        import icemor

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

    return FrontServices(
        identifier=identifier,
        read=read,
        metadata=metadata,
        write=write,
        dml=dml,
        create=create,
        drop=drop,
        columns=columns,
    )
