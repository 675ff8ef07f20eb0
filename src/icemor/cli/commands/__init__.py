"""The commands of ``icemor``, one module per family, and the one place they are registered.

The command modules define plain functions (typer reads their signatures) and register nothing;
:func:`register` adds every one of :data:`COMMANDS` to the app, in the order ``icemor --help``
lists them. ``icemor.cli.runner`` calls it once, at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.cli.commands import catalog, demo, health, maintenance, read, write

if TYPE_CHECKING:
    from collections.abc import Callable

    import typer

__all__ = ["COMMANDS", "register"]

COMMANDS: tuple[Callable[..., None], ...] = (
    catalog.create_table,
    catalog.alter,
    write.append,
    write.add_files,
    read.scan,
    read.count,
    read.files,
    read.changes,
    write.delete,
    write.apply_changes,
    write.update,
    write.merge,
    catalog.namespaces,
    catalog.tables,
    read.describe,
    read.snapshots,
    read.history,
    catalog.upgrade,
    catalog.drop_table,
    maintenance.compact,
    maintenance.expire,
    demo.demo,
    # the table-health commands, listed last
    health.inspect,
    health.check,
    health.optimize,
)
"""Every command, in ``icemor --help`` order; its name is the function's, ``_`` spelled ``-``."""


def register(app: typer.Typer) -> None:
    """Add :data:`COMMANDS` to ``app``."""
    for command in COMMANDS:
        app.command(command.__name__.replace("_", "-"))(command)
