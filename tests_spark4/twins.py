"""One scenario of every Spark-engine path, run on a classic session and on a Spark Connect
session over twin tables (``tests_spark4/test_connect.py``).

:func:`run` reads ``java.pos`` / ``java.dv`` (Iceberg Java's position deletes and v3 deletion
vectors) and a table with equality deletes with each strategy, then on its own v3 table (one
namespace per session kind) runs DELETE, UPDATE moving rows to another partition, a MERGE from a
Spark DataFrame and one from an Arrow table, a CDC batch, an ``icemor.spark.sql`` UPDATE,
``icemor.spark.write`` append and overwrite, a read through ``register``'s front, a maintenance
action, the change feed, the streaming CDC sink, and a refused UPDATE; all with ``spark=``.
After each step icemor's local reader must read the Python model's rows. It returns what the
caller compares between the two kinds: rows read, each operation's metrics (but times and
snapshot ids), the change feed's rows; the final rows are saved for ``tools/spark4_check.py
check`` (Iceberg Java).

Script use (the Connect side runs in a process of its own, as a Connect client in a process
that already runs a classic session is not possible): ``python twins.py connect OUT_DIR
RESULT.json`` starts a Connect server (``local[2]``) in a process of its own
(:mod:`connect_server`), runs :func:`run` as its client and writes the result as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scenarios

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Row = scenarios.Row
COLUMNS = scenarios.COLUMNS
STRATEGIES = ("auto", "python", "native")


def _sorted_rows(table: pa.Table, columns: tuple[str, ...] = COLUMNS) -> list[list[Any]]:
    return sorted([r[c] for c in columns] for r in table.to_pylist())


def _metrics(m: Any) -> dict[str, Any]:
    """An operation's metrics but what differs between two runs of it (times, snapshot ids)."""
    return {k: v for k, v in dataclasses.asdict(m).items() if k not in ("seconds", "snapshot_id")}


def _reads(
    spark: SparkSession,
    name: str,
    model: dict[int, Row],
    *,
    strategies: tuple[str, ...] = STRATEGIES,
    filtered: bool = False,
) -> dict[str, Any]:
    """Rows of ``name`` through each strategy (native on the columns it can read); ``filtered``:
    also with a filter the planner prunes with and one Spark SQL evaluates (a residual), and
    streamed to the driver."""
    import icemor
    from icemor.engines.spark import collect_arrow, iter_arrow

    want = sorted(list(r) for r in model.values())
    table = icemor.load_table(name)
    out: dict[str, Any] = {}
    for strategy in strategies:
        # native reads no identity-partition source column (imported files may lack it)
        columns = COLUMNS if strategy != "native" else ("id", "qty", "note")
        df = table.to_spark(spark, strategy=strategy, selected_fields=columns)
        got = _sorted_rows(collect_arrow(df), columns)
        expected = sorted([r[COLUMNS.index(c)] for c in columns] for r in want)
        assert got == expected, (name, strategy, len(got), len(expected))
        out[strategy] = got
    if filtered:
        rows = _sorted_rows(collect_arrow(table.to_spark(spark, row_filter="id >= 100 and id % 3 = 1")))
        assert rows == [r for r in want if r[0] >= 100 and r[0] % 3 == 1], name
        out["filtered"] = rows
        # streamed to the driver a partition at a time, cast back to the table's Arrow schema
        streamed = pa.Table.from_batches(
            list(iter_arrow(table.to_spark(spark), schema=table.scan().arrow_schema)),
            table.scan().arrow_schema,
        )
        assert _sorted_rows(streamed) == want, name
    return out


def _feed_rows(table: pa.Table) -> list[list[Any]]:
    rows = [[r[c] for c in (*COLUMNS, "_change_type", "_change_ordinal")] for r in table.to_pylist()]
    return sorted(rows, key=json.dumps)  # NULLs among the columns: a total order all the same


def _broadcast_side(spark: SparkSession, name: str) -> str:
    """What Spark broadcasts in a join of a Python-worker scan with a 1000-row range: the range
    (the scan's size is unknown to the planner), not the scan."""
    import contextlib
    import io

    import icemor

    scan = icemor.load_table(name).to_spark(spark, strategy="python")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        scan.join(spark.range(1000), "id").explain()
    lines = text.getvalue().splitlines()
    below = [lines[i + 1] for i, line in enumerate(lines[:-1]) if "BroadcastExchange" in line]
    assert len(below) == 1 and "Range (" in below[0], text.getvalue()
    return "range"


