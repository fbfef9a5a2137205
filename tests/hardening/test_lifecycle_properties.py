"""Property-based test of the finding lifecycle under reordered and repeated messages (SQS promises neither
order nor single delivery).

A history is a few scans of one cluster, each seeing a subset of a few findings at some USD/day; its
messages (one FindingMessage per finding seen, one ScanCompleted per scan) are delivered in an order
hypothesis chooses, with repeats. Whatever the order:

* no alert key (fingerprint, action, scan) is decided twice;
* per finding, alerts alternate: NEW … RESOLVED … NEW (never two NEW while open, never RESOLVED unopened);
* what the last scan saw is open at the end, with nothing left in any outbox;
* delivering every message once more repeats no decision and decides no alert, reminder or ticket — at
  most the resolution of a finding the last scan did not see (what in-order delivery decides); in order, it
  decides nothing at all.
Deterministic: ``derandomize=True`` (the same examples on every run), no deadline.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage, ScanCompleted
from gpuwaste.models.settings import LifecycleSettings
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, finding
from tests.hardening.harness import STAGE_ADAPTER, DayClock

NAMES = ("a", "b", "c")
INTERVAL = timedelta(minutes=10)
PRICES = (Decimal("10.00"), Decimal("40.00"), Decimal("150.00"))

scan_strategy = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(PRICES), max_size=len(NAMES))


def messages_for(history: list[dict[str, Decimal]]) -> list[str]:
    """The queue bodies a history produces, in scan order: findings, then the scan's completion."""
    bodies: list[str] = []
    for n, seen in enumerate(history):
        at = NOW + INTERVAL * n
        scan_id = f"scan-{n:02d}"
        fps = []
        for name, usd in sorted(seen.items()):
            f = finding(name, usd_per_day=str(usd))
            f = f.model_copy(update={"observed_at": at})
            fps.append(f.fingerprint)
            bodies.append(FindingMessage(scan_id=scan_id, scan_seq=len(fps) - 1, scan_total=len(seen), finding=f).model_dump_json())
        bodies.append(ScanCompleted(scan_id=scan_id, cluster="prod", scheduled_time=at, fingerprints=tuple(fps)).model_dump_json())
    return bodies


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[dict[str, Decimal]], list[str]]:
    """A history and a delivery order: every message at least once, some repeated, any order."""
    history = draw(st.lists(scan_strategy, min_size=1, max_size=7))
    bodies = messages_for(history)
    extra = draw(st.lists(st.sampled_from(bodies), max_size=len(bodies)))
    order = draw(st.permutations(bodies + extra))
    return history, list(order)


def run(service: LifecycleService, bodies: list[str]) -> None:
    for body in bodies:
        message = STAGE_ADAPTER.validate_json(body)
        if isinstance(message, ScanCompleted):
            service.handle_scan_completed(message)
        else:
            service.handle_finding(message)


