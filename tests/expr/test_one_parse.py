"""One parse, one bind, one refresh (issue #50): what an operation is given is read once.

Each operation parses each of its text conditions once, through the condition parser
(:func:`icemor.expr.condition.parse_condition`), and passes the parsed and bound form down.
The passes are counted where a parser reads text: DuckDB's ``json_serialize_sql`` (the parser
of :func:`icemor.expr.sql.parse_sql`), pyiceberg's filter-language parser and sqlglot's Spark
tokenizer, so a second pass anywhere (a check that parses again, an error path, a clause
parsed per use) is counted. Binds are counted as pyiceberg's ``BindVisitor`` runs, while the
operation is planned (before any file is planned or read, where the planner and the readers
bind the filter for themselves).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyiceberg.expressions.parser as iceberg_parser
import pytest
from pyiceberg.expressions import visitors
from pyiceberg.table import Table as PyIcebergTable
from sqlglot.dialects.dialect import Dialect

import icemor
from icemor.exceptions import InvalidArgumentError
from icemor.expr import condition as condition_module
from icemor.expr import sql as sql_module
from icemor.ops.merge import MergeClause, plan_merge
from icemor.ops.update import plan_update

if TYPE_CHECKING:
    from pathlib import Path

    from icemor.table import Table


class Passes:
    """Parser passes over text, by parser and text, counted while the fixture is active."""

    def __init__(self) -> None:
        self.duckdb: Counter[str] = Counter()
        self.pyiceberg: Counter[str] = Counter()
        self.sqlglot: Counter[str] = Counter()
        self.condition: Counter[str] = Counter()
        """Texts the condition parser's module handed to the SQL parser."""
        self.binds = 0

    def clear(self) -> None:
        for counter in (self.duckdb, self.pyiceberg, self.sqlglot, self.condition):
            counter.clear()
        self.binds = 0

    def of(self, text: str) -> int:
        """Every parser's passes over ``text``."""
        return self.duckdb[text] + self.pyiceberg[text] + self.sqlglot[text]


