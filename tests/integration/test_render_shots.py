"""The test-side Slack / Jira renderer (`tests/tools/render_shots.py`, used for the screenshots of issue 22) knows
every Block Kit block, element and ADF node the demo delivers: a new type in a payload fails here rather than
vanishing from a screenshot. Payloads are taken at the fake Slack and fake Jira after `gpuwaste run` of the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack
from tests.tools.render_shots import UnknownTypeError, jira_issue_page, slack_block_html, slack_page

pytestmark = pytest.mark.integration


def test_the_renderer_knows_every_type_the_demo_delivers(
    tmp_path: Path, slack_api: FakeSlack, jira_api: FakeJira
) -> None:
    # GIVEN the demo delivered to Slack and Jira, every finding worth a ticket, the Slack workspace known
    config = tmp_path / "c.json"
    config.write_text(
        json.dumps(
            {
                "lifecycle": {"ticket_usd_per_day": 0},
                "delivery": {
                    "default_channel": "#gpu-waste",
                    "slack": {
                        "bot_token": slack_api.token,
                        "base_url": slack_api.url,
                        "workspace_url": "https://acme.slack.com",
                    },
                    "jira": {
                        "base_url": jira_api.base_url,
                        "email": jira_api.email,
                        "api_token": jira_api.api_token,
                        "default_project": "OPS",
                        "max_per_run": 100,
                        "max_per_team": 100,
                        "quiet_start_days": 0,
                    },
                },
            }
        )
    )
    result = CliRunner().invoke(
        app,
        ["run", "-r", str(local.demo_recording()), "--state", str(tmp_path / "s.db"), "--config", str(config)],
        env={"COLUMNS": "160", "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    bodies = slack_api.calls_to("chat.postMessage") + slack_api.calls_to("chat.update")
    assert bodies and jira_api.issues
    # WHEN every message and ticket is rendered (UnknownTypeError on a type the renderer does not know)
    page = slack_page(bodies)
    tickets = [
        jira_issue_page({"key": i.key, "fields": i.fields, "comments": i.comments}) for i in jira_api.issues.values()
    ]
    # THEN each Slack message and each ticket shows its text
    assert page.count('class="msg"') == len(bodies) and "GPU waste" in page
    assert all("How to fix" in t and "<pre>" in t for t in tickets)
    assert any("https://acme.slack.com/archives/" in t for t in tickets)
    # AND a block type it does not know is refused, not dropped
    with pytest.raises(UnknownTypeError, match="rich_text"):
        slack_block_html({"type": "rich_text", "elements": []})
