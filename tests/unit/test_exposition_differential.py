"""Differential tests: our exposition parser against prometheus_client's reference parsers.

The hand-written parser in ``gpuwaste.sources.exposition`` is much faster than ``prometheus_client``'s
(``bench/parser_speed.py`` prints both), so it must give the same series, labels, values and timestamps
on the inputs the product meets: the real dcgm-exporter scrapes beside the repository (Prometheus text
format) and generated fleets (OpenMetrics with second timestamps, the format ``gpuwaste record`` writes).

Where the two legitimately differ, the difference is stated here, never hidden:
- our parser drops DCGM blank sentinels on DCGM fields (``DCGM_*``/``dcgm_*``) and non-finite values (warned); the
  reference keeps them, so the reference side is filtered the same way before comparing (the same large values on
  other exporters' series, e.g. kube-state-metrics or process metrics, are real and kept by both);
- OpenMetrics timestamps are truncated to milliseconds as Prometheus' own parser does (``int64(ts * 1000)``, what
  promtool backfills); the reference's exact ``Timestamp`` is converted the same way;
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


def _usable(name: str, value: float) -> bool:
    dcgm = name.startswith(("DCGM_", "dcgm_"))
    return math.isfinite(value) and not (dcgm and (value in BLANKS or value >= 9.2e18 or 2147483632 <= value <= 2147483647
                                                   or (value >= DCGM_FP64_BLANK and not float(value).is_integer())))


def _reference(text: str, *, openmetrics: bool, default_ts_ms: int | None = None) -> set[Sample]:
    families = (
        openmetrics_parser.text_string_to_metric_families(text)
        if openmetrics
        else prometheus_parser.text_string_to_metric_families(text)
    )
    out: set[Sample] = set()
    for family in families:
        for sample in family.samples:
            if not _usable(sample.name, sample.value):
                continue
            name = sample.name
            if not openmetrics and family.type == "counter" and name == f"{family.name}_total" and f"\n{name}" not in text:
                name = family.name
            if sample.timestamp is None:
                ts = default_ts_ms
            elif openmetrics:
                ts = int(float(sample.timestamp) * 1000)
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


# -- inputs shaped like what Prometheus 3.x and other exporters emit ---------------------------------------------------
NEW_SHAPES_TEXT = (
    # Prometheus 3.x UTF-8 names: the metric name quoted inside the braces, quoted label names
    '# TYPE "vllm.num_requests.running" gauge\n'
    '{"vllm.num_requests.running",namespace="ml",pod="llm-0","model.name"="llama"} 3\n'
    'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-a","k8s.pod.name"="llm-0"} 55\n'
    # unknown escapes in label values are kept as written (known ones unescaped)
    'DCGM_FI_DEV_FB_USED{UUID="GPU-a",path="C:\\data\\q",note="a\\qb\\tc",quote="x\\"y",nl="1\\n2"} 1024\n'
    # DCGM blank sentinels only on DCGM fields: a KSM quantity and a process metric at the same values are real
    'DCGM_FI_DEV_POWER_USAGE{UUID="GPU-b"} 140737488355328.000000\n'
    'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-b"} 2147483632\n'
    'kube_pod_container_resource_requests{namespace="ml",pod="p",resource="memory",unit="byte"} 9223372036854775794\n'
    'process_start_time_seconds{job="dcgm"} 2147483632\n'
    'process_virtual_memory_max_bytes 1.8446744073709552e+19\n'
)


def test_parser_matches_reference_on_prometheus3_names_escapes_and_non_dcgm_sentinel_values() -> None:
    # GIVEN a text scrape with UTF-8 quoted names, unknown escapes, and DCGM-blank-looking values on DCGM and other fields
    # WHEN both parsers read it
    ours = _ours(NEW_SHAPES_TEXT.encode(), "text", default_ts_ms=1_700_000_000_000)
    reference = _reference(NEW_SHAPES_TEXT, openmetrics=False, default_ts_ms=1_700_000_000_000)
    # THEN they agree sample for sample: the quoted names and labels, the escapes kept literally, the non-DCGM values
    assert ours == reference
    names = {n for n, *_ in ours}
    assert "vllm.num_requests.running" in names and "kube_pod_container_resource_requests" in names
    fb = next(dict(labels) for n, labels, _, _ in ours if n == "DCGM_FI_DEV_FB_USED")
    assert fb["path"] == "C:\\data\\q" and fb["note"] == "a\\qb\\tc" and fb["quote"] == 'x"y' and fb["nl"] == "1\n2"
    assert {v for n, labels, _, v in ours if n.startswith("DCGM_") and dict(labels)["UUID"] == "GPU-b"} == set()
    assert {v for n, _, _, v in ours if n == "process_start_time_seconds"} == {2147483632.0}


def test_parser_matches_reference_on_openmetrics_utf8_names_and_large_timestamps() -> None:
    # GIVEN OpenMetrics with a quoted UTF-8 name and large valid timestamps (fractions past the millisecond, far future)
    text = (
        '# TYPE "dcgm.gpu.utilization" gauge\n'
        '{"dcgm.gpu.utilization",UUID="GPU-a"} 1 1700000000.123456789\n'
        '{"dcgm.gpu.utilization",UUID="GPU-a"} 2 1700000000.9999\n'
        '{"dcgm.gpu.utilization",UUID="GPU-a"} 3 9999999999.999\n'
        '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
        'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-a",note="a\\qb"} 4 4102444800.001\n'
        "# EOF\n"
    )
    # WHEN both parsers read it
    ours = _ours(text.encode(), "openmetrics")
    reference = _reference(text, openmetrics=True)
    # THEN the same samples, timestamps truncated to the millisecond as Prometheus stores them
    assert ours == reference and len(ours) == 4
    assert sorted(ts for *_, ts, _ in ours) == [1_700_000_000_123, 1_700_000_000_999, 4_102_444_800_001, 9_999_999_999_999]