@settings(derandomize=True, deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries())
def test_lifecycle_reordered_and_repeated_messages_keep_the_lifecycle_consistent(
        case: tuple[list[dict[str, Decimal]], list[str]]) -> None:
    # GIVEN a history of scans and an arbitrary delivery order with repeats
    history, order = case
    store = SqliteFindingStore(":memory:")
    alerts, tickets = MemoryQueue(), MemoryQueue()
    service = LifecycleService(store=store, alerts=alerts, tickets=tickets,
                               settings=LifecycleSettings(resolve_after_missed_scans=2), clock=DayClock(NOW))
    # WHEN every message is handled in that order
    run(service, order)
    decided = [AlertMessage.model_validate_json(b) for b in alerts.drain()]
    escalations = [AlertMessage.model_validate_json(b) for b in tickets.drain()]
    # THEN no alert is decided twice, and each finding asks for a ticket at most once per open period
    keys = Counter((a.fingerprint, a.action, a.scan_id) for a in decided)
    assert max(keys.values(), default=1) == 1, keys.most_common(3)
    reopened = Counter(a.fingerprint for a in decided if a.action is AlertAction.NEW)
    asked = Counter(a.fingerprint for a in escalations)
    assert all(asked[fp] <= max(reopened[fp], 1) for fp in asked), (asked, reopened)
    # ... per finding, alerts alternate NEW → (WORSE | REMINDER)* → RESOLVED → NEW
    for fp in {a.fingerprint for a in decided}:
        open_ = False
        for a in (x for x in decided if x.fingerprint == fp):
            if a.action is AlertAction.NEW:
                assert not open_
                open_ = True
            elif a.action is AlertAction.RESOLVED:
                assert open_
                open_ = False
            else:
                assert open_
    # ... whatever the last scan saw is open, and no outbox holds unsent messages
    last = {finding(name).fingerprint for name in history[-1]}
    for fp in last:
        record = store.get(fp)
        assert record is not None and record.state is FindingState.OPEN
    seen_ever = {finding(name).fingerprint for scan in history for name in scan}
    assert all(r.outbox_json == "" for r in (store.get(fp) for fp in seen_ever) if r is not None)
    # WHEN every message is delivered once more
    run(service, order)
    again = [AlertMessage.model_validate_json(b) for b in alerts.drain()]
    # THEN no earlier decision is repeated, and the only new ones are resolutions of findings the last scan did
    # not see (a completion redelivered after a late, older finding counts its miss again, converging to what
    # in-order delivery decides) — never a new alert, reminder or ticket
    assert tickets.drain() == []
    assert all(a.action is AlertAction.RESOLVED and a.fingerprint not in last for a in again), again
    assert not {(a.fingerprint, a.action, a.scan_id) for a in again} & set(keys), "a decision was repeated"
    store.close()


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.lists(scan_strategy, min_size=3, max_size=7))
def test_lifecycle_in_order_history_resolves_what_disappeared(history: list[dict[str, Decimal]]) -> None:
    # GIVEN a history delivered in order, each message twice (a duplicate right after the original)
    store = SqliteFindingStore(":memory:")
    alerts = MemoryQueue()
    service = LifecycleService(store=store, alerts=alerts, tickets=None,
                               settings=LifecycleSettings(resolve_after_missed_scans=2), clock=DayClock(NOW))
    bodies = messages_for(history)
    # WHEN handled, then the whole history is redelivered
    run(service, [b for body in bodies for b in (body, body)])
    first = alerts.drain()
    run(service, bodies)
    assert alerts.drain() == [], f"in-order redelivery decides nothing (first pass decided {len(first)})"

    # THEN a finding missing from the last two scans is resolved; one seen in the last scan is open
    for name in NAMES:
        record = store.get(finding(name).fingerprint)
        if record is None:
            continue
        if name in history[-1]:
            assert record.state is FindingState.OPEN
        elif name not in history[-2]:
            assert record.state is FindingState.RESOLVED and record.saved_usd_per_day == record.usd_per_day
    store.close()


def test_lifecycle_late_finding_does_not_reopen_a_newer_resolution() -> None:
    # GIVEN b seen by scans 0 and 1, missing from scans 2 and 3 (resolve after 2 missed scans)
    ten = Decimal("10.00")
    f0, c0, f1, c1, c2, c3 = messages_for([{"b": ten}, {"b": ten}, {}, {}])
    store, alerts = SqliteFindingStore(":memory:"), MemoryQueue()
    service = LifecycleService(store=store, alerts=alerts, tickets=None,
                               settings=LifecycleSettings(resolve_after_missed_scans=2), clock=DayClock(NOW))
    # WHEN scan 1's finding arrives late, after scans 2 and 3 resolved b; then everything is redelivered
    order = [f0, c0, c2, c3, f1, c1]
    run(service, order)
    first = [(a.action, a.scan_id) for a in map(AlertMessage.model_validate_json, alerts.drain())]
    run(service, order)
    again = [(a.action, a.scan_id) for a in map(AlertMessage.model_validate_json, alerts.drain())]
    store.close()
    # THEN b was told NEW once and RESOLVED once; the late, older finding changes nothing
    assert first == [(AlertAction.NEW, "scan-00"), (AlertAction.RESOLVED, "scan-03")]
    assert again == []
