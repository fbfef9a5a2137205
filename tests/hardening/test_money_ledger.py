"""One money ledger: the waste of a finding over any period comes from one function, so periods add up and every
surface shows the same number.

Property (hypothesis, derandomized): for any history of sightings — irregular scan gaps (some longer than the
evidence window), changing USD/day, windows with and without `observed_s`, resolutions and reopenings — applied by
the lifecycle to the store, and any split of a period into sub-periods:

* the daily summary's total over the period equals the sum of its totals over the sub-periods (to 1e-18 USD);
* over all time, each finding's money in the summary, its cumulative USD in the store, in the Slack message and in
  the Jira ticket are the same number to the cent, and a digest's cumulative is the summary's total of the same
  findings to the cent (the store keeps the ledger's exact figure; surfaces round once, when they print);
* no money is counted before the first evidence or in a gap no evidence covers.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwaste.models.ledger import waste_usd
from gpuwaste.models.lifecycle import money_spans
from gpuwaste.models.messages import FindingMessage, ScanCompleted
from gpuwaste.models.notices import Notice, NoticeItem, NoticeKind, Route
from gpuwaste.models.settings import DeliverySettings, JiraSettings, LifecycleSettings
from gpuwaste.people import age, since_words, waste_since
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.summary import summarize
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.slack_blocks import render_notice, usd
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, finding
from tests.hardening.harness import DayClock

NAMES = ("a", "b")
PRICES = (Decimal("12.34"), Decimal("40.00"), Decimal("155.55"))
FAR_PAST = datetime(2000, 1, 1, tzinfo=UTC)
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)

sighting = st.tuples(
    st.integers(min_value=1, max_value=400),            # minutes since the previous scan (> the window: a gap)
    st.dictionaries(st.sampled_from(NAMES), st.tuples(st.sampled_from(PRICES), st.sampled_from((0, 600, 1800))),
                    max_size=len(NAMES)),               # who is seen, at what USD/day, with which observed_s
)


def _apply(history: list[tuple[int, dict[str, tuple[Decimal, int]]]]) -> tuple[SqliteFindingStore, datetime]:
    store = SqliteFindingStore(":memory:")
    lifecycle = LifecycleService(store=store, alerts=MemoryQueue(), tickets=MemoryQueue(),
                                 settings=LifecycleSettings(resolve_after_missed_scans=2), clock=DayClock(NOW))
    at = NOW
    for n, (gap, seen) in enumerate(history):
        at += timedelta(minutes=gap)
        fps = []
        for name, (price, observed_s) in sorted(seen.items()):
            f = finding(name, usd_per_day=str(price)).model_copy(update={"observed_at": at, "observed_s": observed_s})
            fps.append(f.fingerprint)
            lifecycle.handle_finding(FindingMessage(scan_id=f"s{n}", finding=f))
        lifecycle.handle_scan_completed(ScanCompleted(scan_id=f"s{n}", cluster="prod", scheduled_time=at,
                                                      fingerprints=tuple(fps)))
    return store, at


def _total(store: SqliteFindingStore, since: datetime, until: datetime) -> Decimal:
    records = store.history(since=FAR_PAST, until=FAR_FUTURE)
    return summarize(records, since=since, until=until, team_of=lambda r: r.team or "-").wasted_usd


@settings(derandomize=True, deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(sighting, min_size=1, max_size=8),
       cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=6))
def test_money_ledger_sub_periods_add_up_and_every_surface_shows_the_same_cents(
        history: list[tuple[int, dict[str, tuple[Decimal, int]]]], cuts: list[int]) -> None:
    # GIVEN a history applied by the lifecycle
    store, end = _apply(history)
    start = NOW - timedelta(hours=2)
    # WHEN the period [start, end] is split at arbitrary points
    points = sorted({start, end, *(start + timedelta(seconds=c % int((end - start).total_seconds() + 1))
                                   for c in cuts)})
    whole = _total(store, start, end)
    parts = sum((_total(store, a, b) for a, b in zip(points, points[1:], strict=False)), Decimal(0))
    # THEN the sub-period totals add up to the period total
    assert abs(whole - parts) < Decimal("1e-18"), (whole, parts)
    # ... and for each finding, over all time, the summary, the store, Slack and Jira show the same cents
    records = store.history(since=FAR_PAST, until=FAR_FUTURE)
    summary = summarize(records, since=FAR_PAST, until=FAR_FUTURE, team_of=lambda r: "-", top=50)
    by_fp = {o.fingerprint: o.wasted_usd for o in summary.top}
    settings_ = DeliverySettings(jira=JiraSettings(default_project="OPS"))
    tickets = TicketService(sink=None, store=store, settings=settings_, now=lambda: end)  # type: ignore[arg-type]
    for r in records:
        ledger_total = waste_usd(money_spans(r))
        assert ledger_total == r.cumulative_usd  # the store keeps the ledger's figure unrounded
        assert usd(by_fp.get(r.fingerprint, Decimal(0))) == usd(r.cumulative_usd)
        f = finding(r.workload or "a", usd_per_day=str(r.usd_per_day))
        item = NoticeItem(fingerprint=r.fingerprint, finding=f, first_seen=r.first_seen, cumulative_usd=r.cumulative_usd)
        slack = render_notice(Notice(kind=NoticeKind.ALERT, route=Route(channel="#x", source="t"), items=(item,)),
                              now=end)[0]
        fields = [f["text"] for b in slack.blocks for f in b.get("fields", [])]
        assert f"*Cumulative so far*\n{usd(r.cumulative_usd)}" in fields
        # "Since" is when the waste began: the first report, or the earlier start its evidence shows
        assert f"*Since:* {since_words(r.first_seen, f, f.observed_at)}" in json.dumps(slack.blocks, ensure_ascii=False)
        draft = tickets.draft(f, r.fingerprint, first_seen=r.first_seen, cumulative_usd=str(r.cumulative_usd))
        assert dict(draft.facts)["Cumulative so far"] == usd(r.cumulative_usd)
        # ... and nothing is counted before the first evidence
        first_evidence = min(s.start for s in money_spans(r)) if money_spans(r) else r.first_seen
        assert waste_usd(money_spans(r), FAR_PAST, first_evidence) == 0
    # ... and a digest of them shows the same cumulative (their sum) and each one's age at its last scan
    items = tuple(NoticeItem(fingerprint=r.fingerprint, cumulative_usd=r.cumulative_usd, first_seen=r.first_seen,
                             finding=finding(r.workload or "a", usd_per_day=str(r.usd_per_day)).model_copy(
                                 update={"observed_at": r.last_seen}))
                  for r in records)
    if len(items) > 1:
        digest = render_notice(Notice(kind=NoticeKind.DIGEST, route=Route(channel="#x", source="t"), items=items))
        text = json.dumps([b for p in digest for b in p.blocks], ensure_ascii=False)
        assert f"cumulative so far {usd(sum((r.cumulative_usd for r in records), Decimal(0)))}" in text
        # ... which is the group's money in the summary over the same time, to the cent (rounded once, not per item)
        assert f"cumulative so far {usd(summary.wasted_usd)}" in text, (summary.wasted_usd, text)
        for r, it in zip(records, items, strict=True):
            began = waste_since(r.first_seen, it.finding)
            assert ("new" if not it.finding.episodes and r.first_seen >= r.last_seen
                    else f"for {age(began, r.last_seen)}") in text
    store.close()


def test_money_ledger_a_gap_longer_than_the_window_is_not_counted() -> None:
    # GIVEN a finding seen at T (1 h window) and again 5 h later (1 h window), at $48/day
    store, _ = _apply([(60, {"a": (Decimal("48.00"), 0)}), (300, {"a": (Decimal("48.00"), 0)})])
    (record,) = store.history(since=FAR_PAST, until=FAR_FUTURE)
    # THEN only the two evidence hours count: 2 × $2.00, not the 5 h between the scans
    assert record.cumulative_usd == Decimal("4.00")
    store.close()
