"""``icemor.engines.spark.session``'s driver heap: a documented share of the machine.

No JVM here: the value :func:`session` gives Spark is computed, and given only when no
``spark.driver.memory`` is configured (the Spark 4 suite checks it on a started JVM:
``tests_spark4/test_session.py``).
"""

from __future__ import annotations

import pytest

from icemor.engines.spark import default_driver_memory

GIB = 2**30


@pytest.mark.parametrize(
    ("total", "heap"),
    [
        (2 * GIB, "1024m"),  # a quarter is 512 MiB: Spark's own 1 GiB floor
        (24 * GIB, "6144m"),  # a quarter
        (64 * GIB, "8192m"),  # a quarter is 16 GiB: capped at 8
        (0, "1024m"),  # unknown: the floor
    ],
)
def test_default_driver_memory_is_a_quarter_between_1_and_8_gib(total: int, heap: str) -> None:
    assert default_driver_memory(total) == heap


def test_default_driver_memory_reads_this_machine() -> None:
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_driver_memory() == f"{min(max(1024, total // 4 // 2**20), 8192)}m"
