"""A live scan and `record` against a real Prometheus: the scan takes --cluster-json, a saved /api/v1/query_range
answer scans as a recording, and `record` refuses a range without samples."""

from __future__ import annotations

import gzip
import json
import re
import shlex
import urllib.parse
import urllib.request
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


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


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


def test_live_scan_prints_the_explain_hint_and_explain_finds_the_same_id_live(prometheus_factory: PrometheusFactory,
                                                                              demo_om: Path) -> None:
    # GIVEN the demo in a real Prometheus and a live scan's table
    server = prometheus_factory(demo_om)
    live = CliRunner().invoke(app, ["scan", "-p", server.url, "--cluster-json", str(DEMO / "cluster.json"), "--at", END,
                                    "-w", "70m", "--cluster", "demo"], env={"COLUMNS": "160", "NO_COLOR": "1"})
    assert live.exit_code == 0, live.output
    # THEN it says how to explain a finding: the same Prometheus, time and window, so the IDs are the scan's
    (hint,) = [line for line in live.output.splitlines() if line.startswith("why: gpuwaste explain ID")]
    assert f"--prometheus {server.url}" in hint and "--at 2024-01-01T01:20:00Z" in hint and "-w 4200s" in hint
    ids = re.findall(r"^([0-9a-f]{6})\s", live.output, re.M)
    recorded = json.loads(invoke("scan", "-r", str(DEMO), "-o", "json", "-q").stdout)["findings"]
    assert len(ids) >= 10
    # WHEN the hint is run for a live finding's ID
    args = shlex.split(hint.removeprefix("why: gpuwaste explain ID "))
    explained = invoke("explain", ids[0], *args)
    # THEN it explains that finding, and the recording's scan knows it under the same ID
    assert explained.exit_code == 0, explained.output
    assert "Traceback" not in explained.output and explained.output.strip()
    assert any(f["fingerprint"].startswith(ids[0]) for f in recorded)
    # AND an ID the live scan did not find is one clear line with what it did find
    missing = invoke("explain", "ffffff", *args)
    assert missing.exit_code == 2 and "no finding with ID 'ffffff' in this scan" in missing.output
