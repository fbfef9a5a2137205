"""Ports: the interfaces services depend on; adapters implement them, tests fake them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.messages import AlertMessage, FindingMessage, ScanCompleted
from gpuwaste.models.telemetry import TelemetryWindow


class ClusterStateSource(Protocol):
    """Reads GPU pods, their owners and GPU nodes."""

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """The cluster as of now (`at` is recorded as the observation time).

        Raises:
            SourceUnavailableError: the API could not be reached (retryable).
            SourceAuthError: credentials were rejected.
            InputFormatError: a recording is malformed.
        """
        ...


class GpuTelemetrySource(Protocol):
    """Reads DCGM (and pod-level) telemetry summarised over a window."""

    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """Window summaries ending at `at` (the scheduled time, never the wall clock).

        Raises:
            SourceUnavailableError: Prometheus could not be reached or timed out (retryable).
            SourceAuthError: credentials were rejected.
            InputFormatError: a recording is malformed.
        """
        ...


class FindingQueue(Protocol):
    """Puts findings (and scan completions) on the next stage's queue."""

    def send_findings(self, messages: Sequence[FindingMessage]) -> None:
        """Send findings in batches; raises RetryableError when the queue cannot take them."""
        ...

    def send_scan_completed(self, message: ScanCompleted) -> None:
        """Announce that a scan finished with the fingerprints it saw."""
        ...


class AlertQueue(Protocol):
    """Puts lifecycle decisions on the alerts queue."""

    def send_alerts(self, messages: Sequence[AlertMessage]) -> None:
        """Send alerts in batches; raises RetryableError when the queue cannot take them."""
        ...


class FindingStore(Protocol):
    """The finding lifecycle store (DynamoDB, SQLite); every write is conditional."""

    def get(self, fingerprint: str) -> FindingRecord | None:
        """The lifecycle record, or None."""
        ...

    def put_new(self, record: FindingRecord) -> bool:
        """Create a record; False when one already exists (a duplicate delivery)."""
        ...

    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        """Replace a record if its version is still `expected_version`; False on a conflict."""
        ...

    def open_for_cluster(self, cluster: str) -> list[FindingRecord]:
        """Open (unresolved) records of a cluster."""
        ...

    def history(self, *, since: datetime, until: datetime) -> list[FindingRecord]:
        """Records seen or resolved in [since, until] (for the daily summary)."""
        ...


class Clock(Protocol):
    """Injected time source for code that must know "now" (never used inside a scan)."""

    def now(self) -> datetime:
        """The current time, tz-aware UTC."""
        ...


__all__ = ["AlertQueue", "Clock", "ClusterStateSource", "Finding", "FindingQueue", "FindingStore", "GpuTelemetrySource"]
