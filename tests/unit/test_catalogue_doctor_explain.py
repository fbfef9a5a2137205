"""`gpuwaste doctor` diagnosis (pure) and `gpuwaste explain` output."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.commands.doctor import CSV_LINES, diagnose, probe_names
from gpuwaste.commands.explain import explain_text
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.telemetry import Signal


def _default_exporter_counts() -> dict[str, int]:
    """Series counts of a cluster with dcgm-exporter's default CSV (4.x), no cAdvisor and no serving metrics."""
    default = {Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE, Signal.MEM_COPY_UTIL,
               Signal.FB_USED, Signal.FB_FREE, Signal.POWER_USAGE, Signal.TOTAL_ENERGY}
    return {n: (8 if n in {s.value for s in default} else 0) for n in probe_names()}


def test_doctor_default_csv_names_the_missing_fields_and_fallbacks():
    # GIVEN the signals of a default dcgm-exporter install: no SM_ACTIVE, no power-limit fields, no pod-level series
    counts = _default_exporter_counts()
    # WHEN diagnosed
    report = diagnose(counts)
    by = {d.name: d for d in report.detectors}
    # THEN the exact CSV lines for SM_ACTIVE and both power limits are printed, with Helm values to load them;
    # power_anomaly falls back to the bundled limits, idle to GR_ENGINE, and the pod-level detectors are off
    assert CSV_LINES[Signal.SM_ACTIVE.value] in report.csv_lines
    assert CSV_LINES[Signal.POWER_LIMIT.value] in report.csv_lines
    assert CSV_LINES[Signal.POWER_MGMT_LIMIT.value] in report.csv_lines
    assert "dcgmExporter:" in report.helm_values and "DCGM_EXPORTER_COLLECTORS" in report.helm_values
    assert by["power_anomaly"].status == "degraded" and any("bundled per-model" in n for n in by["power_anomaly"].notes)
    assert by["idle_allocation"].status == "degraded" and any("GR_ENGINE_ACTIVE" in n for n in by["idle_allocation"].notes)
    assert by["cpu_bound"].status == "off" and by["kv_cache_pressure"].status == "off"
    assert any("cAdvisor" in line for line in report.pod_fixes)


def test_doctor_everything_present_needs_no_csv_change():
    # GIVEN every probed metric present
    report = diagnose(dict.fromkeys(probe_names(), 4))
    # WHEN diagnosed
    # THEN no CSV line, no Helm values, and every detector is ok
    assert report.csv_lines == [] and report.helm_values == ""
    assert {d.status for d in report.detectors} == {"ok"}


def test_explain_prints_evidence_thresholds_formula_and_money(tmp_path: Path):
    # GIVEN a scorecard recording (one repetition) and the fingerprint of its stalled finding
    fleet = generate_fleet(FleetSpec(layout="scorecard", nodes=1, cluster="sc"))
    rec = write_recording(fleet, tmp_path / "rec", compress=False)
    runner = CliRunner()
    listed = runner.invoke(app, ["explain", "nothing", "--recording", str(rec)])
    line = next(x for x in listed.output.splitlines() if "stalled" in x)
    prefix = line.split()[0]
    # WHEN explained
    result = runner.invoke(app, ["explain", prefix, "--recording", str(rec)])
    # THEN the output shows the rule and numbers of every signal, the settings, the formula and USD/day
    assert listed.exit_code != 0 and result.exit_code == 0, result.output
    text = result.output
    assert "kind: stalled" in text
    # (ratios in percent, money rounded: one unit for people, exact values in JSON)
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE ·" in text and "rule: highest 10-min avg 0 %, flagged at 2 % or below" in text
    assert "thresholds (detector settings): min busy: 80 %" in text and "min duration: 30 min" in text
    assert "waste formula: wasted GPUs = all GPUs held" in text
    assert "/GPU-h × 2 GPUs × 24 h = $131.75/day" in text
    assert "0.02" not in text.split("waste formula")[0]


def test_explain_text_for_a_finding_without_cost():
    # GIVEN an unpriced orphan finding built by the detector
    from datetime import UTC, datetime

    from gpuwaste.models.findings import Evidence, Finding, Subject, WasteKind
    f = Finding(kind=WasteKind.ORPHANED, detector="orphaned", subject=Subject(cluster="c", namespace="ml", pod="p"),
                title="t", recommendation="delete it", observed_at=datetime(2024, 1, 1, tzinfo=UTC), window_s=3600,
                evidence=(Evidence(signal="pod_age_s", unit="s", window_s=3600, avg=300000.0, threshold=259200.0, comparison="> 259200 s"),),
                details={"formula": "wasted GPUs = all GPUs the pod holds", "reason": "bare_pod"})
    # WHEN explained
    text = explain_text(f)
    # THEN the evidence rule, the formula and the advice are there, and no cost line is invented
    assert "pod_age_s · avg 3.5 d" in text and "rule: 3.5 d, flagged above 3.0 d" in text
    assert "waste formula: wasted GPUs = all GPUs the pod holds" in text and "cost:" not in text
    assert "how to fix: The pod p holds GPUs that nobody uses: delete it" in text
    assert text.endswith("$ kubectl -n ml delete pod/p   # ends the pod for good: nothing recreates it (save its work first)")


