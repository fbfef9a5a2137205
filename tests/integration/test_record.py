"""Integration: `gpuwaste record` from a real backfilled Prometheus, then scanning the recording offline."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.integration.test_prometheus_parity import finding_diffs, window_diffs
from tests.servers.ports import free_port

if TYPE_CHECKING:
    from pathlib import Path

    from gpuwaste.ports import GpuTelemetrySource
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration


def _scan(cluster_dir: Path, telemetry: GpuTelemetrySource, at, window_s: int) -> ScanReport:  # type: ignore[no-untyped-def]
    service = ScanService(
        cluster_source=RecordingClusterSource(cluster_dir),
        telemetry_source=telemetry,
        window=timedelta(seconds=window_s),
        price_book=PriceBook.bundled(),
    )
    return service.scan(at=at, scan_id="record")


def test_record_then_scan_gives_the_findings_of_scanning_prometheus(tmp_path: Path, prometheus_factory: PrometheusFactory) -> None:
    # GIVEN the demo fleet backfilled into a real Prometheus, and its cluster objects as a kubectl List
    source_dir = write_recording(generate_fleet(FleetSpec()), tmp_path / "source", compress=False)
    server = prometheus_factory(source_dir / "telemetry.om")
    meta = json.loads((source_dir / "recording.json").read_text())
    at, window_s = meta["eval_time"], meta["window_s"]
    out_dir = tmp_path / "recorded"
    # WHEN `gpuwaste record` captures it (in 30-minute chunks) and the recording is scanned offline
    result = CliRunner().invoke(app, [
        "record", str(out_dir), "--prometheus", server.url, "--cluster-json", str(source_dir / "cluster.json"),
        "--at", at, "--window", f"{window_s}s", "--step", "30s", "--chunk", "30m", "--cluster", "demo", "-q",
    ])
    assert result.exit_code == 0, result.output
    rec = RecordingTelemetrySource(out_dir)
    eval_time = rec.end_time()
    from_recording = _scan(out_dir, rec, eval_time, window_s)
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster="demo")
    from_prometheus = _scan(source_dir, prom, eval_time, window_s)
    # THEN the recording has the generator's layout and gives the same window and findings as Prometheus
    assert sorted(p.name for p in out_dir.iterdir()) == ["cluster.json", "recording.json", "telemetry.om.gz"]
    assert rec.meta.window_s == window_s and rec.meta.scrape_interval_s == 30 and eval_time.isoformat() == at
    window = timedelta(seconds=window_s)
    assert window_diffs(rec.telemetry(at=eval_time, window=window), prom.telemetry(at=eval_time, window=window)) == []
    assert from_recording.findings and finding_diffs(from_recording, from_prometheus) == []


def test_record_unreachable_prometheus_exits_3_with_a_clear_message(tmp_path: Path) -> None:
    # GIVEN a Prometheus URL where nothing listens
    url = f"http://127.0.0.1:{free_port()}"
    # WHEN recording from it
    result = CliRunner().invoke(app, ["record", str(tmp_path / "out"), "--prometheus", url, "--at", "2024-01-01T01:20:00Z",
                                      "--cluster-json", str(tmp_path / "none.json"), "-q"])
    # THEN it exits 3 naming the URL and what to check, and writes nothing
    assert result.exit_code == 3
    assert "cannot connect to Prometheus at" in result.output and "127.0.0.1" in result.output
    assert not (tmp_path / "out").exists()


def test_record_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    # GIVEN a directory that already holds files
    (tmp_path / "keep.txt").write_text("x")
    # WHEN recording into it without --force
    result = CliRunner().invoke(app, ["record", str(tmp_path), "--prometheus", "http://127.0.0.1:9", "-q"])
    # THEN it refuses before any query and keeps the files
    assert result.exit_code == 2 and "not empty" in result.output
    assert (tmp_path / "keep.txt").exists()


def test_record_past_the_newest_sample_then_scan_with_defaults_reports_the_gap_as_stale(
    tmp_path: Path, prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN the demo telemetry (samples up to 01:20) in a real Prometheus, recorded with the defaults at 01:34: the
    # exporter stopped 14 minutes before the recording
    import gzip

    from gpuwaste.bootstrap import local
    from gpuwaste.models.findings import WasteKind

    om = tmp_path / "demo.om"
    om.write_bytes(gzip.decompress((local.demo_recording() / "telemetry.om.gz").read_bytes()))
    server = prometheus_factory(om)
    out_dir = tmp_path / "recorded"
    recorded = CliRunner().invoke(app, ["record", str(out_dir), "--prometheus", server.url, "--at", "2024-01-01T01:34:00Z", "-q"])
    assert recorded.exit_code == 0, recorded.output
    meta = json.loads((out_dir / "recording.json").read_text())
    # WHEN the fresh recording is scanned with the defaults
    result = CliRunner().invoke(app, ["scan", "-r", str(out_dir), "-o", "json"])
    # THEN it is scanned over the window and time it was recorded for (not refused with "pass --window 56m"), and the
    # pods whose samples stopped get stale-series data-quality findings, never an idle verdict
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["window_s"] == meta["window_s"] and doc["eval_time"].startswith("2024-01-01T01:34")
    stale = {f["subject"]["pod"] for f in doc["findings"] if f["details"].get("check") == "stale_series"}
    assert stale, [f["kind"] for f in doc["findings"]]
    idle = {f["subject"]["pod"] for f in doc["findings"] if f["kind"] in (WasteKind.IDLE, WasteKind.INFERENCE_IDLE)}
    assert not stale & idle
    # AND people are told why (the table on stderr's note), while an explicit --window too long is still refused
    table = CliRunner().invoke(app, ["scan", "-r", str(out_dir)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "reported as missing telemetry, never as idle GPUs" in " ".join(table.output.split())
    assert CliRunner().invoke(app, ["scan", "-r", str(out_dir), "-w", "3h"]).exit_code == 2
