"""``icemor check`` over every table the session built, at every snapshot: clean but for the deliberate faults.

Runs last (``tests/conftest.py`` moves it to the end, and leaves it out when no other test of
the session used the shared catalog): by then the shared catalog holds every table the oracle
tests built with Iceberg Java and icemor — v2 and v3, position deletes, DVs, equality deletes,
partition evolution, compactions, CDC. Two tests corrupt or construct faulty tables on purpose;
their tables must be flagged, with exactly the faults they planted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.table import Table

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

# namespace prefix -> the error names its test plants (and nothing else may appear there)
DELIBERATE = {
    "test_java_tables_are_clean_and_faults_are_found": {
        "position-out-of-range", "sequence-order", "duplicate-dv", "puffin-footer", "dv-dangling",
        "puffin-crc", "missing-file", "size-mismatch", "corrupt-file", "equality-field-missing",
    },
    # Java writes a position past the file's end on purpose (readers ignore it; check flags it)
    "test_merges_position_deletes_and_drops_dangling": {"position-out-of-range"},
}  # fmt: skip


def test_every_table_of_the_session_checks_clean(catalog: SqlCatalog) -> None:
    checked = 0
    unexpected: list[str] = []
    planted: set[str] = set()
    for ns in catalog.list_namespaces():
        allowed = next((names for prefix, names in DELIBERATE.items() if ns[0].startswith(prefix)), None)
        for ident in catalog.list_tables(ns):
            table = Table(catalog.load_table(ident), catalog)
            for snapshot in table.metadata.snapshots:
                checked += 1
                for finding in table.check(snapshot_id=snapshot.snapshot_id).errors:
                    if allowed is not None and finding.name in allowed:
                        planted.add(finding.name)
                    else:
                        unexpected.append(
                            f"{'.'.join(ident)}@{snapshot.snapshot_id}: {finding.name}: {finding.message}"
                        )
    assert checked > 0
    assert unexpected == []
    if any(ns[0].startswith(tuple(DELIBERATE)) for ns in catalog.list_namespaces()):
        assert planted  # the planted faults are found, not only tolerated