class _CountingConnection:
    def __init__(self, con: Any, passes: Passes) -> None:
        self._con, self._passes = con, passes

    def execute(self, query: str, parameters: Any = None) -> Any:
        if "json_serialize_sql" in query:
            wrapped = str(parameters[0])
            self._passes.duckdb[wrapped.removeprefix(sql_module._OPEN).removesuffix("\n)")] += 1
        return self._con.execute(query, parameters)


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> Passes:
    out = Passes()
    parser = sql_module._parser
    monkeypatch.setattr(sql_module, "_parser", lambda: _CountingConnection(parser(), out))
    iceberg_parse = iceberg_parser.parse

    def counted_iceberg_parse(text: str, *args: Any, **kwargs: Any) -> Any:
        out.pyiceberg[text] += 1
        return iceberg_parse(text, *args, **kwargs)

    monkeypatch.setattr(iceberg_parser, "parse", counted_iceberg_parse)
    tokenize = Dialect.tokenize

    def counted_tokenize(self: Dialect, sql: str) -> Any:
        out.sqlglot[sql] += 1
        return tokenize(self, sql)

    monkeypatch.setattr(Dialect, "tokenize", counted_tokenize)
    entry = condition_module.parse_sql

    def counted_entry(text: str, *args: Any, **kwargs: Any) -> Any:
        out.condition[text] += 1
        return entry(text, *args, **kwargs)

    monkeypatch.setattr(condition_module, "parse_sql", counted_entry)

    class CountingBind(visitors.BindVisitor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            out.binds += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(visitors, "BindVisitor", CountingBind)
    return out


@pytest.fixture
def table(home: Path) -> Table:
    ids = pa.array([1, 2, 3, 4], pa.int64())
    data = pa.table({"id": ids, "x": pa.array([1.0, float("nan"), 3.0, None]), "k": ["a", "b", "c", "d"]})
    return icemor.create_table("db.t", data)


def _once(passes: Passes, *texts: str) -> None:
    for text in texts:
        assert passes.of(text) == 1, (text, passes.duckdb, passes.pyiceberg, passes.sqlglot)
        assert passes.condition[text] == 1, (text, passes.condition)  # through the condition parser


@pytest.mark.parametrize("text", ["id > 2", "id + 1 > 2 AND id > 0", "k LIKE 'a%' OR id >= 3"])
def test_a_scan_parses_and_binds_its_text_filter_once(table: Table, passes: Passes, text: str) -> None:
    scan = table.scan(row_filter=text)
    assert passes.binds == 1
    scan.to_arrow()
    scan.count()
    _once(passes, text)


def test_filter_language_text_is_read_once_by_each_language(table: Table, passes: Passes) -> None:
    assert table.scan(row_filter="x IS NAN").to_arrow().column("id").to_pylist() == [2]
    assert passes.duckdb["x IS NAN"] == 1 and passes.pyiceberg["x IS NAN"] == 1


def test_text_neither_language_reads_is_parsed_once_by_each(table: Table, passes: Passes) -> None:
    # the error path read the text with DuckDB again (for a refusal of SQL it had already read)
    with pytest.raises(InvalidArgumentError, match="cannot parse row filter"):
        table.scan(row_filter="id >>> 2")
    assert passes.duckdb["id >>> 2"] == 1 and passes.pyiceberg["id >>> 2"] == 1


@pytest.mark.parametrize("text", ["id = 4", "id + 0 = 3"])
def test_a_delete_parses_its_condition_once(table: Table, passes: Passes, text: str) -> None:
    assert table.delete(text).deleted_rows == 1
    _once(passes, text)


def test_an_update_parses_and_binds_its_condition_once(table: Table, passes: Passes) -> None:
    plan_update(table.pyiceberg, {"x": "x + 1"}, "id = 1")
    assert passes.binds == 1  # it bound the pruning part, then bound it again for the scan
    passes.clear()
    assert table.update({"x": "x + 1"}, "id = 1").rows_updated == 1
    _once(passes, "id = 1")
    assert passes.of("x + 1") == 1


def _clauses() -> list[MergeClause]:
    return [MergeClause("update", "s.x > 0", None), MergeClause("insert", "s.id > 0", None)]


def test_a_merge_parses_each_condition_once(table: Table, passes: Passes) -> None:
    source = pa.table({"id": pa.array([2, 5], pa.int64()), "x": [9.0, 8.0], "k": ["B", "E"]})
    on = "t.id = s.id AND t.id > 0"
    plan_merge(table.pyiceberg, source, on, _clauses())
    assert passes.binds == 1  # ON's pruning part, bound once (the source's key range is built bound)
    passes.clear()
    builder = (
        table.merge(source, on).when_matched_update_all("s.x > 0").when_not_matched_insert_all("s.id > 0")
    )
    metrics = builder.execute()
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    _once(passes, on, "s.x > 0", "s.id > 0")
    # every SQL text of the MERGE once: the `*` clauses' source columns too (once parsed per clause)
    assert set(passes.duckdb.values()) == {1}, passes.duckdb


def test_a_merge_refreshes_the_table_once(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    refreshes = []
    refresh = PyIcebergTable.refresh

    def counted(self: PyIcebergTable) -> PyIcebergTable:
        refreshes.append(self)
        return refresh(self)

    monkeypatch.setattr(PyIcebergTable, "refresh", counted)
    source = pa.table({"id": pa.array([2, 5], pa.int64()), "x": [9.0, 8.0], "k": ["B", "E"]})
    metrics = table.merge(source, ["id"]).when_matched_update_all().when_not_matched_insert_all().execute()
    assert len(refreshes) == 1  # the facade refreshed again what the operation had refreshed
    # and the facade's table is at the MERGE's snapshot all the same
    assert table.metadata.current_snapshot().snapshot_id == metrics.snapshot_id  # type: ignore[union-attr]
    assert sorted(table.scan().to_arrow().column("k").to_pylist()) == ["B", "E", "a", "c", "d"]


def test_a_spark_dataframe_source_without_spark_is_refused_not_collected(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataframe = pytest.importorskip("pyspark.sql.dataframe")
    import icemor.engines.spark as spark_engine

    def collect_arrow(df: object) -> pa.Table:
        raise AssertionError("the Spark DataFrame was collected to the driver")

    monkeypatch.setattr(spark_engine, "collect_arrow", collect_arrow)
    frame = object.__new__(dataframe.DataFrame)  # a Spark DataFrame's type, no JVM needed
    before = table.metadata.current_snapshot()
    with pytest.raises(InvalidArgumentError, match=r"spark=") as info:
        table.merge(frame, ["id"]).when_matched_update_all().execute()
    assert "\n" not in str(info.value)
    assert table.refresh().metadata.current_snapshot() == before
