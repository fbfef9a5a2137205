"""Service: the daily cost summary from the lifecycle store's history (totals, trend, top offenders, savings).

Money model (exact, checkable by hand): a record wastes `usd_per_day` from `first_seen` minus its evidence
window (the waste was already there during the window that proved it) to `last_seen`; a period counts the
overlapping part (USD = USD/day × overlapping seconds ÷ 86400). The trend compares the
period with the one of equal length just before it. Savings: a finding resolved in the period saves its
`saved_usd_per_day`; "realised" counts the days from its resolution to the end of the period.
Data-quality findings carry no money and are left out of the waste counts (open, opened, and the per-group
`findings`); `data_quality_open` counts them apart. Unpriced findings are counted, not summed. A group's
`findings` counts the same set as `open_findings` (open waste findings seen in the period), so the counts of
every section (team, namespace, kind, cluster) add up to `open_findings`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuwaste.models.findings import NOT_WASTE_KINDS, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.notices import DailySummary, GroupTotal, Offender, PostedMessage
from gpuwaste.ports import ChartRenderer, FindingStore, Notifier
from gpuwaste.services.notify import finding_from_record
from gpuwaste.services.routing import route_for
from gpuwaste.settings import DeliverySettings

logger = logging.getLogger(__name__)

DAY_S = Decimal(86400)
NO_CHART = "Chart left out: matplotlib is not installed (pip install 'gpuwaste[charts]')."
NO_DATA_CHART = "No chart: no priced waste in the period."


def overlap_days(record: FindingRecord, start: datetime, end: datetime, lead: timedelta = timedelta(0)) -> Decimal:
    """Days (Decimal) of [first_seen - lead, last_seen] inside [start, end)."""
    lo = max(record.first_seen - lead, start)
    hi = min(record.last_seen, end)
    if hi <= lo:
        return Decimal(0)
    return Decimal(int((hi - lo).total_seconds())) / DAY_S


def wasted_usd(record: FindingRecord, start: datetime, end: datetime, lead: timedelta = timedelta(0)) -> Decimal:
    """USD the record wasted inside [start, end) (0 when unpriced or data quality)."""
    if record.usd_per_day is None or record.kind == WasteKind.DATA_QUALITY.value:
        return Decimal(0)
    return record.usd_per_day * overlap_days(record, start, end, lead)


def evidence_window(record: FindingRecord) -> timedelta:
    """The evidence window of the stored finding (`window_s`), zero when the record holds none."""
    finding = finding_from_record(record)
    return timedelta(seconds=finding.window_s) if finding is not None else timedelta(0)


class SummaryService:
    """Builds and sends the daily summary.

    Args:
        store: the lifecycle store (its `history`). notifier / chart: where it goes and how the chart is drawn
            (both optional: `build` needs neither).
    """

    def __init__(
        self,
        *,
        store: FindingStore,
        settings: DeliverySettings,
        now: Callable[[], datetime],
        notifier: Notifier | None = None,
        chart: ChartRenderer | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.now = now
        self.notifier = notifier
        self.chart = chart

    def team_of(self, record: FindingRecord) -> str:
        """The record's team: stored, else routed from its stored finding, else "unassigned"."""
        if record.team:
            return record.team
        finding = finding_from_record(record)
        team = route_for(finding, self.settings).team if finding is not None else None
        return team or "unassigned"

    def build(self, *, since: datetime, until: datetime) -> DailySummary:
        """The summary of [since, until) against the period of equal length before it."""
        span = until - since
        prev_start = since - span
        records = self.store.history(since=prev_start, until=until)
        return summarize(records, since=since, until=until, team_of=self.team_of, top=self.settings.summary_top,
                         lead_of=evidence_window)

    def data_quality_problems(self, *, since: datetime, until: datetime) -> int:
        """Open data-quality findings seen in [since, until) (telemetry problems, not waste)."""
        return data_quality_open(self.store.history(since=since, until=until), since=since, until=until)

    def last_activity(self) -> datetime | None:
        """The newest activity in the store (last sighting or resolution): the time of the last scan, or None."""
        records = self.store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
        return max((max(r.last_seen, r.resolved_at or r.last_seen) for r in records), default=None)

    def send(self, *, period: timedelta = timedelta(days=1)) -> PostedMessage:
        """Build the summary of the last `period` and post it with its chart.

        Raises:
            DeliveryError / PermanentDeliveryError: from the notifier.
            ValueError: no notifier configured.
        """
        if self.notifier is None:
            raise ValueError("summary: no notifier configured")
        until = self.now()
        summary = self.build(since=until - period, until=until)
        png: bytes | None = None
        note: str | None = None
        if not summary.by_kind_and_team:
            note = NO_DATA_CHART
        elif self.chart is None:
            note = NO_CHART
        else:
            png = self.chart.waste_by_team_and_kind(summary)
            note = None if png is not None else NO_CHART
        channel = self.settings.summary_channel or self.settings.default_channel
        posted = self.notifier.post_summary(summary, channel=channel, chart_png=png, note=note)
        logger.info("summary sent", extra={"channel": posted.channel, "wasted_usd": str(summary.wasted_usd)})
        return posted


