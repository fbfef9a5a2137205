"""The local chain (`gpuwaste run`, `gpuwaste demo`): dispatch → scan → price → dedupe → alerts in one process."""

from __future__ import annotations

import json
import re
import shlex
from datetime import timedelta
from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.messages import AlertAction

DEMO = local.demo_recording()


def run_demo_chain(state: Path, *, scans: int = 1) -> local.ChainResult:
    cfg = GpuWasteConfig()
    sources = local.recording_sources(DEMO, cfg)
    assert sources.recording is not None
    times = local.replay_times(sources.recording.end_time(), scans=scans, interval=timedelta(minutes=10))
    return local.run_chain(sources, cfg, state_path=state, cluster="demo", times=times,
                           window_s=sources.recording.meta.window_s)


def test_run_chain_alerts_each_priced_waste_once_and_prices_the_report(tmp_path: Path) -> None:
    # GIVEN the demo recording and an empty SQLite store
    # WHEN the chain runs once
    result = run_demo_chain(tmp_path / "state.db")
    # THEN each of the 21 waste findings is alerted NEW once, the report is priced, and 2 tickets are due (≥ $100/day)
    assert result.new_alerts == 21 and {a.action for a in result.alerts} == {AlertAction.NEW}
    assert len({a.fingerprint for a in result.alerts}) == 21
    assert max(f.usd_per_day or 0 for f in result.reports[0].findings) > 600
    assert len(result.tickets) == 2 and result.dead_letters == []


def test_run_chain_second_run_on_same_input_alerts_nothing(tmp_path: Path) -> None:
    # GIVEN a store that already saw the demo scan
    run_demo_chain(tmp_path / "state.db")
    # WHEN the chain runs again on the same input
    again = run_demo_chain(tmp_path / "state.db")
    # THEN the scan is recognised: no alerts, no tickets
    assert again.alerts == [] and again.tickets == []


def test_run_chain_successive_scans_alert_once(tmp_path: Path) -> None:
    # GIVEN three scans 10 minutes apart over the recording
    # WHEN the chain replays them
    result = run_demo_chain(tmp_path / "state.db", scans=3)
    # THEN three scans ran and each waste was alerted once, in the scan that first saw it
    assert len(result.reports) == 3
    assert len(result.alerts) == len({a.fingerprint for a in result.alerts}) == result.new_alerts


def test_run_command_twice_reports_zero_new_alerts(tmp_path: Path) -> None:
    # GIVEN the `gpuwaste run` command on the demo recording with a state file
    args = ["run", "--recording", str(DEMO), "--state", str(tmp_path / "s.db"), "--quiet"]
    # WHEN it is run twice
    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)
    # THEN the first prints 21 new alerts, the second none
    assert first.exit_code == 0 and "alerts (21; 21 new)" in first.stdout and "[NEW] inference/llama-70b-vllm" in first.stdout
    assert second.exit_code == 0 and "alerts (0; 0 new)" in second.stdout


def test_run_command_without_input_fails_with_a_hint(tmp_path: Path) -> None:
    # GIVEN no recording, Prometheus or config
    # WHEN `gpuwaste run` is called
    result = CliRunner().invoke(app, ["run", "--state", str(tmp_path / "s.db")], env={"GPUWASTE_PROMETHEUS_URL": ""})
    # THEN it exits non-zero and says what to pass
    assert result.exit_code == 2 and "--recording" in result.output


def test_demo_command_runs_the_chain_and_matches_ground_truth() -> None:
    # GIVEN the bundled demo fleet
    # WHEN `gpuwaste demo` runs
    result = CliRunner().invoke(app, ["demo"])
    # THEN it prints the scan table, the Slack messages notify_slack would post, the alerts and a passing
    # ground-truth check
    assert result.exit_code == 0, result.output
    assert "GPU waste findings" in result.stdout and "[NEW] inference/llama-70b-vllm" in result.stdout
    assert "→ #gpu-waste" in result.stdout
    assert "ground truth: 23/23 expected findings found, 0 unexpected, 0 missed" in result.stdout


def test_demo_summary_open_now_equals_the_scan_total() -> None:
    # GIVEN the bundled demo fleet and its seeded 30 days of history
    # WHEN `gpuwaste demo` runs (scan, alerts, then the daily summary)
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    # THEN the summary's "Open now" counts the same findings and $/day as the scan's total line: past findings the
    # demo fleet no longer has were resolved before the demo's scan
    total = re.search(r"Total: \$([\d,.]+)/day · \$[\d,]+/month · (\d+) findings", result.stdout)
    open_now = re.search(r"Open now\s+(\d+) findings, \$([\d,.]+)/day", result.stdout)
    assert total and open_now, result.stdout
    assert (open_now[1], open_now[2]) == (total[2], total[1])


