"""The Spark engine: work is split across executors and delete files are decoded once per process."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import icemor
from oracle import sorted_rows

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import DataFrame

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def test_tasks_spread_over_executors_and_deletes_decoded_once_per_process(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path
) -> None:
    name = f"{ns}.t"
    oracle.create_table(
        name,
        "id BIGINT, k INT",
        # one task per data file: tiny target size, no open-file cost packing
        properties={"read.split.target-size": "1024", "read.split.open-file-cost": "1"},
    )
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ REPARTITION(8) */ id, cast(id % 10 AS INT) FROM range(0, 8000)")
    ids = oracle.field_ids(name)
    # one global equality delete file that every task needs
    oracle.write_equality_deletes(name, pa.table({"k": pa.array([3, 7], pa.int32())}), [ids["k"]])
    oracle.sql(f"DELETE FROM {q} WHERE id % 100 = 0")

    table = icemor.load_table(name, catalog=catalog)
    tasks = table.scan().plan_tasks()
    assert len(tasks) >= 4

    log_dir = tmp_path / "loads"
    log_dir.mkdir()
    sc = oracle.spark.sparkContext
    sc.environment["ICEMOR_DELETE_LOAD_LOG"] = str(log_dir)  # reaches the Python workers
    try:
        df = table.to_spark(oracle.spark, strategy="python")  # one Spark partition per task
        assert df.rdd.getNumPartitions() == len(tasks)
        got = sorted_rows(tuple(r) for r in df.collect())
    finally:
        del sc.environment["ICEMOR_DELETE_LOAD_LOG"]
    assert got == sorted_rows(oracle.rows(name))
    assert len(got) == 8000 - 1600 - 80  # k in (3, 7), and id % 100 == 0 (where k == 0)

    logs = list(log_dir.glob("*.log"))
    assert logs, "no executor process decoded any delete file"
    for log in logs:
        per_key = Counter(log.read_text().splitlines())
        assert per_key, log
        repeated = {k: n for k, n in per_key.items() if n > 1}
        assert not repeated, f"process {log.stem} decoded delete files more than once: {repeated}"
    equality_decodes = sum(
        1 for log in logs for line in log.read_text().splitlines() if line.startswith("equality\t")
    )
    # at most once per executor process, and fewer decodes than tasks that needed the file
    assert 1 <= equality_decodes <= len(logs) < len(tasks)
    assert os.getpid() not in {int(p.stem) for p in logs}  # decoded on executors, not the driver


def test_spark_engine_refuses_unsupported_types_clearly(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, TimeType

    from icemor.exceptions import UnsupportedFeatureError

    name = f"{ns}.t"
    catalog.create_table(name, Schema(NestedField(1, "id", LongType()), NestedField(2, "t", TimeType())))
    table = icemor.load_table(name, catalog=catalog)
    with pytest.raises(UnsupportedFeatureError, match="time"):
        table.to_spark(oracle.spark)


def test_native_strategy_is_used_where_exact_and_matches_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """Position deletes and two-column equality deletes with NULLs, a filter, metadata columns: native."""
    from icemor.engines.spark.native import native_dataframe

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING", partitioned_by="bucket(4, id)")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT id, cast(id % 10 AS INT), cast(id AS STRING) FROM range(0, 2000)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 0")
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(
        name, pa.table({"k": pa.array([3, None], pa.int32()), "s": ["13", None]}), [ids["k"], ids["s"]]
    )
    oracle.sql(f"INSERT INTO {q} VALUES (5000, NULL, NULL)")
    table = icemor.load_table(name, catalog=catalog)
    scan = table.scan(row_filter="id < 1500 or k is null", metadata_columns=True)
    df = native_dataframe(scan.job, oracle.spark)
    assert df is not None
    got = sorted_rows(tuple(r) for r in df.collect())
    java = sorted_rows(
        tuple(r) for r in oracle.sql(f"SELECT id, k, s, _file, _pos FROM {q} WHERE id < 1500 OR k IS NULL")
    )
    assert got == java
    assert (5000, None, None) in {r[:3] for r in got}


def test_native_strategy_refuses_what_it_cannot_do_exactly(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    from icemor.exceptions import InvalidArgumentError

    name = f"{ns}.p"
    oracle.create_table(name, "id BIGINT, cat STRING", partitioned_by="cat")
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} VALUES (1, 'a'), (2, 'b')")
    with pytest.raises(InvalidArgumentError, match="identity-partition"):
        icemor.load_table(name, catalog=catalog).to_spark(oracle.spark, strategy="native")

    name = f"{ns}.u"
    oracle.create_table(name, "id BIGINT, cat STRING")
    # one data file; deleting part of it writes a delete file (a whole file would just be dropped)
    oracle.sql(f"INSERT INTO {oracle.qualified(name)} SELECT /*+ COALESCE(1) */ id, 'x' FROM range(0, 5)")
    oracle.sql(f"DELETE FROM {oracle.qualified(name)} WHERE id = 2")
    table = icemor.load_table(name, catalog=catalog)
    with pytest.raises(InvalidArgumentError, match="include_deleted"):
        table.to_spark(oracle.spark, strategy="native", include_deleted=True)
    with pytest.raises(InvalidArgumentError, match="unknown Spark strategy"):
        table.to_spark(oracle.spark, strategy="turbo")
    # auto stays exact: the file with deletes goes through the Python workers
    rows = sorted_rows(tuple(r) for r in table.to_spark(oracle.spark, include_deleted=True).collect())
    assert rows == [(i, "x", i == 2) for i in range(5)]


def test_auto_reads_clean_files_natively_and_files_with_deletes_in_python(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, v STRING")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, cast(id AS STRING) FROM range(0, 100)")
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, cast(id AS STRING) FROM range(100, 200)")
    oracle.sql(f"DELETE FROM {q} WHERE id IN (5, 6, 7)")  # only the first file has deletes
    table = icemor.load_table(name, catalog=catalog)
    planned = table.scan().plan_files()
    assert sorted(bool(p.delete_files) for p in planned) == [False, True]
    df = table.to_spark(oracle.spark, metadata_columns=True, include_deleted=True)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "FileScan parquet" in plan, plan
    got = sorted_rows(tuple(r) for r in df.collect())
    java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, v, _file, _pos FROM {q}"))
    assert [r[:4] for r in got if not r[4]] == java
    assert sorted(r[0] for r in got if r[4]) == [5, 6, 7]


def test_few_combined_tasks_are_split_into_one_partition_per_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """Four data files packed into one combined task would run on one core of local[2]."""
    name = f"{ns}.few"
    oracle.create_table(name, "id BIGINT, k INT")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ REPARTITION(4) */ id, cast(id % 10 AS INT) FROM range(0, 4000)")
    oracle.sql(f"DELETE FROM {q} WHERE id % 7 = 0")
    table = icemor.load_table(name, catalog=catalog)
    combined = table.scan().plan_tasks()
    pieces = [t for ct in combined for t in ct.tasks]
    assert len(combined) < 2 * oracle.spark.sparkContext.defaultParallelism < len(pieces) + 1
    df = table.to_spark(oracle.spark, strategy="python")
    assert df.rdd.getNumPartitions() == len(pieces) == 4
    assert sorted_rows(tuple(r) for r in df.collect()) == sorted_rows(oracle.rows(name))


def _plan(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _files_of_different_sizes(oracle: IcebergJava, q: str, counts: list[int]) -> None:
    """One data file per count of rows (different row counts: different file sizes)."""
    start = 0
    for n in counts:
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, cast(id % 10 AS INT), cast(id * 7 AS STRING)"
            f" FROM range({start}, {start + n})"
        )
        start += n


@pytest.mark.parametrize("format_version", [2, 3])
def test_position_deletes_in_many_files_read_natively_as_java_reads_them(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, format_version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Position deletes (v2) or deletion vectors (v3) in every file: auto reads them with Spark's reader."""
    import icemor.io.deletes

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING", format_version=format_version)
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [700, 1300, 2100, 900, 1600])
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 3")
    oracle.sql(f"DELETE FROM {q} WHERE id % 97 = 5")  # a second delete file (v2) or a merged DV (v3)
    table = icemor.load_table(name, catalog=catalog)
    planned = table.scan().plan_files()
    assert len(planned) == 5 and all(p.delete_files for p in planned)

    decoded: list[str] = []
    real = icemor.io.deletes.deleted_positions

    def counting(io: Any, path: str, deletes: Any) -> Any:
        decoded.append(path)
        return real(io, path, deletes)

    monkeypatch.setattr(icemor.io.deletes, "deleted_positions", counting)
    df = table.to_spark(oracle.spark)
    plan = _plan(df)
    assert "FileScan parquet" in plan and "MapInArrow" not in plan and "Join" not in plan, plan
    assert sorted_rows(tuple(r) for r in df.collect()) == sorted_rows(oracle.rows(name))
    assert len(decoded) == 5  # once per data file, on the driver
    table.to_spark(oracle.spark).collect()
    assert len(decoded) == 5  # the same files and deletes again: the cached bitmaps

    # file and position columns, and a filter (which prunes a file)
    df = table.to_spark(oracle.spark, row_filter="id >= 1000 and k <> 4", metadata_columns=True)
    assert "MapInArrow" not in _plan(df)
    got = sorted_rows(tuple(r) for r in df.collect())
    java = sorted_rows(
        tuple(r) for r in oracle.sql(f"SELECT id, k, s, _file, _pos FROM {q} WHERE id >= 1000 AND k <> 4")
    )
    assert got == java and len(got) > 3000


