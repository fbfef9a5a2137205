"""Service: the daily cost summary from the lifecycle store's history (totals, trend, top offenders, savings).

Money model (one ledger, `models/ledger.py`): a record wastes money only over the time its sightings' evidence
covered, each stretch at the USD/day of the sighting that covered it first; a period counts the overlapping part
(USD = USD/day × overlapping seconds ÷ 86400). The store's cumulative USD, Slack and Jira read the same ledger, so
a period's total is the sum of its sub-periods' and matches what the other surfaces show. The trend compares the
period with the one of equal length just before it. Savings: a finding resolved in the period saves its
`saved_usd_per_day`; "realised" counts the days from its resolution to the end of the period.
Data-quality findings carry no money and are left out of the waste counts (open, opened, and the per-group
`findings`); `data_quality_open` counts them apart. Attribution coverage: per cluster and allocation kind, the
GPU-hour-weighted share of allocated GPU-hours with attributable telemetry over the scans of the hours the period
overlaps (`models.coverage.coverage_rows` over `FindingStore.coverage`). Spend and the fleet funnel: the allocation
ledger the store keeps per cluster and hour (`FindingStore.allocation`, `models.spend.spend_of`; issue 24), with each
team's month (`SummaryService.month_view`: spend and waste to date and at month-end, the budget). Unpriced findings
are counted, not summed. A group's
`findings` counts the same set as `open_findings` (open waste findings seen in the period), so the counts of
every section (team, namespace, kind, cluster) add up to `open_findings`.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from gpuwaste.errors import DeliveryError, GpuWasteError
from gpuwaste.models.coverage import coverage_rows
from gpuwaste.models.findings import NOT_WASTE_KINDS, WasteKind
from gpuwaste.models.ledger import waste_usd
from gpuwaste.models.lifecycle import FindingRecord, FindingState, money_spans
from gpuwaste.models.notices import DailySummary, GroupTotal, Offender, PostedMessage, TeamMonth, TrendDay
from gpuwaste.models.settings import DeliverySettings, ServeSettings
from gpuwaste.models.spend import spend_of
from gpuwaste.people import namespace_label, waste_since
from gpuwaste.ports import ChartRenderer, FindingStore, Notifier, OnceLedger
from gpuwaste.services.justifications import active_by_team
from gpuwaste.services.notify import finding_from_record
from gpuwaste.services.routing import route_for

logger = logging.getLogger(__name__)

DAY_S = Decimal(86400)
NO_CHART = "Chart left out: matplotlib is not installed (pip install 'gpuwaste[charts]')."
NO_DATA_CHART = "No chart: no priced waste in the period."
#: How long a summary post being sent blocks another invocation (longer than the function's 120 s timeout: a holder
#: past it has died, and the scheduler's retry takes over), and how long a posted summary is remembered (longer than
#: the scheduler's retries and event age).
SUMMARY_HOLD = timedelta(minutes=5)
SUMMARY_KEEP = timedelta(days=3)


@dataclass(frozen=True)
class SummaryDelivery:
    """What one `SummaryService.send` did.

    Attributes:
        day: the day the summary is for (UTC): the key of its once-a-day record.
        posted: the messages the sinks accepted in this call.
        already_posted: the sinks that had this day's summary already (a retried invocation: nothing re-sent).
    """

    day: date
    posted: tuple[PostedMessage, ...]
    already_posted: tuple[str, ...]


def _window_s(record: FindingRecord) -> int:
    """The evidence window (s) of the record's latest sighting (0 when unknown)."""
    try:
        return int(json.loads(record.finding_json).get("window_s") or 0) if record.finding_json else 0
    except (ValueError, TypeError, AttributeError):
        return 0


def wasted_usd(record: FindingRecord, start: datetime, end: datetime, lead: timedelta = timedelta(0)) -> Decimal:
    """USD the record wasted inside [start, end), from its ledger (0 when unpriced or data quality; unrounded).

    `lead` is ignored: the ledger already holds the evidence window of each sighting (kept for callers)."""
    if record.usd_per_day is None and not record.ledger or record.kind == WasteKind.DATA_QUALITY.value:
        return Decimal(0)
    return waste_usd(money_spans(record), start, end)


