"""Unit tests: the scan reads cluster state and telemetry at the same time, and pauses the cyclic collector meanwhile."""

from __future__ import annotations

import gc
import threading
from datetime import datetime, timedelta

import pytest

from gpuwaste.bootstrap.local import demo_recording
from gpuwaste.errors import SourceUnavailableError
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.telemetry import TelemetryWindow
from gpuwaste.services.scan import ScanService
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource


class _Cluster:
    """The demo's cluster state, read only once the telemetry read has started (proves the overlap) — or failing."""

    def __init__(self, inner: RecordingClusterSource, started: threading.Event, *, fail: bool = False) -> None:
        self.inner, self.started, self.fail = inner, started, fail
        self.overlapped = False
        self.gc_enabled: bool | None = None

    def cluster_state(self, *, at: datetime) -> ClusterState:
        self.overlapped = self.started.wait(timeout=10)
        self.gc_enabled = gc.isenabled()
        if self.fail:
            raise SourceUnavailableError("kube-apiserver down")
        return self.inner.cluster_state(at=at)


class _Telemetry:
    """The demo's telemetry, signalling that its read started; optionally failing."""

    def __init__(self, inner: RecordingTelemetrySource, started: threading.Event, *, fail: bool = False) -> None:
        self.inner, self.started, self.fail = inner, started, fail
        self.gc_enabled: bool | None = None

    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        self.started.set()
        self.gc_enabled = gc.isenabled()
        if self.fail:
            raise SourceUnavailableError("prometheus down")
        return self.inner.telemetry(at=at, window=window)


def _service(*, cluster_fails: bool = False, telemetry_fails: bool = False) -> tuple[ScanService, _Cluster, _Telemetry, datetime]:
    path = demo_recording()
    started = threading.Event()
    tel_inner = RecordingTelemetrySource(path)
    cluster = _Cluster(RecordingClusterSource(path), started, fail=cluster_fails)
    tel = _Telemetry(tel_inner, started, fail=telemetry_fails)
    return ScanService(cluster_source=cluster, telemetry_source=tel, window=timedelta(hours=1)), cluster, tel, tel_inner.end_time()


def test_scan_reads_cluster_state_while_telemetry_is_read_with_the_collector_paused() -> None:
    # GIVEN a cluster source that only answers once the telemetry read has begun
    service, cluster, tel, at = _service()
    assert gc.isenabled()
    # WHEN the demo is scanned
    report = service.scan(at=at)
    # THEN both were read at the same time, the collector was paused during both reads and runs again after
    assert cluster.overlapped
    assert cluster.gc_enabled is False and tel.gc_enabled is False
    assert gc.isenabled()
    # AND the scan judged as usual, its wall time no less than its longest part
    assert report.findings
    assert report.duration_s >= max(report.timings_s["cluster_state"], report.timings_s["telemetry"])


@pytest.mark.parametrize(("cluster_fails", "telemetry_fails", "expected"), [
    (True, False, "kube-apiserver down"),
    (False, True, "prometheus down"),
    (True, True, "kube-apiserver down"),  # as when the cluster state was read first
])
def test_scan_read_failure_is_raised_and_the_collector_runs_again(cluster_fails: bool, telemetry_fails: bool, expected: str) -> None:
    # GIVEN one or both sources failing
    service, _cluster, _tel, at = _service(cluster_fails=cluster_fails, telemetry_fails=telemetry_fails)
    # WHEN scanned
    with pytest.raises(SourceUnavailableError) as err:
        service.scan(at=at)
    # THEN the failure is raised (the cluster state's when both fail) and the collector is enabled again
    assert expected in str(err.value)
    assert gc.isenabled()
