"""Progress of Spark jobs, from the SparkContext's status tracker (what Spark's own console
progress bar reads), reported while any job runs.

A daemon thread polls ``statusTracker()`` a few times a second and reports, over every active
job, the tasks done and the tasks of their stages; when no job runs it reports ``None`` (the
bar hides). The tracker is read through public PySpark API only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

__all__ = ["JobStatus", "SparkProgress", "job_status"]


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


class SparkProgress:
    """Polls ``spark``'s status tracker on a daemon thread and calls ``report`` with each change
    (None when no job runs any more). Start once; :meth:`stop` ends the thread."""

    def __init__(
        self, spark: SparkSession, report: Callable[[JobStatus | None], None], *, interval: float = 0.25
    ) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._report = report
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="icemor-spark-progress", daemon=True)

    def start(self) -> SparkProgress:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self._interval + 1)

    def _poll(self) -> None:
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
