"""Fleet generator: the pieces the generator and its allocation layouts share.

A GPU being generated, a ground-truth item, stable ids and timestamps: here so that `fleet.allocation_kinds` needs
nothing of the generator at run time, and the generator imports it without a cycle.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import BaseModel


class TruthItem(BaseModel):
    """One expected finding (or one expected non-finding, with `kind` None)."""

    kind: str | None
    namespace: str | None = None
    pod: str | None = None
    node: str | None = None
    workload: str | None = None
    gpus: float = 0.0
    scenario: str
    check: str | None = None


@dataclass
class _Gpu:
    uuid: str
    index: int
    node: str
    model: str
    fb_total: int
    power_limit: float
    mig: tuple[str, str] | None = None  # (GPU_I_ID, profile)
    scenario: str = "free"
    owner: tuple[str, str, str] | None = None  # (namespace, pod, container)
    signal_set: str = "prof"  # "prof" (GR_ENGINE + GPU_UTIL), "sm" (+SM_ACTIVE), "util" (GPU_UTIL only)
    label_style: str = "pod"
    hostname_key: str = "Hostname"
    hostname_value: str = ""
    exporter_pod: str = ""
    stale_owner: tuple[str, str, str] | None = None
    extra_labels: dict[str, str] = field(default_factory=dict)  # e.g. the exporter's dra_* labels (B25)


def _uid(*parts: object) -> str:
    h = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
