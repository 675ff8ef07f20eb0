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
under ``metadata/`` and names starting with ``.``; ``_`` keeps the markers hidden from Java's
orphan removal, whose filter skips such names). :meth:`Staging.finish`, after the job and the commit,
removes every announced file that is not kept (and the key-index sidecars beside those), then
the markers. A FileIO that cannot list (not pyiceberg's PyArrowFileIO) gets no markers at all:
they could never be found again. Markers a killed driver never removed are removed by orphan
removal once older than its cut-off (:mod:`icemor.maintenance.orphans`).

When the job fails, nothing it wrote stays: a task that fails removes the files it wrote itself
(:meth:`StagingIO.remove_written`), and the driver waits until no task of the job still runs
(:func:`settle`) before it removes every announced file (``Staging.finish(())``). A task whose
input Spark cut short (a UDF or the scan before it failed) fails before writing what it got as
if it were all (:func:`whole_input`).
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyspark import TaskContext
from pyspark.sql import functions as F

from icemor import exceptions
from icemor.engines.spark._compat import worker_input_stream
from icemor.engines.spark.session_kind import is_connect, parallelism
from icemor.engines.spark.worker import RESULT_SCHEMA, file_io, io_spec, result_batch, results
from icemor.io.key_index import data_path_of
from icemor.spec.identifiers import DATA_PATH_PROPERTIES, STAGING_DIR

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from pyiceberg.io import InputFile, OutputFile
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "KILL_GRACE_SECONDS",
    "CutInputError",
    "Staging",
    "StagingIO",
    "data_path",
    "files_seen_twice",
    "job_group",
    "settle",
    "staged_io",
    "whole_input",
    "write_changes",
]

_TASK_ERROR = re.compile(r"icemor\.exceptions\.(\w+): (.+)")


class StagingIO(FileIO):
    """A FileIO that announces each file under a staging prefix before creating it."""

    def __init__(self, io: FileIO, staging: str) -> None:
        super().__init__(io.properties)
        self.inner = io
        self.staging = staging
        self.written: list[str] = []
        """Every location this task opened for writing, in order."""

    def new_input(self, location: str) -> InputFile:
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        self.written.append(location)
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

    def remove_written(self) -> None:
        """Remove every file this task opened for writing (a task that failed), best effort.

        The markers stay: the driver's :meth:`Staging.finish` still finds the files through
        them (and their key-index sidecars, which are written beside them without this FileIO).
        """
        for location in reversed(self.written):
            with contextlib.suppress(OSError):
                self.inner.delete(location)

    @contextlib.contextmanager
    def removed_on_failure(self) -> Iterator[None]:
        """Around a task's work: if it raises, :meth:`remove_written` before the error goes on."""
        try:
            yield
        except BaseException:
            self.remove_written()
            raise


def staged_io(io: FileIO, staging: str) -> tuple[FileIO, StagingIO]:
    """``io`` for a task that writes through ``staging``, and the :class:`StagingIO` that records
    (and announces) what it writes.

    pyarrow's FileIO itself gets a shallow copy (sharing its filesystems) whose ``new_output``
    is the recorder's: code that takes pyarrow's own FileIO for the local disk (direct local
    reads; a key-index sidecar's careful local write, :mod:`icemor.io.key_index`) still does.
    Any other FileIO is the recorder itself.
    """
    recorder = StagingIO(io, staging)
    if type(io) is not PyArrowFileIO:
        return recorder, recorder
    twin = copy.copy(io)  # pickling's state: a filesystem cache of its own, so share io's
    vars(twin)["fs_by_scheme"] = io.fs_by_scheme
    vars(twin)["new_output"] = recorder.new_output
    return twin, recorder


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
        announced = []
        for marker in markers:
            try:
                with fs.open_input_stream(marker) as f:
                    announced.append(f.read().decode())
            except (OSError, UnicodeDecodeError):  # not a marker (torn, or not ours)
                continue
        removed = {p for p in announced if p not in kept}
        # a sidecar (of a data file this write did not make) is a cache that stays valid
        doomed = [p for p in removed if data_path_of(p) is None or data_path_of(p) in removed]
        doomed += sorted(_sidecars_beside(self.io, removed) - set(doomed))
        failed = []
        for path in doomed:
            try:
                self.io.delete(path)
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(path)

        _, _, root = PyArrowFileIO.parse_location(self.prefix)
        with contextlib.suppress(OSError):
            fs.delete_dir(root)
        return failed


def _sidecars_beside(io: FileIO, paths: Iterable[str]) -> set[str]:
    """The key-index sidecars of ``paths`` on disk (one listing per directory; best effort).

    A local sidecar is written beside its data file without the FileIO (a temporary file
    renamed, :mod:`icemor.io.key_index`), so no marker announces it: it is found by its name.
    """
    by_directory: dict[str, set[str]] = {}
    for p in paths:
        if data_path_of(p) is None:
            by_directory.setdefault(p.rpartition("/")[0], set()).add(p)
    if not isinstance(io, PyArrowFileIO):
        return set()
    found = set()
    for directory, owners in by_directory.items():
        scheme, netloc, where = PyArrowFileIO.parse_location(directory)
        try:
            infos = io.fs_by_scheme(scheme, netloc).get_file_info(
                pafs.FileSelector(where, allow_not_found=True)
            )
        except OSError:
            continue
        for info in infos:
            name = info.path.rpartition("/")[2]
            candidate = f"{directory}/{name}"
            if name.startswith(".") and data_path_of(candidate) in owners:
                found.add(candidate)
    return found