def test_doctor_at_80_columns_wraps_at_spaces_and_keeps_every_url_whole(monkeypatch):
    # GIVEN a default dcgm-exporter install (missing fields, no pod-level series) and an 80-column terminal
    import io

    from gpuwaste.cli_support import out
    from gpuwaste.commands.doctor import DOCS, render
    from tests.width_checks import overlong, split_identifiers, urls

    report = diagnose(_default_exporter_counts())
    buffer = io.StringIO()
    monkeypatch.setattr(out, "_file", buffer)  # the private fields: restored to "follow sys.stdout", "auto width"
    monkeypatch.setattr(out, "_width", 80)
    # WHEN the report is printed for people
    render(report)
    text = buffer.getvalue()
    # THEN no line is wider than 80 but a URL alone on its line (a terminal wraps it, it stays clickable) and the
    # literal CSV lines and Helm values to copy
    literal = [*report.csv_lines, *report.helm_values.splitlines()]
    assert overlong(text, 80, allowed=literal) == []
    # AND every URL printed is a whole documentation URL, none folded across lines, none followed by a lone ")"
    shown = urls(text)
    assert shown and shown <= set(DOCS.values()), shown - set(DOCS.values())
    assert split_identifiers(text, DOCS.values()) == []
    assert not [line for line in text.splitlines() if line.strip() == ")"]
    assert DOCS["dcgm-fields"] in shown and DOCS["gpu-operator"] in shown
    # AND the verdict comes first (a reader sees it before the signal list), and again after "to do"
    lines = text.splitlines()
    assert lines[0].startswith("verdict: exit "), lines[0]
    verdict = lines[0].split(" (")[0]
    assert any(line.startswith(verdict) for line in lines[-3:]) and lines.index(lines[0]) == 0


def _annotations_read() -> set[str]:
    """Every pod annotation key the scan reads: each detector setting named `*_annotation` (its default) and the
    routing keys (team, Slack, Jira, snooze), taken from the settings models, not written out here."""
    from gpuwaste.detectors import DetectorSettings
    from gpuwaste.models.settings import RoutingKeys

    keys = set(RoutingKeys().model_dump().values())
    for model in DetectorSettings.detector_fields().values():
        keys |= {getattr(model(), f) for f in model.model_fields if f.endswith("_annotation")}
    return keys


def test_doctor_kube_state_metrics_allowlist_names_every_annotation_a_detector_reads():
    # GIVEN a kube-state-metrics that exports none of the allow-listed keys
    from gpuwaste.commands.doctor import diagnose_ksm, ksm_key_checks
    from gpuwaste.sources.ksm import POD_KEYS

    report = diagnose_ksm({}, dict.fromkeys(ksm_key_checks(), 0))
    # WHEN doctor prints its Helm values
    line = next(x for x in report.helm_values.splitlines()[report.helm_values.splitlines().index("metricAnnotationsAllowlist:"):]
                if x.strip().startswith("- pods=["))
    printed = set(line.strip()[len("- pods=["):-1].split(","))
    # THEN the pod annotation allow-list holds every annotation a detector (or routing) reads, under its exact name,
    # and the KSM reader maps each back from its sanitised form
    wanted = _annotations_read()
    assert "gpuwaste.io/model-weights-mib" in wanted and "notebooks.kubeflow.org/last-activity" in wanted
    assert wanted - printed == set()
    assert wanted - set(POD_KEYS) == set()


def test_explain_rounds_readings_as_the_other_surfaces_do():
    # GIVEN a power finding whose evidence holds exact readings (W, MiB — shown in GiB —, ratio)
    from datetime import UTC, datetime

    from gpuwaste.models.findings import Evidence, Finding, Subject, WasteKind
    from gpuwaste.people import evidence_text

    power = Evidence(signal="DCGM_FI_DEV_POWER_USAGE", unit="W", window_s=3600, avg=64.2478, p95=70.51234, max=71.0,
                     max_avg_10m=66.98765, samples=120, coverage=1.0, threshold=60.0, comparison=">= 60 W")
    fb = Evidence(signal="DCGM_FI_DEV_FB_USED", unit="MiB", window_s=3600, avg=12595.4321, samples=120, coverage=1.0)
    f = Finding(kind=WasteKind.POWER_ANOMALY, detector="power_anomaly", subject=Subject(cluster="c", namespace="ml", pod="p"),
                title="t", recommendation="r", observed_at=datetime(2024, 1, 1, tzinfo=UTC), window_s=3600,
                evidence=(power, fb))
    # WHEN explained
    text = explain_text(f)
    # THEN each reading is rounded in its unit, as the evidence line of the scan/Slack/Jira surfaces shows it
    assert "DCGM_FI_DEV_POWER_USAGE · avg 64 W · p95 71 W · max 71 W · highest 10-min avg 67 W" in text, text
    assert "avg 12.3 GiB" in text and "64.2478" not in text and "12595.4" not in text  # GPU memory in GiB, as everywhere
    assert "64 W" in evidence_text(power)
