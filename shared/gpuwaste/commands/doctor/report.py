"""`gpuwaste doctor`'s signal diagnosis (pure): series counts and newest sample times in, a report out.

It tells "never exported" from "exported but stale", says what each detector falls back to, and names the
dcgm-exporter counters-CSV lines and Helm values that would enable what is missing. The signal names are the
one copy in `gpuwaste.models.signals`; each detector's are those its registry entry declares. Everything in the
report is in users' words with links to public documentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from gpuwaste.models.signals import Signal

if TYPE_CHECKING:
    from gpuwaste.detectors.registry import DetectorSpec


#: Exit codes of `gpuwaste doctor` (documented in docs/cli.md), so it can gate CI.
EXIT_CODES = {
    0: "every signal the main detectors need is exported and fresh (some detectors may run degraded)",
    1: "a needed signal has never been exported: enable it (the CSV lines and Helm values are printed); or no cluster "
       "state can be read from this Prometheus (no kube-state-metrics series)",
    2: "a usage error (bad option or URL)",
    3: "Prometheus cannot be reached",
    4: "needed signals exist but are stale: the exporter or the scrape stopped (newest sample printed)",
}
#: Detectors whose signals `doctor` requires (exit 1/4 when none of their signals is there); `--strict`: all.
CORE_DETECTORS = ("idle_allocation", "underused_allocation", "unallocated_capacity")
#: A signal whose newest sample is older than this (seconds) before the probe time is stale.
STALE_AFTER_S = 300
#: How far back doctor looks for a signal that is not current (seconds): found there = stale, else never exported.
HISTORY_S = 7 * 86400

DOCS = {
    "dcgm-exporter": "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html",
    "dcgm-fields": "https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html",
    "gpu-operator": "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html",
    "honor-labels": "https://prometheus.io/docs/prometheus/latest/configuration/configuration/#scrape_config",
    "targets": "https://prometheus.io/docs/prometheus/latest/getting_started/",
    "cadvisor": "https://github.com/google/cadvisor/blob/master/docs/storage/prometheus.md",
    "vllm": "https://docs.vllm.ai/en/latest/usage/metrics.html",
    "tgi": "https://huggingface.co/docs/text-generation-inference/reference/metrics",
    "triton": "https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/metrics.html",
    "mig": "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/",
    "kube-state-metrics": "https://github.com/kubernetes/kube-state-metrics/tree/main/docs",
    "gke-dcgm": "https://cloud.google.com/stackdriver/docs/managed-prometheus/exporters/nvidia-dcgm",
}

#: A cloud's own GPU metric families a Prometheus may hold where no dcgm-exporter runs.
#:
#: GKE system metrics read through Google Cloud Managed Service for Prometheus: `kubernetes.io/container/accelerator/*`
#: as `kubernetes_io:container_accelerator_*`, duty cycle in percent, memory in bytes, keyed by
#: `namespace_name`/`pod_name`. The duty cycle is a lower-confidence idle signal for pods without DCGM series
#: (`detectors.managed`; no per-GPU activity profile, no power, 60 s samples): `doctor` names them and recommends DCGM.
CLOUD_GPU_METRICS: dict[str, tuple[str, ...]] = {
    "GKE system metrics": ("kubernetes_io:container_accelerator_duty_cycle",
                           "kubernetes_io:container_accelerator_memory_used",
                           "kubernetes_io:container_accelerator_request"),
}

#: The key suffix a detector gives a counter it reads as a rate (the metric itself is probed).
RATE = ":rate"

#: Each DCGM field's Prometheus type and help in the dcgm-exporter counters CSV.
_CSV_FIELDS: dict[Signal, tuple[str, str]] = {
    Signal.SM_ACTIVE: ("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    Signal.GR_ENGINE_ACTIVE: ("gauge", "Ratio of time the graphics engine is active."),
    Signal.GPU_UTIL: ("gauge", "GPU utilization (in %)."),
    Signal.TENSOR_ACTIVE: ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    Signal.DRAM_ACTIVE: ("gauge", "Ratio of cycles the device memory interface is active sending or receiving data."),
    Signal.MEM_COPY_UTIL: ("gauge", "Memory utilization (in %)."),
    Signal.FB_USED: ("gauge", "Framebuffer memory used (in MiB)."),
    Signal.FB_FREE: ("gauge", "Framebuffer memory free (in MiB)."),
    Signal.POWER_USAGE: ("gauge", "Power draw (in W)."),
    Signal.POWER_LIMIT: ("gauge", "Effective power limit that the driver enforces (in W)."),
    Signal.POWER_MGMT_LIMIT: ("gauge", "Power management limit (in W)."),
    Signal.TOTAL_ENERGY: ("counter", "Total energy consumption since boot (in mJ)."),
}
#: dcgm-exporter counters-CSV line per DCGM field (format: field, Prometheus type, help), the name column aligned.
CSV_LINES: dict[str, str] = {sig.value: f"{sig.value + ',':32} {kind}, {text}"
                             for sig, (kind, text) in _CSV_FIELDS.items()}

HELM_VALUES = """\
# 1. put the lines above (with the rows you already export) into a counters CSV, as a ConfigMap:
#      kubectl -n gpu-operator create configmap custom-dcgm-metrics --from-file=dcgm-metrics.csv
# 2a. NVIDIA GPU Operator (values.yaml):
dcgmExporter:
  config:
    name: custom-dcgm-metrics
  env:
    - name: DCGM_EXPORTER_COLLECTORS
      value: /etc/dcgm-exporter/dcgm-metrics.csv
