"""The Slack digest an owner reads: per finding its line, its evidence and its exact fix, its actions folded into an
overflow menu, at most ~350 characters per finding, every Block Kit limit (at its boundary), ages from the scan time, the platform owner for node-level
capacity, and no internal codes or repository paths in any chat text. Findings are the demo fleet's (real-shaped)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cache
from typing import Any
from urllib.parse import urlencode

from slack_sdk.models.blocks import Block

from gpuwaste.advice import advise
from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.headlines import evidence_headline
from gpuwaste.models.findings import Evidence, Finding, WasteKind
from gpuwaste.models.notices import Notice, NoticeItem, NoticeKind, Route
from gpuwaste.people import kind_heading
from gpuwaste.services.routing import route_for
from gpuwaste.sinks.slack_blocks import (
    MESSAGE_TEXT_BUDGET,
    blocks_text_chars,
    details_text,
    render_notice,
    render_text_only,
    visible_chars,
)
from gpuwaste.sinks.slack_interactions import read_request
from gpuwaste.sinks.teams_cards import render_notice as render_card

ROUTE = Route(channel="#ml", source="namespace annotation gpuwaste.io/slack-channel", team="ml")
NOW_ANY = datetime(2026, 12, 1, tzinfo=UTC)
CODE = re.compile(r"\bB\d\d\b")
#: Slack's Block Kit limits (docs.slack.dev/reference/block-kit): blocks per message, section text, fields, header,
#: actions elements, button label / value, action_id and block_id.
LIMITS = {"blocks": 50, "section": 3000, "fields": 10, "field": 2000, "header": 150, "actions": 25, "label": 75,
          "value": 2000, "id": 255, "context": 10, "overflow": 5, "option_value": 150}


@cache
def demo_findings() -> tuple[Finding, ...]:
    """The bundled demo fleet's findings, scanned and priced as `gpuwaste demo` does."""
    path = local.demo_recording()
    sources = local.recording_sources(path, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    report = local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(
        at=sources.recording.end_time())
    return tuple(report.findings)


def _item(f: Finding, hours: float = 5.0, cumulative: str = "12.34") -> NoticeItem:
    return NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=f.observed_at - timedelta(hours=hours),
                      cumulative_usd=Decimal(cumulative))


def _renamed(f: Finding, n: int) -> Finding:
    """Another workload shaped like `f` (a replica of a real finding under a new name)."""
    s = f.subject
    name = f"{s.workload_name}-{n}" if s.workload_name else None
    return f.model_copy(update={"subject": s.model_copy(update={"workload_name": name, "node": f"{s.node}-{n}"})})


def violations(blocks: list[dict[str, Any]]) -> list[str]:
    """Every Block Kit limit a message breaks (empty: Slack takes it)."""
    out = []
    if len(blocks) > LIMITS["blocks"]:
        out.append(f"{len(blocks)} blocks")
    for n, b in enumerate(blocks):
        if len(str(b.get("block_id", ""))) > LIMITS["id"]:
            out.append(f"{n}: block_id")
        if b["type"] == "header" and (b["text"]["type"] != "plain_text" or len(b["text"]["text"]) > LIMITS["header"]):
            out.append(f"{n}: header")
        if b["type"] == "section":
            if "text" in b and len(b["text"]["text"]) > LIMITS["section"]:
                out.append(f"{n}: section text {len(b['text']['text'])}")
            fields = b.get("fields", [])
            if len(fields) > LIMITS["fields"] or any(len(f["text"]) > LIMITS["field"] for f in fields):
                out.append(f"{n}: fields")
        if b["type"] == "context" and len(b["elements"]) > LIMITS["context"]:
            out.append(f"{n}: context elements")
        if b["type"] == "actions":
            if len(b["elements"]) > LIMITS["actions"]:
                out.append(f"{n}: {len(b['elements'])} elements")
            for e in b["elements"]:
                if len(e["text"]["text"]) > LIMITS["label"] or e["text"]["type"] != "plain_text":
                    out.append(f"{n}: label {e['text']['text']!r}")
                if len(e.get("value", "")) > LIMITS["value"] or len(e["action_id"]) > LIMITS["id"]:
                    out.append(f"{n}: value or action_id")
        accessory = b.get("accessory") or {}
        if accessory.get("type") == "overflow":
            options = accessory["options"]
            if not 2 <= len(options) <= LIMITS["overflow"]:
                out.append(f"{n}: {len(options)} overflow options")
            for o in options:
                if len(o["text"]["text"]) > LIMITS["label"] or len(o["value"]) > LIMITS["option_value"]:
                    out.append(f"{n}: overflow option {o['text']['text']!r}")
        Block.parse(b).validate_json()  # slack_sdk's own model checks (raises SlackObjectFormationError)
    return out