def _explain_hints(stdout: str) -> list[list[str]]:
    """The `gpuwaste explain …` commands the output suggests, as argument lists: the scan's `why:` line (with the
    first finding's ID for "ID") and each ticket's Finding fact (on one line: the output is 300 columns wide)."""
    first_id = re.search(r"^([0-9a-f]{6}) ", stdout, re.M)
    assert first_id, stdout
    why = re.search(r"^why: gpuwaste explain ID (.+)$", stdout, re.M)
    assert why, stdout
    hints = [["explain", first_id[1], *shlex.split(why[1])]]
    facts = re.findall(r"• Finding: \w+ \(gpuwaste explain ([0-9a-f]{6})(.*)\)\s*│$", stdout, re.M)
    assert facts, stdout
    hints += [["explain", fid, *shlex.split(rest)] for fid, rest in facts]
    return hints


def test_explain_hints_printed_by_demo_and_run_work_as_printed(tmp_path: Path) -> None:
    # GIVEN the demo (temporary state) and `gpuwaste run` keeping its state file
    wide = {"COLUMNS": "300"}
    demo = CliRunner().invoke(app, ["demo"], env=wide)
    ran = CliRunner().invoke(app, ["run", "--recording", str(DEMO), "--state", str(tmp_path / "my state.db")], env=wide)
    assert demo.exit_code == 0 and ran.exit_code == 0, demo.output + ran.output
    for result, source in ((demo, "-r"), (ran, "--state")):
        hints = _explain_hints(result.stdout)
        assert len(hints) == 3 and all(source in h for h in hints), hints
        for args in hints:
            # WHEN each suggested command is run as printed
            explained = CliRunner().invoke(app, args)
            # THEN it exits 0 and explains that finding
            assert explained.exit_code == 0, (args, explained.output)
            assert f"ID: {args[1]} (fingerprint {args[1]}" in explained.stdout and "evidence:" in explained.stdout
            assert "cost: $" in explained.stdout and "how to fix:" in explained.stdout


def test_explain_without_recording_or_state_file_says_what_to_pass(tmp_path: Path, monkeypatch) -> None:
    # GIVEN a directory without run's default state file
    monkeypatch.chdir(tmp_path)
    # WHEN a finding is explained without -r or --state
    result = CliRunner().invoke(app, ["explain", "02dd91"])
    # THEN it fails plainly, naming both ways to find the finding
    assert result.exit_code == 2 and "-r DIR" in result.output and "--state FILE" in result.output


def test_explain_reads_runs_default_state_file(tmp_path: Path, monkeypatch) -> None:
    # GIVEN `gpuwaste run` with its default state file, in this directory
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["run", "--recording", str(DEMO), "-q"]).exit_code == 0
    # WHEN a finding it stored is explained by its ID alone
    result = CliRunner().invoke(app, ["explain", "02dd91"])
    # THEN the stored finding is explained, priced
    assert result.exit_code == 0, result.output
    assert "ID: 02dd91" in result.stdout and "llama-70b-vllm" in result.stdout and "$660.48/day" in result.stdout


def test_demo_slack_cumulative_per_team_is_the_summary_money_of_that_team_to_the_cent(tmp_path: Path) -> None:
    # GIVEN the demo, keeping its state (its findings were all first seen in the last UTC day of its summary)
    state = tmp_path / "demo.db"
    demo = CliRunner().invoke(app, ["demo", "--state", str(state)], env={"COLUMNS": "200"})
    assert demo.exit_code == 0, demo.output
    # WHEN each team's Slack digest and the summary's waste per team on that day are read back
    digests = {("unassigned" if m[1] is None else m[1]): m[2] for m in re.finditer(
        r"GPU waste: \d+ findings(?: for team (\S+)|, no owner) — .*?cumulative so far \$([\d,.]+)", demo.stdout, re.S)}
    summary = CliRunner().invoke(app, ["summary", "--state", str(state), "-o", "json"])
    day = json.loads(summary.stdout)["trend"][-1]
    # THEN they are the same money to the cent: the digest sums the findings' exact ledger figures, rounded once
    assert len(digests) == 5 and digests == dict(day["by_team"]), (digests, day)
