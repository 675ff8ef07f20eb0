"""Scan planning's own shortcuts, checked against what they stand in for."""

from __future__ import annotations

import pytest
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from icemor._compat.pyiceberg import inclusive_metrics_evaluator
from icemor.planning.planner import _not_empty


@pytest.mark.parametrize("record_count", [0, -1, 1, 100])
def test_unfiltered_plan_keeps_what_the_metrics_evaluator_keeps(record_count: int) -> None:
    # plan_files skips pyiceberg's evaluator when the filter is always true (20,000 visits a plan)
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    evaluator = inclusive_metrics_evaluator(schema, AlwaysTrue(), case_sensitive=True)
    f = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="s3://bucket/data/a.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=record_count,
        file_size_in_bytes=100,
    )
    assert _not_empty(f) is evaluator(f)
