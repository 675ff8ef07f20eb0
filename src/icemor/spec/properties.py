"""Table property names and defaults icemor honours, spelled exactly as Iceberg Java's TableProperties."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "COMMIT_MAX_RETRY_WAIT_MS",
    "COMMIT_MIN_RETRY_WAIT_MS",
    "COMMIT_NUM_RETRIES",
    "COMMIT_TOTAL_RETRY_TIME_MS",
    "DELETE_GRANULARITY",
    "DELETE_ISOLATION_LEVEL",
    "DELETE_MODE",
    "DELETE_TARGET_FILE_SIZE_BYTES",
    "METADATA_DELETE_AFTER_COMMIT_ENABLED",
    "METADATA_PREVIOUS_VERSIONS_MAX",
    "bool_property",
    "choice",
    "int_property",
]

DELETE_MODE = "write.delete.mode"
UPDATE_MODE = "write.update.mode"
MERGE_MODE = "write.merge.mode"
MERGE_ON_READ = "merge-on-read"
COPY_ON_WRITE = "copy-on-write"

DELETE_GRANULARITY = "write.delete.granularity"
# Iceberg core's default is "partition"; its Spark writer defaults to "file" since 1.8, as icemor does
DELETE_GRANULARITY_DEFAULT = "file"
DELETE_TARGET_FILE_SIZE_BYTES = "write.delete.target-file-size-bytes"
DELETE_TARGET_FILE_SIZE_BYTES_DEFAULT = 64 * 1024 * 1024
DELETE_ISOLATION_LEVEL = "write.delete.isolation-level"
UPDATE_ISOLATION_LEVEL = "write.update.isolation-level"
MERGE_ISOLATION_LEVEL = "write.merge.isolation-level"
ISOLATION_LEVEL_DEFAULT = "serializable"

COMMIT_NUM_RETRIES = "commit.retry.num-retries"
COMMIT_NUM_RETRIES_DEFAULT = 4
COMMIT_MIN_RETRY_WAIT_MS = "commit.retry.min-wait-ms"
COMMIT_MIN_RETRY_WAIT_MS_DEFAULT = 100
COMMIT_MAX_RETRY_WAIT_MS = "commit.retry.max-wait-ms"
COMMIT_MAX_RETRY_WAIT_MS_DEFAULT = 60_000
COMMIT_TOTAL_RETRY_TIME_MS = "commit.retry.total-timeout-ms"
COMMIT_TOTAL_RETRY_TIME_MS_DEFAULT = 1_800_000

# after a commit: check whether one that failed in an unknown state landed (Java's status checks)
COMMIT_NUM_STATUS_CHECKS = "commit.status-check.num-retries"
COMMIT_NUM_STATUS_CHECKS_DEFAULT = 3
COMMIT_STATUS_CHECKS_MIN_WAIT_MS = "commit.status-check.min-wait-ms"
COMMIT_STATUS_CHECKS_MIN_WAIT_MS_DEFAULT = 1000
COMMIT_STATUS_CHECKS_MAX_WAIT_MS = "commit.status-check.max-wait-ms"
COMMIT_STATUS_CHECKS_MAX_WAIT_MS_DEFAULT = 60_000

# metadata retention: after a commit, delete the metadata files that fell out of the metadata log
METADATA_DELETE_AFTER_COMMIT_ENABLED = "write.metadata.delete-after-commit.enabled"
METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT = False
METADATA_PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"  # the catalog trims the log
METADATA_PREVIOUS_VERSIONS_MAX_DEFAULT = 100

WRITE_TARGET_FILE_SIZE_BYTES = "write.target-file-size-bytes"
WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT = 512 * 1024 * 1024

PARQUET_ROW_GROUP_LIMIT = "write.parquet.row-group-limit"  # pyiceberg's, in rows
PARQUET_ROW_GROUP_LIMIT_DEFAULT = 1_048_576
PARQUET_ROW_GROUP_SIZE_BYTES = "write.parquet.row-group-size-bytes"  # Java's
PARQUET_ROW_GROUP_SIZE_BYTES_DEFAULT = 128 * 1024 * 1024

PARQUET_COMPRESSION = "write.parquet.compression-codec"
PARQUET_COMPRESSION_DEFAULT = "zstd"


def int_property(properties: Mapping[str, str], name: str, default: int) -> int:
    """An integer table property; a malformed value is a clear error, not a traceback."""
    raw = properties.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as e:
        msg = f"table property {name}={raw!r} is not an integer"
        raise InvalidArgumentError(msg) from e


def bool_property(properties: Mapping[str, str], name: str, default: bool) -> bool:
    """A boolean table property as Java's ``propertyAsBoolean`` reads it: true when it is ``true``
    (any case), false for any other value."""
    raw = properties.get(name)
    if raw is None:
        return default
    return raw.lower() == "true"


def choice(properties: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    """A table property with a fixed set of values (case-insensitive, as Java parses them)."""
    value = properties.get(name, default).strip().lower()
    if value not in allowed:
        msg = f"table property {name}={properties.get(name)!r} must be one of {', '.join(allowed)}"
        raise InvalidArgumentError(msg)
    return value
