"""Integration: the Grafana dashboard's DCGM panel query on a real Prometheus, for each way dcgm-exporter's series
reach it: `Hostname` (dcgm-exporter's own label), `hostname` (a relabelled scrape), `exported_pod`/`exported_namespace`
(no honorLabels), and one GPU scraped twice under both host spellings (during a relabelling change)."""

from __future__ import annotations

import importlib.util
import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

GENERATOR = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "generate.py"
T0 = 1_735_689_600  # 2025-01-01T00:00:00Z
#: (labels, ratio) of DCGM_FI_PROF_GR_ENGINE_ACTIVE series
SERIES = [
    ('Hostname="node-a", gpu="0", namespace="research", pod="eval-sweep-0"', 0.01),
    ('hostname="node-b", gpu="0", namespace="research", pod="eval-sweep-1"', 0.02),
    ('Hostname="node-c", gpu="1", exported_namespace="research", exported_pod="eval-sweep-2", namespace="gpu-operator"', 0.03),
    # the same GPU of eval-sweep-3 scraped twice, once per host spelling
    ('Hostname="node-d", gpu="0", namespace="research", pod="eval-sweep-3", job="dcgm"', 0.04),
    ('hostname="node-d", gpu="0", namespace="research", pod="eval-sweep-3", job="dcgm-relabelled"', 0.04),
    ('Hostname="node-e", gpu="0", namespace="vision", pod="eval-sweep-9"', 0.5),  # another namespace
]


def _dcgm_activity() -> Any:
    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (requirements-dev.txt) is not installed")
    spec = importlib.util.spec_from_file_location("gpuwaste_grafana_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dcgm_activity


def _query(url: str, expr: str, at: int) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr, "time": str(at)})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:  # noqa: S310 (loopback test server)
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_dcgm_panel_shows_each_gpu_once_with_its_host_whatever_the_label_style(prometheus_factory: PrometheusFactory,
                                                                               tmp_path: Path) -> None:
    # GIVEN a real Prometheus holding the series above for 10 minutes
    lines = ["# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"]
    lines += [f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels.replace(', ', ',')}}} {v} {T0 + 30 * i}"
              for labels, v in SERIES for i in range(21)]
    om = tmp_path / "dcgm.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    server = prometheus_factory(om)
    # WHEN the DCGM panel's query runs for research/eval-sweep
    result = _query(server.url, _dcgm_activity()("research", "eval-sweep"), T0 + 600)
    shown = sorted((r["metric"]["workload_pod"], r["metric"]["gpu"], r["metric"].get("gpu_host"), float(r["value"][1]))
                   for r in result)
    # THEN each GPU of the workload is one line with its host, from either spelling or an exported_* pod label, and the
    # GPU scraped under both spellings is one line, not two
    assert shown == [("eval-sweep-0", "0", "node-a", 0.01), ("eval-sweep-1", "0", "node-b", 0.02),
                     ("eval-sweep-2", "1", "node-c", 0.03), ("eval-sweep-3", "0", "node-d", 0.04)]