def _texts(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def _fifteen() -> list[Finding]:
    """15 real-shaped findings: idle, under-used, inference idle, orphaned and node capacity, several namespaces."""
    wanted = (WasteKind.IDLE, WasteKind.UNDERUSED, WasteKind.UNALLOCATED, WasteKind.INFERENCE_IDLE, WasteKind.ORPHANED)
    picked = [f for f in demo_findings() if f.kind in wanted and f.usd_per_day]
    n = 0
    while len(picked) < 15:
        picked.append(_renamed(picked[n], n))
        n += 1
    return picked[:15]


def test_slack_digest_of_15_findings_gives_each_its_evidence_and_fix_with_folded_menus() -> None:
    # GIVEN 15 real-shaped findings of five kinds (node capacity among them), several namespaces
    findings = _fifteen()
    items = tuple(_item(f, hours=2 + k) for k, f in enumerate(findings))
    notice = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items, scan_id="scan-1")
    # WHEN rendered
    (payload,) = render_notice(notice)
    blocks = payload.blocks
    # THEN a reader sees about 350 characters per finding at most, within every Block Kit limit
    assert visible_chars(blocks) <= 350 * len(findings), visible_chars(blocks)
    assert violations(blocks) == []
    # AND each kind is headed once, and each finding has its line, its evidence (the reading against the rule, as the
    # alert states it) and its exact fix (the advice table's action for its situation) in its own section
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    for kind in {f.kind for f in findings}:
        assert sum(f"*{kind_heading(kind)}*" in t for t in sections) == 1, kind
    for f in findings:
        name = f"node {f.subject.node} ·" if f.subject.namespace is None else f"/{f.subject.workload_name} ·"
        (own,) = [t for t in sections if name in t]
        why = evidence_headline(f)
        assert why and f"*Why:* {why}" in own.replace("&gt;", ">"), (why, own)
        assert f"*Fix:* {advise(f).action}"[:200] in own.replace("&gt;", ">"), own
    # AND the formula, price source and commands are not inline (they are behind Details)
    text = _texts(blocks)
    assert "GPU-h" not in text and "price table" not in text and "DCGM" not in text and "kubectl" not in text
    # AND every finding's actions are folded into one overflow menu beside its section (snooze, expected, ticket,
    # details): no row of buttons, so the text outweighs the controls
    assert not any(b["type"] == "actions" for b in blocks)
    menus = [b["accessory"] for b in blocks if b.get("accessory", {}).get("type") == "overflow"]
    assert len(menus) == 15
    for menu in menus:
        assert [o["text"]["text"] for o in menu["options"]] == ["Snooze 7 days", "Expected", "Create ticket", "Details"]
    assert {o["value"].split("|")[1] for m in menus for o in m["options"]} == {i.fingerprint for i in items}
    labels = sum(len(o["text"]["text"]) for m in menus for o in m["options"])
    assert sum(len(b["text"]["text"]) for b in blocks if b["type"] == "section") > 3 * labels


