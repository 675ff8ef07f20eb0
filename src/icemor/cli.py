"""The ``icemor`` command line: a thin layer over the public table API.

Every expected failure prints one line on stderr and exits with code 2 (a traceback only
with ``--debug``). Ctrl-C and SIGTERM exit with code 130 and a one-line note; a write they
interrupt removes what it wrote unless the catalog may have committed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from enum import StrEnum
from pathlib import Path  # noqa: TC003 (typer resolves annotations at runtime)
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pyiceberg import exceptions as _pe

from icemor import cli_health
from icemor.cli_app import (
    OPTIONS,
    Engine,
    JsonOpt,
    Options,
    app,
    cli_options,
    open_catalog,
    open_table,
    parse_pairs,
    spark_session,
)
from icemor.exceptions import (
    NO_ROOM_ERRNOS,
    IcemorError,
    InvalidArgumentError,
    RedactFilter,
    first_line,
    formatted_traceback,
    os_reason,
    redact,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    import pyarrow as pa

    from icemor.scan import Scan

__all__ = ["app", "main"]

# pyiceberg's errors share no base class; these are the ones a user's input can cause.
_PYICEBERG_USER_ERRORS: tuple[type[Exception], ...] = (
    _pe.ValidationError,
    _pe.NoSuchTableError,
    _pe.NoSuchNamespaceError,
    _pe.NoSuchIdentifierError,
    _pe.NamespaceNotEmptyError,
    _pe.TableAlreadyExistsError,
    _pe.CommitFailedException,
    _pe.ResolveError,
    _pe.NoSuchPropertyException,
)
_USER_ERRORS: tuple[type[Exception], ...] = (
    IcemorError,
    FileNotFoundError,
    PermissionError,
    *_PYICEBERG_USER_ERRORS,
)


class OutputFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"
    jsonl = "jsonl"


def _show_version(value: bool) -> None:
    if value:
        from icemor import __version__

        typer.echo(f"icemor {__version__}")
        raise typer.Exit


@app.callback()
def _global(
    catalog: Annotated[
        str | None, typer.Option("--catalog", help="A pyiceberg catalog name (.pyiceberg.yaml / env vars).")
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option("--engine", envvar="ICEMOR_ENGINE", help="Where scans run: local threads or Spark."),
    ] = Engine.local,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master", envvar="ICEMOR_SPARK_MASTER", help="Spark master URL (default local[*])."
        ),
    ] = None,
    spark_conf: Annotated[
        list[str] | None, typer.Option("--spark-conf", help="Spark configuration k=v (repeatable).")
    ] = None,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks on errors, and Spark's log (WARN and up).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    opts = cli_options()
    opts.catalog_name = catalog
    opts.engine = engine
    opts.debug = debug
    opts.spark_master = spark_master
    opts.spark_conf = tuple(spark_conf or ())


def _fail(message: str) -> None:
    typer.echo(f"icemor: error: {redact(message)}", err=True)
    raise typer.Exit(code=2)


def _note(text: str) -> None:
    typer.echo(f"icemor: note: {text}", err=True)


@app.command("create-table")
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
    from icemor.catalog import table_locations
    from icemor.ops.create import create_table as _create

    props = parse_pairs(prop, "--property")
    catalog = open_catalog()
    created = _create(
        catalog,
        table,
        schema_from=schema_from,
        partition_by=partition_by or [],
        identifier_fields=[c.strip() for c in (identifier_fields or "").split(",") if c.strip()],
        format_version=format_version,
        properties=props,
        tables=lambda: table_locations(catalog, strict=False),
        note=_note,
    )
    typer.echo(f"created {table} (format-version {format_version}) at {created.metadata.location}")


def _pair(text: str, option: str, shape: str) -> tuple[str, str]:
    left, sep, right = text.partition(":")
    if not sep or not left.strip() or not right.strip():
        msg = f"{option} takes {shape}, got {text!r}"
        raise InvalidArgumentError(msg)
    return left.strip(), right.strip()


def _names(values: list[str] | None) -> list[str]:
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]


@app.command()
def alter(
    table: Annotated[str, typer.Argument(help="namespace.table")],
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
    from icemor.ops.alter import SchemaChange

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
    for name in _names(require):
        change.require_column(name)
        steps += 1
    if identifier_fields is not None:
        change.set_identifier_fields(*_names([identifier_fields]))
        steps += 1
    if not steps:
        _fail("give at least one of --add-column, --rename, --widen, --require, --identifier-fields")
    schema = change.commit()
    typer.echo(f"altered {table}: schema {schema.schema_id}")


@app.command()
def append(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    files: Annotated[list[Path], typer.Argument(help="Parquet files to append, committed as one snapshot.")],
) -> None:
    """Append Parquet files to a table in one commit, streamed batch by batch (new data files).

    The files' schema must fit the table's (missing optional columns are NULL); nanosecond
    timestamps are stored as microseconds on v2 tables. A progress bar shows on a terminal.
    """
    from icemor.progress import enabled

    t = open_table(table)
    if not enabled():
        rows = t.append_files(files, note=_note)
    else:
        from icemor.output import append_progress

        with append_progress(files) as advance:
            rows = t.append_files(files, progress=advance, note=_note)
    typer.echo(f"appended {rows} rows to {table}")


@app.command("add-files")
def add_files(
    table: Annotated[str, typer.Argument(help="namespace.table")],
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


_WhereOpt = Annotated[str | None, typer.Option("--where", help="Row filter, e.g. \"id > 5 and k2 = 'a'\".")]
_SnapshotOpt = Annotated[int | None, typer.Option("--snapshot-id", help="Read this snapshot.")]
_AsOfOpt = Annotated[
    str | None,
    typer.Option(
        "--as-of-timestamp",
        help="Read the snapshot current at this time: ms since the epoch or ISO-8601 (UTC unless zoned).",
    ),
]
_RefOpt = Annotated[str | None, typer.Option("--ref", help="Read the head of this branch or tag.")]


def _scan(
    table: str,
    where: str | None,
    columns: str | None,
    snapshot_id: int | None,
    as_of_timestamp: str | None,
    ref: str | None,
    metadata_columns: bool = False,
    include_deleted: bool = False,
) -> Scan:
    if sum(x is not None for x in (snapshot_id, as_of_timestamp, ref)) > 1:
        _fail("give at most one of --snapshot-id, --as-of-timestamp and --ref")
    fields: tuple[str, ...] = ("*",)
    if columns:
        fields = tuple(c.strip() for c in columns.split(",") if c.strip())
    return open_table(table).scan(
        row_filter=where,
        selected_fields=fields,
        snapshot_id=snapshot_id,
        as_of_timestamp=_epoch_ms(as_of_timestamp, "--as-of-timestamp") if as_of_timestamp else None,
        ref=ref,
        metadata_columns=metadata_columns,
        include_deleted=include_deleted,
    )


def _check_output(output: Path | None, fmt: OutputFormat | None, *, overwrite: bool) -> str | None:
    """Check ``--output``/``--format``/``--overwrite`` of ``scan`` and ``changes``; the format name
    (None: by the file's extension). Checked before any reading: a long scan must not end in
    "file exists"."""
    to_stdout = output is not None and str(output) == "-"
    fmt_name = fmt.value if fmt is not None else None
    if output is None and fmt is not None:
        _fail("--format needs --output FILE or --output -")
    if to_stdout and fmt_name is None:
        _fail("--output - needs --format csv, jsonl or parquet")
    if to_stdout and fmt_name == "parquet" and sys.stdout.isatty():
        _fail("refusing to write Parquet to a terminal: pipe or redirect stdout")
    if (
        output is not None
        and not to_stdout
        and fmt_name is None
        and output.suffix.lower() not in (".parquet", ".csv", ".jsonl")
    ):
        _fail(f"--output must end in .parquet, .csv or .jsonl (or give --format): {output}")
    if output is not None and not to_stdout:
        if output.exists() and not overwrite:
            _fail(f"{output} exists: give --overwrite to replace it")
        if not output.parent.is_dir():
            _fail(f"cannot write {output}: no such folder {output.parent}")
    return fmt_name


def _emit(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    output: Path | None,
    fmt_name: str | None,
    *,
    limit: int | None,
    overwrite: bool,
    title: str,
) -> None:
    """Rows to ``output`` (``-``: stdout as ``fmt_name``), or as a table on the terminal."""
    from icemor.output import print_table, stream_batches, write_batches

    if output is not None and str(output) == "-":
        assert fmt_name is not None
        try:
            stream_batches(batches, schema, sys.stdout.buffer, fmt=fmt_name, limit=limit)
        except BrokenPipeError:
            # the reader (head, less) left: not an error; keep Python's exit flush quiet too
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    elif output is not None:
        from icemor.progress import counting_rows, rows_bar

        with rows_bar("writing", None) as advance:
            counted = counting_rows(batches, advance)
            n = write_batches(counted, schema, output, limit=limit, fmt=fmt_name, overwrite=overwrite)
        typer.echo(f"wrote {n} rows to {output}")
    else:
        print_table(batches, schema, limit=limit, title=title)


def _spark_batches(scan: Scan) -> Iterator[pa.RecordBatch]:
    """The scan on Spark, streamed a partition at a time, in the scan's own Arrow schema (Spark
    makes every column nullable: a Parquet writer of the table's schema refuses that)."""
    from icemor.engines.spark import iter_arrow

    yield from iter_arrow(scan.to_spark(spark_session()), schema=scan.arrow_schema)


@app.command()
def scan(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    where: _WhereOpt = None,
    columns: Annotated[
        str | None, typer.Option("--columns", help="Comma-separated columns (default all).")
    ] = None,
    snapshot_id: _SnapshotOpt = None,
    as_of_timestamp: _AsOfOpt = None,
    ref: _RefOpt = None,
    metadata_columns: Annotated[bool, typer.Option("--metadata-columns", help="Add _file and _pos.")] = False,
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Keep deleted rows, marked by a _deleted column.")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=0,
            help="At most N rows. Without it the terminal display stops at 1,000 rows (files and "
            "--output - get every row).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="Write rows to a .parquet, .csv or .jsonl file instead; '-' streams to stdout "
            "(with --format).",
        ),
    ] = None,
    fmt: Annotated[
        OutputFormat | None,
        typer.Option("--format", help="Format of --output (default: by the file's extension)."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing --output file.")
    ] = False,
) -> None:
    """Read a table with every delete file applied (merge-on-read).

    Timestamps are ISO-8601 in csv and jsonl output (2024-02-01T10:00:00.000000, +00:00 when
    zoned).
    """
    fmt_name = _check_output(output, fmt, overwrite=overwrite)
    s = _scan(table, where, columns, snapshot_id, as_of_timestamp, ref, metadata_columns, include_deleted)
    spark = cli_options().engine == Engine.spark
    batches = _spark_batches(s) if spark else s.to_arrow_batch_reader()
    _emit(batches, s.arrow_schema, output, fmt_name, limit=limit, overwrite=overwrite, title=table)


