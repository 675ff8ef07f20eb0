"""The options of a CDC batch, given once and checked once: :class:`ChangeOptions`.

``Table.apply_changes``, ``icemor.spark.cdc_sink`` and the CLI's ``apply-changes`` build one from
their keywords or flags; the entries below them (:func:`icemor.ops.cdc.local.apply_changes`,
:func:`icemor.ops.cdc.spark.apply_changes_dataframe`, :class:`icemor.ops.cdc.spark.ChangeSink`)
take it as it is. What can be checked without the table is checked here, when it is built; what
needs the table (the key's columns, the delete mode its properties allow) is checked by
:func:`icemor.ops.cdc.prepare.prepare_changes`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from typing import Any

from icemor.exceptions import InvalidArgumentError
from icemor.ops.cdc.types import EQUALITY, POSITION

__all__ = ["ChangeOptions", "parse_delete_mode"]


@dataclass(frozen=True, kw_only=True)
class ChangeOptions:
    """How one batch of changes is applied (the keywords of ``Table.apply_changes``).

    Raises:
        InvalidArgumentError: No key column or a repeated one; ``app_id`` without ``batch_id``
            (or the reverse), an empty ``app_id``, a ``batch_id`` that is not a whole number of 0
            or more; ``deletes`` other than ``equality`` or ``position``.
    """

    key: tuple[str, ...]
    """The key columns (a list given is kept as a tuple)."""
    op_column: str = "op"
    """The column holding each row's op."""
    order_by: str | None = None
    """A column ordering the changes of one key (default: row order)."""
    allow_nullable_key: bool = False
    """Accept optional and float/double key columns, and NULL keys."""
    app_id: str | None = None
    """With ``batch_id``: recorded in the snapshot summary; a batch the app committed is skipped."""
    batch_id: int | None = None
    """The increasing batch number of ``app_id``."""
    deletes: str | None = None
    """``equality`` or ``position`` (lower case); None: the table decides
    (:func:`~icemor.ops.cdc.prepare.delete_mode`)."""
    partitions: int | None = None
    """Spark tasks for a DataFrame (default: the session's default parallelism)."""

    def __post_init__(self) -> None:
        key = tuple(self.key)
        if not key:
            msg = "give at least one key column"
            raise InvalidArgumentError(msg)
        if len(set(key)) != len(key):
            msg = f"key columns repeat: {', '.join(key)}"
            raise InvalidArgumentError(msg)
        if (self.app_id is None) != (self.batch_id is None):
            msg = "give app_id and batch_id together (or neither)"
            raise InvalidArgumentError(msg)
        if self.app_id is not None and not self.app_id.strip():
            msg = "app_id must not be empty"
            raise InvalidArgumentError(msg)
        # frozen: the normal forms are set once, here
        object.__setattr__(self, "key", key)
        if self.batch_id is not None:
            object.__setattr__(self, "batch_id", _batch_number(self.batch_id))
        if self.deletes is not None:
            object.__setattr__(self, "deletes", parse_delete_mode(self.deletes, "deletes"))

    def keywords(self) -> dict[str, Any]:
        """The options as keywords of ``Table.apply_changes`` (and of this class)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def parse_delete_mode(given: str, where: str) -> str:
    """``given`` (``deletes=`` or the table property ``where`` names) as ``equality`` or ``position``.

    Raises:
        InvalidArgumentError: Another value.
    """
    if isinstance(given, str) and (mode := given.strip().lower()) in (EQUALITY, POSITION):
        return mode
    msg = f"{where}={given!r} must be {EQUALITY!r} or {POSITION!r}"
    raise InvalidArgumentError(msg)


def _batch_number(value: Any) -> int:
    """``value`` as a batch number: a whole number of 0 or more (Spark numbers batches from 0)."""
    number = None
    if not isinstance(value, bool):  # True is an int to Python, not a batch number
        try:
            number = operator.index(value)
        except TypeError:
            number = None
    if number is None or number < 0:
        msg = f"batch_id (--batch-id) must be a whole number of 0 or more, got {value!r}"
        raise InvalidArgumentError(msg)
    return number
