"""`gpuwaste doctor`: probe a Prometheus for every signal the detectors read, tell "never exported" from "exported
but stale", say what each detector falls back to, and print the dcgm-exporter CSV lines and Helm values that
would enable what is missing; the same for the kube-state-metrics series and label/annotation allow-lists a
Prometheus-only scan reads its cluster state from. Its exit code gates CI (see `EXIT_CODES`).

Every check is a function `(Probe) -> list[CheckRow]` listed in `CHECKS`: add a check by appending one. The
signal diagnosis (`diagnose`) is pure: series counts (and newest sample times) in, a report out.
Everything printed is in users' words with links to public documentation.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from gpuwaste.cli_support import app, check_prometheus_url, fail, out, parse_time
from gpuwaste.errors import GpuWasteError
from gpuwaste.models.signals import Signal
from gpuwaste.models.text import for_json

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

#: A cloud's own GPU metric families a Prometheus may hold where no dcgm-exporter runs (GKE system metrics read through
#: Google Cloud Managed Service for Prometheus: `kubernetes.io/container/accelerator/*` as `kubernetes_io:container_accelerator_*`,
#: duty cycle in percent, memory in bytes, keyed by `namespace_name`/`pod_name`). The duty cycle is a lower-confidence
#: idle signal for pods without DCGM series (`detectors.managed`; no per-GPU activity profile, no power, 60 s samples):
#: `doctor` names them and recommends DCGM.
CLOUD_GPU_METRICS: dict[str, tuple[str, ...]] = {
    "GKE system metrics": ("kubernetes_io:container_accelerator_duty_cycle", "kubernetes_io:container_accelerator_memory_used",
                           "kubernetes_io:container_accelerator_request"),
}


RATE = ":rate"

#: dcgm-exporter counters-CSV line per DCGM field (format: field, Prometheus type, help).
CSV_LINES: dict[str, str] = {
    Signal.SM_ACTIVE.value: "DCGM_FI_PROF_SM_ACTIVE,          gauge, The ratio of cycles an SM has at least 1 warp assigned.",
    Signal.GR_ENGINE_ACTIVE.value: "DCGM_FI_PROF_GR_ENGINE_ACTIVE,   gauge, Ratio of time the graphics engine is active.",
    Signal.GPU_UTIL.value: "DCGM_FI_DEV_GPU_UTIL,            gauge, GPU utilization (in %).",
    Signal.TENSOR_ACTIVE.value: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.",
    Signal.DRAM_ACTIVE.value: "DCGM_FI_PROF_DRAM_ACTIVE,        gauge, Ratio of cycles the device memory interface is active sending or receiving data.",
    Signal.MEM_COPY_UTIL.value: "DCGM_FI_DEV_MEM_COPY_UTIL,       gauge, Memory utilization (in %).",
    Signal.FB_USED.value: "DCGM_FI_DEV_FB_USED,             gauge, Framebuffer memory used (in MiB).",
    Signal.FB_FREE.value: "DCGM_FI_DEV_FB_FREE,             gauge, Framebuffer memory free (in MiB).",
    Signal.POWER_USAGE.value: "DCGM_FI_DEV_POWER_USAGE,         gauge, Power draw (in W).",
    Signal.POWER_LIMIT.value: "DCGM_FI_DEV_ENFORCED_POWER_LIMIT, gauge, Effective power limit that the driver enforces (in W).",
    Signal.POWER_MGMT_LIMIT.value: "DCGM_FI_DEV_POWER_MGMT_LIMIT,    gauge, Power management limit (in W).",
    Signal.TOTAL_ENERGY.value: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).",
}

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
    "container_cpu_": ("cAdvisor (kubelet /metrics/cadvisor): kube-prometheus-stack `kubelet.serviceMonitor.cAdvisor: true`; "
                       f"CFS counters exist only for containers with a CPU limit ({DOCS['cadvisor']})"),
    "vllm:": f"if you run vLLM: scrape each server's /metrics (PodMonitor on the serving port); both KV gauge names are read ({DOCS['vllm']})",
    "tgi_": f"if you run TGI: scrape each server's /metrics (PodMonitor on the serving port) ({DOCS['tgi']})",
    "nv_inference_": f"if you run Triton: scrape its metrics port 8002 (PodMonitor) ({DOCS['triton']})",
}

#: What a detector does without a signal (signal → consequence), beyond "cannot judge".
FALLBACKS: dict[str, str] = {
    Signal.SM_ACTIVE.value: ("activity falls back to GR_ENGINE_ACTIVE, then GPU_UTIL ÷ 100 (coarse: any running kernel counts "
                             "as busy, and GPU_UTIL reads 0 on MIG instances)"),
    Signal.POWER_LIMIT.value: "power is compared with the bundled per-model board limit from the GPU catalog (confidence one grade lower)",
    Signal.POWER_MGMT_LIMIT.value: "same as the enforced limit: the bundled per-model board limit is used",
    Signal.FB_FREE.value: "GPU memory size comes from the node's GFD nvidia.com/gpu.memory label",
    "vllm:kv_cache_usage_perc": "the deprecated vllm:gpu_cache_usage_perc is read instead (vLLM before 0.7)",
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc is read instead",
}


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
    """One line of the doctor's verdict: a check, its status ("ok", "warn", "fail"), what was seen, what to do,
    and where the public documentation is."""

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
        codes = {c.exit_code for c in self.checks}
        return 1 if 1 in codes else (4 if 4 in codes else 0)


def _registry() -> dict[str, DetectorSpec]:
    from gpuwaste.detectors import REGISTRY

    return REGISTRY


def probe_names() -> list[str]:
    """Every metric name to probe: each signal any detector declares (counters without the `:rate` key suffix),
    plus the energy counter the data-quality checks read; DCGM fields first, in `Signal` order."""
    names: dict[str, None] = {}
    for spec in _registry().values():
        for n in (*spec.needs_any, *spec.optional):
            names[n.removesuffix(RATE)] = None
    names[Signal.TOTAL_ENERGY.value] = None
    order = {sig.value: i for i, sig in enumerate(Signal)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


#: Metrics that are alternatives of each other: one present means none of the others is missing.
ALTERNATIVES: tuple[frozenset[str], ...] = (
    frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}),
    frozenset({Signal.POWER_LIMIT.value, Signal.POWER_MGMT_LIMIT.value}),
)


def diagnose(counts: dict[str, int], labels: dict[str, int] | None = None, *,
             newest: dict[str, datetime] | None = None, at: datetime | None = None, strict: bool = False) -> DoctorReport:
    """Turn series counts per metric name into the doctor's report (pure).

    Args:
        counts: metric name → number of series at the probe time (0 when absent).
        labels: label checks → series count (e.g. "pod" / "exported_pod" on DCGM series, "GPU_I_ID").
        newest: metric name → its newest sample within `HISTORY_S`, for metrics with no series at the probe time
            (those are stale, not missing: the fix is to restart the export, not to enable it).
        at: the probe time (for "N min before the probe"). strict: every detector's signals are needed, not only
            `CORE_DETECTORS`'.
    """
    newest = newest or {}
    present = {n for n, c in counts.items() if c > 0}
    for group in ALTERNATIVES:
        if group & present:
            present |= group
    stale = {n for n in newest if n not in present}
    for group in ALTERNATIVES:
        if group & stale:
            stale |= group - present
    families = {k for k in POD_FIXES if any(n.startswith(k) for n in present)}
    signals = []
    for name in probe_names():
        fix = ""
        if name in stale:
            fix = STALE_FIX
        elif name not in present:
            family = next((k for k in POD_FIXES if name.startswith(k)), None)
            if family is None:
                fix = CSV_LINES.get(name, "")
            elif family not in families:
                fix = POD_FIXES[family]
        state = "present" if name in present else ("stale" if name in stale else "missing")
        seen = newest.get(name)
        signals.append(SignalStatus(name, counts.get(name, 0), name in present, fix, state,
                                    seen.isoformat() if seen is not None else None))
    detectors = []
    checks: list[CheckRow] = []
    for spec in _registry().values():
        needs = [n.removesuffix(RATE) for n in spec.needs_any]
        optional = [n.removesuffix(RATE) for n in spec.optional]
        missing_opt = [n for n in optional if n not in present]
        notes = [f"{n} missing: {FALLBACKS[n]}" for n in missing_opt if n in FALLBACKS]
        needed = strict or spec.name in CORE_DETECTORS
        if needs and not any(n in present for n in needs):
            old = [n for n in needs if n in stale]
            if old:
                when = max((newest[n] for n in old if n in newest), default=None)
                ago = f" ({_ago(when, at)})" if when is not None else ""
                detectors.append(DetectorStatus(spec.name, "stale", needs,
                                                [f"series exist but are stale: newest sample at {_when(when)}{ago}"]))
                checks.append(CheckRow(f"detector {spec.name}", "fail" if needed else "warn",
                                       f"its signals ({', '.join(old)}) stopped: newest sample at {_when(when)}{ago}",
                                       STALE_FIX, DOCS["dcgm-exporter"], 4 if needed else 0))
                continue
            detectors.append(DetectorStatus(spec.name, "off", needs, [f"needs one of: {', '.join(needs)}"]))
            checks.append(CheckRow(f"detector {spec.name}", "fail" if needed else "warn",
                                   f"off: none of {', '.join(needs)} has ever been exported (last {HISTORY_S // 86400} days)",
                                   _enable_fix(needs), _doc_for(needs[0]), 1 if needed else 0))
            continue
        activity = [s.value for s in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)]
        uses_activity = any(a in needs + optional for a in activity)
        if uses_activity and Signal.SM_ACTIVE.value not in present and Signal.SM_ACTIVE.value not in missing_opt:
            missing_opt.append(Signal.SM_ACTIVE.value)
            notes.append(f"{Signal.SM_ACTIVE.value} missing: {FALLBACKS[Signal.SM_ACTIVE.value]}")
        status = "degraded" if notes else "ok"
        detectors.append(DetectorStatus(spec.name, status, missing_opt, notes))
    csv = [CSV_LINES[s.name] for s in signals if s.state == "missing" and s.name in CSV_LINES]
    pod = sorted({fix for s in signals if s.state == "missing" and (fix := s.fix) and s.name not in CSV_LINES})
    for d in detectors:
        if d.status == "degraded":
            checks.append(CheckRow(f"detector {d.name}", "warn", "runs degraded: " + "; ".join(d.notes), "",
                                   _doc_for(d.missing[0]) if d.missing else ""))
    return DoctorReport(signals, sorted(detectors, key=lambda d: d.name), csv, pod, dict(labels or {}),
                        sorted(checks, key=lambda c: (-c.exit_code, c.status != "fail", c.check)))


#: What to do about a signal whose series stopped (the Helm values would be the wrong fix: it was exported).
STALE_FIX = ("the series were exported and stopped: check that the dcgm-exporter pods run (kubectl get pods -A -l "
             "app=nvidia-dcgm-exporter) and that Prometheus still scrapes them (its /targets page)")


def _when(t: datetime | None) -> str:
    from gpuwaste.people import when

    return when(t) if t is not None else "unknown"


def _ago(t: datetime, at: datetime | None) -> str:
    from gpuwaste.people import age

    return f"{age(t, at)} before the probe" if at is not None else ""


def _doc_for(name: str) -> str:
    if name.startswith("DCGM_FI_"):
        return DOCS["dcgm-fields"]
    for prefix, doc in (("container_cpu_", "cadvisor"), ("vllm:", "vllm"), ("tgi_", "tgi"), ("nv_inference_", "triton")):
        if name.startswith(prefix):
            return DOCS[doc]
    return DOCS["dcgm-exporter"]


def _enable_fix(needs: list[str]) -> str:
    first = needs[0]
    if first.startswith("DCGM_FI_"):
        return "add one of them to the dcgm-exporter counters CSV (lines and Helm values below)"
    family = next((k for k in POD_FIXES if first.startswith(k)), None)
    return POD_FIXES[family] if family else ""


def check_signals(probe: Probe) -> list[CheckRow]:
    """The signal check: series counts now, and the newest sample of those not current (stale vs never)."""
    return probe.report().checks


def check_labels(probe: Probe) -> list[CheckRow]:
    """The label checks: which label carries the workload on DCGM series (pod, or exported_pod)."""
    labels = probe.labels()
    rows = []
    pod = labels.get("DCGM series with pod label", 0)
    exported = labels.get("DCGM series with exported_pod label (scraped with honorLabels: false)", 0)
    if pod == 0 and exported == 0:
        rows.append(CheckRow("workload labels", "warn", "no DCGM series carries a pod label: GPUs are tied to pods only where a "
                             "node has one GPU pod", "enable the pod mapping of dcgm-exporter (DCGM_EXPORTER_KUBERNETES=true, "
                             "the default in the GPU Operator)", DOCS["dcgm-exporter"]))
    elif exported and not pod:
        rows.append(CheckRow("workload labels", "ok", f"{exported} series carry exported_pod (read automatically)",
                             "", DOCS["honor-labels"]))
    else:
        rows.append(CheckRow("workload labels", "ok", f"{pod} series carry pod and namespace"))
    return rows


def check_dcgm_names(probe: Probe) -> list[CheckRow]:
    """Which name each DCGM field is exported under (DCGM 3.x, 4.x, 1.x or lower-cased; `models.telemetry.DCGM_ALIASES`),
    and a warning for a field exported under two names at once (a second counters CSV: every sample stored twice)."""
    probe.report()
    raw, aliases = probe.raw_counts, probe.aliases
    renamed: list[str] = []
    doubled: list[str] = []
    for canonical, names in aliases.items():
        if not canonical.startswith("DCGM_FI_"):
            continue
        used = [n for n in names if raw.get(n, 0) > 0]
        if len({n.lower() for n in used}) > 1:
            doubled.append(f"{canonical} as {' and '.join(used)}")
        elif used and used[0].lower() != canonical.lower():
            renamed.append(f"{used[0]} (read as {canonical})")
    rows = []
    if doubled:
        rows.append(CheckRow("DCGM field names", "warn", "exported under two names at once: " + "; ".join(doubled)
                             + " (gpuwaste reads the copies as one GPU's; Prometheus stores every sample twice)",
                             "keep one row per field in the dcgm-exporter counters CSV", DOCS["dcgm-exporter"]))
    if renamed:
        rows.append(CheckRow("DCGM field names", "ok", "other names read: " + ", ".join(renamed)))
    return rows


def check_cloud_gpu_metrics(probe: Probe) -> list[CheckRow]:
    """A cloud's own GPU metrics (`CLOUD_GPU_METRICS`) in the Prometheus: with no DCGM activity field, say that they are
    read as a lower-confidence idle signal only and recommend DCGM; beside DCGM, that DCGM is the one read."""
    probe.report()  # probes the signals once
    dcgm = sum(probe.raw_counts.get(n, 0) for s in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)
               for n in probe.aliases.get(s.value, (s.value,)))
    rows = []
    for family, names in CLOUD_GPU_METRICS.items():
        query = "count({__name__=~\"" + "|".join(names) + "\"})"
        result = probe.source.instant_query(query, at=probe.at, what=f"doctor {family}")
        found = int(float(result[0]["value"][1])) if result else 0
        if not found:
            continue
        if dcgm:
            rows.append(CheckRow("cloud GPU metrics", "ok", f"{found} {family} series ({', '.join(names)}) beside DCGM: the "
                                 "DCGM fields are read"))
        else:
            rows.append(CheckRow("cloud GPU metrics", "warn", f"{found} {family} series ({', '.join(names)}) but no DCGM "
                                 "activity field: the duty cycle is read as a lower-confidence idle signal only (managed_gpu_idle, "
                                 "LOW confidence: sampled once a minute, no SM, tensor, power or memory-bandwidth profile; "
                                 "missing or stale is never idle)",
                                 "deploy dcgm-exporter or enable the cloud's managed DCGM metrics", DOCS["gke-dcgm"]))
    return rows


class Probe:
    """What the checks read: one Prometheus at one time (answers cached, so checks can share them)."""

    def __init__(self, source: Any, at: datetime | None, *, strict: bool = False) -> None:
        self.source = source
        self.at = at
        self.strict = strict
        self._report: DoctorReport | None = None
        self._labels: dict[str, int] | None = None
        self.ksm: KsmStatus | None = None
        self.aliases: dict[str, tuple[str, ...]] = {}  # probed metric → every name it is read under (`counts`)
        self.raw_counts: dict[str, int] = {}  # series per name, each alias apart (`counts`)

    def counts(self) -> dict[str, int]:
        """Series per probed metric at the probe time (aliases of one signal counted together)."""
        from gpuwaste.sources.metrics_plan import spec_for

        aliases = {n: (spec.names if (spec := spec_for(n)) else (n,)) for n in probe_names()}
        raw = self.source.probe([a for names in aliases.values() for a in names], at=self.at)
        self.aliases = aliases
        self.raw_counts = raw
        return {n: sum(raw.get(a, 0) for a in names) for n, names in aliases.items()}  # DCGM 4.6 / 1.x names count too

    def newest(self, names: list[str]) -> dict[str, datetime]:
        """The newest sample time of each metric in the last HISTORY_S (only metrics that have one)."""
        from datetime import UTC

        found: dict[str, datetime] = {}
        for name in names:
            selector = "|".join(getattr(self, "aliases", {}).get(name, (name,)))
            query = f'max(max_over_time(timestamp({{__name__=~"{selector}"}})[{HISTORY_S}s:5m]))'
            result = self.source.instant_query(query, at=self.at, what="doctor newest sample")
            if result:
                found[name] = datetime.fromtimestamp(float(result[0]["value"][1]), tz=UTC)
        return found

    def labels(self) -> dict[str, int]:
        """Series per label check (LABEL_CHECKS)."""
        if self._labels is None:
            self._labels = {}
            for label, query in LABEL_CHECKS.items():
                result = self.source.instant_query(query, at=self.at, what="doctor label")
                self._labels[label] = int(float(result[0]["value"][1])) if result else 0
        return self._labels

    def report(self) -> DoctorReport:
        """The signal diagnosis (probed once)."""
        if self._report is None:
            counts = self.counts()
            missing = [n for n, c in counts.items() if c == 0]
            at = self.at
            if at is None:
                from datetime import UTC

                at = datetime.now(UTC)
            self._report = diagnose(counts, self.labels(), newest=self.newest(missing), at=at, strict=self.strict)
        return self._report


#: The check row that says dcgm-exporter is not scraped at all (`check_dcgm_scraped`).
NOT_SCRAPED = "dcgm-exporter"
#: PromQL: scrape targets that look like dcgm-exporter (its job, service or pod name), up or down.
DCGM_TARGETS = 'count(up{job=~".*dcgm.*"} or up{service=~".*dcgm.*"} or up{pod=~".*dcgm.*"})'


def dcgm_never_seen(report: DoctorReport) -> bool:
    """No DCGM field the doctor probes has a series, fresh or stale, in the last `HISTORY_S` (dcgm-exporter is not
    scraped by this Prometheus at all, or exports nothing)."""
    dcgm = [s for s in report.signals if s.name.startswith("DCGM_")]
    return bool(dcgm) and all(s.state == "missing" for s in dcgm)


def check_dcgm_scraped(probe: Probe) -> list[CheckRow]:
    """One row, first, when no DCGM series exists at all: dcgm-exporter is not scraped (no target), or its targets
    are scraped and export no DCGM field; what to do for each. No row when DCGM series exist."""
    if not dcgm_never_seen(probe.report()):
        return []
    result = probe.source.instant_query(DCGM_TARGETS, at=probe.at, what="doctor dcgm targets")
    targets = int(float(result[0]["value"][1])) if result else 0
    days = HISTORY_S // 86400
    if targets:
        return [CheckRow(NOT_SCRAPED, "fail", f"dcgm-exporter is scraped ({targets} target{'s' if targets != 1 else ''}) "
                         f"but exported no DCGM series in the last {days} days, so no GPU can be judged",
                         "check the exporter's log and its counters CSV (kubectl logs -A -l app=nvidia-dcgm-exporter), "
                         "and that the targets are up on Prometheus's /targets page", DOCS["dcgm-exporter"], 1)]
    return [CheckRow(NOT_SCRAPED, "fail", f"dcgm-exporter is not scraped by this Prometheus at all: no DCGM series in "
                     f"the last {days} days and no dcgm-exporter scrape target, so no GPU can be judged",
                     "deploy dcgm-exporter (the NVIDIA GPU Operator runs it by default) and have this Prometheus scrape "
                     "it: Helm value dcgmExporter.serviceMonitor.enabled=true (GPU Operator) or serviceMonitor.enabled="
                     "true (dcgm-exporter chart), or a scrape job for its port 9400; then run gpuwaste doctor again",
                     DOCS["dcgm-exporter"], 1)]


#: The doctor's checks, in order: each reads the probe and returns its rows (other checks append here).
CHECKS: list[Callable[[Probe], list[CheckRow]]] = [check_dcgm_scraped, check_signals, check_labels, check_dcgm_names,
                                                   check_cloud_gpu_metrics]


LABEL_CHECKS: dict[str, str] = {
    "DCGM series with pod label": 'count({__name__=~"DCGM_FI_.*", pod!="", namespace!=""})',
    "DCGM series with exported_pod label (scraped with honorLabels: false)": 'count({__name__=~"DCGM_FI_.*", exported_pod!=""})',
    "MIG instance series (GPU_I_ID)": 'count({__name__=~"DCGM_FI_.*", GPU_I_ID!=""})',
    "DCGM series with lower-case hostname (dcgm-exporter 4.x renamed Hostname)": 'count({__name__=~"DCGM_FI_.*", hostname!=""})',
}


#: Indents of the doctor's notes under a detector and of the fix/docs lines under a to-do item.
NOTE = " " * 11
HINT_INDENT = " " * 7


def _heading(title: str, url: str) -> None:
    """A bold heading with its documentation URL: on one line when it fits, else the URL whole on its own line."""
    if len(title) + len(url) + 3 <= (out.width or 80):
        out.print(Text.assemble((title, "bold"), f" ({url})"), soft_wrap=True)
    else:
        out.print(Text(title, style="bold"), soft_wrap=True)
        out.print(Text(url), soft_wrap=True)


def render(report: DoctorReport, checks: list[CheckRow] | None = None) -> None:
    """Print the report for people: the verdict first (and again under "to do"), then signals, labels, detectors
    and what to do; text fits the terminal, broken at spaces, and every URL stays whole on a line (a terminal wraps
    a long one itself)."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    rows = checks if checks is not None else report.checks
    code = verdict_code(rows)
    problems = [c for c in rows if c.status != "ok"]
    headline = next((c for c in rows if c.check == NOT_SCRAPED), None) or next(
        (c for c in rows if c.check == NO_CLUSTER_STATE), None)
    not_scraped = headline if headline is not None and headline.check == NOT_SCRAPED else None
    verdict = f"verdict: exit {code}: {EXIT_CODES[code] if headline is None else headline.detail}"
    first = verdict
    if problems:
        first += f" ({len(problems)} thing{'s' if len(problems) != 1 else ''} to do, listed at the end)"
    print_fitted(out, first, style="bold " + ("green" if code == 0 else "red"), breaks=PROSE)
    out.print("[bold]signals[/] (series at the probe time)")
    for s in report.signals:
        if s.state == "present":
            mark, note = "[green]✓[/]", f"{s.series:6d}"
        elif s.state == "stale":
            mark, note = "[yellow]~[/]", f"stale: newest sample at {_when(datetime.fromisoformat(s.newest)) if s.newest else '?'}"
        else:
            mark, note = "[red]✗[/]", "never exported"
        if 4 + 45 + 1 + len(note) <= (out.width or 80):
            out.print(f"  {mark} ", Text(f"{s.name:45} {note}"), sep="", highlight=False, soft_wrap=True)
        else:  # the note under the name, so neither is folded
            out.print(f"  {mark} ", Text(s.name), sep="", highlight=False, soft_wrap=True)
            print_fitted(out, note, first=NOTE, indent=NOTE, breaks=PROSE)
    if report.labels:
        out.print("[bold]labels[/]")
        for k, v in report.labels.items():
            out.print(Text(f"  {k}: {v} series"), highlight=False)
    out.print("[bold]detectors[/]")
    for d in report.detectors:
        style = {"ok": "green", "degraded": "yellow", "stale": "yellow", "off": "red"}[d.status]
        out.print(f"  [{style}]{d.status:8}[/] {d.name}", highlight=False)
        for n in d.notes:
            print_fitted(out, n, first=NOTE, indent=NOTE, style="dim", breaks=PROSE)
    if report.csv_lines and not_scraped is None:  # with no exporter scraped, its CSV is not the fix
        _heading("add to the dcgm-exporter counters CSV", DOCS["dcgm-fields"])
        for line in report.csv_lines:
            out.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
        _heading("Helm values", DOCS["gpu-operator"])
        out.print(report.helm_values, highlight=False, soft_wrap=True, markup=False)
    if report.pod_fixes:
        out.print("[bold]pod-level series[/]")
        for line in report.pod_fixes:
            print_fitted(out, line, first="  ", indent="    ", breaks=PROSE)
    if problems:
        out.print("[bold]to do[/]")
        for c in problems:
            style = "red" if c.status == "fail" else "yellow"
            print_fitted(out, f"{c.status:4} {c.check}: {c.detail}", first="  ", indent=NOTE, style=style,
                         breaks=PROSE)
            if c.fix:
                print_fitted(out, f"fix: {c.fix}", first=HINT_INDENT, indent=HINT_INDENT + "  ", breaks=PROSE)
            if c.link:
                print_fitted(out, f"docs: {c.link}", first=HINT_INDENT, indent=HINT_INDENT, style="dim", breaks=PROSE)
    print_fitted(out, verdict, style="bold " + ("green" if code == 0 else "red"), breaks=PROSE)


