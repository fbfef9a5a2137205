"""What people see from a real Prometheus: doctor tells stale from never exported and exits with its documented
codes, a live scan takes --cluster-json, a saved /api/v1/query_range answer is a recording, `record` refuses an
empty range, and Jira receives the ticket with its headings and priority."""

from __future__ import annotations

import gzip
import json
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.models.messages import AlertAction
from gpuwaste.services.tickets import TicketService
from gpuwaste.settings import DeliverySettings, JiraSettings, RouteTarget
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for

if TYPE_CHECKING:
    from tests.servers.jira_api import FakeJira
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


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


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
    text = invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:40:00Z")
    doc = json.loads(invoke("doctor", "-p", server.url, "--at", "2024-01-01T01:40:00Z", "-o", "json").stdout)
    # THEN exit 4: stale with the newest sample's time, not "missing", and no Helm values (the wrong fix)
    assert text.exit_code == 4, text.output
    signal = next(s for s in doc["signals"] if s["name"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert signal["state"] == "stale" and signal["newest"].startswith("2024-01-01T01:2")
    assert "stale: newest sample at 2024-01-01 01:2" in text.stdout and "20m before the probe" in text.stdout
    assert "never exported" not in text.stdout.split("detectors")[0].split("GR_ENGINE_ACTIVE")[1].splitlines()[0]
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in " ".join(doc["csv_lines"])
    assert "dcgm-exporter pods" in text.stdout and "verdict: exit 4" in text.stdout
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


def test_live_scan_with_cluster_json_and_a_saved_query_range_answer(prometheus_factory: PrometheusFactory, demo_om: Path,
                                                                      tmp_path: Path) -> None:
    # GIVEN the demo in a real Prometheus, its cluster objects in a file, and a saved /api/v1/query_range answer
    server = prometheus_factory(demo_om)
    query = urllib.parse.urlencode({"query": '{__name__=~"DCGM_.*|vllm:.*|container_cpu_.*"}', "start": "1704067200",
                                    "end": "1704072000", "step": "30s"})
    with urllib.request.urlopen(f"{server.url}/api/v1/query_range?{query}", timeout=30) as answer:  # noqa: S310 (loopback)
        (tmp_path / "answer.json").write_bytes(answer.read())
    # WHEN scanned live with --cluster-json, and from the saved answer
    live = invoke("scan", "-p", server.url, "--cluster-json", str(DEMO / "cluster.json"), "--at", END, "-w", "70m",
                  "--cluster", "demo", "-o", "json", "-q")
    saved = invoke("scan", "-r", str(tmp_path / "answer.json"), "--cluster-json", str(DEMO / "cluster.json"), "--at", END,
                   "-w", "70m", "--cluster", "demo", "-o", "json", "-q")
    # THEN both find the demo's waste, the same findings
    assert live.exit_code == 0, live.output
    assert saved.exit_code == 0, saved.output
    def kinds(doc: str) -> set[tuple[str, str]]:
        return {(f["kind"], f["fingerprint"]) for f in json.loads(doc)["findings"]}
    assert {"idle_allocation", "stalled", "unallocated_capacity"} <= {k for k, _ in kinds(live.stdout)}
    assert kinds(live.stdout) == kinds(saved.stdout)


def test_record_refuses_a_range_without_samples(prometheus_factory: PrometheusFactory, demo_om: Path, tmp_path: Path) -> None:
    # GIVEN the demo in a real Prometheus
    server = prometheus_factory(demo_om)
    # WHEN recording a day after its data
    result = invoke("record", str(tmp_path / "out"), "-p", server.url, "--at", "2024-01-02T12:00:00Z", "-w", "1h",
                    "--cluster-json", str(DEMO / "cluster.json"), "-q")
    # THEN exit 2 with the range and what to do; nothing written
    assert result.exit_code == 2, result.output
    assert "no GPU samples in Prometheus between 2024-01-02 10:50 and 2024-01-02 12:00 UTC" in result.output
    assert not (tmp_path / "out").exists()


def test_jira_receives_headings_priority_and_money(jira_api: FakeJira) -> None:
    # GIVEN a $150/day finding of team ml escalated, with Jira configured
    settings = DeliverySettings(teams={"ml": RouteTarget(jira_project="MLOPS")},
                                jira=JiraSettings(base_url=jira_api.url, email=jira_api.email))
    store = SqliteFindingStore(":memory:")
    f = finding("trainer", usd_per_day="150.00", ns_annotations={"gpuwaste.io/team": "ml"})
    store.put_new(record_for(f))
    sink = JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token))
    service = TicketService(sink=sink, store=store, settings=settings, now=lambda: NOW + timedelta(hours=1))
    # WHEN handled
    key = service.handle(alert(f, AlertAction.ESCALATE))
    # THEN the fake Jira holds the ticket: money in the summary, priority High, ADF headings and a code block
    issue = jira_api.issues[key]  # type: ignore[index]
    assert issue.fields["summary"].startswith("$150.00/day GPU waste:")
    assert issue.fields["priority"] == {"name": "High"}
    nodes = issue.fields["description"]["content"]
    assert [n["content"][0]["text"] for n in nodes if n["type"] == "heading"][:5] == [
        "What", "Evidence", "Cost", "How to fix", "Done when"]
    assert any(n["type"] == "codeBlock" and "kubectl" in n["content"][0]["text"] for n in nodes)
