"""Benchmark: parse speed of gpuwaste.sources.exposition on generated dcgm-exporter recordings.

Run: ``PYTHONPATH=shared .venv/bin/python bench/exposition_parse.py`` (prints lines/s for each case).
Data is deterministic: 500 GPUs x 4 DCGM metrics x 100 steps (200k lines, repeated series, the usual
recording shape) and 50,000 GPUs x 4 metrics x 1 step (200k distinct series, the worst case).
"""

from __future__ import annotations

import io
import time

from gpuwaste.sources.exposition import RecordedSeries, parse_exposition, write_openmetrics, write_text_exposition

METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_POWER_USAGE")
T0_MS = 1_704_067_200_000


def recording(gpus: int, steps: int) -> list[RecordedSeries]:
    """Series with the real dcgm-exporter label set, 15 s apart."""
    out = []
    for metric in METRICS:
        for gpu in range(gpus):
            labels = {
                "gpu": str(gpu % 8),
                "UUID": f"GPU-{gpu:08d}-0000-0000-0000-000000000000",
                "pci_bus_id": "00000000:31:00.0",
                "device": f"nvidia{gpu % 8}",
                "modelName": "NVIDIA A100-SXM4-80GB",
                "Hostname": f"node-{gpu // 8}",
                "DCGM_FI_DRIVER_VERSION": "535.104.05",
                "container": "trainer",
                "namespace": f"team-{gpu % 7}",
                "pod": f"job-{gpu}-abcde",
            }
            timestamps = [T0_MS + 15_000 * step for step in range(steps)]
            out.append(
                RecordedSeries(metric, labels, timestamps, [float((gpu * s) % 100) + 0.25 for s in range(steps)])
            )
    return out


def main() -> None:
    """Print write and parse speed for text and OpenMetrics, repeated and distinct series."""
    for case, gpus, steps in (("repeated series", 500, 100), ("distinct series", 50_000, 1)):
        series = recording(gpus, steps)
        for writer, fmt in ((write_text_exposition, "text"), (write_openmetrics, "openmetrics")):
            buffer = io.StringIO()
            writer(series, buffer)
            data = buffer.getvalue().encode()
            lines = data.count(b"\n")
            best = min(_timed(data) for _ in range(3))
            size_mb = len(data) / 1e6
            print(f"{case:16} {fmt:11} {lines:>8,} lines {size_mb:5.1f} MB {best:6.3f} s {lines / best:>9,.0f} lines/s")


def _timed(data: bytes) -> float:
    start = time.perf_counter()
    parse_exposition(data)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
