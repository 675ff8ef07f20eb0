"""The Spark jobs' progress poller: what it reads from the status tracker and reports."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

from icemor.engines.spark.progress import JobStatus, SparkProgress, job_status
from spark_connect_fake import as_connect_session_class

if TYPE_CHECKING:
    import pytest
    from pyspark.sql import SparkSession


class _Tracker:
    """A ``StatusTracker`` as PySpark returns it: active job ids, job and stage infos."""

    def __init__(self) -> None:
        self.jobs: dict[int, list[int]] = {}
        self.stages: dict[int, tuple[int, int]] = {}  # stage id -> (tasks, completed)

    def getActiveJobsIds(self) -> list[int]:  # PySpark spells it so
        return list(self.jobs)

    def getJobInfo(self, job_id: int) -> SimpleNamespace | None:
        stages = self.jobs.get(job_id)
        return None if stages is None else SimpleNamespace(jobId=job_id, stageIds=stages, status="RUNNING")

    def getStageInfo(self, stage_id: int) -> SimpleNamespace | None:
        if stage_id not in self.stages:
            return None  # not submitted yet
        tasks, completed = self.stages[stage_id]
        return SimpleNamespace(stageId=stage_id, numTasks=tasks, numCompletedTasks=completed)


def test_job_status_sums_the_tasks_of_the_active_jobs_stages() -> None:
    tracker = _Tracker()
    assert job_status(tracker) is None
    tracker.jobs = {3: [5, 6, 7]}
    tracker.stages = {5: (8, 8), 6: (4, 1)}  # stage 7 not submitted yet
    assert job_status(tracker) == JobStatus("spark job 3", 9, 12)
    tracker.jobs = {3: [5, 6, 7], 4: [9]}
    tracker.stages[9] = (2, 0)
    assert job_status(tracker) == JobStatus("spark jobs 3-4", 9, 14)


def test_the_poller_reports_each_change_and_none_when_jobs_end() -> None:
    tracker = _Tracker()
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    seen: list[JobStatus | None] = []
    poller = SparkProgress(spark, seen.append, interval=0.01).start()  # type: ignore[arg-type]
    try:
        tracker.jobs, tracker.stages = {1: [1]}, {1: (4, 1)}
        _wait_for(lambda: JobStatus("spark job 1", 1, 4) in seen)
        tracker.stages = {1: (4, 4)}
        _wait_for(lambda: JobStatus("spark job 1", 4, 4) in seen)
        tracker.jobs = {}
        _wait_for(lambda: seen[-1] is None)
    finally:
        poller.stop()
    assert seen == [JobStatus("spark job 1", 1, 4), JobStatus("spark job 1", 4, 4), None]


def _wait_for(condition: object) -> None:
    deadline = time.monotonic() + 10
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_the_poller_follows_a_real_spark_job(spark: SparkSession) -> None:
    seen: list[JobStatus | None] = []
    poller = SparkProgress(spark, seen.append, interval=0.02).start()
    try:
        spark.range(0, 20_000_000, numPartitions=8).selectExpr("sum(id % 7)").collect()
        _wait_for(lambda: bool(seen) and seen[-1] is None)
    finally:
        poller.stop()
    jobs = [s for s in seen if s is not None]
    assert jobs, seen
    assert all(s.label.startswith("spark job") and 0 <= s.done <= s.total for s in jobs)
    assert max(s.total for s in jobs) >= 8  # the 8 tasks of the range's stage


class _ConnectSession:
    """A Spark Connect client session as the progress reporter uses it: progress handlers."""

    def __init__(self) -> None:
        self.handlers: list[object] = []

    def registerProgressHandler(self, handler: object) -> None:  # PySpark spells it so
        self.handlers.append(handler)

    def removeProgressHandler(self, handler: object) -> None:
        self.handlers.remove(handler)


def test_on_spark_connect_the_client_progress_handler_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    as_connect_session_class(monkeypatch, _ConnectSession)
    spark = _ConnectSession()
    seen: list[JobStatus | None] = []
    reporter = SparkProgress(spark, seen.append).start()  # type: ignore[arg-type]
    (handler,) = spark.handlers
    stage = SimpleNamespace
    # as PySpark's Connect client calls it: keyword arguments, the operation's stages so far
    handler(stages=[], inflight_tasks=0, operation_id="0a1b2c3d4e", done=False)  # no task known yet
    handler(
        stages=[stage(num_tasks=4, num_completed_tasks=1)],
        inflight_tasks=2,
        operation_id="0a1b2c3d4e",
        done=False,
    )
    handler(
        stages=[stage(num_tasks=4, num_completed_tasks=1)],
        inflight_tasks=2,
        operation_id="0a1b2c3d4e",
        done=False,
    )
    handler(
        stages=[stage(num_tasks=4, num_completed_tasks=4), stage(num_tasks=2, num_completed_tasks=0)],
        inflight_tasks=2,
        operation_id="0a1b2c3d4e",
        done=False,
    )
    handler(stages=[], inflight_tasks=0, operation_id="0a1b2c3d4e", done=True)
    reporter.stop()
    assert spark.handlers == []
    label = "spark operation 0a1b2c3d"
    assert seen == [JobStatus(label, 1, 4), JobStatus(label, 4, 6), None]
