"""The demo job behind ``make demo``: a table in the embedded catalog, written and read back."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["run_demo"]

DEMO_TABLE = "demo.events"


def run_demo(*, echo: Callable[[str], None] = print) -> None:
    """Create ``demo.events`` (replacing an earlier demo), append rows, print the scan and its plan."""
    from icemor.catalog import icemor_home, load_catalog
    from icemor.output import print_plan, print_table
    from icemor.table import Table

    catalog = load_catalog()
    catalog.create_namespace_if_not_exists("demo")
    if catalog.table_exists(DEMO_TABLE):
        catalog.purge_table(DEMO_TABLE)
    rows = pa.table(
        {
            "id": pa.array(range(1, 9), pa.int64()),
            "category": ["marsupial", "toy", None, None, "toy", "marsupial", "bird", "bird"],
            "name": ["Koala", "Teddy", "Grizzly", "Polar", "Robot", "Wombat", "Kiwi", "Emu"],
        }
    )
    created = catalog.create_table(DEMO_TABLE, schema=rows.schema, properties={"format-version": "2"})
    created.append(rows)
    table = Table(created, catalog)
    echo(f"embedded catalog: {icemor_home()}")
    scan = table.scan()
    print_table(scan.to_arrow_batch_reader(), scan.arrow_schema, limit=None, title=DEMO_TABLE)
    print_plan(scan.plan_files())
    echo(f"count: {scan.count()}")