def test_slack_digest_respects_block_kit_limits_at_their_boundaries() -> None:
    # GIVEN digests of 1 to 60 findings (the 50-block limit is crossed on the way: 13 kinds, a heading each), and one
    # finding whose names are as long as Kubernetes allows (253 characters), so its section would pass 3,000
    base = _fifteen()
    for n in (1, 2, 24, 25, 26, 40, 47, 48, 49, 50, 51, 60):
        findings = [*base, *(_renamed(base[k % 15], 100 + k) for k in range(max(0, n - 15)))][:n]
        items = tuple(_item(f) for f in findings)
        # WHEN rendered
        payloads = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items, scan_id="s"))
        # THEN every message is within every limit (50 blocks, 3,000 characters a section, 2-5 overflow options of
        # at most 75 / 150 characters), and every finding is carried once
        for p in payloads:
            assert violations(p.blocks) == [], (n, violations(p.blocks))
            assert len(p.blocks) <= 50
        carried = [fp for p in payloads for fp in p.fingerprints]
        assert sorted(carried) == sorted(i.fingerprint for i in items), n
    long_name = "w" * 253
    f = base[0]
    huge = f.model_copy(update={"subject": f.subject.model_copy(update={"workload_name": long_name,
                                                                        "pod": long_name, "namespace": "n" * 63})})
    (alone,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=(_item(huge), _item(base[1])), scan_id="s"))
    assert violations(alone.blocks) == []
    assert max(len(b["text"]["text"]) for b in alone.blocks if b["type"] == "section") <= 3000
    # AND a finding with a ticket has no "Create ticket" left in its menu, but still two options or more
    ticketed = _item(base[0]).model_copy(update={"ticket_key": "OPS-1", "ticket_url": "https://jira.example/browse/OPS-1"})
    (one,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=(ticketed, _item(base[1])), scan_id="s"))
    menus = [b["accessory"] for b in one.blocks if b.get("accessory", {}).get("type") == "overflow"]
    assert [len(m["options"]) for m in menus] == [3, 4] or sorted(len(m["options"]) for m in menus) == [3, 4]
    assert "<https://jira.example/browse/OPS-1|OPS-1>" in _texts(one.blocks)


def test_slack_digest_menus_are_read_back_by_the_interactions_endpoint() -> None:
    # GIVEN a rendered digest's buttons
    items = tuple(_item(f) for f in _fifteen()[:3])
    (payload,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items))
    menus = [b["accessory"] for b in payload.blocks if b.get("accessory", {}).get("type") == "overflow"]
    # WHEN each option is chosen (Slack's block_actions form post for an overflow menu: the selected option)
    read = []
    for menu, option in ((m, o) for m in menus for o in m["options"]):
        body = {"type": "block_actions", "user": {"id": "U1"}, "channel": {"id": "C1"}, "message": {"ts": "1.2"},
                "actions": [{"action_id": menu["action_id"], "type": "overflow", "selected_option": option}]}
        request = read_request(urlencode({"payload": json.dumps(body)}).encode())
        assert request.action is not None
        read.append((request.action.action, request.action.fingerprint))
    # THEN the endpoint reads every action and finding the digest rendered
    assert sorted(read) == sorted((a, i.fingerprint) for i in items for a in ("snooze_7d", "expected", "ticket", "details"))


def test_slack_digest_of_500_findings_splits_into_valid_messages() -> None:
    # GIVEN 500 real-shaped findings for one owner
    base = [f for f in demo_findings() if f.usd_per_day]
    findings = [_renamed(base[n % len(base)], n) for n in range(500)]
    notice = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=tuple(_item(f) for f in findings), scan_id="s")
    # WHEN rendered
    payloads = render_notice(notice)
    # THEN every message keeps every limit and the cumulative text budget, and carries each finding once
    assert 2 <= len(payloads) <= 10
    for p in payloads:
        assert violations(p.blocks) == []
        assert blocks_text_chars(p.blocks) <= MESSAGE_TEXT_BUDGET
    carried = [fp for p in payloads for fp in p.fingerprints]
    assert sorted(carried) == sorted(f.fingerprint for f in findings)
    # AND the costliest have their menus, the rest are compact lines with their short ID for `gpuwaste explain`
    assert any(b.get("accessory", {}).get("type") == "overflow" for b in payloads[0].blocks)
    assert f"`{findings[-1].fingerprint[:6]}`" in _texts([b for p in payloads for b in p.blocks])


def test_slack_ages_count_to_the_scan_time_not_the_wall_clock() -> None:
    # GIVEN a replayed recording's findings (observed on the recording's date, first seen 5 h earlier)
    findings = _fifteen()[:4]
    items = tuple(_item(f, hours=5) for f in findings)
    # WHEN rendered years later (the wall clock passed as `now`)
    later = datetime(2026, 12, 1, tzinfo=UTC)
    digest = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items), now=later)[0]
    alert = render_notice(Notice(kind=NoticeKind.ALERT, route=ROUTE, items=items[:1]), now=later)[0]
    update = render_notice(Notice(kind=NoticeKind.UPDATE, route=ROUTE, items=items[:1], reason="Reminder"), now=later)[0]
    card = render_card(Notice(kind=NoticeKind.ALERT, route=ROUTE, items=items[:1]), now=later, destination="ml",
                       source="team map")[0]
    # THEN every age reads 5 h (to the scan), never the years since
    for text in (_texts(digest.blocks), _texts(alert.blocks), _texts(update.blocks), json.dumps(card.body, ensure_ascii=False)):
        assert "5h 0m" in text
        assert not re.search(r"\b\d{3,}d\b", text)
    # AND the dates are the one people's format (2024-01-01 01:20 UTC)
    assert f"Scan {findings[0].observed_at:%Y-%m-%d %H:%M} UTC" in _texts(digest.blocks)


