"""KSM facts.

`KsmSample` (one series as the builder needs it), the per-pod and per-node facts gathered from the series, and the
small conversions of KSM values (times, counts, prefixed labels, owners).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from gpuwaste.errors import InputFormatError
from gpuwaste.models.dra import PodClaimRef
from gpuwaste.sources.ksm.vocabulary import CONTROLLER_CREATED


class KsmSample(NamedTuple):
    """One KSM series as the builder needs it (a named tuple: a fleet has a hundred thousand of them).

    Attributes:
        name: metric name.
        labels: its labels (without `__name__`).
        value: the last value in the window.
        last_ms: when it was last seen, Unix ms; None when it is still exported at the evaluation time.
    """

    name: str
    labels: Mapping[str, str]
    value: float
    last_ms: int | None = None


@dataclass(slots=True)
class _PodFacts:
    uid: str = ""
    node: str = ""
    pod_ip: str = ""
    host_ip: str = ""
    phase: str = ""
    phase_ms: int = -1
    gone_ms: int | None = None
    seen: bool = False
    owners: list[dict[str, Any]] = field(default_factory=list)
    start: float | None = None
    completion: float | None = None
    created: float | None = None
    deletion: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    # (init?, container) → {"limits"|"requests": {resource: quantity}}
    resources: dict[tuple[bool, str], dict[str, dict[str, float]]] = field(default_factory=dict)
    has_gpu: bool = False
    claims: dict[str, PodClaimRef] = field(default_factory=dict)  # pod-local claim name → its reference (DRA)


@dataclass(slots=True)
class _NodeFacts:
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)
    allocatable: dict[str, float] = field(default_factory=dict)
    provider_id: str = ""
    internal_ip: str = ""
    created: float | None = None
    unschedulable: bool = False
    exported: bool = False  # a node series still exported at the evaluation time
    last_ms: int = 0  # the newest last sample of its series that are no longer exported

    def seen(self, last: int | None) -> None:
        """One of the node's own series (info, capacity, allocatable), last seen at `last` (None: still exported)."""
        if last is None:
            self.exported = True
        elif last > self.last_ms:
            self.last_ms = last


def _time(seconds: float | None) -> datetime | None:
    """A KSM timestamp value (Unix seconds) as a UTC time to the second, as the API gives it; None when unset (≤ 0)."""
    if seconds is None or seconds <= 0:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=0)


def _count(value: float, where: str) -> int:
    """A GPU quantity from a KSM value (the API's rule: a whole number of units; fractions truncated)."""
    if not math.isfinite(value):
        raise InputFormatError(f"{where}: GPU quantity must be an integer, got {value!r}")
    return int(value)


def _prefixed(labels: Mapping[str, str], prefix: str, table: Mapping[str, str]) -> dict[str, str]:
    n = len(prefix)
    return {table.get(k[n:], k[n:]): v for k, v in labels.items() if v != "" and k.startswith(prefix)}


def _owner(kind: str, name: str, controller: str) -> dict[str, Any] | None:
    if not kind or kind == "<none>" or not name or name == "<none>":
        return None
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1" if kind in CONTROLLER_CREATED else ""  # KSM has no group
    return {"apiVersion": group, "kind": kind, "name": name, "controller": controller == "true"}
