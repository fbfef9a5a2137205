"""The command line with a new user's mistakes: one `error:` line that says what to do (exit 2, or 3 when a
source cannot be reached), never a traceback; and the output fixes a first run showed (tables, CSV, summary)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.services.summary import summarize
from gpuwaste.sinks.summary_report import render_markdown
from gpuwaste.sinks.terminal import findings_table, to_csv
from gpuwaste.store.sqlite import SqliteFindingStore

DEMO = local.demo_recording()
REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "data" / "real" / "traces" / "alibaba-gentd26"


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env)


def assert_user_error(result, *needles: str, code: int = 2) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "error:" in result.output, result.output
    for needle in needles:
        assert needle in result.output, result.output


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """A writable copy of the demo recording."""
    target = tmp_path / "demo"
    shutil.copytree(DEMO, target)
    return target


# -- 1. user mistakes: one line, exit 2 -------------------------------------------------------------------


def test_cli_scan_bad_prometheus_url_says_http_or_https() -> None:
    # GIVEN a Prometheus "URL" without a scheme
    # WHEN scanned
    result = invoke("scan", "--prometheus", "not-a-url")
    # THEN exit 2 with what a URL must look like, not a pydantic ValidationError
    assert_user_error(result, "http:// or https://")
    assert "ValidationError" not in result.output


def test_cli_scan_pod_label_is_a_choice_listing_the_allowed_values() -> None:
    # GIVEN an unknown --pod-label
    # WHEN scanned
    result = invoke("scan", "--recording", str(DEMO), "--pod-label", "bogus")
    # THEN exit 2 naming the allowed values
    assert result.exit_code == 2, result.output
    assert "exported_pod" in result.output and "Traceback" not in result.output


def test_cli_replay_sliding_zero_is_rejected(tmp_path: Path) -> None:
    # GIVEN --sliding 0m
    # WHEN replayed
    result = invoke("replay", "alibaba", "--trace-dir", str(tmp_path), "--sliding", "0m")
    # THEN exit 2 with the 10-minute rule
    assert_user_error(result, "--sliding 0m", "10-minute averages")


def test_cli_replay_output_is_a_choice_of_table_or_json(tmp_path: Path) -> None:
    # GIVEN -o csv (the replay has no CSV)
    # WHEN replayed
    result = invoke("replay", "alibaba", "--trace-dir", str(tmp_path), "-o", "csv")
    # THEN exit 2 listing what it supports
    assert result.exit_code == 2 and "'table'" in result.output and "'json'" in result.output, result.output


def test_cli_generate_fleet_rejects_zero_nodes(tmp_path: Path) -> None:
    # GIVEN --nodes 0
    # WHEN a fleet is generated
    result = invoke("generate-fleet", str(tmp_path / "f"), "--nodes", "0")
    # THEN exit 2, nothing written
    assert_user_error(result, "--nodes 0", "1 or more")
    assert not (tmp_path / "f").exists()


def test_cli_generate_fleet_layout_is_a_choice(tmp_path: Path) -> None:
    # GIVEN an unknown layout
    # WHEN a fleet is generated
    result = invoke("generate-fleet", str(tmp_path / "f"), "--layout", "foo")
    # THEN exit 2 listing demo, random and scorecard
    assert result.exit_code == 2 and "scorecard" in result.output, result.output


def test_cli_generate_fleet_into_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    # GIVEN a path that is a file
    target = tmp_path / "passwd"
    target.write_text("x")
    # WHEN a fleet is generated there
    result = invoke("generate-fleet", str(target))
    # THEN exit 2, not a FileExistsError traceback
    assert_user_error(result, "not a directory")


def test_cli_generate_fleet_into_non_empty_dir_needs_force(tmp_path: Path) -> None:
    # GIVEN a non-empty directory
    (tmp_path / "keep.txt").write_text("mine")
    # WHEN a fleet is generated there without and then with --force
    refused = invoke("generate-fleet", str(tmp_path), "--layout", "demo")
    forced = invoke("generate-fleet", str(tmp_path), "--layout", "demo", "--force")
    # THEN the first is refused, the second writes the recording
    assert_user_error(refused, "--force")
    assert forced.exit_code == 0, forced.output
    assert (tmp_path / "truth.json").exists()


def test_cli_os_error_at_the_top_of_a_command_is_one_error_line(tmp_path: Path) -> None:
    # GIVEN a state file and an output path in a directory that does not exist
    state = tmp_path / "state.db"
    assert invoke("run", "--recording", str(DEMO), "--state", str(state), "-q", "--no-summary").exit_code == 0
    # WHEN the summary is written there (OSError raised inside the command)
    result = invoke("summary", "--state", str(state), "--format", "markdown", "--out", str(tmp_path / "no" / "x.md"))
    # THEN one error line with the path, exit 2
    assert_user_error(result, "x.md", "No such file or directory")


# -- 2. windows ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", ["0m", "5m"])
def test_cli_scan_window_under_ten_minutes_is_rejected(window: str) -> None:
    # GIVEN a window shorter than one 10-minute average
    # WHEN scanned
    result = invoke("scan", "--recording", str(DEMO), "--window", window)
    # THEN exit 2 with the rule and what to pass
    assert_user_error(result, "the detectors' rules use 10-minute averages; use --window 10m or more")


def test_cli_run_interval_zero_and_at_outside_recording_are_rejected(tmp_path: Path) -> None:
    # GIVEN run with --interval 0m, and run with an --at before the recording
    # WHEN run
    zero = invoke("run", "--recording", str(DEMO), "--state", str(tmp_path / "s.db"), "--scans", "2", "--interval", "0m")
    early = invoke("run", "--recording", str(DEMO), "--state", str(tmp_path / "s.db"), "--at", "2001-01-01T00:00:00Z")
    # THEN both exit 2 saying what to pass
    assert_user_error(zero, "--interval 0m", "longer than zero")
    assert_user_error(early, "outside the recording")


def test_cli_run_window_zero_is_rejected(tmp_path: Path) -> None:
    # GIVEN --window 0m on run
    # WHEN run
    result = invoke("run", "--recording", str(DEMO), "--state", str(tmp_path / "s.db"), "--window", "0m")
    # THEN exit 2 (not silently the default window)
    assert_user_error(result, "10-minute averages")


def test_cli_replay_window_longer_than_trace_warns() -> None:
    # GIVEN the real Alibaba trace (22.8 h)
    if not (TRACE / "pod_gpu_duty_cycle_anon.tar.gz").exists():
        pytest.skip(f"{TRACE} is absent: the real trace is not in this checkout")
    # WHEN replayed with a 100-hour window and an unpriced instance type
    result = invoke("replay", "alibaba", "--trace-dir", str(TRACE), "--window", "100h", "--instance-type", "foo.bar")
    # THEN a warning says the window is longer than the trace, and nothing is shown as $0.00
    assert result.exit_code == 0, result.output
    assert "longer than the trace" in result.output
    assert "unpriced" in result.output and "$0.00" not in result.output


# -- 3. --at outside a recording ---------------------------------------------------------------------------


@pytest.mark.parametrize("at", ["2001-01-01T00:00:00Z", "2024-01-01T02:00:00Z"])
def test_cli_scan_at_outside_the_recording_shows_its_range(at: str) -> None:
    # GIVEN an --at long before the demo recording, and one 40 minutes after its last sample
    # WHEN scanned
    result = invoke("scan", "--recording", str(DEMO), "--at", at, "-q")
    # THEN exit 2 with the recording's time range
    assert_user_error(result, "outside the recording", "2024-01-01T01:20:00Z")


def test_cli_scan_at_inside_the_recording_runs() -> None:
    # GIVEN an --at 2 minutes after the last sample (inside the slack)
    # WHEN scanned
    result = invoke("scan", "--recording", str(DEMO), "--at", "2024-01-01T01:22:00Z", "-q")
    # THEN it scans
    assert result.exit_code == 0, result.output


# -- 4. empty, non-DCGM and bare scrapes ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "foo_bar 1\n"])
def test_cli_scan_file_without_dcgm_series_says_so(tmp_path: Path, text: str) -> None:
    # GIVEN an empty file, and one with no DCGM series
    path = tmp_path / "metrics.prom"
    path.write_text(text)
    # WHEN scanned
    result = invoke("scan", "--recording", str(path), "-q")
    # THEN exit 2 asking whether it is a dcgm-exporter scrape
    assert_user_error(result, "no DCGM series found in", "dcgm-exporter scrape")


def test_cli_scan_bare_scrape_is_undated_and_names_the_missing_model_label(tmp_path: Path) -> None:
    # GIVEN a bare scrape: no timestamps, no modelName label
    path = tmp_path / "scrape.prom"
    path.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5\n')
    # WHEN scanned (not quiet: the no-verdict reasons are printed)
    result = invoke("scan", "--recording", str(path), "-v", env={"COLUMNS": "200"})
    # THEN the header says it is undated and where its time came from; no --window 7d hint; the model is explained (-v)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps long lines
    assert "undated scrape (no timestamps)" in text
    assert "file modification time; pass --at to set it" in text
    assert "one scrape dated" not in text and "--window 7d" not in text
    assert "unknown (no modelName label)×1" in text


# -- 5. clusters, kubeconfig, metadata, formats -------------------------------------------------------------


def test_cli_scan_cluster_not_in_config_lists_the_configured_names(tmp_path: Path) -> None:
    # GIVEN a config with cluster "prod"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text('clusters:\n- name: prod\n  prometheus: {url: "http://x:9090"}\n')
    # WHEN a recording is scanned as cluster "nope"
    result = invoke("scan", "--config", str(cfg), "--cluster", "nope", "--recording", str(DEMO))
    # THEN exit 2 listing the configured names
    assert_user_error(result, "nope", "configured: prod")


def test_cli_scan_cluster_json_must_exist(tmp_path: Path) -> None:
    # GIVEN --cluster-json naming no file, with a live Prometheus
    # WHEN scanned
    result = invoke("scan", "--cluster-json", str(tmp_path / "c.json"), "--prometheus", "http://127.0.0.1:1")
    # THEN exit 2 naming the file, before anything is fetched
    assert_user_error(result, "--cluster-json", "c.json", "no such file")


@pytest.mark.loopback
def test_cli_scan_cluster_json_with_a_live_prometheus_needs_no_kubeconfig(tmp_path: Path) -> None:
    # GIVEN a cluster file and a Prometheus URL nothing listens on, and no kubeconfig at all
    cluster = tmp_path / "c.json"
    cluster.write_text((DEMO / "cluster.json").read_text())
    # WHEN scanned live with --cluster-json
    result = invoke("scan", "--cluster-json", str(cluster), "--prometheus", "http://127.0.0.1:1", "-q",
                    env={"HOME": str(tmp_path)})
    # THEN it gets as far as Prometheus (exit 3: unreachable), never asking for a kubeconfig
    assert result.exit_code == 3, result.output
    assert "kubeconfig" not in result.output.lower()


def test_cli_scan_invalid_kubeconfig_says_what_to_do(tmp_path: Path) -> None:
    # GIVEN a kubeconfig that is not one
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("just text\n")
    # WHEN scanned live
    result = invoke("scan", "--prometheus", "http://127.0.0.1:1", "--kubeconfig", str(kubeconfig))
    # THEN exit 2 with the ways out, the Prometheus-only scan (kube-state-metrics) among them
    assert_user_error(result, "--kubeconfig", "--context", "--recording", "kube-state-metrics")


@pytest.mark.loopback
def test_cli_scan_unreachable_kubernetes_api_exits_3_without_retry_warnings(tmp_path: Path) -> None:
    # GIVEN a kubeconfig pointing at a closed port
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
        "contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n"
    )
    # WHEN scanned live
    result = invoke("scan", "-q", "--prometheus", "http://127.0.0.1:1", "--kubeconfig", str(kubeconfig))
    # THEN exit 3 (like Prometheus), and urllib3's retry warnings are kept out
    assert_user_error(result, "unreachable", code=3)
    assert logging.getLogger("urllib3").level == logging.ERROR


def test_cli_scan_bad_recording_json_has_no_pydantic_url(demo_copy: Path) -> None:
    # GIVEN a recording.json with wrong types
    (demo_copy / "recording.json").write_text('{"cluster": 5, "window_s": -1}')
    # WHEN scanned
    result = invoke("scan", "--recording", str(demo_copy))
    # THEN exit 2 naming the fields, without the pydantic help URL
    assert_user_error(result, "invalid recording metadata", "window_s")
    assert "errors.pydantic.dev" not in result.output


def test_cli_scan_format_mismatch_names_the_cli_flag(tmp_path: Path) -> None:
    # GIVEN an OpenMetrics file (second timestamps) read as text
    path = tmp_path / "t.om"
    path.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5 1704067200\n# EOF\n')
    # WHEN scanned with --input-format text, and with its old name --format text
    result = invoke("scan", "--recording", str(path), "--input-format", "text", "-q")
    old = invoke("scan", "--recording", str(path), "--format", "text", "-q")
    # THEN the message says which flag to pass, by the name scan documents; the old name still works
    assert_user_error(result, "--input-format openmetrics")
    assert old.output == result.output


# -- 7. tables, make help ------------------------------------------------------------------------------------


def _demo_findings():  # type: ignore[no-untyped-def]
    from gpuwaste.config import GpuWasteConfig

    cfg = GpuWasteConfig()
    sources = local.recording_sources(DEMO, cfg)
    assert sources.recording is not None
    report = local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(at=sources.recording.end_time())
    return report.findings


def _render(table, width: int) -> str:  # type: ignore[no-untyped-def]
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_terminal_table_narrow_moves_evidence_to_wide_and_says_so() -> None:
    # GIVEN the demo findings
    findings = _demo_findings()
    # WHEN drawn at 100 columns, and at 100 with wide
    narrow = _render(findings_table(findings, width=100), 100)
    wide = _render(findings_table(findings, width=100, wide=True), 100)
    # THEN the narrow table has no evidence column and says --wide shows it; the wide one has evidence and
    # confidence; no line of the narrow table is wider than 100
    header = next(line for line in narrow.splitlines() if line.startswith("ID"))
    assert "evidence" not in header and "evidence: --wide" in narrow
    assert "evidence" in wide and "conf." in wide
    assert max(len(line) for line in narrow.splitlines()) <= 100


def test_terminal_table_keeps_workload_names_whole_and_shortens_nodes() -> None:
    # GIVEN the demo findings
    findings = _demo_findings()
    # WHEN drawn at 160 columns
    text = _render(findings_table(findings, width=160), 160)
    # THEN workloads are whole (Kind/name at this width), one line per finding, node names lose .ec2.internal
    assert "CronJob/nightly-embed" in text and "Deployment/llama-70b-vllm" in text
    assert "ip-10-0-2-31 " in text and "ip-10-0-2-31.ec2.internal" not in text
    assert "node names without .ec2.internal" in text
    assert max(len(line) for line in text.splitlines()) <= 160
    rows = [line for line in text.splitlines() if re.match(r"^[0-9a-f]{6,} ", line)]
    assert len(rows) == len([f for f in findings if f.kind.is_waste])


def test_cli_scan_uses_columns_when_stdout_is_not_a_tty() -> None:
    # GIVEN COLUMNS=100 and a captured (non-TTY) stdout
    # WHEN the demo is scanned
    result = invoke("scan", "--recording", str(DEMO), "-q", env={"COLUMNS": "100"})
    # THEN lines fit in 100 columns, and the narrow table is used (evidence behind --wide)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    assert "evidence: --wide" in result.stdout


def test_make_help_has_no_escape_codes_off_a_tty() -> None:
    # GIVEN make and the Makefile
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # WHEN `make help` writes to a pipe
    text = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    # THEN plain text, no ANSI escapes
    assert "help" in text and "\x1b[" not in text and "\\033" not in text


# -- 8. CSV and JSON -----------------------------------------------------------------------------------------


def test_csv_has_gpus_held_and_wasted_gpus_rounded_to_six_places() -> None:
    # GIVEN the demo findings (MIG slices hold 1/7 GPU)
    findings = _demo_findings()
    # WHEN written as CSV
    rows = list(csv.DictReader(io.StringIO(to_csv(findings))))
    # THEN gpus_held and wasted_gpus are there, and no number has more than 6 decimals
    assert "gpus_held" in rows[0] and "wasted_gpus" in rows[0] and "gpus" not in rows[0]
    numeric = ("gpus_held", "wasted_gpus", "avg", "p95", "max", "coverage", "usd_per_gpu_hour", "usd_per_day")
    for row in rows:
        for col in numeric:
            if "." in row[col]:
                assert len(row[col].split(".")[1]) <= 6, (col, row[col])
    assert any(row["gpus_held"] and Decimal(row["gpus_held"]) < 1 for row in rows)


def test_cli_help_documents_csv_and_json_numbers_and_has_no_bool_noise() -> None:
    # GIVEN the scan and demo help
    # WHEN shown
    def words(text: str) -> str:  # the help is a boxed table: join its wrapped cells
        return " ".join(text.replace("│", " ").split())
    scan_help = words(invoke("scan", "--help", env={"COLUMNS": "200"}).output)
    demo_help = words(invoke("demo", "--help", env={"COLUMNS": "200"}).output)
    # THEN the output formats are explained, flags have no <bool>, and demo --quiet has help text
    assert "exact decimal strings" in scan_help and "6 places" in scan_help
    assert "<bool>" not in scan_help and "<bool>" not in demo_help
    assert "Only the alerts" in demo_help


# -- 9. summary ----------------------------------------------------------------------------------------------

NOW = datetime(2024, 1, 2, tzinfo=UTC)


def _record(fp: str, kind: str, usd: str | None) -> FindingRecord:
    return FindingRecord(fingerprint=fp, cluster="prod", namespace="ml", workload=f"wl-{fp}", kind=kind, detector=kind,
                         first_seen=NOW - timedelta(hours=6), last_seen=NOW - timedelta(hours=1),
                         usd_per_day=Decimal(usd) if usd else None, cumulative_usd=Decimal(0), team="ml")


def test_summary_data_quality_is_not_counted_as_waste_and_title_is_period_end() -> None:
    # GIVEN one waste finding and two data-quality findings, open
    records = [_record("A", "idle_allocation", "100"), _record("B", "data_quality", None), _record("C", "data_quality", None)]
    from gpuwaste.sinks.summary_report import SummaryNotes

    # WHEN the day ending at midnight is summarised and rendered with the data-quality count
    s = summarize(records, since=NOW - timedelta(days=1), until=NOW, team_of=lambda r: r.team or "unassigned")
    text = render_markdown(s, SummaryNotes(data_quality=2))
    # THEN one open finding (the waste), the data quality apart, the title the period's last day
    assert s.open_findings == 1 and s.opened == 1
    assert "1 finding, $100.00/day" in text and "2 data-quality problems" in text
    assert "# GPU waste summary 2024-01-01" in text


def test_cli_summary_until_after_last_scan_shows_open_state_at_last_scan(tmp_path: Path) -> None:
    # GIVEN a state file from one demo run (last scan 2024-01-01 01:20Z)
    state = tmp_path / "state.db"
    assert invoke("run", "--recording", str(DEMO), "--state", str(state), "-q", "--no-summary").exit_code == 0
    # WHEN summarised for a day long after it
    result = invoke("summary", "--state", str(state), "--until", "2024-01-05T00:00:00Z", env={"COLUMNS": "200"})
    # THEN it says what was open at the last scan, not "Open now 0"
    assert result.exit_code == 0, result.output
    assert "Open at the last scan" in result.output and "21 findings" in result.output
    assert "Open now" not in result.output


def test_chart_has_headroom_above_the_tallest_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN matplotlib and a summary with one bar
    pytest.importorskip("matplotlib", reason="matplotlib (the charts extra) is not installed")
    from matplotlib.figure import Figure

    from gpuwaste.sinks.chart import MatplotlibChartRenderer

    s = summarize([_record("A", "idle_allocation", "100")], since=NOW - timedelta(days=1), until=NOW,
                  team_of=lambda r: r.team or "unassigned")
    seen: list[Figure] = []
    original = Figure.savefig

    def keep(self: Figure, *args: object, **kwargs: object) -> None:
        seen.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    # WHEN drawn
    assert MatplotlibChartRenderer().waste_by_team_and_kind(s) is not None
    # THEN the y axis goes at least 10 % above the bar
    tallest = float(s.wasted_usd)
    assert seen[0].axes[0].get_ylim()[1] >= tallest * 1.1


# -- 10. run ------------------------------------------------------------------------------------------------


def test_cli_run_with_state_has_no_use_state_hint(tmp_path: Path) -> None:
    # GIVEN a state that already saw the demo
    state = tmp_path / "state.db"
    invoke("run", "--recording", str(DEMO), "--state", str(state), "-q", "--no-summary")
    # WHEN run again with the same --state
    result = invoke("run", "--recording", str(DEMO), "--state", str(state), "-q", "--no-summary")
    # THEN "no new alerts" without the "use --state" hint
    assert result.exit_code == 0, result.output
    assert "no new alerts" in result.output and "use --state" not in result.output


def test_cli_run_no_tickets_keeps_the_requests_for_the_next_run(tmp_path: Path) -> None:
    # GIVEN a first run with --no-tickets
    state = tmp_path / "state.db"
    first = invoke("run", "--recording", str(DEMO), "--state", str(state), "--no-summary", "--no-tickets",
                   env={"COLUMNS": "200"})
    # WHEN the same scan runs again with tickets (nothing new is decided)
    later = invoke("run", "--recording", str(DEMO), "--state", str(state), "--no-summary", env={"COLUMNS": "200"})
    again = invoke("run", "--recording", str(DEMO), "--state", str(state), "--no-summary", env={"COLUMNS": "200"})
    # THEN the first says the 2 requests are kept, the later run files them from the state, the third files none
    assert first.exit_code == 0 and later.exit_code == 0 and again.exit_code == 0, first.output + later.output
    assert "not delivered yet (--no-tickets)" in first.output and "2 ticket requests kept" in first.output
    assert len(re.findall(r"^ticket LOCAL-", later.output, flags=re.M)) == 2
    assert len(re.findall(r"^ticket LOCAL-", again.output, flags=re.M)) == 0
    store = SqliteFindingStore(state)
    try:
        assert sum(1 for r in store.open_for_cluster("demo") if r.ticket_requested_at is not None) == 2
    finally:
        store.close()


# -- 11. scan --truth ---------------------------------------------------------------------------------------


def test_cli_scan_truth_checks_a_generated_fleet(tmp_path: Path) -> None:
    # GIVEN a generated fleet and a truth that expects a finding that is not there
    fleet = tmp_path / "fleet"
    assert invoke("generate-fleet", str(fleet), "--layout", "demo").exit_code == 0
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"kind": "idle_allocation", "namespace": "nowhere", "pod": "ghost"}]))
    # WHEN scanned against its own truth, and against the wrong one
    good = invoke("scan", "--recording", str(fleet), "--truth", str(fleet / "truth.json"), "-q")
    bad = invoke("scan", "--recording", str(fleet), "--truth", str(wrong), "-q")
    # THEN the first matches (exit 0), the second exits 1 naming the missed finding
    assert good.exit_code == 0 and "ground truth:" in good.output and "0 missed" in good.output, good.output
    assert bad.exit_code == 1 and "missed idle_allocation" in bad.output, bad.output


def test_cli_scan_gzip_recording_still_reads(tmp_path: Path) -> None:
    # GIVEN a single gzip telemetry file (no directory)
    path = tmp_path / "telemetry.om.gz"
    path.write_bytes((DEMO / "telemetry.om.gz").read_bytes())
    assert gzip.decompress(path.read_bytes())
    # WHEN scanned at a time inside it
    result = invoke("scan", "--recording", str(path), "--at", "2024-01-01T01:20:00Z", "-q")
    # THEN it scans (the --at check reads the file's own range)
    assert result.exit_code == 0, result.output


def test_cli_replay_refuses_a_gpu_model_the_instance_type_does_not_carry(tmp_path: Path) -> None:
    # GIVEN an H100 mapped onto the default g5.xlarge (whose GPU is an A10G)
    # WHEN the replay is asked for
    result = invoke("replay", "alibaba", "--trace-dir", str(tmp_path), "--gpu-model", "NVIDIA H100 80GB HBM3")
    # THEN it refuses before reading anything: the price would be the A10G's
    assert_user_error(result, "H100-SXM-80GB", "g5.xlarge", "A10G")


def test_cli_replay_accepts_a_gpu_model_its_instance_type_carries(tmp_path: Path) -> None:
    # GIVEN an H100 on a p5.48xlarge (8 × H100) and an empty trace directory
    result = invoke("replay", "alibaba", "--trace-dir", str(tmp_path), "--gpu-model", "NVIDIA H100 80GB HBM3",
                    "--instance-type", "p5.48xlarge")
    # THEN the mapping passes and the missing trace is what is reported
    assert_user_error(result, "GenTD26")


@pytest.mark.loopback
@pytest.mark.parametrize("command", [["scan"], ["record", "{tmp}/rec"], ["explain", "abc"], ["run", "--state", "{tmp}/s.db"]])
def test_cli_unreachable_prometheus_gives_one_hint(tmp_path: Path, command: list[str]) -> None:
    # GIVEN a Prometheus URL on a port nothing listens on
    from tests.servers.ports import free_port

    url = f"http://127.0.0.1:{free_port()}"
    # WHEN a command that reads Prometheus runs against it
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    result = invoke(*args, "--prometheus", url)
    # THEN exit 3 with the error's own hint and no second, generic one
    assert_user_error(result, "cannot connect to Prometheus", "check the URL", code=3)
    said = " ".join(result.output.lower().split())
    assert said.count("check the url") == 1, result.output
    assert "network access and credentials" not in said


def test_cli_source_error_without_its_own_hint_gets_the_generic_one() -> None:
    # GIVEN source errors with and without a hint of their own
    import typer

    from gpuwaste.cli_support import SOURCE_HINT, fail_source
    from gpuwaste.errors import SourceAnswerError, SourceUnavailableError

    cases = {SourceAnswerError("Prometheus at http://p: unusable answer to the DCGM query (not JSON)"): True,
             SourceUnavailableError("Prometheus at http://p answered HTTP 503 after 3 attempt(s); check that Prometheus "
                                    "is healthy and not overloaded"): False}
    for exc, generic in cases.items():
        # WHEN the CLI fails on it
        from gpuwaste import cli_support

        with cli_support.err.capture() as captured, pytest.raises(typer.Exit) as exited:
            fail_source(exc)
        # THEN exit 3, the generic hint only where the error has none
        assert exited.value.exit_code == 3
        assert (SOURCE_HINT in captured.get()) is generic, captured.get()


@pytest.mark.parametrize("name", ["pods.txt", "cluster"])
def test_cli_scan_cluster_json_is_read_whatever_its_name_and_refused_when_it_is_not_a_list(tmp_path: Path, name: str) -> None:
    # GIVEN --cluster-json naming a file that is not a kubectl List, under a name without ".json" (issue 22: it was
    # silently dropped and the recording's own cluster state, or none, was scanned with exit 0)
    bad = tmp_path / name
    bad.write_text("not json\n", encoding="utf-8")
    # WHEN the demo recording is scanned with it
    result = invoke("scan", "--recording", str(DEMO), "--cluster-json", str(bad))
    # THEN exit 2 naming the file and what is wrong
    assert_user_error(result, name, "invalid JSON")


def test_cli_scan_cluster_json_is_read_under_any_name_and_a_directory_is_refused(tmp_path: Path) -> None:
    # GIVEN the demo's cluster objects saved as pods.txt (kubectl get pods,nodes -A -o json > pods.txt)
    pods = tmp_path / "pods.txt"
    shutil.copy(DEMO / "cluster.json", pods)
    # WHEN the demo telemetry is scanned with it: THEN the file is the cluster state the header names
    result = invoke("scan", "--recording", str(DEMO), "--cluster-json", str(pods))
    assert result.exit_code == 0, result.output
    assert "pods.txt" in result.output, result.output
    # AND a directory is refused in one line
    assert_user_error(invoke("scan", "--recording", str(DEMO), "--cluster-json", str(tmp_path)), "--cluster-json",
                      "is a directory")


def _real_scrape(name: str) -> Path:
    here = Path(__file__).resolve().parents[2]
    for root in (here.parent / "shared", here.parent.parent / "shared"):  # beside the repository (or a worktree of it)
        if (root / "data" / "real" / "scrapes" / name).exists():
            return root / "data" / "real" / "scrapes" / name
    pytest.skip(f"real data not available ({name}; ../shared/data/real is provided beside the repository in CI)")


def test_cli_scan_of_a_scrape_without_cluster_state_does_not_claim_conservation_over_zero_gpus() -> None:
    # GIVEN the real A100 MIG scrape (one GPU in the telemetry, no cluster state)
    src = _real_scrape("a09-nvidia-docs-a100-mig-1g5gb-scrape.prom")
    # WHEN scanned
    result = invoke("scan", "--recording", str(src), "-q")
    text = " ".join(result.output.split())
    # THEN the header's "1 GPU" is not contradicted by "share conservation holds: 0 physical GPUs" (issue 22)
    assert result.exit_code == 0, result.output
    assert "1 GPU in the telemetry" in text, text
    assert "0 physical GPUs" not in text, text
    assert "share conservation: not checked — no GPU node in the cluster state" in text, text


def test_cli_scan_verbose_no_verdict_causes_name_problems_in_words() -> None:
    # GIVEN the demo (one frozen exporter) WHEN scanned with -v
    result = invoke("scan", "--recording", str(DEMO), "-v")
    # THEN the causes grouped under "no verdict" name the problem in words, never its id (issue 22)
    assert result.exit_code == 0, result.output
    causes = result.output.split("no verdict on", 1)[1].split("Data quality", 1)[0]
    assert "untrusted telemetry: frozen exporter" in causes, causes
    assert "frozen_exporter" not in causes, causes
