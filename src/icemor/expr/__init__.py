"""SQL expressions: conditions and SET values as SQL text, one language on both engines.

On Spark they are Spark SQL; on the local engine DuckDB evaluates them over Arrow
(:mod:`icemor.expr.duck`). :mod:`icemor.expr.sql` parses them (with DuckDB's parser), finds
their columns and turns the conjuncts it can into pyiceberg expressions for file pruning.
"""

from __future__ import annotations

from icemor.expr.sql import SqlExpression, parse_sql, to_iceberg

__all__ = ["SqlExpression", "parse_sql", "to_iceberg"]
