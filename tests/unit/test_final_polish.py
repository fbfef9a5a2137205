"""Fixes from the second new-user trial: summary counts that agree across sections, `summary -o` choosing the format,
doctor's URL check and single hint, the Alibaba replay's once-rounded totals and stated mapping, and explain's
share/count/note formatting."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.commands.explain import explain_text, share_text
from gpuwaste.commands.replay import DEFAULT_INSTANCE, DEFAULT_MODEL, mapping_origin, replay_summary, scan_window
from gpuwaste.models.findings import WasteKind
from gpuwaste.settings import GpuWasteConfig
from gpuwaste.sources.alibaba import AlibabaReplaySource, AlibabaTrace, PodSeries

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


# -- 1. summary counts agree ------------------------------------------------------------------------------


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


# -- 2. summary -o is the format, --out the file ------------------------------------------------------------


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
    assert "terminal" in result.output and "json" in result.output and "Traceback" not in result.output


def test_summary_out_writes_the_file_and_says_where(demo_state: Path, tmp_path: Path) -> None:
    # GIVEN a target file
    target = tmp_path / "summary.html"
    # WHEN the HTML summary is written there
    result = invoke("summary", "--state", str(demo_state), "-o", "html", "--out", str(target))
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


# -- 3. doctor ---------------------------------------------------------------------------------------------


def test_doctor_url_without_scheme_gets_the_scan_message() -> None:
    # GIVEN a Prometheus address without http://
    # WHEN doctor and scan are given it
    doctor = invoke("doctor", "--prometheus", "127.0.0.1:1")
    scan = invoke("scan", "--prometheus", "127.0.0.1:1")
    # THEN both say the same friendly thing, exit 2, with no pydantic error text
    assert doctor.exit_code == scan.exit_code == 2
    assert "must start with http:// or https://" in doctor.output
    assert doctor.output.strip() == scan.output.strip()
    assert "String should match pattern" not in doctor.output


@pytest.mark.loopback
def test_doctor_unreachable_prometheus_hint_is_given_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a Prometheus URL where nothing listens (retry backoff skipped)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    # WHEN doctor probes it
    result = invoke("doctor", "--prometheus", "http://127.0.0.1:1")
    # THEN exit 3 with the hint to check the URL exactly once
    assert result.exit_code == 3, result.output
    assert result.output.lower().count("check the url") == 1, result.output


# -- 4. Alibaba replay -------------------------------------------------------------------------------------


def _idle_trace(pods: int = 3, hours: int = 2) -> AlibabaTrace:
    start = datetime(2022, 9, 11, 0, 0, tzinfo=UTC)
    step_ms = 57_000
    n = hours * 3600_000 // step_ms + 1
    series = {}
    for i in range(pods):
        key = f"{i:x}" * 32  # the pod and node names use the first 10 characters
        ts = [round(start.timestamp() * 1000) + k * step_ms for k in range(n)]
        series[key] = PodSeries(key, util_ts=ts, util=[0.0] * n, mem_ts=list(ts), mem_mib=[1024.0] * n)
    end = start + timedelta(milliseconds=(n - 1) * step_ms)
    return AlibabaTrace(pods=series, step_s=57.0, start=start, end=end, rows=2 * pods * n)


def test_replay_usd_per_day_is_rounded_once_from_unrounded_pods() -> None:
    # GIVEN 3 pods with zero duty cycle mapped to g5.xlarge ($1.006/GPU-h)
    source = AlibabaReplaySource(_idle_trace(), gpu_model=DEFAULT_MODEL, instance_type=DEFAULT_INSTANCE)
    window_s = int(source.trace.span_s)
    # WHEN the whole trace is replayed
    s = replay_summary(scan_window(source, at=source.trace.end, window_s=window_s, config=GpuWasteConfig()), source)
    # THEN 3 × $1.006 × 24 = $72.432 → $72.43 (rounding each pod first would give 3 × $24.14 = $72.42)
    assert s.counts["idle"] == 3
    assert s.usd_per_gpu_hour == Decimal("1.006")
    assert s.usd_per_day["idle"] == Decimal("72.43")


def test_replay_mapping_origin_names_the_values_used() -> None:
    # GIVEN the defaults, and an overridden model and instance type
    # WHEN the mapping origin is stated
    default = mapping_origin(DEFAULT_MODEL, DEFAULT_INSTANCE)
    overridden = mapping_origin("NVIDIA L4", "g6.xlarge")
    model_only = mapping_origin("NVIDIA L4", DEFAULT_INSTANCE)
    # THEN "the defaults" only when nothing was overridden; otherwise the options that set them
    assert default == "the defaults"
    assert overridden.startswith("set by --gpu-model and --instance-type")
    assert model_only.startswith("set by --gpu-model;")


# -- 5. explain --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_findings():  # type: ignore[no-untyped-def]
    cfg = GpuWasteConfig()
    sources = local.recording_sources(DEMO, cfg)
    assert sources.recording is not None
    window_s = sources.recording.meta.window_s or cfg.scan.window_s
    return local.scan_service(sources, cfg, window_s=window_s).scan(at=sources.recording.end_time()).findings


def test_explain_share_text_keeps_at_most_four_decimals() -> None:
    # GIVEN shares with long and short expansions
    # WHEN formatted
    # THEN at most 4 decimals, trailing zeros dropped
    assert share_text(Decimal(1) / Decimal(7)) == "0.1429"
    assert share_text(Decimal("1.0")) == "1"
    assert share_text(0.714285714) == "0.7143"


def test_explain_node_level_finding_says_free_and_prints_counts(demo_findings) -> None:  # type: ignore[no-untyped-def]
    # GIVEN an unallocated-capacity (node-level) finding of the demo
    finding = next(f for f in demo_findings if f.kind is WasteKind.UNALLOCATED)
    # WHEN explained
    text = explain_text(finding)
    subject = next(line for line in text.splitlines() if line.startswith("subject:"))
    counts = [line for line in text.splitlines() if line.startswith("  - ") and line.split()[1].endswith("_gpus:")]
    # THEN the share is "free", with at most 4 decimals, and count evidence prints its value and note only
    assert "GPU(s) free" in subject and "held" not in subject
    assert not re.search(r"\d\.\d{5,}", subject)
    assert counts and all("samples" not in line and "coverage" not in line for line in counts)
    assert any(re.search(r"physical_gpus: \d+ · note: \w", line) for line in counts), counts


def test_explain_pod_finding_says_held_and_never_prints_an_empty_note(demo_findings) -> None:  # type: ignore[no-untyped-def]
    # GIVEN every finding of the demo
    texts = [explain_text(f) for f in demo_findings]
    idle = explain_text(next(f for f in demo_findings if f.kind is WasteKind.IDLE))
    # WHEN explained
    # THEN pod findings say "held", no text carries an empty note=, and no share has more than 4 decimals
    assert "GPU(s) held" in idle
    for text in texts:
        assert not re.search(r"note=(,|$)", text, flags=re.MULTILINE), text
        assert not re.search(r"\b\d+\.\d{5,} GPU\(s\)", text), text
