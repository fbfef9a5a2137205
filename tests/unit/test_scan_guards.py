"""Unit tests: the scan refuses windows its rules cannot judge, and empty telemetry is never read as idle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuwaste.bootstrap.local import demo_recording
from gpuwaste.errors import ConfigError
from gpuwaste.models.findings import WasteKind
from gpuwaste.services.scan import ScanService
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource


def _service(window: timedelta) -> tuple[ScanService, RecordingTelemetrySource]:
    path = demo_recording()
    tel = RecordingTelemetrySource(path)
    return ScanService(cluster_source=RecordingClusterSource(path), telemetry_source=tel, window=window), tel


def test_scan_service_window_under_ten_minutes_is_refused() -> None:
    # GIVEN a five-minute window (shorter than the 10-minute averages the rules use)
    # WHEN a scan service is built
    with pytest.raises(ConfigError) as err:
        _service(timedelta(minutes=5))
    # THEN it is refused with what to do
    assert "10-minute" in str(err.value) and "--window 10m" in str(err.value)


def test_scan_window_without_any_telemetry_gives_no_telemetry_and_no_idle() -> None:
    # GIVEN the demo cluster evaluated long after its telemetry ends
    service, tel = _service(timedelta(hours=1))
    # WHEN it is scanned
    report = service.scan(at=tel.end_time() + timedelta(days=30))
    # THEN one cluster-level no_telemetry problem is reported, no per-node "unmonitored" noise, nothing idle
    checks = [f.details.get("check") for f in report.findings if f.kind is WasteKind.DATA_QUALITY]
    assert checks.count("no_telemetry") == 1
    assert "unmonitored_gpus" not in checks
    assert not [f for f in report.findings if f.kind in (WasteKind.IDLE, WasteKind.UNDERUSED)]


def test_scan_recording_without_cluster_state_gives_one_no_cluster_state_problem(tmp_path) -> None:
    # GIVEN the demo telemetry without its cluster.json
    import shutil

    for name in ("telemetry.om.gz", "recording.json"):
        shutil.copy(demo_recording() / name, tmp_path / name)
    tel = RecordingTelemetrySource(tmp_path)
    service = ScanService(cluster_source=RecordingClusterSource(tmp_path), telemetry_source=tel, window=timedelta(hours=1))
    # WHEN it is scanned
    report = service.scan(at=tel.end_time())
    # THEN one no_cluster_state problem replaces a row per GPU, and nothing is judged
    checks = [f.details.get("check") for f in report.findings]
    assert checks.count("no_cluster_state") == 1
    assert "unmapped_device" not in checks
    assert all(f.kind is WasteKind.DATA_QUALITY for f in report.findings)


def test_recording_named_om_without_eof_is_reported_as_truncated(tmp_path) -> None:
    # GIVEN an OpenMetrics recording (.om) whose final `# EOF` line was cut off
    import gzip

    from gpuwaste.errors import InputFormatError

    text = gzip.decompress((demo_recording() / "telemetry.om.gz").read_bytes()).decode()
    assert text.endswith("# EOF\n")
    (tmp_path / "telemetry.om").write_text(text[: -len("# EOF\n")])
    # WHEN it is read with the format left to detection
    with pytest.raises(InputFormatError) as err:
        RecordingTelemetrySource(tmp_path, fmt="auto").parsed()
    # THEN the error says the data does not end with # EOF (not a misleading timestamp-unit message)
    assert "# EOF" in str(err.value)


def test_price_caveats_reach_the_table_and_slack_formula() -> None:
    # GIVEN the priced demo scan (a spot node without a spot price; a MIG node whose GPU count disagrees)
    from gpuwaste.pricing import PriceBook
    from gpuwaste.sinks.slack_blocks import formula_text
    from gpuwaste.sinks.terminal import price_caveats

    path = demo_recording()
    tel = RecordingTelemetrySource(path)
    service = ScanService(cluster_source=RecordingClusterSource(path), telemetry_source=tel, window=timedelta(hours=1),
                          price_book=PriceBook.bundled())
    report = service.scan(at=tel.end_time())
    # WHEN the caveats are listed and the spot finding's formula is rendered for Slack
    caveats = price_caveats(report.findings)
    spot = next(f for f in report.findings if f.subject.capacity_type == "spot" and f.cost and f.cost.priced)
    # THEN the spot caveat names the workload, and Slack shows it next to the formula
    assert any("spot node priced at on-demand" in c and "nightly-embed" in c for c in caveats)
    assert "spot node priced at on-demand" in formula_text(spot)


def test_cli_min_usd_says_how_many_findings_it_hid_and_refuses_negatives() -> None:
    # GIVEN the demo recording
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    runner = CliRunner()
    # WHEN it is scanned with --min-usd 50, and with a negative --min-usd
    shown = runner.invoke(app, ["scan", "--recording", str(demo_recording()), "--min-usd", "50", "-q"])
    negative = runner.invoke(app, ["scan", "--recording", str(demo_recording()), "--min-usd", "-5", "-q"])
    # THEN the hidden count is printed (11 waste findings under $50/day in the demo) and a negative is refused
    assert shown.exit_code == 0
    assert "11 finding(s) under $50/day hidden by --min-usd" in shown.output.replace("\n", " ")
    assert negative.exit_code == 2


def test_scan_command_without_cluster_state_says_nothing_was_judged(tmp_path) -> None:
    # GIVEN the demo telemetry without its cluster.json and without its kube-state-metrics series (what a
    # Prometheus-only scan of a Prometheus without kube-state-metrics sees)
    import gzip
    import shutil

    from typer.testing import CliRunner

    from gpuwaste.cli import app

    text = gzip.decompress((demo_recording() / "telemetry.om.gz").read_bytes()).decode()
    def ksm(line: str) -> bool:  # a kube_* sample, or its # TYPE / # HELP / # UNIT line
        words = line.split(" ")
        return line.startswith("kube_") or (line.startswith("# ") and len(words) > 2 and words[2].startswith("kube_"))

    kept = [line for line in text.splitlines() if not ksm(line)]
    assert len(kept) < len(text.splitlines()), "the demo telemetry carries kube-state-metrics series"
    (tmp_path / "telemetry.om.gz").write_bytes(gzip.compress(("\n".join(kept) + "\n").encode()))
    shutil.copy(demo_recording() / "recording.json", tmp_path / "recording.json")
    # WHEN `gpuwaste scan` prints its table
    result = CliRunner().invoke(app, ["scan", "--recording", str(tmp_path)], env={"COLUMNS": "400"})
    # THEN it never says "no waste found": it says nothing was judged and how to give it the cluster
    assert result.exit_code == 0, result.output
    assert "no waste found" not in result.output
    assert "nothing judged: no cluster state" in result.output
    assert "--kubeconfig" in result.output and "kube-state-metrics" in result.output
    # AND the header counts the GPUs without claiming they sit on "0 nodes"
    assert "on 0 nodes" not in result.output
    assert "GPUs in the telemetry, no node known" in result.output
