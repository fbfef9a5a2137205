"""The demo fleet: its scan matches its ground truth, and the checked-in recording equals a fresh generation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.fleet.truth import compare
from gpuwaste.models.findings import WasteKind
from gpuwaste.services.scan import ScanReport


def _scan(path: Path) -> ScanReport:
    sources = local.recording_sources(path, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)  # as `gpuwaste scan/demo` do
    service = local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s)
    return service.scan(at=sources.recording.end_time())


def test_demo_truth_bundled_recording_scan_matches_truth_json():
    # GIVEN the bundled demo recording and its truth.json
    path = local.demo_recording()
    truth = json.loads((path / "truth.json").read_text())
    # WHEN scanned as `gpuwaste demo` does
    report = _scan(path)
    result = compare(report.findings, truth)
    # THEN every expected finding is found and nothing else
    assert result.ok, result.missed + result.unexpected
    assert result.matched == result.expected == 23
    # AND every waste kind of the catalogue has at least one case in the demo
    assert {f.kind for f in report.findings if f.kind.is_waste} == {k for k in WasteKind if k.is_waste}


def test_demo_truth_checked_in_recording_equals_a_fresh_generation(tmp_path):
    # GIVEN the generator spec stored in the bundled recording's metadata
    path = local.demo_recording()
    meta = json.loads((path / "recording.json").read_text())
    spec = FleetSpec.model_validate(meta["generator"])
    # WHEN the fleet is generated again into a temporary directory
    write_recording(generate_fleet(spec), tmp_path, compress=True)
    # THEN cluster.json, recording.json, truth.json and the decompressed telemetry are byte-identical
    for name in ("cluster.json", "recording.json", "truth.json"):
        assert (tmp_path / name).read_bytes() == (path / name).read_bytes(), name
    fresh = gzip.decompress((tmp_path / "telemetry.om.gz").read_bytes())
    bundled = gzip.decompress((path / "telemetry.om.gz").read_bytes())
    assert fresh == bundled


def test_demo_truth_random_fleet_matches_its_truth(tmp_path):
    # GIVEN a random-layout fleet of 40 nodes (seed 3)
    fleet = generate_fleet(FleetSpec(layout="random", nodes=40, seed=3, cluster="random-40"))
    write_recording(fleet, tmp_path, compress=False)
    truth = json.loads((tmp_path / "truth.json").read_text())
    # WHEN scanned
    report = _scan(tmp_path)
    result = compare(report.findings, truth)
    # THEN the scan gives exactly the generated truth
    assert result.ok, result.missed + result.unexpected
    assert result.expected > 10
