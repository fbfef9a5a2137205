"""What people see, checked by looking at it: the scan at 80 and 200 columns (no broken word, the total last),
filters and short IDs, hostile names, the Jira ticket and the HTML summary with their budgets, the ticket caps,
Prometheus API JSON recordings and the CLI's vocabulary."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import DEFAULT_STATE, app
from gpuwaste.fleet.history import demo_history
from gpuwaste.models.findings import Confidence, Cost, Evidence, Finding, Subject, WasteKind
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import MessageRef
from gpuwaste.people import elide, kind_label, no_codes, parse_kind, per_gpu_hour, percent
from gpuwaste.services.summary import summarize, trend
from gpuwaste.services.tickets import TicketService, plan_tickets
from gpuwaste.settings import DeliverySettings, GpuWasteConfig, JiraSettings
from gpuwaste.sinks.jira import adf_document
from gpuwaste.sinks.slack import thread_link
from gpuwaste.sinks.summary_report import render_html, render_json
from gpuwaste.sinks.terminal import findings_table
from gpuwaste.sinks.terminal_tickets import TerminalTicketSink, adf_to_text

DEMO = local.demo_recording()
REPO = Path(__file__).resolve().parents[2]
ID_ROW = re.compile(r"^([0-9a-f]{6,}) ")


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture(scope="module")
def demo_report():  # type: ignore[no-untyped-def]
    """The demo scanned as `gpuwaste scan -r DEMO` does."""
    sources = local.recording_sources(DEMO, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    return local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(at=sources.recording.end_time())


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if ID_ROW.match(line)]


# -- 1. the scan in the terminal -------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 200])
def test_scan_fits_the_width_keeps_words_whole_and_ends_with_the_total(width: int, demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the demo recording and a terminal of WIDTH columns (COLUMNS, stdout not a TTY)
    # WHEN scanned
    result = invoke("scan", "-r", str(DEMO), "-q", env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.rstrip("\n").splitlines()
    # THEN no line is wider than the terminal, and the last line is the total per day and per month
    assert max(len(line) for line in lines) <= width
    assert lines[-1].startswith("Total: $") and "/day" in lines[-1] and "/month" in lines[-1]
    # AND just before it the per-team rollup (GPU-hours, USD/day, USD/month)
    assert any(line.startswith("team ") and "GPU-h" in line and "USD/month" in line for line in lines[-12:])
    # AND one line per waste finding: its ID, its kind label whole, its workload whole or elided in the middle
    rows = _rows(result.stdout)
    waste = [f for f in demo_report.findings if f.kind.is_waste]
    assert len(rows) == len(waste)
    by_id = {row.split()[0]: row for row in rows}
    for f in waste:
        row = next(r for i, r in by_id.items() if f.fingerprint.startswith(i))
        assert kind_label(f.kind) in row
        name = f.subject.workload_name if f.subject.workload_kind not in (None, "Node") else None
        if name and name not in row:  # shortened: one token with "…", its head and tail taken from the name
            (token,) = [w for w in row.split() if "…" in w]
            head, tail = token.split("…")
            full = f"{f.subject.workload_kind}/{name}"
            assert (name.startswith(head) or full.startswith(head)) and name.endswith(tail), (token, name)


def test_scan_total_equals_the_sum_of_the_rows_and_the_rollup(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the demo scan at 200 columns
    result = invoke("scan", "-r", str(DEMO), "-q", env={"COLUMNS": "200"})
    lines = result.stdout.splitlines()
    # WHEN the USD/day cells of the findings, the rollup rows and the total are read back
    def money(text: str) -> Decimal:
        return Decimal(text.replace("$", "").replace(",", ""))
    rows = [money(m.group(1)) for r in _rows(result.stdout) if (m := re.search(r"(\$[\d,]+\.\d\d)( \*)?$", r))]
    start = next(i for i, line in enumerate(lines) if line.startswith("team "))
    rollup = [money(line.split()[-2]) for line in lines[start + 2:-1]]
    total = money(re.search(r"Total: (\$[\d,.]+)/day", lines[-1]).group(1))  # type: ignore[union-attr]
    # THEN they agree with each other and with the findings' own USD/day
    expected = sum((f.usd_per_day or Decimal(0) for f in demo_report.findings if f.kind.is_waste), Decimal(0))
    assert sum(rows) == sum(rollup) == total == expected.quantize(Decimal("0.01"))


def test_scan_metadata_is_behind_verbose() -> None:
    # GIVEN the demo
    quiet = invoke("scan", "-r", str(DEMO), env={"COLUMNS": "120"}).stdout
    verbose = invoke("scan", "-r", str(DEMO), "-v", env={"COLUMNS": "120"}).stdout
    # WHEN scanned with and without -v
    # THEN models, signals and no-verdict reasons appear only with -v; the default has a one-line header
    assert "signals present" not in quiet and "models:" not in quiet and "(-v says why)" in quiet
    assert "signals present" in verbose and "models:" in verbose and "no verdict:" in verbose
    assert quiet.splitlines()[0].startswith("demo · 70 min to 2024-01-01 01:20 UTC")


def test_scan_filters_sort_top_and_group_by() -> None:
    # GIVEN the demo
    # WHEN filtered by kind, team and namespace, cut to the top 3 and grouped by kind
    stalled = invoke("scan", "-r", str(DEMO), "-q", "--kind", "stalled", env={"COLUMNS": "120"}).stdout
    vision = invoke("scan", "-r", str(DEMO), "-q", "--team", "vision", env={"COLUMNS": "120"}).stdout
    search = invoke("scan", "-r", str(DEMO), "-q", "-n", "search", "--kind", "wrong-hw", "-k", "bandwidth",
                    env={"COLUMNS": "120"}).stdout
    top = invoke("scan", "-r", str(DEMO), "-q", "--top", "3", "--group-by", "kind", "--sort", "gpus",
                 env={"COLUMNS": "80"}).stdout
    bad = invoke("scan", "-r", str(DEMO), "-q", "--kind", "lazy")
    # THEN only the matching findings are listed, the total counts them, the rollup groups as asked
    assert len(_rows(stalled)) == 1 and "stalled" in _rows(stalled)[0] and "· 1 finding ·" in stalled
    assert _rows(vision) and all(" vision " in r for r in _rows(vision))
    assert [r for r in _rows(search) if "bandwidth" in r] and not [r for r in _rows(search) if "wrong hw" in r]
    assert len(_rows(top)) == 3 and "(top 3 of 21)" in top and "Waste by kind" in top and "· 21 findings" in top
    gpus = [Decimal(re.search(r"\s(\d+(?:\.\d+)?)\s+(?:\$|unpriced)", r).group(1)) for r in _rows(top)]  # type: ignore[union-attr]
    assert gpus == sorted(gpus, reverse=True) and gpus[0] == 4
    assert bad.exit_code == 2 and "not a kind" in bad.output


def test_short_ids_from_the_table_are_accepted_by_explain() -> None:
    # GIVEN the ID of the stalled finding as the scan table shows it
    table = invoke("scan", "-r", str(DEMO), "-q", "--kind", "stalled", env={"COLUMNS": "80"}).stdout
    short = _rows(table)[0].split()[0]
    # WHEN explained by that ID
    result = invoke("explain", short, "-r", str(DEMO))
    # THEN the finding is explained, in people's units (percent, rounded money), without internal codes
    assert result.exit_code == 0, result.output
    assert "kind: stalled" in result.output and f"ID: {short}" in result.output
    assert re.search(r"\$\d+\.\d\d/GPU-h × 1 GPU × 24 h = \$[\d,]+\.\d\d/day", result.output)
    assert not re.search(r"\bB\d\d\b", result.output) and "../shared" not in result.output


def test_severity_colour_respects_no_color() -> None:
    # GIVEN a terminal that forces colour (a fresh process: rich reads NO_COLOR and FORCE_COLOR at start-up)
    def scan(**env: str) -> str:
        full = {**os.environ, "PYTHONPATH": f"{REPO / 'shared'}{os.pathsep}{REPO}", "COLUMNS": "100", "TERM": "xterm-256color",
                "FORCE_COLOR": "1", **env}
        full.pop("NO_COLOR", None) if "NO_COLOR" not in env else None
        code = "import sys; from gpuwaste.cli import run; sys.argv[0] = 'gpuwaste'; run()"
        return subprocess.run([sys.executable, "-c", code, "scan", "-r", str(DEMO), "-q"], env=full, capture_output=True,
                              text=True, timeout=120, check=True).stdout
    # WHEN scanned with and without NO_COLOR
    coloured, plain = scan(), scan(NO_COLOR="1")
    # THEN the $660.48/day finding is red only without NO_COLOR, and the text is the same
    assert re.search(r"\x1b\[[0-9;]*31m\s*\$660\.48", coloured)
    assert not re.search(r"\x1b\[[0-9;]*3[0-7]m", plain) and "$660.48" in plain


def test_hostile_names_are_drawn_as_text(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a finding whose workload name carries rich markup, an escape sequence and a newline
    f = next(f for f in demo_report.findings if f.kind is WasteKind.STALLED)
    evil = f.model_copy(update={"subject": f.subject.model_copy(update={"workload_name": "[bold red]x[/]\x1b[2J\nrm"})})
    console = Console(width=120, file=io.StringIO(), color_system=None)
    # WHEN drawn in the findings table
    console.print(findings_table([evil], width=120))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    # THEN the markup is shown literally, the control characters are gone, the row stays one line
    assert "[bold red]x[/]" in text and "\x1b" not in text and len(_rows(text)) == 1


def test_people_units_round_money_and_use_percent() -> None:
    # GIVEN exact values as the pipeline keeps them
    # WHEN formatted for people
    # THEN money has cents, ratios are percent, names are elided in the middle, codes are dropped
    assert per_gpu_hour(Decimal("2.74470525")) == "$2.74/GPU-h"
    assert percent(0.05) == "5 %" and percent(0.002) == "0.2 %"
    assert elide("llama-70b-instruct-vllm", 12) == "llama-…-vllm" and len(elide("x" * 50, 10)) == 10
    assert no_codes("pre-allocated by vLLM: not demand (B16)") == "pre-allocated by vLLM: not demand"
    assert parse_kind("wrong-hw") is WasteKind.WRONG_HARDWARE and parse_kind("idle_allocation") is WasteKind.IDLE


# -- 6. one vocabulary ----------------------------------------------------------------------------------------


def test_window_longer_than_the_recording_is_one_clear_error() -> None:
    # GIVEN the demo (80 minutes of telemetry)
    # WHEN scanned with a 3-hour window
    result = invoke("scan", "-r", str(DEMO), "-w", "3h", "-q")
    # THEN one error line saying the longest window that fits, no table of partial-coverage rows
    assert result.exit_code == 2
    assert "longer than the recording holds" in result.output and "--window 80m or less" in result.output
    assert "partial" not in result.output and len(result.output.strip().splitlines()) <= 2


def test_summary_and_run_share_the_state_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a working directory where `run` wrote its default state file
    monkeypatch.chdir(tmp_path)
    ran = invoke("run", "-r", str(DEMO), "-q", "--no-summary", "--no-tickets")
    assert ran.exit_code == 0, ran.output
    # WHEN `summary` runs without --state
    result = invoke("summary", "-o", "json")
    # THEN it reads the same file
    assert (tmp_path / DEFAULT_STATE).exists()
    assert result.exit_code == 0, result.output and json.loads(result.stdout)["open_findings"] == 21


def test_doctor_help_documents_exit_codes_and_json_alias() -> None:
    # GIVEN doctor's help
    text = " ".join(invoke("doctor", "--help", env={"COLUMNS": "200"}).output.replace("│", " ").split())
    # THEN the exit codes are documented and -o is the output option (--json stays as a hidden alias)
    assert "0 ok; 1 a needed signal was never exported" in text and "4 needed signals exist but are stale" in text
    assert "--output" in text and "--json" not in text


def _api_answers(kind: str) -> list[dict]:  # type: ignore[type-arg]
    """The demo's telemetry as the Prometheus HTTP API would answer it (vector: the last sample of each series)."""
    import gzip

    from gpuwaste.sources.exposition import parse_exposition

    # every sample of the demo (RecordingTelemetrySource.parsed() is an index without samples: it streams)
    parsed = parse_exposition(gzip.decompress((DEMO / "telemetry.om.gz").read_bytes()), fmt="openmetrics")
    answers = []
    for s in parsed.series.values():
        metric = {"__name__": s.name, **s.labels}
        if kind == "matrix":
            item = {"metric": metric, "values": [[t / 1000, repr(v)] for t, v in zip(s.timestamps_ms, s.values, strict=True)]}
        else:
            item = {"metric": metric, "value": [s.timestamps_ms[-1] / 1000, repr(s.values[-1])]}
        answers.append(item)
    return [{"status": "success", "data": {"resultType": kind, "result": answers}}]


