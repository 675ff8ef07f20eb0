"""The driver program of ``test_spark_cluster.py``: icemor on executors that do not have it.

Run as ``python spark_cluster_app.py SRC MASTER OUT EXECUTOR_PYTHON EXECUTOR_TMP`` with no
``PYTHONPATH``: the driver imports icemor from ``SRC`` (put on its own ``sys.path``), while the
executors run ``EXECUTOR_PYTHON``, an interpreter without icemor or its dependencies, with a temp
directory of their own. In one session it records that the executors cannot import icemor and
that a DELETE fails there, leaving the table as it was; then ships icemor
(``icemor.spark.ship``) to that same session and runs DELETE, UPDATE, MERGE and a CDC batch
(``tests_spark4/scenarios.py``, each step checked against the model) and Spark reads with every
delete kind. A second session gets the archive at start-up (``spark.archives`` and
``spark.executorEnv.PYTHONPATH``: the ``spark-submit`` / Spark Connect server recipe of
docs/spark.md) and reads again. What it saw goes to ``OUT/report.json``, the model's rows to
``OUT/expected``, the Spark reads to ``OUT/reads``, for the test to compare with Iceberg Java.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("cluster.flat", "cluster.part")
UNSHIPPED = "cluster.unshipped"


def _executor_jvm(_: int) -> int:
    """In a Python worker: the JVM that runs it (worker -> pyspark daemon -> executor JVM).

    Defined here, in ``__main__``, so that it travels by value: executors have no ``scenarios``.
    """

    def parent(pid: int) -> int:  # /proc/PID/stat: "pid (comm) state ppid ..."
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    return parent(parent(os.getpid()))


def _files(location: str) -> list[str]:
    root = Path(location.removeprefix("file://"))
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _save_reads(spark: Any, out: Path, label: str, strategies: tuple[str, ...]) -> None:
    import scenarios

    import icemor

    (out / "reads").mkdir(exist_ok=True)
    for name in TABLES:
        for strategy in strategies:
            df = icemor.load_table(name).to_spark(spark, strategy=strategy).select(*scenarios.COLUMNS)
            rows = [list(r) for r in df.collect()]
            (out / "reads" / f"{name}.{label}.{strategy}.json").write_text(json.dumps(rows))


def main(argv: list[str]) -> int:
    src, master, out_arg, executor_python, executor_tmp = argv[1:6]
    sys.path[:0] = [src, str(ROOT / "tests_spark4")]
    out = Path(out_arg)
    os.environ["ICEMOR_HOME"] = str(out / "home")

    import scenarios

    import icemor
    import icemor.spark
    from icemor.engines.spark.ship import check_executors
    from icemor.exceptions import UnsupportedFeatureError

    report: dict[str, Any] = {"driver_icemor": icemor.__file__}
    conf = {
        "spark.ui.enabled": "false",
        "spark.executor.memory": "768m",
        "spark.pyspark.python": executor_python,
        # executors get a temp directory of their own: nothing may pass through the driver's
        "spark.executorEnv.TMPDIR": executor_tmp,
        "spark.executor.extraJavaOptions": f"-Djava.io.tmpdir={executor_tmp}",
    }
    spark = icemor.spark.session(master=master, conf=conf)
    try:
        jvms = spark.sparkContext.parallelize(range(8), 8).map(_executor_jvm).collect()
        report["driver_jvms"] = scenarios.driver_jvm_pids()
        report["executor_jvms"] = sorted(set(jvms))

        # 1. the executors lack icemor: the check says so in one line, a DELETE fails, nothing changes
        try:
            check_executors(spark)
        except UnsupportedFeatureError as e:
            report["check_before"] = str(e)
        table = scenarios.create_table(UNSHIPPED, partitioned=False)
        before = table.pyiceberg.current_snapshot()
        snapshot, files = before.snapshot_id if before else None, _files(table.pyiceberg.location())
        try:
            table.delete("qty % 50 = 0", spark=spark)
        except Exception as e:  # whatever Spark raises for a failed job
            report["delete_before"] = str(e)[-3000:]
        after = table.refresh().pyiceberg.current_snapshot()
        report["unshipped_unchanged"] = (after.snapshot_id if after else None) == snapshot and _files(
            table.pyiceberg.location()
        ) == files
        scenarios.save_expected(out, UNSHIPPED, scenarios.initial_rows())

        # 2. ship icemor to this running session: every write, then reads with every delete kind
        archive = icemor.spark.ship(spark, cache_dir=out / "ship-cache")
        report["shipped"] = {"path": str(archive.path), "distributions": list(archive.distributions)}
        for name in TABLES:
            model = scenarios.run_writes(spark, name, partitioned=name.endswith("part"))
            scenarios.save_expected(out, name, model)
        _save_reads(spark, out, "shipped", ("auto", "python"))
    finally:
        spark.stop()

    # 3. the archive given at start-up, as spark-submit --archives / a Connect server gets it
    recipe = {
        **conf,
        "spark.archives": f"{archive.path}#icemor-env",
        "spark.executorEnv.PYTHONPATH": "./icemor-env",
    }
    spark = icemor.spark.session(master=master, conf=recipe)
    try:
        check_executors(spark)
        _save_reads(spark, out, "recipe", ("python",))
    finally:
        spark.stop()
    (out / "report.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
