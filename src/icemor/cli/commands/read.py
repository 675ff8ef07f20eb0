"""Reading commands: ``scan``, ``count``, ``files``, ``changes``, ``describe``, ``snapshots``,
``history``."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path  # noqa: TC003 (typer resolves annotations at runtime)
from typing import TYPE_CHECKING, Annotated

import typer

from icemor.cli.app import JsonOpt, TableArg, engine_spark, epoch_ms, fail, open_table, split_names
from icemor.cli.progress import counting_rows, rows_bar

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pyarrow as pa

    from icemor.scan import ChangeScan, Scan

__all__ = ["changes", "count", "describe", "files", "history", "scan", "snapshots"]


class OutputFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"
    jsonl = "jsonl"


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
_ColumnsOpt = Annotated[str | None, typer.Option("--columns", help="Comma-separated columns (default all).")]
_FormatOpt = Annotated[
    OutputFormat | None,
    typer.Option("--format", help="Format of --output (default: by the file's extension)."),
]
_OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing --output file.")]


def _fields(columns: str | None) -> tuple[str, ...]:
    """``--columns`` as the fields to select (default every column)."""
    return tuple(split_names(columns)) if columns else ("*",)


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
        fail("give at most one of --snapshot-id, --as-of-timestamp and --ref")
    return open_table(table).scan(
        row_filter=where,
        selected_fields=_fields(columns),
        snapshot_id=snapshot_id,
        as_of_timestamp=epoch_ms(as_of_timestamp, "--as-of-timestamp") if as_of_timestamp else None,
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
        fail("--format needs --output FILE or --output -")
    if to_stdout and fmt_name is None:
        fail("--output - needs --format csv, jsonl or parquet")
    if to_stdout and fmt_name == "parquet" and sys.stdout.isatty():
        fail("refusing to write Parquet to a terminal: pipe or redirect stdout")
    if (
        output is not None
        and not to_stdout
        and fmt_name is None
        and output.suffix.lower() not in (".parquet", ".csv", ".jsonl")
    ):
        fail(f"--output must end in .parquet, .csv or .jsonl (or give --format): {output}")
    if output is not None and not to_stdout:
        if output.exists() and not overwrite:
            fail(f"{output} exists: give --overwrite to replace it")
        if not output.parent.is_dir():
            fail(f"cannot write {output}: no such folder {output.parent}")
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
    from icemor.cli.output import print_table, stream_batches, write_batches  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    if output is not None and str(output) == "-":
        assert fmt_name is not None
        try:
            stream_batches(batches, schema, sys.stdout.buffer, fmt=fmt_name, limit=limit)
        except BrokenPipeError:
            # the reader (head, less) left: not an error; keep Python's exit flush quiet too
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    elif output is not None:
        with rows_bar("writing", None) as advance:
            counted = counting_rows(batches, advance)
            n = write_batches(counted, schema, output, limit=limit, fmt=fmt_name, overwrite=overwrite)
        typer.echo(f"wrote {n} rows to {output}")
    else:
        print_table(batches, schema, limit=limit, title=title)


def _batches(scan: Scan | ChangeScan) -> Iterable[pa.RecordBatch]:
    """The rows of a scan or change feed on the ``--engine``: on Spark streamed a partition at a
    time, in the scan's own Arrow schema (Spark makes every column nullable: a Parquet writer of
    the table's schema refuses that)."""
    spark = engine_spark()
    if spark is None:
        reader: Iterable[pa.RecordBatch] = scan.to_arrow_batch_reader()
        return reader
    from icemor.engines.spark import iter_arrow  # noqa: PLC0415 - optional: pyspark

    return iter_arrow(scan.to_spark(spark), schema=scan.arrow_schema)


