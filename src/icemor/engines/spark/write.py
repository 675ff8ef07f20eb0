"""Write row changes on the executors: only file metadata comes back to the driver.

UPDATE, MERGE and DELETE with a SQL condition on the Spark engine give a DataFrame of changes:
``_file``, ``_pos`` (the old row, null for an insert) and the new row's columns. It is
repartitioned by ``_file`` (inserts by a hash of their values) and sorted within partitions by
``_file, _pos``; each task streams its Arrow batches to the operation's per-task function
(:func:`icemor.ops.units.write_change_task`: the delete semantics live there, shared with the
local engine), and only its pickled result, file metadata and counts, is collected.

Changes read straight from a scan (a DELETE or UPDATE: a filter and a projection, no join)
already come clustered: each scan task reads whole data files, one after the other, rows in
file order. ``clustered=True`` skips the shuffle and the sort for them (they cost more than the
rest of the write: measured 0.2-0.3 s of a 1.1 s DELETE of 1 M rows). Spark splits a data file
larger than its split size across tasks, so the split size is raised to the largest data file
for that job; the caller still checks that no data file came to two tasks
(:func:`files_seen_twice`) and writes again, shuffled, if one did.

Spark runs a failed task again and may run speculative copies: only the results of the
attempts it keeps reach the driver, but every attempt may have written files. So every file
is announced before it is created: a tiny marker holding its path, under a staging prefix of
this write in the table's data path (``<write.data.path>/_icemor-staging/<write id>/``, by
default ``<location>/data/_icemor-staging/...``: where the executors write the data files
anyway, so a store that takes those takes the markers; object stores that keep tables in
table buckets refuse other keys, e.g. SeaweedFS's refuses anything but Avro and metadata JSON
under ``metadata/`` and names starting with ``.``; ``_`` keeps the markers hidden from orphan
removal, as Java's filter hides them). :meth:`Staging.finish`, after the job and the commit,
removes every announced file that is not kept, then the markers. A FileIO that cannot list
(not pyiceberg's PyArrowFileIO) gets no markers at all: they could never be found again.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.io import FileIO

from icemor import exceptions
from icemor.engines.spark.session_kind import parallelism
from icemor.engines.spark.worker import file_io, io_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from pyiceberg.io import InputFile, OutputFile
    from pyspark.sql import DataFrame

__all__ = ["Staging", "StagingIO", "data_path", "files_seen_twice", "write_changes"]

STAGING_DIR = "_icemor-staging"
# Iceberg Java's data-path properties, newest first (the last two are deprecated spellings)
_DATA_PATHS = ("write.data.path", "write.object-storage.path", "write.folder-storage.path")
_TASK_ERROR = re.compile(r"icemor\.exceptions\.(\w+): (.+)")


class StagingIO(FileIO):
    """A FileIO that announces each file under a staging prefix before creating it."""

    def __init__(self, io: FileIO, staging: str) -> None:
        super().__init__(io.properties)
        self.inner = io
        self.staging = staging

    def new_input(self, location: str) -> InputFile:
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        if self.staging:  # "" when the FileIO cannot list: no markers (Staging)
            marker = f"{self.staging}/{uuid.uuid4().hex}"
            try:
                with self.inner.new_output(marker).create(overwrite=True) as out:
                    out.write(location.encode())
            except OSError as e:  # the marker was refused, not the file it announces
                msg = f"cannot stage {location}: {exceptions.os_reason(e)} (writing its marker {marker})"
                raise exceptions.WriteFailedError(msg) from e
        return self.inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)


class Staging:
    """The staging prefix of one write: what its tasks announced, and its removal."""

    def __init__(self, io: FileIO, location: str, properties: Mapping[str, str] | None = None) -> None:
        self.io = io
        self.root = f"{data_path(location, properties or {})}/{STAGING_DIR}/{uuid.uuid4().hex}"
        """This write's staging directory."""
        self.prefix = self.root if _can_list(io) else ""
        """Where tasks announce their files: ``root``, or "" (no markers) when ``io`` cannot list."""

    def _listing(self) -> tuple[Any, list[str], str] | None:
        """The pyarrow filesystem, the markers' paths there, and the prefix URIs need; None when
        the FileIO cannot list (not pyiceberg's PyArrowFileIO)."""
        import pyarrow.fs as pafs
        from pyiceberg.io.pyarrow import PyArrowFileIO

        if not self.prefix or not isinstance(self.io, PyArrowFileIO):
            return None
        scheme, netloc, path = PyArrowFileIO.parse_location(self.prefix)
        fs = self.io.fs_by_scheme(scheme, netloc)
        found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        markers = [f.path for f in found if f.type == pafs.FileType.File]
        uri = "" if scheme == "file" else f"{scheme}://"
        return fs, markers, uri

    def finish(self, keep: Iterable[str] = ()) -> list[str]:
        """Remove every announced file not in ``keep``, then the staging prefix; best effort.

        Returns:
            The files that could not be removed.
        """
        listing = self._listing()
        if listing is None:
            return []
        fs, markers, _ = listing
        kept = set(keep)
        failed = []
        for marker in markers:
            try:
                with fs.open_input_stream(marker) as f:
                    path = f.read().decode()
            except OSError:
                continue
            if path in kept:
                continue
            try:
                self.io.delete(path)
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(path)
        from pyiceberg.io.pyarrow import PyArrowFileIO

        _, _, root = PyArrowFileIO.parse_location(self.prefix)
        with contextlib.suppress(OSError):
            fs.delete_dir(root)
        return failed


def data_path(location: str, properties: Mapping[str, str]) -> str:
    """Where the table writes its data files (Iceberg Java's ``LocationProviders``): the first of
    ``write.data.path`` and its deprecated spellings that is set, else ``<location>/data``."""
    for key in _DATA_PATHS:
        value = properties.get(key)
        if value:
            return value.rstrip("/")
    return f"{location.rstrip('/')}/data"