def _touches(record: FindingRecord, start: datetime, end: datetime) -> bool:
    """The record's evidence covers part of [start, end)."""
    return any(s.start < end and s.end > start for s in money_spans(record))


def waste_in(record: FindingRecord, start: datetime, end: datetime, lead: timedelta = timedelta(0)) -> Decimal:
    """USD the record wasted inside [start, end): the one function every summary number comes from (the money
    ledger, `models.ledger.waste_usd`, over the record's sightings)."""
    return wasted_usd(record, start, end, lead)


#: Days of trend the summary carries (the report draws the last 7 and the last 30).
TREND_DAYS = 30


def trend(records: Iterable[FindingRecord], *, until: datetime, team_of: Callable[[FindingRecord], str],
          days: int = TREND_DAYS, lead_of: Callable[[FindingRecord], timedelta] | None = None) -> tuple[TrendDay, ...]:
    """Pure: USD wasted per team on each of the `days` UTC days up to `until` (the last day is partial, up to
    `until`), and the savings realised each day by findings resolved earlier (saved USD/day × the part of the day
    after the resolution). Oldest day first."""
    end_day = until.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    starts = [end_day - timedelta(days=n) for n in range(days - 1, -1, -1)]
    waste: dict[datetime, dict[str, Decimal]] = {d: defaultdict(Decimal) for d in starts}
    saved: dict[datetime, Decimal] = defaultdict(Decimal)
    for r in records:
        lead = lead_of(r) if lead_of is not None else timedelta(0)
        team = None
        for d in starts:
            hi = min(d + timedelta(days=1), until)
            usd = waste_in(r, d, hi, lead)
            if usd:
                team = team or team_of(r)
                waste[d][team] += usd
            if r.state is FindingState.RESOLVED and r.resolved_at is not None and r.saved_usd_per_day:
                lo = max(d, r.resolved_at)
                if hi > lo:
                    saved[d] += r.saved_usd_per_day * Decimal(int((hi - lo).total_seconds())) / DAY_S
    return tuple(
        TrendDay(day=d, by_team=tuple(sorted(waste[d].items(), key=lambda kv: (-kv[1], kv[0]))), saved_usd=saved[d])
        for d in starts
    )


def evidence_window(record: FindingRecord) -> timedelta:
    """The evidence window of the stored finding (`window_s`), zero when the record holds none."""
    finding = finding_from_record(record)
    return timedelta(seconds=finding.window_s) if finding is not None else timedelta(0)


