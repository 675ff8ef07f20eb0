"""The typer app of the ``icemor`` command and what every command uses to reach a table or Spark.

Both ``cli.py`` (most commands, the global options, error handling) and ``cli_health.py``
(``inspect``, ``check``, ``optimize``) register their commands on :data:`app` and import from
here; neither imports the other's internals.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from icemor.table import Table

__all__ = [
    "OPTIONS",
    "Engine",
    "JsonOpt",
    "Options",
    "app",
    "cli_options",
    "open_catalog",
    "open_table",
    "parse_pairs",
    "spark_session",
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


def open_catalog() -> Catalog:
    """The catalog named by ``--catalog`` (default: the embedded one)."""
    from icemor.catalog import load_catalog

    return load_catalog(cli_options().catalog_name)


def open_table(identifier: str) -> Table:
    """The table ``namespace.table`` of :func:`open_catalog`."""
    from icemor.table import Table

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
    from icemor.engines.spark import session

    opts = cli_options()
    spark = session(
        master=opts.spark_master,
        conf=parse_pairs(list(opts.spark_conf), "--spark-conf"),
        quiet=not opts.debug,
    )
    _watch_spark(spark, opts)
    return spark


def _watch_spark(spark: SparkSession, opts: Options) -> None:
    """While the command runs, a bar of the running Spark jobs' tasks (from Spark's status
    tracker) when stdout and stderr are terminals."""
    from icemor.progress import Bar, enabled

    if opts.spark_progress is not None or not enabled():
        return
    from icemor.engines.spark.progress import JobStatus, SparkProgress

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
