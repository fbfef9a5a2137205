"""Benchmark: detection CPU of one scan (join → detectors → supersession → merged replicas), without any I/O.

The inputs are one scan's cluster state and telemetry, pickled once from a live read (the 10,004-GPU harness),
so the detection code can be timed, profiled and compared on exactly the same inputs:

    python -m bench.detect_speed capture /work/dev/10000/urls.json /tmp/detect/in-10004.pkl
    python -m bench.detect_speed time /tmp/detect/in-10004.pkl [--gpus 1000] [--repeat 3] [--profile 30]
    python -m bench.detect_speed dump /tmp/detect/in-10004.pkl OUT.json [--gpus 1000]

`time` prints the CPU seconds (process time, cyclic collector paused as in a scan) of building the joined view and
of the detectors per repeat, and the best. `--gpus N` keeps the first nodes (sorted by name) holding N GPUs, with
their pods, for a smaller fleet of the same shape. `dump` writes every finding and no-verdict as canonical JSON
(sorted keys, sorted list) so two versions of the code can be compared verdict for verdict.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any


def capture(urls_json: Path, out: Path) -> None:
    """Read cluster state and telemetry from a running harness (as `bench.scan_once` does) and pickle them."""
    from gpuwaste.bootstrap.local import live_sources, scan_service
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.settings import ClusterConfig, KubernetesSettings, PrometheusSettings, ScanSettings

    args = json.loads(urls_json.read_text())
    cluster = ClusterConfig(
        name=args["cluster"],
        prometheus=PrometheusSettings(url=args["prometheus"], concurrency=4, timeout_s=120),
        kubernetes=KubernetesSettings(mode="kubeconfig", kubeconfig=args["kubeconfig"]),
        cluster_state="kubernetes",
    )
    config = GpuWasteConfig(clusters=[cluster], scan=ScanSettings(window_s=args["window_s"], scrape_interval_s=args["step_s"]))
    service = scan_service(live_sources(cluster, config), config, window_s=args["window_s"], priced=True)
    timings: dict[str, float] = {}
    state, telemetry = service._read(datetime.fromisoformat(args["at"]), timings)  # noqa: SLF001 - the bench reads once
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as fh:
        pickle.dump((state, telemetry), fh, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"captured {len(telemetry.gpus)} devices, {len(state.pods)} pods, {len(state.nodes)} nodes → {out} ({timings})")


def load(path: Path, gpus: int | None) -> tuple[Any, Any]:
    """The pickled (cluster state, telemetry), cut to the first nodes holding `gpus` devices when given."""
    with path.open("rb") as fh:
        state, telemetry = pickle.load(fh)  # noqa: S301 - our own capture
    if gpus is None or gpus >= len(telemetry.gpus):
        return state, telemetry
    by_node: dict[str, list[Any]] = {}
    for g in telemetry.gpus:
        by_node.setdefault(g.hostname or "", []).append(g)
    keep: set[str] = set()
    kept: list[Any] = []
    for name in sorted(by_node):
        if len(kept) >= gpus:
            break
        keep.add(name)
        kept.extend(by_node[name])
    state = state.model_copy(update={
        "nodes": tuple(n for n in state.nodes if n.name in keep),
        "pods": tuple(p for p in state.pods if p.node_name in keep or p.node_name is None),
    })
    telemetry = telemetry.model_copy(update={"gpus": tuple(g for g in telemetry.gpus if (g.hostname or "") in keep)})
    return state, telemetry


def detect(state: Any, telemetry: Any) -> tuple[list[Any], list[Any], float, float]:
    """What `ScanService._scan` does between reading and pricing; returns findings, no-verdicts and the CPU seconds
    of the join and of the detectors."""
    from gpuwaste.detectors import DetectorSettings, run_detectors
    from gpuwaste.join import join
    from gpuwaste.pricing.power import power_limits_w
    from gpuwaste.services.scan import merge_replicas

    settings = DetectorSettings()
    c0 = time.process_time()
    ctx = join(state, telemetry, settings.common, power_limits_w=power_limits_w(g.model_name for g in telemetry.gpus))
    c1 = time.process_time()
    result = run_detectors(ctx, settings.by_name(), settings.enabled)
    findings = merge_replicas(list(result.findings))
    c2 = time.process_time()
    return findings, list(result.no_verdict), c1 - c0, c2 - c1


def canonical(findings: list[Any], no_verdict: list[Any]) -> dict[str, Any]:
    """Findings and no-verdicts as sorted JSON-able lists (nothing run-specific is in them)."""
    rows = sorted(json.dumps(f.model_dump(mode="json"), sort_keys=True) for f in findings)
    skipped = sorted(json.dumps([n.detector, n.subject, n.reason]) for n in no_verdict)
    return {"findings": [json.loads(r) for r in rows], "no_verdict": [json.loads(r) for r in skipped]}


def main(argv: list[str]) -> int:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="bench.detect_speed")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("urls_json", type=Path)
    c.add_argument("out", type=Path)
    t = sub.add_parser("time")
    t.add_argument("pickle", type=Path)
    t.add_argument("--gpus", type=int)
    t.add_argument("--repeat", type=int, default=3)
    t.add_argument("--profile", type=int, default=0, help="print the N costliest functions (cProfile, cumulative and own time)")
    d = sub.add_parser("dump")
    d.add_argument("pickle", type=Path)
    d.add_argument("out", type=Path)
    d.add_argument("--gpus", type=int)
    a = p.parse_args(argv)
    if a.cmd == "capture":
        capture(a.urls_json, a.out)
        return 0
    state, telemetry = load(a.pickle, a.gpus)
    gc.disable()  # as in a scan (models.collector.PAUSED_COLLECTOR)
    if a.cmd == "dump":
        findings, skipped, _, _ = detect(state, telemetry)
        a.out.write_text(json.dumps(canonical(findings, skipped), sort_keys=True, indent=1) + "\n")
        print(f"{len(findings)} findings, {len(skipped)} no-verdicts → {a.out}")
        return 0
    best = (float("inf"), float("inf"))
    for i in range(a.repeat):
        findings, skipped, join_s, detect_s = detect(state, telemetry)
        print(f"run {i + 1}: {len(telemetry.gpus)} devices, join {join_s:.3f} s CPU, detectors {detect_s:.3f} s CPU, "
              f"total {join_s + detect_s:.3f} s; {len(findings)} findings, {len(skipped)} no-verdicts", flush=True)
        if join_s + detect_s < sum(best):
            best = (join_s, detect_s)
        gc.collect()
    print(f"best: join {best[0]:.3f} + detectors {best[1]:.3f} = {sum(best):.3f} s CPU ({len(telemetry.gpus)} devices)")
    if a.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        detect(state, telemetry)
        prof.disable()
        for key in ("cumulative", "tottime"):
            pstats.Stats(prof, stream=sys.stdout).sort_stats(key).print_stats(a.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
