"""Bootstrap: CloudWatch metrics of the serverless pipeline, as Powertools Metrics (embedded metric format).

The handlers of scan_gpu_waste, dedupe_findings and notify_slack hold a Powertools `Metrics` (namespace
`NAMESPACE`, flushed by `@metrics.log_metrics`) and call one of the functions below. Metrics with one dimension
set go on that object; per-group metrics (cluster × team × kind) are `single_metric` documents, one per group.
EMF needs no IAM grant: Lambda writes stdout to CloudWatch Logs, which extracts the metrics. Names, units and
dimensions are listed in docs/metrics.md ("CloudWatch"); the CloudWatch dashboard in template.yaml reads them.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, ParamSpec

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from gpuwaste.models.findings import WasteKind
from gpuwaste.models.messages import AlertAction
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.ports import FindingStore
from gpuwaste.services.lifecycle import Outcome
from gpuwaste.services.scan import ScanReport

logger = logging.getLogger(__name__)
P = ParamSpec("P")

#: The CloudWatch namespace of every gpuwaste metric.
NAMESPACE = "GpuWaste"
#: Every metric name emitted here (the CloudWatch dashboard in template.yaml reads them).
METRIC_NAMES = ("ScanDuration", "GpusSeen", "DataQualityProblems", "Findings", "Scans", "FindingsOpened",
                "FindingsResolved", "WasteUsdPerDay", "WastedGpus", "AlertsDelivered", "DeliveryFailures")


def best_effort(fn: Callable[P, None]) -> Callable[P, None]:
    """Metrics never fail the record: its work (findings sent, lifecycle written, alert posted) is already done, and
    a failed record would be redelivered and done again. A failure to emit is logged (its type) and skipped."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - observability must not undo or repeat the record's work
            logger.warning("metrics not emitted", extra={"metrics": fn.__name__, "error_type": type(exc).__name__})

    return wrapper


def _single(name: str, unit: MetricUnit, value: float, dimensions: dict[str, str]) -> None:
    """One EMF document with its own dimension set (written to stdout at once)."""
    with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE, default_dimensions=dimensions):
        pass


@best_effort
def record_scan(metrics: Metrics, report: ScanReport) -> None:
    """scan_gpu_waste: ScanDuration (s), GpusSeen, DataQualityProblems per cluster; Findings per cluster and kind."""
    dims = {"cluster": report.cluster}
    _single("ScanDuration", MetricUnit.Seconds, round(report.duration_s, 3), dims)
    _single("GpusSeen", MetricUnit.Count, report.inventory.physical_gpus, dims)
    quality = sum(1 for f in report.findings if f.kind is WasteKind.DATA_QUALITY)
    _single("DataQualityProblems", MetricUnit.Count, quality, dims)
    kinds: dict[str, int] = defaultdict(int)
    for f in report.findings:
        kinds[f.kind.value] += 1
    for kind, n in sorted(kinds.items()):
        _single("Findings", MetricUnit.Count, n, {**dims, "kind": kind})
    metrics.add_metric(name="Scans", unit=MetricUnit.Count, value=1)


@best_effort
def record_lifecycle(metrics: Metrics, outcomes: Iterable[Outcome]) -> None:
    """dedupe_findings: FindingsOpened / FindingsResolved (alerts decided NEW / RESOLVED in the batch)."""
    actions = [a.action for o in outcomes for a in o.alerts]
    metrics.add_metric(name="FindingsOpened", unit=MetricUnit.Count, value=actions.count(AlertAction.NEW))
    metrics.add_metric(name="FindingsResolved", unit=MetricUnit.Count, value=actions.count(AlertAction.RESOLVED))


@best_effort
def record_open_waste(cluster: str, store: FindingStore, settings: DeliverySettings) -> None:
    """dedupe_findings, on a scan's completion: the cluster's open waste (its open lifecycle records) as
    WasteUsdPerDay and WastedGpus per (cluster, team, kind), and WasteUsdPerDay per cluster (the rules of `/metrics`)."""
    from gpuwaste.services.metrics import waste_from_records

    usd: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    gpus: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    fingerprints = store.open_fingerprints(cluster)
    for k in range(0, len(fingerprints), 100):  # 100 records at a time: memory stays bounded with the fleet
        for s in waste_from_records(store.get_many(fingerprints[k:k + 100]).values(), settings):
            usd[(s.team, s.kind)] += s.usd_per_day
            gpus[(s.team, s.kind)] += s.wasted_gpus
    for team, kind in sorted(usd):
        dims = {"cluster": cluster, "team": team, "kind": kind}
        _single("WasteUsdPerDay", MetricUnit.NoUnit, float(usd[(team, kind)]), dims)
        _single("WastedGpus", MetricUnit.Count, float(gpus[(team, kind)]), dims)
    _single("WasteUsdPerDay", MetricUnit.NoUnit, float(sum(usd.values(), Decimal(0))), {"cluster": cluster})


@best_effort
def record_delivery(metrics: Metrics, *, records: int, response: dict[str, Any]) -> None:
    """notify_slack: AlertsDelivered and DeliveryFailures (records of the batch that failed: SQS redelivers them)."""
    failed = len(response.get("batchItemFailures", []))
    metrics.add_metric(name="AlertsDelivered", unit=MetricUnit.Count, value=records - failed)
    metrics.add_metric(name="DeliveryFailures", unit=MetricUnit.Count, value=failed)


__all__ = ["METRIC_NAMES", "NAMESPACE", "record_delivery", "record_lifecycle", "record_open_waste", "record_scan"]