class SummaryService:
    """Builds and sends the daily summary.

    Args:
        store: the lifecycle store (its `history`). notifier / chart: where it goes and how the chart is drawn
            (both optional: `build` needs neither). notifiers: more chat sinks that also get it (Teams, a webhook).
        ledger: where each day's post per sink and destination is recorded, so a retried invocation does not post
            it again (None: every `send` posts — the local command).
        serve: where the teams' monthly budgets are (`ServeSettings`; None: no budgets) for the month view.
    """

    def __init__(
        self,
        *,
        store: FindingStore,
        settings: DeliverySettings,
        now: Callable[[], datetime],
        notifier: Notifier | None = None,
        chart: ChartRenderer | None = None,
        notifiers: Sequence[Notifier] = (),
        ledger: OnceLedger | None = None,
        serve: ServeSettings | None = None,
    ) -> None:
        self.ledger = ledger
        self.serve = serve
        self.store = store
        self.settings = settings
        self.now = now
        self.notifier = notifier
        self.notifiers = tuple(n for n in (notifier, *notifiers) if n is not None)
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
        start = min(prev_start, until - timedelta(days=TREND_DAYS + 1))
        records = self.store.history(since=start, until=until)
        current = [r for r in records if max(r.last_seen, r.resolved_at or r.last_seen) >= prev_start]
        summary = summarize(current, since=since, until=until, team_of=self.team_of, top=self.settings.summary_top,
                            lead_of=evidence_window)
        spend = spend_of(self.store.allocation(since=since, until=until))
        return summary.model_copy(update={"trend": trend(records, until=until, team_of=self.team_of,
                                                         lead_of=evidence_window),
                                          "justified": active_by_team(records, at=until, team_of=self.team_of),
                                          "coverage": coverage_rows(self.store.coverage(since=since, until=until)),
                                          "spend": None if spend.empty else spend,
                                          "month": () if spend.empty else self.month_view(records, until=until)})

    def month_view(self, records: Sequence[FindingRecord], *, until: datetime) -> tuple[TeamMonth, ...]:
        """Per team: spend (the stored allocation ledger) and waste month to date and at month-end, and the budget.

        `records` must hold the month's (the history since the month began); `services.month_end` has the rules.
        """
        from gpuwaste.services.month_end import month_bounds, month_end, team_months  # it imports this module

        start, _ = month_bounds(until)
        serve = self.serve or ServeSettings()
        rows = month_end(records, until=until, team_of=self.team_of,
                         budgets_per_day=dict(serve.team_budgets_usd_per_day),
                         default_per_day=serve.default_team_budget_usd_per_day,
                         budgets_per_month=dict(serve.team_budgets_usd_per_month),
                         default_per_month=serve.default_team_budget_usd_per_month,
                         spend=spend_of(self.store.allocation(since=start, until=until)),
                         spend_last_day=spend_of(self.store.allocation(since=until - timedelta(days=1), until=until)))
        return team_months(rows)

    def data_quality_problems(self, *, since: datetime, until: datetime) -> int:
        """Open data-quality findings seen in [since, until) (telemetry problems, not waste)."""
        return data_quality_open(self.store.history(since=since, until=until), since=since, until=until)

    def last_activity(self) -> datetime | None:
        """The newest activity in the store (last sighting or resolution): the time of the last scan, or None."""
        records = self.store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
        return max((max(r.last_seen, r.resolved_at or r.last_seen) for r in records), default=None)

    def send(self, *, period: timedelta = timedelta(days=1), day: date | None = None) -> SummaryDelivery:
        """Build the summary of the last `period` and post it with its chart to every sink, once per `day` (default:
        today, UTC) and destination: each post is claimed in the ledger first and confirmed once the sink accepted it,
        so a retry of the same day's invocation posts only what was not accepted (a refused post releases its claim).
        A sink's failure does not stop the others and is raised after them.

        Raises:
            DeliveryError / PermanentDeliveryError: from a notifier.
            DeliveryError: another invocation is posting the same day's summary right now (retry later).
            StoreError: the ledger cannot be reached.
            ValueError: no notifier configured.
        """
        if not self.notifiers:
            raise ValueError("summary: no notifier configured")
        until = self.now()
        day = day or until.astimezone(UTC).date()
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
        sent: list[PostedMessage] = []
        already: list[str] = []
        errors: list[Exception] = []
        for notifier in self.notifiers:
            sink = notifier.name
            key = f"summary#{day.isoformat()}#{sink}#{channel}"
            if self.ledger is not None:
                claim = self.ledger.claim(key, now=until, hold_until=until + SUMMARY_HOLD, keep_until=until + SUMMARY_KEEP)
                if claim != "claimed":
                    logger.info("summary already sent to this sink today; not posted again",
                                extra={"sink": sink, "day": day.isoformat(), "claim": claim})
                    if claim == "held":
                        errors.append(DeliveryError(f"summary {day.isoformat()} to {sink}: another invocation is "
                                                    "posting it; retry later"))
                    else:
                        already.append(sink)
                    continue
            try:
                posted = notifier.post_summary(summary, channel=channel, chart_png=png, note=note)
            except Exception as exc:  # the other sinks still get it; raised below
                logger.warning("summary not sent to a sink", extra={"sink": sink, "error": str(exc)})
                if self.ledger is not None:
                    self.ledger.release(key)
                errors.append(exc)
                continue
            if self.ledger is not None:
                self._confirm(key, keep_until=until + SUMMARY_KEEP)
            logger.info("summary sent", extra={"destination": posted.destination, "sink": posted.sink,
                                               "wasted_usd": str(summary.wasted_usd)})
            sent.append(posted)
        if errors:
            raise errors[0]
        return SummaryDelivery(day=day, posted=tuple(sent), already_posted=tuple(already))

    def _confirm(self, key: str, *, keep_until: datetime) -> None:
        """Confirm a post; a ledger failure here is logged, not raised: the post happened, and the claim still holds
        off a retry for `SUMMARY_HOLD` (raising would make the retry come sooner, not post less)."""
        assert self.ledger is not None
        try:
            self.ledger.confirm(key, keep_until=keep_until)
        except GpuWasteError as exc:
            logger.warning("summary posted but not recorded as posted", extra={"key": key, "error": str(exc)})


