"""Integration: `gpuwaste doctor` and the waste catalogue against a real Prometheus backfilled with the scorecard fleet."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.fleet.scorecard import scorecard_settings
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanService
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

SPEC = FleetSpec(layout="scorecard", nodes=1, cluster="scorecard")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scorecard fleet (one repetition) as an uncompressed recording."""
    return write_recording(generate_fleet(SPEC), tmp_path_factory.mktemp("doctor") / "rec", compress=False)


def test_doctor_against_backfilled_prometheus(prometheus_factory: PrometheusFactory, recording: Path):
    # GIVEN a real Prometheus holding the scorecard fleet: SM_ACTIVE on some nodes, cAdvisor and vLLM series, no
    # power-limit fields (as with dcgm-exporter's default CSV)
    server = prometheus_factory(recording / "telemetry.om")
    # WHEN `gpuwaste doctor --prometheus URL --at EVAL --json` runs
    result = CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", SPEC.eval_time.isoformat(), "--json"])
    # THEN it finds the signals that are there, names the missing power limits with their CSV lines and Helm values,
    # and says which detector falls back to what
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    present = {s["name"] for s in report["signals"] if s["present"]}
    assert {Signal.SM_ACTIVE.value, Signal.DRAM_ACTIVE.value, "container_cpu_cfs_throttled_periods_total",
            "vllm:num_requests_running", "vllm:kv_cache_usage_perc"} <= present
    assert Signal.POWER_LIMIT.value not in present
    assert any(line.startswith("DCGM_FI_DEV_ENFORCED_POWER_LIMIT") for line in report["csv_lines"])
    assert "DCGM_EXPORTER_COLLECTORS" in report["helm_values"]
    detectors = {d["name"]: d for d in report["detectors"]}
    assert detectors["power_anomaly"]["status"] == "degraded"
    assert detectors["cpu_bound"]["status"] == "ok" and detectors["stalled"]["status"] in ("ok", "degraded")
    assert report["labels"]["DCGM series with pod label"] > 0


def test_doctor_at_80_columns_against_backfilled_prometheus_folds_no_url(prometheus_factory: PrometheusFactory,
                                                                         recording: Path):
    # GIVEN the backfilled Prometheus (power-limit fields missing: CSV lines, Helm values and docs links printed)
    from gpuwaste.commands.doctor import DOCS
    from tests.width_checks import overlong, split_identifiers, urls

    server = prometheus_factory(recording / "telemetry.om")
    # WHEN `gpuwaste doctor` prints its table on an 80-column terminal
    result = CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", SPEC.eval_time.isoformat()],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    data = json.loads(CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", SPEC.eval_time.isoformat(),
                                              "-o", "json"]).stdout)
    # THEN no line is wider than 80 but a lone URL and the literal CSV lines and Helm values to copy
    literal = [*data["csv_lines"], *data["helm_values"].splitlines(),
               *(data.get("kube_state_metrics") or {}).get("helm_values", "").splitlines()]
    assert overlong(result.stdout, 80, allowed=literal) == []
    # AND every URL is a whole documentation URL, never folded
    shown = urls(result.stdout)
    assert DOCS["dcgm-fields"] in shown and shown <= set(DOCS.values()), shown
    assert split_identifiers(result.stdout, DOCS.values()) == []


def test_doctor_unreachable_prometheus_fails_with_advice():
    # GIVEN a URL nothing listens on
    # WHEN doctor runs
    result = CliRunner().invoke(app, ["doctor", "--prometheus", "http://127.0.0.1:9", "--at", "1704070800"])
    # THEN it exits 3 and says what to check, once
    assert result.exit_code == 3
    assert result.output.lower().count("check the url") == 1, result.output


def test_catalogue_findings_identical_through_prometheus_and_recording(prometheus_factory: PrometheusFactory, recording: Path):
    # GIVEN the same scorecard fleet as a recording and backfilled into Prometheus
    server = prometheus_factory(recording / "telemetry.om")
    window = timedelta(seconds=SPEC.history_s - 600)
    settings = scorecard_settings(int(window.total_seconds()))
    book = PriceBook.bundled()
    cluster = RecordingClusterSource(recording)
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster="scorecard", scrape_interval_s=30)
    rec = RecordingTelemetrySource(recording)
    # WHEN both are scanned with every detector at the same time and window
    a = ScanService(cluster_source=cluster, telemetry_source=rec, settings=settings, window=window, price_book=book).scan(at=SPEC.eval_time)
    b = ScanService(cluster_source=cluster, telemetry_source=prom, settings=settings, window=window, price_book=book).scan(at=SPEC.eval_time)
    # THEN the same findings with the same money (CPU throttling and token counters become rates the same way)
    def key(r):  # noqa: ANN001, ANN202
        return sorted((f.kind.value, f.subject.namespace or "", f.subject.pod or f.subject.node or "", str(f.usd_per_day)) for f in r.findings)
    assert key(a) == key(b)
    assert {"cpu_bound", "kv_cache_pressure", "inference_idle", "stalled", "power_anomaly"} <= {f.kind.value for f in b.findings}


