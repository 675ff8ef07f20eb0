"""``attach``'s SQL judged by Iceberg Java on generated statements: the same text on twin tables.

Two twin tables per configuration (v2 partitioned, v3 unpartitioned) get the same statements:
Iceberg Java runs each on its twin through its own catalog (``icemor.ns.java``), icemor through
the attached one (``ice.ns.ours``). Reads must give Java's rows; writes must leave the twins
equal (rows Java reads, the last snapshot's operation, the kinds of live files: of those that still
hold or delete a live row where icemor removed a wholly deleted data file Java keeps); a statement
Java refuses, icemor must refuse; a statement icemor refuses (one line, table unchanged: Java's
twin is rolled back to match) is counted by form and must be listed in docs/spark.md.

``ICEMOR_ATTACH_SEED=S`` replays a seed (default: a new one, printed with the counts).
"""

from __future__ import annotations

import os
import random
import secrets
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

import icemor.spark
from icemor.exceptions import IcemorError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

    from oracle import IcebergJava

pytestmark = pytest.mark.oracle

SEED = int(os.environ.get("ICEMOR_ATTACH_SEED") or secrets.randbelow(2**31))
STATEMENTS_PER_CONFIG = 75  # x 2 configurations: the 150 statements #47 asks of make test
COLUMNS = "id BIGINT, k STRING, qty DOUBLE, p STRING"
ROW = "id, concat('k', id % 4) AS k, id * 0.5 AS qty, IF(id % 2 = 0, 'even', 'odd') AS p"
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "spark.md")


def _reads(r: random.Random) -> list[str]:
    lo, hi = sorted(r.sample(range(320), 2))
    k = r.randrange(4)
    return [
        f"SELECT * FROM {{T}} WHERE id BETWEEN {lo} AND {hi}",
        f"SELECT k, count(*), sum(qty), min(id) FROM {{T}} WHERE id > {lo} GROUP BY k",
        f"SELECT p, count(DISTINCT k) FROM {{T}} GROUP BY p HAVING count(*) > {r.randrange(5)}",
        f"SELECT a.id, b.qty FROM {{T}} a JOIN {{S}} b ON a.id = b.id WHERE a.k = 'k{k}'",
        f"SELECT id FROM {{T}} WHERE id IN (SELECT id FROM {{S}} WHERE id % {r.randrange(2, 9)} = 0)",
        f"SELECT count(*) FROM {{S}} s WHERE NOT EXISTS (SELECT 1 FROM {{T}} t WHERE t.id = s.id + {k})",
        "WITH c AS (SELECT k, max(qty) AS m FROM {T} GROUP BY k) SELECT * FROM c ORDER BY k",
        "SELECT count(*), sum(id) FROM {T} VERSION AS OF {s0}",
        "SELECT count(*), sum(id) FROM {T} FOR SYSTEM_VERSION AS OF {s1}",
        "SELECT count(*) FROM {T} TIMESTAMP AS OF {t1}",
        # the first snapshots (the set-up's); later ones may differ by Java's empty commits
        "SELECT operation FROM {T}.snapshots ORDER BY committed_at LIMIT 4",
        "SELECT is_current_ancestor FROM {T}.history ORDER BY made_current_at LIMIT 4",
        # file counts and sizes are each writer's layout; the kinds of file are the table's state
        "SELECT DISTINCT content FROM {T}.files",
        "SELECT name, type FROM {T}.refs",
        f"SELECT * FROM (SELECT id, qty FROM {{T}} UNION ALL SELECT id, qty FROM {{S}}) WHERE id < {lo}",
    ]


