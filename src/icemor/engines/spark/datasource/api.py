"""PySpark's Python Data Source API (4.2+) as the data source's modules use it, or placeholders.

On PySpark 3.5 (no Python data sources) the names are placeholder classes, so that the option
parsing and planning of this package still serve ``icemor.spark.read`` there;
:data:`HAS_DATA_SOURCES` says which. ``icemor.spark.register`` refuses 3.5 in one line.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "HAS_DATA_SOURCES",
    "DataSource",
    "DataSourceReader",
    "DataSourceStreamArrowWriter",
    "DataSourceStreamReader",
    "InputPartition",
    "ReadAllAvailable",
    "ReadMaxFiles",
    "SupportsTriggerAvailableNow",
    "WriterCommitMessage",
]

try:  # PySpark 4.2+: Python data sources with streaming admission control
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, SupportsTriggerAvailableNow

    HAS_DATA_SOURCES = True
except ImportError:  # PySpark 3.5: placeholders, so that the option parsing serves read()

    def _missing(name: str) -> Any:
        return type(name, (), {"__doc__": "PySpark 3.5 has no Python data sources"})

    DataSource = _missing("DataSource")
    DataSourceReader = _missing("DataSourceReader")
    DataSourceStreamReader = _missing("DataSourceStreamReader")
    DataSourceStreamArrowWriter = _missing("DataSourceStreamArrowWriter")
    InputPartition = _missing("InputPartition")
    WriterCommitMessage = _missing("WriterCommitMessage")
    SupportsTriggerAvailableNow = _missing("SupportsTriggerAvailableNow")
    ReadAllAvailable = ReadMaxFiles = _missing("ReadLimit")
    HAS_DATA_SOURCES = False
