"""Apache Iceberg Java 1.10.2 inside PySpark 3.5 (local[2]): the reference implementation for tests.

``IcebergJava`` runs a SparkSession whose Iceberg catalog is a Java ``JdbcCatalog`` on the same SQLite
file and warehouse as icemor's embedded pyiceberg ``SqlCatalog``, so a table written by either side is
read by the other. ``tools/prepare_oracle.py`` (``make oracle``) provides Java, the jars and the native
SQLite library and describes them in ``.cache/oracle/oracle.env.json``.

Equality deletes cannot be written with Spark SQL, so this module writes their Parquet files with pyarrow
and commits them through the Java API (``RowDelta``) over py4j.
"""

from __future__ import annotations

import json
import math
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from pyspark.sql import DataFrame, Row, SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
ORACLE_ENV_FILE = REPO_ROOT / ".cache" / "oracle" / "oracle.env.json"
CATALOG_NAME = "icemor"
FIELD_ID_KEY = b"PARQUET:field_id"
MERGE_ON_READ_PROPERTIES = ("write.delete.mode", "write.update.mode", "write.merge.mode")


class OracleUnavailableError(RuntimeError):
    """The oracle has not been prepared on this machine."""


def load_oracle_env(env_file: Path = ORACLE_ENV_FILE) -> dict[str, Any]:
    """Read the description written by ``tools/prepare_oracle.py``.

    Args:
        env_file: Path of ``oracle.env.json``.

    Returns:
        The parsed json: ``java_home``, ``jars`` and ``native_lib_dir``.

    Raises:
        OracleUnavailableError: If the file, or anything it names, is missing.
    """
    if not env_file.is_file():
        msg = f"{env_file} is missing: run `make oracle` to prepare Iceberg Java (the test oracle)"
        raise OracleUnavailableError(msg)
    env: dict[str, Any] = json.loads(env_file.read_text())
    paths = [env["java_home"], env["native_lib_dir"], *env["jars"]]
    if missing := [p for p in paths if not Path(p).exists()]:
        msg = f"{env_file} names missing files ({', '.join(missing)}): run `make oracle` again"
        raise OracleUnavailableError(msg)
    return env


def ensure_catalog_tables(home: Path, catalog_name: str = CATALOG_NAME) -> None:
    """Have pyiceberg create the JDBC catalog tables in ``<home>/catalog.db`` unless they exist.

    Iceberg Java must find the tables already there: its own existence check
    (``DatabaseMetaData.getTables`` in ``JdbcCatalog.initialize``) never closes its result set, and on
    SQLite that open statement keeps a read transaction, so the pooled connection holds a SHARED lock for
    the life of the JVM and every pyiceberg commit fails with "database is locked". The oracle therefore
    runs with ``jdbc.init-catalog-tables=false``. pyiceberg makes the current ("V1") schema, which Java
    uses as is.

    Args:
        home: icemor's home directory.
        catalog_name: The catalog name (irrelevant to the tables, which hold every catalog's rows).
    """
    from pyiceberg.catalog.sql import SqlCatalog

    home.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        catalog_name, uri=f"sqlite:///{home}/catalog.db", warehouse=f"file://{home}/warehouse"
    )
    catalog.engine.dispose()


def local_path(location: str) -> Path:
    """Turn an Iceberg ``file:`` location (or a plain path) into a local path."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        msg = f"not a local location: {location}"
        raise ValueError(msg)
    return Path(unquote(parsed.path))


def sort_key(value: Any) -> Any:
    """Return a key that orders values of one column type with None first, recursing into rows.

    Args:
        value: A cell value, or a row (tuple or list) of them. NaN sorts after every number.

    Returns:
        A key comparable with the key of any other value of the same shape.
    """
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (2,)  # NaN compares false with everything, which would make the order arbitrary
    if isinstance(value, tuple | list):
        return (1, tuple(sort_key(v) for v in value))
    if isinstance(value, dict):
        return (1, tuple(sorted((sort_key(k), sort_key(v)) for k, v in value.items())))
    return (1, value)


def sorted_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Return rows as tuples in a deterministic, None-safe order."""
    return sorted((tuple(row) for row in rows), key=sort_key)


