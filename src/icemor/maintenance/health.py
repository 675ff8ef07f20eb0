"""The health report of a merge-on-read table (``icemor inspect``), computed from metadata.

Data files and their applicable delete files come from the scan planner (the same rules as a
read); deleted rows of position deletes and DVs come from the record count of a data file's one
DV or file-scoped position-delete file, else from the delete files themselves (decoded once,
cached, de-duplicated per data file). No data file is opened. Rows removed by equality
deletes need a scan of the data files they apply to: only ``exact=True`` does it, otherwise
they are ``None`` and the report says so. The score's weights and every figure's definition:
``docs/health.md``.
"""

from __future__ import annotations

import shlex
import statistics
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table.snapshots import ancestors_of

from icemor.engines.local import read_batches
from icemor.exceptions import InvalidArgumentError
from icemor.io.deletes import deleted_positions
from icemor.planning.manifest_reader import live_delete_files
from icemor.planning.planner import plan_files
from icemor.planning.scan_job import SnapshotSelection, prepare_scan, resolve_snapshot
from icemor.spec.describe import summary_int
from icemor.spec.files import FileContent
from icemor.spec.partitioning import partition_label

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from icemor.spec.files import DeleteFileRef
    from icemor.spec.tasks import PlannedFile

__all__ = [
    "SCHEMA_VERSION",
    "WEIGHTS",
    "DeleteKind",
    "Distribution",
    "HealthReport",
    "PartitionHealth",
    "Recommendation",
    "SnapshotPoint",
    "Thresholds",
    "inspect_table",
    "score",
]

SCHEMA_VERSION = 1
"""Of :meth:`HealthReport.to_json`; bumped when a field changes meaning or goes (adding one does not)."""

WEIGHTS: Mapping[str, float] = {
    "delete_ratio": 35.0,
    "equality_deletes": 25.0,
    "read_amplification": 15.0,
    "dangling_deletes": 15.0,
    "small_files": 10.0,
}
"""Points each problem can cost out of 100 (docs/health.md)."""

DELETE_RATIO_FULL_PENALTY = 0.2
"""A deleted fraction at which the ``delete_ratio`` weight is lost entirely (linear below)."""
AMPLIFICATION_FULL_PENALTY = 4.0
"""Extra delete files per data file (beyond one) at which ``read_amplification`` is lost entirely."""
EQUALITY_PROBE_COST = 0.9
"""Estimated extra read cost of probing a row against equality deletes, as a fraction of reading
it (a cold narrow read of the benchmark's eq10 took 1.86x its plain scan)."""

_KINDS = ("position", "dv", "equality_global", "equality_partition")


