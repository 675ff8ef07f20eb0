"""When to try a lost compare-and-swap again: ``commit.retry.*``, as Iceberg Java's ``Tasks`` retries."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

from icemor.spec import properties as P

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = ["attempts", "status_checks"]


def attempts(properties: Mapping[str, str]) -> Iterator[int]:
    """Attempt numbers 0, 1, …: before each retry, sleep with exponential backoff and jitter.

    Stops after ``commit.retry.num-retries`` retries or once ``commit.retry.total-timeout-ms``
    has passed.
    """
    retries = P.int_property(properties, P.COMMIT_NUM_RETRIES, P.COMMIT_NUM_RETRIES_DEFAULT)
    min_wait = P.int_property(properties, P.COMMIT_MIN_RETRY_WAIT_MS, P.COMMIT_MIN_RETRY_WAIT_MS_DEFAULT)
    max_wait = P.int_property(properties, P.COMMIT_MAX_RETRY_WAIT_MS, P.COMMIT_MAX_RETRY_WAIT_MS_DEFAULT)
    total = P.int_property(properties, P.COMMIT_TOTAL_RETRY_TIME_MS, P.COMMIT_TOTAL_RETRY_TIME_MS_DEFAULT)
    deadline = time.monotonic() + total / 1000
    for attempt in range(retries + 1):
        if attempt:
            delay = min(min_wait * 2 ** (attempt - 1), max_wait) / 1000
            time.sleep(delay * (1 + 0.1 * random.random()))
            if time.monotonic() > deadline:
                return
        yield attempt


def status_checks(properties: Mapping[str, str]) -> Iterator[int]:
    """Check numbers 0, 1, …: how often to look whether a commit in an unknown state landed, when
    looking fails (``commit.status-check.*``, as Java's ``checkCommitStatus``): backoff between."""
    retries = P.int_property(properties, P.COMMIT_NUM_STATUS_CHECKS, P.COMMIT_NUM_STATUS_CHECKS_DEFAULT)
    min_wait = P.int_property(
        properties, P.COMMIT_STATUS_CHECKS_MIN_WAIT_MS, P.COMMIT_STATUS_CHECKS_MIN_WAIT_MS_DEFAULT
    )
    max_wait = P.int_property(
        properties, P.COMMIT_STATUS_CHECKS_MAX_WAIT_MS, P.COMMIT_STATUS_CHECKS_MAX_WAIT_MS_DEFAULT
    )
    for check in range(retries + 1):
        if check:
            time.sleep(min(min_wait * 2 ** (check - 1), max_wait) / 1000)
        yield check