def verdict_code(rows: list[CheckRow]) -> int:
    """The exit code of a list of check rows (1 never exported, before 4 stale, else 0)."""
    codes = {c.exit_code for c in rows}
    return 1 if 1 in codes else (4 if 4 in codes else 0)


class DoctorOutput(StrEnum):
    """Output formats of doctor."""

    table = "table"
    json = "json"


# -- kube-state-metrics (cluster state from Prometheus) --------------------------------------------------------
#: KSM series the cluster state reads → what is lost without them ("" for series whose absence can be normal).
KSM_SERIES: dict[str, str] = {
    "kube_pod_info": "no pod nodes or IPs: exporter pods cannot be joined by IP",
    "kube_pod_status_phase": "no phases: finished pods count as holding their GPUs",
    "kube_pod_container_resource_limits": "no GPU requests (nor the v1 …_nvidia_gpu_devices): without the Kubernetes API no GPU is tied to a pod",
    "kube_pod_container_resource_requests": "",  # the limits carry GPU requests (extended resources: request = limit)
    "kube_pod_owner": "no owners: findings name pods, not their Deployment/Job",
    "kube_pod_start_time": "no start times: a pod's age (young pods are not judged) is unknown",
    "kube_pod_completion_time": "",
    "kube_pod_labels": "no pod labels",
    "kube_pod_annotations": "no pod annotations: routing annotations and snoozes are not seen",
    "kube_pod_container_info": "no container images: serving engines are not recognised by image",
    "kube_replicaset_owner": "ReplicaSet → Deployment inferred from names (collector `replicasets` off)",
    "kube_job_owner": "Job → CronJob inferred from names (collector `jobs` off, or no Jobs exist)",
    "kube_node_labels": "no node labels: instance type (pricing), capacity type, GFD labels unknown",
    "kube_node_status_allocatable": "no node GPU allocatable: unallocated GPUs counted from DCGM only",
    "kube_node_status_capacity": "",
    "kube_node_info": "no provider IDs or internal IPs: exporters naming an instance id are not placed",
    "kube_namespace_labels": "",
    "kube_namespace_annotations": "no namespace annotations: team routing by namespace annotation is off",
}
#: KSM v1 per-resource names that stand in for the v2 ones.
KSM_V1_ALIASES: dict[str, str] = {
    "kube_pod_container_resource_limits": "kube_pod_container_resource_limits_nvidia_gpu_devices",
    "kube_pod_container_resource_requests": "kube_pod_container_resource_requests_nvidia_gpu_devices",
    "kube_node_status_allocatable": "kube_node_status_allocatable_nvidia_gpu_cards",
    "kube_node_status_capacity": "kube_node_status_capacity_nvidia_gpu_cards",
}