_JsonlOpt = Annotated[
    bool, typer.Option("--jsonl", help="JSON Lines: one JSON object a line, for streaming.")
]


@app.command()
def count(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    where: _WhereOpt = None,
    snapshot_id: _SnapshotOpt = None,
    as_of_timestamp: _AsOfOpt = None,
    ref: _RefOpt = None,
) -> None:
    """Print the number of live rows (deletes applied)."""
    s = _scan(table, where, None, snapshot_id, as_of_timestamp, ref)
    if cli_options().engine == Engine.spark:
        typer.echo(str(s.to_spark(spark_session()).count()))
    else:
        typer.echo(str(s.count()))


@app.command()
def files(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    as_json: JsonOpt = False,
    where: _WhereOpt = None,
    snapshot_id: _SnapshotOpt = None,
    as_of_timestamp: _AsOfOpt = None,
    ref: _RefOpt = None,
    jsonl: _JsonlOpt = False,
) -> None:
    """List data files with the delete files that apply to them: the scan plan."""
    from icemor.output import print_plan

    planned = _scan(table, where, None, snapshot_id, as_of_timestamp, ref).plan_files()
    print_plan(planned, as_json=as_json, jsonl=jsonl)


@app.command()
def changes(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    from_snapshot: Annotated[
        int | None, typer.Option("--from-snapshot", help="Exclusive start (default: the first snapshot).")
    ] = None,
    to_snapshot: Annotated[
        int | None, typer.Option("--to-snapshot", help="Inclusive end (default: the current snapshot).")
    ] = None,
    from_timestamp: Annotated[
        str | None,
        typer.Option(
            "--from-timestamp",
            help="Instead of --from-snapshot: changes committed after this time (ms or ISO-8601, UTC unless "
            "zoned).",
        ),
    ] = None,
    to_timestamp: Annotated[
        str | None,
        typer.Option(
            "--to-timestamp", help="Instead of --to-snapshot: changes committed at or before this time."
        ),
    ] = None,
    net: Annotated[
        bool, typer.Option("--net", help="The net change: rows inserted and deleted in the range vanish.")
    ] = False,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="Comma-separated key: a delete and an insert of a key in one snapshot "
            "are an update (default: the identifier fields).",
        ),
    ] = None,
    where: _WhereOpt = None,
    columns: Annotated[
        str | None, typer.Option("--columns", help="Comma-separated columns (default all).")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=0, help="At most N rows (the terminal display stops at 1,000 without it)."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="Write rows to a .parquet, .csv or .jsonl file; '-' streams to stdout."
        ),
    ] = None,
    fmt: Annotated[
        OutputFormat | None,
        typer.Option("--format", help="Format of --output (default: by the file's extension)."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing --output file.")
    ] = False,
) -> None:
    """The rows inserted, deleted and updated in (--from-snapshot, --to-snapshot], every delete kind
    included, with _change_type, _change_ordinal and _commit_snapshot_id (Iceberg's changelog view)."""
    fmt_name = _check_output(output, fmt, overwrite=overwrite)
    fields = tuple(c.strip() for c in columns.split(",") if c.strip()) if columns else ("*",)
    keys = [k.strip() for k in key.split(",") if k.strip()] if key else None
    feed = open_table(table).changes(
        from_snapshot,
        to_snapshot,
        start_timestamp=_epoch_ms(from_timestamp, "--from-timestamp") if from_timestamp else None,
        end_timestamp=_epoch_ms(to_timestamp, "--to-timestamp") if to_timestamp else None,
        row_filter=where,
        selected_fields=fields,
        net=net,
        key=keys,
    )
    if cli_options().engine == Engine.spark:
        from icemor.engines.spark import iter_arrow

        # a partition at a time; Spark makes the table's columns nullable: back to the feed's schema
        batches: Any = iter_arrow(feed.to_spark(spark_session()), schema=feed.arrow_schema)
    else:
        batches = feed.to_arrow_batch_reader()
    _emit(batches, feed.arrow_schema, output, fmt_name, limit=limit, overwrite=overwrite, title=table)