def _can_list(io: FileIO) -> bool:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return isinstance(io, PyArrowFileIO)


def write_changes(
    df: DataFrame,
    io: FileIO,
    location: str,
    fn: Callable[[FileIO, Iterable[pa.RecordBatch], Any, str], Any],
    item: Any,
    *,
    staging: Staging,
    row_columns: Iterable[str] = (),
    clustered: bool = False,
    file_sizes: Sequence[int] = (),
) -> list[Any]:
    """Run ``fn(io, batches, item, attempt)`` in one task per partition of ``df`` by ``_file``.

    Args:
        df: The changes, with ``_file`` and ``_pos`` columns.
        io: The table's FileIO (rebuilt on each executor from its properties).
        location: The table location (for the FileIO).
        fn: A module-level function of icemor (pickled by reference): the work of one task over
            its batches, sorted by ``_file, _pos``; ``attempt`` is unique to the task attempt.
        item: What every task needs, pickled once per task.
        staging: Where the tasks announce their files (every write goes through it).
        row_columns: The new row's columns: inserts (``_file`` null) are spread by their hash.
        clustered: ``df`` is a scan's filter and projection: its tasks are used as they are,
            each data file's rows together and in order (see the module); the caller checks.
        file_sizes: The sizes in bytes of the data files ``df`` reads (``clustered``).

    Returns:
        The results of the tasks that had rows (of the attempts Spark kept).

    Raises:
        IcemorError: A task raised one (the same type and message); Spark's error otherwise.
    """
    from pyspark.sql import functions as F

    spark = df.sparkSession
    n = parallelism(spark)
    spec = io_spec(io, location)
    prefix = staging.prefix
    if clustered:
        ordered = df
    else:
        values = [F.col(c) for c in row_columns if c in df.columns]
        key = F.hash(F.col("_file"))
        if values:
            key = F.when(F.col("_file").isNull(), F.hash(*values)).otherwise(key)
        ordered = df.repartition(n, key).sortWithinPartitions("_file", "_pos")

    def work(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        it = iter(batches)
        first = next((b for b in it if b.num_rows), None)
        if first is None:
            return
        context = TaskContext.get()
        attempt = f"{context.partitionId():05d}-{context.taskAttemptId()}" if context else uuid.uuid4().hex
        staged = StagingIO(file_io(*spec), prefix)
        result = fn(staged, _chain(first, it), item, attempt)
        yield pa.record_batch([pa.array([pickle.dumps(result)], pa.binary())], names=["result"])

    try:
        with _whole_files(spark, file_sizes if clustered else ()):
            collected = ordered.mapInArrow(work, "result binary").collect()
    except Exception as e:
        err = _task_error(e)
        if err is e:
            raise
        raise err from e
    return [pickle.loads(r["result"]) for r in collected]


# Spark's file-split settings (read when a query is planned; the same names on 3.5 and 4.x)
_MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
_OPEN_COST_BYTES = "spark.sql.files.openCostInBytes"
_MIN_PARTITIONS = "spark.sql.files.minPartitionNum"


@contextlib.contextmanager
def _whole_files(spark: Any, sizes: Sequence[int]) -> Iterator[None]:
    """Spark's split size raised to the largest of ``sizes`` while the block runs, if needed.

    Spark reads a file in pieces of ``min(maxPartitionBytes, max(openCostInBytes, bytes per
    core))``, bytes per core counting ``openCostInBytes`` more per file (``FilePartition``); a
    setting is raised only when that is below the largest file, and restored afterwards. Only
    a performance setting: correctness never depends on it (the caller checks, see the module).
    It is the session's setting: a query another thread runs meanwhile reads larger splits too.
    """
    conf = spark.conf
    changed: list[tuple[str, str | None]] = []
    largest = max(sizes, default=0)

    def setting(key: str, default: int) -> int:
        value = conf.get(key, None)
        return default if value is None else _bytes(value)

    def raise_to_largest(key: str) -> None:
        changed.append((key, conf.get(key, None)))
        conf.set(key, str(largest))

    if largest > 0:
        max_bytes = setting(_MAX_PARTITION_BYTES, 128 << 20)
        open_cost = setting(_OPEN_COST_BYTES, 4 << 20)
        cores = int(conf.get(_MIN_PARTITIONS, None) or parallelism(spark))
        per_core = (sum(sizes) + open_cost * len(sizes)) // max(1, cores)
        if max_bytes < largest:
            raise_to_largest(_MAX_PARTITION_BYTES)
        if max(open_cost, per_core) < largest:
            raise_to_largest(_OPEN_COST_BYTES)
    try:
        yield
    finally:
        for key, value in reversed(changed):
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)


def _bytes(value: str) -> int:
    """A Spark byte-size setting (``134217728``, ``128m``, ``4MB``) in bytes; 0 if unreadable."""
    text = value.strip().lower().removesuffix("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    try:
        return int(digits) * scale
    except ValueError:
        return 0


def files_seen_twice(seen: Iterable[str]) -> list[str]:
    """The data files that more than one unit of a clustered write handled (then it is redone)."""
    counts: dict[str, int] = {}
    for path in seen:
        counts[path] = counts.get(path, 0) + 1
    return sorted(p for p, n in counts.items() if n > 1)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _task_error(e: Exception) -> Exception:
    """icemor's error that failed a task, as raised on the driver; else Spark's own."""
    found = _TASK_ERROR.findall(str(e))
    if found:
        name, message = found[-1]
        cls = getattr(exceptions, name, None)
        if isinstance(cls, type) and issubclass(cls, exceptions.IcemorError):
            return cls(message.strip())
    return e
