"""Adapter helper: group dcgm-exporter series into devices (UUID + GPU_I_ID) with workload attribution.

Shared by the Prometheus and recording adapters so both build identical `GpuTelemetry`. Handles the
label traps of the field guide: `exported_*` vs `pod` (B02), `Hostname` vs `hostname` (B03), empty
workload labels (B01), `UUID`/`uuid` and lower-cased Azure spellings, MIG device-level values repeated on
every GPU instance (B06), series split across exporter restarts or duplicate exporters (B12, B17).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuwaste.models.dra import DraDeviceLabels
from gpuwaste.models.settings import TelemetryLabels
from gpuwaste.models.telemetry import AttributedSeries, DeviceId, GpuTelemetry, Signal, WindowStats

WHOLE_GPU_SIGNALS = frozenset(
    {Signal.POWER_USAGE.value, Signal.POWER_LIMIT.value, Signal.POWER_MGMT_LIMIT.value, Signal.TOTAL_ENERGY.value, Signal.GPU_UTIL.value, Signal.MEM_COPY_UTIL.value}
)


_FAMILIES = {
    "pod": ("pod", "namespace", "container"),
    "exported_pod": ("exported_pod", "exported_namespace", "exported_container"),
    "pod_name": ("pod_name", "pod_namespace", "container_name"),
}


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return None


def workload_labels(labels: dict[str, str], settings: TelemetryLabels, exporter_re: re.Pattern[str]) -> tuple[str | None, str | None, str | None, str | None]:
    """(family, namespace, pod, container) of the workload a series is attributed to, or Nones."""
    order = ("exported_pod", "pod", "pod_name") if settings.pod_label == "auto" else (settings.pod_label,)
    for fam in order:
        pod_l, ns_l, c_l = _FAMILIES[fam]
        pod = labels.get(pod_l) or None
        ns = labels.get(ns_l) or None
        if pod and ns:
            if exporter_re.search(pod):
                continue  # the scrape target, not a workload (B02)
            return fam, ns, pod, labels.get(c_l) or None
    return None, None, None, None


@dataclass
class _Dev:
    device: DeviceId
    gpu_index: str | None = None
    model: str | None = None
    profile: str | None = None
    hostname: str | None = None
    instances: set[str] = field(default_factory=set)
    groups: dict[tuple[str | None, str | None, str | None, str | None], dict[str, WindowStats]] = field(default_factory=dict)
    dra: dict[DraDeviceLabels, None] = field(default_factory=dict)


#: dcgm-exporter's DRA attribution labels (PR NVIDIA/dcgm-exporter#532; field guide B25).
DRA_LABELS = {
    "dra_claim_namespace": "claim_namespace",
    "dra_claim_name": "claim_name",
    "dra_driver_name": "driver",
    "dra_pool_name": "pool",
    "dra_device_name": "device",
}


def dra_labels(labels: dict[str, str]) -> DraDeviceLabels | None:
    """The `dra_*` labels of a series, or None when it carries none (or only empty ones)."""
    found = {field_name: labels[name] for name, field_name in DRA_LABELS.items() if labels.get(name)}
    return DraDeviceLabels(**found) if found else None


def _place(devs: dict[tuple[str, str | None], _Dev], labels: dict[str, str], settings: TelemetryLabels,
           exporter_re: re.Pattern[str]) -> dict[str, WindowStats] | None:
    """The signals of the workload group a series' labels belong to, on its device (created on first sight, its identity
    labels noted); None without a UUID."""
    uuid = _first(labels, settings.uuid_labels)
    if not uuid:
        return None
    gi = _first(labels, settings.gpu_instance_labels)
    key = (uuid, gi)
    dev = devs.get(key)
    if dev is None:
        dev = devs[key] = _Dev(DeviceId(uuid=uuid, gpu_i_id=gi))
    dev.gpu_index = dev.gpu_index or labels.get("gpu")
    dev.model = dev.model or _first(labels, settings.model_labels)
    dev.profile = dev.profile or _first(labels, settings.mig_profile_labels)
    dev.hostname = dev.hostname or _first(labels, settings.hostname_labels)
    if labels.get("instance"):
        dev.instances.add(labels["instance"])
    dra = dra_labels(labels)
    if dra is not None:
        dev.dra[dra] = None
    return dev.groups.setdefault(workload_labels(labels, settings, exporter_re), {})


def build_gpu_telemetry(rows: Iterable[tuple[str, dict[str, str], WindowStats]], settings: TelemetryLabels | None = None) -> list[GpuTelemetry]:
    """Group (metric, labels, stats) rows into devices.

    Rows without a UUID label are dropped (they cannot be counted as physical GPUs). On a GPU with
    MIG instances, whole-GPU rows (power, energy, GPU_UTIL) — with or without `GPU_I_ID` — are kept
    once on the parent and not attributed to any instance (B06); instance-level rows stay per
    instance.
    """
    settings = settings or TelemetryLabels()
    exporter_re = re.compile(settings.exporter_pod_pattern)
    devs: dict[tuple[str, str | None], _Dev] = {}
    # a live read shares one labels dict between the fields of a series (`PrometheusGpuMetricsSource._shared_labels`):
    # its device and workload group are worked out once per dict (the memo holds the dict, so an id is never reused)
    placed: dict[int, tuple[dict[str, str], dict[str, WindowStats] | None]] = {}
    for metric, labels, stats in rows:
        seen = placed.get(id(labels))
        if seen is None or seen[0] is not labels:
            seen = placed[id(labels)] = (labels, _place(devs, labels, settings, exporter_re))
        sigs = seen[1]
        if sigs is None:
            continue
        prev = sigs.get(metric)
        sigs[metric] = stats if prev is None else prev.merge(stats)
    # MIG: whole-GPU values repeated on every GPU instance (B06) are moved to the parent, once.
    mig_uuids = {u for (u, gi) in devs if gi is not None}
    for (uuid, gi), dev in list(devs.items()):
        if gi is None or uuid not in mig_uuids:
            continue
        for sigs in dev.groups.values():
            for metric in [m for m in sigs if m in WHOLE_GPU_SIGNALS]:
                stats = sigs.pop(metric)
                parent = devs.setdefault((uuid, None), _Dev(DeviceId(uuid=uuid), dev.gpu_index, dev.model, None, dev.hostname))
                psigs = parent.groups.setdefault((None, None, None, None), {})
                if metric not in psigs or psigs[metric].count < stats.count:
                    psigs[metric] = stats  # repeated values: keep one copy, never sum (B06)
    out: list[GpuTelemetry] = []
    for (uuid, gi), dev in devs.items():
        parent_sigs: dict[str, WindowStats] = {}
        if gi is not None and (uuid, None) in devs:
            for sigs in devs[(uuid, None)].groups.values():
                parent_sigs.update({m: s for m, s in sigs.items() if m in WHOLE_GPU_SIGNALS})
        # built without re-validation: every part is already a validated model or a plain value (10,000s per scan)
        groups = tuple(
            AttributedSeries.model_construct(label_family=fam, namespace=ns, pod=pod, container=c, signals=sigs)
            for (fam, ns, pod, c), sigs in dev.groups.items()
            if sigs
        )
        out.append(
            GpuTelemetry.model_construct(
                device=dev.device,
                gpu_index=dev.gpu_index,
                model_name=dev.model,
                mig_profile=dev.profile,
                hostname=dev.hostname,
                instances=tuple(sorted(dev.instances)),
                groups=groups,
                parent_signals=parent_sigs,
                is_mig_parent=gi is None and uuid in mig_uuids,
                dra=tuple(dev.dra),
            )
        )
    out.sort(key=lambda g: (g.hostname or "", g.device.uuid, g.device.gpu_i_id or ""))
    return out
