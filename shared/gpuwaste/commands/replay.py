"""`gpuwaste replay alibaba`: run the main scan over Alibaba's GenTD26 per-pod GPU trace.

The trace has no nodes, GPU models or prices, so the replay maps each pod to one GPU of a stated
model on a stated instance type (one pod per node) and says so in its output. The summary —
`replay_summary` — is pure and is what the tests check.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste.cli_support import app, err, fail, out, parse_window
from gpuwaste.errors import InputFormatError
from gpuwaste.models.text import for_json

if TYPE_CHECKING:  # imported where used, so `gpuwaste --help` stays fast
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.services.scan import ScanReport
    from gpuwaste.sources.alibaba import AlibabaReplaySource, AlibabaTrace

replay_app = typer.Typer(help="Replay public GPU traces through the scan.", no_args_is_help=True)
app.add_typer(replay_app, name="replay")

CENT = Decimal("0.01")
HOURS_PER_DAY = Decimal(24)
DEFAULT_MODEL = "NVIDIA A10G"
DEFAULT_INSTANCE = "g5.xlarge"
VERDICTS = ("idle", "underused", "busy", "no_verdict")
#: Each verdict as people read it (the JSON keeps VERDICTS): the scan's kind words, "no verdict" as the scan says it.
VERDICT_LABELS = {"idle": "idle", "underused": "under-used", "busy": "busy", "no_verdict": "no verdict"}
#: The main job's detectors: the replay judges idle / under-used / busy with these only.
CORE_DETECTORS = ("idle_allocation", "underused_allocation", "unallocated_capacity", "data_quality")


@dataclass
class GroupStats:
    """Per-pod activity statistics (GPU_UTIL ÷ 100, ratio 0–1) of one verdict group."""

    pods: int = 0
    avg: list[float] = field(default_factory=list)
    p95: list[float] = field(default_factory=list)
    max_avg_10m: list[float] = field(default_factory=list)

    def describe(self) -> dict[str, dict[str, float] | int]:
        """min / median / max of each statistic, as ratios."""
        def mm(v: list[float]) -> dict[str, float]:
            return {"min": round(min(v), 4), "median": round(statistics.median(v), 4), "max": round(max(v), 4)} if v else {}
        return {"pods": self.pods, "avg": mm(self.avg), "p95": mm(self.p95), "max_avg_10m": mm(self.max_avg_10m)}


@dataclass
class ReplaySummary:
    """What one window of the replay found.

    Attributes:
        verdicts: pod name → "idle" | "underused" | "busy" | "no_verdict" (exactly one each).
        reasons: pod name → why it got no verdict.
        gpu_hours: verdict → GPU-hours observed in the window (1 GPU per pod × its duty-cycle samples × step).
        usd_per_day: verdict → USD/day of the findings (idle: the whole GPU; under-used: the unused share), summed
            from the unrounded per-pod values (price × share × 24) and rounded to the cent once, at the end.
        usd_per_gpu_hour: the price used per GPU-hour, or None when unpriced.
        wasted_gpu_hours: verdict → GPU-hours the findings' episodes wasted inside the window (idle, under-used).
    """

    eval_time: datetime
    window_s: int
    pods: int
    verdicts: dict[str, str]
    reasons: dict[str, str]
    counts: dict[str, int]
    gpu_hours: dict[str, float]
    usd_per_day: dict[str, Decimal]
    usd_per_gpu_hour: Decimal | None
    price_source: str
    groups: dict[str, GroupStats]
    wasted_gpu_hours: dict[str, float] = field(default_factory=dict)


def replay_summary(report: ScanReport, source: AlibabaReplaySource) -> ReplaySummary:
    """Give every trace pod exactly one verdict from a scan report.

    Order: idle finding → "idle"; under-used finding → "underused"; any no-verdict or data-quality
    finding on the pod, or no activity samples in the window → "no_verdict"; else "busy".
    """
    from gpuwaste.models.findings import WasteKind
    from gpuwaste.models.telemetry import Signal

    pods = [p.pod_name for p in source.trace.pods.values()]
    verdicts: dict[str, str] = {}
    reasons: dict[str, str] = {}
    usd: dict[str, Decimal] = {v: Decimal(0) for v in VERDICTS}
    wasted: dict[str, Decimal] = {v: Decimal(0) for v in VERDICTS}
    rate: Decimal | None = None
    price_source = ""
    for f in report.findings:
        pod = f.subject.pod
        if pod is None:
            continue
        if f.kind is WasteKind.IDLE:
            verdicts[pod] = "idle"
        elif f.kind is WasteKind.UNDERUSED:
            verdicts.setdefault(pod, "underused")
        elif f.kind is WasteKind.DATA_QUALITY:
            reasons.setdefault(pod, str(f.details.get("check")))
            continue
        else:
            continue
        wasted["idle" if f.kind is WasteKind.IDLE else "underused"] += f.wasted_gpu_hours
        if f.cost is not None and f.cost.priced and f.cost.usd_per_gpu_hour is not None:
            # unrounded per pod (the finding's usd_per_day is rounded to the cent): the total is rounded once below
            usd[verdicts[pod]] += f.cost.usd_per_gpu_hour * f.cost.wasted_gpu_share * HOURS_PER_DAY
            rate = f.cost.usd_per_gpu_hour
            price_source = f"{f.cost.source} ({f.cost.effective_date})"
    for nv in report.no_verdict:
        if nv.detector not in ("idle_allocation", "underused_allocation"):
            continue
        name = nv.subject.rsplit("/", 1)[-1]
        reasons.setdefault(name, nv.reason)
    tel = source.telemetry(at=report.eval_time, window=timedelta(seconds=report.window_s))
    by_pod = {}
    for g in tel.gpus:
        stats = g.merged(Signal.GPU_UTIL)
        pod = next((grp.pod for grp in g.groups if grp.pod), None)
        if pod and stats is not None:
            by_pod[pod] = stats
    groups = {v: GroupStats() for v in VERDICTS}
    for pod in pods:
        if pod not in verdicts:
            if pod in reasons:
                verdicts[pod] = "no_verdict"
            elif pod not in by_pod:
                verdicts[pod] = "no_verdict"
                reasons[pod] = "no duty-cycle samples in the window"
            else:
                verdicts[pod] = "busy"
        v = verdicts[pod]
        groups[v].pods += 1
        s = by_pod.get(pod)
        if s is not None:
            groups[v].avg.append(s.avg / 100)
            groups[v].p95.append(s.p95 / 100)
            if s.max_avg_10m is not None:
                groups[v].max_avg_10m.append(s.max_avg_10m / 100)
    counts = Counter(verdicts.values())
    step_h = source.trace.step_s / 3600
    hours = dict.fromkeys(VERDICTS, 0.0)
    for pod, v in verdicts.items():
        s = by_pod.get(pod)
        if s is not None:
            hours[v] += min(s.count * step_h, report.window_s / 3600)
    if rate is None:
        rate, price_source = _rate(source)
    return ReplaySummary(
        eval_time=report.eval_time,
        window_s=report.window_s,
        pods=len(pods),
        verdicts=verdicts,
        reasons={p: r for p, r in reasons.items() if verdicts.get(p) == "no_verdict"},
        counts={v: counts.get(v, 0) for v in VERDICTS},
        gpu_hours={v: round(h, 2) for v, h in hours.items()},
        usd_per_day={v: x.quantize(CENT, rounding=ROUND_HALF_UP) for v, x in usd.items()},
        usd_per_gpu_hour=rate,
        price_source=price_source,
        groups=groups,
        wasted_gpu_hours={v: float(x) for v, x in wasted.items()},
    )


def _rate(source: AlibabaReplaySource) -> tuple[Decimal | None, str]:
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.pricing.prices import GpuHourRate

    rate = local.price_book(GpuWasteConfig()).gpu_hour_rate(
        instance_type=source.instance_type, capacity_type="on-demand", gpu_model=source.gpu_model, physical_gpus=1
    )
    if isinstance(rate, GpuHourRate):
        return rate.usd_per_gpu_hour, f"{rate.source} ({rate.effective_date})"
    return None, ""


def scan_window(source: AlibabaReplaySource, *, at: datetime, window_s: int, config: GpuWasteConfig | None = None) -> ScanReport:
    """One priced scan of the replayed trace over `[at − window, at]`, with the main job's detectors."""
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.services.scan import ScanService

    cfg = config or GpuWasteConfig()
    settings = cfg.detectors.model_copy(update={"enabled": list(CORE_DETECTORS)})
    service = ScanService(cluster_source=source, telemetry_source=source, settings=settings,
                          window=timedelta(seconds=window_s), price_book=local.price_book(cfg))
    return service.scan(at=at, scan_id=f"replay-{int(at.timestamp())}")