@dataclass
class KsmStatus:
    """What kube-state-metrics exports of what the cluster state reads."""

    series: dict[str, int]
    missing: dict[str, str]
    keys: dict[str, int]
    missing_keys: list[str]
    helm_values: str

    @property
    def usable(self) -> bool:
        """Whether a Prometheus-only scan can tie GPUs to pods (pods, phases and GPU requests exported)."""
        return all(self.series.get(n, 0) > 0 for n in ("kube_pod_info", "kube_pod_status_phase")) and (
            self.series.get("kube_pod_container_resource_limits", 0) + self.series.get("kube_pod_container_resource_requests", 0) > 0)


def ksm_key_checks() -> dict[str, str]:
    """"<kind> <resource> <key>" → PromQL counting the series that carry that allow-listed label or annotation."""
    from gpuwaste.sources.ksm import ALLOWLIST, sanitize

    metric = {"nodes": "kube_node_labels", "pods": "kube_pod_labels", "namespaces": "kube_namespace_labels"}
    out = {}
    for kind, per_resource in ALLOWLIST.items():
        prefix = "label_" if kind == "labels" else "annotation_"
        for resource, keys in per_resource.items():
            name = metric[resource] if kind == "labels" else metric[resource].replace("_labels", "_annotations")
            for key in keys:
                out[f"{kind} {resource} {key}"] = f'count({name}{{{prefix}{sanitize(key)}!=""}})'
    return out