def icemor_rows(catalog: Any, name: str, **scan: Any) -> list[tuple[Any, ...]]:
    """The rows icemor's local engine reads from table ``name`` (scan arguments as ``Table.scan``)."""
    import icemor

    table = icemor.load_table(name, catalog=catalog)
    return sorted_rows(tuple(r.values()) for r in table.scan(**scan).to_arrow().to_pylist())


def assert_same_at_every_snapshot(java: IcebergJava, catalog: Any, name: str) -> None:
    """icemor and Iceberg Java read the same rows (as multisets) at every snapshot of ``name``."""
    from collections import Counter

    for snapshot_id in java.snapshot_ids(name):
        expected = java.rows(name, snapshot_id=snapshot_id)
        got = icemor_rows(catalog, name, snapshot_id=snapshot_id)
        assert Counter(got) == Counter(expected), f"snapshot {snapshot_id}"


class IcebergJava:
    """Iceberg Java 1.10.2 on Spark 3.5 with a JDBC catalog shared with icemor's pyiceberg SqlCatalog.

    Table names are ``"namespace.table"``; they are resolved in the Iceberg catalog, which is also Spark's
    default catalog, so ``sql()`` can use them unqualified as well.

    Args:
        home: icemor's home: the catalog is ``<home>/catalog.db``, the warehouse ``<home>/warehouse``.
        catalog_name: Catalog name; must equal the pyiceberg catalog's name (the ``catalog_name`` column).
        catalog_properties: Further properties of the Spark catalog (``spark.sql.catalog.<name>.*``).
        env_file: Description of the prepared oracle.

    Only one instance per process: PySpark runs one JVM, configured when the first session starts.
    """

    def __init__(
        self,
        home: Path,
        *,
        catalog_name: str = CATALOG_NAME,
        catalog_properties: dict[str, str] | None = None,
        env_file: Path = ORACLE_ENV_FILE,
    ) -> None:
        env = load_oracle_env(env_file)
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is not None:
            msg = "a SparkSession already runs in this process; the oracle needs its own JVM configuration"
            raise RuntimeError(msg)
        # The driver JVM is launched by spark-submit, which takes Java from JAVA_HOME.
        os.environ["JAVA_HOME"] = env["java_home"]
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        # Stay on loopback: no network is needed, and it spares the "hostname resolves to" warnings.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        self.home = Path(home)
        self.catalog_name = catalog_name
        catalog = f"spark.sql.catalog.{catalog_name}"
        ensure_catalog_tables(self.home, catalog_name)
        (self.home / "warehouse").mkdir(parents=True, exist_ok=True)
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("icemor-oracle")
            .config("spark.jars", ",".join(env["jars"]))
            .config("spark.driver.extraJavaOptions", f"-Djava.library.path={env['native_lib_dir']}")
            .config("spark.driver.memory", "4g")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            # Keep Spark's built-in catalog from creating spark-warehouse/ in the working directory.
            .config("spark.sql.warehouse.dir", str(self.home / "spark-warehouse"))
            .config(
                "spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
            )
            .config("spark.sql.defaultCatalog", catalog_name)
            .config(catalog, "org.apache.iceberg.spark.SparkCatalog")
            .config(f"{catalog}.type", "jdbc")
            .config(f"{catalog}.uri", f"jdbc:sqlite:{self.home / 'catalog.db'}")
            .config(f"{catalog}.warehouse", f"file://{self.home / 'warehouse'}")
            # Always reload table metadata so commits made by pyiceberg are seen at once.
            .config(f"{catalog}.cache-enabled", "false")
            # The tables exist (ensure_catalog_tables); Java's own check would hold a lock (see there).
            .config(f"{catalog}.jdbc.init-catalog-tables", "false")
        )
        for key, value in (catalog_properties or {}).items():
            builder = builder.config(f"{catalog}.{key}", value)
        self.spark: SparkSession = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("WARN")
        self._jvm = self.spark.sparkContext._jvm
        self._gateway = self.spark.sparkContext._gateway

    # ----------------------------------------------------------------------------------- Spark SQL

    def qualified(self, name: str) -> str:
        """Return ``name`` (``"ns.table"``) qualified with the catalog name."""
        return f"{self.catalog_name}.{name}"

    def sql(self, query: str) -> list[Row]:
        """Run a Spark SQL statement and collect its result."""
        return self.spark.sql(query).collect()

    def create_namespace(self, namespace: str) -> None:
        """Create a namespace unless it exists."""
        self.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.qualified(namespace)}")

    def create_table(
        self,
        name: str,
        columns_ddl: str,
        *,
        partitioned_by: str | None = None,
        format_version: int = 2,
        merge_on_read: bool = True,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Create an Iceberg table with Spark SQL, and its namespace if missing.

        Args:
            name: ``"namespace.table"``.
            columns_ddl: Column list, e.g. ``"id BIGINT, data STRING"``.
            partitioned_by: Partition transforms, e.g. ``"bucket(4, id), days(ts)"``.
            format_version: Table format version; with 3, Spark writes deletion vectors.
            merge_on_read: Make DELETE, UPDATE and MERGE write delete files instead of rewriting data.
            properties: Further table properties.
        """
        props = {"format-version": str(format_version)}
        if merge_on_read:
            props.update(dict.fromkeys(MERGE_ON_READ_PROPERTIES, "merge-on-read"))
        props.update(properties or {})
        self.create_namespace(name.rsplit(".", 1)[0])
        partitioning = f" PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
        tblprops = ", ".join(f"'{key}' = '{value}'" for key, value in props.items())
        self.sql(
            f"CREATE TABLE {self.qualified(name)} ({columns_ddl}) USING iceberg{partitioning}"
            f" TBLPROPERTIES ({tblprops})"
        )

    def dataframe(self, name: str, *, snapshot_id: int | None = None) -> DataFrame:
        """Return a DataFrame reading the table (at a snapshot) through Iceberg's Spark reader."""
        reader = self.spark.read.format("iceberg")
        if snapshot_id is not None:
            reader = reader.option("snapshot-id", str(snapshot_id))
        return reader.load(self.qualified(name))

    def rows(
        self, name: str, *, snapshot_id: int | None = None, columns: Sequence[str] | None = None
    ) -> list[tuple[Any, ...]]:
        """Read the table's live rows as tuples, sorted deterministically (None first).

        Args:
            name: ``"namespace.table"``.
            snapshot_id: Snapshot to read; the current one if None.
            columns: Columns to project, in this order; all columns if None.
        """
        df = self.dataframe(name, snapshot_id=snapshot_id)
        if columns is not None:
            df = df.select(*columns)
        return sorted_rows(df.collect())

    def arrow(self, name: str, *, snapshot_id: int | None = None) -> pa.Table:
        """Read the table's live rows as a pyarrow Table (in Spark's order, not sorted)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        df = self.dataframe(name, snapshot_id=snapshot_id)
        # Spark 3.5 has no public DataFrame.toArrow(); this is what toPandas() uses underneath.
        batches = df._collect_as_arrow()
        if not batches:
            return to_arrow_schema(df.schema).empty_table()
        return pa.Table.from_batches(batches)

    # ---------------------------------------------------------------------------- Java API (py4j)

    def java_table(self, name: str) -> Any:
        """Load the ``org.apache.iceberg.Table`` afresh from the catalog."""
        spark3util = self._jvm.org.apache.iceberg.spark.Spark3Util
        return spark3util.loadIcebergTable(self.spark._jsparkSession, self.qualified(name))

    def snapshots(self, name: str) -> list[Any]:
        """Return the table's Java ``Snapshot`` objects in commit order (by sequence number)."""
        snaps = list(_java_iter(self.java_table(name).snapshots()))
        return sorted(snaps, key=lambda s: (s.sequenceNumber(), s.timestampMillis()))

    def snapshot_ids(self, name: str) -> list[int]:
        """Return the table's snapshot ids in commit order."""
        return [int(s.snapshotId()) for s in self.snapshots(name)]

    def current_snapshot_id(self, name: str) -> int | None:
        """Return the current snapshot id, or None for a table without snapshots."""
        snapshot = self.java_table(name).currentSnapshot()
        return None if snapshot is None else int(snapshot.snapshotId())

    def field_ids(self, name: str) -> dict[str, int]:
        """Return the field id of every column, nested ones by dotted name (``"s.x"``, ``"l.element"``)."""
        return self._field_ids(self.java_table(name))

    def write_data_file(
        self, name: str, rows: pa.Table, *, partition_path: str | None = None, spec_id: int | None = None
    ) -> Any:
        """Write rows to a Parquet data file in the table's data directory; do not commit it.

        Args:
            name: ``"namespace.table"``.
            rows: Rows with columns named as the table's; their Arrow types must already match the table's.
            partition_path: Partition of the file in Iceberg's path form, e.g. ``"category=a/id_bucket=3"``.
            spec_id: Partition spec of the file; the table's current spec if None.

        Returns:
            The Java ``DataFile``, for ``commit_row_delta``.
        """
        table = self.java_table(name)
        builder = self._jvm.org.apache.iceberg.DataFiles.builder(self._spec(table, spec_id))
        return self._write_file(table, builder, rows, partition_path)

    def write_equality_delete_file(
        self,
        name: str,
        rows: pa.Table,
        equality_ids: Sequence[int],
        *,
        partition_path: str | None = None,
        spec_id: int | None = None,
    ) -> Any:
        """Write an equality delete file (Parquet) in the table's data directory; do not commit it.

        Args:
            name: ``"namespace.table"``.
            rows: The delete rows, with columns named as the table's (at least the equality columns).
            equality_ids: Field ids of the equality columns (see ``field_ids``).
            partition_path: Partition of the file in Iceberg's path form; None for an unpartitioned spec.
            spec_id: Partition spec of the file; the table's current spec if None. An unpartitioned spec
                makes a global equality delete, which applies to data files of every partition and spec.

        Returns:
            The Java ``DeleteFile``, for ``commit_row_delta``.
        """
        table = self.java_table(name)
        ids = self._field_ids(table)
        # ids written: each column's own and those of the fields nested in it ("info.code")
        written = {
            field_id
            for path, field_id in ids.items()
            if any(path == column or path.startswith(f"{column}.") for column in rows.column_names)
        }
        if missing := [field_id for field_id in equality_ids if field_id not in written]:
            msg = f"equality field ids {missing} are not among the delete rows' columns {rows.column_names}"
            raise ValueError(msg)
        java_ids = self._gateway.new_array(self._jvm.int, len(equality_ids))
        for i, field_id in enumerate(equality_ids):
            java_ids[i] = field_id
        builder = self._jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(self._spec(table, spec_id))
        return self._write_file(table, builder.ofEqualityDeletes(java_ids), rows, partition_path)

    def write_position_delete_file(
        self,
        name: str,
        deletes: Sequence[tuple[str, int]],
        *,
        partition_path: str | None = None,
        spec_id: int | None = None,
    ) -> Any:
        """Write a position delete file of ``(file_path, pos)`` rows; do not commit it.

        Returns:
            The Java ``DeleteFile``, for ``commit_row_delta``.
        """
        table = self.java_table(name)
        schema = pa.schema(
            [
                pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID_KEY: b"2147483546"}),
                pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID_KEY: b"2147483545"}),
            ]
        )
        rows = pa.table({"file_path": [d[0] for d in deletes], "pos": [d[1] for d in deletes]}, schema=schema)
        iceberg = self._jvm.org.apache.iceberg
        builder = iceberg.FileMetadata.deleteFileBuilder(self._spec(table, spec_id)).ofPositionDeletes()
        return self._write_file(
            table,
            builder,
            rows,
            partition_path,
            metrics_config=iceberg.MetricsConfig.forPositionDelete(table),
        )

    def commit_row_delta(
        self, name: str, *, data_files: Iterable[Any] = (), delete_files: Iterable[Any] = ()
    ) -> int:
        """Commit data and delete files together in one ``RowDelta`` snapshot.

        An equality delete applies only to data files with a lower sequence number, so it does not delete
        rows added in the same commit.

        Returns:
            The id of the new snapshot.
        """
        table = self.java_table(name)
        delta = table.newRowDelta()
        for data_file in data_files:
            delta = delta.addRows(data_file)
        for delete_file in delete_files:
            delta = delta.addDeletes(delete_file)
        delta.commit()
        table.refresh()
        return int(table.currentSnapshot().snapshotId())

    def write_equality_deletes(
        self,
        name: str,
        rows: pa.Table,
        equality_ids: Sequence[int],
        *,
        partition_path: str | None = None,
        spec_id: int | None = None,
    ) -> int:
        """Write an equality delete file and commit it in a snapshot of its own.

        Args are those of ``write_equality_delete_file``.

        Returns:
            The id of the new snapshot.
        """
        delete_file = self.write_equality_delete_file(
            name, rows, equality_ids, partition_path=partition_path, spec_id=spec_id
        )
        return self.commit_row_delta(name, delete_files=[delete_file])

    def stop(self) -> None:
        """Stop the SparkSession (the py4j JVM lives on until the Python process exits)."""
        self.spark.stop()

    # ------------------------------------------------------------------------------------ helpers

    def _field_ids(self, table: Any) -> dict[str, int]:
        index = self._jvm.org.apache.iceberg.types.TypeUtil.indexByName(table.schema().asStruct())
        return {str(column): int(field_id) for column, field_id in index.items()}

    def _spec(self, table: Any, spec_id: int | None) -> Any:
        if spec_id is None:
            return table.spec()
        spec = table.specs().get(spec_id)
        if spec is None:
            msg = f"table {table.name()} has no partition spec {spec_id}"
            raise KeyError(msg)
        return spec

    def _write_file(
        self,
        table: Any,
        builder: Any,
        rows: pa.Table,
        partition_path: str | None,
        *,
        metrics_config: Any = None,
    ) -> Any:
        """Write rows as Parquet with Iceberg field ids and finish a Data/DeleteFile builder for it.

        Columns without ``PARQUET:field_id`` metadata take the table's ids by name; columns that
        carry one (the reserved position-delete fields) keep it.
        """
        ids = self._field_ids(table)
        schema = pa.schema(
            [
                field
                if field.metadata and FIELD_ID_KEY in field.metadata
                else _with_field_ids(field, field.name, ids)
                for field in rows.schema
            ]
        )
        filename = f"{uuid.uuid4()}.parquet"
        location = str(
            table.locationProvider().newDataLocation(
                f"{partition_path}/{filename}" if partition_path else filename
            )
        )
        path = local_path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows.cast(schema), path)
        # Real column metrics (counts, null counts, bounds), read back from the footer as Iceberg does.
        iceberg = self._jvm.org.apache.iceberg
        config = metrics_config if metrics_config is not None else iceberg.MetricsConfig.forTable(table)
        metrics = iceberg.parquet.ParquetUtil.fileMetrics(table.io().newInputFile(location), config)
        builder = builder.withPath(location).withFormat("parquet").withFileSizeInBytes(path.stat().st_size)
        builder = builder.withMetrics(metrics)
        if partition_path:
            builder = builder.withPartitionPath(partition_path)
        return builder.build()


def _with_field_ids(field: pa.Field, path: str, ids: dict[str, int]) -> pa.Field:
    """Return the field with ``PARQUET:field_id`` metadata on it and on every nested field."""
    if path not in ids:
        msg = f"column {path!r} is not in the table schema"
        raise KeyError(msg)
    typ = field.type
    if pa.types.is_struct(typ):
        typ = pa.struct([_with_field_ids(child, f"{path}.{child.name}", ids) for child in typ])
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
        element = _with_field_ids(typ.value_field, f"{path}.element", ids)
        typ = pa.list_(element) if pa.types.is_list(typ) else pa.large_list(element)
    elif pa.types.is_map(typ):
        key = _with_field_ids(typ.key_field, f"{path}.key", ids)
        item = _with_field_ids(typ.item_field, f"{path}.value", ids)
        typ = pa.map_(key, item)
    metadata = {**(field.metadata or {}), FIELD_ID_KEY: str(ids[path]).encode()}
    return pa.field(field.name, typ, nullable=field.nullable, metadata=metadata)


def _java_iter(iterable: Any) -> Iterator[Any]:
    """Iterate over a Java ``Iterable`` through py4j."""
    iterator = iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()