def _equality_table(name: str) -> dict[int, Row]:
    """``name`` with equality deletes (written by the local engine); its model."""
    table = scenarios.create_table(name, partitioned=False)
    changes = [("D", i, "p0", None, None) for i in range(0, 200, 4)] + [("U", 1, "p1", 11, "u")]
    schema = pa.schema([pa.field("op", pa.string()), *scenarios.arrow_schema()])
    table.apply_changes(
        pa.Table.from_pylist([dict(zip(("op", *COLUMNS), c, strict=True)) for c in changes], schema=schema),
        key=["id"],
    )
    model = {k: r for k, r in scenarios.initial_rows().items() if k % 4 != 0}
    model[1] = (1, "p1", 11, "u")
    return model


def _apply(model: dict[int, Row], changes: list[tuple[Any, ...]]) -> None:
    for op, i, part, qty, note in changes:
        if op == "D":
            model.pop(i, None)
        else:
            model[i] = (i, part, qty, note)


def run(spark: SparkSession, ns: str, out: Path) -> dict[str, Any]:
    """The scenario on ``spark``, its tables in namespace ``ns``; returns what the twin compares."""
    import icemor
    import icemor.spark
    from icemor.engines.spark import collect_arrow
    from icemor.exceptions import InvalidArgumentError

    result: dict[str, Any] = {"reads": {}, "metrics": {}, "rows": {}, "steps": {}}
    last = [time.monotonic()]

    def lap(step: str) -> None:
        """Seconds each step took (reported, not compared)."""
        now = time.monotonic()
        result["steps"][step] = round(now - last[0], 2)
        print(f"twins {ns}: {step} {result['steps'][step]} s", flush=True)
        last[0] = now

    java_model = {k: r for k, r in scenarios.initial_rows().items() if k % 5 != 0}
    # auto: Spark's reader for files without deletes, Python workers for the rest (both kinds)
    result["reads"]["java.pos"] = _reads(spark, "java.pos", java_model, strategies=("auto",))
    lap("reads java.pos")
    result["reads"]["java.dv"] = _reads(spark, "java.dv", java_model)
    lap("reads java.dv")
    eq_name = f"{ns}.eq"
    result["reads"]["eq"] = _reads(spark, eq_name, _equality_table(eq_name), filtered=True)
    result["broadcast"] = _broadcast_side(spark, eq_name)
    lap("reads equality")

    name = f"{ns}.t"
    table = scenarios.create_table(name, partitioned=True)
    table.upgrade(format_version=3)  # DELETE, UPDATE and MERGE write deletion vectors
    model = scenarios.initial_rows()
    metrics = result["metrics"]

    m = table.delete("qty % 50 = 0", spark=spark)
    model = {k: r for k, r in model.items() if r[2] % 50 != 0}
    metrics["delete"] = _metrics(m)
    scenarios.check(name, model, "DELETE")
    lap("DELETE")

    m = table.update({"part": "'p9'", "qty": "qty + 1000"}, where="id % 7 = 1", spark=spark)
    model = {k: ((k, "p9", r[2] + 1000, r[3]) if k % 7 == 1 else r) for k, r in model.items()}
    metrics["update"] = _metrics(m)
    scenarios.check(name, model, "UPDATE (partition move)")
    lap("UPDATE (partition move)")
    feed_start = table.metadata.current_snapshot_id  # the change feed covers what follows

    source_rows: list[Row] = [(i, f"p{i % 2}", -i, f"m{i}") for i in range(150, 260, 3)]
    source = spark.createDataFrame(source_rows, schema=scenarios.SPARK_DDL)
    m = (
        table.merge(source, on=["id"], spark=spark)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    for r in source_rows:
        model[r[0]] = r
    metrics["merge"] = _metrics(m)
    scenarios.check(name, model, "MERGE (DataFrame source)")
    lap("MERGE (DataFrame source)")

    # an Arrow source goes to Spark from the driver (the client): deletes some, updates others
    arrow = scenarios.to_arrow([(i, "p1", i, "a") for i in range(1, 60, 5)])
    m = (
        table.merge(arrow, on=["id"], spark=spark)
        .when_matched_delete("t.qty < 200")
        .when_matched_update({"note": "'arrow'"})
        .execute()
    )
    for i in range(1, 60, 5):
        if i in model:
            if model[i][2] < 200:
                del model[i]
            else:
                model[i] = (*model[i][:3], "arrow")
    metrics["merge_arrow"] = _metrics(m)
    scenarios.check(name, model, "MERGE (Arrow source)")
    lap("MERGE (Arrow source)")

    changes: list[tuple[Any, ...]] = [
        ("U", 2, "p1", 7, "cdc"),
        ("D", 3, None, None, None),
        ("I", 900, "p0", 9, "new"),
    ]
    changes += [("D", i, None, None, None) for i in range(10, 40, 6)]
    cdf = spark.createDataFrame(changes, schema=f"op string, {scenarios.SPARK_DDL}")
    metrics["cdc"] = _metrics(table.apply_changes(cdf, key=["id"]))
    _apply(model, changes)
    scenarios.check(name, model, "CDC batch")
    lap("CDC batch")

    # SQL DML, DataFrame writes on the executors (an overwrite's per-file delete work is Spark
    # tasks too), and spark.read.format("icemor") served by to_spark's plan (register's front)
    metrics["sql_update"] = _metrics(
        icemor.spark.sql(spark, f"UPDATE {name} SET note = 'sql' WHERE id % 11 = 2")
    )
    model = {k: ((*r[:3], "sql") if k % 11 == 2 else r) for k, r in model.items()}
    scenarios.check(name, model, "icemor.spark.sql UPDATE")
    appended: list[Row] = [(i, f"p{i % 2}", i, "written") for i in range(1000, 1040)]
    metrics["write_append"] = icemor.spark.write(
        spark.createDataFrame(appended, schema=scenarios.SPARK_DDL), name
    )
    model.update({r[0]: r for r in appended})
    scenarios.check(name, model, "icemor.spark.write append")
    replacing: list[Row] = [(i, "p1", -i, "overwritten") for i in range(1030, 1050, 2)]
    replacement = spark.createDataFrame(replacing, schema=scenarios.SPARK_DDL)
    om = icemor.spark.write(replacement, name, mode="overwrite", where="id >= 1030")
    assert not isinstance(om, int) and (om.rows_deleted, om.rows_added) == (10, 10), om
    # how many files the rows went to follows the DataFrame's partitions, which differ by kind
    metrics["write_overwrite"] = {"rows_deleted": om.rows_deleted, "rows_added": om.rows_added}
    model = {k: r for k, r in model.items() if k < 1030}
    model.update({r[0]: r for r in replacing})
    scenarios.check(name, model, "icemor.spark.write overwrite")
    icemor.spark.register(spark)
    try:
        assert type(spark.read).__name__ == "IcemorReadFront", type(spark.read)
        front = spark.read.format("icemor").option("columns", ",".join(COLUMNS)).load(name)
        result["reads"]["front"] = _sorted_rows(collect_arrow(front))
    finally:
        icemor.spark.register(spark, fast_reads=False)  # the session's reader is PySpark's again
    assert result["reads"]["front"] == sorted(list(r) for r in model.values())
    lap("SQL UPDATE, append, overwrite, front read")

    metrics["rewrite_equality_deletes"] = _metrics(table.maintenance.rewrite_equality_deletes(spark=spark))
    table.refresh()
    scenarios.check(name, model, "equality -> position deletes")
    lap("equality -> position deletes")

    try:
        table.update({"qty": "qty + 1"}, where="no_such_column > 1", spark=spark)
        refused = "no error"
    except InvalidArgumentError as e:
        refused = str(e)
    assert "\n" not in refused and "no_such_column" in refused.lower(), refused
    result["refused"] = refused.split(":")[0]
    scenarios.check(name, model, "refused UPDATE")
    lap("refused UPDATE")

    feed = table.changes(feed_start).to_spark(spark)
    result["feed"] = _feed_rows(collect_arrow(feed))
    assert result["feed"] == _feed_rows(table.changes(feed_start).to_arrow())
    lap("change feed")
    result["rows"][name] = sorted(list(r) for r in model.values())
    scenarios.save_expected(out, name, model)

    result["attach"], attach_model = _attach_sql(spark, ns)
    result["rows"][f"{ns}.sqlt"] = sorted(list(r) for r in attach_model.values())
    scenarios.save_expected(out, f"{ns}.sqlt", attach_model)
    lap("Spark SQL through attach")

    stream_name = f"{ns}.stream"
    result["rows"][stream_name], result["metrics"]["stream_again"] = _stream(
        spark, stream_name, out / f"{ns}-stream"
    )
    scenarios.save_expected(out, stream_name, {r[0]: tuple(r) for r in result["rows"][stream_name]})  # type: ignore[misc]
    lap("streaming CDC sink")
    assert icemor.load_table(name).scan().count() == len(model)
    return result


def _attach_sql(spark: SparkSession, ns: str) -> tuple[dict[str, Any], dict[int, Row]]:
    """Iceberg's Spark SQL on an icemor table after ``attach``: DDL, INSERT, DELETE, UPDATE with a
    partition move, MERGE, reads, time travel and metadata tables, each step against the model."""
    import icemor.spark

    name = f"{ns}.sqlt"
    icemor.spark.attach(spark)
    try:
        spark.sql(
            f"CREATE TABLE {name} (id BIGINT, part STRING, qty BIGINT, note STRING) USING iceberg "
            "PARTITIONED BY (part) TBLPROPERTIES ('format-version' = '3')"
        )
        spark.sql(f"INSERT INTO {name} SELECT id, concat('p', id % 2), id, 'sql' FROM range(0, 60)")
        model: dict[int, Row] = {i: (i, f"p{i % 2}", i, "sql") for i in range(60)}
        scenarios.check(name, model, "INSERT INTO through attach")
        spark.sql(f"DELETE FROM icemor.{name} WHERE id % 7 = 1")
        model = {k: r for k, r in model.items() if k % 7 != 1}
        scenarios.check(name, model, "DELETE through attach")
        spark.sql(f"UPDATE {name} SET qty = qty * 10, part = 'p9' WHERE id < 6")
        model.update({k: (k, "p9", r[2] * 10, r[3]) for k, r in model.items() if k < 6})
        scenarios.check(name, model, "UPDATE through attach")
        source: list[Row] = [(3, "p0", -3, "merged"), (500, "p1", 5, "merged")]
        spark.createDataFrame(source, schema=scenarios.SPARK_DDL).createOrReplaceTempView(f"{ns}_att_src")
        spark.sql(
            f"MERGE INTO {name} t USING {ns}_att_src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        model.update({r[0]: r for r in source})
        scenarios.check(name, model, "MERGE through attach")
        rows = sorted(list(r) for r in spark.sql(f"SELECT * FROM {name}").collect())
        assert rows == sorted(list(r) for r in model.values())

        def rows_of(text: str) -> list[list[Any]]:
            return [list(r) for r in spark.sql(text.format(t=name)).collect()]

        history = rows_of("SELECT snapshot_id, operation FROM {t}.snapshots ORDER BY committed_at")
        first = history[0][0]
        reads = {
            "by_part": sorted(rows_of("SELECT part, count(*), sum(qty) FROM {t} GROUP BY part")),
            "table": spark.table(name).count(),
            "first": rows_of(f"SELECT count(*) FROM {{t}} VERSION AS OF {first}")[0][0],
            "operations": [op for _, op in history],
            "contents": sorted(r[0] for r in rows_of("SELECT DISTINCT content FROM {t}.files")),
        }
        assert reads["table"] == len(model) and reads["first"] == 60, reads
        assert reads["contents"] == [0, 1], reads  # data files and deletion vectors
    finally:
        assert icemor.spark.detach(spark)
    return reads, model


def _stream(spark: SparkSession, name: str, work: Path) -> tuple[list[list[Any]], dict[str, Any]]:
    """Two micro-batches of changes through ``cdc_sink`` (``foreachBatch``; on Connect the server
    runs the sink, pickled); then the sink called again with batch 1, which must be skipped."""
    import icemor
    import icemor.spark

    table = scenarios.create_table(name, partitioned=True)
    model = scenarios.initial_rows()
    shutil.rmtree(work, ignore_errors=True)
    source, checkpoint = work / "in", work / "checkpoint"
    source.mkdir(parents=True)
    schema = pa.schema(
        [pa.field("op", pa.string())] + [f.with_nullable(True) for f in scenarios.arrow_schema()]
    )
    batches = [
        [("U", 5, "p2", 55, "s1"), ("D", 6, None, None, None), ("I", 1000, "p0", 1, "new")],
        [("U", 1000, "p1", 2, "again"), ("D", 7, None, None, None), ("U", 5, "p0", 56, "s2")],
    ]
    for n, batch in enumerate(batches):
        rows = [dict(zip(("op", *COLUMNS), c, strict=True)) for c in batch]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), source / f".b{n}.tmp")
        (source / f".b{n}.tmp").rename(source / f"b{n}.parquet")
        _apply(model, batch)
    stream_schema = f"op string, {scenarios.SPARK_DDL}"
    app = f"{name}-app"
    query = (
        spark.readStream.schema(stream_schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.foreachBatch(icemor.spark.cdc_sink(table, key=["id"], app_id=app))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    scenarios.check(name, model, "stream")
    apps = [
        s.summary.additional_properties.get("icemor.cdc.app-id")
        for s in icemor.load_table(name).pyiceberg.snapshots()
        if s.summary is not None
    ]
    assert apps.count(app) == len(batches), apps
    # the stream restarted after batch 1's commit, before its checkpoint: the sink skips it
    seen: list[Any] = []
    again = icemor.spark.cdc_sink(table, key=["id"], app_id=app, progress=lambda _, m: seen.append(m))
    again(spark.read.schema(stream_schema).parquet(str(source / "b1.parquet")), 1)
    assert len(seen) == 1 and seen[0].skipped, seen
    scenarios.check(name, model, "stream batch again")
    return sorted(list(r) for r in model.values()), _metrics(seen[0])


def progress_seen(spark: SparkSession) -> list[Any]:
    """What :class:`SparkProgress` reports while a Spark job of 8 tasks runs."""
    from icemor.engines.spark.progress import SparkProgress

    seen: list[Any] = []
    poller = SparkProgress(spark, seen.append, interval=0.02).start()
    try:
        spark.range(0, 20_000_000, numPartitions=8).selectExpr("sum(id % 7)").collect()
        deadline = time.monotonic() + 10
        while (not seen or seen[-1] is not None) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        poller.stop()
    return seen


def main(argv: list[str]) -> int:
    kind, out, result_path = argv[1], Path(argv[2]).resolve(), Path(argv[3])
    assert kind == "connect", kind
    os.environ["ICEMOR_HOME"] = str(out / "home")
    from connect_server import connect_server
    from pyspark.sql import SparkSession

    from icemor.engines.spark import default_driver_memory

    started = time.monotonic()
    # the server: a process of its own with its own temp directory; this process is only a client
    conf = {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": default_driver_memory()}
    with connect_server(out / "connect-server", conf=conf) as url:
        spark = SparkSession.builder.remote(url).getOrCreate()
        try:
            result = _run_connect(spark, out, started)
        finally:
            spark.stop()
    result_path.write_text(json.dumps(result))
    return 0


def _run_connect(spark: SparkSession, out: Path, started: float) -> dict[str, Any]:
    from icemor.engines.spark import native
    from icemor.engines.spark import session as icemor_session
    from icemor.engines.spark.session_kind import is_connect, parallelism

    assert is_connect(spark), type(spark)
    assert icemor_session() is spark  # icemor.spark.session() hands out the active Connect session
    spark.conf.set("spark.connect.progress.reportInterval", "50ms")  # as often as the classic poller
    ready = time.monotonic()
    result = run(spark, "connect", out)
    result["parallelism"] = parallelism(spark)
    spark.conf.set("spark.default.parallelism", "5")  # the explicit way wins over the server's
    result["parallelism_set"] = parallelism(spark)
    seen = progress_seen(spark)
    result["progress"] = [s if s is None else [s.done, s.total] for s in seen]
    result["seconds"] = {"start": ready - started, "scenario": time.monotonic() - ready}
    # nothing on the client's disk for the executors (links are for a classic local master)
    assert not native._LINK_ROOT, native._LINK_ROOT
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv))
