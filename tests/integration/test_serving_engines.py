"""Integration: inference servers that export one series per engine (vLLM data parallel, the `engine` label).

The demo fleet with its bursty vLLM server (`inference/mistral-vllm-58f-abcde`, 2 GPUs) split into two data-parallel
engines: engine 0 carries the server's traffic, engine 1 ran no request all window. The pod serves (never "inference
idle"); the idle engine is an under-use finding worth half the pod's GPUs. Read through the recording (API-shaped
cluster.json), and through a real Prometheus with the cluster from kube-state-metrics or from the (fake) Kubernetes API,
with the same answer.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics
from gpuwaste.sources.ksm import PrometheusKsmSource
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

POD = "mistral-vllm-58f-abcde"
WINDOW = timedelta(hours=1)


def _split_engines(series: list[RecordedSeries], pod: str, *, serving: bool) -> list[RecordedSeries]:
    """Each vLLM series of `pod` as two engines: engine 0 with the recorded values (or idle ones when not `serving`),
    engine 1 idle (no running or waiting request, a flat token counter, a near-empty KV cache)."""
    out = []
    for s in series:
        if not (s.name.startswith("vllm:") and s.labels.get("pod") == pod):
            out.append(s)
            continue
        if s.name.endswith("_total"):
            idle = [s.values[0]] * len(s.values)
        elif "cache" in s.name:
            idle = [0.01] * len(s.values)
        else:
            idle = [0.0] * len(s.values)
        out.append(RecordedSeries(s.name, {**s.labels, "engine": "0"}, list(s.timestamps_ms), list(s.values) if serving else idle))
        out.append(RecordedSeries(s.name, {**s.labels, "engine": "1"}, list(s.timestamps_ms), list(idle)))
    assert sum(1 for s in out if s.labels.get("engine") == "1") >= 3
    return out


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo fleet with the vLLM pod as two engines, one serving (`split`) or both idle (`all-idle`)."""
    out = {}
    for name, serving in (("split", True), ("all-idle", False)):
        fleet = generate_fleet(FleetSpec())
        path = write_recording(fleet, tmp_path_factory.mktemp(name) / "rec", compress=False)
        with (path / "telemetry.om").open("w") as f:
            write_openmetrics(_split_engines(list(fleet.iter_series()), POD, serving=serving), f,
                              types={"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter"})
        out[name] = path
    return out


def _scan(cluster: Any, telemetry: Any, at: Any) -> ScanReport:
    return ScanService(cluster_source=cluster, telemetry_source=telemetry, window=WINDOW, price_book=PriceBook.bundled()).scan(at=at)


def _mine(report: ScanReport) -> list[tuple[str, str, Decimal, Decimal | None]]:
    return sorted((f.kind.value, f.scope_key, f.wasted_gpu_share, f.usd_per_day) for f in report.findings if f.subject.pod == POD)


def _api_source(path: Path, kube_api: Any, tmp_path: Path) -> Any:
    """The recording's cluster served by the fake kube-apiserver, read with `KubernetesClusterSource` (real HTTP, API JSON)."""
    import json

    from gpuwaste.models.settings import KubernetesSettings
    from gpuwaste.sources.kubernetes import KubernetesClusterSource
    from tests.integration.test_kubernetes_source import PLURALS
    from tests.servers.kube_api import write_kubeconfig

    by: dict[str, list[Any]] = {}
    for obj in json.loads((path / "cluster.json").read_text())["items"]:
        by.setdefault(PLURALS[obj["kind"]], []).append(obj)
    server = kube_api(by.pop("pods", []), by.pop("nodes", []), by)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    return KubernetesClusterSource.from_settings(KubernetesSettings(mode="kubeconfig", kubeconfig=str(kubeconfig), timeout_s=5), cluster="demo")


def test_a_data_parallel_server_with_one_idle_engine_serves_and_its_idle_engine_is_under_use(
        recordings: dict[str, Path], prometheus_factory: PrometheusFactory, kube_api: Any, tmp_path: Path) -> None:
    # GIVEN the vLLM pod as two engines, engine 0 serving, engine 1 idle, in a recording and in a real Prometheus
    path = recordings["split"]
    rec = RecordingTelemetrySource(path)
    at = rec.end_time()
    server = prometheus_factory(path / "telemetry.om")
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster=rec.cluster, scrape_interval_s=30)
    # WHEN scanned from the recording (API-shaped cluster.json) and live (Prometheus telemetry, kube-state-metrics)
    recorded = _scan(RecordingClusterSource(path / "cluster.json"), rec, at)
    live = _scan(PrometheusKsmSource(prom, cluster=rec.cluster, window=WINDOW, scrape_interval_s=60), prom, at)
    api = _scan(_api_source(path, kube_api, tmp_path), prom, at)
    # THEN the pod is not inference-idle: it is one under-use finding for its idle engine, half its 2 GPUs, priced
    (finding,) = [f for f in recorded.findings if f.subject.pod == POD]
    assert finding.kind is WasteKind.UNDERUSED and finding.scope_key == "idle-engines" and finding.detector == "inference_idle"
    assert finding.wasted_gpu_share == Decimal(1) and finding.details["idle_engines"] == "engine=1"
    assert finding.usd_per_day is not None and finding.usd_per_day > 0
    per_gpu_day = next(f for f in recorded.findings if f.subject.pod == POD).cost
    assert per_gpu_day is not None and finding.usd_per_day == (per_gpu_day.usd_per_gpu_hour * 24).quantize(finding.usd_per_day)
    # ... and the live read says the same, engine by engine
    assert _mine(live) == _mine(recorded) == _mine(api)
    tw = prom.telemetry(at=at, window=WINDOW)
    pod = next(p for p in tw.pods if p.pod == POD)
    assert set(pod.engines) == {"engine=0", "engine=1"} and pod.engines["engine=1"]["vllm:num_requests_running"].max == 0
    assert pod.engines["engine=0"]["vllm:num_requests_running"].max > 0 and pod.signals["vllm:num_requests_running"].series == 2


def test_a_data_parallel_server_whose_engines_are_all_idle_is_judged_as_one_idle_pod(recordings: dict[str, Path]) -> None:
    # GIVEN both engines of the vLLM pod idle all window
    path = recordings["all-idle"]
    rec = RecordingTelemetrySource(path)
    # WHEN scanned
    report = _scan(RecordingClusterSource(path / "cluster.json"), rec, rec.end_time())
    # THEN it is one finding for the whole pod (all its 2 GPUs), not one per engine, and no engine under-use on top
    mine = [f for f in report.findings if f.subject.pod == POD]
    assert len(mine) == 1 and mine[0].scope_key != "idle-engines"
    assert mine[0].kind in (WasteKind.INFERENCE_IDLE, WasteKind.IDLE) and mine[0].wasted_gpu_share == Decimal(2)
