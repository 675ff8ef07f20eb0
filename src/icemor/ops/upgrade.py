"""Upgrade a table's format version (``icemor upgrade TABLE --format-version 3``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.commit.v3 import commit_format_upgrade

if TYPE_CHECKING:
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["upgrade_table"]


def upgrade_table(table: PyIcebergTable, *, format_version: int) -> int:
    """Upgrade ``table`` to ``format_version`` (2 or 3); return the version it had.

    v2 -> v3 changes metadata only: every file stays, position-delete files keep applying, and
    the next DELETE, UPDATE or MERGE folds a data file's position deletes into its deletion
    vector. Upgrading to the version the table has commits nothing.

    Raises:
        InvalidArgumentError: A downgrade, a version above 3, or v1 -> v3 in one step.
        CommitFailedError: The catalog refused the change.
    """
    before = commit_format_upgrade(table, format_version)
    table.refresh()
    return before
