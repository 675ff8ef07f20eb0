"""The demo behind ``make demo`` (``icemor demo``): the whole merge-on-read pipeline, timed.

Creates ``demo.events`` in the embedded catalog (replacing an earlier demo), bulk-loads 2 M rows,
runs a DELETE, an UPDATE and a MERGE, applies three CDC batches, checks every read against a
numpy model of the table, then ``inspect`` (score before), ``optimize``, ``inspect`` again (written
as HTML) and ``check``. On Spark ``local[*]`` by default (the per-file work of every operation on
its executors, the reads through ``to_spark``), or on the local engine.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from icemor.catalog import icemor_home, load_catalog, table_locations
from icemor.cli.report_html import write_html
from icemor.exceptions import IcemorError
from icemor.ops.create import create_table
from icemor.table import Table

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyiceberg.catalog import Catalog

__all__ = ["DEMO_TABLE", "ROWS", "run_demo"]

DEMO_TABLE = "demo.events"
ROWS = 2_000_000
_FILES = 4


class DemoCheckError(IcemorError):
    """A read of the demo table disagreed with the model (a bug: please report it)."""


@dataclass
class _Model:
    """The table as numpy arrays: what every read must return."""

    ids: npt.NDArray[np.int64]
    qty: npt.NDArray[np.int64]

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        self.ids, self.qty = self.ids[mask], self.qty[mask]

    def upsert(self, ids: npt.NDArray[np.int64], qty: npt.NDArray[np.int64]) -> None:
        self.keep(~np.isin(self.ids, ids))
        self.ids, self.qty = np.concatenate([self.ids, ids]), np.concatenate([self.qty, qty])


def _rows(ids: npt.NDArray[np.int64], qty: npt.NDArray[np.int64]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array((ids % 100).astype(np.int32), pa.int32()),
            "qty": pa.array(qty, pa.int64()),
            "note": pa.array(np.char.add("event-", (ids % 9973).astype(str)).astype(object), pa.string()),
        }
    )


def run_demo(*, echo: Callable[[str], None] = print, engine: str = "spark", rows: int = ROWS) -> Path:
    """Run the pipeline; return the path of the HTML health report written after optimizing.

    Args:
        echo: Where progress lines go.
        engine: ``spark`` (``local[*]``) or ``local``.
        rows: Rows of the bulk load.

    Raises:
        DemoCheckError: A read disagreed with the model.
    """
    clock = _Clock(echo)
    spark: Any = None
    if engine == "spark":
        with clock.step("starting Spark local[*]"):
            from icemor.engines.spark import session  # noqa: PLC0415 - optional: pyspark

            spark = session(master="local[*]")

    catalog = load_catalog()
    echo(f"embedded catalog: {icemor_home()}; engine: {engine}")
    catalog.create_namespace_if_not_exists("demo")
    if catalog.table_exists(DEMO_TABLE):
        catalog.purge_table(DEMO_TABLE)

    with tempfile.TemporaryDirectory(prefix="icemor-demo-") as tmp:
        table, model = _bulk_load(clock, catalog, Path(tmp), rows)
        run = _Pipeline(clock, spark, table, model)
        run.verify({None: run.everything()})
        run.delete()
        run.update()
        run.merge(rows)
        for b in (1, 2, 3):
            run.cdc_batch(b, rows)
        html = run.inspect_and_optimize(icemor_home() / "demo-health.html")
        run.check()
    echo(f"demo finished in {clock.elapsed():.1f} s")
    return html


class _Clock:
    """The demo's timed steps: each announced with the time since the start, then its duration."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        self.echo(f"[{self.elapsed():6.1f} s] {label} ...")
        began = time.monotonic()
        yield
        self.echo(f"         done in {time.monotonic() - began:.2f} s")


def _bulk_load(clock: _Clock, catalog: Catalog, tmp: Path, rows: int) -> tuple[Table, _Model]:
    """``demo.events`` created and loaded with ``rows`` rows from ``_FILES`` Parquet files in ``tmp``."""
    ids = np.arange(rows, dtype=np.int64)
    model = _Model(ids, ids % 1000)
    with clock.step(f"bulk load: {rows:,} rows in {_FILES} Parquet files"):
        paths = []
        for i, part in enumerate(np.array_split(np.arange(rows, dtype=np.int64), _FILES)):
            path = tmp / f"part-{i}.parquet"
            pq.write_table(_rows(part, part % 1000), path)
            paths.append(path)
        created = create_table(
            catalog,
            DEMO_TABLE,
            schema_from=paths[0],
            tables=lambda: table_locations(catalog, strict=False),
        )
        table = Table(created, catalog)
        table.append_files(paths)
    return table, model


def _cdc_changes(b: int, rows: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], pa.Table]:
    """CDC batch ``b``: the ids deleted, the ids upserted or inserted, and the change rows."""
    gone = np.arange(b * 200_000, b * 200_000 + 20_000, dtype=np.int64)
    upserted = np.arange(b * 200_000 + 50_000, b * 200_000 + 60_000, dtype=np.int64)
    inserted = np.arange(10 * rows + b * 10_000, 10 * rows + (b + 1) * 10_000, dtype=np.int64)
    changed = np.concatenate([upserted, inserted])
    changes = pa.concat_tables(
        [
            _rows(gone, np.zeros(len(gone), np.int64)).append_column("op", pa.array(["D"] * len(gone))),
            _rows(changed, np.full(len(changed), b * 1000, np.int64)).append_column(
                "op", pa.array(["U"] * len(upserted) + ["I"] * len(inserted))
            ),
        ]
    )
    return gone, changed, changes


