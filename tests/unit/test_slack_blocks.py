"""Block Kit builders: mrkdwn escaping, layout, and Slack's limits (blocks, section text, header) with clean splits."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from gpuwaste.models.notices import DailySummary, GroupTotal, Notice, NoticeItem, NoticeKind, Route
from gpuwaste.sinks.slack_blocks import (
    MAX_BLOCKS,
    MAX_HEADER_TEXT,
    MAX_SECTION_TEXT,
    MESSAGE_TEXT_BUDGET,
    blocks_text_chars,
    escape,
    render_notice,
    render_summary,
)
from tests.delivery_helpers import NOW, finding

ROUTE = Route(channel="#ml", source="namespace annotation gpuwaste.io/slack-channel", team="ml")


def _item(name: str, usd: str = "98.30", **kw: object) -> NoticeItem:
    f = finding(name, usd_per_day=usd)
    return NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=NOW - timedelta(hours=5),
                      cumulative_usd=Decimal("20.48"), **kw)  # type: ignore[arg-type]


def _texts(blocks: list[dict]) -> list[str]:
    out = []
    for b in blocks:
        if "text" in b and isinstance(b["text"], dict):
            out.append(b["text"]["text"])
        out += [f["text"] for f in b.get("fields", [])]
        out += [e.get("text", "") for e in b.get("elements", []) if b["type"] == "context"]
    return out


def _assert_within_limits(blocks: list[dict]) -> None:
    assert len(blocks) <= MAX_BLOCKS
    for b in blocks:
        if b["type"] == "header":
            assert b["text"]["type"] == "plain_text"
            assert len(b["text"]["text"]) <= MAX_HEADER_TEXT
        if b["type"] == "section" and "text" in b:
            assert len(b["text"]["text"]) <= MAX_SECTION_TEXT


def test_escape_neutralises_mentions_and_links() -> None:
    # GIVEN cluster-supplied text with a broadcast, a user mention and a link
    text = "a&b <!channel> <@U123> <http://evil.example|click>"
    # WHEN escaped
    out = escape(text)
    # THEN no control sequence survives
    assert out == "a&amp;b &lt;!channel&gt; &lt;@U123&gt; &lt;http://evil.example|click&gt;"


def test_render_notice_alert_escapes_names_from_the_cluster() -> None:
    # GIVEN a workload whose name and title carry Slack syntax
    f = finding("x<!channel>", title="idle <@U999> <http://x|y>")
    item = NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=NOW - timedelta(hours=1))
    notice = Notice(kind=NoticeKind.ALERT, route=ROUTE, items=(item,))
    # WHEN rendered
    payload = render_notice(notice, now=NOW)[0]
    # THEN mrkdwn texts hold only escaped forms, and the fallback text too
    mrkdwn = "\n".join(_texts(payload.blocks[1:]))  # the header is plain_text (never parsed for mentions)
    assert "<!channel>" not in mrkdwn and "&lt;!channel&gt;" in mrkdwn
    assert "<@U999>" not in payload.text and "<http://x|y>" not in payload.text


def test_render_notice_alert_has_what_where_whose_money_evidence_and_buttons() -> None:
    # GIVEN one new finding
    notice = Notice(kind=NoticeKind.ALERT, route=ROUTE, items=(_item("trainer"),), scan_id="scan-1")
    # WHEN rendered
    (payload,) = render_notice(notice, now=NOW)
    text = "\n".join(_texts(payload.blocks))
    # THEN the owner gets every fact and the four actions
    assert payload.blocks[0]["type"] == "header"
    for needle in ("*What:*", "*Where:*", "*Whose:* team ml", "*Since:* 2026-11-29 07:00 UTC (5h 0m", "$98.30",
                   "$20.48", "$4.0958/GPU-h × 1 GPU × 24 h", "SM activity: ", "flagged below 5 %", "*How to fix*",
                   "Routed to #ml by namespace annotation gpuwaste.io/slack-channel"):
        assert needle in text, needle
    actions = payload.blocks[-1]
    assert actions["type"] == "actions"
    assert [e["action_id"] for e in actions["elements"]] == [
        "gpuwaste_snooze_1d", "gpuwaste_snooze_7d", "gpuwaste_expected", "gpuwaste_ticket"]
    assert actions["elements"][0]["value"] == f"snooze_1d|{notice.items[0].fingerprint}"
    _assert_within_limits(payload.blocks)


def test_render_notice_digest_splits_within_limits() -> None:
    # GIVEN 300 findings for one owner from one scan, with long names
    items = tuple(_item(f"job-{n:03d}-" + "x" * 200, usd=f"{100 + n}.00") for n in range(300))
    notice = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items, scan_id="scan-1")
    # WHEN rendered
    payloads = render_notice(notice, now=NOW)
    # THEN it becomes 3+ messages (the costliest with buttons + packed compact lines), within Slack's limits, carrying every finding once
    assert len(payloads) >= 3
    for p in payloads:
        _assert_within_limits(p.blocks)
        assert blocks_text_chars(p.blocks) <= MESSAGE_TEXT_BUDGET
    carried = [fp for p in payloads for fp in p.fingerprints]
    assert sorted(carried) == sorted(i.fingerprint for i in items)
    assert f"(part 2/{len(payloads)})" in payloads[1].blocks[0]["text"]["text"]
    # and the costliest finding comes first
    assert "job-299" in payloads[0].blocks[3]["text"]["text"]


def test_render_notice_digest_of_150_findings_splits_on_the_cumulative_text_budget() -> None:
    # GIVEN 150 findings for one owner, with long names (far more text than Slack takes in one message, B33)
    items = tuple(_item(f"job-{n:03d}-" + "x" * 200, usd=f"{100 + n}.00") for n in range(150))
    notice = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items, scan_id="scan-1")
    # WHEN rendered
    payloads = render_notice(notice, now=NOW)
    # THEN every message stays within the per-block limits and the cumulative text budget, and all 150 are carried once
    assert len(payloads) >= 2
    for p in payloads:
        _assert_within_limits(p.blocks)
        assert blocks_text_chars(p.blocks) <= MESSAGE_TEXT_BUDGET
    carried = [fp for p in payloads for fp in p.fingerprints]
    assert sorted(carried) == sorted(i.fingerprint for i in items)
    assert "(part 1/" in payloads[0].blocks[0]["text"]["text"]


def test_render_notice_digest_totals_and_one_folded_menu_per_finding() -> None:
    # GIVEN three findings, and a fourth at $0/day (a sizing note)
    items = (_item("a", "10.00"), _item("b", "20.50"), _item("c", "5.25"))
    notice = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=(*items, _item("d", "0")))
    # WHEN rendered
    (payload,) = render_notice(notice, now=NOW)
    # THEN the header sums USD/day and each priced finding's line carries one overflow menu of its actions (Block Kit:
    # an accessory of the line's section, up to 5 options), no row of buttons
    assert payload.blocks[0]["text"]["text"] == "GPU waste: 4 findings for team ml — $35.75/day"
    assert all(b["type"] != "actions" for b in payload.blocks)
    menus = [b["accessory"] for b in payload.blocks if "accessory" in b]
    assert len(menus) == 3 and all(m["type"] == "overflow" and 2 <= len(m["options"]) <= 5 for m in menus)
    assert {o["value"] for m in menus for o in m["options"]} == {
        f"{a}|{i.fingerprint}" for i in items for a in ("snooze_7d", "expected", "ticket", "details")}
    assert all(len(o["text"]["text"]) <= 75 and len(o["value"]) <= 150 for m in menus for o in m["options"])
    # AND the menu names the actions as the alert's buttons do (one set of names)
    assert [o["text"]["text"] for o in menus[0]["options"]] == ["Snooze 7 days", "Expected", "Create ticket", "Details"]


def test_render_notice_resolved_says_so_and_what_it_saved() -> None:
    # GIVEN a resolved finding
    item = _item("trainer", resolved=True, resolved_at=NOW, saved_usd_per_day=Decimal("98.30"))
    notice = Notice(kind=NoticeKind.RESOLVED, route=ROUTE, items=(item,))
    # WHEN rendered
    (payload,) = render_notice(notice, now=NOW)
    # THEN the header and first section say resolved and the saving; no buttons remain
    assert payload.blocks[0]["text"]["text"].startswith("Resolved: ")
    assert "saves $98.30/day" in payload.blocks[1]["text"]["text"]
    assert all(b["type"] != "actions" for b in payload.blocks)


def test_render_notice_header_is_a_short_title_and_the_long_sentence_stays_whole_in_the_body() -> None:
    # GIVEN a very long detector sentence, and a workload name as long as Kubernetes allows
    f = finding(title="T" * 400)
    long = finding("w" * 253, title="T" * 400)
    headers, bodies = [], []
    for x in (f, long):
        notice = Notice(kind=NoticeKind.ALERT, route=ROUTE, items=(NoticeItem(fingerprint=x.fingerprint, finding=x,
                                                                              first_seen=NOW),))
        # WHEN rendered
        blocks = render_notice(notice, now=NOW)[0].blocks
        headers.append(blocks[0]["text"]["text"])
        bodies.append(blocks[1]["text"]["text"])
    # THEN the header is the kind and the workload within 80 characters, never the sentence cut with an ellipsis
    assert headers[0] == "GPU waste: idle, ml/trainer"
    assert len(headers[1]) <= 80 and headers[1].startswith("GPU waste: idle, ml/www") and headers[1].endswith("www")
    # AND the sentence is whole in the What line
    assert all("*What:* " + "T" * 400 in b for b in bodies)


def test_render_summary_within_limits_with_trend() -> None:
    # GIVEN a summary with many teams
    groups = tuple(GroupTotal(name=f"team-{n}", wasted_usd=Decimal(100 + n), previous_usd=Decimal(100), findings=1)
                   for n in range(30))
    s = DailySummary(since=NOW - timedelta(days=1), until=NOW, wasted_usd=Decimal(200), previous_usd=Decimal(160),
                     open_usd_per_day=Decimal(150), open_findings=3, opened=2, resolved=1,
                     saved_usd_per_day=Decimal(40), realised_savings_usd=Decimal(20), by_team=groups)
    # WHEN rendered
    payload = render_summary(s, chart_note="Chart left out")
    # THEN it fits, shows the trend and lists at most 10 teams
    _assert_within_limits(payload.blocks)
    text = "\n".join(_texts(payload.blocks))
    assert "+$40.00 (+25%)" in text
    assert "… and 20 more" in text
    assert "Chart left out" in text


def test_slack_app_manifest_requests_exactly_the_scopes_used() -> None:
    # GIVEN the shipped manifest
    import yaml

    from tests.delivery_helpers import ROOT

    manifest = yaml.safe_load((ROOT / "deploy" / "slack-app-manifest.yaml").read_text())
    # WHEN its bot scopes are read
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # THEN they are the product's calls' scopes (users:read is Slack's companion of users:read.email), and
    # interactivity is on, pointing at a URL to replace
    assert scopes == {"chat:write", "chat:write.public", "users:read", "users:read.email", "files:write",
                      "channels:history", "groups:history"}
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    assert manifest["settings"]["interactivity"]["request_url"].startswith("https://")


def test_the_fake_slack_refuses_an_overflow_menu_outside_block_kits_limits() -> None:
    # GIVEN the fake Slack's message check (tests/servers/slack_api.py) and overflow menus at and past the limits
    from tests.servers.slack_api import _message_error

    def menu(n: int, text: str = "Snooze", value: str = "v") -> dict[str, object]:
        options = [{"text": {"type": "plain_text", "text": text}, "value": value} for _ in range(n)]
        return {"text": "t", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x"},
                                         "accessory": {"type": "overflow", "action_id": "a", "options": options}}]}

    # THEN 2–5 options with text ≤ 75 and value ≤ 150 pass; 6 options, a 76-character text or a 151-character value not
    assert _message_error(menu(5)) is None and _message_error(menu(2, "x" * 75, "v" * 150)) is None
    for bad in (menu(6), menu(1), menu(3, text="x" * 76), menu(3, value="v" * 151)):
        error = _message_error(bad)
        assert error is not None and error["error"] == "invalid_blocks"


def test_render_summary_with_the_spend_part_stays_within_limits() -> None:
    # GIVEN a summary whose every section is full: 30 long-named teams wasting, 60 teams of spend with their month
    from gpuwaste.models.notices import TeamMonth
    from gpuwaste.models.spend import FunnelFigures, SpendGroup, SpendOfPeriod

    long = "t" * 120
    groups = tuple(GroupTotal(name=f"{long}-{n}", wasted_usd=Decimal(100 + n), previous_usd=Decimal(100), findings=1)
                   for n in range(30))
    spend = SpendOfPeriod(funnel=(("prod", FunnelFigures(total_gpu_hours=Decimal(96), allocated_gpu_hours=Decimal(72))),),
                          by_team=tuple(SpendGroup(name=f"{long[:100]}-{n}", gpu_hours=Decimal(2), cents=10_000 + n)
                                        for n in range(60)), hours=24, observed_hours=Decimal(24), scans=24)
    month = tuple(TeamMonth(team=f"{long[:100]}-{n}", spend_to_date_usd=Decimal(1000), spend_month_end_usd=Decimal(3000),
                            wasted_to_date_usd=Decimal(100), wasted_month_end_usd=Decimal(300), budget_usd=Decimal(200))
                  for n in range(60))
    s = DailySummary(since=NOW - timedelta(days=1), until=NOW, wasted_usd=Decimal(200), previous_usd=Decimal(160),
                     open_usd_per_day=Decimal(150), open_findings=3, opened=2, resolved=1, saved_usd_per_day=Decimal(40),
                     realised_savings_usd=Decimal(20), by_team=groups, by_namespace=groups, by_kind=groups,
                     by_cluster=groups, spend=spend, month=month)
    # WHEN rendered
    payload = render_summary(s, chart_note="Chart left out")
    # THEN every block and the whole message stay within Slack's limits, and the spend part says what it left out
    _assert_within_limits(payload.blocks)
    assert blocks_text_chars(payload.blocks) <= MESSAGE_TEXT_BUDGET
    text = "\n".join(_texts(payload.blocks))
    assert "GPU-h total → 72.0 allocated (75%)" in text and "… and 52 more" in text and "budget $200 OVER" in text
