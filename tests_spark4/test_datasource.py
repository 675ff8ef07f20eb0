"""The ``icemor`` Spark data source (PySpark 4.x): batch reads with every delete kind and every
option, Spark's pushed filters, the change feed read in batch, and the three ways to read a table
from Python (the data source itself, ``register``'s front that serves ``spark.read.format("icemor")``
with ``to_spark``'s plan, and ``icemor.spark.read``), each compared row for row with icemor's
local reader (the model) and, for filters, with Spark evaluating the same condition itself.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
import scenarios
from ds_tables import arrow_of, create_typed, local, plan_of, same

import icemor
import icemor.spark
from icemor.exceptions import InvalidArgumentError, NoSuchSnapshotError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession


@pytest.fixture(autouse=True, scope="module")
def _front_removed_after(spark: SparkSession) -> Iterator[None]:
    """The suite shares one session: leave its ``spark.read`` as PySpark's own."""
    yield
    icemor.spark.register(spark, fast_reads=False)


def _source(spark: SparkSession, name: str, options: dict[str, Any]) -> DataFrame:
    """The registered data source itself (no front)."""
    icemor.spark.register(spark, fast_reads=False)
    return spark.read.format("icemor").options(**options).load(name)


def _front(spark: SparkSession, name: str, options: dict[str, Any]) -> DataFrame:
    """``spark.read.format("icemor")`` as a registered Python client gets it: ``to_spark``'s plan."""
    icemor.spark.register(spark)
    return spark.read.format("icemor").options(**options).load(name)


def _three_ways(
    spark: SparkSession, name: str, options: dict[str, Any], want: pa.Table, *, front: bool = True
) -> None:
    """The source, and (``front``) the front and ``icemor.spark.read``: the same plan, which the
    3.5 suite compares with Iceberg Java option by option (test_spark_read_function.py)."""
    source = _source(spark, name, options)
    assert "BatchScan icemor" in plan_of(source)
    same(source, want)
    if front:
        served = _front(spark, name, options)
        assert "BatchScan icemor" not in plan_of(served)
        same(served, want)
        same(icemor.spark.read(spark, name, **options), want)


@pytest.mark.parametrize("name", ["java.pos", "java.dv", "ds.typed"])
def test_every_delete_kind_three_ways(spark: SparkSession, name: str) -> None:
    """Position deletes (v2), deletion vectors (v3, Iceberg Java's) and equality deletes read alike."""
    catalog = icemor.load_catalog()
    if name.startswith("java.") and not catalog.table_exists(name):
        pytest.fail(f"{name} is missing: run `make test-spark4` (it prepares it with Iceberg Java)")
    table = create_typed(name) if name == "ds.typed" else icemor.load_table(name)
    want = local(table)
    if name.startswith("java."):
        model = sorted(r for k, r in scenarios.initial_rows().items() if k % 5 != 0)
        assert sorted(tuple(r[c] for c in scenarios.COLUMNS) for r in want.to_pylist()) == model
    else:
        ids = {r["id"] for r in want.to_pylist()}
        assert ids == {i for i in range(120) if i % 7 != 3 and i % 10 != 4}
    _three_ways(spark, name, {}, want)


@pytest.fixture(scope="module")
def history(spark: SparkSession) -> dict[str, Any]:
    """``ds.history``: two appends (tag ``t1`` at the first), a DELETE (branch ``b2`` there), a CDC batch."""
    name = "ds.history"
    table = scenarios.create_table(name, partitioned=True)
    first, second = (s.snapshot_id for s in table.pyiceberg.snapshots())
    table.pyiceberg.manage_snapshots().create_tag(first, "t1").commit()
    table.refresh().delete("id % 5 = 0")
    deleted = table.refresh().metadata.current_snapshot().snapshot_id  # type: ignore[union-attr]
    table.pyiceberg.manage_snapshots().create_branch(deleted, "b2").commit()
    changes = pa.table(
        {
            "op": ["U", "D", "I"],
            "id": pa.array([1, 2, 500], pa.int64()),
            "part": ["p1", "p2", "p0"],
            "qty": pa.array([-1, None, 5], pa.int64()),
            "note": ["u", None, "new"],
        }
    )
    table.refresh().apply_changes(changes, key=["id"])
    table.refresh()
    stamp = table.pyiceberg.snapshot_by_id(second).timestamp_ms  # type: ignore[union-attr]
    return {"name": name, "table": table, "s1": first, "s2": second, "s3": deleted, "ts": stamp}


