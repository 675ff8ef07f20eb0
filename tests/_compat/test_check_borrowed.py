"""Borrowed internals stay in their compat modules: ``tools/check_borrowed.py``.

``make lint`` runs the tool on ``src/icemor``; these tests prove it finds each kind of borrowing
(the ones that were outside the compat modules before: ``planning/manifest_reader.py``'s Avro reader,
``commit/row_delta.py``'s summary helpers, ``commit/schema.py``'s ``_commit()``, the Spark
engine's ``_jvm`` and ``_collect_as_arrow``), that it allows them in the compat modules, and that
the tree has none elsewhere.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("check_borrowed", ROOT / "tools" / "check_borrowed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_borrowed"] = module
    spec.loader.exec_module(module)
    return module


check = _tool()


def test_no_borrowed_internal_outside_the_compat_modules() -> None:
    assert check.check_tree(ROOT / "src" / "icemor") == []


PYICEBERG_BORROWINGS = [
    "from pyiceberg.avro.file import AvroFile\n",
    "import pyiceberg.avro.file\n",
    "from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS\n",
    "from pyiceberg.manifest import write_manifest_list\n",
    "from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector\n",
    "from pyiceberg.table.snapshots import update_snapshot_summaries as u\n",
    "from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata\n",
    "from pyiceberg.io.pyarrow import _dataframe_to_data_files\n",
    "from pyiceberg.io import pyarrow as pa_io\nx = pa_io._to_requested_schema\n",
    "import pyiceberg.io.pyarrow as p\nx = p._check_pyarrow_schema_compatible\n",
    "def f(update):\n    return update._commit()\n",
    "def f(catalog):\n    return getattr(catalog, '_write_metadata')\n",
]
PYSPARK_BORROWINGS = [
    "def f(spark):\n    return spark.sparkContext._jvm\n",
    "def f(spark):\n    return getattr(spark, '_jvm', None)\n",
    "def f(df):\n    return df._jdf\n",
    "def f(spark):\n    return spark._jsc.hadoopConfiguration()\n",
    "def f(df):\n    return df._collect_as_arrow()\n",
    "from pyspark.sql.pandas.types import to_arrow_schema\n",
    "from pyspark.sql import pandas\n",
    "from pyspark.sql.types import _parse_datatype_string\n",
    "from py4j.java_gateway import java_import\nx = java_import._x\n",
    "ROW_INDEX = '_tmp_metadata_row_index'\n",
]


@pytest.mark.parametrize("source", PYICEBERG_BORROWINGS + PYSPARK_BORROWINGS)
def test_each_kind_of_borrowing_is_found(source: str) -> None:
    found = check.check_source(source, "mod.py")
    assert len(found) >= 1
    assert found[0].startswith("mod.py:")


@pytest.mark.parametrize("source", PYICEBERG_BORROWINGS)
def test_pyiceberg_internals_are_allowed_in_its_compat_module_only(source: str) -> None:
    assert check.check_source(source, "m.py", allowed=frozenset({"pyiceberg"})) == []
    assert check.check_source(source, "m.py", allowed=frozenset({"pyspark"})) != []


@pytest.mark.parametrize("source", PYSPARK_BORROWINGS)
def test_pyspark_internals_are_allowed_in_its_compat_module_only(source: str) -> None:
    assert check.check_source(source, "m.py", allowed=frozenset({"pyspark"})) == []
    assert check.check_source(source, "m.py", allowed=frozenset({"pyiceberg"})) != []


@pytest.mark.parametrize(
    "source",
    [
        "from pyiceberg.manifest import DataFile, ManifestEntry\n",
        "from pyiceberg.catalog import load_catalog as _load\n",  # a private alias of a public name
        "import pyiceberg.expressions as _expressions\nx = _expressions.AlwaysTrue\n",
        "from pyiceberg.io.pyarrow import schema_to_pyarrow, pyarrow_to_schema\n",
        "from pyspark.sql import functions as F\nx = F.col\n",
        "class A:\n    def f(self):\n        return self._table, self._lock\n",  # icemor's own privates
        "def f(catalog):\n    return getattr(catalog, '_icemor_swap_hook', False)\n",
        "DOC = 'reads the _tmp_metadata_row_index column'\n",
        "from .x import _private\n",
    ],
)
def test_public_names_and_own_privates_pass(source: str) -> None:
    assert check.check_source(source, "mod.py") == []


def test_the_compat_modules_are_where_the_tree_may_borrow(tmp_path: Path) -> None:
    src = tmp_path / "icemor"
    (src / "_compat").mkdir(parents=True)
    (src / "engines" / "spark").mkdir(parents=True)
    (src / "planning").mkdir()
    iceberg = "from pyiceberg.avro.file import AvroFile\n"
    spark = "def f(df):\n    return df._collect_as_arrow()\n"
    (src / "_compat" / "pyiceberg.py").write_text(iceberg)
    (src / "engines" / "spark" / "_compat.py").write_text(spark)
    assert check.check_tree(src) == []
    (src / "_compat" / "pyspark.py").write_text(spark)  # pyspark belongs to the Spark engine
    (src / "engines" / "spark" / "native.py").write_text(spark)
    (src / "planning" / "manifest_reader.py").write_text(iceberg)
    found = check.check_tree(src)
    assert sorted(Path(line.split(":")[0]).relative_to(src).as_posix() for line in found) == [
        "_compat/pyspark.py",
        "engines/spark/native.py",
        "planning/manifest_reader.py",
    ]
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_borrowed.py"), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "planning/manifest_reader.py:1: from pyiceberg.avro.file import AvroFile" in result.stdout