def test_positions_come_from_the_readers_row_index_column_and_a_missing_one_fails(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bitmap filter reads Spark's generated row index column, not ``_metadata.row_index`` (which
    builds a struct per row); were that column not filled, the query fails instead of keeping rows."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from icemor.engines.spark import native

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING", format_version=3)
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [800, 1500])
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 3")
    table = icemor.load_table(name, catalog=catalog)
    df = table.to_spark(oracle.spark, selected_fields=("id",))
    plan = _plan(df)
    assert "MapInArrow" not in plan and native._ROW_INDEX in plan, plan
    assert "row_index" not in plan.replace(native._ROW_INDEX, ""), plan  # no _metadata.row_index
    assert sorted(r[0] for r in df.collect()) == sorted(r[0] for r in oracle.sql(f"SELECT id FROM {q}"))

    # a column name the reader does not fill stays null: every row with deletes must fail loudly
    monkeypatch.setattr(native, "_ROW_INDEX", "__icemor_not_a_row_index")
    monkeypatch.setattr(native, "_CACHE", type(native._CACHE)())
    monkeypatch.setattr(native, "_PLANS", type(native._PLANS)())
    unfilled = table.to_spark(oracle.spark, selected_fields=("id",))
    with pytest.raises((PySparkException, Py4JJavaError), match="did not fill __icemor_not_a_row_index"):
        unfilled.collect()


