"""The allocation ledger in the lifecycle store (issue 24): each scan shard's funnel and allocated cost per team and
namespace is kept per cluster and UTC hour — SQLite and DynamoDB (moto server) alike — counted once per shard, and a
period read back from the store equals the scan-time share ledgers of its hours to the cent."""

from __future__ import annotations

import dataclasses
import io
import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import boto3
import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.join import join
from gpuwaste.models.messages import ScanCompleted, split_completion
from gpuwaste.models.settings import DeliverySettings, LifecycleSettings, ServeSettings
from gpuwaste.models.spend import FunnelFigures, ScanAllocation, SpendGroup, spend_of
from gpuwaste.models.telemetry import Signal
from gpuwaste.ports import FindingStore
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.showback import ScanLedger, funnel, scan_ledger, showback
from gpuwaste.services.showback.spend import scan_allocation
from gpuwaste.services.summary import SummaryService
from gpuwaste.sinks.slack_blocks import render_summary
from gpuwaste.sinks.summary_report import render_html, render_json, render_markdown, render_terminal
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from gpuwaste.store.ledger_items import item_bytes
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack
from tests.unit.timeline_builders import cluster, const, gpu, node, pod, window

pytestmark = pytest.mark.integration
DAY = datetime(2026, 3, 9, tzinfo=UTC)
EXPIRES = 1_900_000_000


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[FindingStore]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        s = SqliteFindingStore(tmp_path / "state.db")
        yield s
        s.close()
        return
    request.getfixturevalue("aws")
    ddb = boto3.client("dynamodb")
    stack = create_stack(boto3.client("sqs"), ddb)
    yield DynamoDbFindingStore(client=ddb, table_name=stack.table_name)


def group(name: str, hours: str, cents: int) -> SpendGroup:
    return SpendGroup(name=name, gpu_hours=Decimal(hours), cents=cents)


def alloc(window_s: int = 3600, *, teams: tuple[SpendGroup, ...] = (), total: str = "0", pods: int = 0) -> ScanAllocation:
    held = sum((t.gpu_hours for t in teams if not t.name.startswith("(")), Decimal(0))
    return ScanAllocation(window_s=window_s, funnel=FunnelFigures(total_gpu_hours=Decimal(total), allocated_gpu_hours=held,
                                                                  unmet_pods=pods), by_team=teams, by_namespace=teams)


def completion(scan_id: str, at: datetime, allocation: ScanAllocation | None, *, cluster: str = "prod", shard: int = 0,
               shard_count: int = 1) -> ScanCompleted:
    return ScanCompleted(scan_id=scan_id, cluster=cluster, scheduled_time=at, allocation=allocation, shard=shard,
                         shard_count=shard_count)


def test_store_keeps_the_allocation_ledger_per_cluster_and_hour_counting_a_redelivered_shard_once(store: FindingStore) -> None:
    # GIVEN a scan at 09:05 (delivered twice), one at 09:10 split over two shards (each its own node set), one at 10:05
    # and a completion from a scanner older than the field (no ledger)
    t = DAY + timedelta(hours=9, minutes=5)
    a = completion("s-a", t, alloc(1800, teams=(group("ml", "4", 1000), group("(unallocated)", "2", 500)), total="6",
                                   pods=2))
    b0 = completion("s-b", t + timedelta(minutes=5), alloc(1800, teams=(group("ml", "1", 250),), total="1"),
                    shard=0, shard_count=2)
    b1 = completion("s-b", t + timedelta(minutes=5), alloc(1800, teams=(group("vision", "3", 999),), total="3", pods=1),
                    shard=1, shard_count=2)
    c = completion("s-c", t + timedelta(hours=1), alloc(3600, teams=(group("ml", "8", 2000),), total="8"))
    old = completion("s-old", t, None)
    # WHEN each is recorded
    got = [store.record_allocation(m, expires_at=EXPIRES) for m in (a, a, b0, b1, c, old)]
    # THEN the redelivery and the completion without a ledger add nothing
    assert got == [True, False, True, True, True, False]
    nine, ten = store.allocation(since=t, until=t + timedelta(hours=1, minutes=30))
    # AND 09:00 holds both scans (the window counted once per scan, on shard 0), their groups added
    assert (nine.cluster, nine.hour, nine.scans, nine.window_s) == ("prod", DAY + timedelta(hours=9), 2, 3600)
    assert [(g.name, g.gpu_hours, g.cents) for g in nine.allocation.by_team] == [
        ("ml", Decimal(5), 1250), ("vision", Decimal(3), 999), ("(unallocated)", Decimal(2), 500)]
    assert nine.allocation.funnel.total_gpu_hours == 10
    assert nine.allocation.funnel.unmet_pods == 2  # the most one scan saw, not a sum
    assert (ten.hour, ten.scans, ten.allocation.cents) == (DAY + timedelta(hours=10), 1, 2000)
    # AND a period starting at 10:00 reads only that hour; one ending at 09:00 none
    assert [x.hour.hour for x in store.allocation(since=t + timedelta(minutes=55), until=t + timedelta(hours=2))] == [10]
    assert store.allocation(since=t - timedelta(hours=3), until=DAY + timedelta(hours=9)) == []