@app.command()
def delete(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    where: Annotated[
        str | None, typer.Option("--where", help='Delete the rows matching this filter, e.g. "k1 < 100".')
    ] = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Delete every row (removes every data and delete file).")
    ] = False,
) -> None:
    """Delete rows as merge-on-read: position-delete files, one commit (prints the metrics)."""
    if (where is None) == (not all_rows):
        _fail("give exactly one of --where EXPR and --all")
    t = open_table(table)
    spark = spark_session() if cli_options().engine == Engine.spark else None
    with _progress("deleting", "files") as progress:
        m = t.delete(where, spark=spark, progress=progress)
    if m.snapshot_id is None:
        typer.echo(f"no row of {table} matches: nothing committed ({m.seconds:.3f} s)")
        return
    typer.echo(
        f"deleted {m.deleted_rows} rows from {table}: {m.delete_files_added} delete files added, "
        f"{m.data_files_removed} data files and {m.delete_files_removed} delete files removed, "
        f"snapshot {m.snapshot_id} ({m.seconds:.3f} s)"
    )


@app.command("apply-changes")
def apply_changes(
    table: Annotated[str, typer.Argument(help="namespace.table")],
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
    keys = [k.strip() for k in key.split(",") if k.strip()]
    for f in changes:
        if not f.is_file():
            _fail(f"no such file: {f}" if not f.exists() else f"{f} is not a file")
    t = open_table(table)
    options: dict[str, Any] = {
        "key": keys,
        "op_column": op_column,
        "order_by": order_by,
        "allow_nullable_key": allow_nullable_key,
        "app_id": app_id,
        "batch_id": batch_id,
        "deletes": deletes,
    }
    if cli_options().engine == Engine.spark:
        from icemor.engines.spark.changes import staged_parquet

        # executors on other hosts cannot read the driver's files: staged in the warehouse
        paths = [str(f.resolve()) for f in changes]
        with staged_parquet(spark_session(), t.io, t.metadata.location, paths, t.metadata.properties) as df:
            m = t.apply_changes(df, **options)
    else:
        # one unit of work: the bar shows that it runs and for how long (Spark jobs: their tasks)
        with _progress("applying changes", ""):
            m = t.apply_changes(changes, note=_note, **options)
    if m.skipped:
        typer.echo(
            f"batch {batch_id} of app {app_id!r} is already in {table}: nothing done ({m.seconds:.3f} s)"
        )
        return
    counts = f"{m.inserts} I, {m.updates} U, {m.deletes} D, {m.ignored} -U ignored"
    if m.snapshot_id is None:
        typer.echo(f"{m.changes} changes ({counts}) change nothing: nothing committed ({m.seconds:.3f} s)")
        return
    typer.echo(
        f"applied {m.changes} changes ({counts}) to {table}: {m.rows_written} rows written, "
        f"{m.equality_deletes} keys deleted by equality, {m.position_deletes} rows by position; "
        f"{m.data_files_added} data, {m.equality_delete_files_added} equality and "
        f"{m.position_delete_files_added} position delete files; snapshot {m.snapshot_id} ({m.seconds:.3f} s)"
    )


@app.command()
def update(
    table: Annotated[str, typer.Argument(help="namespace.table")],
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
            _fail(f"--set takes col=EXPR, got {item!r}")
        if column.strip() in assignments:
            _fail(f"column {column.strip()!r} is SET twice")
        assignments[column.strip()] = value.strip()
    t = open_table(table)
    spark = spark_session() if cli_options().engine == Engine.spark else None
    with _progress("updating", "files") as progress:
        m = t.update(assignments, where, spark=spark, progress=progress)
    if m.snapshot_id is None:
        typer.echo(f"no row of {table} matches: nothing committed ({m.seconds:.3f} s)")
        return
    typer.echo(
        f"updated {m.rows_updated} rows of {table}: {m.data_files_added} data files and "
        f"{m.delete_files_added} delete files added, {m.data_files_removed} data files removed, "
        f"snapshot {m.snapshot_id} ({m.seconds:.3f} s)"
    )


class Matched(StrEnum):
    update = "update"
    delete = "delete"
    ignore = "ignore"


class NotMatched(StrEnum):
    insert = "insert"
    ignore = "ignore"


@app.command()
def merge(
    table: Annotated[str, typer.Argument(help="namespace.table")],
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
    keys = [k.strip() for k in on.split(",") if k.strip()]
    if not keys:
        _fail("--on needs at least one key column")
    if matched == Matched.ignore and not_matched == NotMatched.ignore:
        _fail("--matched ignore with --not-matched ignore does nothing")
    t = open_table(table)
    spark = spark_session() if cli_options().engine == Engine.spark else None
    builder = t.merge([str(p) for p in source], on=keys, spark=spark, note=_note)
    if matched == Matched.update:
        builder = builder.when_matched_update_all()
    elif matched == Matched.delete:
        builder = builder.when_matched_delete()
    if not_matched == NotMatched.insert:
        builder = builder.when_not_matched_insert_all()
    with _progress("merging", "files") as progress:
        m = builder.execute(progress=progress)
    if m.snapshot_id is None:
        typer.echo(f"nothing to change in {table}: nothing committed ({m.seconds:.3f} s)")
        return
    typer.echo(
        f"merged into {table}: {m.rows_updated} updated, {m.rows_deleted} deleted, {m.rows_inserted} "
        f"inserted; {m.data_files_added} data files and {m.delete_files_added} delete files added, "
        f"{m.data_files_removed} data files removed, snapshot {m.snapshot_id} ({m.seconds:.3f} s)"
    )


@app.command()
def namespaces(as_json: JsonOpt = False) -> None:
    """List the catalog's namespaces (nested ones dotted), one a line."""
    from icemor.catalog import list_namespaces
    from icemor.output import print_names

    print_names(list_namespaces(open_catalog()), as_json=as_json)


@app.command()
def tables(
    namespace: Annotated[
        str | None, typer.Argument(help="List this namespace's tables (default: every namespace).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List tables as namespace.table, one a line."""
    from icemor.catalog import list_tables
    from icemor.output import print_names

    print_names(list_tables(open_catalog(), namespace), as_json=as_json)


@app.command()
def describe(table: Annotated[str, typer.Argument(help="namespace.table")], as_json: JsonOpt = False) -> None:
    """Show a table: schema with field ids, partition specs, sort order, properties, format
    version, current snapshot, refs and location."""
    from icemor.output import print_description

    print_description(open_table(table).describe(), as_json=as_json)


@app.command()
def snapshots(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    as_json: JsonOpt = False,
    jsonl: _JsonlOpt = False,
) -> None:
    """List every snapshot: id (for --snapshot-id), parent, time (ms for --as-of-timestamp),
    operation, row/data-file/delete-file counts, and the branches and tags at it."""
    from icemor.output import print_snapshots

    print_snapshots(open_table(table).snapshots(), title=f"{table}: snapshots", as_json=as_json, jsonl=jsonl)


@app.command()
def history(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    as_json: JsonOpt = False,
    jsonl: _JsonlOpt = False,
) -> None:
    """List each change of the current snapshot, oldest first: time, snapshot id, parent,
    operation, whether it is an ancestor of the current snapshot, and refs."""
    from icemor.output import print_history

    print_history(open_table(table).history(), title=f"{table}: history", as_json=as_json, jsonl=jsonl)


@app.command()
def upgrade(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    format_version: Annotated[int, typer.Option("--format-version", help="The new format version: 3.")],
) -> None:
    """Upgrade a table's format version (v2 -> v3: deletion vectors from then on)."""
    t = open_table(table)
    before = t.upgrade(format_version=format_version)
    if before == format_version:
        typer.echo(f"{table} is already format-version {format_version}")
    else:
        typer.echo(f"upgraded {table} from format-version {before} to {format_version}")


@app.command("drop-table")
def drop_table(
    table: Annotated[str, typer.Argument(help="namespace.table")],
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
    from icemor.ops.drop import drop_table as _drop

    _drop(open_catalog(), table, purge=purge)
    typer.echo(f"dropped {table}" + (" and deleted its files" if purge else " (its files are kept)"))


@app.command()
def compact(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    equality_to_position: Annotated[
        bool,
        typer.Option(
            "--equality-to-position", help="Rewrite every equality delete as position deletes (one commit)."
        ),
    ] = False,
    position_deletes: Annotated[
        bool,
        typer.Option(
            "--position-deletes",
            help="Minor compaction: merge the position-delete files of each partition (or data file, "
            "write.delete.granularity=file) into one; drop dangling deletes.",
        ),
    ] = False,
    data_files: Annotated[
        bool,
        typer.Option(
            "--data-files",
            help="Major compaction: rewrite data files with their deletes applied, bin-pack small ones.",
        ),
    ] = False,
    delete_ratio_threshold: Annotated[
        float | None,
        typer.Option(
            "--delete-ratio-threshold", help="--data-files: rewrite files with this deleted fraction (0.3)."
        ),
    ] = None,
    delete_file_threshold: Annotated[
        int | None,
        typer.Option(
            "--delete-file-threshold", help="--data-files: rewrite files with this many delete files (never)."
        ),
    ] = None,
    target_file_size_bytes: Annotated[
        int | None,
        typer.Option(
            "--target-file-size-bytes", help="--data-files: output size (write.target-file-size-bytes)."
        ),
    ] = None,
    where: Annotated[
        str | None, typer.Option("--where", help="--data-files: only files that may hold matching rows.")
    ] = None,
) -> None:
    """Maintenance actions on merge-on-read tables, one commit each (prints the metrics)."""
    chosen = [equality_to_position, position_deletes, data_files]
    if sum(chosen) != 1:
        _fail("choose one action: --equality-to-position, --position-deletes or --data-files")
    data_options = (delete_ratio_threshold, delete_file_threshold, target_file_size_bytes, where)
    if not data_files and any(o is not None for o in data_options):
        _fail(
            "--delete-ratio-threshold, --delete-file-threshold, --target-file-size-bytes and --where "
            "go with --data-files"
        )
    t = open_table(table)
    spark = spark_session() if cli_options().engine == Engine.spark else None
    if equality_to_position:
        m = t.maintenance.rewrite_equality_deletes(spark=spark)
        if m.snapshot_id is None:
            typer.echo(f"{table} has no equality deletes: nothing committed ({m.seconds:.3f} s)")
            return
        typer.echo(
            f"converted the equality deletes of {m.data_files_converted} data files into "
            f"{m.positions_written} positions in {m.position_delete_files_added} position delete files; "
            f"removed {m.equality_delete_files_removed} equality and {m.position_delete_files_removed} "
            f"position delete files and {m.data_files_removed} data files; snapshot {m.snapshot_id} "
            f"({m.seconds:.3f} s)"
        )
        return
    with _progress("compacting", "groups" if position_deletes else "units") as progress:
        if position_deletes:
            p = t.maintenance.rewrite_position_deletes(spark=spark, progress=progress)
        else:
            d = t.maintenance.rewrite_data_files(
                delete_ratio_threshold=0.3 if delete_ratio_threshold is None else delete_ratio_threshold,
                delete_file_threshold=delete_file_threshold,
                target_file_size_bytes=target_file_size_bytes,
                where=where,
                spark=spark,
                progress=progress,
            )
    if position_deletes:
        if p.snapshot_id is None:
            typer.echo(f"{table}: no position delete files to compact, nothing committed ({p.seconds:.3f} s)")
            return
        typer.echo(
            f"merged {p.delete_files_rewritten} position delete files ({p.positions_before} rows) into "
            f"{p.delete_files_added} ({p.positions_written} positions); removed "
            f"{p.dangling_delete_files_removed} dangling delete files and {p.data_files_removed} data files "
            f"with no row left; snapshot {p.snapshot_id} ({p.seconds:.3f} s)"
        )
        return
    if d.snapshot_id is None:
        typer.echo(f"{table}: no data file needs rewriting, nothing committed ({d.seconds:.3f} s)")
        return
    typer.echo(
        f"rewrote {d.data_files_rewritten} data files ({d.bytes_rewritten} bytes) into {d.data_files_added} "
        f"({d.rows_written} rows, {d.bytes_added} bytes); removed {d.delete_files_removed} delete files; "
        f"snapshot {d.snapshot_id} ({d.seconds:.3f} s)"
    )


@contextlib.contextmanager
def _progress(label: str, unit: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar (stderr) when stdout and stderr are terminals, else nothing."""
    from icemor.progress import work_bar

    with work_bar(label, unit) as update:
        yield update


def _epoch_ms(text: str, option: str) -> int:
    """A time option: milliseconds since the epoch, or an ISO-8601 date or time (UTC unless zoned)."""
    from icemor.table import to_epoch_ms

    return to_epoch_ms(text, what=option)


@app.command()
def expire(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Expire snapshots older than this: ms since the epoch or ISO-8601 (UTC unless zoned). "
            "Default: 5 days ago (history.expire.max-snapshot-age-ms); with --remove-orphans also the "
            "orphans' cut-off (default 3 days ago).",
        ),
    ] = None,
    retain_last: Annotated[
        int | None,
        typer.Option(
            "--retain-last",
            help="Keep at least N snapshots of each branch (history.expire.min-snapshots-to-keep, 1).",
        ),
    ] = None,
    remove_orphans: Annotated[
        bool,
        typer.Option(
            "--remove-orphans", help="Also delete files under the table location nothing references."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Commit and delete nothing; list what would go.")
    ] = False,
) -> None:
    """Expire snapshots, then delete the files no remaining snapshot, branch or tag reaches."""
    cutoff = _epoch_ms(older_than, "--older-than") if older_than is not None else None
    t = open_table(table)
    with _progress("deleting", "files") as progress:
        m = t.maintenance.expire_snapshots(cutoff, retain_last, dry_run=dry_run, progress=progress)
    would = "would " if dry_run else ""
    typer.echo(
        f"{would}expire {len(m.snapshots_expired)} snapshots"
        + (f" and remove refs {', '.join(m.refs_removed)}" if m.refs_removed else "")
        + f"; {would}delete {m.data_files_deleted} data files, {m.delete_files_deleted} delete files, "
        f"{m.manifests_deleted} manifests, {m.manifest_lists_deleted} manifest lists, "
        f"{m.statistics_files_deleted} statistics files ({m.seconds:.3f} s)"
    )
    if dry_run:
        for path in m.files:
            typer.echo(f"  {path}")
    _note_failed(m.failed)
    if remove_orphans:
        with _progress("deleting orphans", "files") as progress:
            o = t.maintenance.remove_orphan_files(cutoff, dry_run=dry_run, progress=progress)
        from datetime import UTC, datetime

        since = datetime.fromtimestamp(o.older_than_ms / 1000, UTC).isoformat(timespec="seconds")
        typer.echo(
            f"{would}delete {len(o.files)} orphan files ({o.bytes} bytes) last modified before {since} "
            f"({o.seconds:.3f} s)"
        )
        if dry_run:
            for path in o.files:
                typer.echo(f"  {path}")
        _note_failed(o.failed)
        if o.skipped:
            others = ", ".join(f"{name} at {location}" for name, location in o.skipped)
            typer.echo(
                f"icemor: note: files of other tables nested with this one left alone: {others}", err=True
            )


def _note_failed(failed: tuple[str, ...]) -> None:
    if failed:
        typer.echo(
            f"icemor: note: could not delete {len(failed)} file(s), e.g. {failed[0]}; they are orphans now",
            err=True,
        )


@app.command()
def demo(
    engine: Annotated[
        Engine, typer.Option("--engine", help="Spark local[*] (default) or local threads.")
    ] = Engine.spark,
    rows: Annotated[int, typer.Option("--rows", help="Rows of the bulk load.", min=100_000)] = 2_000_000,
) -> None:
    """Run the merge-on-read pipeline in the embedded catalog, timed: bulk load, DELETE, UPDATE,
    MERGE, three CDC batches (every read checked), inspect, optimize, inspect as HTML, check."""
    from icemor.demo import run_demo

    run_demo(echo=typer.echo, engine=engine.value, rows=rows)


def _run(fn: Callable[[Options], Any]) -> int:
    """Run the app; usage errors are click's (exit 2), ours become one line on stderr (exit 2)."""
    opts = Options()
    token = OPTIONS.set(opts)
    try:
        fn(opts)
    except SystemExit as e:
        if _interrupt(e) is not None:  # typer turns Ctrl-C into exit 130, silently
            _note_interrupted(_interrupt(e))
            return 130
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt as e:
        _note_interrupted(e)
        return 130
    except _USER_ERRORS as e:
        if opts.debug:
            raise
        typer.echo(f"icemor: error: {first_line(e)}", err=True)
        return 2
    except _catalog_failures() as e:
        from icemor.catalog import catalog_error

        known = catalog_error(e, opts.catalog_name)
        if opts.debug or known is None:
            raise
        typer.echo(f"icemor: error: {first_line(known)}", err=True)
        return 2
    except OSError as e:
        if opts.debug or e.errno not in NO_ROOM_ERRNOS:
            raise
        # disk full, read-only file system: the write sites name the file; this is the rest
        where = f"{redact(str(e.filename))}: " if e.filename else ""
        typer.echo(f"icemor: error: {where}{os_reason(e)}", err=True)
        return 2
    finally:
        if opts.spark_progress is not None:
            opts.spark_progress.stop()
        OPTIONS.reset(token)
    return 0


def _catalog_failures() -> tuple[type[BaseException], ...]:
    """A catalog that cannot be used (no driver, unreachable, refusing, a database that does not
    open): one line, exit 2.

    Evaluated only when an error reaches :func:`_run` (requests is not imported for nothing).
    """
    import sqlite3

    import requests
    from pyiceberg.exceptions import NotInstalledError, RESTError
    from sqlalchemy.exc import ArgumentError, DBAPIError

    return (
        NotInstalledError,
        RESTError,
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        DBAPIError,
        ArgumentError,
        sqlite3.Error,
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that an unfinished write removes its files the same way."""


def _interrupt(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt an exit came from, if it did (typer raises Exit(130) from it)."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _note_interrupted(e: BaseException | None) -> None:
    signal_name = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
    typer.echo(f"icemor: interrupted ({signal_name})", err=True)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the CLI runs, SIGTERM raises :class:`Terminated` (main thread only: signals need it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class _NoteHandler(logging.Handler):
    """icemor's own warnings (e.g. a verdict store it will not use) as ``icemor: note:`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        _note(record.getMessage())


@contextlib.contextmanager
def _notes_from_logs() -> Iterator[None]:
    """icemor's warnings as notes; every record the CLI prints (those notes, and other libraries'
    warnings through logging's last-resort handler) and every Python warning shown (pyiceberg's
    deprecation notices quote a catalog's URI) redacted: no credential reaches stderr."""
    import warnings

    show = warnings.showwarning

    def show_redacted(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        show(redact(str(message)), category, filename, lineno, file, line)

    warnings.showwarning = show_redacted
    redacting = RedactFilter()
    last_resort = logging.lastResort
    if last_resort is not None:
        last_resort.addFilter(redacting)
    logger = logging.getLogger("icemor")
    handler = None
    if not logger.handlers:  # else the embedding application configured its own
        handler = _NoteHandler(logging.WARNING)
        handler.addFilter(redacting)
        logger.addHandler(handler)
    try:
        yield
    finally:
        if handler is not None:
            logger.removeHandler(handler)
        if last_resort is not None:
            last_resort.removeFilter(redacting)
        warnings.showwarning = show


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: the process arguments) and return its exit code.

    An error that is not one of the known ones (or any, with ``--debug``) prints its traceback,
    redacted (no password, token or secret property in it), and exits 1 as Python would.
    """
    os.environ.setdefault("PYICEBERG_MAX_WORKERS", str(os.cpu_count() or 1))
    with _sigterm_as_interrupt(), _notes_from_logs():
        try:
            return _run(lambda _: app(args=argv, prog_name="icemor"))
        except Exception as e:
            sys.stderr.write(formatted_traceback(e))
            sys.stderr.flush()
            return 1


# the table-health commands, listed last by `icemor --help`
for _command in cli_health.COMMANDS:
    app.command()(_command)


def main() -> None:
    """Console entry point."""
    code = run()
    if code == 130:
        # An interrupt can land inside the stdlib's thread-pool bookkeeping (a worker started
        # but not yet registered for shutdown): the interpreter would then wait for it forever.
        # The cleanup has run; leave without joining background threads.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
