"""The scan's row filter on a decoded batch: Arrow dataset expressions, in pieces when big."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyiceberg.expressions import And, Not, Or

from icemor.io.filters import arrow_expression

if TYPE_CHECKING:
    import numpy.typing as npt
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema

__all__ = ["MAX_ARROW_PREDICATES", "ArrowFilter", "arrow_filter", "filter_mask"]

# Arrow evaluates (canonicalises) an expression recursively on its native stack: an ``and``
# or ``or`` of ~10,000 predicates overflowed it (a segfault). Bigger filters are evaluated in
# pieces of at most this many predicates, combined with Kleene logic in Python.
MAX_ARROW_PREDICATES = 512

ArrowFilter: TypeAlias = "pc.Expression | tuple[str, list[ArrowFilter]]"
"""A dataset expression, or ``("and" | "or" | "not", parts)`` of pieces evaluated separately."""


def _predicates(expr: BooleanExpression) -> int:
    if isinstance(expr, And | Or):
        return _predicates(expr.left) + _predicates(expr.right)
    if isinstance(expr, Not):
        return _predicates(expr.child)
    return 1


def arrow_filter(bound: BooleanExpression, file_schema: Schema) -> ArrowFilter:
    """The bound filter as dataset expressions of at most ``MAX_ARROW_PREDICATES`` predicates each.

    The tree is balanced (``flatten_filter`` flattens chains), so the recursion here is shallow.
    """
    if _predicates(bound) <= MAX_ARROW_PREDICATES:
        return arrow_expression(bound, file_schema)
    if isinstance(bound, And | Or):
        kind = "and" if isinstance(bound, And) else "or"
        return (kind, [arrow_filter(bound.left, file_schema), arrow_filter(bound.right, file_schema)])
    if isinstance(bound, Not):
        return ("not", [arrow_filter(bound.child, file_schema)])
    return arrow_expression(bound, file_schema)


def _evaluate(table: pa.Table, f: ArrowFilter) -> pa.ChunkedArray:
    """Kleene truth values (NULL = unknown) of a split filter, so NOT stays exact."""
    if isinstance(f, pc.Expression):
        return ds.dataset(table).to_table(columns={"m": f}).column(0)
    kind, parts = f
    if kind == "not":
        return pc.invert(_evaluate(table, parts[0]))
    combine = pc.and_kleene if kind == "and" else pc.or_kleene
    out = _evaluate(table, parts[0])
    for part in parts[1:]:
        out = combine(out, _evaluate(table, part))
    return out


def filter_mask(batch: pa.RecordBatch, expr: ArrowFilter) -> npt.NDArray[np.bool_] | None:
    """Evaluate a dataset expression on a batch; None when every row matches."""
    if not isinstance(expr, pc.Expression):
        truth = _evaluate(pa.Table.from_batches([batch]), expr)
        mask = pc.fill_null(truth, False).to_numpy(zero_copy_only=False)
        return None if mask.all() else mask
    idx = "__icemor_idx"
    with_idx = batch.append_column(idx, pa.array(np.arange(batch.num_rows, dtype=np.int64)))
    kept = ds.dataset(pa.Table.from_batches([with_idx])).to_table(filter=expr, columns=[idx])
    if kept.num_rows == batch.num_rows:
        return None
    mask = np.zeros(batch.num_rows, dtype=bool)
    mask[kept.column(0).to_numpy()] = True
    return mask