@dataclass
class _Pipeline:
    """The steps after the bulk load, each applied to the table and to its model, then checked."""

    clock: _Clock
    spark: Any
    table: Table
    model: _Model

    def echo(self, line: str) -> None:
        self.clock.echo(line)

    def everything(self) -> npt.NDArray[np.bool_]:
        return np.ones(len(self.model.ids), bool)

    def count(self, where: str | None = None) -> int:
        scan = self.table.scan(row_filter=where, selected_fields=("id",))
        return int(scan.to_spark(self.spark).count()) if self.spark is not None else scan.count()

    def verify(self, checks: dict[str | None, npt.NDArray[np.bool_]]) -> None:
        for where, mask in checks.items():
            got, want = self.count(where), int(np.count_nonzero(mask))
            if got != want:
                msg = f"demo: {where or 'all rows'}: read {got} rows, the model has {want}"
                raise DemoCheckError(msg)
            self.echo(f"         check: {where or 'all rows'}: {got} rows, as expected")

    def delete(self) -> None:
        with self.clock.step("DELETE WHERE k < 5 (5 % of every file: position deletes)"):
            m = self.table.delete("k < 5", spark=self.spark)
            self.echo(f"         deleted {m.deleted_rows:,} rows, {m.delete_files_added} delete files")
            self.model.keep(self.model.ids % 100 >= 5)
        self.verify({None: self.everything()})

    def update(self) -> None:
        model = self.model
        with self.clock.step("UPDATE SET qty = qty + 1 WHERE k = 10"):
            u = self.table.update({"qty": "qty + 1"}, where="k = 10", spark=self.spark)
            self.echo(f"         updated {u.rows_updated:,} rows")
            hit = model.ids % 100 == 10
            model.qty = np.where(hit, model.qty + 1, model.qty)
        self.verify({"qty % 100 = 11": model.qty % 100 == 11})

    def merge(self, rows: int) -> None:
        spark = self.spark
        with self.clock.step("MERGE 2,000 source rows on id (update matched, insert the rest)"):
            src_ids = np.arange(rows - 1000, rows + 1000, dtype=np.int64)
            source = _rows(src_ids, np.full(len(src_ids), -1, np.int64))
            source_arg: Any = spark.createDataFrame(source.to_pandas()) if spark is not None else source
            g = (
                self.table.merge(source_arg, on="t.id = s.id", spark=spark)
                .when_matched_update({"qty": "s.qty"})
                .when_not_matched_insert_all()
                .execute()
            )
            self.echo(f"         updated {g.rows_updated:,}, inserted {g.rows_inserted:,} rows")
            self.model.upsert(src_ids, np.full(len(src_ids), -1, np.int64))
        self.verify({None: self.everything(), "qty = -1": self.model.qty == -1})

    def cdc_batch(self, b: int, rows: int) -> None:
        with self.clock.step(
            f"CDC batch {b}: 20,000 deletes, 10,000 upserts, 10,000 inserts (equality deletes)"
        ):
            gone, changed, changes = _cdc_changes(b, rows)
            c = self.table.apply_changes(changes, key=["id"], allow_nullable_key=True)
            self.echo(f"         snapshot {c.snapshot_id}")
            self.model.keep(~np.isin(self.model.ids, gone))
            self.model.upsert(changed, np.full(len(changed), b * 1000, np.int64))
        self.verify({None: self.everything(), f"qty = {b * 1000}": self.model.qty == b * 1000})

    def inspect_and_optimize(self, html: Path) -> Path:
        """``inspect``, ``optimize``, then ``inspect`` again written as HTML to ``html``."""
        with self.clock.step("inspect"):
            before = self.table.inspect()
        self.echo(f"         health score before: {before.table.score} / 100")
        for r in before.recommendations:
            self.echo(f"         recommendation: {r.action}: {r.command}")

        with self.clock.step("optimize"):
            result = self.table.optimize(spark=self.spark, note=lambda line: self.echo(f"         {line}"))
        self.verify({None: self.everything(), "qty = -1": self.model.qty == -1})

        with self.clock.step("inspect again, as HTML"):
            after = self.table.inspect()
            write_html(after, html)
        self.echo(
            f"         health score after: {after.table.score} / 100 "
            f"(optimize expected {result.plan.score_expected})"
        )
        self.echo(f"         HTML report: {html}")
        return html

    def check(self) -> None:
        with self.clock.step("check"):
            report = self.table.check()
        self.echo(
            f"         {report.data_files} data files, {report.delete_files} delete files: "
            f"{len(report.errors)} errors, {len(report.warnings)} warnings"
        )
        if not report.clean:
            msg = f"demo: check found {report.errors[0].name}: {report.errors[0].message}"
            raise DemoCheckError(msg)
