"""Series summaries → the parts of a `TelemetryWindow`: GPU devices, pods, the metrics present and the problems."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuwaste.models.settings import TelemetryLabels
from gpuwaste.models.telemetry import (
    GKE_DUTY_CYCLE,
    MANAGED_POD_LABELS,
    BucketGrid,
    GpuTelemetry,
    PodTelemetry,
    TelemetryProblem,
    WindowStats,
)
from gpuwaste.sources.dcgm import build_gpu_telemetry
from gpuwaste.sources.metrics_plan.plan import (
    _GPU_UTIL_RATIO,
    ALIAS_LABEL,
    ENGINE_LABELS,
    SeriesSummary,
    _as_percent,
    format_labels,
)
from gpuwaste.sources.metrics_plan.summaries import _merge_rates, droppable_labels, infer_spacing, merge_dropped


@dataclass(frozen=True)
class WindowParts:
    """What a window's series summaries assemble into (the parts of a `TelemetryWindow`)."""

    gpus: tuple[GpuTelemetry, ...]
    pods: tuple[PodTelemetry, ...]
    metrics_present: frozenset[str]
    single_instant: bool
    problems: tuple[TelemetryProblem, ...] = ()
    spacing_s: float | None = None


def assemble(
    summaries: Iterable[SeriesSummary], labels: TelemetryLabels | None = None, *, drop: bool = True, grid: BucketGrid | None = None,
    extra_problems: Iterable[TelemetryProblem] = (),
) -> WindowParts:
    """Group series summaries into devices and pods, in a fixed order so both adapters sum floats alike.

    Args:
        summaries: per-series summaries. labels: label-name settings. grid: the window's buckets.
        drop: merge GPU series that differ only in `droppable_labels` first (`merge_dropped`); the
            Prometheus adapter passes False, its queries already aggregated those labels away.
        extra_problems: problems found outside the summaries (e.g. unparseable lines of a recording).
    """
    summaries = list(summaries)
    problems: list[TelemetryProblem] = list(extra_problems)
    for s in summaries:
        if s.stats is not None and s.stats.unreadable and s.problem is not None:
            problems.append(TelemetryProblem(metric=s.spec.name, where=s.problem[0] or format_labels(s.labels), reason=s.problem[1],
                                             count=s.stats.unreadable))
    if drop:
        summaries = merge_dropped(summaries, droppable_labels(labels), grid)
    sorted_labels: dict[int, tuple[tuple[str, str], ...]] = {}  # a live read shares one labels dict between its fields

    def order(s: SeriesSummary) -> tuple[str, tuple[tuple[str, str], ...]]:
        items = sorted_labels.get(id(s.labels))
        if items is None:
            items = sorted_labels[id(s.labels)] = tuple(sorted(s.labels.items()))
        return (s.spec.name, items)

    summaries = [_as_percent(s) if s.labels.get(ALIAS_LABEL) == _GPU_UTIL_RATIO else s for s in summaries]
    ordered = sorted(summaries, key=order)
    rows: list[tuple[str, dict[str, str], WindowStats]] = []
    pods: dict[tuple[str, str], dict[str, WindowStats]] = {}
    engines: dict[tuple[str, str], dict[str, dict[str, WindowStats]]] = {}
    present: set[str] = set()
    single = True
    for s in ordered:
        if s.samples == 0:
            continue
        present.add(s.spec.name)
        if s.samples > 1:
            single = False
        if s.stats is None:
            continue
        if s.spec.scope == "gpu":
            rows.append((s.spec.name, s.labels, s.stats))
            continue
        ns, pod = s.labels.get("namespace"), s.labels.get("pod")
        if not (ns and pod) and s.spec.name == GKE_DUTY_CYCLE:
            ns, pod = (s.labels.get(k) for k in MANAGED_POD_LABELS)
        if not (ns and pod) or not s.spec.keeps(s.labels):
            continue
        sig = pods.setdefault((ns, pod), {})
        targets = [sig]
        engine = next((f"{k}={s.labels[k]}" for k in ENGINE_LABELS if s.labels.get(k)), None)
        if engine is not None:
            targets.append(engines.setdefault((ns, pod), {}).setdefault(engine, {}))
        for target in targets:
            prev = target.get(s.spec.key)
            if prev is None:
                target[s.spec.key] = s.stats
            else:
                target[s.spec.key] = _merge_rates(prev, s.stats) if s.spec.summary == "rate" else prev.merge(s.stats)
    return WindowParts(
        gpus=tuple(build_gpu_telemetry(rows, labels)),
        pods=tuple(PodTelemetry(namespace=ns, pod=p, signals=sig, engines=engines.get((ns, p), {})) for (ns, p), sig in sorted(pods.items())),
        metrics_present=frozenset(present),
        single_instant=single and bool(rows),
        problems=tuple(sorted(problems, key=lambda p: (p.metric, p.where))),
        spacing_s=infer_spacing(ordered, grid) if grid is not None and not single else None,
    )