def data_quality_open(records: Iterable[FindingRecord], *, since: datetime, until: datetime) -> int:
    """Pure: open data-quality findings seen in [since, until)."""
    return sum(1 for r in records if r.kind == WasteKind.DATA_QUALITY.value and r.state is FindingState.OPEN
               and r.last_seen >= since and r.first_seen < until)


def _groups(current: dict[str, Decimal], previous: dict[str, Decimal], counts: dict[str, int]) -> tuple[GroupTotal, ...]:
    names = set(current) | set(previous) | {n for n, c in counts.items() if c}
    totals = [
        GroupTotal(name=n, wasted_usd=current.get(n, Decimal(0)), previous_usd=previous.get(n, Decimal(0)),
                   findings=counts.get(n, 0))
        for n in names
    ]
    return tuple(sorted(totals, key=lambda g: (-g.wasted_usd, -g.previous_usd, g.name)))


def summarize(
    records: Iterable[FindingRecord],
    *,
    since: datetime,
    until: datetime,
    team_of: Callable[[FindingRecord], str],
    top: int = 10,
    lead_of: Callable[[FindingRecord], timedelta] | None = None,
) -> DailySummary:
    """Pure: the summary of [since, until) from lifecycle records (see the module docstring for the rules)."""
    prev_start = since - (until - since)
    dims: dict[str, Callable[[FindingRecord], str]] = {
        "team": team_of,
        "namespace": lambda r: r.namespace or "(node)",
        "kind": lambda r: r.kind,
        "cluster": lambda r: r.cluster,
    }
    cur: dict[str, dict[str, Decimal]] = {d: defaultdict(Decimal) for d in dims}
    prev: dict[str, dict[str, Decimal]] = {d: defaultdict(Decimal) for d in dims}
    counts: dict[str, dict[str, int]] = {d: defaultdict(int) for d in dims}
    stacked: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    wasted = previous = open_rate = saved = realised = Decimal(0)
    open_n = opened = resolved = unpriced = 0
    offenders: list[Offender] = []
    for r in records:
        lead = lead_of(r) if lead_of is not None else timedelta(0)
        in_period = overlap_days(r, since, until, lead) > 0 or since <= r.first_seen < until or (
            r.resolved_at is not None and since <= r.resolved_at < until)
        if not in_period and overlap_days(r, prev_start, since, lead) == 0:
            continue
        now_usd = wasted_usd(r, since, until, lead)
        before_usd = wasted_usd(r, prev_start, since, lead)
        wasted += now_usd
        previous += before_usd
        keys = {d: fn(r) for d, fn in dims.items()}
        for d, key in keys.items():
            if now_usd:
                cur[d][key] += now_usd
            if before_usd:
                prev[d][key] += before_usd
        if now_usd:
            stacked[(keys["team"], r.kind)] += now_usd
        if not in_period:
            continue
        if r.usd_per_day is None and r.kind not in NOT_WASTE_KINDS:
            unpriced += 1
        if since <= r.first_seen < until and r.kind not in NOT_WASTE_KINDS:
            opened += 1
        is_open = r.state is FindingState.OPEN
        if r.kind in NOT_WASTE_KINDS:
            continue  # no money: data quality counted apart (data_quality_open), governance never as waste
        if is_open and r.last_seen >= since:
            open_n += 1
            open_rate += r.usd_per_day or Decimal(0)
            for d, key in keys.items():
                counts[d][key] += 1  # the same set as open_n: every section adds up to "Open now"
        if r.state is FindingState.RESOLVED and r.resolved_at is not None and since <= r.resolved_at < until:
            resolved += 1
            per_day = r.saved_usd_per_day or Decimal(0)
            saved += per_day
            realised += per_day * Decimal(int((until - r.resolved_at).total_seconds())) / DAY_S
        if now_usd:
            offenders.append(Offender(
                fingerprint=r.fingerprint, cluster=r.cluster, namespace=r.namespace, workload=r.workload,
                kind=r.kind, team=keys["team"], wasted_usd=now_usd, usd_per_day=r.usd_per_day,
                cumulative_usd=r.cumulative_usd, open=is_open,
            ))
    offenders.sort(key=lambda o: (-o.wasted_usd, o.fingerprint))
    return DailySummary(
        since=since, until=until, wasted_usd=wasted, previous_usd=previous, open_usd_per_day=open_rate,
        open_findings=open_n, opened=opened, resolved=resolved, saved_usd_per_day=saved,
        realised_savings_usd=realised,
        by_team=_groups(cur["team"], prev["team"], counts["team"]),
        by_namespace=_groups(cur["namespace"], prev["namespace"], counts["namespace"]),
        by_kind=_groups(cur["kind"], prev["kind"], counts["kind"]),
        by_cluster=_groups(cur["cluster"], prev["cluster"], counts["cluster"]),
        top=tuple(offenders[:top]),
        by_kind_and_team=tuple(sorted((t, k, v) for (t, k), v in stacked.items())),
        unpriced=unpriced,
    )
