"""Crash consistency of the local chain: `gpuwaste run` SIGKILLed at many points, then run again, delivers every
alert and every ticket exactly once.

The product runs as a real process (`gpuwaste run` over the demo recording, its SQLite state on disk) against the
fake Slack and the fake Jira. The fakes kill it: on the k-th API call, either *before* answering (the call is not
accepted) or *after* accepting it but before the answer reaches the process (the hardest point: the sink has the
message, the product cannot know). A few kills land by time instead (mid-scan, between the lifecycle's writes).
Then `gpuwaste run` runs again on the same state until it exits 0.

What is counted comes from the fakes, not from the product: every `chat.postMessage` the fake Slack accepted,
keyed by the finding and scan named in the message's metadata, and every issue the fake Jira holds, by its dedupe
label. The reference is a clean run (no kill) against fresh fakes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.hardening.harness import AuditedSlack
from tests.servers import HttpRequest, HttpResponse
from tests.servers.jira_api import FakeJira

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "shared" / "gpuwaste" / "fleet" / "demo"
RUN_TIMEOUT_S = 60
#: how many of the API-call kill points to try (each is one killed run plus reruns); raise with GPUWASTE_CRASH_POINTS
MAX_CALL_POINTS = int(os.environ.get("GPUWASTE_CRASH_POINTS", "18"))
TIME_FRACTIONS = (0.15, 0.35, 0.55, 0.75, 0.9)


class Killer:
    """Kills the product process at the k-th API call (before or after the fake handles it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.at: int | None = None
        self.when = "after"
        self.calls = 0
        self.killed = False

    def arm(self, pid: int, at: int | None, when: str) -> None:
        with self.lock:
            self.pid, self.at, self.when, self.calls, self.killed = pid, at, when, 0, False

    def tick(self) -> int:
        with self.lock:
            self.calls += 1
            return self.calls

    def maybe_kill(self, n: int, phase: str) -> bool:
        with self.lock:
            if self.killed or self.pid is None or self.at != n or self.when != phase:
                return False
            self.killed = True
            pid = self.pid
        os.kill(pid, signal.SIGKILL)
        return True


class KillingSlack(AuditedSlack):
    """The audited fake Slack, with a `Killer`."""

    def __init__(self, killer: Killer) -> None:
        super().__init__()
        self.killer = killer

    def handle(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return super().handle(request)
        n = self.killer.tick()
        if self.killer.maybe_kill(n, "before"):
            return HttpResponse.json_body(503, {"ok": False, "error": "killed"})
        response = super().handle(request)
        self.killer.maybe_kill(n, "after")
        return response


class KillingJira(FakeJira):
    """The fake Jira, with a `Killer` (sharing the call count with Slack)."""

    def __init__(self, killer: Killer) -> None:
        super().__init__()
        self.killer = killer

    def handle(self, request: HttpRequest) -> HttpResponse:
        n = self.killer.tick()
        if self.killer.maybe_kill(n, "before"):
            return HttpResponse.json_body(503, {"errorMessages": ["killed"]})
        response = super().handle(request)
        self.killer.maybe_kill(n, "after")
        return response


def accepted_posts(slack: AuditedSlack) -> Counter[tuple[str, str]]:
    """(finding fingerprint prefix, scan id) → posts the fake Slack accepted, read from each message's metadata."""
    out: Counter[tuple[str, str]] = Counter()
    for call in slack.accepted:
        if call.method != "chat.postMessage":
            continue
        payload = (call.params.get("metadata") or {}).get("event_payload") or {}
        for fp in payload.get("fps") or []:
            out[(str(fp), str(payload.get("scan")))] += 1
    return out


def issues_by_label(jira: FakeJira) -> Counter[str]:
    """Dedupe label (`gpuwaste-<fp16>`) → issues the fake Jira holds."""
    out: Counter[str] = Counter()
    for issue in jira.issues.values():
        for label in issue.labels:
            if label.startswith("gpuwaste-"):
                out[label] += 1
    return out


def _config(tmp: Path, slack: AuditedSlack, jira: FakeJira) -> Path:
    path = tmp / "config.yaml"
    path.write_text(
        "delivery:\n"
        f"  slack: {{bot_token: {slack.token}, base_url: '{slack.url}', timeout_s: 5, rate_limit_retries: 0,"
        " server_error_retries: 0}\n"
        f"  jira: {{base_url: '{jira.url}', email: '{jira.email}', api_token: '{jira.api_token}',"
        " default_project: OPS}\n"
    )
    return path


def _start(config: Path, state: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}", "COLUMNS": "200"}
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-c", "from gpuwaste.cli import run; run()", "run", "--recording", str(DEMO), "--state", str(state),
             "--config", str(config), "--no-summary"],
            stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=str(config.parent))


def _run(config: Path, state: Path, log: Path, killer: Killer, *, at: int | None = None, when: str = "after",
         after_s: float | None = None) -> int:
    proc = _start(config, state, log)
    killer.arm(proc.pid, at, when)
    if after_s is not None:
        try:
            return proc.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            killer.killed = True
            proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def fakes() -> Any:
    killer = Killer()
    with KillingSlack(killer) as slack, KillingJira(killer) as jira:
        yield killer, slack, jira


