"""Issue 22: the daily summary says its trend and a node-level finding's namespace in the same words on every
surface (terminal, Markdown, HTML, Slack, Teams) — one function each, `people.trend_words` / `people.versus_words`
/ `people.namespace_label`."""

from __future__ import annotations

import io
import json
from datetime import timedelta

from rich.console import Console

from gpuwaste.services.summary import SummaryService
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.sinks import slack_blocks, teams_cards
from gpuwaste.sinks.summary_report import render_html, render_markdown, render_terminal
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW
from tests.unit.test_summary import DAY, _rec


def _surfaces(store: SqliteFindingStore) -> dict[str, str]:
    s = SummaryService(store=store, settings=DeliverySettings(), now=lambda: NOW).build(since=NOW - DAY, until=NOW)
    buf = io.StringIO()
    render_terminal(s, Console(file=buf, width=200, color_system=None))
    return {"terminal": buf.getvalue(), "markdown": render_markdown(s), "html": render_html(s),
            "slack": json.dumps(slack_blocks.render_summary(s).blocks, ensure_ascii=False),
            "teams": json.dumps(teams_cards.render_summary(s).body, ensure_ascii=False)}


def test_a_fleet_new_in_the_period_reads_the_same_on_every_surface() -> None:
    # GIVEN waste only in the period (nothing the period before): a priced idle pod and free node capacity (no namespace)
    store = SqliteFindingStore(":memory:")
    store.put_new(_rec("A", team="ml", ns="ml", kind="idle_allocation", cluster="prod", usd="48",
                       first=timedelta(hours=12), last=timedelta(0)))
    store.put_new(_rec("N", team=None, ns="", kind="unallocated_capacity", cluster="prod", usd="24",
                       first=timedelta(hours=6), last=timedelta(0)))
    # WHEN every surface renders the summary
    out = _surfaces(store)
    for name, text in out.items():
        # THEN each says "nothing wasted the period before", never the old "new vs the period before"
        assert "nothing wasted the period before" in text, name
        assert "new vs the period before" not in text and "vs $0.00" not in text, name
        # AND the node-level finding's namespace is "(node)" wherever a namespace is shown — never "-" or the cluster
        assert "(node)" in text, name
        assert "(prod, unallocated" not in text and "| wl-N | - |" not in text, name


def test_a_change_reads_the_same_on_every_surface() -> None:
    # GIVEN a workload that cost $100/day in both periods and one that only ran the period before
    store = SqliteFindingStore(":memory:")
    store.put_new(_rec("A", team="ml", ns="ml", kind="idle_allocation", cluster="prod", usd="100",
                       first=2 * DAY, last=timedelta(0)))
    store.put_new(_rec("B", team="ml", ns="ml", kind="idle_allocation", cluster="prod", usd="100",
                       first=2 * DAY, last=DAY + timedelta(hours=12)))
    out = _surfaces(store)
    # THEN the headline is the report's words everywhere: the change, its share, and what it was
    for name, text in out.items():
        assert "-$50.00 (-33%) vs $150.00 the period before" in text, name
