"""Benchmark helper: one live scan (Prometheus + Kubernetes API) in its own process, report as JSON.

Run by `bench/run.py` as a child process so its peak memory (ru_maxrss from `os.wait4`) and CPU time
belong to the scan alone: `python -m bench.scan_once '<json args>'`. Prints one JSON object on stdout.
The wall and CPU time cover the scan call only (imports and adapter construction are reported apart).
With `"cluster_state_preread": true` the cluster state is read once before the timed scan and handed to it
already read (a source that returns it at once), so that scan's wall time minus the same scan's wall time with the
read is what the read adds to the scan (it runs on a second thread, so its own duration is not that).
Peak memory is the child's own `VmHWM` (peak RSS since exec), read at the end: `ru_maxrss` of a child
also counts the forked copy of the parent from before `exec`, which here holds the whole generated fleet.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any


def _vm(field: str) -> float:
    """A /proc/self/status memory field in MB (VmHWM: this process's peak RSS since exec)."""
    with Path("/proc/self/status").open() as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


class _Given:
    """A cluster-state source that hands over a state read earlier (`cluster_state_preread`)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def cluster_state(self, *, at: datetime) -> Any:
        """The state read earlier, whatever `at`."""
        del at
        return self.state


def main(argv: list[str]) -> int:
    """Run one scan as described by the JSON in argv[1] and print its measurements."""
    args = json.loads(argv[1])
    t_import = time.perf_counter()
    from gpuwaste.bootstrap.local import live_sources, scan_service
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.settings import ClusterConfig, KubernetesSettings, PrometheusSettings, ScanSettings

    cluster = ClusterConfig(
        name=args["cluster"],
        prometheus=PrometheusSettings(url=args["prometheus"], concurrency=args.get("concurrency", 4), timeout_s=120),
        kubernetes=KubernetesSettings(mode="kubeconfig", kubeconfig=args["kubeconfig"]),
        cluster_state=args.get("cluster_state", "kubernetes"),
    )
    config = GpuWasteConfig(clusters=[cluster], scan=ScanSettings(window_s=args["window_s"], scrape_interval_s=args["step_s"]))
    sources = live_sources(cluster, config)
    service = scan_service(sources, config, window_s=args["window_s"], priced=True)
    import_s = time.perf_counter() - t_import
    rss_before_mb = _vm("VmRSS")
    at = datetime.fromisoformat(args["at"])
    preread_s = None
    if args.get("cluster_state_preread"):
        p0 = time.perf_counter()
        service.cluster_source = _Given(sources.cluster.cluster_state(at=at))
        preread_s = time.perf_counter() - p0
    profiler = None
    if args.get("profile"):  # a cProfile of the timed scan, written to that path (for finding hot spots)
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    c0, t0 = time.process_time(), time.perf_counter()
    report = service.scan(at=at, scan_id="bench", shard=args.get("shard", 0), shard_count=args.get("shard_count", 1))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args["profile"])
    vm_hwm_mb = _vm("VmHWM")
    kinds: dict[str, int] = {}
    for f in report.findings:
        kinds[f.kind.value] = kinds.get(f.kind.value, 0) + 1
    out = {
        "wall_s": wall,
        "cpu_s": cpu,
        "setup_s": import_s,
        "rss_before_scan_mb": rss_before_mb,
        "peak_rss_mb": vm_hwm_mb,
        "timings_s": report.timings_s,
        "query_count": report.query_count,
        "findings": len(report.findings),
        "findings_by_kind": kinds,
        "no_verdict": len(report.no_verdict),
        "physical_gpus": report.inventory.physical_gpus,
        "pods_holding_gpus": report.inventory.pods_holding_gpus,
        "nodes": report.inventory.nodes,
        "usd_per_day": float(sum((f.usd_per_day or 0) for f in report.findings)),
        "plan": report.telemetry_quality.get("plan"),
        "cluster_state_preread_s": preread_s,
    }
    if args.get("dump_findings"):
        out["findings_json"] = [f.model_dump(mode="json") for f in report.findings]
    if args.get("dump_keys"):  # what a sharded scan must reproduce: fingerprint, kind, GPU-hours, dollars, money owner
        out["finding_keys"] = sorted([f.fingerprint, f.kind.value, str(f.wasted_gpu_hours), str(f.usd_per_day), f.money_owner or ""]
                                     for f in report.findings)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