def test_position_and_equality_deletes_on_one_file_match_java(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """One file with both kinds, one with position deletes only, one clean: native and auto as Java."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING")
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [1000])
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 3")
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(name, pa.table({"k": pa.array([5, None], pa.int32())}), [ids["k"]])
    oracle.sql(
        f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, cast(id % 10 AS INT), 'x' FROM range(1000, 2500)"
    )
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 7 AND id >= 1000")  # the second file's own deletes
    # after the equality delete, which therefore does not apply to it
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ * FROM VALUES (9000, NULL, NULL), (9001, 5, 'y')")
    table = icemor.load_table(name, catalog=catalog)
    kinds = sorted(sorted({int(d.content) for d in p.delete_files}) for p in table.scan().plan_files())
    assert kinds == [[], [1], [1, 2]], kinds

    java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, k, s, _file, _pos FROM {q}"))
    assert (9001, 5, "y") in {r[:3] for r in java}  # the equality delete does not reach a later file
    for strategy in ("native", "auto"):
        df = table.to_spark(oracle.spark, strategy=strategy, metadata_columns=True)
        got = sorted_rows(tuple(r) for r in df.collect())
        assert got == java, strategy
    plan = _plan(table.to_spark(oracle.spark))
    # auto: only the file with equality deletes goes through the Python workers
    assert "MapInArrow" in plan and "FileScan parquet" in plan, plan


def test_files_of_equal_size_fall_back_exactly_where_they_cannot_be_linked(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No links (a cluster's master) and sizes that cannot tell the files apart: native anti-joins
    by path, auto uses the Python workers."""
    from icemor.engines.spark import native

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING")
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [500, 800])
    oracle.sql(f"DELETE FROM {q} WHERE id % 4 = 1")
    table = icemor.load_table(name, catalog=catalog)
    monkeypatch.setattr(native, "_link_files", lambda spark, paths: None)
    monkeypatch.setattr(native, "_file_size", lambda path: 4096)
    java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, k, s, _pos FROM {q}"))
    native_df = table.to_spark(oracle.spark, strategy="native", metadata_columns=True).drop("_file")
    assert "LeftAnti" in _plan(native_df)
    assert sorted_rows(tuple(r) for r in native_df.collect()) == java
    auto_df = table.to_spark(oracle.spark, metadata_columns=True).drop("_file")
    assert "MapInArrow" in _plan(auto_df)
    assert sorted_rows(tuple(r) for r in auto_df.collect()) == java


