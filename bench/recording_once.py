"""Benchmark helper: one scan of a recording (the offline path) in its own process, report as JSON.

`python -m bench.recording_once '<json args>'` with {"path": recording dir, "window_s": …}. Prints wall time, CPU
time, the process's peak RSS (`VmHWM`) and its RSS before the scan (interpreter + imports), the GPUs seen and the
findings. The recording path streams (parse → bucket statistics → discard samples), so its peak should follow the
series count, not the samples.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

from bench.scan_once import _vm


def main(argv: list[str]) -> int:
    """Scan the recording named in argv[1] and print the measurements."""
    args = json.loads(argv[1])
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.services.scan import ScanService
    from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource

    path = Path(args["path"])
    telemetry = RecordingTelemetrySource(path)
    service = ScanService(cluster_source=RecordingClusterSource(path), telemetry_source=telemetry,
                          window=timedelta(seconds=args["window_s"]), price_book=PriceBook.bundled())
    rss_before = _vm("VmRSS")
    at = telemetry.end_time()
    c0, t0 = time.process_time(), time.perf_counter()
    report = service.scan(at=at, scan_id="bench-recording")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _vm("VmHWM"), "rss_before_scan_mb": rss_before, "timings_s": report.timings_s,
           "physical_gpus": report.inventory.physical_gpus, "findings": len(report.findings),
           "plan": report.telemetry_quality.get("plan"), "sample_interval_s": report.telemetry_quality.get("sample_interval_s")}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
