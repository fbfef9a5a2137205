"""`gpuwaste doctor`: probe a Prometheus for every signal the detectors read, say what each detector falls back to,
and print the dcgm-exporter CSV lines and Helm values that would enable what is missing.

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
    report = diagnose(counts, labels)
    if as_json:
        sys.stdout.write(json.dumps({**asdict(report), "helm_values": report.helm_values, "recording_rules": rules}, indent=1) + "\n")
        return
    render(report)
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


__all__ = ["CSV_LINES", "DetectorStatus", "DoctorReport", "SignalStatus", "diagnose", "doctor", "probe_names"]
