"""`-q` only quiets output: `gpuwaste run -q` delivers what `gpuwaste run` delivers (counted at the fake Slack),
and a run that delivers nothing (`--no-slack --no-tickets`) says so on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

DEMO = str(local.demo_recording())


def test_quiet_run_still_delivers_and_a_run_that_delivers_nothing_says_so(tmp_path: Path, slack_api: FakeSlack) -> None:
    # GIVEN a config with a Slack bot token at the fake Slack
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"delivery": {"default_channel": "#gpu-waste",
                                            "slack": {"bot_token": slack_api.token, "base_url": slack_api.url}}}))
    # WHEN the demo runs with -q
    quiet = CliRunner().invoke(app, ["run", "-r", DEMO, "-q", "--no-summary", "--no-tickets", "--config", str(cfg),
                                     "--state", str(tmp_path / "q.db")], env={"COLUMNS": "200"})
    # THEN the messages reached Slack, and the output holds only the alert lines and the closing line
    assert quiet.exit_code == 0, quiet.output
    posted = slack_api.calls_to("chat.postMessage")
    assert len(posted) >= 5, [c.method for c in slack_api.calls]
    assert "GPU waste findings" not in quiet.output and "slack digest" not in quiet.output
    assert "delivered 21 alerts" in quiet.output
    # AND a run with both deliveries switched off delivers nothing and says so on stderr
    off = CliRunner().invoke(app, ["run", "-r", DEMO, "--no-slack", "--no-tickets", "--no-summary",
                                   "--state", str(tmp_path / "off.db")], env={"COLUMNS": "200"})
    assert off.exit_code == 0
    assert "not delivered yet (--no-slack, --no-tickets): 21 alerts" in off.stderr
