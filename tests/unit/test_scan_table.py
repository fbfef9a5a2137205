"""The scan as people see it, checked by looking at it: the table at 80 and 200 columns (no broken word, the
total last, the total the sum of the rows), details behind -v, filters, sort, top, group-by and short IDs that
explain accepts, colour only where allowed, hostile names drawn as text, units people read, the width of a
piped scan, and confidence/evidence for kinds without a ratio."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.findings import Confidence, Evidence, Finding, Subject, WasteKind
from gpuwaste.models.settings import DeliverySettings, JiraSettings
from gpuwaste.people import elide, kind_label, no_codes, parse_kind, per_gpu_hour, percent
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.jira import adf_document
from gpuwaste.sinks.terminal import findings_table
from gpuwaste.sinks.terminal_tickets import TerminalTicketSink, adf_to_text
from tests.width_checks import overlong, recording_identifiers, split_identifiers

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


def test_total_counts_the_unpriced_findings_among_the_listed_ones() -> None:
    # GIVEN the demo, whose idle findings include one unpriced (no price for its node)
    # WHEN scanned whole, and for idle findings cut to the top 3
    whole = invoke("scan", "-r", str(DEMO), "-q", env={"COLUMNS": "120"}).stdout
    top = invoke("scan", "-r", str(DEMO), "-q", "--kind", "idle", "--top", "3", env={"COLUMNS": "80"}).stdout
    # THEN the total's count is the listed rows, the unpriced one among them, never added on top ("+1")
    rows = _rows(whole)
    unpriced = [r for r in rows if r.rstrip().endswith("unpriced")]
    assert len(unpriced) == 1
    assert f"· {len(rows)} findings ({len(unpriced)} unpriced) ·" in whole and "(+" not in whole
    assert "(top 3 of 7)" in top and "· 7 findings (1 unpriced) ·" in top and "(+" not in top


def test_csv_and_json_carry_the_team_the_table_rolls_up_and_team_filters_on() -> None:
    # GIVEN the demo scanned as a table (its rollup by team), as CSV and as JSON
    table = invoke("scan", "-r", str(DEMO), "-q", env={"COLUMNS": "200"}).stdout
    rows = list(csv.DictReader(io.StringIO(invoke("scan", "-r", str(DEMO), "-o", "csv").stdout)))
    doc = json.loads(invoke("scan", "-r", str(DEMO), "-o", "json").stdout)
    # WHEN the team of each finding is read back from the machine output
    waste = [r for r in rows if r["kind"] != "data_quality"]
    rollup = {m[1]: (int(m[2]), Decimal(m[3].replace(",", ""))) for line in table.splitlines()
              if (m := re.match(r"^(.+?)\s+(\d+)\s+[\d.]+\s+\$([\d,]+\.\d\d)\s+\$[\d,]+$", line))}
    # THEN "team" is the last CSV column, after the existing ones in their order
    assert list(rows[0])[-1] == "team" and list(rows[0])[:3] == ["kind", "idle_mode", "cluster"]
    # AND grouped by it, the findings and USD/day are the table's rollup by team, row for row
    by_team: dict[str, tuple[int, Decimal]] = {}
    for r in waste:
        n, usd = by_team.get(r["team"], (0, Decimal(0)))
        by_team[r["team"]] = (n + 1, usd + Decimal(r["usd_per_day"] or 0))
    assert len(rollup) >= 5 and {t: (n, usd.quantize(Decimal("0.01"))) for t, (n, usd) in by_team.items()} == rollup
    # AND JSON says the same team for each finding
    assert {f["fingerprint"]: f["team"] for f in doc["findings"]} == {r["fingerprint"]: r["team"] for r in rows}
    # AND `--team` with that value selects exactly those findings
    for name in rollup:
        chosen = csv.DictReader(io.StringIO(invoke("scan", "-r", str(DEMO), "-o", "csv", "--team", name).stdout))
        assert {r["fingerprint"] for r in chosen if r["kind"] != "data_quality"} == \
            {r["fingerprint"] for r in waste if r["team"] == name}, name


def test_scan_metadata_is_behind_verbose() -> None:
    # GIVEN the demo
    quiet = invoke("scan", "-r", str(DEMO), env={"COLUMNS": "120"}).stdout
    verbose = invoke("scan", "-r", str(DEMO), "-v", env={"COLUMNS": "120"}).stdout
    # WHEN scanned with and without -v
    # THEN models, signals and no-verdict reasons appear only with -v; the default has a one-line header
    assert "signals present" not in quiet and "models:" not in quiet and "(-v says why)" in quiet
    assert "signals present" in verbose and "models:" in verbose and "pods/nodes, by cause:" in verbose
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
    # AND the error lists the short names --help documents, and says the JSON values are accepted too
    said = " ".join(bad.output.split())
    for short in ("idle", "under-used", "wrong-hw", "cpu-bound", "kv-cache", "serving-idle", "bandwidth"):
        assert re.search(rf"\b{short}\b", said), short
    assert "JSON values are accepted too" in said and "idle_allocation" in said


def test_short_ids_from_the_table_are_accepted_by_explain() -> None:
    # GIVEN the ID of the stalled finding as the scan table shows it
    table = invoke("scan", "-r", str(DEMO), "-q", "--kind", "stalled", env={"COLUMNS": "80"}).stdout
    short = _rows(table)[0].split()[0]
    # WHEN explained by that ID
    result = invoke("explain", short, "-r", str(DEMO))
    # THEN the finding is explained, in people's units (percent, rounded money), without internal codes
    assert result.exit_code == 0, result.output
    assert "kind: stalled" in result.output and f"ID: {short}" in result.output
    assert re.search(r"\$\d+\.\d{2,4}/GPU-h × 1 GPU × 24 h = \$[\d,]+\.\d\d/day", result.output)
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


def test_window_longer_than_the_recording_is_one_clear_error() -> None:
    # GIVEN the demo (80 minutes of telemetry)
    # WHEN scanned with a 3-hour window
    result = invoke("scan", "-r", str(DEMO), "-w", "3h", "-q")
    # THEN one error line saying the longest window that fits, no table of partial-coverage rows
    assert result.exit_code == 2
    assert "longer than the recording holds" in result.output and "--window 80m or less" in result.output
    assert "partial" not in result.output and len(result.output.strip().splitlines()) <= 2


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
    # AND no line of the whole demo is wider than 80 columns (alert and ticket previews included), and no pod
    # name, node name or GPU UUID of the recording is folded across two lines
    assert overlong(result.stdout, 80) == []
    assert split_identifiers(result.stdout, recording_identifiers(DEMO)) == []
    # AND the alert previews name kinds as the table does ("idle", "serving idle"), never by their JSON values
    previews = [line for line in lines if re.match(r"^\[(NEW|WORSE|REMINDER|RESOLVED)\] ", line)]
    assert len(previews) == 21 and "[NEW] inference/rerank-api-0 · serving idle · $65.87/day" in result.stdout
    assert not [line for line in previews if re.search(r"\b[a-z]+_[a-z_]+\b", line)], previews
    # AND a ticket line too long for the terminal keeps the name and moves the reason to an indented line
    start = lines.index(next(line for line in lines if line.startswith("ticket LOCAL-1: ")))
    assert lines[start] == "ticket LOCAL-1: [ESCALATE] inference/llama-70b-vllm · idle · $660.48/day"
    assert lines[start + 1] == "  cost $660.48/day ≥ $100/day"


def test_verbose_scan_at_80_columns_keeps_every_identifier_and_phrase_whole() -> None:
    # GIVEN an 80-column terminal and the demo, whose data-quality text names a GPU UUID and long pod names
    # WHEN scanned with -v
    result = invoke("scan", "-r", str(DEMO), "-v", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    lines = text.splitlines()
    # THEN no line is wider than 80 and no pod, node or GPU UUID of the recording is folded across two lines;
    # the frozen GPU's UUID is printed whole
    assert overlong(text, 80) == []
    assert split_identifiers(text, recording_identifiers(DEMO)) == []
    assert "GPU-e4b819ac-4095-770d-4983-9c6e78ced192" in text
    # AND header lines break only between their " · " parts (then list items), never inside one
    assert "a sample every 30 s (inferred from the data) ·" in lines[lines.index(next(
        line for line in lines if line.startswith("telemetry: ")))]
    assert any(line.strip() == "5-min buckets" or line.startswith("5-min buckets") for line in lines)
    assert any("NVIDIA H100 80GB HBM3×8" in line for line in lines)
    # AND the unowned node capacity is one group called "no owner", as in the daily summary and Slack
    assert any(re.match(r"^no owner\s+4\s", line) for line in lines) and "(nodes: no owner)" not in text


def test_piped_output_takes_the_width_of_the_terminal_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN stdout piped (`gpuwaste scan | less`), no COLUMNS, and stderr on a 97-column terminal (a real pty)
    import fcntl
    import struct
    import termios

    from gpuwaste import cli_support

    leader, follower = os.openpty()
    tty = os.fdopen(os.dup(follower), "w")
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 97, 0, 0))
        monkeypatch.delenv("COLUMNS", raising=False)
        monkeypatch.setattr(sys, "stdout", io.StringIO())
        monkeypatch.setattr(sys, "stderr", tty)
        # WHEN the CLI decides its width
        width = cli_support.stdout_width()
        # THEN it is the terminal's, not a fixed pipe width; with COLUMNS set, COLUMNS wins
        monkeypatch.setenv("COLUMNS", "123")
        assert width == 97 and cli_support.stdout_width() == 123
    finally:
        monkeypatch.undo()
        tty.close()
        os.close(leader)
        os.close(follower)


def test_chat_messages_name_kinds_as_the_table_does(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the demo's findings
    from gpuwaste.sinks import slack_blocks

    # WHEN a chat message (Slack, Teams) names their kind
    # THEN it uses the table's label ("idle", "serving idle"), never the JSON value or its spaced form
    for f in demo_report.findings:
        assert slack_blocks.kind_label(f) == kind_label(f.kind)
    assert {slack_blocks.kind_label(f) for f in demo_report.findings} >= {"idle", "serving idle", "unallocated"}
