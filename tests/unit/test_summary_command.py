"""`gpuwaste summary` over a run's state file: group counts that agree with what is open now, `-o` choosing
the format, `--out` writing the file, and a format that disagrees with the output name refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app

DEMO = local.demo_recording()


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state file holding one run over the demo fleet (waste and data-quality findings)."""
    state = tmp_path_factory.mktemp("polish") / "state.db"
    result = invoke("run", "--recording", str(DEMO), "--state", str(state), "-q", "--no-summary")
    assert result.exit_code == 0, result.output
    return state


def test_summary_group_counts_each_sum_to_open_now(demo_state: Path) -> None:
    # GIVEN a history with waste findings and data-quality problems (the demo run)
    # WHEN it is summarised as JSON
    result = invoke("summary", "--state", str(demo_state), "-o", "json")
    # THEN the team, namespace, kind and cluster counts each add up to the open waste findings
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # (the demo's offline-eval Job finished mid-window: it held its GPU until then, so its pod label is no stale label)
    assert doc["open_findings"] == 21 and doc["data_quality_problems"] == 2
    for section in ("by_team", "by_namespace", "by_kind", "by_cluster"):
        assert sum(g["findings"] for g in doc[section]) == doc["open_findings"], section
    # AND data quality is no kind of waste in the tables
    assert "data_quality" not in {g["name"] for g in doc["by_kind"]}


def test_summary_markdown_tables_count_open_findings(demo_state: Path, tmp_path: Path) -> None:
    # GIVEN the demo history
    out = tmp_path / "s.md"
    # WHEN the Markdown report is written
    result = invoke("summary", "--state", str(demo_state), "-o", "markdown", "--out", str(out))
    # THEN the cluster row counts the 21 open findings, as the "Open now" line does
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "**Open now:** 21 findings" in text
    assert "| cluster | wasted | before | trend | open |" in text
    assert re.search(r"\| demo \| \$[\d.,]+ \| \$0\.00 \| new \| 21 \|", text), text


def test_summary_output_option_chooses_the_format(demo_state: Path) -> None:
    # GIVEN the demo history
    # WHEN `-o markdown` and `--output html` are asked for
    md = invoke("summary", "--state", str(demo_state), "-o", "markdown")
    page = invoke("summary", "--state", str(demo_state), "--output", "html")
    # THEN each prints that format on stdout
    assert md.exit_code == 0 and md.stdout.startswith("# GPU waste summary"), md.output
    assert page.exit_code == 0 and page.stdout.startswith("<!doctype html>"), page.output


def test_summary_unknown_output_format_is_a_choice_error(demo_state: Path) -> None:
    # GIVEN the demo history
    # WHEN an unknown format is asked for
    result = invoke("summary", "--state", str(demo_state), "-o", "report.md")
    # THEN typer's choice error (exit 2) lists the formats
    assert result.exit_code == 2
    assert "table" in result.output and "json" in result.output and "Traceback" not in result.output


def test_summary_out_writes_the_file_and_says_where(demo_state: Path, tmp_path: Path) -> None:
    # GIVEN a target file
    target = tmp_path / "summary.html"
    # WHEN the HTML summary is written there
    result = invoke("summary", "--state", str(demo_state), "-o", "html", "--out-file", str(target))
    # THEN the file holds the page and the command names the path
    assert result.exit_code == 0, result.output
    assert target.read_text().startswith("<!doctype html>")
    assert f"wrote the html summary to {target}" in result.output.replace("\n", "")


def test_summary_format_and_output_that_disagree_are_refused(demo_state: Path) -> None:
    # GIVEN the demo history
    # WHEN --format and --output name different formats
    result = invoke("summary", "--state", str(demo_state), "--format", "markdown", "-o", "json")
    # THEN exit 2 saying they disagree
    assert result.exit_code == 2
    assert "disagree" in result.output


