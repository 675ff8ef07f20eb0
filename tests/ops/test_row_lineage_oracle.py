"""v3 row lineage: ``_row_id`` and ``_last_updated_sequence_number``, judged by Iceberg Java.

Java reads both columns of any v3 table (spec, "Row Lineage"): each test compares Java's values
for every row with icemor's scan of them, after writes by Java or by icemor. Java's own writes
show the rules icemor follows: an updated row keeps its ``_row_id`` and gets the new sequence
number, a compacted row keeps both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

import icemor
from icemor.exceptions import UnsupportedFeatureError
from oracle import icemor_rows, local_path, sorted_rows

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

LINEAGE = ("id", "v", "_row_id", "_last_updated_sequence_number")


def _make(oracle: IcebergJava, name: str, *, version: int = 3, partitioned_by: str | None = None) -> str:
    oracle.create_table(
        name, "id BIGINT, v STRING, p INT", partitioned_by=partitioned_by, format_version=version
    )
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} VALUES (1, 'a', 0), (2, 'b', 1), (3, 'c', 0)")
    oracle.sql(f"INSERT INTO {q} VALUES (4, 'd', 1), (5, 'e', 0)")
    return q


def rewrite_all(oracle: IcebergJava, name: str) -> None:
    oracle.sql(
        f"CALL {oracle.catalog_name}.system.rewrite_data_files(table => '{name}', "
        "options => map('rewrite-all', 'true'))"
    )


def java_lineage(oracle: IcebergJava, q: str) -> list[tuple[Any, ...]]:
    return sorted_rows(oracle.sql(f"SELECT {', '.join(LINEAGE)} FROM {q}"))


def assert_same_lineage(oracle: IcebergJava, catalog: SqlCatalog, name: str) -> list[tuple[Any, ...]]:
    """Java's and icemor's (id, v, _row_id, _last_updated_sequence_number) of every row are equal."""
    java = java_lineage(oracle, oracle.qualified(name))
    assert java
    assert all(r[2] is not None and r[3] is not None for r in java)
    assert icemor_rows(catalog, name, selected_fields=LINEAGE) == java
    return java


def test_reads_javas_lineage_after_insert_update_and_rewrite(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    q = _make(oracle, name)
    before = assert_same_lineage(oracle, catalog, name)
    oracle.sql(f"UPDATE {q} SET v = 'x' WHERE id IN (2, 5)")
    after = assert_same_lineage(oracle, catalog, name)
    # Java's rule, which icemor's writes follow: the row id stays, the sequence number moves on
    assert [r[2] for r in after] == [r[2] for r in before]
    assert [r[3] for r in after] != [r[3] for r in before]
    rewrite_all(oracle, name)
    assert assert_same_lineage(oracle, catalog, name) == after  # a rewrite keeps both
    # a lineage column is never a data column: a plain scan does not show it
    table = icemor.load_table(name, catalog=catalog)
    assert table.scan().to_arrow().column_names == ["id", "v", "p"]


def _model_update(before: list[tuple[Any, ...]], ids: set[int], value: str) -> dict[int, tuple[Any, ...]]:
    """Java's rule: an updated row keeps its ``_row_id``; its sequence number is the new snapshot's."""
    return {r[0]: (r[0], value, r[2]) if r[0] in ids else r[:3] for r in before}


@pytest.mark.parametrize("partitioned_by", [None, "p"])
def test_icemor_update_keeps_row_ids(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned_by: str | None
) -> None:
    name = f"{ns}.t"
    q = _make(oracle, name, partitioned_by=partitioned_by)
    before = assert_same_lineage(oracle, catalog, name)
    table = icemor.load_table(name, catalog=catalog)
    m = table.update({"v": "'x'"}, where="id IN (2, 5)")
    assert m.rows_updated == 2
    after = assert_same_lineage(oracle, catalog, name)
    expected = _model_update(before, {2, 5}, "x")
    assert [r[:3] for r in after] == [expected[r[0]] for r in after]
    new_seq = {r[3] for r in after if r[0] in (2, 5)}
    assert len(new_seq) == 1 and new_seq.pop() > max(r[3] for r in before)
    assert [r[3] for r in after if r[0] not in (2, 5)] == [r[3] for r in before if r[0] not in (2, 5)]
    # the new file stores the old ids and NULL sequence numbers, as Java's UPDATE writes it
    files = oracle.sql(f"SELECT file_path FROM {q}.files WHERE content = 0")
    lineage_files = [pq.read_table(local_path(r[0])) for r in files]
    written = [t for t in lineage_files if "_row_id" in t.column_names]
    assert len(written) == (1 if partitioned_by is None else 2)
    assert sorted(x for t in written for x in t.column("_row_id").to_pylist()) == sorted(
        r[2] for r in before if r[0] in (2, 5)
    )
    assert all(t.column("_last_updated_sequence_number").null_count == t.num_rows for t in written)


def _merge(table: icemor.Table, spark: Any = None) -> Any:
    import pyarrow as pa

    source = pa.table({"id": pa.array([2, 3, 9], pa.int64()), "v": ["y", "gone", "new"], "p": [1, 0, 1]})
    return (
        table.merge(source, on="t.id = s.id", spark=spark)
        .when_matched_delete("s.v = 'gone'")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def assert_merged_lineage(before: list[tuple[Any, ...]], after: list[tuple[Any, ...]]) -> None:
    """Java's rules after the MERGE of :func:`_merge`: 2 updated (same id, newer sequence
    number), 3 deleted, 9 inserted (a new id, the new sequence number), the rest unchanged."""
    old = {r[0]: r for r in before}
    now = {r[0]: r for r in after}
    assert sorted(now) == [1, 2, 4, 5, 9]
    new_seq = now[9][3]
    assert new_seq > max(r[3] for r in before)
    assert now[2] == (2, "y", old[2][2], new_seq)
    assert now[9][2] > max(r[2] for r in before)  # a fresh row id
    assert all(now[i] == old[i] for i in (1, 4, 5))


def test_icemor_merge_keeps_row_ids(oracle: IcebergJava, catalog: SqlCatalog, ns: str) -> None:
    name = f"{ns}.t"
    _make(oracle, name)
    before = assert_same_lineage(oracle, catalog, name)
    m = _merge(icemor.load_table(name, catalog=catalog))
    assert (m.rows_updated, m.rows_deleted, m.rows_inserted) == (1, 1, 1)
    assert_merged_lineage(before, assert_same_lineage(oracle, catalog, name))


def test_spark_engine_update_merge_and_scan_keep_row_ids(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    _make(oracle, name, partitioned_by="p")
    before = assert_same_lineage(oracle, catalog, name)
    table = icemor.load_table(name, catalog=catalog)
    assert table.update({"v": "'x'"}, where="id = 4", spark=oracle.spark).rows_updated == 1
    updated = assert_same_lineage(oracle, catalog, name)
    assert [r[2] for r in updated] == [r[2] for r in before]
    _merge(table, oracle.spark)
    after = assert_same_lineage(oracle, catalog, name)
    assert_merged_lineage(updated, after)
    # the Spark engine's scan of the lineage columns (Python workers) equals Java's
    df = table.to_spark(oracle.spark, selected_fields=LINEAGE)
    assert sorted_rows(df.collect()) == after


@pytest.mark.parametrize("partitioned_by", [None, "p"])
def test_icemor_append_update_then_compaction_keeps_lineage(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned_by: str | None
) -> None:
    import pyarrow as pa

    name = f"{ns}.t"
    _make(oracle, name, partitioned_by=partitioned_by)
    table = icemor.load_table(name, catalog=catalog)
    table.append(
        pa.table({"id": pa.array([6, 7], pa.int64()), "v": ["f", "g"], "p": pa.array([1, 0], pa.int32())})
    )
    appended = assert_same_lineage(oracle, catalog, name)
    assert len({r[2] for r in appended}) == 7  # every row its own id
    table.update({"v": "'x'"}, where="id IN (1, 6)")
    table.delete("id = 3")
    updated = assert_same_lineage(oracle, catalog, name)
    m = table.maintenance.rewrite_data_files(delete_file_threshold=0)
    assert m.data_files_rewritten > 0 and m.snapshot_id is not None
    # the rewrite changes no row's lineage (Java's rewrite_data_files keeps both too)
    assert assert_same_lineage(oracle, catalog, name) == updated
    files = oracle.sql(f"SELECT file_path FROM {oracle.qualified(name)}.files WHERE content = 0")
    for r in files:  # written explicitly, as Java writes a rewrite
        t = pq.read_table(local_path(r[0]))
        assert t.column("_row_id").null_count == 0
        assert t.column("_last_updated_sequence_number").null_count == 0


def test_v2_writes_no_lineage_and_refuses_to_read_it(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    name = f"{ns}.t"
    q = _make(oracle, name, version=2)
    table = icemor.load_table(name, catalog=catalog)
    table.update({"v": "'x'"}, where="id = 2")
    _merge(table)
    table.maintenance.rewrite_data_files(delete_file_threshold=0)
    assert sorted_rows(oracle.sql(f"SELECT id, v FROM {q}")) == [
        (1, "a"),
        (2, "y"),
        (4, "d"),
        (5, "e"),
        (9, "new"),
    ]
    for r in oracle.sql(f"SELECT file_path FROM {q}.files"):
        assert pq.read_schema(local_path(r[0])).names == ["id", "v", "p"]
    for column in ("_row_id", "_last_updated_sequence_number"):
        with pytest.raises(UnsupportedFeatureError, match="format-version 3"):
            table.scan(selected_fields=("id", column))


def test_upgraded_table_lineage_after_icemor_update(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """v2 files carried into v3 manifest lists get their row ids there (spec, "Row Lineage"):
    icemor reads (and an UPDATE keeps) the ids Java assigns them."""
    name = f"{ns}.t"
    _make(oracle, name, version=2)
    table = icemor.load_table(name, catalog=catalog)
    assert table.scan(selected_fields=("id",)).to_arrow().num_rows == 5  # v2 manifests now cached
    assert table.upgrade(format_version=3) == 2
    table.update({"v": "'x'"}, where="id = 4")
    after = assert_same_lineage(oracle, catalog, name)
    assert len({r[2] for r in after}) == 5


def test_rewritten_manifest_keeps_row_ids_after_a_removed_file(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str
) -> None:
    """A manifest holding a DELETED entry before live files without first_row_id, rewritten by a
    later commit: the live files keep the ids they had (Java's idAssigner skips DELETED entries)."""
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, v STRING, p INT", partitioned_by="p", format_version=2)
    q = oracle.qualified(name)
    oracle.sql(f"INSERT INTO {q} VALUES (1, 'a', 0), (2, 'b', 1)")
    oracle.sql(f"INSERT INTO {q} VALUES (4, 'd', 1), (5, 'e', 0), (6, 'f', 2)")
    table = icemor.load_table(name, catalog=catalog)
    table.upgrade(format_version=3)
    table.update({"v": "'x'"}, where="id = 4")  # removes the file of 4: a DELETED entry stays
    before = assert_same_lineage(oracle, catalog, name)
    table.delete("id = 6")  # removes the file of 6: that manifest is rewritten
    after = assert_same_lineage(oracle, catalog, name)
    assert after == [r for r in before if r[0] != 6]