@dataclass(frozen=True)
class Thresholds:
    """The ``icemor.optimize.*`` table properties the report and the optimizer share (docs/health.md)."""

    target_file_size_bytes: int = 128 * 1024 * 1024
    """``icemor.optimize.target-size-bytes`` (Amoro ``self-optimizing.target-size``, 128 MiB)."""
    fragment_ratio: int = 8
    """``icemor.optimize.fragment-ratio``: a data file under target/ratio is a fragment (Amoro's, 8)."""
    minor_delete_file_count: int = 2
    """``icemor.optimize.minor.delete-file-count``: a data file with this many delete files (or any
    equality delete) triggers minor optimizing in its partition."""
    major_delete_ratio: float = 0.1
    """``icemor.optimize.major.delete-ratio`` (Amoro ``self-optimizing.major.trigger.duplicate-ratio``,
    0.1): a data file with this deleted fraction is rewritten."""
    major_fragment_count: int = 2
    """``icemor.optimize.major.fragment-count``: this many fragments in a partition are merged."""
    full_enabled: bool = False
    """``icemor.optimize.full.enabled`` (Amoro ``self-optimizing.full.trigger.interval`` -1): off."""
    expire_enabled: bool = False
    """``icemor.optimize.expire.enabled`` (Amoro ``table.expire.enabled``; off here)."""
    orphans_enabled: bool = False
    """``icemor.optimize.orphans.enabled`` (Amoro ``clean-orphan-file.enabled``, false)."""
    max_commits: int = 10
    """``icemor.optimize.partial-progress.max-commits``: each action commits its partition groups
    in at most this many commits (Java's ``partial-progress.max-commits``, 10)."""
    busy_major_score: float = 80.0
    """``icemor.optimize.busy.major-score``: ``optimize --watch`` on a table that writers committed
    to since its last round runs major optimizing only under this score (else minor only) ..."""
    busy_major_interval_seconds: float = 60.0
    """``icemor.optimize.busy.major-interval-seconds``: ... or when this long has passed since its
    last major commit (Amoro's minor/major trigger intervals, here for a busy table)."""

    @property
    def fragment_size_bytes(self) -> int:
        return self.target_file_size_bytes // max(1, self.fragment_ratio)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> Thresholds:
        """Read the ``icemor.optimize.*`` properties; a bad value is an error naming it."""
        default = cls()
        values: dict[str, Any] = {}
        for name, attr in (
            ("target-size-bytes", "target_file_size_bytes"),
            ("fragment-ratio", "fragment_ratio"),
            ("minor.delete-file-count", "minor_delete_file_count"),
            ("major.delete-ratio", "major_delete_ratio"),
            ("major.fragment-count", "major_fragment_count"),
            ("full.enabled", "full_enabled"),
            ("expire.enabled", "expire_enabled"),
            ("orphans.enabled", "orphans_enabled"),
            ("partial-progress.max-commits", "max_commits"),
            ("busy.major-score", "busy_major_score"),
            ("busy.major-interval-seconds", "busy_major_interval_seconds"),
        ):
            key = f"icemor.optimize.{name}"
            text = properties.get(key)
            if text is None:
                continue
            kind = type(getattr(default, attr))
            try:
                if kind is bool:
                    if text.strip().lower() not in ("true", "false"):
                        raise ValueError(text)
                    values[attr] = text.strip().lower() == "true"
                else:
                    values[attr] = kind(text.strip())
            except ValueError:
                msg = f"table property {key} must be a {kind.__name__}, got {text!r}"
                raise InvalidArgumentError(msg) from None
            if kind is not bool and values[attr] <= 0:
                msg = f"table property {key} must be positive, got {text!r}"
                raise InvalidArgumentError(msg)
        return cls(**values)


@dataclass(frozen=True)
class DeleteKind:
    """Delete files of one kind: how many, their bytes and records (positions or keys)."""

    files: int = 0
    bytes: int = 0
    records: int = 0


@dataclass(frozen=True)
class Distribution:
    """Min, median, mean and max of a per-data-file figure (all 0 when there are no data files)."""

    min: float = 0.0
    median: float = 0.0
    mean: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        if not values:
            return cls()
        return cls(
            float(min(values)),
            float(statistics.median(values)),
            float(statistics.fmean(values)),
            float(max(values)),
        )


@dataclass(frozen=True)
class PartitionHealth:
    """The health figures of one partition (or, in ``HealthReport.table``, of the whole table)."""

    partition: str
    """``field=value/...`` as in data paths; ``""`` for an unpartitioned spec (and the table)."""
    spec_id: int | None
    data_files: int
    data_rows: int
    data_bytes: int
    small_files: int
    """Data files under the fragment size (target / fragment ratio)."""
    delete_files: Mapping[str, DeleteKind]
    """By kind: ``position``, ``dv``, ``equality_global``, ``equality_partition``."""
    position_deleted_rows: int
    """Rows deleted by position deletes and DVs (exact: decoded, de-duplicated)."""
    equality_deleted_rows: int | None
    """Further rows deleted by equality deletes; None unless the report is exact (needs a scan)."""
    deleted_rows: int
    """Position-deleted rows plus the equality-deleted ones when known."""
    delete_ratio: float
    read_amplification: Distribution
    """Delete files that apply to each data file."""
    live_equality_keys: int
    """Records of the equality delete files that still apply to at least one data file."""
    equality_probed_rows: int
    """Rows of data files that at least one equality delete applies to (probed on every read)."""
    dangling_delete_files: int
    """Delete files that apply to no data file (own partition for partition-scoped files)."""
    dangling_delete_bytes: int
    scan_overhead: float
    """Estimated extra cost of a full read over a plain scan, as a fraction of it (docs/health.md)."""
    score: float
    penalties: Mapping[str, float]
    """Points lost, by :data:`WEIGHTS` key."""

    @property
    def live_rows(self) -> int:
        return self.data_rows - self.deleted_rows


