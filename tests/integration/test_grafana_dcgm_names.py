"""Integration: the Grafana dashboard's DCGM panel in a real Prometheus when dcgm-exporter uses the DCGM 4.x field names.

DCGM 4.x renamed the fields (`DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO` for `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, `DCGM_FI_DEV_GPU_UTIL_RATIO`
for `DCGM_FI_DEV_GPU_UTIL`, ...; `models.telemetry.DCGM_ALIASES`): the panel reads every name, and a GPU exporting a field under
both names at once (a second counters CSV) is still one line per GPU, never an HTTP 422 "vector cannot contain metrics with
the same labelset".
"""

from __future__ import annotations

import importlib.util
import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_704_067_200  # 2024-01-01T00:00:00Z


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("grafana_generate", ROOT / "deploy" / "grafana" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _series(name: str, uuid: str, gpu: str, pod: str, value: float) -> RecordedSeries:
    ts = [(T0 + 30 * i) * 1000 for i in range(41)]
    labels = {"UUID": uuid, "gpu": gpu, "Hostname": "node-1", "exported_namespace": "ml", "exported_pod": pod,
              "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-abcde"}
    return RecordedSeries(name, labels, ts, [value] * len(ts))


def test_dcgm_panel_reads_dcgm4_names_and_a_field_exported_under_both_names(tmp_path: Path, prometheus_factory: PrometheusFactory) -> None:
    # GIVEN a job's two GPUs: GPU 0 exports GR engine activity under its 3.x and its 4.x name at once (0.02), GPU 1 only
    # the 4.x name (0.6); a second job's GPU exports GPU utilisation as DCGM_FI_DEV_GPU_UTIL_RATIO only (percent, 40)
    series = [
        _series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "GPU-0", "0", "eval-sweep-0", 0.02),
        _series("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "GPU-0", "0", "eval-sweep-0", 0.02),
        _series("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "GPU-1", "1", "eval-sweep-0", 0.6),
        _series("DCGM_FI_DEV_GPU_UTIL_RATIO", "GPU-2", "2", "trainer-0", 40.0),
    ]
    om = tmp_path / "dcgm4.om"
    with om.open("w") as f:
        write_openmetrics(series, f)
    url = prometheus_factory(om).url
    gen = _generator()
    # WHEN the panel's query runs as Grafana runs it (a range query) for each workload
    results = {}
    for workload in ("eval-sweep", "trainer"):
        params = urllib.parse.urlencode({"query": gen.dcgm_activity("ml", workload), "start": T0 + 600, "end": T0 + 1200, "step": 60})
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as resp:
            body = json.load(resp)
        assert body["status"] == "success"
        results[workload] = {r["metric"]["gpu"]: {float(v) for _, v in r["values"]} for r in body["data"]["result"]}
    # THEN each GPU is one line with its activity as a ratio: the doubly named GPU once, the 4.x-only GPU, and the
    # GPU_UTIL_RATIO percent divided by 100
    assert results["eval-sweep"] == {"0": {0.02}, "1": {0.6}}
    assert results["trainer"] == {"2": {0.4}}
