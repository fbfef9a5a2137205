"""Integration: once `gpuwaste run` opens a finding's ticket, the Slack message that told its owner is edited in
place to show it (`chat.update` of the same message at the fake Slack, which speaks the Web API), once: a second run
edits nothing. Counted at the fakes (Slack's stored messages and calls, Jira's issues)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local, local_delivery
from gpuwaste.cli import app
from gpuwaste.config import load_config
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

DEMO = local.demo_recording()


def _texts(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for v in node.values() for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []


def _run(state: Path, config: Path) -> str:
    result = CliRunner().invoke(app, ["run", "-r", str(DEMO), "--state", str(state), "--config", str(config)],
                                env={"COLUMNS": "160", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_slack_message_shows_the_ticket_once_it_exists_edited_once(tmp_path: Path, slack_api: FakeSlack,
                                                                        jira_api: FakeJira) -> None:
    # GIVEN the demo delivered to Slack and Jira, every finding worth a ticket
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"lifecycle": {"ticket_usd_per_day": 0}, "delivery": {
        "default_channel": "#gpu-waste", "slack": {"bot_token": slack_api.token, "base_url": slack_api.url},
        "jira": {"base_url": jira_api.base_url, "email": jira_api.email, "api_token": jira_api.api_token,
                 "default_project": "OPS", "max_per_run": 100, "max_per_team": 100, "quiet_start_days": 0}}}))
    state = tmp_path / "s.db"
    # WHEN one run posts the alerts, then opens the tickets
    output = _run(state, config)
    posted = slack_api.calls_to("chat.postMessage")
    updates = slack_api.calls_to("chat.update")
    tickets = {next(lb for lb in issue.labels if re.fullmatch(r"gpuwaste-[0-9a-f]{16}", lb))[len("gpuwaste-"):]: key
               for key, issue in jira_api.issues.items()}
    assert len(tickets) >= 15 and posted
    # THEN every message carrying a ticketed finding was edited in place (the same channel and ts) exactly once
    by_fp = {fp: where for where, m in slack_api.messages.items()
             for fp in ((m.get("metadata") or {}).get("event_payload") or {}).get("fps", [])}
    carrying = {by_fp[fp] for fp in tickets if fp in by_fp}
    assert carrying and sorted((u["channel"], u["ts"]) for u in updates) == sorted(carrying)
    for fp, key in tickets.items():
        if fp not in by_fp:
            continue
        message = slack_api.messages[by_fp[fp]]
        text = "\n".join(_texts(message.get("blocks")))
        # AND it names the ticket and offers no "Create ticket" for the finding any more
        assert key in text, (key, text[:300])
        values = [str(e.get("value", "")) for b in message.get("blocks") or [] for e in b.get("elements") or []]
        values += [str(o.get("value", "")) for b in message.get("blocks") or []
                   for o in (b.get("accessory") or {}).get("options") or []]
        assert not any(v.startswith("ticket|") and v.split("|", 1)[1].startswith(fp) for v in values), key
    assert "updated to show its ticket" in output
    # AND asking again for every ticketed finding (a redelivered batch) edits nothing: the edits are recorded
    store = SqliteFindingStore(state)
    try:
        ticketed = [fp for fp in _fingerprints(store) if fp[:16] in tickets]
        again = local_delivery.local_notify_service(load_config(config), store).show_tickets(ticketed)
    finally:
        store.close()
    assert len(ticketed) == len(tickets) and again == [] and len(slack_api.calls_to("chat.update")) == len(updates)
    # AND a second run over the same state edits nothing and posts nothing new
    _run(state, config)
    assert len(slack_api.calls_to("chat.update")) == len(updates)
    assert len(slack_api.calls_to("chat.postMessage")) == len(posted)


def _fingerprints(store: SqliteFindingStore) -> list[str]:
    everything = store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
    return [r.fingerprint for r in everything]