# 2b. standalone dcgm-exporter chart: mount the ConfigMap and pass it with
#      arguments: ["-f", "/etc/dcgm-exporter/dcgm-metrics.csv"]"""

#: How to get the pod-level series, per prefix.
POD_FIXES: dict[str, str] = {
    "container_cpu_": ("cAdvisor (kubelet /metrics/cadvisor): kube-prometheus-stack `kubelet.serviceMonitor.cAdvisor: "
                       f"true`; CFS counters exist only for containers with a CPU limit ({DOCS['cadvisor']})"),
    "vllm:": ("if you run vLLM: scrape each server's /metrics (PodMonitor on the serving port); both KV gauge names "
              f"are read ({DOCS['vllm']})"),
    "tgi_": f"if you run TGI: scrape each server's /metrics (PodMonitor on the serving port) ({DOCS['tgi']})",
    "nv_inference_": f"if you run Triton: scrape its metrics port 8002 (PodMonitor) ({DOCS['triton']})",
}

#: What a detector does without a signal (signal → consequence), beyond "cannot judge".
FALLBACKS: dict[str, str] = {
    Signal.SM_ACTIVE.value: ("activity falls back to GR_ENGINE_ACTIVE, then GPU_UTIL ÷ 100 (coarse: any running kernel "
                             "counts as busy, and GPU_UTIL reads 0 on MIG instances)"),
    Signal.POWER_LIMIT.value: ("power is compared with the bundled per-model board limit from the GPU catalog "
                               "(confidence one grade lower)"),
    Signal.POWER_MGMT_LIMIT.value: "same as the enforced limit: the bundled per-model board limit is used",
    Signal.FB_FREE.value: "GPU memory size comes from the node's GFD nvidia.com/gpu.memory label",
    "vllm:kv_cache_usage_perc": "the deprecated vllm:gpu_cache_usage_perc is read instead (vLLM before 0.7)",
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc is read instead",
}

#: What to do about a signal whose series stopped (the Helm values would be the wrong fix: it was exported).
STALE_FIX = ("the series were exported and stopped: check that the dcgm-exporter pods run (kubectl get pods -A -l "
             "app=nvidia-dcgm-exporter) and that Prometheus still scrapes them (its /targets page)")

#: Metrics that are alternatives of each other: one present means none of the others is missing.
ALTERNATIVES: tuple[frozenset[str], ...] = (
    frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}),
    frozenset({Signal.POWER_LIMIT.value, Signal.POWER_MGMT_LIMIT.value}),
)
#: The activity signals, best first (a detector reading any of them falls back along this order).
_ACTIVITY = tuple(s.value for s in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL))


@dataclass
class SignalStatus:
    """One probed metric: its series count (canonical name and aliases together).

    Attributes:
        state: "present" (series at the probe time), "stale" (series in the last `HISTORY_S`, none now) or
            "missing" (never exported in that time). newest: the newest sample of a stale signal (UTC).
    """

    name: str
    series: int
    present: bool
    fix: str = ""
    state: str = "present"
    newest: str | None = None


