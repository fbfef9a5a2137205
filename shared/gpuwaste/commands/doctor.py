"""`gpuwaste doctor`: probe a Prometheus for every signal the detectors read, say what each detector falls back to,
and print the dcgm-exporter CSV lines and Helm values that would enable what is missing; the same for the
kube-state-metrics series and label/annotation allow-lists a Prometheus-only scan reads its cluster state from.

The diagnosis (`diagnose`) is pure: series counts in, a report out; the command only probes and prints.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Annotated

import typer

from gpuwaste.cli import app, check_prometheus_url, fail, out, parse_time
from gpuwaste.detectors import REGISTRY
from gpuwaste.errors import GpuWasteError
from gpuwaste.models.telemetry import Signal

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
                       "CFS counters exist only for containers with a CPU limit"),
    "vllm:": "if you run vLLM: scrape each server's /metrics (PodMonitor on the serving port); both KV gauge names are read",
    "tgi_": "if you run TGI: scrape each server's /metrics (PodMonitor on the serving port)",
    "nv_inference_": "if you run Triton: scrape its metrics port 8002 (PodMonitor)",
}

#: What a detector does without a signal (signal → consequence), beyond "cannot judge".
FALLBACKS: dict[str, str] = {
    Signal.SM_ACTIVE.value: "activity falls back to GR_ENGINE_ACTIVE, then GPU_UTIL ÷ 100 (coarse: any kernel counts, B15; 0 on MIG, B05)",
    Signal.POWER_LIMIT.value: "power is compared with the bundled per-model board limit from the GPU catalog (confidence one grade lower)",
    Signal.POWER_MGMT_LIMIT.value: "same as the enforced limit: the bundled per-model board limit is used",
    Signal.FB_FREE.value: "GPU memory size comes from the node's GFD nvidia.com/gpu.memory label",
    "vllm:kv_cache_usage_perc": "the deprecated vllm:gpu_cache_usage_perc is read instead (B16)",
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc is read instead",
}


@dataclass
class SignalStatus:
    """One probed metric: its series count (canonical name and aliases together)."""

    name: str
    series: int
    present: bool
    fix: str = ""


@dataclass
class DetectorStatus:
    """What one detector can do with the signals present."""

    name: str
    status: str  # "ok", "degraded" or "off"
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class DoctorReport:
    """The diagnosis of one Prometheus."""

    signals: list[SignalStatus]
    detectors: list[DetectorStatus]
    csv_lines: list[str]
    pod_fixes: list[str]
    labels: dict[str, int]

    @property
    def helm_values(self) -> str:
        """The Helm values that load a custom counters CSV (empty when no CSV line is needed)."""
        return HELM_VALUES if self.csv_lines else ""


def probe_names() -> list[str]:
    """Every metric name to probe: each signal any detector declares (counters without the `:rate` key suffix),
    plus the energy counter the data-quality checks read; DCGM fields first, in `Signal` order."""
    names: dict[str, None] = {}
    for spec in REGISTRY.values():
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


def diagnose(counts: dict[str, int], labels: dict[str, int] | None = None) -> DoctorReport:
    """Turn series counts per metric name into the doctor's report (pure).

    Args:
        counts: metric name → number of series at the probe time (0 when absent).
        labels: label checks → series count (e.g. "pod" / "exported_pod" on DCGM series, "GPU_I_ID").
    """
    present = {n for n, c in counts.items() if c > 0}
    for group in ALTERNATIVES:
        if group & present:
            present |= group
    families = {k for k in POD_FIXES if any(n.startswith(k) for n in present)}
    signals = []
    for name in probe_names():
        fix = ""
        if name not in present:
            family = next((k for k in POD_FIXES if name.startswith(k)), None)
            if family is None:
                fix = CSV_LINES.get(name, "")
            elif family not in families:
                fix = POD_FIXES[family]
        signals.append(SignalStatus(name, counts.get(name, 0), name in present, fix))
    detectors = []
    for spec in REGISTRY.values():
        needs = [n.removesuffix(RATE) for n in spec.needs_any]
        optional = [n.removesuffix(RATE) for n in spec.optional]
        missing_opt = [n for n in optional if n not in present]
        notes = [f"{n} missing: {FALLBACKS[n]}" for n in missing_opt if n in FALLBACKS]
        if needs and not any(n in present for n in needs):
            detectors.append(DetectorStatus(spec.name, "off", needs, [f"needs one of: {', '.join(needs)}"]))
            continue
        activity = [s.value for s in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)]
        uses_activity = any(a in needs + optional for a in activity)
        if uses_activity and Signal.SM_ACTIVE.value not in present and Signal.SM_ACTIVE.value not in missing_opt:
            missing_opt.append(Signal.SM_ACTIVE.value)
            notes.append(f"{Signal.SM_ACTIVE.value} missing: {FALLBACKS[Signal.SM_ACTIVE.value]}")
        status = "degraded" if notes else "ok"
        detectors.append(DetectorStatus(spec.name, status, missing_opt, notes))
    csv = [CSV_LINES[s.name] for s in signals if not s.present and s.name in CSV_LINES]
    pod = sorted({fix for s in signals if not s.present and (fix := s.fix) and s.name not in CSV_LINES})
    return DoctorReport(signals, sorted(detectors, key=lambda d: d.name), csv, pod, dict(labels or {}))


LABEL_CHECKS: dict[str, str] = {
    "DCGM series with pod label": 'count({__name__=~"DCGM_FI_.*", pod!="", namespace!=""})',
    "DCGM series with exported_pod label (honorLabels: false, B02)": 'count({__name__=~"DCGM_FI_.*", exported_pod!=""})',
    "MIG instance series (GPU_I_ID)": 'count({__name__=~"DCGM_FI_.*", GPU_I_ID!=""})',
    "DCGM series with hostname (renamed Hostname, B03)": 'count({__name__=~"DCGM_FI_.*", hostname!=""})',
}


def render(report: DoctorReport) -> None:
    """Print the report for people."""
    out.print("[bold]signals[/] (series at the probe time)")
    for s in report.signals:
        mark = "[green]✓[/]" if s.present else "[red]✗[/]"
        out.print(f"  {mark} {s.name:45} {s.series:6d}", highlight=False)
    if report.labels:
        out.print("[bold]labels[/]")
        for k, v in report.labels.items():
            out.print(f"  {k}: {v} series", highlight=False)
    out.print("[bold]detectors[/]")
    for d in report.detectors:
        style = {"ok": "green", "degraded": "yellow", "off": "red"}[d.status]
        out.print(f"  [{style}]{d.status:8}[/] {d.name}", highlight=False)
        for n in d.notes:
            out.print(f"           {n}", highlight=False, style="dim", markup=False)
    if report.csv_lines:
        out.print("[bold]add to the dcgm-exporter counters CSV[/]")
        for line in report.csv_lines:
            out.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
        out.print("[bold]Helm values[/]")
        out.print(report.helm_values, highlight=False, soft_wrap=True, markup=False)
    if report.pod_fixes:
        out.print("[bold]pod-level series[/]")
        for line in report.pod_fixes:
            out.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)


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
    out.print("[bold]kube-state-metrics[/] (cluster state without Kubernetes access)")
    for name, count in status.series.items():
        mark = "[green]✓[/]" if count else ("[red]✗[/]" if name in status.missing else "[dim]–[/]")
        out.print(f"  {mark} {name:45} {count:6d}", highlight=False)
        if name in status.missing:
            out.print(f"           {status.missing[name]}", highlight=False, style="dim", markup=False)
    verdict = "a Prometheus-only scan can tie GPUs to pods" if status.usable else "a Prometheus-only scan cannot tie GPUs to pods"
    out.print(f"  {verdict}", highlight=False)
    if status.missing_keys:
        out.print(f"[bold]allow-listed labels/annotations missing[/] ({len(status.missing_keys)} of {len(status.keys)})")
        for k in status.missing_keys:
            out.print(f"  ✗ {k}", highlight=False, markup=False)
    if status.helm_values:
        out.print("[bold]kube-state-metrics Helm values[/]")
        out.print(status.helm_values, highlight=False, soft_wrap=True, markup=False)


@app.command()
def doctor(
    prometheus: Annotated[str, typer.Option("--prometheus", "-p", help="Prometheus base URL.", envvar="GPUWASTE_PROMETHEUS_URL")],
    at: Annotated[str | None, typer.Option("--at", help="Probe time (RFC 3339 or unix seconds); default: the server's now.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check which signals the detectors need are in Prometheus, and how to enable the missing ones."""
    from gpuwaste.settings import PrometheusSettings
    from gpuwaste.sources.metrics_plan import spec_for
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    check_prometheus_url(prometheus)
    when = parse_time(at)
    try:
        source = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=prometheus), cluster="doctor")
        aliases = {n: (spec.names if (spec := spec_for(n)) else (n,)) for n in probe_names()}
        raw = source.probe([a for names in aliases.values() for a in names], at=when)
        counts = {n: sum(raw.get(a, 0) for a in names) for n, names in aliases.items()}  # DCGM 4.6 / 1.x names count too
        labels = {}
        for label, query in LABEL_CHECKS.items():
            result = source.instant_query(query, at=when, what="doctor label")
            labels[label] = int(float(result[0]["value"][1])) if result else 0
        rules = source.rules_status(at=when)
    except GpuWasteError as exc:
        message = str(exc)
        hint = "" if "check the url" in message.lower() else "\nCheck the URL and that Prometheus is reachable."
        fail(message + hint, code=3)
    try:
        ksm = probe_ksm(source, when)
    except GpuWasteError as exc:
        fail(f"kube-state-metrics probe: {exc}", code=3)
    report = diagnose(counts, labels)
    if as_json:
        sys.stdout.write(json.dumps({**asdict(report), "helm_values": report.helm_values,
                                     "kube_state_metrics": {**asdict(ksm), "usable": ksm.usable}, "recording_rules": rules}, indent=1) + "\n")
        return
    render(report)
    render_ksm(ksm)
    render_rules(rules)


def render_rules(rules: dict[str, object]) -> None:
    """One line on the shipped recording rules (`PrometheusGpuMetricsSource.rules_status`)."""
    if rules["installed"]:
        out.print(f"[bold]recording rules[/] [green]✓[/] installed (version {rules['version']}, {rules['evaluations_last_hour']}/"
                  f"{rules['expected_last_hour']} evaluations in the last hour): scans read their 5-minute buckets", highlight=False)
    else:
        out.print("[bold]recording rules[/] [yellow]✗[/] not installed: scans query the raw series (slower at fleet scale); install "
                  "deploy/prometheus-rules.yaml (Prometheus Operator) or deploy/prometheus/gpuwaste-recording-rules.yml (rule_files)",
                  highlight=False, soft_wrap=True)


__all__ = ["CSV_LINES", "DetectorStatus", "DoctorReport", "KsmStatus", "SignalStatus", "diagnose", "diagnose_ksm", "doctor", "probe_ksm",
           "probe_names"]
