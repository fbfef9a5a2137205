"""Bench: the share ledger's cost in a scan (services.showback.scan_ledger) on a generated random fleet.

    PYTHONPATH=shared:. .venv/bin/python bench/showback_ledger.py [NODES]

Prints the join time, the ledger time (with the funnel and the FOCUS rows), GPUs, ledger lines and whether the
conservation check holds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.join import join
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.focus import focus_rows
from gpuwaste.services.showback import funnel_figures, scan_ledger


def main(nodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_recording(generate_fleet(FleetSpec(layout="random", nodes=nodes, seed=3, cluster="bench")), Path(tmp) / "r")
        sources = local.recording_sources(path, GpuWasteConfig())
        assert sources.recording is not None
        at = sources.recording.end_time()
        window_s = sources.recording.meta.window_s or 3600
        cluster = sources.cluster.cluster_state(at=at)
        telemetry = sources.telemetry.telemetry(at=at, window=timedelta(seconds=window_s))
    t0 = time.perf_counter()
    ctx = join(cluster, telemetry)
    t1 = time.perf_counter()
    sl = scan_ledger(ctx, PriceBook.bundled())
    t2 = time.perf_counter()
    funnel_figures(sl, "team")
    rows = focus_rows(sl, [])
    t3 = time.perf_counter()
    c = sl.ledger.conservation
    print(f"nodes={nodes} gpus={c.gpus} lines={len(sl.ledger.lines)} join={t1 - t0:.2f}s ledger={t2 - t1:.2f}s "
          f"funnel+focus={t3 - t2:.2f}s focus_rows={len(rows)} holds={c.holds}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