def whole_trace_window_s(trace: AlibabaTrace) -> int:
    """A window that holds every sample of the trace (ends included)."""
    return int(math.ceil(trace.span_s)) or int(trace.step_s)


def sliding(source: AlibabaReplaySource, *, window_s: int, step_s: int) -> tuple[list[ReplaySummary], dict[str, float]]:
    """Scan consecutive windows ending at start + window, + step, … up to the trace's end.

    Returns:
        The per-window summaries, and pod → share 0–1 of its judged windows (idle/under-used/busy) that were idle.
    """
    trace = source.trace
    summaries = []
    at = trace.start + timedelta(seconds=window_s)
    while at <= trace.end:
        summaries.append(replay_summary(scan_window(source, at=at, window_s=window_s), source))
        at += timedelta(seconds=step_s)
    share: dict[str, float] = {}
    for p in trace.pods.values():
        judged = [s.verdicts[p.pod_name] for s in summaries if s.verdicts[p.pod_name] != "no_verdict"]
        if judged:
            share[p.pod_name] = sum(1 for v in judged if v == "idle") / len(judged)
    return summaries, share


def _pct(v: float) -> str:
    return f"{v * 100:.1f}%"


def _print_summary(s: ReplaySummary, source: AlibabaReplaySource) -> None:
    hours = s.window_s / 3600
    out.print(f"[bold]window[/] {hours:.1f} h ending {s.eval_time:%Y-%m-%d %H:%M:%SZ} (trace time, shifted by the publisher) · "
              f"{s.pods} pods, 1 GPU each", highlight=False)
    rate = (f"${s.usd_per_gpu_hour.normalize():f}/GPU-h ({source.instance_type} on-demand, {s.price_source})"
            if s.usd_per_gpu_hour is not None else
            f"unpriced: {source.instance_type} with {source.gpu_model} is not in the bundled price book; pass a priced "
            f"--instance-type (e.g. {DEFAULT_INSTANCE}) and --gpu-model; no USD figures below")
    out.print(f"price: {rate}", highlight=False, markup=False)
    for v in VERDICTS:
        g = s.groups[v].describe()
        n = s.counts[v]
        line = f"  {VERDICT_LABELS[v]:<10} {n:>4} pods  {s.gpu_hours[v]:>8.1f} GPU-h observed"
        if v in ("idle", "underused"):
            line += f", {s.wasted_gpu_hours.get(v, 0.0):>8.1f} wasted"
            line += f"  ${s.usd_per_day[v]:,.2f}/day" if s.usd_per_gpu_hour is not None else "  unpriced"
        if g["avg"]:
            line += (f"  per-pod avg {_pct(g['avg']['median'])} (median; {_pct(g['avg']['min'])}–{_pct(g['avg']['max'])}),"  # type: ignore[index]
                     f" p95 median {_pct(g['p95']['median'])},"  # type: ignore[index]
                     f" highest 10-min avg {_pct(g['max_avg_10m']['min'])}–{_pct(g['max_avg_10m']['max'])}")  # type: ignore[index]
        out.print(line, highlight=False)
    out.print(rule_text(), style="dim", highlight=False)
    out.print("GPU-h observed: 1 GPU per pod × its duty-cycle samples × the step; wasted: the GPU-hours of the idle or "
              "under-used episodes inside the window; USD/day: the rate of the wasted GPUs now (price × wasted share × 24).",
              style="dim", highlight=False)
    if s.reasons:
        reasons = Counter(s.reasons.values())
        from gpuwaste.people import PROBLEM_LABELS  # a problem's id in words; a reason sentence as it is

        out.print("no verdict: " + "; ".join(f"{n}× {PROBLEM_LABELS.get(r, r)}" for r, n in reasons.most_common()), style="dim",
                  highlight=False)


