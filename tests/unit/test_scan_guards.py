"""Unit tests: the scan refuses windows its rules cannot judge, and empty telemetry is never read as idle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuwaste.bootstrap.local import demo_recording
from gpuwaste.errors import ConfigError
from gpuwaste.models.findings import WasteKind
from gpuwaste.services.scan import ScanService
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource


def _service(window: timedelta) -> tuple[ScanService, RecordingTelemetrySource]:
    path = demo_recording()
    tel = RecordingTelemetrySource(path)
    return ScanService(cluster_source=RecordingClusterSource(path), telemetry_source=tel, window=window), tel


def test_scan_service_window_under_ten_minutes_is_refused() -> None:
    # GIVEN a five-minute window (shorter than the 10-minute averages the rules use)
    # WHEN a scan service is built
    with pytest.raises(ConfigError) as err:
        _service(timedelta(minutes=5))
    # THEN it is refused with what to do
    assert "10-minute" in str(err.value) and "--window 10m" in str(err.value)


def test_scan_window_without_any_telemetry_gives_no_telemetry_and_no_idle() -> None:
    # GIVEN the demo cluster evaluated long after its telemetry ends
    service, tel = _service(timedelta(hours=1))
    # WHEN it is scanned
    report = service.scan(at=tel.end_time() + timedelta(days=30))
    # THEN one cluster-level no_telemetry problem is reported, no per-node "unmonitored" noise, nothing idle
    checks = [f.details.get("check") for f in report.findings if f.kind is WasteKind.DATA_QUALITY]
    assert checks.count("no_telemetry") == 1
    assert "unmonitored_gpus" not in checks
    assert not [f for f in report.findings if f.kind in (WasteKind.IDLE, WasteKind.UNDERUSED)]