@dataclass
class DetectorStatus:
    """What one detector can do with the signals present."""

    name: str
    status: str  # "ok", "degraded", "stale" or "off"
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckRow:
    """One line of the doctor's verdict.

    Attributes:
        check: what was checked. status: the verdict ("ok", "warn", "fail"). detail: what was seen.
        fix: what to do (the advice). link: where the public documentation is. exit_code: see `EXIT_CODES`.
    """

    check: str
    status: str
    detail: str
    fix: str = ""
    link: str = ""
    exit_code: int = 0


@dataclass
class DoctorReport:
    """The diagnosis of one Prometheus."""

    signals: list[SignalStatus]
    detectors: list[DetectorStatus]
    csv_lines: list[str]
    pod_fixes: list[str]
    labels: dict[str, int]
    checks: list[CheckRow] = field(default_factory=list)

    @property
    def helm_values(self) -> str:
        """The Helm values that load a custom counters CSV (empty when no CSV line is needed)."""
        return HELM_VALUES if self.csv_lines else ""

    @property
    def exit_code(self) -> int:
        """The worst exit code of the checks (see `EXIT_CODES`): 1 (never exported) before 4 (stale)."""
        return verdict_code(self.checks)


def verdict_code(rows: list[CheckRow]) -> int:
    """The exit code of a list of check rows (1 never exported, before 4 stale, else 0)."""
    codes = {c.exit_code for c in rows}
    return 1 if 1 in codes else (4 if 4 in codes else 0)


def _registry() -> dict[str, DetectorSpec]:
    from gpuwaste.detectors import REGISTRY

    return REGISTRY