def _writes(r: random.Random) -> list[str]:
    lo = r.randrange(0, 300)
    n = r.randrange(3, 40)
    new = 1000 + r.randrange(10**6)
    return [
        f"INSERT INTO {{T}} SELECT id + {new}, k, qty, p FROM {{S}} WHERE id BETWEEN {lo} AND {lo + n}",
        f"INSERT INTO {{T}} VALUES ({new}, 'k{n % 4}', {n}.5, 'odd'), ({new + 1}, NULL, NULL, 'even')",
        f"INSERT INTO {{T}} (id, p, k, qty) SELECT id + {new}, p, k, qty * 2 FROM {{S}} WHERE id % 17 = {n % 17}",
        f"DELETE FROM {{T}} WHERE id % {r.randrange(5, 23)} = {n % 5}",
        f"DELETE FROM {{T}} WHERE k = 'k{n % 4}' AND id > {lo}",
        f"UPDATE {{T}} SET qty = qty + 1 WHERE id BETWEEN {lo} AND {lo + n}",
        f"UPDATE {{T}} SET k = 'x{n}', qty = NULL WHERE p = 'odd' AND id < {lo}",
        "MERGE INTO {T} t USING (SELECT * FROM {S} WHERE id % 3 = "
        f"{n % 3}) s ON t.id = s.id WHEN MATCHED AND s.id % 2 = 0 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.qty = s.qty + 10 WHEN NOT MATCHED THEN INSERT *",
        f"MERGE INTO {{T}} t USING {{S}} s ON t.id = s.id + {new} WHEN NOT MATCHED AND s.id < {n} THEN INSERT *",
        "INSERT OVERWRITE {T} SELECT * FROM {T} WHERE id % 2 = 0 OR p = 'even'",
        f"ALTER TABLE {{T}} SET TBLPROPERTIES ('gen.{n}' = 'v{lo}')",
        "CALL {C}.system.rewrite_position_delete_files('{N}')",
        "CALL {C}.system.rollback_to_snapshot('{N}', {sprev})",
    ]


def statements(r: random.Random, count: int) -> list[str]:
    """``count`` statements, about half reads, in a seeded order."""
    out = []
    for _ in range(count):
        pool = _reads(r) if r.random() < 0.5 else _writes(r)
        out.append(r.choice(pool))
    return out


class _Side:
    def __init__(self, oracle: IcebergJava, catalog: str, table: str, source: str) -> None:
        self.oracle, self.catalog, self.table, self.source = oracle, catalog, table, source
        # the current snapshot before each write statement: {sprev} is the state before the
        # last one (each twin's own id; Java's empty commits make list positions differ)
        self.marks: list[int] = []

    def mark(self) -> None:
        current = self.oracle.current_snapshot_id(self.table)
        if current is not None:
            self.marks.append(current)

    def fill(self, text: str) -> str:
        ids = self.oracle.snapshot_ids(self.table)
        when = self.oracle.sql(
            f"SELECT committed_at FROM icemor.{self.table}.snapshots WHERE snapshot_id = {ids[min(1, len(ids) - 1)]}"
        )[0][0]
        return text.format(
            T=f"{self.catalog}.{self.table}",
            S=f"{self.catalog}.{self.source}",
            C=self.catalog,
            N=self.table,
            s0=ids[0],
            s1=ids[min(1, len(ids) - 1)],
            sprev=self.marks[-1] if self.marks else ids[0],
            t1=f"TIMESTAMP '{when.isoformat(sep=' ')}'",
        )


def _state(
    oracle: IcebergJava, table: str, before: int | None
) -> tuple[Counter[tuple[Any, ...]], str, frozenset[int]]:
    """The rows Java reads, the operation of the snapshot the statement added (``-`` for none),
    and the kinds of live file."""
    rows = Counter(tuple(r) for r in oracle.sql(f"SELECT * FROM icemor.{table}"))
    now = oracle.current_snapshot_id(table)
    added = "-"
    if now != before:
        query = f"SELECT operation, summary FROM icemor.{table}.snapshots WHERE snapshot_id = {now}"
        op, summary = oracle.sql(query)[0]
        # Java commits an empty snapshot for a statement that changes nothing; icemor commits none
        changed = any(
            k.startswith(("added-", "deleted-", "removed-")) and k != "added-files-size" for k in summary
        )
        added = str(op) if changed else "-"
    kinds = frozenset(int(r[0]) for r in oracle.sql(f"SELECT DISTINCT content FROM icemor.{table}.files"))
    return rows, added, kinds


def _live_kinds(oracle: IcebergJava, table: str) -> frozenset[int]:
    """The kinds of live file that still hold or delete a live row: data files with a row Java
    reads, position deletes (files and DVs) naming one of those, equality deletes."""
    t = f"icemor.{table}"
    query = (
        f"WITH live AS (SELECT DISTINCT _file FROM {t}) SELECT 0 FROM live"
        f" UNION SELECT 1 FROM {t}.position_deletes d JOIN live ON d.file_path = live._file"
        f" UNION SELECT 2 FROM {t}.delete_files WHERE content = 2"
    )
    return frozenset(int(r[0]) for r in oracle.sql(query))


def _run(run: Callable[..., Any]) -> tuple[str, Any]:
    try:
        return "ok", Counter(tuple(x) for x in run().collect())
    except IcemorError as e:
        return "refused", e
    except Exception as e:  # Spark's own refusal (analysis, parse) or Java's
        return "error", e