def test_options_three_ways(spark: SparkSession, history: dict[str, Any]) -> None:
    """Time travel (id, time in ms and ISO text, tag, branch), columns, a filter (pruned and
    residual parts), metadata columns: each read as the local scan reads it."""
    name, table = history["name"], history["table"]
    iso = dt.datetime.fromtimestamp(history["ts"] / 1000, dt.UTC).isoformat()
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}),
        ({"snapshot-id": str(history["s1"])}, {"snapshot_id": history["s1"]}),
        ({"as-of-timestamp": str(history["ts"])}, {"as_of_timestamp": history["ts"]}),
        ({"as-of-timestamp": iso}, {"snapshot_id": history["s2"]}),
        ({"tag": "t1"}, {"snapshot_id": history["s1"]}),
        ({"branch": "b2"}, {"snapshot_id": history["s3"]}),
        ({"columns": "note, id"}, {"selected_fields": ("note", "id")}),
        ({"filter": "qty > 500 and id % 3 = 1"}, {"row_filter": "qty > 500 and id % 3 = 1"}),
        (
            {"metadata-columns": "true", "filter": "part = 'p1'"},
            {"metadata_columns": True, "row_filter": "part = 'p1'"},
        ),
    ]
    for options, scan in cases:
        want = local(table, **scan)
        if "columns" in options:  # in the order given, as Spark's select
            want = want.select([c.strip() for c in options["columns"].split(",")])
        assert want.num_rows, options
        _three_ways(spark, name, options, want, front=options in ({}, cases[1][0], cases[-1][0]))


def test_sql_names_the_source(spark: SparkSession, history: dict[str, Any]) -> None:
    """SQL reaches the registered source (not the front): a temporary view with options."""
    icemor.spark.register(spark)
    name, table = history["name"], history["table"]
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW ds_view USING icemor OPTIONS (path '{name}', columns 'qty,id')"
    )
    view = spark.sql("SELECT * FROM ds_view")
    assert "BatchScan icemor" in plan_of(view)
    same(view, local(table, selected_fields=("qty", "id")).select(["qty", "id"]))


def test_option_errors_are_one_line(spark: SparkSession, history: dict[str, Any]) -> None:
    name = history["name"]
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"snapshot-id": str(history["s1"]), "tag": "t1"}, InvalidArgumentError, "at most one of"),
        ({"colums": "id"}, InvalidArgumentError, "unknown option 'colums'"),
        ({"branch": "t1"}, InvalidArgumentError, "'t1' is a tag, not a branch"),
        ({"tag": "nope"}, NoSuchSnapshotError, "tag 'nope' does not exist"),
        ({"metadata-columns": "yes"}, InvalidArgumentError, "must be true or false"),
    ]
    for options, error, text in bad:
        with pytest.raises(error, match=text):
            icemor.spark.read(spark, name, **options)
        with pytest.raises(error, match=text):
            _front(spark, name, options)
        with pytest.raises(Exception, match=text):  # Spark wraps the planner's error
            _source(spark, name, options).count()


# Conditions of every kind over every column type, evaluated by Spark over the source's rows
CONDITIONS = [
    "id > 100",
    "i <> 3",
    "NOT (i < 0)",
    "i IN (1, 2, NULL)",
    "i NOT IN (1, 2)",
    "i <=> 4",
    "d > 0.5",
    "d <= -1.0",
    "isnan(d)",
    "m >= 50.5",
    "m = 3.7",
    "dt = DATE '2024-01-08'",
    "dt < '2024-01-10'",
    "ts >= TIMESTAMP '2024-03-03 00:00:00'",
    "ts < TIMESTAMP '2024-03-05 10:00:00.000012'",
    "tsn < TIMESTAMP_NTZ '2024-03-05 12:00:00'",
    "b",
    "NOT b",
    "b IS NULL",
    "s LIKE 'al%'",
    "s LIKE '%ta%'",
    "s LIKE 'gam\\\\%%'",
    "s = 'it\\'s2'",
    "s <=> 'beta1'",
    "u > '00000000-0000-0020'",
    "i = 3 OR s = 'beta1'",
]