def data_quality_open(records: Iterable[FindingRecord], *, since: datetime, until: datetime) -> int:
    """Pure: open data-quality findings seen in [since, until)."""
    return sum(1 for r in records if r.kind == WasteKind.DATA_QUALITY.value and r.state is FindingState.OPEN
               and r.last_seen >= since and r.first_seen < until)


def _groups(current: dict[str, Decimal], previous: dict[str, Decimal], counts: dict[str, int],
            before: set[str]) -> tuple[GroupTotal, ...]:
    names = set(current) | set(previous) | {n for n, c in counts.items() if c}
    totals = [
        GroupTotal(name=n, wasted_usd=current.get(n, Decimal(0)), previous_usd=previous.get(n, Decimal(0)),
                   findings=counts.get(n, 0), new=n not in before)
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
        "namespace": lambda r: namespace_label(r.namespace),
        "kind": lambda r: r.kind,
        "cluster": lambda r: r.cluster,
    }
    cur: dict[str, dict[str, Decimal]] = {d: defaultdict(Decimal) for d in dims}
    prev: dict[str, dict[str, Decimal]] = {d: defaultdict(Decimal) for d in dims}
    counts: dict[str, dict[str, int]] = {d: defaultdict(int) for d in dims}
    before: dict[str, set[str]] = {d: set() for d in dims}  # groups with a finding seen in the period before
    stacked: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    wasted = previous = open_rate = saved = realised = Decimal(0)
    open_n = opened = resolved = unpriced = 0
    offenders: list[Offender] = []
    for r in records:
        seen_in = r.first_seen < until and r.last_seen >= since
        in_period = _touches(r, since, until) or seen_in or since <= r.first_seen < until or (
            r.resolved_at is not None and since <= r.resolved_at < until)
        if not in_period and not _touches(r, prev_start, since):
            continue
        now_usd = waste_in(r, since, until)
        before_usd = waste_in(r, prev_start, since)
        wasted += now_usd
        previous += before_usd
        keys = {d: fn(r) for d, fn in dims.items()}
        seen_before = before_usd or _touches(r, prev_start, since) or (r.first_seen < since and r.last_seen >= prev_start)
        for d, key in keys.items():
            if seen_before:
                before[d].add(key)
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
                cumulative_usd=r.cumulative_usd, open=is_open, first_seen=r.first_seen, resolved_at=r.resolved_at,
                waste_since=waste_since(r.first_seen, ledger=money_spans(r), window_s=_window_s(r)),
            ))
    offenders.sort(key=lambda o: (-o.wasted_usd, o.fingerprint))
    return DailySummary(
        since=since, until=until, wasted_usd=wasted, previous_usd=previous, open_usd_per_day=open_rate,
        open_findings=open_n, opened=opened, resolved=resolved, saved_usd_per_day=saved,
        realised_savings_usd=realised,
        by_team=_groups(cur["team"], prev["team"], counts["team"], before["team"]),
        by_namespace=_groups(cur["namespace"], prev["namespace"], counts["namespace"], before["namespace"]),
        by_kind=_groups(cur["kind"], prev["kind"], counts["kind"], before["kind"]),
        by_cluster=_groups(cur["cluster"], prev["cluster"], counts["cluster"], before["cluster"]),
        top=tuple(offenders[:top]),
        by_kind_and_team=tuple(sorted((t, k, v) for (t, k), v in stacked.items())),
        unpriced=unpriced,
    )
