"""The typer app of the ``icemor`` command, its global options, and what every command uses to
reach a table or Spark.

This module defines the app and its global options (the callback) and adds no command: the
commands are plain functions in ``icemor.cli.commands``, registered on :data:`app` in one place
(:func:`icemor.cli.commands.register`, called once by ``icemor.cli.runner``). Command modules
import from here, never from one another.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from icemor import __version__
from icemor.cli.progress import Bar, enabled
from icemor.exceptions import InvalidArgumentError, redact
from icemor.timestamps import to_epoch_ms

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from icemor.table import Table

__all__ = [
    "OPTIONS",
    "Engine",
    "JsonOpt",
    "Options",
    "TableArg",
    "app",
    "cli_options",
    "echo_commit",
    "engine_spark",
    "epoch_ms",
    "fail",
    "note",
    "open_catalog",
    "open_table",
    "parse_pairs",
    "spark_session",
    "split_names",
]

app = typer.Typer(
    name="icemor",
    help="Apache Iceberg row-level deletes (merge-on-read) for Python and PySpark.\n\n"
    "With no --catalog, tables live in the embedded SQLite catalog under $ICEMOR_HOME (default ~/.icemor).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Engine(StrEnum):
    local = "local"
    spark = "spark"


# option types more than one command family takes
TableArg = Annotated[str, typer.Argument(help="namespace.table")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output: one JSON document.")]


@dataclass
class Options:
    """The global options of one CLI invocation (click's context object, not module state)."""

    catalog_name: str | None = None
    engine: Engine = Engine.local
    debug: bool = False
    spark_master: str | None = None
    spark_conf: tuple[str, ...] = ()
    spark_progress: Any = None
    """The poller showing Spark jobs' progress (:func:`_watch_spark`), stopped when the run ends."""


# The options of the running invocation: set by icemor.cli.run() for its duration, so nothing
# leaks from one invocation to the next (tests call run() many times in one process).
OPTIONS: ContextVar[Options] = ContextVar("icemor_cli_options")


def cli_options() -> Options:
    """The global options of the running invocation."""
    opts = OPTIONS.get(None)
    if opts is None:  # the app invoked without run() (e.g. typer's test runner)
        opts = Options()
        OPTIONS.set(opts)
    return opts


def _show_version(value: bool) -> None:
    if value:
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


def fail(message: str) -> None:
    """A usage error found by a command: one line on stderr, exit 2."""
    typer.echo(f"icemor: error: {redact(message)}", err=True)
    raise typer.Exit(code=2)


def note(text: str) -> None:
    """An ``icemor: note:`` line on stderr."""
    typer.echo(f"icemor: note: {text}", err=True)


def split_names(values: str | list[str] | None) -> list[str]:
    """A comma-separated option value (or a repeatable option's values, each comma-separated) as
    the names it holds, stripped, empty ones dropped."""
    texts = [values] if isinstance(values, str) else values or []
    return [name.strip() for text in texts for name in text.split(",") if name.strip()]


class _Commit(Protocol):
    """The metrics of a committing command (the operations' ``*Metrics``)."""

    @property
    def snapshot_id(self) -> int | None: ...

    @property
    def seconds(self) -> float: ...


def echo_commit(m: _Commit, *, done: str, nothing: str) -> None:
    """The line a committing command prints: ``done`` then ``snapshot ID``, or, when nothing was
    committed, ``nothing`` then ``nothing committed``; each with the seconds taken.

    Args:
        m: The command's metrics.
        done: The start of the line of a commit, up to its separator (``...; ``).
        nothing: The start of the line of no commit, up to its separator (``...: ``).
    """
    if m.snapshot_id is None:
        typer.echo(f"{nothing}nothing committed ({m.seconds:.3f} s)")
    else:
        typer.echo(f"{done}snapshot {m.snapshot_id} ({m.seconds:.3f} s)")


def epoch_ms(text: str, option: str) -> int:
    """A time option: milliseconds since the epoch, or an ISO-8601 date or time (UTC unless zoned)."""
    return to_epoch_ms(text, what=option)


def open_catalog() -> Catalog:
    """The catalog named by ``--catalog`` (default: the embedded one)."""
    from icemor.catalog import load_catalog  # noqa: PLC0415 - cost: icemor.catalog ~7 ms at CLI start-up

    return load_catalog(cli_options().catalog_name)


def open_table(identifier: str) -> Table:
    """The table ``namespace.table`` of :func:`open_catalog`."""
    from icemor.table import Table  # noqa: PLC0415 - cost: icemor.table ~50 ms at CLI start-up

    return Table.load(identifier, catalog=open_catalog())


def parse_pairs(pairs: list[str] | None, what: str) -> dict[str, str]:
    """``k=v`` option values as a dict; ``what`` names the option in the error."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            msg = f"{what} must be k=v, got {pair!r}"
            raise InvalidArgumentError(msg)
        out[key.strip()] = value.strip()
    return out


def spark_session() -> SparkSession:
    """The SparkSession for ``--engine spark``: the active one, or one from --spark-master/--spark-conf."""
    from icemor.engines.spark import session  # noqa: PLC0415 - optional: pyspark

    opts = cli_options()
    spark = session(
        master=opts.spark_master,
        conf=parse_pairs(list(opts.spark_conf), "--spark-conf"),
        quiet=not opts.debug,
    )
    _watch_spark(spark, opts)
    return spark


def engine_spark(engine: Engine | None = None) -> SparkSession | None:
    """The SparkSession (:func:`spark_session`) when the command runs on Spark, else None.

    Args:
        engine: The command's own ``--engine`` (default: the global ``--engine``).
    """
    return spark_session() if (engine or cli_options().engine) == Engine.spark else None


def _watch_spark(spark: SparkSession, opts: Options) -> None:
    """While the command runs, a bar of the running Spark jobs' tasks (from Spark's status
    tracker) when stdout and stderr are terminals."""
    if opts.spark_progress is not None or not enabled():
        return
    from icemor.engines.spark.progress import JobStatus, SparkProgress  # noqa: PLC0415 - optional: pyspark

    shown: list[Bar] = []

    def report(status: JobStatus | None) -> None:
        if status is None:
            if shown:
                shown.pop().stop()
            return
        if not shown:
            shown.append(Bar(status.label, "tasks"))
            shown[0].start()
        shown[0].update(status.done, status.total, label=status.label)

    opts.spark_progress = SparkProgress(spark, report).start()
