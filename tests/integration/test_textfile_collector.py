"""Integration: `gpuwaste scan -o prometheus` read by a real node-exporter's textfile collector (Debian package
prometheus-node-exporter, installed by `make prometheus`), and why `-o openmetrics` is not the format for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from tests.servers.ports import free_port

pytestmark = pytest.mark.integration

HINT = "prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter, or `make prometheus`)"


def _node_exporter() -> str:
    found = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {HINT}", pytrace=False)
        pytest.skip(HINT)
    return found


def _scrape_textfile(binary: str, directory: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    port = free_port()
    process = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                                "--collector.textfile", f"--collector.textfile.directory={directory}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    text = response.read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=10)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _scan(fmt: str) -> str:
    result = CliRunner().invoke(app, ["scan", "-r", str(local.demo_recording()), "-q", "-o", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_node_exporter_reads_the_prometheus_output_and_refuses_openmetrics(tmp_path: Path) -> None:
    binary = _node_exporter()
    # GIVEN the demo scan written as a textfile in the text format
    good = tmp_path / "good"
    good.mkdir()
    (good / "gpuwaste.prom").write_text(_scan("prometheus"))
    # WHEN node-exporter's textfile collector reads it
    scraped = _scrape_textfile(binary, good)
    # THEN it reports no error and re-exports every waste series of the scan
    assert scraped["node_textfile_scrape_error"] == [({}, 0.0)]
    workloads = {labels["workload"] for labels, _ in scraped["gpuwaste_waste_usd_per_day"]}
    assert {"llama-70b-vllm", "eval-sweep", "ocr-worker"} <= workloads
    assert len(scraped["gpuwaste_waste_usd_per_day"]) == 21  # one per waste finding of the demo
    # AND the OpenMetrics output in the same place is refused (the reason the textfile format is `-o prometheus`)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "gpuwaste.prom").write_text(_scan("openmetrics"))
    refused = _scrape_textfile(binary, bad)
    assert refused["node_textfile_scrape_error"] == [({}, 1.0)]
    assert "gpuwaste_waste_usd_per_day" not in refused
