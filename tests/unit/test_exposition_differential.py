"""Differential tests: our exposition parser against prometheus_client's reference parsers.

The hand-written parser in ``gpuwaste.sources.exposition`` is much faster than ``prometheus_client``'s
(``bench/parser_speed.py`` prints both), so it must give the same series, labels, values and timestamps
on the inputs the product meets: the real dcgm-exporter scrapes beside the repository (Prometheus text
format) and generated fleets (OpenMetrics with second timestamps, the format ``gpuwaste record`` writes).

Where the two legitimately differ, the difference is stated here, never hidden:
- our parser drops DCGM blank sentinels and non-finite values (warned); the reference keeps them, so the
  reference side is filtered the same way before comparing;
- prometheus_client's text parser renames the samples of a ``counter`` family to ``<name>_total`` (its
  OpenMetrics semantics); Prometheus itself stores the name as exposed, as we do, so that suffix is taken
  back off on the reference side when the exposed line did not carry it.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.sources.exposition import DCGM_FP64_BLANK, DCGM_INT32_BLANK, DCGM_INT64_BLANK, parse_exposition

prometheus_parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client is a dev dependency")
openmetrics_parser = pytest.importorskip("prometheus_client.openmetrics.parser")

REAL_SCRAPES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real" / "scrapes"
DEMO = Path(__file__).resolve().parents[2] / "shared" / "gpuwaste" / "fleet" / "demo" / "telemetry.om.gz"
BLANKS = {float(DCGM_FP64_BLANK), float(DCGM_INT32_BLANK), float(DCGM_INT64_BLANK)}

Sample = tuple[str, tuple[tuple[str, str], ...], int, float]


def _ours(data: bytes, fmt: str, default_ts_ms: int | None = None) -> set[Sample]:
    parsed = parse_exposition(data, fmt=fmt, default_timestamp_ms=default_ts_ms)  # type: ignore[arg-type]
    out: set[Sample] = set()
    for s in parsed.series.values():
        labels = tuple(sorted(s.labels.items()))
        for ts, value in zip(s.timestamps_ms, s.values, strict=True):
            out.add((s.name, labels, ts, value))
    return out


def _usable(value: float) -> bool:
    return math.isfinite(value) and value not in BLANKS and value < 9.2e18


def _reference(text: str, *, openmetrics: bool, default_ts_ms: int | None = None) -> set[Sample]:
    families = (
        openmetrics_parser.text_string_to_metric_families(text)
        if openmetrics
        else prometheus_parser.text_string_to_metric_families(text)
    )
    out: set[Sample] = set()
    for family in families:
        for sample in family.samples:
            if not _usable(sample.value):
                continue
            name = sample.name
            if not openmetrics and family.type == "counter" and name == f"{family.name}_total" and f"\n{name}" not in text:
                name = family.name
            if sample.timestamp is None:
                ts = default_ts_ms
            elif openmetrics:
                ts = round(float(sample.timestamp) * 1000)
            else:
                ts = int(sample.timestamp * 1000) if isinstance(sample.timestamp, float) else int(sample.timestamp)
            assert ts is not None
            out.add((name, tuple(sorted(sample.labels.items())), ts, float(sample.value)))
    return out


def _real(name: str) -> bytes:
    path = REAL_SCRAPES / name
    if not path.is_file():
        pytest.skip(f"real scrapes not available: {path} is missing (needs the shared/ checkout next to the repo)")
    return path.read_bytes()


@pytest.mark.parametrize(
    "name",
    ["a02-kops-aws-l4-full-scrape.prom", "a08-upcloud-l40s-idle-scrape.prom", "a09-nvidia-docs-a100-mig-1g5gb-scrape.prom"],
)
def test_parser_matches_reference_on_real_dcgm_scrapes(name: str) -> None:
    # GIVEN a real dcgm-exporter scrape (Prometheus text format, no timestamps)
    data = _real(name)
    # WHEN both parsers read it, samples stamped with the same scrape time
    ours = _ours(data, "text", default_ts_ms=1_700_000_000_000)
    reference = _reference(data.decode(), openmetrics=False, default_ts_ms=1_700_000_000_000)
    # THEN they see exactly the same samples (name, labels, time, value)
    assert ours, "the scrape parsed to nothing"
    assert ours == reference


def test_parser_matches_reference_on_the_demo_recording() -> None:
    # GIVEN the bundled demo recording (OpenMetrics, second timestamps, DCGM + KSM + vLLM series)
    text = gzip.decompress(DEMO.read_bytes()).decode()
    # WHEN both parsers read it
    ours = _ours(text.encode(), "openmetrics")
    reference = _reference(text, openmetrics=True)
    # THEN every sample agrees
    assert len(ours) > 10_000
    assert ours == reference


@pytest.mark.parametrize("seed", [3, 11])
def test_parser_matches_reference_on_generated_fleets(tmp_path: Path, seed: int) -> None:
    # GIVEN a generated fleet written as an OpenMetrics recording (what `gpuwaste record` writes)
    fleet = generate_fleet(FleetSpec(nodes=3, seed=seed, cluster=f"diff-{seed}"))
    rec = write_recording(fleet, tmp_path / "rec", compress=False)
    text = (rec / "telemetry.om").read_text()
    # WHEN both parsers read it
    ours = _ours(text.encode(), "openmetrics")
    reference = _reference(text, openmetrics=True)
    # THEN every sample agrees
    assert ours == reference


def test_parser_differs_from_reference_only_by_dropping_dcgm_blanks() -> None:
    # GIVEN a scrape holding a DCGM blank sentinel next to a normal value
    text = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 9223372036854775794\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 42\n'
    )
    # WHEN both parse it
    ours = _ours(text.encode(), "text", default_ts_ms=1)
    raw_reference = {
        (s.name, s.labels["UUID"], s.value)
        for f in prometheus_parser.text_string_to_metric_families(text)
        for s in f.samples
    }
    # THEN the reference keeps the sentinel as a number and we drop it; the normal value agrees
    assert ("DCGM_FI_DEV_GPU_UTIL", "GPU-a", 9223372036854775794) in raw_reference
    assert {(n, dict(labels)["UUID"], v) for n, labels, _, v in ours} == {("DCGM_FI_DEV_GPU_UTIL", "GPU-b", 42.0)}
