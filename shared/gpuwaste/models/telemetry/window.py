"""The telemetry of one scan window: per physical GPU or MIG instance (`GpuTelemetry`), per pod, and the window.

A device is a UUID (plus GPU_I_ID for a MIG instance); its series are attributed to the pods the labels name.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from gpuwaste.models.base import Frozen
from gpuwaste.models.dra import DraDeviceLabels
from gpuwaste.models.signals import Signal
from gpuwaste.models.telemetry.stats import TelemetryProblem, WindowStats


class DeviceId(Frozen):
    """A physical GPU (UUID) or a MIG GPU instance on it (UUID + GPU_I_ID)."""

    uuid: str
    gpu_i_id: str | None = None

    def __str__(self) -> str:
        return f"{self.uuid}/{self.gpu_i_id}" if self.gpu_i_id else self.uuid


class AttributedSeries(Frozen):
    """The signals of one device while one workload label set was attached to it.

    Attributes:
        pod, namespace, container: workload labels the exporter attached (None when absent or empty).
        label_family: "pod" or "exported_pod" — which labels carried the workload (field guide B02).
        signals: DCGM field name → window summary.
    """

    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    label_family: str | None = None
    signals: dict[str, WindowStats] = Field(default_factory=dict)


class GpuTelemetry(Frozen):
    """Everything the window shows about one device (physical GPU or MIG instance).

    Attributes:
        hostname: the exporter's `Hostname`/`hostname` label (a node name, an exporter pod name or
            an EC2 instance id; field guide B03).
        parent_signals: on a MIG instance, the whole-GPU signals of its physical GPU.
        is_mig_parent: True for the whole-GPU entity of a GPU split into MIG instances (not allocatable).
        groups: one entry per distinct workload label set seen on the device in the window (B10).
        dra: the distinct `dra_*` label sets seen on the device (claim, driver, pool, device; field guide B25);
            empty when the exporter runs without DRA attribution.
    """

    device: DeviceId
    gpu_index: str | None = None
    model_name: str | None = None
    mig_profile: str | None = None
    hostname: str | None = None
    instances: tuple[str, ...] = ()
    groups: tuple[AttributedSeries, ...] = ()
    parent_signals: dict[str, WindowStats] = Field(default_factory=dict)
    is_mig_parent: bool = False
    dra: tuple[DraDeviceLabels, ...] = ()

    def merged(self, signal: Signal | str) -> WindowStats | None:
        """The signal over the whole window, all label groups merged; None when never sampled.

        On a MIG instance, whole-GPU signals (power, energy) come from the parent GPU, counted once (B06).
        """
        own = _merge_all(g.signals.get(str(signal)) for g in self.groups)
        return own if own is not None else self.parent_signals.get(str(signal))

    def for_workload(self, namespace: str, pod: str, signal: Signal | str) -> WindowStats | None:
        """The signal restricted to samples labelled with this pod; None when none."""
        return _merge_all(
            g.signals.get(str(signal)) for g in self.groups if g.pod == pod and g.namespace == namespace
        )

    @property
    def workloads(self) -> tuple[tuple[str, str], ...]:
        """(namespace, pod) pairs that appear in the labels of this device's series."""
        seen: dict[tuple[str, str], None] = {}
        for g in self.groups:
            if g.pod and g.namespace:
                seen[(g.namespace, g.pod)] = None
        return tuple(seen)


def _merge_all(items: object) -> WindowStats | None:
    out: WindowStats | None = None
    for s in items:  # type: ignore[attr-defined]
        if s is None:
            continue
        out = s if out is None else out.merge(s)
    return out


#: GKE system metric `kubernetes.io/container/accelerator/duty_cycle` as Google Cloud Managed Service for Prometheus names
#: it (the first "/" becomes ":", the others "_"): percent (0–100) of the sample period the container's accelerator was
#: busy, one series per container and accelerator, keyed by the monitored resource's `namespace_name` / `pod_name`
#: (https://cloud.google.com/monitoring/api/metrics_kubernetes, https://cloud.google.com/monitoring/promql/promql-mapping).
#: Read where no dcgm-exporter runs, as a lower-confidence activity signal (`detectors.managed`).
GKE_DUTY_CYCLE = "kubernetes_io:container_accelerator_duty_cycle"
#: The pod labels of a GKE system metric's monitored resource (k8s_container), read where `namespace`/`pod` are absent.
MANAGED_POD_LABELS = ("namespace_name", "pod_name")