def _fleet(hour: int) -> ScanLedger:
    """A priced scan ledger of the hour ending at DAY + hour (the fleet changes with the hour: holders come and go)."""
    busy, idle = {Signal.SM_ACTIVE: const(0.6)}, {Signal.SM_ACTIVE: const(0.0)}
    pods = [pod("train-0", 2), pod("idle-0", 1, ns="research")]
    gpus = [gpu("GPU-0", "n1", busy, pod="train-0", namespace="ml"), gpu("GPU-1", "n1", busy, pod="train-0", namespace="ml"),
            gpu("GPU-2", "n1", idle, pod="idle-0", namespace="research"), gpu("GPU-3", "n1", idle)]
    if hour % 3:
        pods.append(pod("serve-0", 1, ns="inference"))
        gpus[3] = gpu("GPU-3", "n1", busy, pod="serve-0", namespace="inference")
    nodes = [node("n1", gpus=4, itype="p5.48xlarge")]
    if hour % 2:
        nodes.append(node("n2", gpus=2, itype="g6.12xlarge"))
        pods.append(pod("eval-0", 1, node_name="n2", ns="research"))
        gpus += [gpu("GPU-4", "n2", busy, pod="eval-0", namespace="research"), gpu("GPU-5", "n2", idle)]
    sl = scan_ledger(join(cluster(*nodes, *pods), window(*gpus)), PriceBook.bundled())
    end = DAY + timedelta(hours=hour)
    return dataclasses.replace(sl, window_start=end - timedelta(hours=1), window_end=end)


def test_stored_showback_of_a_day_of_hourly_scans_equals_the_scan_time_ledgers_to_the_cent(store: FindingStore) -> None:
    # GIVEN 24 hourly scans over 1-hour windows, their completions handled by the lifecycle (every fourth scan's
    # completion in two parts, part 0 redelivered)
    lifecycle = LifecycleService(store=store, alerts=MemoryQueue(), tickets=MemoryQueue(), settings=LifecycleSettings(),
                                 clock=FixedClock(DAY + timedelta(days=1)))
    expected_team: Counter[str] = Counter()
    expected_ns: Counter[str] = Counter()
    expected_total = Decimal(0)
    for hour in range(1, 25):
        sl = _fleet(hour)
        message = completion(f"s-{hour}", sl.window_end - timedelta(minutes=1), scan_allocation(sl, DeliverySettings()))
        parts = [message]
        if hour % 4 == 0:
            parts = split_completion(message.model_copy(update={"fingerprints": tuple(f"fp-{i:04d}" * 4 for i in range(40))}),
                                     max_bytes=len(message.model_dump_json()) + 400)
            assert len(parts) > 1
            parts = [*parts, parts[0]]
        for m in parts:
            lifecycle.handle_scan_completed(m)
        # the scan-time showback of the same window (the numbers `gpuwaste showback` prints for it)
        for r in showback(sl, (), "team", DeliverySettings()):
            expected_team[r.group] += r.allocated_cents
        for r in showback(sl, (), "namespace", DeliverySettings()):
            expected_ns[r.group] += r.allocated_cents
        expected_total += funnel(sl, lambda _l, _i: "all")["all"].total_gpu_hours
    # WHEN the day's showback is read back from the store
    day = spend_of(store.allocation(since=DAY, until=DAY + timedelta(days=1)))
    # THEN every team's and namespace's allocated cost is the sum of the scans' ledgers, to the cent
    assert {g.name: g.cents for g in day.by_team} == dict(expected_team)
    assert {g.name: g.cents for g in day.by_namespace} == dict(expected_ns)
    assert day.cents == sum(expected_team.values()) > 0
    assert {"(unallocated)", "research", "ml"} <= set(expected_team)
    # AND the funnel's total GPU-hours too; 24 scans over 24 fully observed hours
    assert day.fleet.total_gpu_hours == expected_total
    assert (day.scans, day.hours, day.observed_hours) == (24, 24, Decimal(24))