def rule_text(config: GpuWasteConfig | None = None) -> str:
    """The verdict rule the replay applies, in people's words.

    From the detectors' settings: the scan's own episode rule, stated as the idle and under-used detectors apply it.
    """
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.detectors.allocation import IdleSettings, UnderusedSettings

    d = (config or GpuWasteConfig()).detectors
    named = d.by_name()
    idle, under, common = named["idle_allocation"], named["underused_allocation"], d.common
    assert isinstance(idle, IdleSettings) and isinstance(under, UnderusedSettings)
    ep = f"{common.min_episode_s // 60} min"
    share = f"{common.min_episode_share:.0%}"
    return (f"why: idle = GPU_UTIL {idle.statistic} under {idle.max_activity_ratio:.0%} and every 10-min average under "
            f"{idle.max_activity_ratio:.0%} over the window, or stretches of ≥ {ep} with every 10-min average under "
            f"{idle.max_activity_ratio:.0%} that last to the window's end or add up to ≥ {share} of it; under-used = the "
            f"same with {under.max_avg_10m_ratio:.0%} (when not idle); busy = neither; no verdict = telemetry covers under "
            f"{common.min_coverage:.0%} of the window, samples stopped before its end (stale), or no duty-cycle "
            "series.")


def _check_mapping(gpu_model: str, instance_type: str) -> None:
    """Refuse a GPU model that the instance type does not carry (an H100 priced as a g5.xlarge's A10G is ~7× off)."""
    from gpuwaste.pricing.catalog import PriceBook

    book = PriceBook.bundled()
    carried = {p.gpu_model for p in book.prices if p.instance_type == instance_type}
    spec = book.catalog.resolve(gpu_model)
    if carried and spec is not None and spec.key not in carried:
        fail(f"--gpu-model {gpu_model} ({spec.key}) is not the GPU of --instance-type {instance_type} "
             f"({', '.join(sorted(carried))}): the price would be another GPU's. Pass an instance type that carries "
             f"{spec.key}, or leave --gpu-model at the instance's GPU.")


