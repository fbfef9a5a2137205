"""`gpuwaste doctor` against a real Prometheus: the attribution coverage row (issue 21 §12) — the share of GPUs
requested by running pods (kube-state-metrics) whose pod some DCGM series names."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.fleet.ksm_series import ksm_series
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics
from tests.fixtures.field_guide.builders import node, pod

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

END = datetime(2024, 1, 1, 1, 0, tzinfo=UTC)
TIMES = [int(END.timestamp() * 1000) - 30_000 * k for k in range(40)][::-1]


def _om(tmp_path: Path, *, exported: bool) -> Path:
    """Three running pods holding 1, 2 and 1 GPUs (KSM); DCGM names the first two (by `pod`, or by `exported_pod` when
    scraped with honorLabels: false), the third's node has no exporter: 3 of 4 requested GPUs attributable."""
    objs = [node("n1", gpus=4), node("n2", gpus=1),
            pod("ml", "a-0", "n1"), pod("ml", "b-0", "n1", gpus=2), pod("ml", "c-0", "n2")]
    series = ksm_series(objs, TIMES)
    for i, who in enumerate(("a-0", "b-0", "b-0")):
        lab = {"gpu": str(i), "UUID": f"GPU-{i}", "Hostname": "n1", "modelName": "NVIDIA A10G"}
        lab |= ({"exported_namespace": "ml", "exported_pod": who, "namespace": "gpu-operator", "pod": "dcgm-exporter-x"}
                if exported else {"namespace": "ml", "pod": who})
        series.append(RecordedSeries("DCGM_FI_DEV_GPU_UTIL", lab, list(TIMES), [50.0] * len(TIMES)))
    buf = io.StringIO()
    write_openmetrics(series, buf)
    path = tmp_path / "cov.om"
    path.write_text(buf.getvalue())
    return path


@pytest.mark.parametrize("exported", [False, True], ids=["pod", "exported_pod"])
def test_doctor_reports_attribution_coverage_of_requested_gpus(prometheus_factory: PrometheusFactory, tmp_path: Path,
                                                                exported: bool) -> None:
    # GIVEN a Prometheus with KSM (4 GPUs requested by running pods) and DCGM series naming the pods of 3 of them
    server = prometheus_factory(_om(tmp_path, exported=exported))
    # WHEN doctor runs at the data's end
    result = CliRunner().invoke(app, ["doctor", "-p", server.url, "--at", END.isoformat(), "-o", "json"])
    doc = json.loads(result.stdout)
    # THEN the coverage row says 75 % of 4 GPUs, a warning (not an exit code of its own), with the fix
    (row,) = [r for r in doc["checks"] if r["check"] == "attribution coverage"]
    assert row["status"] == "warn" and row["exit_code"] == 0
    assert row["detail"].startswith("75% of 4 GPUs requested by running pods have DCGM series naming their pod")
    assert "1 GPUs allocated without attributable telemetry" in row["detail"]
    assert "pod mapping" in row["fix"]