@dataclass(frozen=True)
class Recommendation:
    """A maintenance action that would help, why, and the exact command to run it."""

    action: str
    reason: str
    command: str


@dataclass(frozen=True)
class SnapshotPoint:
    """One snapshot of the current ancestry, from its summary: for the history plot."""

    snapshot_id: int
    timestamp_ms: int
    operation: str
    total_records: int | None
    total_delete_files: int | None
    total_position_deletes: int | None
    total_equality_deletes: int | None

    @property
    def delete_ratio(self) -> float | None:
        """Position deletes over records (equality deletes are keys, not rows: not counted)."""
        if not self.total_records or self.total_position_deletes is None:
            return None
        return self.total_position_deletes / self.total_records


@dataclass(frozen=True)
class HealthReport:
    """What ``icemor inspect`` shows: the table's figures, each partition's, and what to do."""

    table_name: str
    snapshot_id: int | None
    format_version: int
    exact: bool
    table: PartitionHealth
    partitions: tuple[PartitionHealth, ...]
    recommendations: tuple[Recommendation, ...]
    history: tuple[SnapshotPoint, ...]
    deleted_fraction_histogram: tuple[int, ...]
    """Data files by deleted fraction, in ten bins [0, 0.1), ..., [0.9, 1.0]."""
    amplification_histogram: Mapping[int, int]
    """Data files by the number of delete files that apply to them."""
    notes: tuple[str, ...] = ()
    thresholds: Thresholds = field(default_factory=Thresholds)

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON document (schema ``schema_version`` 1, docs/health.md)."""

        def part(p: PartitionHealth) -> dict[str, Any]:
            out = asdict(p)
            out["live_rows"] = p.live_rows
            return out

        return {
            "schema_version": SCHEMA_VERSION,
            "table_name": self.table_name,
            "snapshot_id": self.snapshot_id,
            "format_version": self.format_version,
            "exact": self.exact,
            "score": self.table.score,
            "weights": dict(WEIGHTS),
            "table": part(self.table),
            "partitions": [part(p) for p in self.partitions],
            "recommendations": [asdict(r) for r in self.recommendations],
            "history": [{**asdict(h), "delete_ratio": h.delete_ratio} for h in self.history],
            "deleted_fraction_histogram": list(self.deleted_fraction_histogram),
            "amplification_histogram": {str(k): v for k, v in sorted(self.amplification_histogram.items())},
            "thresholds": asdict(self.thresholds),
            "notes": list(self.notes),
        }


@dataclass
class _FileFacts:
    """What the report needs of one planned data file."""

    key: tuple[int, tuple[Any, ...]]
    rows: int
    bytes: int
    delete_files: int
    has_equality: bool
    position_deleted: int
    equality_deleted: int | None = None


def score(
    *,
    data_files: int,
    data_rows: int,
    small_files: int,
    small_partitions: int,
    deleted_rows: int,
    equality_probed_rows: int,
    amplification_mean_over_deleted: float,
    dangling: int,
    delete_files: int,
) -> tuple[float, dict[str, float]]:
    """The health score (0-100) and the points lost per :data:`WEIGHTS` key (docs/health.md)."""
    ratio = deleted_rows / data_rows if data_rows else 0.0
    # a partition's only small file cannot be merged with anything: only the excess counts
    excess_small = max(0, small_files - small_partitions)
    penalties = {
        "delete_ratio": WEIGHTS["delete_ratio"] * min(1.0, ratio / DELETE_RATIO_FULL_PENALTY),
        "equality_deletes": WEIGHTS["equality_deletes"]
        * (equality_probed_rows / data_rows if data_rows else 0.0),
        "read_amplification": WEIGHTS["read_amplification"]
        * min(1.0, max(0.0, amplification_mean_over_deleted - 1.0) / AMPLIFICATION_FULL_PENALTY),
        "dangling_deletes": WEIGHTS["dangling_deletes"] * (dangling / delete_files if delete_files else 0.0),
        "small_files": WEIGHTS["small_files"] * (excess_small / data_files if data_files else 0.0),
    }
    penalties = {k: round(v, 2) for k, v in penalties.items()}
    return round(max(0.0, 100.0 - sum(penalties.values())), 1), penalties


def inspect_table(
    metadata: TableMetadata,
    io: FileIO,
    *,
    name: str,
    snapshot_id: int | None = None,
    exact: bool = False,
) -> HealthReport:
    """The health report of ``snapshot_id`` (default: the current snapshot).

    Raises:
        NoSuchSnapshotError: Unknown snapshot.
        InvalidArgumentError: A bad ``icemor.optimize.*`` property.
    """
    thresholds = Thresholds.from_properties(metadata.properties)
    snapshot, schema = resolve_snapshot(metadata, snapshot_id, None, None)
    planned = plan_files(metadata, io, snapshot, schema=schema) if snapshot is not None else []
    live_deletes = live_delete_files(io, snapshot) if snapshot is not None else []
    unpartitioned = {sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()}

    facts = [_facts(io, p) for p in planned]
    notes: list[str] = []
    if exact:
        _scan_equality_deleted(metadata, io, snapshot, planned, facts)
    elif any(f.has_equality for f in facts):
        notes.append(
            "rows deleted by equality deletes need a scan: not counted (run with --exact to count them)"
        )

    applied: dict[tuple[str, int | None], DeleteFileRef] = {}
    applied_by_key: dict[tuple[int, tuple[Any, ...]], dict[tuple[str, int | None], DeleteFileRef]] = {}
    for p, f in zip(planned, facts, strict=True):
        for d in p.delete_files:
            ident = (d.path, d.content_offset)
            applied[ident] = d
            applied_by_key.setdefault(f.key, {})[ident] = d

    def kind(d: DeleteFileRef) -> str:
        if d.content == FileContent.EQUALITY_DELETES:
            return "equality_global" if d.spec_id in unpartitioned else "equality_partition"
        return d.kind

    # every partition with data or delete files; a delete file counts in its own partition
    keys = {f.key for f in facts} | {(d.spec_id, tuple(d.partition)) for d in live_deletes}
    deletes_by_key: dict[tuple[int, tuple[Any, ...]], list[DeleteFileRef]] = {}
    for d in live_deletes:
        deletes_by_key.setdefault((d.spec_id, tuple(d.partition)), []).append(d)
    facts_by_key: dict[tuple[int, tuple[Any, ...]], list[_FileFacts]] = {}
    for f in facts:
        facts_by_key.setdefault(f.key, []).append(f)

    def summarize(
        label: str,
        spec_id: int | None,
        files: list[_FileFacts],
        deletes: list[DeleteFileRef],
        applying: Iterable[DeleteFileRef],
        small_partitions: int,
    ) -> PartitionHealth:
        by_kind = {k: DeleteKind() for k in _KINDS}
        for d in deletes:
            k = by_kind[kind(d)]
            size = d.content_size_in_bytes if d.is_deletion_vector and d.content_size_in_bytes else None
            by_kind[kind(d)] = DeleteKind(
                k.files + 1, k.bytes + (size or d.file_size_in_bytes), k.records + d.record_count
            )
        dangling = [d for d in deletes if (d.path, d.content_offset) not in applied]
        applying = list(applying)
        data_rows = sum(f.rows for f in files)
        data_bytes = sum(f.bytes for f in files)
        small = sum(f.bytes < thresholds.fragment_size_bytes for f in files)
        pos_deleted = sum(f.position_deleted for f in files)
        eq_known = all(f.equality_deleted is not None for f in files)
        eq_deleted = sum(f.equality_deleted or 0 for f in files) if eq_known else None
        deleted = pos_deleted + (eq_deleted or 0)
        probed = sum(f.rows for f in files if f.has_equality)
        amp = [f.delete_files for f in files]
        with_deletes = [a for a in amp if a]
        delete_bytes = sum(
            (
                d.content_size_in_bytes
                if d.is_deletion_vector and d.content_size_in_bytes
                else d.file_size_in_bytes
            )
            for d in applying
        )
        overhead = (delete_bytes / data_bytes if data_bytes else 0.0) + EQUALITY_PROBE_COST * (
            probed / data_rows if data_rows else 0.0
        )
        s, penalties = score(
            data_files=len(files),
            data_rows=data_rows,
            small_files=small,
            small_partitions=small_partitions if small else 0,
            deleted_rows=deleted,
            equality_probed_rows=probed,
            amplification_mean_over_deleted=statistics.fmean(with_deletes) if with_deletes else 0.0,
            dangling=len(dangling),
            delete_files=len(deletes),
        )
        return PartitionHealth(
            partition=label,
            spec_id=spec_id,
            data_files=len(files),
            data_rows=data_rows,
            data_bytes=data_bytes,
            small_files=small,
            delete_files=by_kind,
            position_deleted_rows=pos_deleted,
            equality_deleted_rows=eq_deleted,
            deleted_rows=deleted,
            delete_ratio=round(deleted / data_rows, 6) if data_rows else 0.0,
            read_amplification=Distribution.of(amp),
            live_equality_keys=sum(
                d.record_count for d in applying if d.content == FileContent.EQUALITY_DELETES
            ),
            equality_probed_rows=probed,
            dangling_delete_files=len(dangling),
            dangling_delete_bytes=sum(d.file_size_in_bytes for d in dangling),
            scan_overhead=round(overhead, 4),
            score=s,
            penalties=penalties,
        )

    partitions = []
    for key in sorted(keys, key=lambda k: (k[0], tuple(map(str, k[1])))):
        spec_id, values = key
        with_small = any(f.bytes < thresholds.fragment_size_bytes for f in facts_by_key.get(key, ()))
        partitions.append(
            summarize(
                _partition_label(metadata, spec_id, values),
                spec_id,
                facts_by_key.get(key, []),
                deletes_by_key.get(key, []),
                applied_by_key.get(key, {}).values(),
                int(with_small),
            )
        )
    small_partitions = sum(
        any(f.bytes < thresholds.fragment_size_bytes for f in fs) for fs in facts_by_key.values()
    )
    table = summarize("", None, facts, live_deletes, applied.values(), small_partitions)

    histogram = [0] * 10
    for f in facts:
        if f.rows:
            deleted = f.position_deleted + (f.equality_deleted or 0)
            histogram[min(9, int(10 * deleted / f.rows))] += 1
    amplification: dict[int, int] = {}
    for f in facts:
        amplification[f.delete_files] = amplification.get(f.delete_files, 0) + 1

    report_partitions = tuple(partitions)
    return HealthReport(
        table_name=name,
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        format_version=metadata.format_version,
        exact=exact,
        table=table,
        partitions=report_partitions,
        recommendations=recommend(name, table, report_partitions, thresholds),
        history=_history(metadata, snapshot),
        deleted_fraction_histogram=tuple(histogram),
        amplification_histogram=amplification,
        notes=tuple(notes),
        thresholds=thresholds,
    )


def recommend(
    name: str, table: PartitionHealth, partitions: Sequence[PartitionHealth], thresholds: Thresholds
) -> tuple[Recommendation, ...]:
    """The maintenance actions that would raise the score, in the order to run them."""
    quoted = shlex.quote(name)
    out: list[Recommendation] = []
    if table.live_equality_keys:
        out.append(
            Recommendation(
                "equality-to-position",
                f"{table.live_equality_keys} equality-delete keys are probed against "
                f"{table.equality_probed_rows} rows on every read",
                f"icemor compact {quoted} --equality-to-position",
            )
        )
    if table.dangling_delete_files or table.read_amplification.max > 1:
        why = []
        if table.dangling_delete_files:
            why.append(f"{table.dangling_delete_files} dangling delete files")
        if table.read_amplification.max > 1:
            why.append(f"up to {int(table.read_amplification.max)} delete files per data file")
        out.append(
            Recommendation(
                "compact-position-deletes", " and ".join(why), f"icemor compact {quoted} --position-deletes"
            )
        )
    heavy = [p for p in partitions if p.delete_ratio >= thresholds.major_delete_ratio]
    fragmented = [p for p in partitions if p.small_files >= thresholds.major_fragment_count]
    if heavy or fragmented:
        why = []
        if heavy:
            why.append(f"{len(heavy)} partitions with a deleted fraction >= {thresholds.major_delete_ratio}")
        if fragmented:
            why.append(f"{len(fragmented)} partitions with >= {thresholds.major_fragment_count} small files")
        out.append(
            Recommendation(
                "rewrite-data-files",
                " and ".join(why),
                f"icemor compact {quoted} --data-files "
                f"--delete-ratio-threshold {thresholds.major_delete_ratio}",
            )
        )
    if out:
        out.append(
            Recommendation("optimize", "all of the above, planned per partition", f"icemor optimize {quoted}")
        )
    return tuple(out)


def _facts(io: FileIO, p: PlannedFile) -> _FileFacts:
    d = p.data_file
    positional = [x for x in p.delete_files if x.content == FileContent.POSITION_DELETES]
    deleted = 0
    if len(positional) == 1 and positional[0].referenced_data_file == d.path:
        # one DV or file-scoped position-delete file: its record count is the count (writers do
        # not repeat a position), no decoding
        deleted = min(positional[0].record_count, d.record_count)
    elif positional:
        positions = deleted_positions(io, d.path, positional)
        deleted = int(np.count_nonzero(positions < d.record_count))
    return _FileFacts(
        key=(d.spec_id, tuple(d.partition)),
        rows=d.record_count,
        bytes=d.file_size_in_bytes,
        delete_files=len(p.delete_files),
        has_equality=any(x.content == FileContent.EQUALITY_DELETES for x in p.delete_files),
        position_deleted=deleted,
        equality_deleted=None
        if any(x.content == FileContent.EQUALITY_DELETES for x in p.delete_files)
        else 0,
    )


def _scan_equality_deleted(
    metadata: TableMetadata,
    io: FileIO,
    snapshot: Snapshot | None,
    planned: Sequence[PlannedFile],
    facts: list[_FileFacts],
) -> None:
    """Fill ``equality_deleted`` of the files equality deletes apply to, by reading them."""
    targets = {p.data_file.path: f for p, f in zip(planned, facts, strict=True) if f.has_equality}
    if not targets:
        return
    job = prepare_scan(
        metadata,
        io,
        selected_fields=("_file",),
        selection=SnapshotSelection(snapshot.snapshot_id if snapshot is not None else None),
        include_deleted=True,
    )
    # read only the files equality deletes apply to (the planned list is the job's own)
    job.planned[:] = [p for p in job.planned if p.data_file.path in targets]
    parts = [
        pa.table({"_file": b.column("_file"), "d": pc.cast(b.column("_deleted"), pa.int64())})
        .group_by("_file")
        .aggregate([("d", "sum")])
        for b in read_batches(job)
    ]
    totals: dict[str, int] = {}
    if parts:
        summed = pa.concat_tables(parts).group_by("_file").aggregate([("d_sum", "sum")])
        totals = dict(
            zip(summed.column("_file").to_pylist(), summed.column("d_sum_sum").to_pylist(), strict=True)
        )
    for path, f in targets.items():
        f.equality_deleted = int(totals.get(path, 0)) - f.position_deleted


def _partition_label(metadata: TableMetadata, spec_id: int, values: tuple[Any, ...]) -> str:
    spec = metadata.specs().get(spec_id)
    if spec is None or not spec.fields:
        return ""
    return partition_label(spec, metadata.schema(), values)


def _history(metadata: TableMetadata, snapshot: Snapshot | None) -> tuple[SnapshotPoint, ...]:
    """The ancestry of ``snapshot``, oldest first, with the summary's totals."""
    points = []
    for s in reversed(list(ancestors_of(snapshot, metadata))):
        summary = s.summary
        num = partial(summary_int, summary.additional_properties if summary is not None else {})
        points.append(
            SnapshotPoint(
                snapshot_id=s.snapshot_id,
                timestamp_ms=s.timestamp_ms,
                operation=str(summary.operation.value) if summary is not None else "",
                total_records=num("total-records"),
                total_delete_files=num("total-delete-files"),
                total_position_deletes=num("total-position-deletes"),
                total_equality_deletes=num("total-equality-deletes"),
            )
        )
    return tuple(points)
