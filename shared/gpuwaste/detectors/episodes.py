"""Detectors: episodes — the stretches of the window in which a subject's GPUs were wasted.

Pure helpers over a `ScanContext`. With time-resolved telemetry (buckets) a detector flags each slot of the
window (wasted / not wasted / unknown) and `runs` finds the stretches; an unknown slot (no samples) always
ends a stretch — missing telemetry is never waste. A stretch counts as an episode when it lasts at least
`common.min_episode_s`, or when it covers everything observed of the subject (a short window that is
wasted throughout). Without buckets the verdict is about the whole observed span, which is then the one
episode. Stretches that ended before the evaluation time count only when together they are a sizeable share of
the span (`common.min_episode_share`). `finish` puts the episodes, the GPU-hours, the observed seconds and the confidence they allow on a
finding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.join import ScanContext
from gpuwaste.models.findings import Confidence, Episode, Finding, WasteKind

HOURS = Decimal(3600)
GPU_HOURS = Decimal("0.0001")


@dataclass(frozen=True)
class Run:
    """A stretch of consecutive flagged slots: [start, end] and the slot indexes inside it."""

    start: datetime
    end: datetime
    slots: tuple[int, ...]

    @property
    def seconds(self) -> float:
        """Length of the stretch (s)."""
        return (self.end - self.start).total_seconds()


def runs(ctx: ScanContext, flags: Sequence[bool | None], span: tuple[datetime, datetime]) -> list[Run]:
    """Maximal stretches of True slots whose middle lies inside `span`, clipped to it (None ends a stretch)."""
    out: list[Run] = []
    current: list[int] = []
    for i, ((s, e), flag) in enumerate(zip(ctx.slots, flags, strict=True)):
        mid = s + (e - s) / 2
        inside = span[0] <= mid <= span[1]
        if inside and flag:
            current.append(i)
            continue
        if current:
            out.append(_run(ctx, current, span))
            current = []
    if current:
        out.append(_run(ctx, current, span))
    return out


def _run(ctx: ScanContext, idx: list[int], span: tuple[datetime, datetime]) -> Run:
    return Run(max(span[0], ctx.slots[idx[0]][0]), min(span[1], ctx.slots[idx[-1]][1]), tuple(idx))


def observed_slots(ctx: ScanContext, series: Sequence[float | None], span: tuple[datetime, datetime]) -> int:
    """Slots inside `span` with data."""
    return sum(1 for (s, e), v in zip(ctx.slots, series, strict=True) if v is not None and span[0] <= s + (e - s) / 2 <= span[1])


def qualifying(ctx: ScanContext, found: list[Run], span: tuple[datetime, datetime], min_s: int | None = None) -> list[Run]:
    """The stretches that make a verdict.

    Each must last at least `min_s` (default `common.min_episode_s`) or cover the whole span. Together they must
    matter: the last one still going on at the evaluation time (waste now), or all of them adding up to at
    least `common.min_episode_share` of the span — a busy workload that paused for half an hour in a day is not
    an idle workload.
    """
    need = ctx.common.min_episode_s if min_s is None else min_s
    step = float(ctx.telemetry.bucket_s or 0)
    whole = (span[1] - span[0]).total_seconds()
    long_enough = [r for r in found if r.seconds >= need or r.seconds >= whole - step]
    if not long_enough:
        return []
    ongoing = long_enough[-1].end >= ctx.eval_time
    if ongoing or sum(r.seconds for r in long_enough) >= ctx.common.min_episode_share * whole:
        return long_enough
    return []


def episode(ctx: ScanContext, start: datetime, end: datetime, gpus: Decimal) -> Episode:
    """One episode of `gpus` physical-GPU equivalents wasted over [start, end]."""
    hours = (gpus * Decimal(str((end - start).total_seconds())) / HOURS).quantize(GPU_HOURS, rounding=ROUND_HALF_UP)
    return Episode(start=start, end=end, wasted_gpu_hours=hours, ongoing=end >= ctx.eval_time)


def from_runs(ctx: ScanContext, found: list[Run], gpus: Decimal | Callable[[Run], Decimal]) -> tuple[Episode, ...]:
    """Episodes of the stretches, each wasting `gpus` (or `gpus(run)`) physical-GPU equivalents."""
    return tuple(episode(ctx, r.start, r.end, gpus(r) if callable(gpus) else gpus) for r in found)


def finish(ctx: ScanContext, finding: Finding, episodes: tuple[Episode, ...], observed_s: float, *, cap: bool = True) -> Finding:
    """The finding with its episodes, GPU-hours in the window, observed seconds, and a confidence capped by them.

    A finding resting on fewer than `common.confident_observed_s` observed seconds has LOW confidence: a short
    window may see a bursty workload's quiet phase only (`cap=False` for verdicts on cluster facts, such as an
    owner that no longer exists, which a short window cannot mislead).
    """
    hours = sum((e.wasted_gpu_hours for e in episodes), Decimal(0))
    conf = finding.confidence
    short = cap and observed_s < ctx.common.confident_observed_s
    if short:
        conf = Confidence.LOW
    details = dict(finding.details)
    if episodes:
        details["episodes"] = "; ".join(f"{e.start:%Y-%m-%d %H:%M}–{e.end:%H:%M}Z{' (ongoing)' if e.ongoing else ''}" for e in episodes)
        details["ongoing"] = episodes[-1].ongoing
    if short:
        details["short_observation"] = (f"only {observed_s / 60:.0f} min observed (< {ctx.common.confident_observed_s // 60} min): "
                                        "low confidence, never ticketed")
    return finding.model_copy(update={"episodes": episodes, "wasted_gpu_hours": hours, "observed_s": int(observed_s),
                                      "confidence": conf, "details": details})


def span_seconds(span: tuple[datetime, datetime]) -> float:
    """Length of a span (s)."""
    return max(0.0, (span[1] - span[0]).total_seconds())


def minutes_text(episodes: tuple[Episode, ...]) -> str:
    """Total length of the episodes in words ("3.0 h", "40 min")."""
    secs = sum((e.end - e.start).total_seconds() for e in episodes)
    return f"{secs / 3600:.1f} h" if secs >= 5400 else f"{secs / 60:.0f} min"


__all__ = ["Run", "complete", "completed_episodes", "episode", "finish", "from_runs", "minutes_text", "observed_slots", "qualifying", "runs", "span_seconds"]


def complete(ctx: ScanContext, finding: Finding) -> Finding:
    """Give a finding that a detector judged over its whole observed span (no episodes of its own) that span as its
    one episode, its observed seconds and GPU-hours. Data-quality and governance findings are left as they are."""
    if finding.observed_s or finding.episodes or not finding.kind.is_waste:
        return finding
    s = finding.subject
    span = _judged_span(ctx, s.namespace, s.pod)
    coverage = min((e.coverage for e in finding.evidence if e.samples and e.coverage), default=1.0)
    share = finding.wasted_gpu_share
    episodes = (episode(ctx, span[0], span[1], share),) if share > 0 else ()
    return finish(ctx, finding, episodes, span_seconds(span) * coverage, cap=finding.kind not in CLUSTER_FACT_KINDS)


def completed_episodes(ctx: ScanContext, namespace: str | None, pod: str | None, share: Decimal) -> tuple[Episode, ...]:
    """The episodes `complete` gives a waste finding about pod `namespace/pod` (no episodes of its own) that wastes
    `share` GPUs: the pod's holding span as one episode, none when nothing is wasted."""
    span = _judged_span(ctx, namespace, pod)
    return (episode(ctx, span[0], span[1], share),) if share > 0 else ()


def _judged_span(ctx: ScanContext, namespace: str | None, pod: str | None) -> tuple[datetime, datetime]:
    """The holding span of the pod's allocation, or the whole window when the subject is no pod with GPUs; the
    evaluation instant alone when the telemetry is one undated sample (it shows the state then, never for how long:
    no window-long GPU-hours, issue 21 §9)."""
    if ctx.telemetry.single_instant:
        return (ctx.eval_time, ctx.eval_time)
    alloc = ctx.allocation_of(namespace or "", pod) if pod else None
    return ctx.held_span(alloc) if alloc is not None else (ctx.window_start, ctx.eval_time)


#: Kinds judged from cluster facts (owner gone, Pending for long, a finished container): no bursty phase to mislead.
CLUSTER_FACT_KINDS = frozenset({WasteKind.ORPHANED})
