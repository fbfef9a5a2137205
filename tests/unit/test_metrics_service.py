"""Unit tests: the metrics gpuwaste exposes (services/metrics.py → sinks/prometheus_metrics.py).

Lifecycle records come from the real lifecycle service over SQLite (as `gpuwaste serve` reads them); the
exposition is parsed back with prometheus-client's own parser, as Prometheus would read it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.models.findings import Cost, Episode, Finding, Subject, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import FindingMessage, ScanCompleted
from gpuwaste.models.metrics import OTHER_WORKLOADS, WasteSeries
from gpuwaste.models.settings import DeliverySettings, LifecycleSettings, RouteTarget
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.metrics import (
    MetricsState,
    bound_workloads,
    health_of_scan,
    snapshot_of_scan,
    waste_from_findings,
)
from gpuwaste.sinks.prometheus_metrics import render_openmetrics, render_text
from gpuwaste.store.sqlite import SqliteFindingStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCAN = timedelta(minutes=10)


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        return self.at


def finding(workload: str, usd: str | None, *, gpus: str = "1", ns: str = "ml", at: datetime = T0,
            kind: WasteKind = WasteKind.IDLE, labels: dict[str, str] | None = None, owner: str | None = None) -> Finding:
    cost = None if usd is None else Cost(priced=True, usd_per_day=Decimal(usd), wasted_gpu_share=Decimal(gpus),
                                         usd_per_gpu_hour=Decimal(usd) / 24 / Decimal(gpus), formula="test")
    return Finding(kind=kind, detector=kind.value, title=f"{workload} idle", recommendation="scale down",
                   subject=Subject(cluster="c1", namespace=ns, workload_kind="Deployment", workload_name=workload,
                                   labels=labels or {}),
                   observed_at=at, window_s=3600, wasted_gpu_share=Decimal(gpus), cost=cost, money_owner=owner)


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def series(ns: str, workload: str, usd: str, gpus: str = "1", kind: str = "idle_allocation", team: str = "t") -> WasteSeries:
    return WasteSeries(cluster="c1", namespace=ns, workload=workload, kind=kind, team=team, usd_per_day=Decimal(usd),
                       wasted_gpus=Decimal(gpus))


# -- bounded cardinality ---------------------------------------------------------------------------------------
def test_top_workloads_per_namespace_keep_their_series_and_the_rest_is_summed_into_other() -> None:
    # GIVEN 13 workloads in namespace ml (USD/day 1..13) and one in namespace web
    waste = [series("ml", f"w{i:02d}", str(i)) for i in range(1, 14)] + [series("web", "site", "5")]
    # WHEN bounded to 10 per namespace
    bounded = bound_workloads(waste, 10)
    # THEN ml keeps its 10 most expensive workloads, the 3 cheapest are one "other" series holding their sum,
    # web is untouched, and no USD/day, GPU or finding is lost
    ml = {s.workload: s for s in bounded if s.namespace == "ml"}
    assert set(ml) == {f"w{i:02d}" for i in range(4, 14)} | {OTHER_WORKLOADS}
    assert ml[OTHER_WORKLOADS].usd_per_day == Decimal(1 + 2 + 3) and ml[OTHER_WORKLOADS].findings == 3
    assert [s.workload for s in bounded if s.namespace == "web"] == ["site"]
    assert sum(s.usd_per_day for s in bounded) == sum(s.usd_per_day for s in waste)
    assert sum(s.wasted_gpus for s in bounded) == sum(s.wasted_gpus for s in waste)


def test_a_workload_keeps_all_its_kinds_when_ranked_by_its_total() -> None:
    # GIVEN workload big with two kinds (60 + 50) and two single-kind workloads of 100 and 1, bound 2
    waste = [series("ml", "big", "60"), series("ml", "big", "50", kind="underused_allocation"),
             series("ml", "mid", "100"), series("ml", "small", "1")]
    # WHEN bounded
    bounded = bound_workloads(waste, 2)
    # THEN big (110 in total) and mid stay whole; small is folded, by kind and team
    assert sorted((s.workload, s.kind) for s in bounded) == [
        ("big", "idle_allocation"), ("big", "underused_allocation"), ("mid", "idle_allocation"),
        (OTHER_WORKLOADS, "idle_allocation")]


# -- waste from findings ---------------------------------------------------------------------------------------
def test_waste_leaves_out_data_quality_and_counts_shared_money_once() -> None:
    # GIVEN an idle finding, a data-quality finding, and a finding whose GPU-hours another finding prices
    idle = finding("trainer", "48.00", gpus="2")
    dq = finding("trainer", None, kind=WasteKind.DATA_QUALITY)
    shared = finding("trainer", "48.00", gpus="2", kind=WasteKind.STALLED, owner=idle.fingerprint)
    unpriced = finding("onprem", None)
    # WHEN turned into series
    waste = {(s.workload, s.kind): s for s in waste_from_findings([idle, dq, shared, unpriced], DeliverySettings())}
    # THEN data quality is not waste, the shared finding adds a count but no money or GPUs, unpriced is counted
    assert set(waste) == {("trainer", "idle_allocation"), ("trainer", "stalled"), ("onprem", "idle_allocation")}
    assert (waste[("trainer", "stalled")].usd_per_day, waste[("trainer", "stalled")].wasted_gpus) == (0, 0)
    assert waste[("trainer", "stalled")].findings == 1 and waste[("trainer", "stalled")].unpriced == 0
    assert waste[("onprem", "idle_allocation")].unpriced == 1 and waste[("onprem", "idle_allocation")].usd_per_day == 0


def test_team_comes_from_the_workload_label_then_the_namespace_map_then_unassigned() -> None:
    settings = DeliverySettings(namespaces={"research": RouteTarget(team="research")})
    found = [finding("a", "1", labels={"gpuwaste.io/team": "vision"}), finding("b", "1", ns="research"),
             finding("c", "1", ns="misc")]
    teams = {s.workload: s.team for s in waste_from_findings(found, settings)}
    assert teams == {"a": "vision", "b": "research", "c": "unassigned"}


def test_since_is_the_start_of_the_ongoing_episode() -> None:
    # GIVEN a finding idle in an ongoing episode that began 25 minutes before the scan
    f = finding("a", "1").model_copy(update={"episodes": (
        Episode(start=T0 - timedelta(minutes=50), end=T0 - timedelta(minutes=40)),
        Episode(start=T0 - timedelta(minutes=25), end=T0, ongoing=True))})
    # THEN the series says it has been wasting since then
    (s,) = waste_from_findings([f], DeliverySettings())
    assert s.since == T0 - timedelta(minutes=25)


# -- running totals over scans (records from the real lifecycle) -----------------------------------------------
class Chain:
    """The lifecycle over SQLite, as `gpuwaste serve` runs it, one scan at a time."""

    def __init__(self) -> None:
        self.store = SqliteFindingStore(":memory:")
        self.clock = Clock()
        self.service = LifecycleService(store=self.store, alerts=MemoryQueue("a"), tickets=MemoryQueue("t"),
                                        settings=LifecycleSettings(resolve_after_missed_scans=1), clock=self.clock)
        self.n = 0

    def scan(self, *found: Finding) -> datetime:
        self.n += 1
        at = T0 + self.n * SCAN
        self.clock.at = at
        found = tuple(f.model_copy(update={"observed_at": at}) for f in found)
        for f in found:
            self.service.handle_finding(FindingMessage(scan_id=f"s{self.n}", finding=f))
        self.service.handle_scan_completed(ScanCompleted(scan_id=f"s{self.n}", cluster="c1", scheduled_time=at,
                                                         fingerprints=tuple(f.fingerprint for f in found)))
        return at

    def records(self) -> tuple[list[FindingRecord], list[FindingRecord]]:
        everything = self.store.history(since=T0 - timedelta(days=60), until=T0 + timedelta(days=60))
        return self.store.open_for_cluster("c1"), [r for r in everything if r.state is FindingState.RESOLVED]


def observe(state: MetricsState, chain: Chain, at: datetime) -> None:
    open_records, resolved = chain.records()
    state.observe_success("c1", at=at, duration_s=1.5, window_s=3600, gpus=8, findings=[], no_verdict_detectors=[],
                          open_records=open_records, resolved_records=resolved)


def test_wasted_gpu_hours_grow_by_open_waste_times_time_between_scans() -> None:
    # GIVEN two idle GPUs of one workload seen by three scans 10 minutes apart
    chain, state = Chain(), MetricsState(settings=DeliverySettings(), first_span=SCAN)
    for _ in range(3):
        observe(state, chain, chain.scan(finding("trainer", "48.00", gpus="2")))
    # WHEN the exposition is read
    text = render_text(state.snapshot()).decode()
    hours = samples(text, "gpuwaste_wasted_gpu_hours_total")
    # THEN 2 GPUs × 30 minutes = 1 GPU-hour (the first scan counts one interval)
    assert list(hours.values()) == [1.0]
    assert dict(next(iter(hours))) == {"cluster": "c1", "namespace": "ml", "kind": "idle_allocation", "team": "unassigned"}
    usd = samples(text, "gpuwaste_waste_usd_per_day")
    assert list(usd.values()) == [48.0]


def test_a_resolved_finding_credits_its_saving_for_the_credit_period() -> None:
    # GIVEN a finding wasting 48 USD/day seen once, then gone (resolved after one missed scan)
    chain = Chain()
    state = MetricsState(settings=DeliverySettings(), first_span=SCAN, savings_credit=timedelta(minutes=25))
    observe(state, chain, chain.scan(finding("trainer", "48.00")))
    observe(state, chain, chain.scan())  # resolved here: no waste left
    resolved = chain.records()[1]
    assert [r.saved_usd_per_day for r in resolved] == [Decimal("48.00")]
    for _ in range(3):  # 30 more minutes, of which 25 − 10 = 15 are still in the credit period
        observe(state, chain, chain.scan())
    # WHEN the exposition is read
    text = render_text(state.snapshot()).decode()
    # THEN the waste gauge is empty and savings = 48 USD/day × 25 minutes of credit (from the resolution on)
    assert samples(text, "gpuwaste_waste_usd_per_day") == {}
    (saved,) = samples(text, "gpuwaste_realised_savings_usd_total").values()
    assert saved == float(Decimal("48.00") * Decimal(25 * 60) / Decimal(86400))


def test_a_failed_scan_is_counted_by_source_and_keeps_the_last_waste() -> None:
    chain, state = Chain(), MetricsState(settings=DeliverySettings(), first_span=SCAN)
    observe(state, chain, chain.scan(finding("trainer", "48.00")))
    # WHEN the next scan fails on Prometheus
    state.observe_failure("c1", at=T0 + timedelta(hours=1), duration_s=30.0, source="prometheus")
    text = render_text(state.snapshot()).decode()
    # THEN the failure and its source are counted (every other source at 0), the last success stays, and the
    # waste of the last successful scan is still exposed
    errors = {dict(k)["source"]: v for k, v in samples(text, "gpuwaste_scan_errors_total").items()}
    assert errors == {"prometheus": 1, "kubernetes": 0, "store": 0, "delivery": 0, "config": 0, "other": 0}
    scans = {dict(k)["outcome"]: v for k, v in samples(text, "gpuwaste_scans_total").items()}
    assert scans == {"success": 1, "failure": 1}
    assert list(samples(text, "gpuwaste_last_success_timestamp_seconds").values()) == [(T0 + SCAN).timestamp()]
    assert list(samples(text, "gpuwaste_last_scan_timestamp_seconds").values()) == [(T0 + timedelta(hours=1)).timestamp()]
    assert list(samples(text, "gpuwaste_waste_usd_per_day").values()) == [48.0]


def test_team_budgets_cover_configured_teams_and_the_default_for_teams_with_waste() -> None:
    state = MetricsState(settings=DeliverySettings(), first_span=SCAN, team_budgets={"research": Decimal(100)},
                         default_budget=Decimal(50))
    chain = Chain()
    observe(state, chain, chain.scan(finding("trainer", "48.00", labels={"team": "vision"})))
    budgets = {dict(k)["team"]: v for k, v in
               samples(render_text(state.snapshot()).decode(), "gpuwaste_team_budget_usd_per_day").items()}
    assert budgets == {"research": 100.0, "vision": 50.0}


# -- the one-shot exposition (scan --output openmetrics / prometheus) ------------------------------------------
def test_one_shot_exposition_has_the_same_families_in_both_formats() -> None:
    found = [finding("trainer", "48.00", gpus="2"), finding("x", None, kind=WasteKind.DATA_QUALITY)
             .model_copy(update={"scope_key": "stale_series:n1"})]
    health = health_of_scan("c1", at=T0, duration_s=2.0, window_s=3600, gpus=8, findings=found,
                            no_verdict_detectors=["idle_allocation"])
    snapshot = snapshot_of_scan(found, health, DeliverySettings(), top=10, version="1.2.3")
    om = render_openmetrics(snapshot).decode()
    text = render_text(snapshot).decode()
    # THEN OpenMetrics ends with # EOF, the text format (node-exporter's textfile collector) has none, and both name
    # the same families with the same waste
    assert om.endswith("# EOF\n") and "# EOF" not in text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"gpuwaste_waste_usd_per_day", "gpuwaste_wasted_gpus", "gpuwaste_wasted_gpu_hours",
            "gpuwaste_data_quality_problems", "gpuwaste_scan_errors"} <= names
    assert list(samples(text, "gpuwaste_wasted_gpus").values()) == [2.0]
    assert {dict(k)["problem"]: v for k, v in samples(text, "gpuwaste_data_quality_problems").items()} == {"stale_series": 1}
    assert samples(text, "gpuwaste_wasted_gpu_hours_total") == {}  # a one-shot has no running totals
