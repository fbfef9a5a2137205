"""Daily summary numbers against a known finding history (hand-computed), trend, savings and delivery."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest

from gpuwaste.errors import DeliveryError
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.notices import DailySummary, PostedMessage
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.services.summary import NO_CHART, SummaryService
from gpuwaste.sinks.summary_report import render_html, render_markdown
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW

DAY = timedelta(days=1)


def _rec(fp: str, *, team: str | None, ns: str, kind: str, cluster: str, usd: str | None, first: timedelta,
         last: timedelta, **extra: object) -> FindingRecord:
    return FindingRecord(fingerprint=fp, cluster=cluster, namespace=ns, workload=f"wl-{fp}", kind=kind, detector=kind,
                         first_seen=NOW - first, last_seen=NOW - last, usd_per_day=Decimal(usd) if usd else None,
                         cumulative_usd=Decimal(0), team=team, **extra)  # type: ignore[arg-type]


def _history() -> list[FindingRecord]:
    return [
        _rec("A", team="ml", ns="ml", kind="idle_allocation", cluster="prod", usd="100", first=2 * DAY, last=timedelta(0)),
        _rec("B", team="search", ns="search", kind="underused_allocation", cluster="prod", usd="48",
             first=timedelta(hours=12), last=timedelta(0)),
        _rec("C", team="ml", ns="ml-batch", kind="idle_allocation", cluster="dev", usd="60", first=timedelta(hours=42),
             last=timedelta(hours=18), state=FindingState.RESOLVED, resolved_at=NOW - timedelta(hours=12),
             saved_usd_per_day=Decimal(60)),
        _rec("D", team="ml", ns="ml", kind="data_quality", cluster="prod", usd=None, first=timedelta(hours=6), last=timedelta(0)),
        _rec("E", team=None, ns="scratch", kind="idle_allocation", cluster="prod", usd=None, first=timedelta(hours=2),
             last=timedelta(0)),
        _rec("F", team="ml", ns="ml", kind="idle_allocation", cluster="prod", usd="500", first=6 * DAY, last=5 * DAY),
    ]


@pytest.fixture
def store() -> SqliteFindingStore:
    """The known history (period = the last 24 h before NOW; the one before = the 24 h before that).

    A  ml/ml        idle       prod  $100/day, open for 2 days             → now $100, before $100
    B  search       underused  prod  $48/day,  opened 12 h ago             → now $24,  before $0
    C  ml/ml-batch  idle       dev   $60/day,  seen from -42 h to -18 h,   → now $15,  before $45
                                     resolved 12 h ago saving $60/day      → realised 60 × 0.5 = $30
    D  data quality, opened 6 h ago (no money)                             → counted, not summed
    E  idle, unpriced, opened 2 h ago, no team                             → unpriced
    F  seen only 5 days ago                                                → outside both periods
    """
    s = SqliteFindingStore(":memory:")
    for r in _history():
        assert s.put_new(r)
    return s


def _service(store: SqliteFindingStore, **kw: object) -> SummaryService:
    return SummaryService(store=store, settings=DeliverySettings(), now=lambda: NOW, **kw)  # type: ignore[arg-type]


def test_summary_build_totals_trend_and_savings(store: SqliteFindingStore) -> None:
    # GIVEN the known history
    # WHEN the last day is summarised
    s = _service(store).build(since=NOW - DAY, until=NOW)
    # THEN every number matches the hand computation
    assert s.wasted_usd == Decimal(139)  # 100 + 24 + 15
    assert s.previous_usd == Decimal(145)  # 100 + 45
    assert s.trend_usd == Decimal(-6)
    assert s.open_usd_per_day == Decimal(148)  # A + B (D, E unpriced)
    assert (s.open_findings, s.opened, s.resolved, s.unpriced) == (3, 2, 1, 1)  # D is data quality, not waste
    assert s.saved_usd_per_day == Decimal(60)
    assert s.realised_savings_usd == Decimal(30)


def test_summary_build_groups_by_team_kind_cluster_namespace(store: SqliteFindingStore) -> None:
    # GIVEN the known history
    # WHEN summarised
    s = _service(store).build(since=NOW - DAY, until=NOW)
    # THEN groups carry this period and the one before, costliest first
    # (E, open and unpriced, is counted in its groups with $0; each section's counts add up to the 3 open findings)
    assert [(g.name, g.wasted_usd, g.previous_usd, g.findings) for g in s.by_team] == [
        ("ml", Decimal(115), Decimal(145), 1), ("search", Decimal(24), Decimal(0), 1), ("unassigned", Decimal(0), Decimal(0), 1)]
    assert [(g.name, g.wasted_usd, g.previous_usd, g.findings) for g in s.by_kind] == [
        ("idle_allocation", Decimal(115), Decimal(145), 2), ("underused_allocation", Decimal(24), Decimal(0), 1)]
    assert [(g.name, g.wasted_usd, g.previous_usd, g.findings) for g in s.by_cluster] == [
        ("prod", Decimal(124), Decimal(100), 3), ("dev", Decimal(15), Decimal(45), 0)]
    assert [(g.name, g.wasted_usd, g.findings) for g in s.by_namespace] == [
        ("ml", Decimal(100), 1), ("search", Decimal(24), 1), ("ml-batch", Decimal(15), 0), ("scratch", Decimal(0), 1)]
    assert [(o.fingerprint, o.wasted_usd, o.open) for o in s.top] == [
        ("A", Decimal(100), True), ("B", Decimal(24), True), ("C", Decimal(15), False)]
    assert s.by_kind_and_team == (("ml", "idle_allocation", Decimal(115)), ("search", "underused_allocation", Decimal(24)))


class _Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[DailySummary, str, bytes | None, str | None]] = []

    def post_summary(self, summary: DailySummary, *, channel: str, chart_png: bytes | None,
                     note: str | None = None) -> PostedMessage:
        self.calls.append((summary, channel, chart_png, note))
        return PostedMessage(sink="fake", destination=channel, message_id="1.0")


class _Chart:
    def waste_by_team_and_kind(self, summary: DailySummary) -> bytes | None:
        return b"\x89PNG fake"


def test_summary_send_without_chart_says_so(store: SqliteFindingStore) -> None:
    # GIVEN no chart renderer (matplotlib missing)
    notifier = _Recorder()
    # WHEN sent
    _service(store, notifier=notifier).send()
    # THEN it is posted to the default channel without the chart, with the reason
    (summary, channel, png, note) = notifier.calls[0]
    assert (channel, png, note) == ("#gpu-waste", None, NO_CHART)
    assert summary.wasted_usd == Decimal(139)


def test_summary_send_with_chart(store: SqliteFindingStore) -> None:
    # GIVEN a chart renderer
    notifier = _Recorder()
    # WHEN sent
    _service(store, notifier=notifier, chart=_Chart()).send()
    # THEN the image goes with it
    assert notifier.calls[0][2] == b"\x89PNG fake"
    assert notifier.calls[0][3] is None


class _Ledger:
    """`ports.OnceLedger` in memory."""

    def __init__(self, states: dict[str, str] | None = None) -> None:
        self.states = dict(states or {})

    def claim(self, key: str, **_: object) -> str:
        state = self.states.get(key)
        if state in ("done", "claimed"):
            return "done" if state == "done" else "held"
        self.states[key] = "claimed"
        return "claimed"

    def confirm(self, key: str, **_: object) -> None:
        self.states[key] = "done"

    def release(self, key: str) -> None:
        self.states[key] = "released"


def test_summary_send_once_per_day_and_sink(store: SqliteFindingStore) -> None:
    # GIVEN a ledger
    notifier, ledger = _Recorder(), _Ledger()
    service = _service(store, notifier=notifier, ledger=ledger)
    # WHEN the same day's summary is sent twice, then the next day's
    first = service.send(day=date(2024, 1, 2))
    again = service.send(day=date(2024, 1, 2))
    later = service.send(day=date(2024, 1, 3))
    # THEN the sink got it once per day; the repeat says it was posted already
    assert len(notifier.calls) == 2
    assert len(first.posted) == 1 and again.posted == () and again.already_posted == ("recorder",)
    assert len(later.posted) == 1
    assert ledger.states == {"summary#2024-01-02#recorder##gpu-waste": "done", "summary#2024-01-03#recorder##gpu-waste": "done"}


def test_summary_refused_post_releases_its_claim_and_a_held_one_fails(store: SqliteFindingStore) -> None:
    # GIVEN a sink that refuses the post, then one whose claim another invocation holds
    class Refusing(_Recorder):
        def post_summary(self, summary: DailySummary, **kw: object) -> PostedMessage:
            raise DeliveryError("slack: 500")

    ledger = _Ledger()
    with pytest.raises(DeliveryError):
        _service(store, notifier=Refusing(), ledger=ledger).send(day=date(2024, 1, 2))
    # THEN the claim is released (the retry posts it)
    assert set(ledger.states.values()) == {"released"}
    held = _Ledger({"summary#2024-01-02#recorder##gpu-waste": "claimed"})
    notifier = _Recorder()
    with pytest.raises(DeliveryError, match="another invocation"):
        _service(store, notifier=notifier, ledger=held).send(day=date(2024, 1, 2))
    assert notifier.calls == []


def test_summary_renders_markdown_and_html(store: SqliteFindingStore) -> None:
    # GIVEN the summary
    s = _service(store).build(since=NOW - DAY, until=NOW)
    # WHEN rendered as Markdown and HTML
    md, page = render_markdown(s), render_html(s)
    # THEN both carry the totals and the trend
    assert "$139.00 (-$6.00 (-4%) vs $145.00 the period before)" in md
    assert "| ml | $115.00 | $145.00 |" in md
    assert "<td>search</td><td class=n>$24.00</td>" in page


def test_chart_renderer_draws_png_when_matplotlib_is_installed(store: SqliteFindingStore) -> None:
    # GIVEN matplotlib (optional extra `charts`)
    pytest.importorskip("matplotlib", reason="optional extra 'charts' not installed")
    from gpuwaste.sinks.chart import MatplotlibChartRenderer

    s = _service(store).build(since=NOW - DAY, until=NOW)
    # WHEN drawn
    png = MatplotlibChartRenderer().waste_by_team_and_kind(s)
    # THEN it is a PNG
    assert png is not None and png.startswith(b"\x89PNG")


def test_summary_command_writes_markdown(tmp_path: object) -> None:
    # GIVEN a state file holding the known history
    from pathlib import Path

    from typer.testing import CliRunner

    from gpuwaste.cli import app

    path = Path(str(tmp_path)) / "state.db"
    disk = SqliteFindingStore(path)
    for r in _history():
        disk.put_new(r)
    disk.close()
    out = Path(str(tmp_path)) / "summary.md"
    # WHEN `gpuwaste summary` renders the day before NOW as Markdown
    result = CliRunner().invoke(app, ["summary", "--state", str(path), "--until", NOW.isoformat(), "--format", "markdown",
                                      "--out", str(out)])
    # THEN it succeeds with the same totals as the service
    assert result.exit_code == 0, result.output
    assert "**Wasted:** $139.00" in out.read_text()



def test_a_group_first_seen_in_the_period_reads_new_even_at_zero_dollars(store: SqliteFindingStore) -> None:
    # GIVEN the known history and two unpriced KV-cache findings ($0): one opened 3 h ago (a kind new in the period),
    # and one wrong-hardware finding seen in both periods (the kind was there before, still at $0)
    store.put_new(_rec("G", team="ml", ns="ml", kind="kv_cache_pressure", cluster="prod", usd=None,
                       first=timedelta(hours=3), last=timedelta(0)))
    store.put_new(_rec("H", team="ml", ns="ml", kind="wrong_hardware", cluster="prod", usd=None,
                       first=timedelta(hours=40), last=timedelta(0)))
    # WHEN summarised and rendered
    s = _service(store).build(since=NOW - DAY, until=NOW)
    kinds = {g.name: g for g in s.by_kind}
    page, markdown = render_html(s), render_markdown(s)
    # THEN a group nobody saw the period before is new, one seen before is not (whatever either cost)
    assert kinds["kv_cache_pressure"].new and not kinds["wrong_hardware"].new and not kinds["idle_allocation"].new
    assert {g.name: g.new for g in s.by_team} == {"ml": False, "search": True, "unassigned": True}
    # AND the new $0 kind's trend says "new", the old $0 kind's "±0", a new priced one "new", in HTML and Markdown
    assert "<td>KV cache</td><td class=n>$0.00</td><td class=n>$0.00</td><td class=n>new</td>" in page
    assert "<td>wrong hw</td><td class=n>$0.00</td><td class=n>$0.00</td><td class=n>±0</td>" in page
    assert "| KV cache | $0.00 | $0.00 | new |" in markdown and "| wrong hw | $0.00 | $0.00 | ±0 |" in markdown
    assert "| under-used | $24.00 | $0.00 | new |" in markdown


def test_resolved_findings_rank_by_what_they_cost_in_the_period_not_by_their_usd_per_day(store: SqliteFindingStore) -> None:
    # GIVEN the known history: C ($60/day, resolved 12 h ago) cost $15 in the period, B ($48/day, open) $24
    # WHEN summarised and rendered
    s = _service(store).build(since=NOW - DAY, until=NOW)
    page = render_html(s)
    rows = page[page.index("<h2>Top offenders</h2>"):]
    # THEN B ranks above C although C's USD/day is higher, on every format
    assert rows.index("wl-B") < rows.index("wl-C")
    assert [o.fingerprint for o in s.top if o.fingerprint in "BC"] == ["B", "C"]
    markdown = render_markdown(s)
    assert markdown.index("| wl-B |") < markdown.index("| wl-C |")


def test_a_period_without_savings_says_so_in_one_line_and_no_card_repeats_a_figure() -> None:
    # GIVEN a store whose only finding is open (nothing resolved, no savings anywhere)
    store = SqliteFindingStore(":memory:")
    store.put_new(_rec("A", team="ml", ns="ml", kind="idle_allocation", cluster="prod", usd="100", first=2 * DAY,
                       last=timedelta(0)))
    s = _service(store).build(since=NOW - DAY, until=NOW)
    # WHEN rendered as Markdown and HTML
    markdown, page = render_markdown(s), render_html(s)
    # THEN the savings line is one short sentence, not a row of $0.00
    assert "- **Savings:** no savings realised in this period\n" in markdown
    assert "<li><b>Savings:</b> no savings realised in this period</li>" in page
    # AND each KPI card has one meaning: no card's figure is repeated in another card's line
    import re
    cards = re.findall(r"<div class='card'><b>([^<]*)</b><span>([^<]*)</span></div>", page)
    assert len(cards) == 4
    for value, _ in cards:
        assert not [line for v, line in cards if v != value and value in line], (value, cards)
    assert cards[2] == ("$3,000/month", "the open rate for a month (30 days)")