def test_dynamodb_hour_item_is_written_up_to_the_item_limit_and_refused_one_byte_past_it(
        aws: object, caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN the DynamoDB store (its limit: DynamoDB's 400 KB item) with two scans recorded in the hour
    ddb = boto3.client("dynamodb")
    s = DynamoDbFindingStore(client=ddb, table_name=create_stack(boto3.client("sqs"), ddb).table_name)
    assert s.max_item_bytes == 400 * 1024
    t = DAY + timedelta(hours=9, minutes=5)
    for n in (1, 2):
        assert s.record_allocation(completion(f"s-{n}", t, alloc(teams=(group("ml", "1", 100),))), expires_at=EXPIRES)
    third = completion("s-3", t, alloc(teams=(group("ml", "1", 100), group("vision", "2", 50))))
    # WHEN the third scan's item is measured (a limit of 0 refuses it and logs the size it would have)
    s.max_item_bytes = 0
    with caplog.at_level("WARNING", logger="gpuwaste.store.dynamodb"):
        assert not s.record_allocation(third, expires_at=EXPIRES)
    needed = next(r for r in caplog.records if r.getMessage() == "allocation ledger: hour item full").__dict__["bytes"]
    # THEN one byte under that size it is refused, and nothing of it is in the figures
    s.max_item_bytes = needed - 1
    assert not s.record_allocation(third, expires_at=EXPIRES)
    (tally,) = s.allocation(since=t, until=t + timedelta(hours=1))
    assert (tally.scans, tally.allocation.cents) == (2, 200)
    # AND at exactly that size it is written, and what DynamoDB holds measures that size
    s.max_item_bytes = needed
    assert s.record_allocation(third, expires_at=EXPIRES)
    item = ddb.get_item(TableName=s.table_name, Key={"fingerprint": {"S": "ledger#2026-03-09T09#prod"}})["Item"]
    assert item_bytes(item) == needed
    (tally,) = s.allocation(since=t, until=t + timedelta(hours=1))
    assert (tally.scans, tally.allocation.cents) == (3, 350)


def test_summary_shows_the_funnel_and_each_teams_spend_with_its_month_next_to_waste_and_budget(store: FindingStore) -> None:
    # GIVEN cluster prod scanned hourly at 08:00 and 09:00 (team ml $12.34 + $10.00, GPUs nobody holds $1.00 each
    # hour) and cluster dev once at 09:00 (team vision $5.55), their completions handled by the lifecycle
    until = DAY + timedelta(hours=10)
    lifecycle = LifecycleService(store=store, alerts=MemoryQueue(), tickets=MemoryQueue(), settings=LifecycleSettings(),
                                 clock=FixedClock(until))
    prod = [alloc(teams=(group("ml", "4", 1234), group("(unallocated)", "1", 100)), total="5", pods=1),
            alloc(teams=(group("ml", "3.5", 1000), group("(unallocated)", "1", 100)), total="5")]
    for n, a in enumerate(prod):
        lifecycle.handle_scan_completed(completion(f"p-{n}", DAY + timedelta(hours=8 + n, minutes=5), a))
    lifecycle.handle_scan_completed(completion("d-0", DAY + timedelta(hours=9, minutes=5),
                                               alloc(teams=(group("vision", "2", 555),), total="2"), cluster="dev"))
    # WHEN the day's summary is built with a monthly budget for ml
    service = SummaryService(store=store, settings=DeliverySettings(), now=lambda: until,
                             serve=ServeSettings(team_budgets_usd_per_month={"ml": Decimal(2000)}))
    summary = service.build(since=until - timedelta(days=1), until=until)
    # THEN it holds the period's funnel per cluster and the spend per team from the store
    assert summary.spend is not None
    assert [(c, f.total_gpu_hours) for c, f in summary.spend.funnel] == [("dev", Decimal(2)), ("prod", Decimal(10))]
    assert {g.name: g.cents for g in summary.spend.by_team} == {"ml": 2234, "vision": 555, "(unallocated)": 200}
    # AND each team's month: spend so far, and month-end at the last day's rate (3 cluster-hours observed over 2
    # clusters: $22.34 per 1.5 h → $357.44/day) × the 22 days 14 hours left in March, next to waste and budget
    ml = next(m for m in summary.month if m.team == "ml")
    left = Decimal(22 * 86400 + 14 * 3600) / 86400
    assert ml.spend_to_date_usd == Decimal("22.34")
    expected = Decimal("22.34") + Decimal("22.34") * 24 / Decimal("1.5") * left
    assert ml.spend_month_end_usd.quantize(Decimal("0.01")) == expected.quantize(Decimal("0.01")) == Decimal("8094.53")
    assert (ml.wasted_to_date_usd, ml.budget_usd) == (Decimal(0), Decimal(2000))
    # AND the JSON, HTML, Markdown, terminal and Slack outputs show them
    doc = json.loads(render_json(summary))
    assert doc["spend"]["by_team"][0]["name"] == "ml" and doc["month"][0]["team"] == "ml"
    html = render_html(summary)
    assert "<h2>Spend per team</h2>" in html
    assert "<tr><td>ml</td><td class=n>$22.34</td><td class=n>$22.34</td><td class=n>$8,095</td>" in html
    assert "| vision | $5.55 | $5.55 |" in render_markdown(summary)
    console = Console(file=io.StringIO(), width=120, color_system=None)
    render_terminal(summary, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Fleet funnel" in text and "12.0 GPU-h total → 9.5 allocated (79%)" in text
    assert "$27.89 in the period, $27.89 of it charged to teams" not in text  # the unheld $2.00 is not a team's
    assert "$29.89 in the period, $27.89 of it charged to teams" in text
    slack = render_summary(summary)
    spend_block = next(b for b in slack.blocks if b.get("text", {}).get("text", "").startswith("*Spend"))
    assert "• ml: $22.34 in the period · month $22.34 so far, $8,095 at month-end · wasted $0.00" in spend_block["text"]["text"]
    assert "• (unallocated): $2.00 in the period\n" in spend_block["text"]["text"] + "\n"
    assert "budget $2,000" in spend_block["text"]["text"]


def test_showback_command_over_the_stored_day_equals_the_scan_time_showback_of_its_hours(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a state file holding a day of hourly scans (the lifecycle recorded each completion)
    state = tmp_path / "state.db"
    store = SqliteFindingStore(state)
    lifecycle = LifecycleService(store=store, alerts=MemoryQueue(), tickets=MemoryQueue(), settings=LifecycleSettings(),
                                 clock=FixedClock(DAY + timedelta(days=1)))
    expected: Counter[str] = Counter()
    for hour in range(1, 25):
        sl = _fleet(hour)
        lifecycle.handle_scan_completed(completion(f"s-{hour}", sl.window_end - timedelta(minutes=1),
                                                   scan_allocation(sl, DeliverySettings())))
        for r in showback(sl, (), "namespace", DeliverySettings()):
            expected[r.group] += r.allocated_cents
    store.close()
    # WHEN `gpuwaste showback --period <the day> --by namespace -o json` reads it
    result = CliRunner().invoke(app, ["showback", "--state", str(state), "--period", f"{DAY:%Y-%m-%d}", "--by",
                                      "namespace", "-o", "json"])
    # THEN each namespace's allocated USD is the sum of the 24 scan-time showbacks, to the cent
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["source"] == "store" and doc["hours"] == 24 and doc["scans"] == 24
    assert {r["group"]: round(r["allocated_usd"] * 100) for r in doc["groups"]["namespace"]} == dict(expected)
    assert round(doc["allocated_usd"] * 100) == sum(expected.values())
    # AND a grouping the store does not keep, or a malformed period, is refused with the reason (exit 2)
    node = CliRunner().invoke(app, ["showback", "--state", str(state), "--since", "1d", "--by", "node"])
    assert node.exit_code == 2 and "keeps team and namespace" in node.output
    bad = CliRunner().invoke(app, ["showback", "--state", str(state), "--period", "March"])
    assert bad.exit_code == 2 and "use a UTC day" in bad.output