def test_summary_of_a_period_after_the_last_scan_says_so_instead_of_printing_empty_tables(demo_state: Path) -> None:
    # GIVEN the demo's state (its scans are from 2024-01-01) and a period that ends now, years later
    # WHEN summarised for people
    result = invoke("summary", "--state", str(demo_state), "--until", "now")
    # THEN the headline says the last scan is before the period and how to see it, the empty breakdowns are one
    # line each instead of tables with headers and no rows, and what was open at the last scan is still said
    assert result.exit_code == 0, result.output
    text = re.sub(r"\s+", " ", result.stdout)
    assert "is before this period" in text and "--until latest" in text
    assert "By team, namespace, kind, cluster: no waste in this period" in text
    assert "Top offenders: none in this period" in text
    assert "team wasted before" not in text
    assert re.search(r"Open at the last scan \d+ findings", text)
    # AND the default period (ending at the last scan) still prints the tables
    latest = re.sub(r"\s+", " ", invoke("summary", "--state", str(demo_state)).stdout)
    assert "team wasted before trend open" in latest and "is before this period" not in latest


def test_summary_shows_the_runs_attribution_coverage_per_kind(tmp_path: Path) -> None:
    # GIVEN one run over the demo fleet, its scan's attribution coverage read from its JSON report
    state = tmp_path / "state.db"
    run = invoke("run", "--recording", str(DEMO), "--state", str(state), "--no-summary", "-o", "json")
    assert run.exit_code == 0, run.output
    scanned = json.loads(run.stdout)["inventory"]["attribution_coverage"]
    assert set(scanned) == {"all", "MIG", "device plugin"}
    # WHEN the state is summarised as JSON and as HTML
    doc = json.loads(invoke("summary", "--state", str(state), "-o", "json").stdout)
    html = invoke("summary", "--state", str(state), "-o", "html").stdout
    # THEN the summary carries the scan's figures per kind, the one scan counted
    got = {c["kind"]: {k: c[k] for k in ("allocated_gpu_hours", "attributed_gpu_hours", "ratio")} for c in doc["coverage"]}
    assert got == scanned
    assert {(c["cluster"], c["scans"]) for c in doc["coverage"]} == {("demo", 1)}
    assert "<h2>Attribution coverage</h2>" in html
    assert f"{scanned['all']['ratio']:.1%}" in html


def test_summary_names_a_node_offender_as_the_scan_table_does(demo_state: Path) -> None:
    # GIVEN the demo history: its top offenders include node ip-10-0-1-17.ec2.internal's unallocated GPUs
    from datetime import UTC, datetime, timedelta

    from gpuwaste.services.summary import summarize
    from gpuwaste.sinks.slack_blocks import render_summary as slack_summary
    from gpuwaste.sinks.teams_cards import render_summary as teams_summary
    from gpuwaste.store.sqlite import SqliteFindingStore

    scan = " ".join(CliRunner().invoke(app, ["scan", "-r", str(DEMO)], env={"COLUMNS": "200"}).output.split())
    assert "node ip-10-0-1-17 " in scan  # what the scan table calls it
    # WHEN the summary is printed (80 columns), written as Markdown and HTML, and posted to Slack and Teams
    text = CliRunner().invoke(app, ["summary", "--state", str(demo_state)], env={"COLUMNS": "80"}).output
    markdown = invoke("summary", "--state", str(demo_state), "-o", "markdown").stdout
    html = invoke("summary", "--state", str(demo_state), "-o", "html").stdout
    store = SqliteFindingStore(demo_state)
    try:
        records = store.history(since=datetime(2000, 1, 1, tzinfo=UTC), until=datetime.now(tz=UTC) + timedelta(days=1))
    finally:
        store.close()
    until = max(r.last_seen for r in records) + timedelta(minutes=1)
    s = summarize(records, since=until - timedelta(days=1), until=until, team_of=lambda r: r.team or "no owner")
    chats = [json.dumps(slack_summary(s).blocks), json.dumps(teams_summary(s).body)]
    # THEN every surface names it "node ip-10-0-1-17", never the elided DNS name
    top = text.split("Top offenders")[1]
    assert re.search(r"\bnode ip-10-0-1-17\b", top) and "internal" not in top, top
    assert "| node ip-10-0-1-17 |" in markdown and "<td>node ip-10-0-1-17</td>" in html
    for chat in chats:
        assert "node ip-10-0-1-17 (" in chat and "ip-10-0-1-17.ec2.internal" not in chat, chat