def test_slack_digest_shows_a_kv_cache_sizing_note_without_zero_money_or_zero_gpus() -> None:
    # GIVEN the demo's inference team: idle GPUs, and KV-cache pressure on chat-api-0 (a sizing finding: it costs
    # latency and recomputation, not idle GPUs, so it holds no GPU share and is priced at 0)
    from gpuwaste.sinks.slack_blocks import SIZING_NOTE
    from gpuwaste.sinks.teams_cards import _compact

    findings = [f for f in demo_findings() if f.kind.is_waste and f.subject.namespace == "inference"]
    kv = [f for f in findings if f.kind is WasteKind.KV_CACHE_PRESSURE]
    assert kv and all(not f.wasted_gpu_share and f.usd_per_day == 0 for f in kv)
    # WHEN the team's digest is rendered (Slack), and the finding as a Teams digest line
    (payload,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=tuple(_item(f) for f in findings),
                                      scan_id="s"))
    lines = [line for b in payload.blocks if b["type"] == "section" for line in b["text"]["text"].splitlines()]
    (kv_line,) = [line for line in lines if "chat-api-0" in line]
    teams = _compact(_item(kv[0]))["inlines"][0]["text"]
    # THEN the owner still sees it (it is actionable: resize the server), under its heading, and it reads as a
    # sizing note: no "$0.00/day", no "0 GPU"
    assert any("KV cache pressure" in line for line in lines)
    assert kv_line.startswith(f"*{SIZING_NOTE}*") and "$0.00" not in kv_line and " 0 GPU" not in kv_line, kv_line
    assert teams.startswith(SIZING_NOTE) and "$0.00" not in teams, teams
    # AND the money of the other findings is unchanged
    assert any(line.startswith("*$660.48/day*") for line in lines)


def test_slack_node_capacity_goes_to_the_clusters_platform_owner() -> None:
    # GIVEN a cluster with a platform owner, and the demo's node-level findings (capacity nobody requested)
    cfg = GpuWasteConfig.model_validate({"clusters": [{"name": "demo", "platform_owner": {
        "team": "gpu-platform", "slack_channel": "#gpu-platform", "jira_project": "PLAT"}}]})
    nodes = [f for f in demo_findings() if f.kind is WasteKind.UNALLOCATED]
    pods = [f for f in demo_findings() if f.kind is WasteKind.IDLE and f.subject.namespace]
    assert nodes and pods and all(f.subject.cluster == "demo" for f in nodes)
    # WHEN routed and rendered
    routes = {route_for(f, cfg.delivery) for f in nodes}
    (route,) = routes
    payload = render_notice(Notice(kind=NoticeKind.DIGEST, route=route, items=tuple(_item(f) for f in nodes)))[0]
    # THEN they go to the platform owner's channel, team and project, and the digest names the team
    assert (route.channel, route.team, route.jira_project) == ("#gpu-platform", "gpu-platform", "PLAT")
    assert "platform owner of cluster demo" in route.source
    header = payload.blocks[0]["text"]["text"]
    assert header.startswith(f"GPU waste: {len(nodes)} findings for team gpu-platform")
    assert "for nobody" not in _texts(payload.blocks) and "for #gpu-waste" not in _texts(payload.blocks)
    # AND a pod with a team of its own keeps it (the platform owner only takes what nothing else routes)
    owned = pods[0].model_copy(update={"subject": pods[0].subject.model_copy(
        update={"namespace_annotations": {"gpuwaste.io/team": "ml", "gpuwaste.io/slack-channel": "#ml"}})})
    assert (route_for(owned, cfg.delivery).team, route_for(owned, cfg.delivery).channel) == ("ml", "#ml")


