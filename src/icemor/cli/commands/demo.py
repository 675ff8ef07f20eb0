"""``icemor demo``: the merge-on-read pipeline of ``icemor.cli.demo``, timed."""

from __future__ import annotations

from typing import Annotated

import typer

from icemor.cli.app import Engine

__all__ = ["demo"]


def demo(
    engine: Annotated[
        Engine, typer.Option("--engine", help="Spark local[*] (default) or local threads.")
    ] = Engine.spark,
    rows: Annotated[int, typer.Option("--rows", help="Rows of the bulk load.", min=100_000)] = 2_000_000,
) -> None:
    """Run the merge-on-read pipeline in the embedded catalog, timed: bulk load, DELETE, UPDATE,
    MERGE, three CDC batches (every read checked), inspect, optimize, inspect as HTML, check."""
    from icemor.cli.demo import run_demo  # noqa: PLC0415 - cost: numpy, pyarrow ~250 ms at CLI start-up

    run_demo(echo=typer.echo, engine=engine.value, rows=rows)