class PodTelemetry(Frozen):
    """Pod-level series (container CPU, inference-server metrics) summarised over the window.

    Attributes:
        signals: metric name (e.g. `container_cpu_cfs_throttled_periods_total:rate`,
            `vllm:num_requests_running`) → window summary, every series of the pod merged (a data-parallel server's
            engines together: it serves when any engine serves).
        engines: for a server that exports one series per engine or rank (vLLM's `engine`, SGLang's `dp` / `dp_rank`
            label: `sources.metrics_plan.ENGINE_LABELS`), `"<label>=<value>"` → that engine's own summaries, keyed as
            `signals`; empty when the pod's series carry no such label.
    """

    namespace: str
    pod: str
    signals: dict[str, WindowStats] = Field(default_factory=dict)
    engines: dict[str, dict[str, WindowStats]] = Field(default_factory=dict)


class TelemetryWindow(Frozen):
    """The telemetry of one cluster over one window ending at the evaluation time.

    Attributes:
        eval_time: end of the window (the scheduled event's time, never the wall clock).
        window_s: window length (seconds). recent_s: the tail used for staleness (seconds).
        scrape_interval_s: seconds between samples, used for coverage: inferred from the data when
            `scrape_interval_inferred` (the median spacing of the time-resolved series, see
            `sources.metrics_plan.infer_spacing`), else the configured value.
        metrics_present: metric names that returned any data.
        query_count: PromQL queries issued (0 for recordings).
        single_instant: True when the source holds one sample per series (a bare /metrics scrape).
        bucket_s: width of `WindowStats.buckets` (seconds); None when the source did not resolve time.
        problems: samples or series the source could not use (counted, with where they are).
        plan: how the statistics were read: "recording rules" (the shipped rules' 5-minute series),
            "raw" (PromQL over the raw DCGM series) or "recording" (a file, in Python).
        other_gpus: UUIDs of GPUs seen only on DCGM fields the scan does not read (clocks, temperatures: no
            activity, memory or power field), sorted; counted in the inventory and reported, never judged.
        other_gpu_hosts: UUID of `other_gpus` → the exporter's hostname label on its series, where it carries one (a
            sharded scan counts each such GPU in the shard of its node: `services.shards.shard_telemetry`).
        xid_errors: GPU UUID → the XID error code `DCGM_FI_DEV_XID_ERRORS` last reported in the window (non-zero
            only; 79: the GPU fell off the bus), where the source reads it (recordings).
    """

    cluster: str
    eval_time: datetime
    window_s: int = Field(gt=0)
    recent_s: int = Field(600, gt=0)
    scrape_interval_s: float = Field(30.0, gt=0)
    scrape_interval_inferred: bool = False
    gpus: tuple[GpuTelemetry, ...] = ()
    pods: tuple[PodTelemetry, ...] = ()
    metrics_present: frozenset[str] = frozenset()
    query_count: int = 0
    source: str = ""
    single_instant: bool = False
    bucket_s: int | None = Field(None, gt=0)
    problems: tuple[TelemetryProblem, ...] = ()
    plan: str = ""
    other_gpus: tuple[str, ...] = ()
    other_gpu_hosts: dict[str, str] = Field(default_factory=dict)
    xid_errors: dict[str, int] = Field(default_factory=dict)

    @property
    def unreadable_samples(self) -> int:
        """Samples (or, live, buckets' samples) the source could not use, over every problem."""
        return sum(p.count for p in self.problems)

    @property
    def expected_samples(self) -> float:
        """Samples a fully covered window holds (window ÷ scrape interval)."""
        return self.window_s / self.scrape_interval_s

    def coverage(self, stats: WindowStats | None) -> float:
        """Share 0–1 of the window covered by samples (capped at 1; duplicates can exceed it)."""
        if stats is None:
            return 0.0
        return min(1.0, stats.count / self.expected_samples) if self.expected_samples else 0.0
