"""Column metrics: computed from a written Parquet footer, and evaluated against an expression.

Borrowed: ``data_file_statistics_from_parquet_metadata``, ``compute_statistics_plan`` and
``parquet_path_to_id_mapping`` (pyiceberg's writer), and ``_InclusiveMetricsEvaluator``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.expressions import visitors as _visitors
from pyiceberg.io import pyarrow as _pyarrow_io

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import pyarrow.parquet as pq
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema

__all__ = ["inclusive_metrics_evaluator", "parquet_statistics"]

# (module, name) of every internal used below; tests/_compat/test_pyiceberg.py imports each one.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.expressions.visitors", "_InclusiveMetricsEvaluator"),
    ("pyiceberg.io.pyarrow", "data_file_statistics_from_parquet_metadata"),
    ("pyiceberg.io.pyarrow", "compute_statistics_plan"),
    ("pyiceberg.io.pyarrow", "parquet_path_to_id_mapping"),
)


def inclusive_metrics_evaluator(
    schema: Schema, expr: BooleanExpression, *, case_sensitive: bool
) -> Callable[[DataFile], bool]:
    """Whether a data file's column metrics allow rows matching ``expr`` (bound once).

    Why: the public ``inclusive_metrics_evaluator``-style helper re-binds per file; the private
    class binds once, which matters for manifests of thousands of files.
    """
    evaluator = _visitors._InclusiveMetricsEvaluator(schema, expr, case_sensitive, False)
    return evaluator.eval


def parquet_statistics(
    parquet_metadata: pq.FileMetaData, schema: Schema, metrics_properties: Mapping[str, str]
) -> dict[str, Any]:
    """A written Parquet file's metrics (pyiceberg's serialized ``DataFile`` fields) by the metrics
    modes of ``metrics_properties`` (``write.metadata.metrics.*``).

    Why: pyiceberg's writer computes them with these helpers from the footer; icemor's writers
    must agree with it (and Java) on truncation and modes.
    """
    stats = _pyarrow_io.data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata,
        stats_columns=_pyarrow_io.compute_statistics_plan(schema, dict(metrics_properties)),
        parquet_column_mapping=_pyarrow_io.parquet_path_to_id_mapping(schema),
    )
    return stats.to_serialized_dict()