def test_spark_filters_over_the_source(spark: SparkSession) -> None:
    """Every value comes to Spark as ``to_spark`` gives it (NaN, decimals, instants and local
    times, uuids as text), so every condition has the same value on every row (TRUE, FALSE or
    NULL); and a DataFrame queried with and without a filter in turn reads the right rows each
    time (Spark 4.3 reuses a planned read across them: a source that took pushed filters would
    count the filtered rows again)."""
    name = "ds.typed"
    table = create_typed(name)
    schema = table.scan().arrow_schema
    baseline = table.to_spark(spark, strategy="python")
    source = _source(spark, name, {})
    every = local(table)
    uuid_text = next(r["u"] for r in arrow_of(baseline, schema).to_pylist() if r["u"] is not None)
    conditions = [*CONDITIONS, f"u = '{uuid_text}'"]
    columns = ["id", *(f"({c}) AS c{i}" for i, c in enumerate(conditions))]
    want = sorted(tuple(r) for r in baseline.selectExpr(*columns).collect())
    got = sorted(tuple(r) for r in source.selectExpr(*columns).collect())
    assert len(got) == every.num_rows
    for i, condition in enumerate(conditions):
        values = [r[i + 1] for r in want]
        assert True in values and (False in values or None in values), condition  # it selects some rows
        assert [r[i + 1] for r in got] == values, condition
    for condition in ("id > 100", "isnan(d)", "s LIKE 'al%'"):
        same(source.where(condition), arrow_of(baseline.where(condition), schema))
        same(source, every)  # the same DataFrame, unfiltered, right after


def test_change_feed_read_in_batch(spark: SparkSession, history: dict[str, Any]) -> None:
    """``readChangeFeed`` with bounds reads what ``table.changes(start, end)`` reads: the same
    rows, change types and ordinals (and so does ``icemor.spark.read`` with the same options)."""
    name, table = history["name"], history["table"]
    columns = "qty,id"
    selected = ("qty", "id")
    current = table.metadata.current_snapshot().snapshot_id
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"readChangeFeed": "true"}, table.changes()),
        (
            {"starting-snapshot-id": str(history["s1"]), "ending-snapshot-id": str(current)},
            table.changes(history["s1"], current, selected_fields=selected),
        ),
        (
            {"starting-timestamp": str(history["ts"])},
            table.changes(start_timestamp=history["ts"], selected_fields=selected),
        ),
    ]
    for n, (options, changes) in enumerate(cases):
        if n:
            options = {**options, "columns": columns}
        want = changes.to_arrow()
        if n:  # in the order given
            want = want.select(["qty", "id", *want.column_names[2:]])
        assert want.num_rows, options
        source = _source(spark, name, options)
        same(source, want)
        same(_front(spark, name, options), want)


def test_write_format_goes_to_table_writes(spark: SparkSession) -> None:
    """``df.write.format("icemor")`` of the registered source is ``table_writes.IcemorBatchWriter``
    (issue 37's write part, tested there): the rows appended, read back by the local reader."""
    pytest.importorskip("icemor.engines.spark.table_writes")
    icemor.spark.register(spark)
    name = "ds.written"
    table = scenarios.create_table(name, partitioned=True)
    rows = [(1000 + i, f"p{i % 2}", i, None) for i in range(5)]
    spark.createDataFrame(rows, schema=scenarios.SPARK_DDL).write.format("icemor").mode("append").save(name)
    model = {**scenarios.initial_rows(), **{r[0]: r for r in rows}}
    scenarios.check(name, model, "df.write.format('icemor')")
    assert len(table.refresh().pyiceberg.snapshots()) == 3


