"""Models: attribution coverage as it travels from a scan to the lifecycle store and the daily summary (issue 21 §12).

A scan measures, per allocation kind (the allocation's mechanism: "device plugin", "MIG", "time-slicing", "DRA", "HAMi",
…; `join.readings.ScanContext.attribution_coverage`), the GPU-hours allocated in its window and the part of them with
attributable telemetry. The scan's completion carries those figures (`ScanCompleted.coverage`), the lifecycle adds them
to the store per cluster and UTC hour (`FindingStore.record_coverage`), and the summary sums the hours of its period
(`CoverageRow`): a GPU-hour-weighted coverage of every scan in the period.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from pydantic import Field

from gpuwaste.models.base import Frozen

#: Most allocation kinds one scan reports (the allocation resolvers name fewer than ten): bounds a stored item.
MAX_COVERAGE_KINDS = 32


class KindCoverage(Frozen):
    """One allocation kind's attribution coverage in one scan (or one shard of it).

    Attributes:
        kind: the allocation kind (mechanism name, at most 64 characters; never "all": totals are derived).
        allocated_gpu_hours: GPU-hours allocated in the scan's window (each holding's share × its span), ≥ 0.
        attributed_gpu_hours: of those, GPU-hours with attributable telemetry, ≥ 0.
    """

    kind: str = Field(min_length=1, max_length=64)
    allocated_gpu_hours: float = Field(ge=0)
    attributed_gpu_hours: float = Field(ge=0)


class CoverageTally(Frozen):
    """What the store holds for one cluster and UTC hour: the sums over the scans recorded in it.

    Attributes:
        cluster: the cluster. hour: the hour's start (UTC, minutes zero) of the scans' scheduled times.
        scans: scans recorded in the hour (a scan split over shards counts once). kinds: summed per allocation kind.
    """

    cluster: str
    hour: datetime
    scans: int = Field(ge=0)
    kinds: tuple[KindCoverage, ...] = ()


class CoverageRow(Frozen):
    """The summary's attribution coverage of one cluster and allocation kind over the period (kind "all": every kind).

    Attributes:
        ratio: attributed ÷ allocated GPU-hours (0–1), weighted over every scan of the period; None when nothing was
            allocated. scans: the scans recorded in the period's hours for the cluster.
    """

    cluster: str
    kind: str
    allocated_gpu_hours: float
    attributed_gpu_hours: float
    ratio: float | None
    scans: int


def coverage_hour(at: datetime) -> datetime:
    """The UTC hour `at` falls in (its start: minutes, seconds and microseconds zero)."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def sum_kinds(kinds: Iterable[KindCoverage]) -> tuple[KindCoverage, ...]:
    """Pure: the figures summed per allocation kind, kinds sorted (GPU-hours rounded to 1e-6)."""
    sums: dict[str, list[float]] = {}
    for k in kinds:
        got = sums.setdefault(k.kind, [0.0, 0.0])
        got[0] += k.allocated_gpu_hours
        got[1] += k.attributed_gpu_hours
    return tuple(KindCoverage(kind=kind, allocated_gpu_hours=round(a, 6), attributed_gpu_hours=round(t, 6))
                 for kind, (a, t) in sorted(sums.items()))


def coverage_rows(tallies: list[CoverageTally]) -> tuple[CoverageRow, ...]:
    """Pure: per cluster, one row per allocation kind and an "all" row, from the store's hourly tallies.

    Clusters and kinds sorted; "all" first in each cluster.
    """
    sums: dict[str, dict[str, list[float]]] = {}
    scans: dict[str, int] = {}
    for t in tallies:
        per = sums.setdefault(t.cluster, {})
        scans[t.cluster] = scans.get(t.cluster, 0) + t.scans
        for k in t.kinds:
            got = per.setdefault(k.kind, [0.0, 0.0])
            got[0] += k.allocated_gpu_hours
            got[1] += k.attributed_gpu_hours
    rows: list[CoverageRow] = []
    for cluster in sorted(sums):
        per = sums[cluster]
        total = [sum(v[0] for v in per.values()), sum(v[1] for v in per.values())]
        for kind, (allocated, attributed) in [("all", total), *sorted(per.items())]:
            ratio = round(min(1.0, attributed / allocated), 4) if allocated > 0 else None
            rows.append(CoverageRow(cluster=cluster, kind=kind, allocated_gpu_hours=round(allocated, 4),
                                    attributed_gpu_hours=round(attributed, 4), ratio=ratio, scans=scans[cluster]))
    return tuple(rows)


__all__ = [
    "MAX_COVERAGE_KINDS",
    "CoverageRow",
    "CoverageTally",
    "KindCoverage",
    "coverage_hour",
    "coverage_rows",
    "sum_kinds",
]
