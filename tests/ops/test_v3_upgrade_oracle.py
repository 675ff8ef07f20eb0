"""``icemor upgrade TABLE --format-version 3``: a v2 table with position deletes reads the
same before and after; the next write folds each data file's position deletes into a deletion vector,
and Iceberg Java reads every step right."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

import icemor
from oracle import icemor_rows

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle


def _deletes(oracle: IcebergJava, name: str) -> Counter[str]:
    rows = oracle.sql(f"SELECT file_format FROM {oracle.qualified(name)}.delete_files")
    return Counter(str(r[0]) for r in rows)


@pytest.mark.parametrize("partitioned_by", [None, "k"])
def test_upgrade_keeps_rows_and_next_delete_folds_position_deletes_into_dvs(
    oracle: IcebergJava, catalog: SqlCatalog, ns: str, partitioned_by: str | None
) -> None:
    name = f"{ns}.t"
    oracle.create_table(name, "id BIGINT, k STRING, m INT", partitioned_by=partitioned_by, format_version=2)
    q = oracle.qualified(name)
    for lo in (0, 100):
        oracle.sql(
            f"INSERT INTO {q} SELECT /*+ COALESCE(1) */ id, concat('k', id % 3), cast(id % 10 as int) "
            f"FROM range({lo}, {lo + 100})"
        )
    oracle.sql(f"DELETE FROM {q} WHERE m = 1")  # Java's v2 position deletes
    table = icemor.load_table(name, catalog=catalog)
    table.delete("m = 2")  # and icemor's
    expected = sorted(i for i in range(200) if i % 10 not in (1, 2))
    before = Counter(oracle.rows(name))
    assert sorted(int(r[0]) for r in oracle.rows(name)) == expected
    assert set(_deletes(oracle, name)) == {"PARQUET"}

    assert table.upgrade(format_version=3) == 2
    assert table.metadata.format_version == 3
    props = {r[0]: r[1] for r in oracle.sql(f"SHOW TBLPROPERTIES {q}")}
    assert props["format-version"] == "3"
    assert Counter(oracle.rows(name)) == before  # the same rows, the same delete files
    assert Counter(icemor_rows(catalog, name)) == before
    assert set(_deletes(oracle, name)) == {"PARQUET"}

    m = table.delete("m = 3")
    expected = [i for i in expected if i % 10 != 3]
    assert m.deleted_rows == 20
    assert sorted(int(r[0]) for r in oracle.rows(name)) == expected
    assert sorted(int(r[0]) for r in icemor_rows(catalog, name)) == expected
    # every data file now has one DV holding its older position deletes; partition-scoped
    # position-delete files (Java's, if any) may stay, but file-scoped ones are gone
    rows = oracle.sql(f"SELECT file_format, referenced_data_file, record_count FROM {q}.delete_files")
    dvs = [r for r in rows if str(r[0]) == "PUFFIN"]
    assert max(Counter(r[1] for r in dvs).values()) == 1
    assert sum(int(r[2]) for r in dvs) == 200 - len(expected)
    # Java writes its DVs after icemor's, icemor reads them
    oracle.sql(f"DELETE FROM {q} WHERE m = 4")
    expected = [i for i in expected if i % 10 != 4]
    assert sorted(int(r[0]) for r in icemor_rows(catalog, name)) == expected
