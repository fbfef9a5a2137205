"""`gpuwaste doctor` against a real Prometheus: fresh signals exit 0, stale series are not called missing, and an
activity signal never exported exits 1 (the documented codes)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory


pytestmark = pytest.mark.integration

DEMO = local.demo_recording()

END = "2024-01-01T01:20:00Z"


@pytest.fixture(scope="module")
def demo_om(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo telemetry as a plain OpenMetrics file (what the Prometheus fixture backfills)."""
    path = tmp_path_factory.mktemp("surfaces") / "demo.om"
    path.write_bytes(gzip.decompress((DEMO / "telemetry.om.gz").read_bytes()))
    return path


@pytest.fixture(scope="module")
def fb_only_om(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Prometheus where dcgm-exporter exports only framebuffer use: no activity signal at all."""
    path = tmp_path_factory.mktemp("surfaces") / "fb.om"
    lines = ["# TYPE DCGM_FI_DEV_FB_USED gauge"]
    for k in range(40):
        t = 1704070800 + 30 * k
        lines.append(f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-1",Hostname="n1",modelName="NVIDIA A10G"}} 100 {t}')
    path.write_text("\n".join([*lines, "# EOF", ""]))
    return path


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env)


def test_doctor_fresh_signals_exit_0(prometheus_factory: PrometheusFactory, demo_om: Path) -> None:
    # GIVEN a Prometheus holding the demo's telemetry, probed at its last sample
    server = prometheus_factory(demo_om)
    # WHEN doctor runs
    result = invoke("doctor", "-p", server.url, "--at", END, "-o", "json")
    # THEN exit 0: the main detectors' signals are present and fresh
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 0
    assert {s["state"] for s in doc["signals"] if s["name"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} == {"present"}


def test_doctor_stale_series_are_not_missing(prometheus_factory: PrometheusFactory, demo_om: Path) -> None:
    # GIVEN the same Prometheus probed 20 minutes after its data stopped
    server = prometheus_factory(demo_om)
    # WHEN doctor runs (as people read it, and as JSON)
    text = invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:40:00Z", env={"COLUMNS": "80"})
    doc = json.loads(invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:40:00Z", "-o", "json").stdout)
    # THEN exit 4: stale with the newest sample's time, not "missing", and no Helm values (the wrong fix)
    assert text.exit_code == 4, text.output
    signal = next(s for s in doc["signals"] if s["name"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert signal["state"] == "stale" and signal["newest"].startswith("2024-01-01T01:2")
    assert "stale: newest sample at 2024-01-01 01:2" in text.stdout and "20m before the probe" in text.stdout
    after = text.stdout.split("detectors")[0].split("GR_ENGINE_ACTIVE")[1].splitlines()
    note = after[0] if after[0].strip() else after[1]  # on the name's line, or under it when the line is too narrow
    assert "stale" in note and "never exported" not in note
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in " ".join(doc["csv_lines"])
    said = " ".join(text.stdout.split())  # the terminal's lines break at spaces
    assert "dcgm-exporter pods" in said and "verdict: exit 4" in said
    # AND on an 80-column terminal no line is wider (but the literal CSV lines and Helm values), none folded mid-word
    from tests.width_checks import overlong

    assert overlong(text.stdout, 80, allowed=[*doc["csv_lines"], *doc["helm_values"].splitlines(),
                    *(doc.get("kube_state_metrics") or {}).get("helm_values", "").splitlines()]) == []
    # AND nothing internal reaches the user
    assert "B0" not in text.stdout and "B1" not in text.stdout and "../shared" not in text.stdout


def test_doctor_never_exported_activity_exits_1(prometheus_factory: PrometheusFactory, fb_only_om: Path) -> None:
    # GIVEN a Prometheus with framebuffer use only
    server = prometheus_factory(fb_only_om)
    # WHEN doctor runs
    result = invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:19:30Z")
    # THEN exit 1, the idle detector off because no activity signal was ever exported, with the CSV line to add
    assert result.exit_code == 1, result.output
    assert "never exported" in result.stdout and "DCGM_FI_PROF_SM_ACTIVE," in result.stdout
    assert "https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html" in result.stdout


def test_doctor_names_the_dcgm4_fields_it_reads_and_warns_on_a_field_exported_twice(prometheus_factory: PrometheusFactory,
                                                                                    tmp_path: Path) -> None:
    # GIVEN a dcgm-exporter with a DCGM 4.x counters CSV (GR engine and power under their 4.x names) plus a second CSV that
    # also exports GPU_UTIL under its 4.x name beside the 3.x one
    path = tmp_path / "dcgm4.om"
    lines = []
    for name in ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_DEV_BOARD_POWER_WATTS", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"):
        lines.append(f"# TYPE {name} gauge")
        for k in range(40):
            lines.append(f'{name}{{gpu="0",UUID="GPU-1",Hostname="n1",modelName="NVIDIA A10G",pod="p",namespace="ml"}} 1 {1704070800 + 30 * k}')
    path.write_text("\n".join([*lines, "# EOF", ""]))
    server = prometheus_factory(path)
    # WHEN doctor runs at the last sample
    result = invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:19:30Z", "-o", "json")
    doc = json.loads(result.stdout)
    rows = [c for c in doc["checks"] if c["check"] == "DCGM field names"]
    # THEN the 4.x names count for their fields (GR engine and power present), one row says which names were read,
    # and one warns that GPU_UTIL is exported twice
    signals = {s["name"]: s["series"] for s in doc["signals"]}
    assert signals["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 1 and signals["DCGM_FI_DEV_POWER_USAGE"] == 1
    assert [r["status"] for r in rows] == ["warn", "ok"]
    assert "DCGM_FI_DEV_GPU_UTIL as DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_GPU_UTIL_RATIO" in rows[0]["detail"]
    assert "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO (read as DCGM_FI_PROF_GR_ENGINE_ACTIVE)" in rows[1]["detail"]
    assert "DCGM_FI_DEV_BOARD_POWER_WATTS (read as DCGM_FI_DEV_POWER_USAGE)" in rows[1]["detail"]


def test_doctor_recommends_dcgm_where_only_gke_system_gpu_metrics_exist(prometheus_factory: PrometheusFactory, tmp_path: Path) -> None:
    # GIVEN a GKE cluster's Managed Prometheus holding the GKE system GPU metrics (duty cycle %, memory bytes, request)
    # keyed by namespace_name / pod_name, and no dcgm-exporter
    path = tmp_path / "gke.om"
    labels = ('project_id="p",location="us-central1",cluster_name="c",namespace_name="ml",pod_name="train-0",'
              'container_name="main",make="nvidia",model="nvidia-tesla-t4",accelerator_id="GPU-0a1b"')
    lines = []
    for name, value in (("kubernetes_io:container_accelerator_duty_cycle", 3), ("kubernetes_io:container_accelerator_memory_used", 2.1e9),
                        ("kubernetes_io:container_accelerator_request", 1)):
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{{{labels}}} {value} {1704070800 + 60 * k}" for k in range(20))
    path.write_text("\n".join([*lines, "# EOF", ""]))
    server = prometheus_factory(path)
    # WHEN doctor runs at the last sample
    result = invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:19:00Z", "-o", "json")
    doc = json.loads(result.stdout)
    # THEN it names the GKE metrics (3 series), says they are a lower-confidence idle signal only, and recommends DCGM; the
    # missing activity signal still fails the check (exit 1: nothing to judge the GPUs by)
    (row,) = [c for c in doc["checks"] if c["check"] == "cloud GPU metrics"]
    assert row["status"] == "warn" and row["detail"].startswith("3 GKE system metrics series")
    assert "lower-confidence idle signal only" in row["detail"]
    assert "dcgm-exporter" in row["fix"] and "nvidia-dcgm" in row["link"]
    assert result.exit_code == 1


def test_doctor_says_dcgm_is_read_when_gke_gpu_metrics_are_beside_it(prometheus_factory: PrometheusFactory, demo_om: Path,
                                                                     tmp_path: Path) -> None:
    # GIVEN the demo's DCGM telemetry plus one GKE duty-cycle series
    path = tmp_path / "both.om"
    text = demo_om.read_text().replace("# EOF\n", "")
    gke = "\n".join(f'kubernetes_io:container_accelerator_duty_cycle{{namespace_name="ml",pod_name="p",accelerator_id="GPU-x"}} 5 {1704070800 + 60 * k}'
                    for k in range(20))
    path.write_text(text + "# TYPE kubernetes_io:container_accelerator_duty_cycle gauge\n" + gke + "\n# EOF\n")
    server = prometheus_factory(path)
    # WHEN doctor runs / THEN the GKE metrics are noted as present beside DCGM, which is read
    doc = json.loads(invoke("doctor", "-p", server.url, "--at", END, "-o", "json").stdout)
    (row,) = [c for c in doc["checks"] if c["check"] == "cloud GPU metrics"]
    assert row["status"] == "ok" and "the DCGM fields are read" in row["detail"]


def test_doctor_fails_where_no_cluster_state_can_be_read(prometheus_factory: PrometheusFactory, demo_om: Path,
                                                          tmp_path: Path) -> None:
    # GIVEN a DCGM-only Prometheus: the demo's DCGM series without their pod/namespace labels, no kube-state-metrics
    import re

    path = tmp_path / "dcgm-only.om"
    keep = [line for line in demo_om.read_text().splitlines()
            if line.startswith("DCGM_") or (line.startswith("# ") and line.split()[2:3] and line.split()[2].startswith("DCGM_"))]
    keep = [re.sub(r',?(?<![A-Za-z_])(exported_)?(pod|namespace|container)="[^"]*"', "", line).replace("{,", "{") for line in keep]
    path.write_text("\n".join([*keep, "# EOF", ""]))
    server = prometheus_factory(path)
    # WHEN doctor runs at the last sample, and a scan of the same Prometheus
    text = invoke("doctor", "-p", server.url, "--at", END, env={"COLUMNS": "100"})
    doc = json.loads(invoke("doctor", "-p", server.url, "--at", END, "-o", "json").stdout)
    scan = invoke("scan", "-p", server.url, "--at", END, env={"COLUMNS": "200"})
    # THEN the scan judges nothing, and doctor does not say "every signal is there": it exits 1 and its verdict line
    # says that no cluster state can be read (no kube-state-metrics, no pod labels) and the three ways to give it
    assert "nothing judged: no cluster state" in " ".join(scan.stdout.split()), scan.output
    assert text.exit_code == 1 and doc["exit_code"] == 1, text.output
    verdict = " ".join(text.stdout.split("signals (series")[0].split())
    assert verdict.startswith("verdict: exit 1: no cluster state can be read from this Prometheus"), verdict
    for words in ("no kube-state-metrics series", "no pod labels", "--kubeconfig", "kube-state-metrics in this Prometheus",
                  "--cluster-json"):
        assert words in verdict
    assert EXIT_CODES_0 not in " ".join(text.stdout.split())
    (row,) = [c for c in doc["checks"] if c["check"] == "cluster state"]
    assert row["status"] == "fail" and row["exit_code"] == 1


EXIT_CODES_0 = "every signal the main detectors need is exported and fresh"