def diagnose_ksm(series: dict[str, int], keys: dict[str, int]) -> KsmStatus:
    """Series counts and allow-listed key counts → what is missing, what it costs, and the Helm values (pure)."""
    from gpuwaste.sources.ksm import helm_values

    merged = {n: series.get(n, 0) + series.get(KSM_V1_ALIASES.get(n, ""), 0) for n in KSM_SERIES}
    missing = {n: cost for n, cost in KSM_SERIES.items() if cost and merged[n] == 0}
    missing_keys = sorted(k for k, c in keys.items() if c == 0)
    kinds = [kind for kind in ("labels", "annotations") if any(k.startswith(kind + " ") for k in missing_keys)]
    return KsmStatus(merged, missing, dict(keys), missing_keys, helm_values(kinds) if (kinds or missing) else "")


def probe_ksm(source, when) -> KsmStatus:  # type: ignore[no-untyped-def]
    """Probe a Prometheus for the KSM series and allow-listed keys (`source`: a `PrometheusGpuMetricsSource`).

    Raises:
        GpuWasteError: from the Prometheus client.
    """
    series = source.probe([*KSM_SERIES, *KSM_V1_ALIASES.values()], at=when)
    keys = {}
    for key, query in ksm_key_checks().items():
        result = source.instant_query(query, at=when, what="doctor kube-state-metrics")
        keys[key] = int(float(result[0]["value"][1])) if result else 0
    return diagnose_ksm(series, keys)


