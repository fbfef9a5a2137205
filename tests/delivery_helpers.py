"""Builders shared by the delivery tests (routing, Slack, Jira, summary, interactions): fixed data, no randomness."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuwaste.models.findings import Confidence, Cost, Evidence, Finding, Subject, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent


def finding(
    name: str = "trainer",
    *,
    namespace: str = "ml",
    cluster: str = "prod",
    usd_per_day: str | None = "98.30",
    kind: WasteKind = WasteKind.IDLE,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    ns_annotations: dict[str, str] | None = None,
    ns_labels: dict[str, str] | None = None,
    title: str | None = None,
) -> Finding:
    """An idle-GPU finding priced at `usd_per_day` (None: unpriced)."""
    cost = None
    if usd_per_day is not None:
        cost = Cost(priced=True, usd_per_gpu_hour=Decimal("4.0958"), wasted_gpu_share=Decimal(1),
                    usd_per_day=Decimal(usd_per_day), formula=f"$4.0958/GPU-h × 1 GPU × 24 h = ${usd_per_day}/day",
                    source="test price book", effective_date="2026-07-20")
    return Finding(
        kind=kind,
        detector=kind.value,
        subject=Subject(cluster=cluster, namespace=namespace, workload_kind="Deployment", workload_name=name,
                        pod=f"{name}-abc12", node="ip-10-0-0-1", gpu_model="NVIDIA A100-SXM4-40GB",
                        gpu_share=Decimal(1), instance_type="p4d.24xlarge", capacity_type="on-demand",
                        labels=labels or {}, annotations=annotations or {},
                        namespace_labels=ns_labels or {}, namespace_annotations=ns_annotations or {}),
        title=title or f"1 GPU held by {namespace}/{name} idle for 60 min",
        recommendation="Scale the deployment to zero when it serves no traffic.",
        evidence=(Evidence(signal="DCGM_FI_PROF_SM_ACTIVE", unit="ratio", window_s=3600, avg=0.002, p95=0.005,
                           max=0.008, samples=120, coverage=1.0, threshold=0.05, comparison="p95 < 0.05"),),
        confidence=Confidence.HIGH,
        observed_at=NOW,
        window_s=3600,
        wasted_gpu_share=Decimal(1),
        cost=cost,
    )


def alert(f: Finding, action: AlertAction = AlertAction.NEW, *, scan_id: str = "scan-1", **extra: Any) -> AlertMessage:
    """An alert for finding `f`."""
    return AlertMessage(action=action, fingerprint=f.fingerprint, finding=f, first_seen=NOW - timedelta(hours=5),
                        cumulative_usd="20.48", scan_id=scan_id, **extra)


def record_for(f: Finding, **extra: Any) -> FindingRecord:
    """An open lifecycle record for `f` (as the lifecycle writes it before alerting)."""
    fields: dict[str, Any] = {
        "fingerprint": f.fingerprint, "cluster": f.subject.cluster, "namespace": f.subject.namespace,
        "workload": f.subject.workload_name, "kind": f.kind.value, "detector": f.detector,
        "first_seen": NOW - timedelta(hours=5), "last_seen": NOW, "usd_per_day": f.usd_per_day,
        "cumulative_usd": Decimal("20.48"), "finding_json": f.model_dump_json(), "state": FindingState.OPEN,
    }
    fields.update(extra)
    return FindingRecord(**fields)


@dataclass
class LambdaContext:
    """The attributes Powertools' Logger reads from a Lambda context."""

    function_name: str = "test-function"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test-function"
    aws_request_id: str = "00000000-0000-4000-8000-000000000000"


def load_app(function: str) -> ModuleType:
    """Import `functions/<function>/app.py` as a fresh module."""
    path = ROOT / "functions" / function / "app.py"
    spec = importlib.util.spec_from_file_location(f"app_{function}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