def test_prometheus_api_json_matrix_scans_like_the_recording(tmp_path: Path) -> None:
    # GIVEN the demo's series saved as a /api/v1/query_range answer, with its cluster objects
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(_api_answers("matrix")[0]))
    # WHEN scanned as a recording (the window and time given, as a bare answer carries no metadata)
    result = invoke("scan", "-r", str(path), "--cluster-json", str(DEMO / "cluster.json"), "--at", "2024-01-01T01:20:00Z",
                    "-w", "70m", "--cluster", "demo", "-o", "json", "-q")
    # THEN the same findings as the recording scanned with the same (default) settings
    assert result.exit_code == 0, result.output
    sources = local.recording_sources(DEMO, GpuWasteConfig())
    report = local.scan_service(sources, GpuWasteConfig(), window_s=4200).scan(at=datetime(2024, 1, 1, 1, 20, tzinfo=UTC))
    got = {(f["kind"], f["fingerprint"], (f["cost"] or {}).get("usd_per_day")) for f in json.loads(result.stdout)["findings"]}
    want = {(f.kind.value, f.fingerprint, str(f.cost.usd_per_day) if f.cost and f.cost.usd_per_day is not None else None)
            for f in report.findings}
    assert got == want and len(got) > 20


def test_prometheus_api_json_vector_is_one_instant_and_errors_are_clear(tmp_path: Path) -> None:
    # GIVEN a /api/v1/query vector answer, an error answer and a scalar answer
    vector, error, scalar = tmp_path / "v.json", tmp_path / "e.json", tmp_path / "s.json"
    vector.write_text(json.dumps(_api_answers("vector")))
    error.write_text(json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}))
    scalar.write_text(json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}))
    # WHEN scanned
    ok = invoke("scan", "-r", str(vector), "--cluster-json", str(DEMO / "cluster.json"), "-q", env={"COLUMNS": "120"})
    bad = [invoke("scan", "-r", str(p), "-q") for p in (error, scalar)]
    # THEN the vector is read as one sample per series (no sustained-use verdict); the others say what is wrong
    assert ok.exit_code == 0, ok.output and "ONE sample per series" in ok.stdout
    assert bad[0].exit_code == 2 and "error answer: bad_data: parse error" in bad[0].output
    assert bad[1].exit_code == 2 and "resultType 'scalar'" in bad[1].output


