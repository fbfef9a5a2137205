"""Models: waste findings, their evidence, and their price.

A finding's identity (fingerprint) is cluster + namespace + workload + kind (+ node for node-level
kinds), so the same waste seen in later scans updates one lifecycle record.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated

from pydantic import BeforeValidator, Field, computed_field

from gpuwaste.models.base import Frozen


class WasteKind(StrEnum):
    """What kind of waste a finding reports."""

    IDLE = "idle_allocation"
    UNDERUSED = "underused_allocation"
    UNALLOCATED = "unallocated_capacity"
    DATA_QUALITY = "data_quality"
    POWER_ANOMALY = "power_anomaly"
    LOW_MEMORY_BANDWIDTH = "low_memory_bandwidth"
    STALLED = "stalled"
    WRONG_HARDWARE = "wrong_hardware"
    CPU_BOUND = "cpu_bound"
    KV_CACHE_PRESSURE = "kv_cache_pressure"
    INFERENCE_IDLE = "inference_idle"
    ORPHANED = "orphaned"
    UNREQUESTED_USE = "unrequested_use"  # governance: a GPU is busy although no pod requested it (no waste money)

    @property
    def is_waste(self) -> bool:
        """False for data-quality findings (missing knowledge) and governance findings (a GPU used without a
        request: used, not wasted), which carry no money."""
        return self not in (WasteKind.DATA_QUALITY, WasteKind.UNREQUESTED_USE)


#: Kind values that are no waste and carry no money (data quality, governance).
NOT_WASTE_KINDS: frozenset[str] = frozenset(k.value for k in WasteKind if not k.is_waste)


class Confidence(StrEnum):
    """How strongly the evidence supports the finding."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class IdleMode(StrEnum):
    """Why an idle GPU is idle (practitioner taxonomy: rack2cloud; NVIDIA waste table)."""

    BATCH = "batch_idle"
    INFERENCE = "inference_idle"
    PROVISIONING = "provisioning_idle"
    IDLE_HELD = "idle_held"


class Attribution(StrEnum):
    """How the GPUs of a finding were tied to their workload."""

    LABELS = "labels"  # dcgm-exporter pod/exported_pod labels
    ELIMINATION = "elimination"  # the only GPU pod on the node, counts match (field guide B01)
    ALLOCATION = "allocation"  # the allocation names the device (DRA claim, HAMi annotation, KAI reservation pod)
    UNKNOWN = "unknown"  # node-level only
    NODE = "node"  # the finding is about the node itself (unallocated capacity)


class Evidence(Frozen):
    """One signal's numbers behind a finding.

    Attributes:
        signal: DCGM field or metric name (e.g. DCGM_FI_PROF_SM_ACTIVE).
        unit: unit of avg/p95/max/threshold: "ratio" (0–1), "percent", "MiB", "W", "mJ", "count".
        coverage: share 0–1 of the window with samples.
        threshold: the value compared against, in `unit`; `comparison` says how ("avg < 0.05").
    """

    signal: str
    unit: str
    window_s: int
    avg: float | None = None
    p95: float | None = None
    max: float | None = None
    min: float | None = None
    max_avg_10m: float | None = None
    samples: int = 0
    coverage: float = Field(0.0, ge=0.0, le=1.0)
    threshold: float | None = None
    comparison: str = ""
    note: str = ""


class GpuRef(Frozen):
    """A device named in a finding."""

    uuid: str
    gpu_i_id: str | None = None
    mig_profile: str | None = None
    model_name: str | None = None


class Episode(Frozen):
    """A stretch of the window in which the finding's GPUs were wasted (idle, stalled, under-used, unheld).

    Attributes:
        start, end: the stretch (UTC), inside the scan window, on bucket edges.
        wasted_gpu_hours: physical GPU-hours wasted in the stretch (share wasted × hours).
        ongoing: True when the stretch reaches the evaluation time (the waste is still going on).
    """

    start: datetime
    end: datetime
    wasted_gpu_hours: Decimal = Decimal(0)
    ongoing: bool = False