def probe_names() -> list[str]:
    """Every metric name to probe, DCGM fields first, in `Signal` order.

    Each signal any detector declares (counters without the `:rate` key suffix), plus the energy counter the
    data-quality checks read.
    """
    names: dict[str, None] = {}
    for spec in _registry().values():
        for n in (*spec.needs_any, *spec.optional):
            names[n.removesuffix(RATE)] = None
    names[Signal.TOTAL_ENERGY.value] = None
    order = {sig.value: i for i, sig in enumerate(Signal)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


@dataclass(frozen=True)
class _Seen:
    """What the probe saw: metrics with series now (`present`), metrics with older series only (`stale`)."""

    present: set[str]
    stale: set[str]
    newest: dict[str, datetime]
    at: datetime | None

    @classmethod
    def of(cls, counts: dict[str, int], newest: dict[str, datetime], at: datetime | None) -> _Seen:
        present = {n for n, c in counts.items() if c > 0}
        for group in ALTERNATIVES:
            if group & present:
                present |= group
        stale = {n for n in newest if n not in present}
        for group in ALTERNATIVES:
            if group & stale:
                stale |= group - present
        return cls(present, stale, newest, at)


def diagnose(counts: dict[str, int], labels: dict[str, int] | None = None, *, newest: dict[str, datetime] | None = None,
             at: datetime | None = None, strict: bool = False) -> DoctorReport:
    """Turn series counts per metric name into the doctor's report (pure).

    Args:
        counts: metric name → number of series at the probe time (0 when absent).
        labels: label checks → series count (e.g. "pod" / "exported_pod" on DCGM series, "GPU_I_ID").
        newest: metric name → its newest sample within `HISTORY_S`, for metrics with no series at the probe time
            (those are stale, not missing: the fix is to restart the export, not to enable it).
        at: the probe time (for "N min before the probe").
        strict: every detector's signals are needed, not only `CORE_DETECTORS`'.
    """
    seen = _Seen.of(counts, newest or {}, at)
    signals = [_signal_status(name, counts, seen) for name in probe_names()]
    detectors: list[DetectorStatus] = []
    checks: list[CheckRow] = []
    for spec in _registry().values():
        status, row = _detector_status(spec, seen, needed=strict or spec.name in CORE_DETECTORS)
        detectors.append(status)
        if row is not None:
            checks.append(row)
    csv = [CSV_LINES[s.name] for s in signals if s.state == "missing" and s.name in CSV_LINES]
    pod = sorted({fix for s in signals if s.state == "missing" and (fix := s.fix) and s.name not in CSV_LINES})
    for d in detectors:
        if d.status == "degraded":
            checks.append(CheckRow(f"detector {d.name}", "warn", "runs degraded: " + "; ".join(d.notes), "",
                                   _doc_for(d.missing[0]) if d.missing else ""))
    return DoctorReport(signals, sorted(detectors, key=lambda d: d.name), csv, pod, dict(labels or {}),
                        sorted(checks, key=lambda c: (-c.exit_code, c.status != "fail", c.check)))


def _signal_status(name: str, counts: dict[str, int], seen: _Seen) -> SignalStatus:
    """One probed metric's line: present, stale or missing, and what would enable it."""
    fix = ""
    if name in seen.stale:
        fix = STALE_FIX
    elif name not in seen.present:
        family = next((k for k in POD_FIXES if name.startswith(k)), None)
        if family is None:
            fix = CSV_LINES.get(name, "")
        elif not any(n.startswith(family) for n in seen.present):
            fix = POD_FIXES[family]
    state = "present" if name in seen.present else ("stale" if name in seen.stale else "missing")
    newest = seen.newest.get(name)
    return SignalStatus(name, counts.get(name, 0), name in seen.present, fix, state,
                        newest.isoformat() if newest is not None else None)


def _detector_status(spec: DetectorSpec, seen: _Seen, *, needed: bool) -> tuple[DetectorStatus, CheckRow | None]:
    """What one detector can do with what the probe saw, and the check row when it cannot run (`needed`: fail)."""
    needs = [n.removesuffix(RATE) for n in spec.needs_any]
    optional = [n.removesuffix(RATE) for n in spec.optional]
    if needs and not any(n in seen.present for n in needs):
        old = [n for n in needs if n in seen.stale]
        if old:
            when = max((seen.newest[n] for n in old if n in seen.newest), default=None)
            ago = f" ({_ago(when, seen.at)})" if when is not None else ""
            return (DetectorStatus(spec.name, "stale", needs,
                                   [f"series exist but are stale: newest sample at {when_text(when)}{ago}"]),
                    CheckRow(f"detector {spec.name}", "fail" if needed else "warn",
                             f"its signals ({', '.join(old)}) stopped: newest sample at {when_text(when)}{ago}",
                             STALE_FIX, DOCS["dcgm-exporter"], 4 if needed else 0))
        return (DetectorStatus(spec.name, "off", needs, [f"needs one of: {', '.join(needs)}"]),
                CheckRow(f"detector {spec.name}", "fail" if needed else "warn",
                         f"off: none of {', '.join(needs)} has ever been exported (last {HISTORY_S // 86400} days)",
                         _enable_fix(needs), _doc_for(needs[0]), 1 if needed else 0))
    missing = [n for n in optional if n not in seen.present]
    notes = [f"{n} missing: {FALLBACKS[n]}" for n in missing if n in FALLBACKS]
    sm = Signal.SM_ACTIVE.value
    if any(a in needs + optional for a in _ACTIVITY) and sm not in seen.present and sm not in missing:
        missing.append(sm)
        notes.append(f"{sm} missing: {FALLBACKS[sm]}")
    return DetectorStatus(spec.name, "degraded" if notes else "ok", missing, notes), None


def dcgm_never_seen(report: DoctorReport) -> bool:
    """No DCGM field the doctor probes has a series, fresh or stale, in the last `HISTORY_S`.

    dcgm-exporter is not scraped by this Prometheus at all, or exports nothing.
    """
    dcgm = [s for s in report.signals if s.name.startswith("DCGM_")]
    return bool(dcgm) and all(s.state == "missing" for s in dcgm)


def when_text(t: datetime | None) -> str:
    """A sample time in people's words ("unknown" for None)."""
    from gpuwaste.people import when

    return when(t) if t is not None else "unknown"



def _ago(t: datetime, at: datetime | None) -> str:
    from gpuwaste.people import age

    return f"{age(t, at)} before the probe" if at is not None else ""


#: Metric-name prefix → its documentation (`DOCS` key).
_DOC_PREFIXES = (("container_cpu_", "cadvisor"), ("vllm:", "vllm"), ("tgi_", "tgi"), ("nv_inference_", "triton"))


def _doc_for(name: str) -> str:
    if name.startswith("DCGM_FI_"):
        return DOCS["dcgm-fields"]
    for prefix, doc in _DOC_PREFIXES:
        if name.startswith(prefix):
            return DOCS[doc]
    return DOCS["dcgm-exporter"]


def _enable_fix(needs: list[str]) -> str:
    first = needs[0]
    if first.startswith("DCGM_FI_"):
        return "add one of them to the dcgm-exporter counters CSV (lines and Helm values below)"
    family = next((k for k in POD_FIXES if first.startswith(k)), None)
    return POD_FIXES[family] if family else ""
