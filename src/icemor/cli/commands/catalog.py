"""The catalog's tables and namespaces: ``create-table``, ``alter``, ``upgrade``, ``drop-table``,
``namespaces``, ``tables``."""

from __future__ import annotations

from pathlib import Path  # noqa: TC003 (typer resolves annotations at runtime)
from typing import Annotated

import typer

from icemor.cli.app import JsonOpt, TableArg, fail, note, open_catalog, open_table, parse_pairs, split_names
from icemor.exceptions import InvalidArgumentError
from icemor.ops.drop import drop_table as _drop

__all__ = ["alter", "create_table", "drop_table", "namespaces", "tables", "upgrade"]


def create_table(
    table: Annotated[str, typer.Argument(help="namespace.table to create (namespace created if missing).")],
    schema_from: Annotated[
        Path, typer.Option("--schema-from", help="A Parquet file whose schema the table takes.")
    ],
    partition_by: Annotated[
        list[str] | None,
        typer.Option(
            "--partition-by",
            help="Partition field: col, bucket(N,col), truncate(W,col), year|month|day|hour(col). Repeatable "
            "or comma-separated.",
        ),
    ] = None,
    format_version: Annotated[
        int, typer.Option("--format-version", help="Iceberg format version: 2 or 3.")
    ] = 2,
    prop: Annotated[
        list[str] | None, typer.Option("--property", help="Table property k=v (repeatable).")
    ] = None,
    identifier_fields: Annotated[
        str | None,
        typer.Option(
            "--identifier-fields",
            help="The row key, comma-separated (e.g. id): Iceberg's identifier fields, made NOT NULL.",
        ),
    ] = None,
) -> None:
    """Create a table whose schema is taken from a Parquet file."""
    from icemor.catalog import table_locations  # noqa: PLC0415 - cost: icemor.catalog ~7 ms at CLI start-up
    from icemor.ops.create import create_table as _create  # noqa: PLC0415 - cost: ~1 s at CLI start-up

    props = parse_pairs(prop, "--property")
    catalog = open_catalog()
    created = _create(
        catalog,
        table,
        schema_from=schema_from,
        partition_by=partition_by or [],
        identifier_fields=split_names(identifier_fields),
        format_version=format_version,
        properties=props,
        tables=lambda: table_locations(catalog, strict=False),
        note=note,
    )
    typer.echo(f"created {table} (format-version {format_version}) at {created.metadata.location}")


def _pair(text: str, option: str, shape: str) -> tuple[str, str]:
    left, sep, right = text.partition(":")
    if not sep or not left.strip() or not right.strip():
        msg = f"{option} takes {shape}, got {text!r}"
        raise InvalidArgumentError(msg)
    return left.strip(), right.strip()


def alter(
    table: TableArg,
    add_column: Annotated[
        list[str] | None,
        typer.Option("--add-column", help="name:type, a new optional column, e.g. note:string (repeatable)."),
    ] = None,
    rename: Annotated[
        list[str] | None, typer.Option("--rename", help="old:new, rename a column (repeatable).")
    ] = None,
    widen: Annotated[
        list[str] | None,
        typer.Option(
            "--widen", help="col:type, promote int->long, float->double, decimal(P,S)->decimal(P2,S)."
        ),
    ] = None,
    require: Annotated[
        list[str] | None,
        typer.Option("--require", help="Make column(s) NOT NULL (refused if a live row is NULL)."),
    ] = None,
    identifier_fields: Annotated[
        str | None,
        typer.Option(
            "--identifier-fields", help="The row key, comma-separated: made NOT NULL (as --require) first."
        ),
    ] = None,
) -> None:
    """Evolve the schema in one metadata commit: add optional columns, rename, widen types, make
    columns required, set the identifier fields. Data files are not rewritten."""
    from icemor.ops.alter import SchemaChange  # noqa: PLC0415 - cost: ~1 s at CLI start-up

    change = SchemaChange(open_table(table))  # what Table.update_schema() returns
    steps = 0
    for item in add_column or ():
        change.add_column(*_pair(item, "--add-column", "name:type"))
        steps += 1
    for item in rename or ():
        change.rename_column(*_pair(item, "--rename", "old:new"))
        steps += 1
    for item in widen or ():
        change.widen_column(*_pair(item, "--widen", "col:type"))
        steps += 1
    for name in split_names(require):
        change.require_column(name)
        steps += 1
    if identifier_fields is not None:
        change.set_identifier_fields(*split_names(identifier_fields))
        steps += 1
    if not steps:
        fail("give at least one of --add-column, --rename, --widen, --require, --identifier-fields")
    schema = change.commit()
    typer.echo(f"altered {table}: schema {schema.schema_id}")


def namespaces(as_json: JsonOpt = False) -> None:
    """List the catalog's namespaces (nested ones dotted), one a line."""
    from icemor.catalog import list_namespaces  # noqa: PLC0415 - cost: icemor.catalog ~7 ms at CLI start-up
    from icemor.cli.output import print_names  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    print_names(list_namespaces(open_catalog()), as_json=as_json)


def tables(
    namespace: Annotated[
        str | None, typer.Argument(help="List this namespace's tables (default: every namespace).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List tables as namespace.table, one a line."""
    from icemor.catalog import list_tables  # noqa: PLC0415 - cost: icemor.catalog ~7 ms at CLI start-up
    from icemor.cli.output import print_names  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    print_names(list_tables(open_catalog(), namespace), as_json=as_json)


def upgrade(
    table: TableArg,
    format_version: Annotated[int, typer.Option("--format-version", help="The new format version: 3.")],
) -> None:
    """Upgrade a table's format version (v2 -> v3: deletion vectors from then on)."""
    t = open_table(table)
    before = t.upgrade(format_version=format_version)
    if before == format_version:
        typer.echo(f"{table} is already format-version {format_version}")
    else:
        typer.echo(f"upgraded {table} from format-version {before} to {format_version}")


def drop_table(
    table: TableArg,
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Also delete the table's data, delete and metadata files (including files added "
            "with add-files).",
        ),
    ] = False,
) -> None:
    """Remove a table from the catalog; its files stay unless --purge is given."""
    _drop(open_catalog(), table, purge=purge)
    typer.echo(f"dropped {table}" + (" and deleted its files" if purge else " (its files are kept)"))