def scan(
    table: TableArg,
    where: _WhereOpt = None,
    columns: _ColumnsOpt = None,
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
    fmt: _FormatOpt = None,
    overwrite: _OverwriteOpt = False,
) -> None:
    """Read a table with every delete file applied (merge-on-read).

    Timestamps are ISO-8601 in csv and jsonl output (2024-02-01T10:00:00.000000, +00:00 when
    zoned).
    """
    fmt_name = _check_output(output, fmt, overwrite=overwrite)
    s = _scan(table, where, columns, snapshot_id, as_of_timestamp, ref, metadata_columns, include_deleted)
    _emit(_batches(s), s.arrow_schema, output, fmt_name, limit=limit, overwrite=overwrite, title=table)


_JsonlOpt = Annotated[
    bool, typer.Option("--jsonl", help="JSON Lines: one JSON object a line, for streaming.")
]


def count(
    table: TableArg,
    where: _WhereOpt = None,
    snapshot_id: _SnapshotOpt = None,
    as_of_timestamp: _AsOfOpt = None,
    ref: _RefOpt = None,
) -> None:
    """Print the number of live rows (deletes applied)."""
    s = _scan(table, where, None, snapshot_id, as_of_timestamp, ref)
    spark = engine_spark()
    typer.echo(str(s.count() if spark is None else s.to_spark(spark).count()))


def files(
    table: TableArg,
    as_json: JsonOpt = False,
    where: _WhereOpt = None,
    snapshot_id: _SnapshotOpt = None,
    as_of_timestamp: _AsOfOpt = None,
    ref: _RefOpt = None,
    jsonl: _JsonlOpt = False,
) -> None:
    """List data files with the delete files that apply to them: the scan plan."""
    from icemor.cli.output import print_plan  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    planned = _scan(table, where, None, snapshot_id, as_of_timestamp, ref).plan_files()
    print_plan(planned, as_json=as_json, jsonl=jsonl)


def changes(
    table: TableArg,
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
    columns: _ColumnsOpt = None,
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
    fmt: _FormatOpt = None,
    overwrite: _OverwriteOpt = False,
) -> None:
    """The rows inserted, deleted and updated in (--from-snapshot, --to-snapshot], every delete kind
    included, with _change_type, _change_ordinal and _commit_snapshot_id (Iceberg's changelog view)."""
    fmt_name = _check_output(output, fmt, overwrite=overwrite)
    keys = split_names(key) if key else None
    feed = open_table(table).changes(
        from_snapshot,
        to_snapshot,
        start_timestamp=epoch_ms(from_timestamp, "--from-timestamp") if from_timestamp else None,
        end_timestamp=epoch_ms(to_timestamp, "--to-timestamp") if to_timestamp else None,
        row_filter=where,
        selected_fields=_fields(columns),
        net=net,
        key=keys,
    )
    _emit(_batches(feed), feed.arrow_schema, output, fmt_name, limit=limit, overwrite=overwrite, title=table)


def describe(table: TableArg, as_json: JsonOpt = False) -> None:
    """Show a table: schema with field ids, partition specs, sort order, properties, format
    version, current snapshot, refs and location."""
    from icemor.cli.output import print_description  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    print_description(open_table(table).describe(), as_json=as_json)


def snapshots(
    table: TableArg,
    as_json: JsonOpt = False,
    jsonl: _JsonlOpt = False,
) -> None:
    """List every snapshot: id (for --snapshot-id), parent, time (ms for --as-of-timestamp),
    operation, row/data-file/delete-file counts, and the branches and tags at it."""
    from icemor.cli.output import print_snapshots  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    print_snapshots(open_table(table).snapshots(), title=f"{table}: snapshots", as_json=as_json, jsonl=jsonl)


def history(
    table: TableArg,
    as_json: JsonOpt = False,
    jsonl: _JsonlOpt = False,
) -> None:
    """List each change of the current snapshot, oldest first: time, snapshot id, parent,
    operation, whether it is an ancestor of the current snapshot, and refs."""
    from icemor.cli.output import print_history  # noqa: PLC0415 - cost: pyarrow ~150 ms at CLI start-up

    print_history(open_table(table).history(), title=f"{table}: history", as_json=as_json, jsonl=jsonl)
