"""Service: one scan of one cluster — read cluster state and telemetry, detect, price, enqueue."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuwaste.detectors import DetectorSettings, NoVerdict, build_context, run_detectors
from gpuwaste.detectors.context import ScanContext
from gpuwaste.errors import ConfigError
from gpuwaste.models.findings import Finding
from gpuwaste.models.messages import FindingMessage, ScanCompleted
from gpuwaste.models.telemetry import ACTIVITY_SIGNALS
from gpuwaste.ports import ClusterStateSource, FindingQueue, GpuTelemetrySource
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.pricing.power import power_limits_w

logger = logging.getLogger(__name__)

#: The shortest window a scan accepts: every rule uses 10-minute averages, and stale/frozen checks need 20 samples.
MIN_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class Inventory:
    """What the scan saw, for an honest report.

    Attributes:
        physical_gpus: distinct DCGM UUIDs. mig_instances: devices with a GPU_I_ID.
        models: GPU model → physical GPUs. activity_signals: signal → devices using it.
        attribution: how allocations were tied to devices (labels / elimination / unknown).
    """

    nodes: int
    physical_gpus: int
    mig_instances: int
    pods_holding_gpus: int
    models: dict[str, int]
    activity_signals: dict[str, int]
    attribution: dict[str, int]
    metrics_present: tuple[str, ...]
    single_instant: bool


@dataclass
class ScanReport:
    """The result of one scan."""

    scan_id: str
    cluster: str
    eval_time: datetime
    window_s: int
    findings: list[Finding]
    no_verdict: list[NoVerdict]
    inventory: Inventory
    timings_s: dict[str, float] = field(default_factory=dict)
    query_count: int = 0
    telemetry_source: str = ""
    cluster_source: str = ""


def inventory_of(ctx: ScanContext) -> Inventory:
    """Summarise what a scan context holds."""
    gpus = [g for g in ctx.telemetry.gpus if not g.is_mig_parent]
    uuids = {g.device.uuid for g in ctx.telemetry.gpus}
    models: Counter[str] = Counter()
    seen: set[str] = set()
    for g in ctx.telemetry.gpus:
        if g.device.uuid not in seen:
            seen.add(g.device.uuid)
            models[g.model_name or "unknown"] += 1
    signals: Counter[str] = Counter()
    for g in gpus:
        sig = ctx.activity_signal(g)
        signals[sig.value if sig else "none"] += 1
    attribution = Counter(a.attribution.value for a in ctx.allocations)
    return Inventory(
        nodes=len(ctx.nodes),
        physical_gpus=len(uuids),
        mig_instances=sum(1 for g in gpus if g.device.gpu_i_id),
        pods_holding_gpus=len(ctx.allocations),
        models=dict(models),
        activity_signals=dict(signals),
        attribution=dict(attribution),
        metrics_present=tuple(sorted(ctx.telemetry.metrics_present)),
        single_instant=ctx.telemetry.single_instant,
    )


class ScanService:
    """Scan one cluster: cluster state + telemetry → joined context → detectors → (priced) findings.

    Args:
        price_book: when given, findings are priced in the scan (the local command); the pipeline
            prices in its own function instead.
        queue: when given, findings go on it as `FindingMessage`s, followed by a `ScanCompleted`.
    """

    def __init__(
        self,
        *,
        cluster_source: ClusterStateSource,
        telemetry_source: GpuTelemetrySource,
        settings: DetectorSettings | None = None,
        window: timedelta = timedelta(hours=1),
        price_book: PriceBook | None = None,
        queue: FindingQueue | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster_source = cluster_source
        self.telemetry_source = telemetry_source
        self.settings = settings or DetectorSettings()
        if window < MIN_WINDOW:
            raise ConfigError(
                f"scan window {int(window.total_seconds())} s is too short: the detectors use 10-minute averages "
                f"and need at least {int(MIN_WINDOW.total_seconds())} s (e.g. --window 10m or more)"
            )
        self.window = window
        self.price_book = price_book
        self.queue = queue
        self._progress = progress or (lambda _msg: None)

    def scan(self, *, at: datetime, scan_id: str | None = None) -> ScanReport:
        """Run one scan evaluated at `at` (the scheduled time).

        Raises:
            SourceUnavailableError, SourceAuthError, InputFormatError: from the sources.
            RetryableError: when the findings queue cannot take the findings.
        """
        scan_id = scan_id or uuid.uuid4().hex
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        self._progress("reading cluster state")
        cluster = self.cluster_source.cluster_state(at=at)
        t1 = time.perf_counter()
        timings["cluster_state"] = t1 - t0
        self._progress("reading telemetry")
        telemetry = self.telemetry_source.telemetry(at=at, window=self.window)
        t2 = time.perf_counter()
        timings["telemetry"] = t2 - t1
        self._progress("detecting")
        ctx = build_context(cluster, telemetry, self.settings.common,
                            power_limits_w=power_limits_w(g.model_name for g in telemetry.gpus))
        result = run_detectors(ctx, self.settings.by_name(), self.settings.enabled)
        findings = list(result.findings)
        t3 = time.perf_counter()
        timings["detect"] = t3 - t2
        if self.price_book is not None:
            findings = [price_finding(f, self.price_book) for f in findings]
        timings["price"] = time.perf_counter() - t3
        findings.sort(key=lambda f: (-(f.usd_per_day or 0), f.kind.value, f.subject.namespace or "", f.subject.pod or f.subject.node or ""))
        if self.queue is not None:
            t4 = time.perf_counter()
            # a scan judges nothing when GPUs exist but no telemetry came (or one sample): never a "miss" then
            gpus_exist = bool(cluster.nodes) or any(p.holds_gpus for p in cluster.pods)
            judged = not telemetry.single_instant and (bool(telemetry.gpus) or not gpus_exist)
            unjudged = tuple(sorted({nv.subject for nv in result.no_verdict}))
            self.send(scan_id, cluster.cluster, at, findings, judged=judged, unjudged=unjudged)
            timings["enqueue"] = time.perf_counter() - t4
        report = ScanReport(
            scan_id=scan_id,
            cluster=cluster.cluster,
            eval_time=at,
            window_s=telemetry.window_s,
            findings=findings,
            no_verdict=list(result.no_verdict),
            inventory=inventory_of(ctx),
            timings_s=timings,
            query_count=telemetry.query_count,
            telemetry_source=telemetry.source,
            cluster_source=cluster.source,
        )
        logger.info(
            "scan finished",
            extra={"cluster": cluster.cluster, "scan_id": scan_id, "findings": len(findings), "gpus": report.inventory.physical_gpus},
        )
        return report

    def send(self, scan_id: str, cluster: str, at: datetime, findings: Sequence[Finding], *, judged: bool = True,
             unjudged: tuple[str, ...] = ()) -> None:
        """Put the findings and the scan completion on the queue (with what the scan could not judge)."""
        assert self.queue is not None
        total = len(findings)
        self.queue.send_findings(
            [FindingMessage(scan_id=scan_id, scan_seq=i, scan_total=total, finding=f) for i, f in enumerate(findings)]
        )
        self.queue.send_scan_completed(
            ScanCompleted(scan_id=scan_id, cluster=cluster, scheduled_time=at, fingerprints=tuple(f.fingerprint for f in findings),
                          judged=judged, unjudged=unjudged)
        )


__all__ = ["ACTIVITY_SIGNALS", "Inventory", "ScanReport", "ScanService", "inventory_of"]