def test_linked_files_are_known_by_ordinal_whatever_their_sizes(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a local master, files with position deletes are read through links and known by their
    ordinal: equal sizes do not matter, and _file reports the table's own paths, as Java does."""
    from icemor.engines.spark import native

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING", format_version=3)
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [500, 800, 1100])
    oracle.sql(f"DELETE FROM {q} WHERE id % 4 = 1")
    oracle.sql(f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ * FROM VALUES (5000, 0, 'clean')")
    table = icemor.load_table(name, catalog=catalog)
    monkeypatch.setattr(native, "_file_size", lambda path: 4096)  # sizes would not tell them apart
    java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, k, s, _file, _pos FROM {q}"))
    for strategy in ("native", "auto"):
        df = table.to_spark(oracle.spark, strategy=strategy, metadata_columns=True)
        plan = _plan(df)
        assert native._ORDINAL in plan and "LeftAnti" not in plan and "MapInArrow" not in plan, plan
        assert sorted_rows(tuple(r) for r in df.collect()) == java, strategy
    assert len(java) == 3 * 2400 // 4 + 1
    # links to the three files with deletes (not to the clean one), under this process's root
    files = {r[3].removeprefix("file:") for r in java}
    clean = {r[3].removeprefix("file:") for r in java if r[0] == 5000}
    links = [p for p in native._link_root().rglob("*.parquet") if str(p.resolve()) in files]
    assert all(p.is_symlink() for p in links)
    assert {str(p.resolve()) for p in links} == files - clean and len(files - clean) == 3

    # a temp cleaner removed the links: the next read makes them anew instead of failing
    shutil.rmtree(native._link_root())
    again = table.to_spark(oracle.spark, strategy="native", metadata_columns=True)
    assert sorted_rows(tuple(r) for r in again.collect()) == java

    # links are file: URIs, so a default file system elsewhere is never asked for them
    hadoop = oracle.spark.sparkContext._jsc.hadoopConfiguration()
    default_fs = hadoop.get("fs.defaultFS")
    hadoop.set("fs.defaultFS", "hdfs://127.0.0.1:1")
    try:
        monkeypatch.setattr(native, "_CACHE", type(native._CACHE)())
        monkeypatch.setattr(native, "_PLANS", type(native._PLANS)())
        elsewhere = table.to_spark(oracle.spark, strategy="native", metadata_columns=True)
        assert sorted_rows(tuple(r) for r in elsewhere.collect()) == java
    finally:
        hadoop.set("fs.defaultFS", default_fs)


def test_links_are_removed_by_the_process_that_made_them_only(tmp_path: Path) -> None:
    """A forked child inherits the exit handler; it must not remove its parent's links."""
    from icemor.engines.spark import native

    root = tmp_path / "links"
    (root / "set").mkdir(parents=True)
    native._remove_links(root, os.getpid() + 1)
    assert root.is_dir()
    native._remove_links(root, os.getpid())
    assert not root.exists()


@pytest.mark.parametrize("file_name", ["imported-0.parquet", "_imported-0.parquet", ".imported-0.parquet"])
def test_imported_files_read_as_java_reads_them(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path, file_name: str
) -> None:
    """A file added without field ids (name-mapped), named as Spark's listing would skip it or
    not: every strategy returns Java's rows, before and after position deletes (once read as
    all NULL by Spark's reader, or as no rows at all)."""
    import pyarrow.parquet as pq

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING")
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [300])
    imported = tmp_path / file_name
    ids = pa.array(range(1000, 1400), pa.int64())
    pq.write_table(
        pa.table({"id": ids, "k": pa.array([i % 7 for i in range(400)], pa.int32()), "s": ["x"] * 400}),
        imported,
    )
    icemor.load_table(name, catalog=catalog).add_files([imported])

    def check() -> None:
        java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, k, s FROM {q}"))
        assert any(r[0] >= 1000 for r in java)
        for strategy in ("auto", "python"):
            df = icemor.load_table(name, catalog=catalog).to_spark(oracle.spark, strategy=strategy)
            assert sorted_rows(tuple(r) for r in df.collect()) == java, strategy

    check()
    oracle.sql(f"DELETE FROM {q} WHERE id % 3 = 0")
    check()


