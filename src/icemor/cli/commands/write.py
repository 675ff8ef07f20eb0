"""Writing commands: ``append``, ``add-files``, ``delete``, ``apply-changes``, ``update``,
``merge``."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path  # noqa: TC003 (typer resolves annotations at runtime)
from typing import TYPE_CHECKING, Annotated

import typer

from icemor.cli.app import TableArg, echo_commit, engine_spark, fail, note, open_table, split_names
from icemor.cli.progress import enabled, rows_bar, work_bar

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["add_files", "append", "apply_changes", "delete", "merge", "update"]


def append(
    table: TableArg,
    files: Annotated[list[Path], typer.Argument(help="Parquet files to append, committed as one snapshot.")],
) -> None:
    """Append Parquet files to a table in one commit, streamed batch by batch (new data files).

    The files' schema must fit the table's (missing optional columns are NULL); nanosecond
    timestamps are stored as microseconds on v2 tables. A progress bar shows on a terminal.
    """
    t = open_table(table)
    # the footers are read only for a bar that shows
    with rows_bar("appending", _parquet_rows(files) if enabled() else None) as advance:
        rows = t.append_files(files, progress=advance, note=note)
    typer.echo(f"appended {rows} rows to {table}")


def _parquet_rows(files: Sequence[Path]) -> int:
    """The rows of ``files`` by their Parquet footers (a file that cannot be read counts 0:
    append_files reports it)."""
    import pyarrow as pa  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up
    import pyarrow.parquet as pq  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    total = 0
    for f in files:
        with contextlib.suppress(OSError, pa.ArrowInvalid):
            total += pq.read_metadata(f).num_rows
    return total


def add_files(
    table: TableArg,
    files: Annotated[
        list[str], typer.Argument(help="Parquet files (paths or URIs) to register where they lie.")
    ],
) -> None:
    """Register existing Parquet files as data files without copying them, in one commit.

    Their schema is checked against the table's (as pyiceberg's add_files). The table then
    references the files where they are: keep them there; drop-table --purge deletes them.
    """
    rows = open_table(table).add_files(files)
    typer.echo(f"added {len(files)} files ({rows} rows) to {table}")


def delete(
    table: TableArg,
    where: Annotated[
        str | None, typer.Option("--where", help='Delete the rows matching this filter, e.g. "k1 < 100".')
    ] = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Delete every row (removes every data and delete file).")
    ] = False,
) -> None:
    """Delete rows as merge-on-read: position-delete files, one commit (prints the metrics)."""
    if (where is None) == (not all_rows):
        fail("give exactly one of --where EXPR and --all")
    t = open_table(table)
    spark = engine_spark()
    with work_bar("deleting", "files") as progress:
        m = t.delete(where, spark=spark, progress=progress)
    echo_commit(
        m,
        done=f"deleted {m.deleted_rows} rows from {table}: {m.delete_files_added} delete files added, "
        f"{m.data_files_removed} data files and {m.delete_files_removed} delete files removed, ",
        nothing=f"no row of {table} matches: ",
    )


def apply_changes(
    table: TableArg,
    changes: Annotated[
        list[Path],
        typer.Option(
            "--changes",
            help="A Parquet file of change rows (repeatable: one batch, in the order given): the "
            "table's columns, the op column and --order-by if given.",
        ),
    ],
    key: Annotated[str, typer.Option("--key", help="Key column(s), comma-separated, e.g. id or a,b.")],
    op_column: Annotated[
        str,
        typer.Option(
            "--op-column",
            help="Column holding each row's op: I/insert, U/update_after (upsert), -U/update_before "
            "(ignored), D/delete (case-insensitive; Flink's +I, +U, -D too).",
        ),
    ] = "op",
    order_by: Annotated[
        str | None,
        typer.Option("--order-by", help="Column ordering the changes of one key (default: row order)."),
    ] = None,
    allow_nullable_key: Annotated[
        bool,
        typer.Option(
            "--allow-nullable-key", help="Accept optional or float/double key columns and NULL keys."
        ),
    ] = False,
    app_id: Annotated[
        str | None,
        typer.Option("--app-id", help="With --batch-id: record both, and skip a batch this app committed."),
    ] = None,
    batch_id: Annotated[
        int | None, typer.Option("--batch-id", help="The increasing batch number of --app-id.")
    ] = None,
    deletes: Annotated[
        str | None,
        typer.Option(
            "--deletes",
            help="equality (delete old rows by key: fastest ingest) or position (find their rows: "
            "deletion vectors on v3, position deletes on v2; fastest reads). Default: the table "
            "property icemor.cdc.delete-mode, else position on v3 tables, equality on v2.",
        ),
    ] = None,
) -> None:
    """Apply a batch of CDC change rows in one commit: new data files, and the old rows of updated
    and deleted keys deleted by equality deletes on the key, or by position (--deletes position)."""
    from icemor.ops.cdc import ChangeOptions  # noqa: PLC0415 - cost: pyiceberg's pyarrow IO ~1 s at CLI start-up

    # the flags checked before any file is read or staged (one line each)
    options = ChangeOptions(
        key=tuple(split_names(key)),
        op_column=op_column,
        order_by=order_by,
        allow_nullable_key=allow_nullable_key,
        app_id=app_id,
        batch_id=batch_id,
        deletes=deletes,
    ).keywords()
    for f in changes:
        if not f.is_file():
            fail(f"no such file: {f}" if not f.exists() else f"{f} is not a file")
    t = open_table(table)
    spark = engine_spark()
    if spark is not None:
        from icemor.engines.spark.changes import staged_parquet  # noqa: PLC0415 - optional: pyspark

        # executors on other hosts cannot read the driver's files: staged in the warehouse
        paths = [str(f.resolve()) for f in changes]
        with staged_parquet(spark, t.io, t.metadata.location, paths, t.metadata.properties) as df:
            m = t.apply_changes(df, **options)
    else:
        # one unit of work: the bar shows that it runs and for how long (Spark jobs: their tasks)
        with work_bar("applying changes", ""):
            m = t.apply_changes(changes, note=note, **options)
    if m.skipped:
        typer.echo(
            f"batch {batch_id} of app {app_id!r} is already in {table}: nothing done ({m.seconds:.3f} s)"
        )
        return
    counts = f"{m.inserts} I, {m.updates} U, {m.deletes} D, {m.ignored} -U ignored"
    echo_commit(
        m,
        done=f"applied {m.changes} changes ({counts}) to {table}: {m.rows_written} rows written, "
        f"{m.equality_deletes} keys deleted by equality, {m.position_deletes} rows by position; "
        f"{m.data_files_added} data, {m.equality_delete_files_added} equality and "
        f"{m.position_delete_files_added} position delete files; ",
        nothing=f"{m.changes} changes ({counts}) change nothing: ",
    )


def update(
    table: TableArg,
    set_: Annotated[
        list[str],
        typer.Option("--set", help='col=EXPR, the new value as SQL, e.g. "qty=qty + 1" (repeatable).'),
    ],
    where: Annotated[
        str | None, typer.Option("--where", help='SQL condition, e.g. "id % 10 = 3" (default: every row).')
    ] = None,
) -> None:
    """Update rows as merge-on-read: old rows position-deleted, new rows written, one commit."""
    assignments: dict[str, str] = {}
    for item in set_:
        column, eq, value = item.partition("=")
        if not eq or not column.strip() or not value.strip():
            fail(f"--set takes col=EXPR, got {item!r}")
        if column.strip() in assignments:
            fail(f"column {column.strip()!r} is SET twice")
        assignments[column.strip()] = value.strip()
    t = open_table(table)
    spark = engine_spark()
    with work_bar("updating", "files") as progress:
        m = t.update(assignments, where, spark=spark, progress=progress)
    echo_commit(
        m,
        done=f"updated {m.rows_updated} rows of {table}: {m.data_files_added} data files and "
        f"{m.delete_files_added} delete files added, {m.data_files_removed} data files removed, ",
        nothing=f"no row of {table} matches: ",
    )


class Matched(StrEnum):
    update = "update"
    delete = "delete"
    ignore = "ignore"


class NotMatched(StrEnum):
    insert = "insert"
    ignore = "ignore"


def merge(
    table: TableArg,
    source: Annotated[list[Path], typer.Option("--source", help="Parquet file of source rows (repeatable).")],
    on: Annotated[str, typer.Option("--on", help="Key column(s), comma-separated: t.k = s.k for each.")],
    matched: Annotated[
        Matched,
        typer.Option("--matched", help="What a matched target row gets: the source row, deleted, or kept."),
    ] = Matched.update,
    not_matched: Annotated[
        NotMatched,
        typer.Option("--not-matched", help="What an unmatched source row does: inserted, or nothing."),
    ] = NotMatched.insert,
) -> None:
    """Merge source rows by key as merge-on-read (an upsert by default), one commit."""
    keys = split_names(on)
    if not keys:
        fail("--on needs at least one key column")
    if matched == Matched.ignore and not_matched == NotMatched.ignore:
        fail("--matched ignore with --not-matched ignore does nothing")
    t = open_table(table)
    spark = engine_spark()
    builder = t.merge([str(p) for p in source], on=keys, spark=spark, note=note)
    if matched == Matched.update:
        builder = builder.when_matched_update_all()
    elif matched == Matched.delete:
        builder = builder.when_matched_delete()
    if not_matched == NotMatched.insert:
        builder = builder.when_not_matched_insert_all()
    with work_bar("merging", "files") as progress:
        m = builder.execute(progress=progress)
    echo_commit(
        m,
        done=f"merged into {table}: {m.rows_updated} updated, {m.rows_deleted} deleted, {m.rows_inserted} "
        f"inserted; {m.data_files_added} data files and {m.delete_files_added} delete files added, "
        f"{m.data_files_removed} data files removed, ",
        nothing=f"nothing to change in {table}: ",
    )