def data_path(location: str, properties: Mapping[str, str]) -> str:
    """Where the table writes its data files (Iceberg Java's ``LocationProviders``): the first of
    ``write.data.path`` and its deprecated spellings that is set, else ``<location>/data``."""
    for key in DATA_PATH_PROPERTIES:
        value = properties.get(key)
        if value:
            return value.rstrip("/")
    return f"{location.rstrip('/')}/data"


def _can_list(io: FileIO) -> bool:
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
        it = iter(whole_input(batches))
        first = next((b for b in it if b.num_rows), None)
        if first is None:
            return
        context = TaskContext.get()
        attempt = f"{context.partitionId():05d}-{context.taskAttemptId()}" if context else uuid.uuid4().hex
        staged = StagingIO(file_io(*spec), prefix)
        with staged.removed_on_failure():
            result = fn(staged, _chain(first, it), item, attempt)
        yield result_batch(result)

    group = f"icemor-changes-{uuid.uuid4().hex}"
    try:
        with _whole_files(spark, file_sizes if clustered else ()), job_group(spark, group) as group:
            collected = ordered.mapInArrow(work, RESULT_SCHEMA).collect()
    except Exception as e:
        settle(spark, group, failed=True)  # the caller's Staging.finish must see every file
        err = _task_error(e)
        if err is e:
            raise
        raise err from e
    settle(spark, group, failed=False)  # a speculative copy still running may write more
    return results(collected)


class CutInputError(EOFError):
    """A task's input ended without Spark's end of stream: Spark cut it short (:func:`whole_input`)."""


def whole_input(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's Arrow batches from Spark; at their end, :class:`CutInputError` if Spark cut them.

    When what feeds a Python task fails in the JVM (a UDF, the scan, a shuffle fetch), Spark
    stops sending and shuts its end of the socket. pyarrow's stream reader takes an end of data
    at a message boundary for the end of the stream, and PySpark 4 sends whole batches (3.5
    mostly stops inside one, which pyarrow refuses): the task saw part of its input as all of
    it, and wrote that part as complete before Spark failed it. Spark ends a whole input with
    its END_OF_STREAM mark after the Arrow stream; a cut one with nothing. So once the batches
    are exhausted the worker's input is peeked (nothing consumed): no byte left means the input
    was cut, and the task fails before writing anything more (Spark's error, the upstream one,
    is what the driver reports).

    The worker's input is found as PySpark 3.5 and 4.x hand it to a ``mapInArrow`` function
    (also a data source's writer): ``map(<flatten>, <serializer>.load_stream(stream))``. Where
    it is not found (another layout, batches not from Spark) the batches pass unchecked.
    """
    stream = worker_input_stream(batches)
    yield from batches
    if stream is None:
        return
    try:
        more = stream.peek(1)
    except (OSError, ValueError):  # a closed socket: cut too
        more = b""
    if not more:
        msg = "the task's input ended before Spark's end of stream (what fed the task failed)"
        raise CutInputError(msg)


@contextlib.contextmanager
def job_group(spark: SparkSession, tag: str) -> Iterator[str]:
    """The block's jobs in a job group that :func:`settle` can watch; yields its name.

    Classic: the caller's own job group when one is set (its jobs stay in it: what it cancels
    or monitors), else job group ``tag``, unset after. Connect: tagged ``tag``.
    """
    if is_connect(spark):
        spark.addTag(tag)  # type: ignore[attr-defined,unused-ignore]
        try:
            yield tag
        finally:
            spark.removeTag(tag)  # type: ignore[attr-defined,unused-ignore]
        return
    sc = spark.sparkContext
    own = sc.getLocalProperty("spark.jobGroup.id")
    if own:
        yield own
        return
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    before = {k: sc.getLocalProperty(k) for k in keys}
    sc.setJobGroup(tag, "icemor: write files", interruptOnCancel=True)
    try:
        yield tag
    finally:
        for k, v in before.items():
            sc.setLocalProperty(k, v)  # type: ignore[arg-type]  # None unsets it


# How long a Python worker may outlive its cancelled task (Spark's spark.python.task.killTimeout)
KILL_GRACE_SECONDS = 2.5
_SETTLE_TIMEOUT_SECONDS = 120.0


def settle(spark: SparkSession, tag: str, *, failed: bool) -> None:
    """Wait until no task of job group ``tag`` (:func:`job_group`'s) still runs, so that a staging
    listing that follows sees every file any attempt made.

    Spark fails a job when its first task fails, and cancels the others (and a speculative copy
    of a finished task) only after; a Python worker may go on writing up to
    ``spark.python.task.killTimeout`` after its task ended (PySpark 4 ends a task whose input
    failed before its worker has written). Classic sessions ask the status tracker; a Connect
    client cannot, and waits out the kill timeout after a failure.
    """
    waited = False
    if not is_connect(spark):
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + _SETTLE_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            active = 0
            for job_id in tracker.getJobIdsForGroup(tag):
                info = tracker.getJobInfo(job_id)
                for stage_id in info.stageIds if info is not None else ():
                    stage = tracker.getStageInfo(stage_id)
                    active += stage.numActiveTasks if stage is not None else 0
            if not active:
                break
            waited = True
            time.sleep(0.1)
    if failed or waited:
        time.sleep(KILL_GRACE_SECONDS)


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
