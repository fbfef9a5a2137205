"""Every surface of the demo in people's words: `gpuwaste run` delivering to the fake Slack, Jira and Teams, and the
terminal's scan, run, summary and explain. No internal id (a kind's JSON value, an idle mode's, `ongoing=True`, a
field-guide code "(B16)") reaches people, no PromQL outside `explain` (the deep dive keeps the queries), no rule is
stated backwards, the team-less group is "no owner" everywhere, and no ticket names a local state path. Counted at the fakes that received the messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.models.findings import IdleMode, WasteKind
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack
from tests.servers.teams_webhook import FakeTeams

pytestmark = pytest.mark.integration

DEMO = local.demo_recording()
_IDS = "|".join(sorted({k.value for k in WasteKind if "_" in k.value} | {m.value for m in IdleMode}, key=len, reverse=True))
INTERNAL = re.compile(rf"(?<![\w.])({_IDS}|ongoing=True)(?![\w.])|\(B\d\d\)")  # a config path (detectors.x.y) is a setting
PROMQL = re.compile(r"\brate\(|\[\d+s\]|DCGM_FI_\w+|\w+_total\b")
BACKWARDS = re.compile(r"flagged (?:under|when)")
#: The team-less group is "no owner" for people; "unassigned" is its JSON value only.
OWNER_WORDS = re.compile(r"\bunassigned\b|\bteam no owner\b")


def _texts(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for v in node.values() for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "160", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def test_no_internal_id_or_query_reaches_people_on_any_surface(tmp_path: Path, slack_api: FakeSlack, jira_api: FakeJira,
                                                               teams: FakeTeams) -> None:
    # GIVEN the demo delivered to Slack, Jira (every finding ticketed) and Teams, and the terminal's surfaces
    delivery = {
        "default_channel": "#gpu-waste",
        "slack": {"bot_token": slack_api.token, "base_url": slack_api.url},
        "jira": {"base_url": jira_api.base_url, "email": jira_api.email, "api_token": jira_api.api_token,
                 "default_project": "OPS", "max_per_run": 100, "max_per_team": 100, "quiet_start_days": 0},
        "msteams": {"webhooks": {"general": teams.add_flow("general")}, "default_webhook": "general"},
    }
    cfg, state = tmp_path / "c.json", tmp_path / "s.db"
    cfg.write_text(json.dumps({"delivery": delivery, "lifecycle": {"ticket_usd_per_day": 0}}))
    surfaces: dict[str, str] = {"run": _invoke("run", "-r", str(DEMO), "--state", str(state), "--config", str(cfg))}
    surfaces["scan"] = _invoke("scan", "-r", str(DEMO))
    surfaces["summary"] = _invoke("summary", "--state", str(state))
    surfaces["summary markdown"] = _invoke("summary", "--state", str(state), "-o", "markdown")
    surfaces["slack"] = "\n".join(t for c in slack_api.calls for t in _texts(getattr(c, "body", {})))
    surfaces["jira"] = "\n".join(t for issue in jira_api.issues.values() for t in _texts(issue.fields))
    surfaces["teams"] = "\n".join(t for p in teams.posts for t in _texts(p.card))
    ids = re.findall(r"^([0-9a-f]{6})\s", surfaces["scan"], re.M)
    explained = {i: _invoke("explain", i, "--state", str(state)) for i in ids}
    # THEN every surface received something (the sweep is not vacuous)
    assert len(jira_api.issues) >= 15 and slack_api.calls and teams.posts and len(ids) >= 20
    problems = []
    for where, text in {**surfaces, **{f"explain {i}": t for i, t in explained.items()}}.items():
        assert text, where
        # AND no internal id or field-guide code anywhere, no rule stated the old way
        problems += [f"{where}: {m.group(0)!r}" for m in INTERNAL.finditer(text)]
        problems += [f"{where}: {m.group(0)!r}" for m in BACKWARDS.finditer(text)]
        problems += [f"{where}: {m.group(0)!r}" for m in OWNER_WORDS.finditer(text)]
        # AND no PromQL in the chat, ticket and table text (explain keeps the signal names and queries)
        if not where.startswith("explain"):
            problems += [f"{where}: {m.group(0)!r}" for m in PROMQL.finditer(text)]
    # AND a ticket never names the local state file (its readers do not have it)
    assert str(state) not in surfaces["jira"]
    assert not problems, sorted(set(problems))[:20]