@pytest.mark.parametrize("file_name", ["_part-0.parquet", ".part-0.parquet"])
def test_files_named_as_spark_would_skip_them_read_as_java_reads_them(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, tmp_path: Path, file_name: str
) -> None:
    """A data file with field ids whose name Spark's listing takes for hidden: not read by Spark's
    reader (it would return none of its rows), with and without position deletes."""
    import pyarrow.parquet as pq

    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING")
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [300])
    ids = oracle.field_ids(name)
    schema = pa.schema(
        [
            pa.field(col, typ, metadata={b"PARQUET:field_id": str(ids[col]).encode()})
            for col, typ in (("id", pa.int64()), ("k", pa.int32()), ("s", pa.string()))
        ]
    )
    named = tmp_path / file_name
    rows = pa.table(
        [pa.array(range(1000, 1400), pa.int64()), pa.array([7] * 400, pa.int32()), ["x"] * 400], schema=schema
    )
    pq.write_table(rows, named)
    icemor.load_table(name, catalog=catalog).add_files([named])
    oracle.sql(f"ALTER TABLE {q} UNSET TBLPROPERTIES ('schema.name-mapping.default')")  # ids suffice

    def check() -> None:
        java = sorted_rows(tuple(r) for r in oracle.sql(f"SELECT id, k, s FROM {q}"))
        assert any(r[0] >= 1000 for r in java)
        table = icemor.load_table(name, catalog=catalog)
        assert table.pyiceberg.metadata.name_mapping() is None
        df = table.to_spark(oracle.spark)
        assert sorted_rows(tuple(r) for r in df.collect()) == java

    check()
    oracle.sql(f"DELETE FROM {q} WHERE id % 3 = 0")
    check()


def test_a_repeated_scan_reuses_its_plan_and_a_new_commit_does_not(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """Same files, deletes, projection and filter: the DataFrame built before; anything else: a new one."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k INT, s STRING")
    q = oracle.qualified(name)
    _files_of_different_sizes(oracle, q, [600, 900])
    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 3")

    def ids(df: DataFrame) -> list[int]:
        return sorted(r[0] for r in df.collect())

    def java_ids(where: str = "true") -> list[int]:
        return sorted(r[0] for r in oracle.sql(f"SELECT id FROM {q} WHERE {where}"))

    first = icemor.load_table(name, catalog=catalog).to_spark(oracle.spark, selected_fields=("id",))
    assert "MapInArrow" not in _plan(first)
    assert ids(first) == java_ids()
    again = icemor.load_table(name, catalog=catalog).to_spark(oracle.spark, selected_fields=("id",))
    assert again is first

    table = icemor.load_table(name, catalog=catalog)
    filtered = table.to_spark(oracle.spark, selected_fields=("id",), row_filter="id < 700")
    assert filtered is not first and ids(filtered) == java_ids("id < 700")
    wider = table.to_spark(oracle.spark, selected_fields=("id", "k"))
    assert wider is not first and wider.columns == ["id", "k"]

    oracle.sql(f"DELETE FROM {q} WHERE id % 10 = 4")  # new delete files: a new plan, the new rows
    after = icemor.load_table(name, catalog=catalog).to_spark(oracle.spark, selected_fields=("id",))
    assert after is not first
    assert ids(after) == java_ids() and len(ids(after)) == 1200

    other_session = oracle.spark.newSession()  # a DataFrame belongs to its session
    elsewhere = icemor.load_table(name, catalog=catalog).to_spark(other_session, selected_fields=("id",))
    assert elsewhere is not after and elsewhere.sparkSession is other_session
    assert ids(elsewhere) == java_ids()


def test_a_scan_of_no_columns_counts_its_live_rows(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    """``count()`` of ``to_spark(selected_fields=())``: the small-files bench's count on Spark."""
    name = f"{ns}.nocols"
    oracle.create_table(name, "id BIGINT, k INT")
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} SELECT /*+ REPARTITION(6) */ id, cast(id % 10 AS INT) FROM range(0, 3000)")
    ids = oracle.field_ids(name)
    oracle.write_equality_deletes(name, pa.table({"k": pa.array([3], pa.int32())}), [ids["k"]])
    oracle.sql(f"DELETE FROM {q} WHERE id % 100 = 0")
    java = oracle.sql(f"SELECT count(*) FROM {q}")[0][0]
    assert java == 3000 - 300 - 30
    table = icemor.load_table(name, catalog=catalog)
    for strategy in ("python", "auto"):
        assert table.to_spark(oracle.spark, strategy=strategy, selected_fields=()).count() == java