def mapping_origin(gpu_model: str, instance_type: str) -> str:
    """Where the mapping's GPU model and instance type came from: the defaults, or the options that set them."""
    given = [opt for opt, value, default in (("--gpu-model", gpu_model, DEFAULT_MODEL),
                                             ("--instance-type", instance_type, DEFAULT_INSTANCE)) if value != default]
    if not given:
        return "the defaults"
    return f"set by {' and '.join(given)}; defaults {DEFAULT_MODEL} on {DEFAULT_INSTANCE}"


class ReplayOutput(StrEnum):
    """Output formats of the replay."""

    table = "table"
    json = "json"


@replay_app.command("alibaba")
def alibaba(
    trace_dir: Annotated[Path, typer.Option("--trace-dir", help=f"Directory holding {', '.join(('pod_gpu_duty_cycle_anon.tar.gz', 'pod_gpu_memory_used_bytes_anon.tar.gz'))}.")],
    gpu_model: Annotated[str, typer.Option("--gpu-model", help="GPU model each pod is mapped to (dcgm modelName).")] = DEFAULT_MODEL,
    instance_type: Annotated[str, typer.Option("--instance-type", help="Instance type of each pod's node (one pod per node), priced from the price book.")] = DEFAULT_INSTANCE,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window ending at the trace's end, 10m or more, e.g. 3h. Default: the whole trace.")] = None,
    sliding_window: Annotated[str | None, typer.Option("--sliding", help="Also scan consecutive windows of this length (10m or more, e.g. 1h) and report the share of windows idle.")] = None,
    output: Annotated[ReplayOutput, typer.Option("--output", "-o", help="table for people; json for machines (exact decimal strings).")] = ReplayOutput.table,
) -> None:
    """Replay Alibaba's GenTD26 per-pod GPU trace through the scan (each pod = one GPU of a stated model)."""
    from gpuwaste.sources.alibaba import AlibabaReplaySource, load_trace

    window_arg = parse_window(window) if window else None
    w = parse_window(sliding_window, "--sliding") if sliding_window else None
    _check_mapping(gpu_model, instance_type)
    try:
        trace = load_trace(trace_dir)
    except InputFormatError as exc:
        fail(f"{exc}\nPass --trace-dir with the two GenTD26 tarballs (pod_gpu_duty_cycle_anon.tar.gz and "
             "pod_gpu_memory_used_bytes_anon.tar.gz from https://github.com/alibaba/clusterdata).")
    source = AlibabaReplaySource(trace, gpu_model=gpu_model, instance_type=instance_type)
    window_s = window_arg or whole_trace_window_s(trace)
    if window and window_s > whole_trace_window_s(trace):
        err.print(f"warning: --window {window} is longer than the trace ({trace.span_s / 3600:.1f} h): the scan covers the "
                  "whole trace, and pods may get no verdict for low coverage; leave --window out to use the whole trace",
                  style="yellow", highlight=False, soft_wrap=True)
    if w is not None and w > whole_trace_window_s(trace):
        fail(f"--sliding {sliding_window} is longer than the trace ({trace.span_s / 3600:.1f} h): no window fits; use a shorter one")
    summary = replay_summary(scan_window(source, at=trace.end, window_s=window_s), source)
    slide: dict[str, Any] | None = None
    if w is not None:
        wins, share = sliding(source, window_s=w, step_s=w)
        judged = sum(sum(1 for v in s.verdicts.values() if v != "no_verdict") for s in wins)
        idle = sum(s.counts["idle"] for s in wins)
        idle_h = sum(s.wasted_gpu_hours.get("idle", 0.0) for s in wins)  # the idle episodes' GPU-hours, not whole windows
        slide = {"window_s": w, "windows": len(wins), "pod_windows_judged": judged, "pod_windows_idle": idle,
                 "share_idle": round(idle / judged, 4) if judged else None,
                 "pods_idle_in_every_judged_window": sum(1 for v in share.values() if v == 1.0),
                 "pods_never_idle": sum(1 for v in share.values() if v == 0.0),
                 "idle_gpu_hours": round(idle_h, 2),
                 "idle_usd": str((summary.usd_per_gpu_hour * Decimal(str(idle_h))).quantize(CENT, rounding=ROUND_HALF_UP)) if summary.usd_per_gpu_hour else None}
    if output is ReplayOutput.json:
        doc = {"mapping": {"gpu_model": gpu_model, "instance_type": instance_type, "pods_per_node": 1, "gpus_per_pod": 1,
                           "duty_cycle": "DCGM_FI_DEV_GPU_UTIL (percent)", "memory": "DCGM_FI_DEV_FB_USED (MiB)",
                           "scrape_interval_s": trace.step_s},
               "trace": {"pods": len(trace.pods), "rows": trace.rows, "start": trace.start.isoformat(), "end": trace.end.isoformat()},
               "counts": summary.counts, "gpu_hours": summary.gpu_hours,
               "gpu_hours_meaning": "observed: 1 GPU per pod × duty-cycle samples × step (wasted_gpu_hours: the episodes')",
               "wasted_gpu_hours": {k: round(v, 2) for k, v in summary.wasted_gpu_hours.items()},
               "usd_per_day": ({k: str(v) for k, v in summary.usd_per_day.items()} if summary.usd_per_gpu_hour is not None
                               else dict.fromkeys(summary.usd_per_day)),
               "usd_per_gpu_hour": str(summary.usd_per_gpu_hour) if summary.usd_per_gpu_hour else None,
               "groups": {k: g.describe() for k, g in summary.groups.items()}, "verdicts": summary.verdicts,
               "no_verdict_reasons": summary.reasons, "sliding": slide}
        sys.stdout.write(json.dumps(for_json(json.loads(json.dumps(doc, default=str))), indent=1) + "\n")
        return
    out.print(f"[bold]Alibaba GenTD26 replay[/]: {len(trace.pods)} pods, {trace.rows} CSV rows, "
              f"{trace.span_s / 3600:.1f} h at {trace.step_s:g} s steps", highlight=False)
    out.print(f"mapping (stated, not in the trace): each pod = 1 × {gpu_model} on its own {instance_type} node "
              f"({mapping_origin(gpu_model, instance_type)}); duty cycle % → DCGM_FI_DEV_GPU_UTIL, memory bytes → "
              f"DCGM_FI_DEV_FB_USED MiB; pods Running since before the trace", style="dim", highlight=False)
    _print_summary(summary, source)
    if slide:
        out.print(f"sliding {slide['window_s'] // 60}-min windows: {slide['windows']} windows, "
                  f"{slide['pod_windows_idle']}/{slide['pod_windows_judged']} judged pod-windows idle "
                  f"({_pct(slide['share_idle'] or 0)}); {slide['pods_idle_in_every_judged_window']} pods idle in every judged window, "
                  f"{slide['pods_never_idle']} never idle; idle GPU-hours {slide['idle_gpu_hours']:g} "
                  + (f"(${slide['idle_usd']} at the price above)" if slide["idle_usd"] is not None else "(unpriced)"),
                  highlight=False)


__all__ = ["ReplaySummary", "mapping_origin", "replay_summary", "scan_window", "sliding", "whole_trace_window_s"]
