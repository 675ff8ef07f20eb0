"""Maintenance commands: ``compact`` and ``expire``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from icemor.cli.app import TableArg, echo_commit, engine_spark, epoch_ms, fail, open_table
from icemor.cli.progress import work_bar

if TYPE_CHECKING:
    from collections.abc import Sequence

    from icemor.maintenance.data_files import DataRewriteMetrics
    from icemor.maintenance.equality_to_position import ConversionMetrics
    from icemor.maintenance.expire import ExpireMetrics
    from icemor.maintenance.orphans import OrphanMetrics
    from icemor.maintenance.position_deletes import PositionDeleteMetrics
    from icemor.table import Table

__all__ = ["compact", "expire"]

_EqualityToPositionOpt = Annotated[
    bool,
    typer.Option(
        "--equality-to-position", help="Rewrite every equality delete as position deletes (one commit)."
    ),
]
_PositionDeletesOpt = Annotated[
    bool,
    typer.Option(
        "--position-deletes",
        help="Minor compaction: merge the position-delete files of each partition (or data file, "
        "write.delete.granularity=file) into one; drop dangling deletes.",
    ),
]
_DataFilesOpt = Annotated[
    bool,
    typer.Option(
        "--data-files",
        help="Major compaction: rewrite data files with their deletes applied, bin-pack small ones.",
    ),
]
_DeleteRatioOpt = Annotated[
    float | None,
    typer.Option(
        "--delete-ratio-threshold", help="--data-files: rewrite files with this deleted fraction (0.3)."
    ),
]
_DeleteFilesOpt = Annotated[
    int | None,
    typer.Option(
        "--delete-file-threshold", help="--data-files: rewrite files with this many delete files (never)."
    ),
]
_TargetSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--target-file-size-bytes", help="--data-files: output size (write.target-file-size-bytes)."
    ),
]
_DataWhereOpt = Annotated[
    str | None, typer.Option("--where", help="--data-files: only files that may hold matching rows.")
]


def compact(
    table: TableArg,
    equality_to_position: _EqualityToPositionOpt = False,
    position_deletes: _PositionDeletesOpt = False,
    data_files: _DataFilesOpt = False,
    delete_ratio_threshold: _DeleteRatioOpt = None,
    delete_file_threshold: _DeleteFilesOpt = None,
    target_file_size_bytes: _TargetSizeOpt = None,
    where: _DataWhereOpt = None,
) -> None:
    """Maintenance actions on merge-on-read tables, one commit each (prints the metrics)."""
    if sum([equality_to_position, position_deletes, data_files]) != 1:
        fail("choose one action: --equality-to-position, --position-deletes or --data-files")
    data_options = (delete_ratio_threshold, delete_file_threshold, target_file_size_bytes, where)
    if not data_files and any(o is not None for o in data_options):
        fail(
            "--delete-ratio-threshold, --delete-file-threshold, --target-file-size-bytes and --where "
            "go with --data-files"
        )
    t = open_table(table)
    spark = engine_spark()
    if equality_to_position:
        _print_conversion(table, t.maintenance.rewrite_equality_deletes(spark=spark))
    elif position_deletes:
        with work_bar("compacting", "groups") as progress:
            p = t.maintenance.rewrite_position_deletes(spark=spark, progress=progress)
        _print_position_deletes(table, p)
    else:
        with work_bar("compacting", "units") as progress:
            d = t.maintenance.rewrite_data_files(
                delete_ratio_threshold=0.3 if delete_ratio_threshold is None else delete_ratio_threshold,
                delete_file_threshold=delete_file_threshold,
                target_file_size_bytes=target_file_size_bytes,
                where=where,
                spark=spark,
                progress=progress,
            )
        _print_data_files(table, d)


def _print_conversion(table: str, m: ConversionMetrics) -> None:
    echo_commit(
        m,
        done=f"converted the equality deletes of {m.data_files_converted} data files into "
        f"{m.positions_written} positions in {m.position_delete_files_added} position delete files; "
        f"removed {m.equality_delete_files_removed} equality and {m.position_delete_files_removed} "
        f"position delete files and {m.data_files_removed} data files; ",
        nothing=f"{table} has no equality deletes: ",
    )


def _print_position_deletes(table: str, p: PositionDeleteMetrics) -> None:
    echo_commit(
        p,
        done=f"merged {p.delete_files_rewritten} position delete files ({p.positions_before} rows) into "
        f"{p.delete_files_added} ({p.positions_written} positions); removed "
        f"{p.dangling_delete_files_removed} dangling delete files and {p.data_files_removed} data files "
        "with no row left; ",
        nothing=f"{table}: no position delete files to compact, ",
    )


def _print_data_files(table: str, d: DataRewriteMetrics) -> None:
    echo_commit(
        d,
        done=f"rewrote {d.data_files_rewritten} data files ({d.bytes_rewritten} bytes) into "
        f"{d.data_files_added} ({d.rows_written} rows, {d.bytes_added} bytes); removed "
        f"{d.delete_files_removed} delete files; "
        + (
            f"carried {d.position_deletes_carried} positions deleted meanwhile onto the new files; "
            if d.position_deletes_carried
            else ""
        ),
        nothing=f"{table}: no data file needs rewriting, ",
    )


def expire(
    table: TableArg,
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
    cutoff = epoch_ms(older_than, "--older-than") if older_than is not None else None
    t = open_table(table)
    with work_bar("deleting", "files") as progress:
        m = t.maintenance.expire_snapshots(cutoff, retain_last, dry_run=dry_run, progress=progress)
    _print_expired(m, dry_run=dry_run)
    if remove_orphans:
        _remove_orphans(t, cutoff, dry_run=dry_run)


def _print_expired(m: ExpireMetrics, *, dry_run: bool) -> None:
    would = "would " if dry_run else ""
    typer.echo(
        f"{would}expire {len(m.snapshots_expired)} snapshots"
        + (f" and remove refs {', '.join(m.refs_removed)}" if m.refs_removed else "")
        + f"; {would}delete {m.data_files_deleted} data files, {m.delete_files_deleted} delete files, "
        f"{m.manifests_deleted} manifests, {m.manifest_lists_deleted} manifest lists, "
        f"{m.statistics_files_deleted} statistics files ({m.seconds:.3f} s)"
    )
    _print_files(m.files, m.failed, dry_run=dry_run)


def _remove_orphans(t: Table, cutoff: int | None, *, dry_run: bool) -> None:
    with work_bar("deleting orphans", "files") as progress:
        o = t.maintenance.remove_orphan_files(cutoff, dry_run=dry_run, progress=progress)
    _print_orphans(o, dry_run=dry_run)


def _print_orphans(o: OrphanMetrics, *, dry_run: bool) -> None:
    would = "would " if dry_run else ""
    since = datetime.fromtimestamp(o.older_than_ms / 1000, UTC).isoformat(timespec="seconds")
    typer.echo(
        f"{would}delete {len(o.files)} orphan files ({o.bytes} bytes) last modified before {since} "
        f"({o.seconds:.3f} s)"
    )
    _print_files(o.files, o.failed, dry_run=dry_run)
    if o.skipped:
        others = ", ".join(f"{name} at {location}" for name, location in o.skipped)
        typer.echo(f"icemor: note: files of other tables nested with this one left alone: {others}", err=True)


def _print_files(files: Sequence[str], failed: tuple[str, ...], *, dry_run: bool) -> None:
    """After a deleting command's line: the files a dry run would delete, one a line; then a note
    of the files that could not be deleted."""
    if dry_run:
        for path in files:
            typer.echo(f"  {path}")
    if failed:
        typer.echo(
            f"icemor: note: could not delete {len(failed)} file(s), e.g. {failed[0]}; they are orphans now",
            err=True,
        )
