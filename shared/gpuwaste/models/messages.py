"""Models: versioned queue message envelopes exchanged by the pipeline's functions."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from gpuwaste.models.base import Frozen
from gpuwaste.models.findings import Finding


class ScanRequest(Frozen):
    """dispatch_scans → scan_gpu_waste: scan one cluster at the scheduled time."""

    schema_version: Literal[1] = 1
    cluster: str = Field(min_length=1)
    scheduled_time: datetime
    scan_id: str = Field(min_length=1)


class FindingMessage(Frozen):
    """scan → price (unpriced) and price → dedupe (priced): one finding.

    Attributes:
        scan_id: the scan that saw it; `scan_seq` the finding's index in that scan and `scan_total`
            how many findings the scan produced, so dedupe can tell when a scan is complete.
    """

    schema_version: Literal[1] = 1
    scan_id: str
    scan_seq: int = Field(0, ge=0)
    scan_total: int = Field(0, ge=0)
    finding: Finding


class ScanCompleted(Frozen):
    """scan → dedupe: the scan finished; fingerprints it saw (for resolving waste that disappeared)."""

    schema_version: Literal[1] = 1
    scan_id: str
    cluster: str
    scheduled_time: datetime
    fingerprints: tuple[str, ...] = ()


class AlertAction(StrEnum):
    """Why the lifecycle asks for a message."""

    NEW = "new"
    WORSE = "worse"
    REMINDER = "reminder"
    ESCALATE = "escalate"
    RESOLVED = "resolved"


class AlertMessage(Frozen):
    """dedupe → notify/ticket: something the owner must hear about."""

    schema_version: Literal[1] = 1
    action: AlertAction
    fingerprint: str
    finding: Finding
    first_seen: datetime
    cumulative_usd: str = "0"
    slack_ts: str | None = None
    slack_channel: str | None = None
    ticket_key: str | None = None
    saved_usd_per_day: str | None = None
