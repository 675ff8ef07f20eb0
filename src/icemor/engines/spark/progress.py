"""Progress of Spark jobs, reported while any job runs.

Classic session: from the SparkContext's status tracker (what Spark's own console progress bar
reads): a daemon thread polls ``statusTracker()`` a few times a second and reports, over every
active job, the tasks done and the tasks of their stages; when no job runs it reports ``None``
(the bar hides). Spark Connect has no status tracker: the server streams each operation's
stages to the client, which hands them to its registered progress handlers
(``SparkSession.registerProgressHandler``, PySpark 4), so the report comes from there, per
operation of this client. Public PySpark API only, either way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icemor.engines.spark.session_kind import status_tracker

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from pyspark.sql import SparkSession

__all__ = ["JobStatus", "SparkProgress", "job_status", "operation_status"]


@dataclass(frozen=True, slots=True)
class JobStatus:
    """Tasks done and total over the active jobs, and a label naming them."""

    label: str
    done: int
    total: int


def job_status(tracker: Any) -> JobStatus | None:
    """The active jobs' progress from a ``StatusTracker`` (None: no job runs).

    Stages not yet submitted have no info yet: their tasks count once they start, as in Spark's
    console bar. Completed stages of an active job count as done.
    """
    jobs = sorted(tracker.getActiveJobsIds())
    if not jobs:
        return None
    done = total = 0
    for job_id in jobs:
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            total += stage.numTasks
            done += stage.numCompletedTasks
    label = f"spark job {jobs[0]}" if len(jobs) == 1 else f"spark jobs {jobs[0]}-{jobs[-1]}"
    return JobStatus(label, done, total)


def operation_status(stages: Iterable[Any], operation_id: str | None) -> JobStatus | None:
    """A Spark Connect operation's progress from the stages its progress handler is given (None:
    no task known yet)."""
    total = done = 0
    for stage in stages:
        total += stage.num_tasks
        done += stage.num_completed_tasks
    if total == 0:
        return None
    label = f"spark operation {operation_id[:8]}" if operation_id else "spark operation"
    return JobStatus(label, done, total)


class SparkProgress:
    """Calls ``report`` with each change of the running jobs' progress (None when no job runs any
    more): polled from ``spark``'s status tracker on a daemon thread, or on Spark Connect told by
    the client's progress handler. Start once; :meth:`stop` ends it."""

    def __init__(
        self, spark: SparkSession, report: Callable[[JobStatus | None], None], *, interval: float = 0.25
    ) -> None:
        self._spark = spark
        self._tracker = status_tracker(spark)
        self._report = report
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="icemor-spark-progress", daemon=True)
        self._last: JobStatus | None = None
        self._lock = threading.Lock()

    def start(self) -> SparkProgress:
        if self._tracker is not None:
            self._thread.start()
        elif hasattr(self._spark, "registerProgressHandler"):
            self._spark.registerProgressHandler(self._told)
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._tracker is None:
            if hasattr(self._spark, "removeProgressHandler"):
                self._spark.removeProgressHandler(self._told)
            self._told([], 0, None, done=True)
            return
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self._interval + 1)

    def _told(self, stages: Iterable[Any], inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        """A Connect progress handler: called with an operation's stages while it runs, and once
        with ``done`` when it ends."""
        status = None if done else operation_status(stages, operation_id)
        with self._lock:
            if status == self._last:
                return
            self._last = status
        self._report(status)

    def _poll(self) -> None:
        assert self._tracker is not None
        last: JobStatus | None = None
        while not self._stopped.wait(self._interval):
            try:
                status = job_status(self._tracker)
            except Exception:  # the context is stopping: nothing more to show
                status = None
            if status != last:
                self._report(status)
                last = status
        if last is not None:
            self._report(None)
