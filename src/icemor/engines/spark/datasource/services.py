"""What the data source needs from the layers above the engine, given by the facade.

``icemor.spark.register`` builds :class:`Services` from module-level functions and classes of
the facade and the operations (each pickled by reference: Spark's Python workers import it), so
this engine module loads tables, parses times, applies changes and commits writes without
importing the catalog or ``icemor.ops`` (the layer contract, ``[tool.importlinter]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.table import Table as PyIcebergTable

    from icemor.engines import ExternalRows

__all__ = ["Services"]


@dataclass(frozen=True)
class Services:
    """What the data source needs from the layers above the engine, given at registration.

    Each is a module-level function or class (pickled by reference): Spark's Python workers
    import it.
    """

    load_table: Callable[[str, str | None], PyIcebergTable]
    """``(identifier, catalog name or None) -> pyiceberg table``; errors as ``icemor.load_table``."""
    epoch_ms: Callable[[Any], int]
    """A point in time (ms, ISO-8601 text, datetime) as ms since the epoch (``icemor.table.to_epoch_ms``)."""
    apply_changes: Callable[..., Any]
    """``(identifier, catalog, rows: pa.Table, *, key, op_column, order_by, allow_nullable_key,
    app_id, batch_id)``: one CDC batch as ``Table.apply_changes`` applies it (exactly once per
    app id and batch id)."""
    create_mirror: Callable[..., PyIcebergTable]
    """``(identifier, catalog, columns: pa.Schema, *, key, source: (identifier, catalog) or None,
    partition_by, format_version)``: the sink's missing target, made like the feed's source table
    unless the options say otherwise (``icemor.ops.cdc.mirror``)."""
    input_rules: Callable[..., Any]
    """``(table schema, *, table=name) -> the input rules`` of a write
    (``icemor.ops.inputs.TableRows``: checks and converts the rows to the table's columns)."""
    check_overwrite: Callable[[PyIcebergTable, str | None], Any]
    """``(table, condition)``: refuses an overwrite before any row is written
    (``icemor.ops.overwrite.check_overwrite``)."""
    append: Callable[[PyIcebergTable, ExternalRows], int]
    """``(table, rows)``: commits the files of written rows as one append
    (``icemor.ops.append.append_data``)."""
    overwrite: Callable[..., Any]
    """``(table, rows, condition, *, run)``: commits them as one overwrite of the rows matching
    the condition (``icemor.ops.overwrite.overwrite_rows``)."""