class Subject(Frozen):
    """Who and what a finding is about, with everything pricing needs (pricing runs without cluster access).

    Attributes:
        labels, annotations: the pod's (or node's); namespace_labels, namespace_annotations: its namespace's
            (owner routing reads both, workload first).
        gpu_share: physical-GPU equivalents held (MIG slice = N/7, time-slice replica = 1/replicas).
        physical_gpus_on_node: distinct DCGM UUIDs seen on the node.
        region: the node's `topology.kubernetes.io/region` (regional prices differ).
        accelerator: GKE `cloud.google.com/gke-accelerator` (N1 nodes price attached GPUs per GPU).
        owner_exists: False when the workload named here (the pod's top owner) is known to be gone, None when
            unknown or not looked up (advice then names the pod, never the missing owner).
    """

    cluster: str
    namespace: str | None = None
    workload_kind: str | None = None
    workload_name: str | None = None
    pod: str | None = None
    node: str | None = None
    gpus: tuple[GpuRef, ...] = ()
    gpu_model: str | None = None
    gpu_share: Decimal = Decimal(0)
    instance_type: str | None = None
    capacity_type: str | None = None
    region: str | None = None
    accelerator: str | None = None
    physical_gpus_on_node: int | None = None
    attribution: Attribution = Attribution.LABELS
    owner_exists: bool | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    namespace_annotations: dict[str, str] = Field(default_factory=dict)


class Cost(Frozen):
    """The price of a finding.

    Attributes:
        usd_per_gpu_hour: USD per physical GPU-hour from the price book (None when unpriced).
        wasted_gpu_share: physical-GPU equivalents wasted.
        usd_per_day: USD/day = usd_per_gpu_hour × wasted_gpu_share × 24 (None when unpriced, never 0 by default).
        usd_in_window: USD = usd_per_gpu_hour × the finding's wasted GPU-hours in its window (None when unpriced).
        formula: the formula with its numbers, for a reader to check.
        source, effective_date: where the price comes from and the date it was published.
    """

    priced: bool
    usd_per_gpu_hour: Decimal | None = None
    wasted_gpu_share: Decimal
    usd_per_day: Decimal | None = None
    usd_in_window: Decimal | None = None
    formula: str
    basis: str = ""
    source: str = ""
    effective_date: str = ""
    warnings: tuple[str, ...] = ()


def _drop(_value: object) -> None:
    return None


class Finding(Frozen):
    """One piece of waste (or one data-quality problem) seen by one detector in one scan.

    Attributes:
        wasted_gpu_share: physical-GPU equivalents wasted (what the price is multiplied by).
        observed_at: the scan's evaluation time (UTC). window_s: the window the evidence covers.
        scope_key: extra identity for node- or device-level findings (node name, device, sub-kind).
        episodes: the stretches of the window in which the waste happened (oldest first). When the source did
            not resolve time, or the verdict holds for the whole observed span, that span is the one episode; empty
            for findings without waste money (data quality, governance, sizing).
        wasted_gpu_hours: physical GPU-hours wasted inside the window (sum over episodes).
        observed_s: seconds of the window covered by evidence (what confidence and ticketing rest on; 0: not
            measured).
        money_owner: fingerprint of another finding of the same scan that owns the money for the same
            GPU-hours (this finding then carries no money of its own: each GPU-hour is priced once).
    """

    kind: WasteKind
    detector: str
    subject: Subject
    title: str
    recommendation: str
    evidence: tuple[Evidence, ...] = ()
    confidence: Confidence = Confidence.MEDIUM
    idle_mode: IdleMode | None = None
    observed_at: datetime
    window_s: int
    wasted_gpu_share: Decimal = Decimal(0)
    scope_key: str = ""
    cost: Cost | None = None
    episodes: tuple[Episode, ...] = ()
    wasted_gpu_hours: Decimal = Decimal(0)
    observed_s: int = Field(0, ge=0)
    money_owner: str | None = None
    details: dict[str, str | float | int | bool | None] = Field(default_factory=dict)
    #: the `fingerprint` a dumped finding carries, accepted back and dropped (it is computed, never input): a finding
    #: reads its own JSON without a before-validator on the message around it, which would make pydantic build the
    #: whole input as Python objects first (twice the parse time of every queue hop)
    fingerprint_echo_: Annotated[None, BeforeValidator(_drop)] = Field(None, validation_alias="fingerprint", exclude=True,
                                                                      repr=False)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fingerprint(self) -> str:
        """sha256 of cluster, namespace, workload, kind and scope key, joined by an explicit separator."""
        s = self.subject
        parts = (
            self.kind.value,
            s.cluster,
            s.namespace or "-",
            s.workload_kind or "-",
            s.workload_name or "-",
            self.scope_key or "-",
        )
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()

    @property
    def usd_per_day(self) -> Decimal | None:
        """USD/day when priced."""
        return self.cost.usd_per_day if self.cost and self.cost.priced else None

    def with_cost(self, cost: Cost) -> Finding:
        """Return a copy carrying `cost`."""
        return self.model_copy(update={"cost": cost})
