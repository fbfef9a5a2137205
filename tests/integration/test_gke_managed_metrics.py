"""GPU telemetry without DCGM (issue 21 §8): GKE's system metric `kubernetes.io/container/accelerator/duty_cycle`, as
Google Cloud Managed Service for Prometheus names it (`kubernetes_io:container_accelerator_duty_cycle`, percent, keyed by
`namespace_name` / `pod_name`), is a lower-confidence activity signal: a pod idle by it is an idle finding of LOW
confidence that says so; a busy, stale or missing duty cycle is never idle. The recording path and a real Prometheus
(backfilled with promtool) agree."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpuwaste.detectors import DetectorSettings, run_detectors
from gpuwaste.join import join
from gpuwaste.models.findings import Confidence, WasteKind
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.fixtures.field_guide.builders import node, pod

if TYPE_CHECKING:
    from gpuwaste.models.findings import Finding
    from gpuwaste.models.telemetry import TelemetryWindow
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

END = datetime(2024, 1, 1, 1, 0, tzinfo=UTC)
WINDOW = timedelta(hours=1)
STEP_MS = 60_000  # GKE system metrics: one sample a minute
TIMES = [int(END.timestamp() * 1000) - STEP_MS * k for k in range(60)][::-1]
DUTY = "kubernetes_io:container_accelerator_duty_cycle"
#: pod → duty cycle (percent) each minute; None: no series
PODS: dict[str, tuple[float, int] | None] = {
    "idle-0": (0.0, 0),      # zero all hour
    "busy-0": (63.0, 0),     # working
    "stale-0": (0.0, 30),    # zero, but no sample in the last 30 minutes
    "dark-0": None,          # no managed metric at all
}


def _recording(tmp_path: Path) -> Path:
    objs, series = [], []
    for i, (name, shape) in enumerate(PODS.items()):
        host = f"gke-ml-l4-pool-{i}"
        objs += [node(host, itype="g2-standard-4", labels={"cloud.google.com/gke-accelerator": "nvidia-l4"}),
                 pod("ml", name, host, owner=("StatefulSet", name[:-2]))]
        if shape is None:
            continue
        value, gap_min = shape
        times = [t for t in TIMES if t <= int(END.timestamp() * 1000) - gap_min * 60_000]
        lab = {"project_id": "acme-ml", "location": "us-central1", "cluster_name": "ml", "namespace_name": "ml",
               "pod_name": name, "container_name": "c0", "accelerator_id": f"GPU-0000{i}", "make": "nvidia",
               "model": "NVIDIA L4", "monitored_resource": "k8s_container"}
        series.append(RecordedSeries(DUTY, lab, times, [value] * len(times)))
    buf = io.StringIO()
    write_openmetrics(series, buf)
    (tmp_path / "telemetry.om").write_text(buf.getvalue())
    (tmp_path / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    (tmp_path / "recording.json").write_text(json.dumps({"cluster": "gke", "eval_time": END.isoformat(), "window_s": 3600,
                                                        "scrape_interval_s": 60, "format": "openmetrics"}))
    return tmp_path


def _judge(rec_dir: Path, telemetry: TelemetryWindow) -> tuple[list[Finding], list[tuple[str, str]]]:
    settings = DetectorSettings()
    ctx = join(RecordingClusterSource(rec_dir).cluster_state(at=END), telemetry, settings.common)
    result = run_detectors(ctx, settings.by_name(), settings.enabled)
    book = PriceBook.bundled()
    return [price_finding(f, book) for f in result.findings], [(n.detector, n.subject) for n in result.no_verdict]


@pytest.mark.parametrize("path", ["recording", "prometheus"])
def test_gke_duty_cycle_is_a_low_confidence_idle_signal_never_idle_when_missing_or_stale(
        tmp_path: Path, prometheus_factory: PrometheusFactory, path: str) -> None:
    # GIVEN four GKE L4 pods without dcgm-exporter: duty cycle 0 %, 63 %, 0 % but stale for 30 min, and none at all
    rec_dir = _recording(tmp_path)
    if path == "recording":
        telemetry = RecordingTelemetrySource(rec_dir).telemetry(at=END, window=WINDOW)
    else:
        url = prometheus_factory(rec_dir / "telemetry.om").url
        telemetry = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster="gke",
                                                             scrape_interval_s=60).telemetry(at=END, window=WINDOW)
    # WHEN every detector judges the window
    findings, no_verdict = _judge(rec_dir, telemetry)
    # THEN only idle-0 is idle: one GPU for the hour, LOW confidence, saying its signal is GKE's and weaker than DCGM
    idle = [f for f in findings if f.kind is WasteKind.IDLE]
    assert [(f.detector, f.subject.pod, f.wasted_gpu_share) for f in idle] == [("managed_gpu_idle", "idle-0", Decimal(1))]
    (f,) = idle
    assert f.confidence is Confidence.LOW and "lower confidence" in f.title
    assert "lower confidence than DCGM" in str(f.details["activity_source"])
    assert f.evidence[0].signal == DUTY and f.evidence[0].unit == "percent" and f.evidence[0].max == 0.0
    rate = PriceBook.bundled().gpu_hour_rate(instance_type="g2-standard-4", capacity_type=None, gpu_model=None,
                                             physical_gpus=1, region=None, accelerator=None).usd_per_gpu_hour
    assert f.usd_per_day == (rate * 24).quantize(Decimal("0.01"))
    # AND the stale pod gets a no-verdict, never idle; the busy and the dark pods no idle finding
    assert ("managed_gpu_idle", "ml/stale-0") in no_verdict
    assert not [g for g in findings if g.subject.pod in ("busy-0", "stale-0", "dark-0") and g.kind.is_waste]