def render_ksm(status: KsmStatus) -> None:
    """Print the kube-state-metrics section for people."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    out.print("[bold]kube-state-metrics[/] (cluster state without Kubernetes access)")
    for name, count in status.series.items():
        mark = "[green]✓[/]" if count else ("[red]✗[/]" if name in status.missing else "[dim]–[/]")
        out.print(f"  {mark} {name:45} {count:6d}", highlight=False)
        if name in status.missing:
            print_fitted(out, status.missing[name], first=NOTE, indent=NOTE, style="dim", breaks=PROSE)
    verdict = "a Prometheus-only scan can tie GPUs to pods" if status.usable else "a Prometheus-only scan cannot tie GPUs to pods"
    out.print(f"  {verdict}", highlight=False)
    if status.missing_keys:
        out.print(f"[bold]allow-listed labels/annotations missing[/] ({len(status.missing_keys)} of {len(status.keys)})")
        for k in status.missing_keys:
            out.print(f"  ✗ {k}", highlight=False, markup=False)
    if status.helm_values:
        out.print("[bold]kube-state-metrics Helm values[/]")
        out.print(status.helm_values, highlight=False, soft_wrap=True, markup=False)


#: The check row that says no cluster state can be read from this Prometheus (`check_ksm`).
NO_CLUSTER_STATE = "cluster state"
#: The KSM series a scan's pods and nodes come from: none of them in `HISTORY_S` = no cluster state (`check_ksm`).
KSM_CLUSTER_SERIES = ("kube_pod_info", "kube_pod_status_phase", "kube_node_info", "kube_node_labels")


def check_ksm(probe: Probe) -> list[CheckRow]:
    """The kube-state-metrics check: can a Prometheus-only scan (no Kubernetes access) tie GPUs to pods?

    A warning where some series are missing (with Kubernetes API access the scan does not need them); a failure
    (exit 1, `NO_CLUSTER_STATE`, named in the verdict line) where DCGM series exist but no kube-state-metrics series
    at all: a scan of this Prometheus alone then judges nothing ("nothing judged: no cluster state"), whether or not
    the DCGM series carry pod labels (pods and nodes come from kube-state-metrics or the Kubernetes API).
    """
    probe.ksm = status = probe_ksm(probe.source, probe.at)
    if (not any(status.series.values()) and not dcgm_never_seen(probe.report())
            and not probe.newest(["|".join(KSM_CLUSTER_SERIES)])):  # stale KSM (series in HISTORY_S) is the warning below
        labels = probe.labels()
        pods = labels.get("DCGM series with pod label", 0) + labels.get(
            "DCGM series with exported_pod label (scraped with honorLabels: false)", 0)
        detail = ("no cluster state can be read from this Prometheus: no kube-state-metrics series and "
                  + ("no pod labels on the DCGM series" if not pods else "only pod labels on the DCGM series (no nodes, "
                     "phases or GPU requests)")
                  + ", so a scan of this Prometheus alone judges nothing: give the scan --kubeconfig, or "
                  "kube-state-metrics in this Prometheus, or --cluster-json FILE")
        return [CheckRow(NO_CLUSTER_STATE, "fail", detail,
                         "give the scan --kubeconfig (Kubernetes API access), or install kube-state-metrics scraped by "
                         "this Prometheus (Helm values below), or pass --cluster-json FILE (`kubectl get pods,nodes -A "
                         "-o json`)", DOCS["kube-state-metrics"], 1)]
    renamed = probe.source.instant_query('count(kube_pod_info{exported_pod!=""})', at=probe.at, what="doctor KSM labels")
    family = []
    if renamed and float(renamed[0]["value"][1]) > 0:
        family = [CheckRow("kube-state-metrics labels", "ok", f"{int(float(renamed[0]['value'][1]))} kube_pod_info series name their pod "
                           "in exported_namespace/exported_pod (KSM scraped with honorLabels: false; namespace/pod name the KSM "
                           "pod): read automatically", "", DOCS["honor-labels"])]
    if status.usable and not status.missing:
        return [CheckRow("kube-state-metrics", "ok", "pods, phases, GPU requests, owners and node labels are exported"), *family]
    detail = ("a Prometheus-only scan can tie GPUs to pods, but " if status.usable else "a Prometheus-only scan cannot tie GPUs to pods: ") + (
        "missing " + ", ".join(sorted(status.missing)) if status.missing else "some allow-listed labels are missing")
    return [CheckRow("kube-state-metrics", "warn", detail, "apply the kube-state-metrics Helm values printed below "
                     "(or give gpuwaste Kubernetes API access)", DOCS.get("kube-state-metrics", "")), *family]


CHECKS.append(check_ksm)


# -- attribution coverage: GPUs requested by running pods that DCGM ties to them (issue 21 §12) --------------------
_GPU_ASKED = ('sum by (namespace, pod) (max by (namespace, pod, container, resource) ({__name__=~"kube_pod_container_'
              'resource_(limits|requests)", resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"}))'
              ' and on (namespace, pod) (kube_pod_status_phase{phase="Running"} == 1)')
_DCGM_PODS = ('(count by (namespace, pod) ({__name__=~"DCGM_FI_.*", pod!="", namespace!=""}) or count by (namespace, pod) ('
              'label_replace(label_replace({__name__=~"DCGM_FI_.*", exported_pod!=""}, "pod", "$1", "exported_pod", "(.+)"),'
              ' "namespace", "$1", "exported_namespace", "(.+)")))')
#: PromQL: GPUs requested by running pods (kube-state-metrics), and those of pods some DCGM series names.
COVERAGE_QUERIES: dict[str, str] = {
    "requested": f"sum({_GPU_ASKED})",
    "attributed": f"sum(({_GPU_ASKED}) and on (namespace, pod) {_DCGM_PODS})",
}
#: Under this share of requested GPUs with DCGM series naming their pod, the coverage check warns.
COVERAGE_WARN = 0.9


def check_coverage(probe: Probe) -> list[CheckRow]:
    """The attribution coverage now: the share of GPUs requested by running pods (kube-state-metrics) whose pod some
    DCGM series names (`pod`, or `exported_pod`) — the figure `gpuwaste scan` reports over its window. No row
    without kube-state-metrics GPU requests."""
    got: dict[str, float] = {}
    for name, query in COVERAGE_QUERIES.items():
        result = probe.source.instant_query(query, at=probe.at, what="doctor attribution coverage")
        got[name] = float(result[0]["value"][1]) if result else 0.0
    requested, attributed = got["requested"], got["attributed"]
    if requested <= 0:
        return []
    ratio = min(1.0, attributed / requested)
    detail = (f"{ratio:.0%} of {requested:g} GPUs requested by running pods have DCGM series naming their pod"
              + ("" if ratio >= COVERAGE_WARN else f" ({requested - attributed:g} GPUs allocated without attributable telemetry)"))
    if ratio >= COVERAGE_WARN:
        return [CheckRow("attribution coverage", "ok", detail)]
    return [CheckRow("attribution coverage", "warn", detail,
                     "check the dcgm-exporter pod mapping on the nodes of those pods (DCGM_EXPORTER_KUBERNETES=true, the "
                     "pod-resources socket mounted; after a GPU Operator upgrade, its MIG/DRA mapping), and that every GPU "
                     "node runs dcgm-exporter", DOCS["dcgm-exporter"])]


CHECKS.append(check_coverage)


@app.command()
def doctor(
    prometheus: Annotated[str, typer.Option("--prometheus", "-p", help="Prometheus base URL.", envvar="GPUWASTE_PROMETHEUS_URL")],
    at: Annotated[str | None, typer.Option("--at", help="Probe time (RFC 3339 or unix seconds); default: the server's now.")] = None,
    output: Annotated[DoctorOutput, typer.Option("--output", "-o", help="table for people; json for machines.")] = DoctorOutput.table,
    as_json: Annotated[bool, typer.Option("--json", hidden=True, help="Old name of -o json.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 1/4) when any detector's signals are missing, not only the core ones (idle, under-used, unallocated).")] = False,
) -> None:
    """Check that Prometheus has the signals the detectors need: fresh, stale or never exported, and how to fix it.

    Exit codes: 0 ok; 1 a needed signal was never exported, or no cluster state can be read (DCGM series but no
    kube-state-metrics: a scan of this Prometheus alone judges nothing); 2 usage error; 3 Prometheus unreachable;
    4 needed signals exist but are stale (the exporter or the scrape stopped).
    """
    from gpuwaste.models.settings import PrometheusSettings
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    check_prometheus_url(prometheus)
    when = parse_time(at)
    try:
        source = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=prometheus), cluster="doctor")
        probe = Probe(source, when, strict=strict)
        rows = [row for check in CHECKS for row in check(probe)]
        report = probe.report()
        rules = source.rules_status(at=when)
    except GpuWasteError as exc:
        message = str(exc)
        hint = "" if "check the url" in message.lower() else "\nCheck the URL and that Prometheus is reachable."
        fail(message + hint, code=3)
    code = verdict_code(rows)
    if as_json or output is DoctorOutput.json:
        doc = {**asdict(report), "checks": [asdict(r) for r in rows], "helm_values": report.helm_values, "exit_code": code,
               "recording_rules": rules, "dcgm_scraped": not any(r.check == NOT_SCRAPED for r in rows)}
        if probe.ksm is not None:
            doc["kube_state_metrics"] = {**asdict(probe.ksm), "usable": probe.ksm.usable}
        sys.stdout.write(json.dumps(for_json(doc), indent=1) + "\n")  # label values from Prometheus: no controls
    else:
        render(report, rows)
        if probe.ksm is not None:
            render_ksm(probe.ksm)
        render_rules(rules)
    if code:
        raise typer.Exit(code)


def render_rules(rules: dict[str, object]) -> None:
    """One line on the shipped recording rules (`PrometheusGpuMetricsSource.rules_status`)."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    if rules["installed"] and rules.get("outdated"):
        print_fitted(out, f"recording rules ! version {rules['version']} installed, version {rules['current_version']} is current: "
                     "scans still read their 5-minute buckets, at a larger read; update deploy/prometheus-rules.yaml (Prometheus "
                     "Operator) or deploy/prometheus/gpuwaste-recording-rules.yml (rule_files)", indent="  ", style="yellow",
                     breaks=PROSE)
    elif rules["installed"]:
        print_fitted(out, f"recording rules ✓ installed (version {rules['version']}, {rules['evaluations_last_hour']}/"
                     f"{rules['expected_last_hour']} evaluations in the last hour): scans read their 5-minute buckets",
                     indent="  ", style="green", breaks=PROSE)
    else:
        print_fitted(out, "recording rules ✗ not installed: scans query the raw series (slower at fleet scale); install "
                     "deploy/prometheus-rules.yaml (Prometheus Operator) or deploy/prometheus/gpuwaste-recording-rules.yml "
                     "(rule_files)", indent="  ", style="yellow", breaks=PROSE)


__all__ = ["CHECKS", "CSV_LINES", "EXIT_CODES", "CheckRow", "DetectorStatus", "DoctorReport", "KsmStatus", "Probe",
           "SignalStatus", "check_ksm", "diagnose", "diagnose_ksm", "doctor", "probe_ksm", "probe_names"]