def test_live_scan_without_dcgm_telemetry_is_not_an_all_clear(prometheus_factory: PrometheusFactory, tmp_path: Path):
    # GIVEN a real Prometheus that holds series, but none from dcgm-exporter in the window
    om = tmp_path / "no-dcgm.om"
    t0 = int(SPEC.eval_time.timestamp()) - 3600
    om.write_text("# TYPE up gauge\n" + "".join(f'up{{job="node"}} 1 {t0 + 30 * i}\n' for i in range(121)) + "# EOF\n")
    server = prometheus_factory(om)
    # WHEN a live scan reads it (cluster state from kube-state-metrics: none either)
    result = CliRunner().invoke(app, ["scan", "--prometheus", server.url, "--at", SPEC.eval_time.isoformat(), "-q"])
    # THEN it exits 5 and says that nothing was judged, instead of printing a $0 total as if all were well
    assert result.exit_code == 5, result.output
    assert "no DCGM telemetry" in result.output and "not an all-clear" in result.output
    # AND it says why: dcgm-exporter is not scraped by this Prometheus at all (no DCGM series in a week), and what to do
    assert "dcgm-exporter is not scraped by this Prometheus at all" in result.output
    assert "gpuwaste doctor --prometheus URL" in result.output


def test_doctor_says_first_that_dcgm_exporter_is_not_scraped_at_all(prometheus_factory: PrometheusFactory,
                                                                   tmp_path: Path):
    # GIVEN a real Prometheus that holds series, none from dcgm-exporter and no dcgm-exporter target
    om = tmp_path / "no-dcgm.om"
    t0 = int(SPEC.eval_time.timestamp()) - 3600
    om.write_text("# TYPE up gauge\n" + "".join(f'up{{job="node"}} 1 {t0 + 30 * i}\n' for i in range(121)) + "# EOF\n")
    server = prometheus_factory(om)
    at = SPEC.eval_time.isoformat()
    # WHEN doctor runs, for people and as JSON
    table = CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", at], env={"COLUMNS": "200"})
    doc = json.loads(CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", at, "-o", "json"]).stdout)
    # THEN its verdict, first, says dcgm-exporter is not scraped at all, and the first thing to do is to scrape it
    assert table.exit_code == 1, table.output
    first = table.stdout.splitlines()[0]
    assert first.startswith("verdict: exit 1: dcgm-exporter is not scraped by this Prometheus at all"), first
    todo = table.stdout.split("\nto do\n", 1)[1]
    assert todo.lstrip().startswith("fail dcgm-exporter:") and "serviceMonitor.enabled=true" in todo
    # AND no counters-CSV lines are offered as the fix (there is no exporter to configure yet)
    assert "add to the dcgm-exporter counters CSV" not in table.stdout
    assert doc["dcgm_scraped"] is False and doc["checks"][0]["check"] == "dcgm-exporter"


def test_live_scan_outside_the_data_names_the_newest_dcgm_sample(prometheus_factory: PrometheusFactory,
                                                                  recording: Path):
    # GIVEN the scorecard fleet in a real Prometheus, and a scan a day after its data
    server = prometheus_factory(recording / "telemetry.om")
    later = (SPEC.eval_time + timedelta(days=1)).isoformat()
    # WHEN scanned live there
    result = CliRunner().invoke(app, ["scan", "--prometheus", server.url, "--at", later, "-q"])
    # THEN it is no all-clear, and it says DCGM data exists, when its newest sample is (not "not scraped at all")
    assert result.exit_code == 5, result.output
    assert "The newest DCGM sample is at" in result.output and "not scraped by this Prometheus at all" not in result.output
    # AND doctor on that Prometheus does not say dcgm-exporter is unscraped
    doc = json.loads(CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", SPEC.eval_time.isoformat(),
                                              "-o", "json"]).stdout)
    assert doc["dcgm_scraped"] is True