def test_slack_node_capacity_without_a_platform_owner_says_what_to_configure() -> None:
    # GIVEN no platform owner configured
    cfg = GpuWasteConfig()
    nodes = [f for f in demo_findings() if f.kind is WasteKind.UNALLOCATED]
    route = route_for(nodes[0], cfg.delivery)
    # WHEN the node digest is rendered
    payload = render_notice(Notice(kind=NoticeKind.DIGEST, route=route, items=tuple(_item(f) for f in nodes)))[0]
    text = _texts(payload.blocks)
    # THEN it is addressed to no owner (not to a channel as if it were one) and names the setting to add
    assert ", no owner" in payload.blocks[0]["text"]["text"] and "for #gpu-waste" not in text
    assert "no team is named for the nodes of cluster demo" in text and "platform team and its channel" in text
    assert "platform_owner" not in text and "docs/delivery.md" in text  # in words, with where to read how


def _coded(f: Finding) -> Finding:
    """`f` with the internal codes and repository paths detector and price-book text can carry."""
    ev = (*f.evidence, Evidence(signal="DCGM_FI_DEV_FB_USED", unit="MiB", window_s=3600, avg=70_000.0,
                                note="pre-allocated by vLLM: not demand (B16)"))
    cost = f.cost.model_copy(update={"source": "https://github.com/aws/karpenter-provider-aws pkg/providers/pricing/"
                                     "zz_generated.pricing_aws.go @ 6fc13b523", "warnings": ("GPU_UTIL is percent (B15)",)}) \
        if f.cost else None
    return f.model_copy(update={"recommendation": f.recommendation + " (B16)", "evidence": ev, "cost": cost,
                                "title": f.title + " (field guide B06)"})


def test_slack_and_teams_text_carries_no_internal_codes_or_repository_paths() -> None:
    # GIVEN every finding of the demo fleet (every kind), as found and with codes and paths in its detector text
    findings = [*demo_findings(), *(_coded(f) for f in demo_findings())]
    assert {f.kind for f in findings} == set(WasteKind) - {WasteKind.UNREQUESTED_USE}  # governance: not in the demo
    items = tuple(_item(f) for f in findings)
    # WHEN rendered every way a chat shows them: alerts, digest, update, text only, details, Teams cards
    texts = []
    for item in items:
        texts.append(_texts(render_notice(Notice(kind=NoticeKind.ALERT, route=ROUTE, items=(item,)))[0].blocks))
        texts.append(_texts(render_notice(Notice(kind=NoticeKind.UPDATE, route=ROUTE, items=(item,), reason="Worse"))[0].blocks))
        texts.append(details_text(item.finding, item.fingerprint))
        texts.append(json.dumps(render_card(Notice(kind=NoticeKind.ALERT, route=ROUTE, items=(item,)), now=item.finding.observed_at,
                                            destination="ml", source="team map")[0].body, ensure_ascii=False))
    digest = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=items)
    texts += [_texts(p.blocks) + p.text for p in render_notice(digest)]
    texts += [p.text for p in render_text_only(digest, now=NOW_ANY)]
    # THEN no internal code, no path inside a repository
    for text in texts:
        assert not CODE.search(text), CODE.search(text)
        assert "../shared" not in text and "zz_generated" not in text and "pkg/providers" not in text
    # AND the price source is its public name and address
    joined = "\n".join(texts)
    assert "Karpenter's AWS on-demand price table" in joined and "https://github.com/aws/karpenter-provider-aws" in joined


def test_slack_details_reply_has_evidence_formula_and_price_source() -> None:
    # GIVEN the costliest demo finding
    f = max((f for f in demo_findings() if f.usd_per_day), key=lambda f: f.usd_per_day or 0)
    # WHEN its Details are rendered
    text = details_text(f, f.fingerprint)
    # THEN they hold the evidence in people's units, the formula, the price's public source and what to do
    assert "SM activity: p95 0.8 %, flagged below 5 %; avg 0.2 %" in text and "SM_ACTIVE" not in text
    assert "/GPU-h ×" in text and f"= ${f.usd_per_day:,.2f}/day" in text
    assert "Price: Karpenter's AWS on-demand price table, 2026-07-20 (https://github.com/aws/karpenter-provider-aws)" in text
    assert "What to do:" in text and f"gpuwaste explain {f.fingerprint[:6]}" in text


