"""Metadata-only commits (``icemor.commit.schema``): one retry policy (``commit.retry.*``), one cleanup.

Before every commit went through ``icemor.commit``, ``ops/apply_changes.py`` added the unpartitioned spec in its own loop of 3
tries whatever ``commit.retry.num-retries`` said, and set the identifier fields through
pyiceberg's ``update_schema`` (no retry at all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from icemor.commit.schema import add_unpartitioned_spec, set_identifier_fields
from icemor.exceptions import CommitFailedError

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "p", StringType(), required=True)
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="p"))


def _table(tmp_path: Path, retries: int) -> Table:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("ns")
    props = {"commit.retry.num-retries": str(retries), "commit.retry.min-wait-ms": "1"}
    return catalog.create_table("ns.t", SCHEMA, partition_spec=SPEC, properties=props)


def _lose(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The catalog's swap loses ``times`` times (a concurrent writer), then works."""
    calls: list[int] = []
    real = SqlCatalog.commit_table

    def commit_table(self: SqlCatalog, *args: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            msg = "lost the race"
            raise CommitFailedException(msg)
        return real(self, *args)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    return calls


def _metadata_files(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "w").rglob("*.metadata.json")}


def test_spec_addition_is_retried_as_commit_retry_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(tmp_path, retries=5)
    calls = _lose(monkeypatch, 4)  # more than the old loop's 3 tries
    spec_id = add_unpartitioned_spec(table)
    assert len(calls) == 5
    assert table.refresh().metadata.specs()[spec_id].is_unpartitioned()


def test_spec_addition_gives_up_after_num_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path, retries=1)
    before = _metadata_files(tmp_path)
    calls = _lose(monkeypatch, 100)
    with pytest.raises(CommitFailedError, match="after 2 attempt"):
        add_unpartitioned_spec(table)
    assert len(calls) == 2  # 1 retry, not the old loop's 3 tries
    assert _metadata_files(tmp_path) == before  # a refused swap leaves no metadata JSON
    assert all(not s.is_unpartitioned() for s in table.refresh().metadata.partition_specs)


def test_identifier_fields_are_retried_after_a_lost_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(tmp_path, retries=3)
    calls = _lose(monkeypatch, 2)
    set_identifier_fields(table, ["id"])
    assert len(calls) == 3
    assert table.refresh().metadata.schema().identifier_field_ids == [1]
