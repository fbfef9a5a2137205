"""Thin inputs through a real Prometheus (issue 21 §9): GPUs that carry only DCGM fields outside the plan (an exporter
CSV of clocks and temperatures) are counted on the live path as the recording path counts them, and a fleet whose GPUs
all lack the activity fields is a `no_activity_fields` finding naming the GPUs and the fields — never "0 GPUs, $0"."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpuwaste.detectors import DetectorSettings, run_detectors
from gpuwaste.join import join
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.services.scan import inventory_of
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.fixtures.field_guide.builders import node, pod

if TYPE_CHECKING:
    from gpuwaste.models.telemetry import TelemetryWindow
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

END = datetime(2024, 1, 1, 1, 0, tzinfo=UTC)
WINDOW = timedelta(hours=1)
TIMES = [int(END.timestamp() * 1000) - 30_000 * k for k in range(120)][::-1]
ACTIVE = {"DCGM_FI_DEV_GPU_UTIL": 60.0, "DCGM_FI_DEV_FB_USED": 9000.0, "DCGM_FI_DEV_SM_CLOCK": 1410.0}
CLOCKS = {"DCGM_FI_DEV_SM_CLOCK": 210.0, "DCGM_FI_DEV_GPU_TEMP": 32.0}


def _recording(tmp_path: Path, gpus: dict[str, dict[str, float]]) -> Path:
    """A recording directory (OpenMetrics + cluster.json): one g6.xlarge node per GPU, each GPU held by a pod and
    exporting `gpus[uuid]`'s DCGM fields at 30 s for the hour."""
    objs, series = [], []
    for i, (uuid, fields) in enumerate(gpus.items()):
        host = f"ip-10-0-9-{i + 1}.ec2.internal"
        objs += [node(host, itype="g6.xlarge"), pod("ml", f"embed-{i}", host)]
        lab = {"gpu": "0", "UUID": uuid, "Hostname": host, "modelName": "NVIDIA L4", "namespace": "ml", "pod": f"embed-{i}",
               "container": "c0"}
        series += [RecordedSeries(name, lab, list(TIMES), [value] * len(TIMES)) for name, value in fields.items()]
    buf = io.StringIO()
    write_openmetrics(series, buf)
    (tmp_path / "telemetry.om").write_text(buf.getvalue())
    (tmp_path / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    (tmp_path / "recording.json").write_text(json.dumps({"cluster": "thin", "eval_time": END.isoformat(), "window_s": 3600,
                                                        "scrape_interval_s": 30, "format": "openmetrics"}))
    return tmp_path


def _both(tmp_path: Path, prometheus_factory: PrometheusFactory,
          gpus: dict[str, dict[str, float]]) -> tuple[TelemetryWindow, TelemetryWindow, Path]:
    rec_dir = _recording(tmp_path, gpus)
    server = prometheus_factory(rec_dir / "telemetry.om")
    live = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster="thin", scrape_interval_s=30)
    return (RecordingTelemetrySource(rec_dir).telemetry(at=END, window=WINDOW), live.telemetry(at=END, window=WINDOW),
            rec_dir)


def test_live_path_counts_a_gpu_that_exports_only_clocks_as_the_recording_does(tmp_path: Path,
                                                                              prometheus_factory: PrometheusFactory) -> None:
    # GIVEN one L4 exporting utilisation and one whose exporter CSV carries only clocks and temperatures
    rec, live, rec_dir = _both(tmp_path, prometheus_factory, {"GPU-aaaa": ACTIVE, "GPU-bbbb": CLOCKS})
    # WHEN each is read (recording file; the same data backfilled into Prometheus)
    # THEN both paths judge the active GPU and count the clocks-only one beside it
    assert [g.device.uuid for g in live.gpus] == [g.device.uuid for g in rec.gpus] == ["GPU-aaaa"]
    assert live.other_gpus == rec.other_gpus == ("GPU-bbbb",)
    cluster = RecordingClusterSource(rec_dir).cluster_state(at=END)
    settings = DetectorSettings()
    assert inventory_of(join(cluster, live, settings.common)).physical_gpus == 2
    assert inventory_of(join(cluster, rec, settings.common)).physical_gpus == 2


def test_live_scan_of_gpus_without_activity_fields_names_them_and_the_fields(tmp_path: Path,
                                                                            prometheus_factory: PrometheusFactory) -> None:
    # GIVEN two L4s whose exporters carry only clocks and temperatures, each held by a pod
    rec, live, rec_dir = _both(tmp_path, prometheus_factory, {"GPU-cccc": CLOCKS, "GPU-dddd": CLOCKS})
    cluster = RecordingClusterSource(rec_dir).cluster_state(at=END)
    settings = DetectorSettings()
    # WHEN the live window is judged by every detector
    ctx = join(cluster, live, settings.common)
    result = run_detectors(ctx, settings.by_name(), settings.enabled)
    # THEN one no_activity_fields finding counts both GPUs and names the fields that are there, as on the recording path
    found = [f for f in result.findings if f.details.get("check") == "no_activity_fields"]
    (dq,) = found
    assert dq.details["gpus"] == 2 and "2 GPU(s) in the telemetry" in dq.title
    assert set(dq.details["present_fields"].split(",")) == {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"}
    rec_ctx = join(cluster, rec, settings.common)
    (rec_dq,) = [f for f in run_detectors(rec_ctx, settings.by_name(), settings.enabled).findings
                 if f.details.get("check") == "no_activity_fields"]
    assert rec_dq.details == dq.details
    # AND nothing is called waste; the inventory says 2 GPUs, not 0
    assert [f for f in result.findings if f.kind.is_waste] == []
    assert inventory_of(ctx).physical_gpus == 2 and live.other_gpus == ("GPU-cccc", "GPU-dddd")
