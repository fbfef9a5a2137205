"""Benchmark: our exposition parser against prometheus_client's reference parsers (prints numbers).

Usage: PYTHONPATH=shared:. .venv/bin/python bench/parser_speed.py [--nodes 40]

Parses the same generated fleet recording (OpenMetrics, the format `gpuwaste record` writes) and, when the
shared data set is beside the repository, the real L4 dcgm-exporter scrape (Prometheus text) with both
parsers, best of 3, and prints samples/s and the ratio. The differential test
(tests/unit/test_exposition_differential.py) proves both give the same samples.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.sources.exposition import parse_exposition

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real" / "scrapes" / "a02-kops-aws-l4-full-scrape.prom"


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _count_reference(families) -> int:
    return sum(len(f.samples) for f in families)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40, help="nodes of the generated fleet (8 GPUs each at most)")
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        fleet = generate_fleet(FleetSpec(nodes=args.nodes, seed=7, cluster="bench"))
        rec = write_recording(fleet, Path(tmp) / "rec", compress=False)
        text = (rec / "telemetry.om").read_text()
    rows = [("generated fleet (OpenMetrics)", text, "openmetrics", om_families)]
    if REAL.is_file():
        rows.append(("real L4 scrape x1 (text)", REAL.read_text(), "text", text_families))
    print(f"{'input':34} {'MB':>7} {'samples':>10} {'ours s':>8} {'reference s':>12} {'reference / ours':>17}")
    for label, data, fmt, ref in rows:
        samples = [0]

        def ours(data: str = data, fmt: str = fmt, samples: list[int] = samples) -> None:
            parsed = parse_exposition(data, fmt=fmt, default_timestamp_ms=0)  # type: ignore[arg-type]
            samples[0] = sum(len(s.values) for s in parsed.series.values())

        def reference(data: str = data, ref=ref) -> None:
            _count_reference(ref(data))

        t_ours = _best(ours)
        t_ref = _best(reference)
        print(f"{label:34} {len(data) / 1e6:7.2f} {samples[0]:10d} {t_ours:8.3f} {t_ref:12.3f} {t_ref / t_ours:16.1f}x")


if __name__ == "__main__":
    main()