def test_slack_digest_lines_carry_the_configured_grafana_and_prometheus_links_only_when_configured() -> None:
    # GIVEN three findings, with the Grafana and Prometheus links of a config that sets them, and without
    findings = _fifteen()[:3]
    links = GpuWasteConfig.model_validate({"delivery": {"links": {
        "grafana": "https://grafana.example/d/gpuwaste?var-namespace={namespace}&var-workload={workload}",
        "prometheus": "https://prom.example/graph?g0.expr=gpuwaste_waste_usd_per_day%7Bnamespace%3D%22{namespace}%22%7D"}}})
    from gpuwaste.services.routing import links_for

    linked = tuple(_item(f).model_copy(update={"links": links_for(f, links.delivery)}) for f in findings)
    plain = tuple(_item(f).model_copy(update={"links": links_for(f, GpuWasteConfig().delivery)}) for f in findings)
    # WHEN each digest is rendered
    (with_links,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=linked, scan_id="s"))
    (without,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=plain, scan_id="s"))
    # THEN every finding's line links its own workload in Grafana and Prometheus, as whole mrkdwn links
    lines = [line for b in with_links.blocks if b["type"] == "section" for line in b["text"]["text"].splitlines()]
    for f in findings:
        (line,) = [ln for ln in lines if (f"/{f.subject.workload_name}" in ln or f"node {f.subject.node}" in ln)
                   and not ln.startswith(("*Why:*", "*Fix:*"))]
        assert "|Grafana>" in line and "|Prometheus>" in line, line
        if f.subject.workload_name:
            assert f"var-workload={f.subject.workload_name}|Grafana>" in line.replace("&amp;", "&")
    assert violations(with_links.blocks) == []
    # AND without configured URLs no link and no empty label appear
    assert "Grafana" not in _texts(without.blocks) and "Prometheus" not in _texts(without.blocks)


def test_slack_digest_line_of_a_sizing_note_names_no_zero_gpus() -> None:
    # GIVEN the demo's $0 sizing note (KV cache: it wastes no GPU) beside a priced finding
    note = next(f for f in demo_findings() if f.usd_per_day == 0 and f.wasted_gpu_share == 0)
    priced = next(f for f in demo_findings() if f.usd_per_day and f.wasted_gpu_share >= 1)
    notice = Notice(kind=NoticeKind.DIGEST, route=ROUTE, items=(_item(note), _item(priced)), scan_id="scan-1")
    # WHEN rendered
    (payload,) = render_notice(notice)
    lines = [line for b in payload.blocks if b["type"] == "section" for line in b["text"]["text"].splitlines()]
    # THEN the note's line has no "0 GPU", the priced one keeps its GPU count
    note_line = next(x for x in lines if f"/{note.subject.workload_name}" in x)
    priced_line = next(x for x in lines if f"/{priced.subject.workload_name}" in x)
    assert " 0 GPU" not in note_line and " GPU" in priced_line, (note_line, priced_line)


def test_cost_formulas_show_prices_people_can_multiply() -> None:
    # GIVEN the demo's priced findings (p4d prices are $21.957642/h over 8 GPUs = $2.74470525/GPU-h)
    from gpuwaste.sinks.slack_blocks import formula_text

    priced = [f for f in demo_findings() if f.cost and f.cost.priced and f.usd_per_day]
    assert any(f.cost and f.cost.usd_per_gpu_hour == Decimal("2.74470525") for f in priced)
    from gpuwaste.people import people_formula

    for f, text in ((g, t) for g in priced for t in (formula_text(g), people_formula(g))):
        # WHEN the alert's cost line and the ticket's / details' / explain's formula are written
        prices = re.findall(r"\$(\d+(?:\.\d+)?)/GPU-h", text)
        # THEN every price has at most 4 decimals, and the first product is the USD/day to the cent
        assert prices and all(len(p.partition(".")[2]) <= 4 for p in prices), text
        share = re.search(r"/GPU-h × ([\d.]+) GPU", text)
        assert share, text
        if "(1 −" not in text:  # wrong hardware: the saving is (1 − relative cost) of the GPU
            # (to the rounding of the shown share: half a unit of its last decimal)
            shown = Decimal(share.group(1))
            places = len(share.group(1).partition(".")[2])
            slack = Decimal(prices[0]) * 24 * Decimal(5).scaleb(-places - 1) if places else Decimal(0)
            product = Decimal(prices[0]) * shown * 24
            assert abs(product - f.usd_per_day) <= slack + Decimal("0.01"), (text, product)
