"""Conditions and SQL expressions: one meaning for each, whatever engine evaluates them.

A condition given as text means what Spark SQL means; a pyiceberg expression what Iceberg's row
evaluator means (:mod:`icemor.expr.condition`). SQL text is parsed once with DuckDB's parser
(:mod:`icemor.expr.sql`); on Spark it runs as Spark SQL, on the local engine DuckDB evaluates it
over Arrow (:mod:`icemor.expr.duck`).
"""

from __future__ import annotations

from icemor.expr.condition import Condition, implied_filter, parse_condition
from icemor.expr.sql import SqlExpression, parse_sql

__all__ = ["Condition", "SqlExpression", "implied_filter", "parse_condition", "parse_sql"]
