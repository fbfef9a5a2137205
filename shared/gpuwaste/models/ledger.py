"""Models (pure): the money ledger — one function computes the waste of a finding over any period.

A finding's waste is counted only over time its evidence covers. Each sighting (a scan that saw the finding)
contributes the stretches its evidence proves:

* its `episodes` when the scan resolved time (each episode's USD = `usd_per_gpu_hour` × its wasted GPU-hours,
  spread evenly over the episode);
* else the observed part of its window, `[observed_at - observed_s, observed_at]` (`window_s` when the scan did
  not say), at the finding's USD/day.

Time already covered by an earlier sighting is not counted again, so overlapping windows of successive scans add
nothing twice, and time no evidence covers (scans missed for longer than the window, before the first sample) adds
nothing. The record keeps the covered stretches as `LedgerSpan`s (contiguous stretches at one rate merged), and
`waste_usd(spans, since, until)` is the single place money over a period is computed: the store's cumulative USD,
Slack, Jira and the daily summary all read it.

Exactness: a span's money over a period is `usd_per_day × seconds ÷ 86400` with the seconds counted in whole
microseconds and the division done once per call, so the totals of any split of a period add up to the period's
total (to 1e-20 USD, far below the cent); surfaces round to the cent only when they print.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from gpuwaste.models.base import Frozen
from gpuwaste.models.findings import Finding

DAY_US = Decimal(86_400_000_000)
CENT = Decimal("0.01")
_US = timedelta(microseconds=1)


class LedgerSpan(Frozen):
    """A stretch of time covered by evidence, wasting `usd_per_day` USD/day throughout."""

    start: datetime
    end: datetime
    usd_per_day: Decimal


def _span(start: datetime, end: datetime, usd_per_day: Decimal) -> LedgerSpan:
    """A span from values already typed (datetimes of validated models, Decimals): built without re-validating them
    (the hot path of every sighting)."""
    return LedgerSpan.model_construct(start=start, end=end, usd_per_day=usd_per_day)


def evidence_spans(finding: Finding) -> list[LedgerSpan]:
    """The stretches one sighting's evidence covers, with their USD/day (empty when unpriced, data quality, or
    when another finding owns the money of the same GPU-hours)."""
    cost = finding.cost
    if cost is None or not cost.priced or cost.usd_per_day is None or finding.money_owner or not finding.kind.is_waste:
        return []
    if finding.episodes and cost.usd_per_gpu_hour is not None:
        out = []
        for ep in finding.episodes:
            seconds = (ep.end - ep.start) // _US
            if seconds <= 0:
                continue
            usd = cost.usd_per_gpu_hour * ep.wasted_gpu_hours
            out.append(_span(ep.start, ep.end, usd * DAY_US / Decimal(seconds)))
        return out
    span_s = finding.observed_s or finding.window_s
    if span_s <= 0:
        return []
    return [_span(finding.observed_at - timedelta(seconds=span_s), finding.observed_at, cost.usd_per_day)]


def add_sighting(spans: Sequence[LedgerSpan], finding: Finding) -> tuple[LedgerSpan, ...]:
    """`spans` with the time `finding`'s evidence newly covers (time already covered keeps its earlier rate)."""
    out = list(spans)
    for new in evidence_spans(finding):
        out.extend(_uncovered(new, out))
    return merge(out)


def _uncovered(new: LedgerSpan, spans: Iterable[LedgerSpan]) -> list[LedgerSpan]:
    pieces = [(new.start, new.end)]
    for s in spans:
        nxt = []
        for a, b in pieces:
            if s.end <= a or s.start >= b:
                nxt.append((a, b))
                continue
            if a < s.start:
                nxt.append((a, s.start))
            if s.end < b:
                nxt.append((s.end, b))
        pieces = nxt
    return [_span(a, b, new.usd_per_day) for a, b in pieces if b > a]


def merge(spans: Iterable[LedgerSpan]) -> tuple[LedgerSpan, ...]:
    """Spans sorted by start, touching spans at the same rate joined."""
    out: list[LedgerSpan] = []
    for s in sorted(spans, key=lambda x: (x.start, x.end)):
        if out and out[-1].end == s.start and out[-1].usd_per_day == s.usd_per_day:
            out[-1] = _span(out[-1].start, s.end, s.usd_per_day)
        else:
            out.append(s)
    return tuple(out)


def waste_usd(spans: Iterable[LedgerSpan], since: datetime | None = None, until: datetime | None = None) -> Decimal:
    """USD wasted inside [since, until) (the whole ledger when open-ended), unrounded."""
    total = Decimal(0)
    for s in spans:
        lo = s.start if since is None else max(s.start, since)
        hi = s.end if until is None else min(s.end, until)
        if hi > lo:
            total += s.usd_per_day * Decimal((hi - lo) // _US)
    return total / DAY_US


def covered_s(spans: Iterable[LedgerSpan]) -> Decimal:
    """Seconds of evidence the ledger holds."""
    return Decimal(sum(((s.end - s.start) // _US for s in spans), 0)) / Decimal(1_000_000)


__all__ = ["CENT", "LedgerSpan", "add_sighting", "covered_s", "evidence_spans", "merge", "waste_usd"]