# -- 3. Jira ---------------------------------------------------------------------------------------------------


def _escalate(f: Finding, usd: str | None = None) -> AlertMessage:
    if usd is not None:
        f = f.with_cost(Cost(priced=True, usd_per_gpu_hour=Decimal(usd) / 24, wasted_gpu_share=Decimal(1),
                             usd_per_day=Decimal(usd), formula="x"))
    return AlertMessage(action=AlertAction.ESCALATE, fingerprint=f.fingerprint, finding=f,
                        first_seen=f.observed_at - timedelta(days=2), cumulative_usd="1234.5678")


def test_jira_ticket_says_what_to_do_and_when_it_is_done(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the demo's costliest finding (an idle Deployment) and the local ticket printer
    f = max((f for f in demo_report.findings if f.usd_per_day), key=lambda f: f.usd_per_day)
    sink = TerminalTicketSink(Console(file=io.StringIO(), width=100, color_system=None))
    settings = DeliverySettings(jira=JiraSettings(default_project="OPS"))
    settings = settings.model_copy(update={"slack": settings.slack.model_copy(update={"workspace_url": "https://acme.slack.com"})})
    service = TicketService(sink=sink, store=None, settings=settings, now=lambda: f.observed_at,
                            message_link=thread_link(settings.slack.workspace_url))
    # WHEN its ticket is drafted (Slack thread known)
    draft = service.draft(f, f.fingerprint, first_seen=f.observed_at - timedelta(days=2), cumulative_usd="1320.96",
                          messages=(MessageRef(sink="slack", destination="C0123", message_id="1704072000.000100"),))
    doc = adf_document(draft.paragraphs, draft.facts, draft.links, draft.sections)
    text = adf_to_text(doc)
    # THEN the summary carries the money, the priority comes from USD/day, and the body has every heading in order
    assert draft.summary.startswith("$660.48/day GPU waste: idle, inference/llama-70b-vllm") and len(draft.summary) <= 120
    assert draft.priority == "Highest"
    headings = [n["content"][0]["text"] for n in doc["content"] if n["type"] == "heading"]
    assert headings == ["What", "Evidence", "Cost", "How to fix", "Done when", "Snooze", "Slack thread"]
    # AND evidence is in people's units, the fix is a concrete command, the thread is linked
    assert "SM activity: avg 0.2 %" in text and "p95 None" not in text and "0.002" not in text
    assert "$ kubectl -n inference scale deployment/llama-70b-vllm --replicas=0" in text
    assert "open since 2023-12-30 01:20 UTC (2d 0h); $1,320.96 wasted so far" in text
    assert "https://acme.slack.com/archives/C0123/p1704072000000100" in text
    # AND it stays readable: at most 40 lines and 2,500 characters, no line of prose over 200 characters
    assert len(text.splitlines()) <= 40 and len(text) <= 2500
    assert max(len(line) for line in text.splitlines()) <= 200


def test_ticket_caps_quiet_start_and_overflow_per_team(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN 60 escalations over 6 teams (a large first run)
    base = next(f for f in demo_report.findings if f.kind is WasteKind.IDLE)
    alerts = []
    for n in range(60):
        team = f"team-{n % 6}"
        s = base.subject.model_copy(update={"workload_name": f"w{n}", "namespace": team})
        alerts.append(_escalate(base.model_copy(update={"subject": s}), usd=str(100 + n)))
    jira = JiraSettings(default_project="OPS")
    def team(f: Finding) -> str:
        return f.subject.namespace or "-"
    now = datetime(2024, 1, 10, tzinfo=UTC)
    # WHEN planned on the first run (quiet start), and after the quiet start
    first = plan_tickets(alerts, team_of=team, jira=jira, started_at=None, now=now)
    later = plan_tickets(alerts, team_of=team, jira=jira, started_at=now - timedelta(days=30), now=now)
    # THEN the first run opens 3 tickets in all (the costliest, one per team), the rest waits for later runs
    assert first.quiet and len(first.open) + len(first.folded) <= 3 and len(first.open) == 3
    assert len({team(a.finding) for a in first.open}) == 3 and len(first.deferred) == 57
    assert [a.finding.usd_per_day for a in first.open] == [Decimal(159), Decimal(158), Decimal(157)]
    # AND later runs open at most 10 tickets, at most 3 per team, the overflow folded into one ticket per team
    assert not later.quiet and len(later.open) + len(later.folded) <= 10
    per_team: dict[str, int] = {}
    for a in later.open:
        per_team[team(a.finding)] = per_team.get(team(a.finding), 0) + 1
    assert max(per_team.values()) <= 3 and all(len(v) >= 1 for v in later.folded.values())
    assert len(later.open) + sum(len(v) for v in later.folded.values()) + len(later.deferred) == 60


def test_overflow_ticket_is_one_per_team_with_the_money(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN three findings of one team over its cap
    base = next(f for f in demo_report.findings if f.kind is WasteKind.IDLE)
    alerts = [_escalate(base.model_copy(update={"subject": base.subject.model_copy(update={"workload_name": f"w{n}"})}),
                        usd="50") for n in range(3)]
    sink = TerminalTicketSink(Console(file=io.StringIO(), width=100, color_system=None))
    service = TicketService(sink=sink, store=None, settings=DeliverySettings(jira=JiraSettings(default_project="OPS")),
                            now=lambda: base.observed_at)
    # WHEN the overflow ticket is opened twice (two runs)
    first = service.open_overflow("ml-serving", alerts)
    second = service.open_overflow("ml-serving", alerts[:1])
    # THEN one ticket, "$150.00/day" in its summary, the second run comments on it
    assert first == second and len(sink.created) == 1
    draft = sink.created[first]
    assert draft.summary == "$150.00/day GPU waste: 3 more findings of team ml-serving" and draft.priority == "High"
    assert sink.comments and sink.comments[-1][0] == first


# -- 4. the summary as a trend report ---------------------------------------------------------------------------


def _demo_summary(end: datetime):  # type: ignore[no-untyped-def]
    records = demo_history(end=end)
    summary = summarize(records, since=end - timedelta(days=1), until=end, team_of=lambda r: r.team or "-")
    return summary.model_copy(update={"trend": trend(records, until=end, team_of=lambda r: r.team or "-")}), records


def test_trend_has_thirty_days_of_waste_per_team_and_realised_savings() -> None:
    # GIVEN the demo's 30 days of history
    end = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)
    summary, records = _demo_summary(end)
    # WHEN the trend is built
    days = summary.trend
    # THEN 30 UTC days, oldest first, the last one today; waste per team adds up to each record's money
    assert len(days) == 30 and days[-1].day == datetime(2024, 1, 1, tzinfo=UTC) and days[0].day < days[-1].day
    total = sum((d.wasted_usd for d in days), Decimal(0))
    from gpuwaste.services.summary import waste_in
    expected = sum((waste_in(r, days[0].day, end) for r in records), Decimal(0))
    assert total == expected and total > 0
    assert len({t for d in days for t, _ in d.by_team}) >= 4
    # AND savings are realised after resolutions, growing as more findings resolve
    resolved = [r for r in records if r.state is FindingState.RESOLVED]
    assert resolved and sum((d.saved_usd for d in days), Decimal(0)) > 0


def test_html_summary_is_self_contained_with_two_dated_charts_and_budgets() -> None:
    # GIVEN the demo history summarised
    summary, _ = _demo_summary(datetime(2024, 1, 1, 1, 20, tzinfo=UTC))
    # WHEN rendered as HTML
    page = render_html(summary)
    # THEN one file: inline styles, two inline SVG charts (7 and 30 days), no external resource or script
    assert page.count("<svg") == 2 and "<style>" in page
    assert not re.search(r"""(src|href)=['"]?https?:""", page) and "<script" not in page and "<link" not in page
    assert "last 7 days" in page and "last 30 days" in page
    # AND the charts have a time axis (dates) and values over the bars; top offenders say how long they are open
    assert "12-26" in page and "01-01" in page and "day (UTC)" in page
    assert re.search(r">\$[\d,]+</text>", page)
    assert "open for" in page and re.search(r"<td>\d+d \d+h</td>", page)
    # AND it stays small: under 100 kB, and no chart wider than 800 px
    assert len(page.encode()) < 100_000
    assert all(int(w) <= 800 for w in re.findall(r'<svg[^>]* width="(\d+)"', page))


def test_summary_json_money_is_rounded_to_the_cent() -> None:
    # GIVEN the demo history summarised
    summary, _ = _demo_summary(datetime(2024, 1, 1, 1, 20, tzinfo=UTC))
    # WHEN written as JSON
    doc = render_json(summary)
    # THEN no amount has more than two decimals, and the trend is there
    assert not re.search(r'"-?\d+\.\d{3,}"', doc)
    parsed = json.loads(doc)
    assert re.fullmatch(r"\d+\.\d\d", parsed["wasted_usd"]) and len(parsed["trend"]) == 30


def test_demo_summary_shows_a_multi_day_trend(tmp_path: Path) -> None:
    # GIVEN the demo, keeping its state
    state = tmp_path / "demo.db"
    ran = invoke("demo", "-q", "--state", str(state))
    assert ran.exit_code == 0, ran.output
    # WHEN its summary is written as HTML
    out = tmp_path / "s.html"
    result = invoke("summary", "--state", str(state), "-o", "html", "--out", str(out))
    # THEN the report shows resolutions and savings from the generated history, and the demo's findings
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert page.count("<svg") == 2 and "realised savings" in page
    assert "llama-70b-vllm" in page and "resolved" in page


def test_slack_summary_header_date_is_the_report_date() -> None:
    # GIVEN a summary of the day ending at midnight
    from gpuwaste.sinks.slack_blocks import render_summary
    summary, _ = _demo_summary(datetime(2024, 1, 2, tzinfo=UTC))
    # WHEN rendered for Slack and as HTML
    header = render_summary(summary).blocks[0]["text"]["text"]
    # THEN both carry the period's last day
    assert header == "GPU waste summary 2024-01-01" and "<title>GPU waste summary 2024-01-01</title>" in render_html(summary)


def test_confidence_and_evidence_for_kinds_without_a_ratio() -> None:
    # GIVEN an orphaned finding with only a pod-age evidence (seconds)
    f = Finding(kind=WasteKind.ORPHANED, detector="orphaned", confidence=Confidence.MEDIUM,
                subject=Subject(cluster="c", namespace="ml", workload_kind="Pod", workload_name="p", pod="p"),
                title="t", recommendation="delete it (B21)", observed_at=datetime(2024, 1, 1, tzinfo=UTC), window_s=3600,
                evidence=(Evidence(signal="pod_age_s", unit="s", window_s=3600, avg=300000.0),))
    service = TicketService(sink=TerminalTicketSink(Console(file=io.StringIO())), store=None,
                            settings=DeliverySettings(jira=JiraSettings(default_project="OPS")), now=lambda: f.observed_at)
    # WHEN its ticket is drafted
    draft = service.draft(f, f.fingerprint, first_seen=f.observed_at, cumulative_usd="0")
    text = adf_to_text(adf_document(draft.paragraphs, draft.facts, draft.links, draft.sections))
    # THEN unpriced is said plainly, the fix deletes the bare pod, and no internal code reaches the reader
    assert draft.summary.startswith("unpriced GPU waste: orphaned, ml/p") and draft.priority == "Medium"
    assert "$ kubectl -n ml delete pod/p" in text and "B21" not in text


def test_demo_at_80_columns_ends_with_the_rollup_and_the_total() -> None:
    # GIVEN an 80-column terminal
    # WHEN the whole demo runs (scan, Slack previews, tickets, summary, ground truth)
    result = invoke("demo", env={"COLUMNS": "80"})
    lines = result.stdout.rstrip("\n").splitlines()
    # THEN it ends as `scan` does: the per-team rollup, then the total; the summary's tables fit the width
    assert result.exit_code == 0, result.output
    assert lines[-1].startswith("Total: $") and "/month" in lines[-1]
    assert any(line.startswith("team ") and "USD/month" in line for line in lines[-10:])
    summary = result.stdout[result.stdout.index("GPU waste summary"):result.stdout.index("ground truth")]
    assert max(len(line) for line in summary.splitlines()) <= 80
    offenders = summary[summary.index("Top offenders"):].splitlines()[3:]
    assert offenders and all(re.match(r"^\s*\d+ ", line) for line in offenders if line.strip())


def test_piped_output_takes_the_width_of_the_terminal_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN stdout piped (`gpuwaste scan | less`), no COLUMNS, and stderr on a 97-column terminal (a real pty)
    import fcntl
    import struct
    import termios

    from gpuwaste import cli

    leader, follower = os.openpty()
    tty = os.fdopen(os.dup(follower), "w")
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 97, 0, 0))
        monkeypatch.delenv("COLUMNS", raising=False)
        monkeypatch.setattr(sys, "stdout", io.StringIO())
        monkeypatch.setattr(sys, "stderr", tty)
        # WHEN the CLI decides its width
        width = cli._stdout_width()
        # THEN it is the terminal's, not a fixed pipe width; with COLUMNS set, COLUMNS wins
        monkeypatch.setenv("COLUMNS", "123")
        assert width == 97 and cli._stdout_width() == 123
    finally:
        monkeypatch.undo()
        tty.close()
        os.close(leader)
        os.close(follower)