@pytest.fixture(scope="module")
def reference(fakes: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A clean run: what must be delivered, how many API calls it makes and how long it takes."""
    killer, slack, jira = fakes
    slack.reset()
    jira.reset()
    tmp = tmp_path_factory.mktemp("reference")
    started = time.monotonic()
    rc = _run(_config(tmp, slack, jira), tmp / "state.db", tmp / "run.log", killer)
    wall = time.monotonic() - started
    assert rc == 0, (tmp / "run.log").read_text()[-3000:]
    posts, issues = accepted_posts(slack), issues_by_label(jira)
    assert posts and issues, "the demo must post alerts and open tickets"
    assert set(posts.values()) == {1} and set(issues.values()) == {1}
    return {"posts": set(posts), "issues": set(issues), "calls": killer.calls, "wall_s": wall}


def _points(calls: int) -> list[tuple[int | None, str, float | None]]:
    """Kill points: every API call after it was accepted, every other call before, then a few by time."""
    after = [(k, "after", None) for k in range(1, calls + 1)]
    before = [(k, "before", None) for k in range(1, calls + 1, 2)]
    chosen = (after + before)[:MAX_CALL_POINTS]
    return chosen + [(None, "time", f) for f in TIME_FRACTIONS]


def test_crash_consistency_sigkill_at_any_point_then_rerun_delivers_each_alert_and_ticket_once(
    fakes: Any, reference: dict[str, Any], tmp_path: Path, figures: Any,
) -> None:
    killer, slack, jira = fakes
    trials = _points(reference["calls"])
    outcomes: list[str] = []
    kills = 0
    for n, (at, when, fraction) in enumerate(trials):
        # GIVEN fresh fakes and a fresh state
        slack.reset()
        jira.reset()
        tmp = tmp_path / f"trial-{n}"
        tmp.mkdir()
        config, state, log = _config(tmp, slack, jira), tmp / "state.db", tmp / "run.log"
        # WHEN `gpuwaste run` is SIGKILLed at the point, then run again until it completes
        if when == "time":
            assert fraction is not None
            rc = _run(config, state, log, killer, after_s=fraction * reference["wall_s"])
        else:
            rc = _run(config, state, log, killer, at=at, when=when)
        kills += killer.killed
        reruns = 0
        while rc != 0 and reruns < 3:
            reruns += 1
            rc = _run(config, state, log, killer)
        assert rc == 0, log.read_text()[-3000:]
        # THEN the fakes hold every alert post and every ticket exactly once — no more, no fewer
        posts, issues = accepted_posts(slack), issues_by_label(jira)
        lost = sorted(reference["posts"] - set(posts)) + sorted(reference["issues"] - set(issues))
        twice = sorted(k for k, v in posts.items() if v > 1) + sorted(k for k, v in issues.items() if v > 1)
        extra = sorted(set(posts) - reference["posts"]) + sorted(set(issues) - reference["issues"])
        if lost or twice or extra:
            outcomes.append(f"kill {when} {at or fraction}: lost {lost[:3]}, twice {twice[:3]}, unexpected {extra[:3]}")
    figures.notes["crash consistency"] = (
        f"{len(trials)} trials, {kills} SIGKILLs landed, {reference['calls']} API calls per clean run, "
        f"{len(reference['posts'])} alert posts + {len(reference['issues'])} tickets each; "
        f"trials with a loss or a duplicate: {len(outcomes)}")
    assert kills >= len(trials) * 2 // 3, f"only {kills} of {len(trials)} kills landed"
    assert not outcomes, "\n".join(outcomes)


def test_crash_consistency_slack_down_exits_4_keeps_the_alerts_and_the_next_run_posts_each_once(
        fakes: Any, reference: dict[str, Any], tmp_path: Path, figures: Any) -> None:
    # GIVEN Slack answering 503 to every post
    killer, slack, jira = fakes
    slack.reset()
    jira.reset()
    slack.fail_next("chat.postMessage", 503, times=10_000)
    config, state, log = _config(tmp_path, slack, jira), tmp_path / "state.db", tmp_path / "run.log"
    # WHEN `gpuwaste run` runs
    rc = _run(config, state, log, killer)
    # THEN it exits 4 saying the deliveries are kept, and Slack accepted nothing
    assert rc == 4, log.read_text()[-2000:]
    assert "stay pending" in log.read_text()
    assert accepted_posts(slack) == {}
    outage = sum(slack.faults_served.values())
    # WHEN Slack is back and the next run comes
    with slack._lock:
        slack._state.faults.clear()
    assert _run(config, state, log, killer) == 0, log.read_text()[-2000:]
    # THEN every alert of the first run was posted, each once
    posts = accepted_posts(slack)
    assert set(posts) == reference["posts"] and set(posts.values()) == {1}
    figures.fault("local run: slack 503 (outage)", outage)