def test_front_borrows_what_exists() -> None:
    """The front wraps ``SparkSession.read`` (classic and Connect) and mirrors the reader's
    ``format``/``option``/``options``/``schema``/``load``: if a PySpark release moves one, this fails."""
    import importlib

    from icemor.engines.spark._compat import front

    for module, name in front.BORROWED:
        cls_name, attr = name.split(".")
        cls = getattr(importlib.import_module(module), cls_name)
        if attr == "read":
            assert isinstance(inspect.getattr_static(cls, "read"), property), (module, name)
            reader = importlib.import_module(module.replace("session", "readwriter")).DataFrameReader
            for method in ("format", "option", "options", "schema", "load"):
                assert callable(getattr(reader, method)), (module, method)
        else:
            params = list(inspect.signature(getattr(cls, attr)).parameters)
            assert params[:4] == ["self", "path", "format", "schema"], (module, params)


def test_register_is_reversible(spark: SparkSession, tmp_path: Path) -> None:
    """``fast_reads=False`` hands the session's reads back to the data source; other sessions'
    readers, and other formats through the front, are PySpark's own."""
    from pyspark.sql.readwriter import DataFrameReader

    icemor.spark.register(spark)
    assert type(spark.read).__name__ == "IcemorReadFront"
    assert type(spark.newSession().read) is DataFrameReader
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n1,x\n2,y\n")
    got = spark.read.format("csv").option("header", "true").options(inferSchema="true").load(str(csv))
    assert [tuple(r) for r in got.orderBy("a").collect()] == [(1, "x"), (2, "y")]
    icemor.spark.register(spark, fast_reads=False)
    assert type(spark.read) is DataFrameReader


CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
import icemor.spark

name, mirror, start, checkpoints = sys.argv[1:5]
spark = SparkSession.builder.remote("local[1]").getOrCreate()
icemor.spark.register(spark, fast_reads=False)
df = spark.read.format("icemor").option("columns", "id,note").load(name)
rows = sorted([r["id"], r["note"]] for r in df.collect())
feed = spark.read.format("icemor").option("readChangeFeed", "true").load(name)
kinds = sorted({r["_change_type"] for r in feed.collect()})
# a write through the source: five rows again under new ids
full = spark.read.format("icemor").load(name)
full.where("id < 5").selectExpr("id + 1000000 AS id", "part", "qty", "note").write.format(
    "icemor"
).mode("append").save(name)
def ids_notes(table):
    read = spark.read.format("icemor").option("columns", "id,note").load(table)
    return sorted([r["id"], r["note"]] for r in read.collect())
after = ids_notes(name)
# the change feed as a stream (from the first snapshot, exclusive: the DELETE and the append),
# applied by the sink to a mirror holding the first snapshot's rows: the mirror becomes the table
changes = (
    spark.readStream.format("icemor").option("starting-snapshot-id", start).load(name)
    .selectExpr("CASE _change_type WHEN 'DELETE' THEN 'D' ELSE 'I' END AS op", "id", "part", "qty", "note")
)
query = (
    changes.writeStream.format("icemor").option("key", "id")
    .option("checkpointLocation", checkpoints).trigger(availableNow=True).start(mirror)
)
query.awaitTermination(300)
error = query.exception()
mirrored = ids_notes(mirror)
spark.stop()
print(json.dumps({"session": type(spark).__module__, "rows": rows, "kinds": kinds, "after": after,
                  "mirrored": mirrored, "error": None if error is None else str(error)[-800:]}))
