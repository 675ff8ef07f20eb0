"""``icemor.spark.session()``: the active SparkSession, or a new one set up for icemor.

A thin, lazy front for :mod:`icemor.engines.spark`; importing this module does not import
pyspark, calling :func:`session` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

__all__ = ["session"]


def session(
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "icemor",
    quiet: bool = True,
) -> SparkSession:
    """Return the active SparkSession, or build one (master ``local[*]`` or ``$ICEMOR_SPARK_MASTER``).

    ``quiet`` (default) logs errors only; False keeps Spark's WARN lines.
    """
    from icemor.engines.spark import session as _session

    return _session(master=master, conf=conf, app_name=app_name, quiet=quiet)
