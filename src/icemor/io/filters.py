"""Bound Iceberg expressions as Arrow dataset expressions, two-valued as icemor means them.

:mod:`icemor.expr.condition` fixes the meaning: a NULL fails every positive predicate and passes
its negation, ``Not`` is the complement, comparisons are IEEE. pyiceberg's own translation
(``expression_to_pyarrow``) leaves Arrow's NULL propagation in place, so ``NOT IN`` and ``NOT NaN``
drop NULL rows there, and it has no kernel for uuid columns; this one is exact: every predicate
yields TRUE or FALSE, never NULL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions.visitors import BoundBooleanExpressionVisitor, visit
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.types import DoubleType, FloatType, PrimitiveType, UUIDType

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression, BoundTerm
    from pyiceberg.expressions.literals import Literal
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

__all__ = ["arrow_expression"]

_UUID_STORAGE = pa.binary(16)


def arrow_expression(bound: BooleanExpression, file_schema: Schema) -> pc.Expression:
    """``bound`` (bound against ``file_schema``) as an Arrow expression that is never NULL."""
    return visit(bound, _ToArrow(file_schema))


class _ToArrow(BoundBooleanExpressionVisitor[pc.Expression]):
    def __init__(self, schema: Schema) -> None:
        self._schema = schema

    def _field(self, term: BoundTerm) -> pc.Expression:
        field = term.ref().field
        name = self._schema.find_column_name(field.field_id) or field.name
        ref = pc.field(tuple(name.split(".")) if "." in name else name)
        if isinstance(field.field_type, UUIDType):  # compared by its 16 bytes
            return ref.cast(_UUID_STORAGE)
        return ref

    @staticmethod
    def _scalar(value: Any, field_type: IcebergType) -> pa.Scalar:
        if isinstance(field_type, UUIDType):
            return pa.scalar(value, type=_UUID_STORAGE)
        if not isinstance(field_type, PrimitiveType):
            msg = f"cannot compare a {field_type} column with a value"
            raise ValueError(msg)
        return pa.scalar(value, type=schema_to_pyarrow(field_type))

    def _known(self, term: BoundTerm, e: pc.Expression) -> pc.Expression:
        """``e`` where the value is not NULL, FALSE where it is (Kleene AND)."""
        return self._field(term).is_valid() & e

    def _compare(self, term: BoundTerm, literal: Literal[Any], op: str) -> pc.Expression:
        f = self._field(term)
        v = self._scalar(literal.value, term.ref().field.field_type)
        ops = {"=": f == v, "<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}
        return self._known(term, ops[op])

    def visit_in(self, term: BoundTerm, literals: set[Any]) -> pc.Expression:
        field_type = term.ref().field.field_type
        storage = _UUID_STORAGE if isinstance(field_type, UUIDType) else schema_to_pyarrow(field_type)
        f = self._field(term)
        inside = f.isin(pa.array(list(literals), type=storage))
        if isinstance(field_type, FloatType | DoubleType) and any(v == 0 for v in literals):
            inside = inside | (f == pa.scalar(0.0, type=storage))  # -0.0 equals 0.0; a hash keeps them apart
        return self._known(term, inside)

    def visit_not_in(self, term: BoundTerm, literals: set[Any]) -> pc.Expression:
        return ~self.visit_in(term, literals)

    def visit_is_nan(self, term: BoundTerm) -> pc.Expression:
        return self._known(term, pc.is_nan(self._field(term)))

    def visit_not_nan(self, term: BoundTerm) -> pc.Expression:
        return ~self.visit_is_nan(term)

    def visit_is_null(self, term: BoundTerm) -> pc.Expression:
        return self._field(term).is_null(nan_is_null=False)

    def visit_not_null(self, term: BoundTerm) -> pc.Expression:
        return self._field(term).is_valid()

    def visit_equal(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return self._compare(term, literal, "=")

    def visit_not_equal(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return ~self._compare(term, literal, "=")

    def visit_greater_than_or_equal(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return self._compare(term, literal, ">=")

    def visit_greater_than(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return self._compare(term, literal, ">")

    def visit_less_than(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return self._compare(term, literal, "<")

    def visit_less_than_or_equal(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return self._compare(term, literal, "<=")

    def visit_starts_with(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return self._known(term, pc.starts_with(self._field(term), literal.value))

    def visit_not_starts_with(self, term: BoundTerm, literal: Literal[Any]) -> pc.Expression:
        return ~self.visit_starts_with(term, literal)

    def visit_true(self) -> pc.Expression:
        return pc.scalar(True)

    def visit_false(self) -> pc.Expression:
        return pc.scalar(False)

    def visit_not(self, child_result: pc.Expression) -> pc.Expression:
        return ~child_result

    def visit_and(self, left_result: pc.Expression, right_result: pc.Expression) -> pc.Expression:
        return left_result & right_result

    def visit_or(self, left_result: pc.Expression, right_result: pc.Expression) -> pc.Expression:
        return left_result | right_result