"""


def _run_script(script: str, args: list[str], out_dir: Path, **env: str) -> Any:
    """Run the Python ``script`` (a Spark session of its own, ICEMOR_HOME = ``OUT/home``) with
    ``args`` and ``env``; its last line of output, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "ICEMOR_HOME": str(out_dir / "home"), **env},
        timeout=540,
        check=False,
        cwd=out_dir,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_connect_client_reads_writes_and_streams_through_the_source(
    spark: SparkSession, out_dir: Path
) -> None:
    """A Spark Connect client registers the source (its server's Python workers run it): it reads
    the rows the local reader reads, the table and its change feed; appends through
    ``df.write.format("icemor")``; and streams the table's changes (``readStream``) into the sink
    (``writeStream``), which makes a mirror of the first snapshot equal to the table."""
    name, mirror = "ds.connect", "ds.connect_mirror"
    table = scenarios.create_table(name, partitioned=False)
    start = table.pyiceberg.metadata.current_snapshot_id
    scenarios.create_table(mirror, partitioned=False)  # the same initial rows
    table.delete("id % 3 = 0")
    checkpoints = out_dir / "connect-sink-checkpoint"
    shutil.rmtree(checkpoints, ignore_errors=True)
    args = [name, mirror, str(start), str(checkpoints)]
    result = _run_script(CONNECT_CLIENT, args, out_dir, SPARK_LOCAL_IP="127.0.0.1")
    assert result["session"].startswith("pyspark.sql.connect"), result
    want = sorted([r["id"], r["note"]] for r in local(table, selected_fields=("id", "note")).to_pylist())
    assert result["rows"] == want
    assert result["kinds"] == ["DELETE", "INSERT"]
    appended = [[i + 1_000_000, note] for i, note in want if i < 5]
    assert len(appended) >= 3 and result["after"] == sorted(want + appended)
    now = sorted(
        [r["id"], r["note"]] for r in local(table.refresh(), selected_fields=("id", "note")).to_pylist()
    )
    assert now == result["after"]
    assert result["error"] is None, result["error"]
    assert result["mirrored"] == result["after"]


COUNTED_READS = r"""
import json, sys
from pathlib import Path
import icemor.spark
from icemor.engines.spark import session

name, counter = sys.argv[1], Path(sys.argv[2])
spark = session(master="local[2]", conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
icemor.spark.register(spark, fast_reads=False)
reads = {
    "table": {},
    "filtered": {"filter": "id > 100"},
    "changes": {"readChangeFeed": "true", "filter": "id > 100"},
}
out = {}
for label, options in reads.items():
    counter.write_text("")
    rows = spark.read.format("icemor").options(**options).load(name).collect()
    out[label] = {"rows": len(rows), "calls": counter.read_text().splitlines()}
spark.stop()
print(json.dumps(out))
"""
READ_OPTIONS = "icemor.engines.spark.datasource.read_request"
CHANGE_OPTIONS = "icemor.engines.spark.datasource.change_request"
PLANNER = "icemor.planning.scan_job.prepare_scan"
CONDITION = "icemor.expr.condition.parse_condition"


@pytest.mark.timeout(600)
def test_a_read_parses_and_plans_once(spark: SparkSession, out_dir: Path) -> None:
    """Spark asks the source for its schema in one Python worker and for its reader in another
    (the instance pickled between): the options are parsed, the scan planned and the ``filter``
    condition parsed once per read (issue #50's one-parse rule), for a table and its change
    feed. Counted in every process of a session of its own (``hooks/sitecustomize.py``); the
    rows are the local reader's."""
    name = "ds.once"
    table = scenarios.create_table(name, partitioned=True)
    table.delete("id % 7 = 0")
    want = {
        "table": local(table).num_rows,
        "filtered": local(table, row_filter="id > 100").num_rows,
        "changes": table.changes(row_filter="id > 100").to_arrow().num_rows,
    }
    counter = out_dir / "ds-once-calls"
    hooks = Path(__file__).resolve().parent / "hooks"
    result = _run_script(
        COUNTED_READS,
        [name, str(counter)],
        out_dir,
        PYTHONPATH=os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]),
        ICEMOR_TEST_COUNT=f"{counter}:{READ_OPTIONS},{CHANGE_OPTIONS},{PLANNER},{CONDITION}",
    )
    parsed = [f"{CONDITION} str", *(f"{n} " for n in (READ_OPTIONS, CHANGE_OPTIONS, PLANNER))]
    calls = {  # the condition parser counts text only (None or a parsed condition is no parse)
        label: Counter(line.split()[0] for line in read["calls"] if line.startswith(tuple(parsed)))
        for label, read in result.items()
    }
    assert {label: read["rows"] for label, read in result.items()} == want
    assert all(n for n in want.values())
    assert calls["table"] == {READ_OPTIONS: 1, PLANNER: 1}, calls
    assert calls["filtered"] == {READ_OPTIONS: 1, PLANNER: 1, CONDITION: 1}, calls
    assert calls["changes"] == {CHANGE_OPTIONS: 1, PLANNER: 1, CONDITION: 1}, calls