@pytest.fixture
def attached(oracle: IcebergJava) -> Iterator[SparkSession]:
    icemor.spark.attach(oracle.spark, name="ice")
    try:
        yield oracle.spark
    finally:
        icemor.spark.detach(oracle.spark)


@pytest.mark.timeout(1200)  # 75 statements, each run twice and checked through Java
@pytest.mark.parametrize(("version", "partitioned_by"), [(2, "p"), (3, None)])
def test_generated_statements_agree_with_java(
    oracle: IcebergJava, attached: SparkSession, version: int, partitioned_by: str | None
) -> None:
    r = random.Random(SEED * 10 + version)
    ns = f"attdiff_{version}_{secrets.token_hex(3)}"
    oracle.create_table(f"{ns}.src", COLUMNS, format_version=version)
    oracle.sql(f"INSERT INTO icemor.{ns}.src SELECT {ROW} FROM range(0, 320)")
    for twin in ("java", "ours"):
        oracle.create_table(f"{ns}.{twin}", COLUMNS, format_version=version, partitioned_by=partitioned_by)
        for lo in (0, 100, 200):
            oracle.sql(
                f"INSERT INTO icemor.{ns}.{twin} SELECT /*+ COALESCE(1) */ {ROW} FROM range({lo}, {lo + 100})"
            )
        oracle.sql(f"DELETE FROM icemor.{ns}.{twin} WHERE id % 7 = 3")
    java = _Side(oracle, "icemor", f"{ns}.java", f"{ns}.src")
    ours = _Side(oracle, "ice", f"{ns}.ours", f"{ns}.src")
    counts: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for text in statements(r, STATEMENTS_PER_CONFIG):
        before = oracle.current_snapshot_id(f"{ns}.java")
        ours_before = oracle.current_snapshot_id(f"{ns}.ours")
        java_text, ours_text = java.fill(text), ours.fill(text)
        if not text.startswith(("SELECT", "WITH")):
            java.mark()
            ours.mark()
        jk, jv = _run(lambda t=java_text: attached.sql(t))
        ok, ov = _run(lambda t=ours_text: attached.sql(t))
        assert jk != "refused", f"seed {SEED}: Java's side went through icemor: {text}"
        if jk == "error":
            assert ok != "ok", f"seed {SEED}: Java refused, icemor ran: {text} ({str(jv).splitlines()[0]})"
            counts["both refused"] += 1
            continue
        if ok == "refused":
            assert "\n" not in str(ov), f"seed {SEED}: a refusal of more than one line: {text}"
            refused[" ".join(text.split()[:2])] += 1
            counts["refused by icemor"] += 1
            if oracle.current_snapshot_id(f"{ns}.java") != before:  # keep the twins equal
                oracle.sql(f"CALL icemor.system.rollback_to_snapshot('{ns}.java', {before})")
            continue
        assert ok == "ok", f"seed {SEED}: icemor failed where Java ran: {text}: {ov}"
        if text.startswith("CALL"):  # the rows hold each twin's own snapshot ids and file counts
            assert sum(ov.values()) == sum(jv.values()), f"seed {SEED}: different result rows: {text}"
        else:
            assert ov == jv, f"seed {SEED}: different rows: {text}"
        if not text.startswith("SELECT") and not text.startswith("WITH"):
            ours_state = _state(oracle, f"{ns}.ours", ours_before)
            java_state = _state(oracle, f"{ns}.java", before)
            # a maintenance procedure plans its own work (Java's thresholds are not icemor's): rows only
            same = ours_state[0] == java_state[0] if text.startswith("CALL") else ours_state == java_state
            if not same and ours_state[:2] == java_state[:2]:
                # icemor removes a data file whose every live row goes (docs/semantics.md), where
                # Java keeps it and the deletes naming it: compare the files that still matter
                same = _live_kinds(oracle, f"{ns}.ours") == _live_kinds(oracle, f"{ns}.java")
            assert same, (
                f"seed {SEED}: tables differ after {text}: {ours_state[1:]} {java_state[1:]} rows equal: {ours_state[0] == java_state[0]}"
            )
        counts["agreed"] += 1
    print(
        f"\nattach differential v{version}: seed {SEED} (ICEMOR_ATTACH_SEED={SEED} replays it): "
        f"{sum(counts.values())} statements, {dict(counts)}; refused by form: {dict(refused)}"
    )
    assert counts["agreed"] >= STATEMENTS_PER_CONFIG // 2
    with open(DOCS) as f:
        docs = f.read()
    assert all(form in docs for form in refused), (
        f"refused forms not listed in docs/spark.md: {sorted(refused)}"
    )
