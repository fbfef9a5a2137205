"""Verdict check for detection changes: the same scan inputs through two versions of the detectors, compared.

`capture DIR` scans a set of scenarios (the bundled demo fleet, generated scorecard and random fleets, the real
dcgm-exporter scrapes and the Alibaba trace replay when `../shared/data/real` is present, each with its own
window) and pickles, per scenario, exactly what the scan hands to detection: cluster state, telemetry, common
settings, power limits, detector settings. `dump DIR OUT.json` runs detection (join → detectors → supersession →
merged replicas, as `ScanService` does) over every captured scenario with the code on `PYTHONPATH` and writes every
finding and no-verdict as canonical JSON (sorted keys; lists sorted). Two dumps, one per code version, compared
with `cmp`, must be identical:

    PYTHONPATH=shared:. python -m bench.detect_verdicts capture /tmp/detect/scen
    (cd /work/main && PYTHONPATH=shared:. .venv/bin/python -m bench.detect_verdicts dump /tmp/detect/scen /tmp/main.json)
    PYTHONPATH=shared:. python -m bench.detect_verdicts dump /tmp/detect/scen /tmp/branch.json && cmp /tmp/main.json /tmp/branch.json

(main has no copy of this script: run the branch's file with main's `shared/` first on the path.)
"""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"


def _captured(run: Any) -> list[tuple[Any, ...]]:
    """Run `run()` (one or more scans) and return what each scan handed to detection."""
    import gpuwaste.services.scan as scan

    got: list[tuple[Any, ...]] = []
    # the scan service calls the join as `join` (`build_context` before the alias was removed): wrap whichever it has
    name = "join" if hasattr(scan, "join") else "build_context"
    real_build, real_run = getattr(scan, name), scan.run_detectors
    pending: dict[str, Any] = {}

    def build(cluster: Any, telemetry: Any, common: Any, *, power_limits_w: Any = None) -> Any:
        pending["in"] = (cluster, telemetry, common, power_limits_w)
        return real_build(cluster, telemetry, common, power_limits_w=power_limits_w)

    def detect(ctx: Any, by_name: Any, enabled: Any = None) -> Any:
        got.append((*pending.pop("in"), by_name, None if enabled is None else list(enabled)))
        return real_run(ctx, by_name, enabled)

    setattr(scan, name, build)
    scan.run_detectors = detect  # type: ignore[assignment]
    try:
        run()
    finally:
        setattr(scan, name, real_build)
        scan.run_detectors = real_run
    return got


def _scan_recording(path: Path, window_s: int | None = None, at_offset_s: int = 0) -> None:
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig

    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    cfg, _ = local.recording_config(cfg, sources, config_given=False)
    assert sources.recording is not None
    at = sources.recording.end_time() - timedelta(seconds=at_offset_s)
    local.scan_service(sources, cfg, window_s=window_s).scan(at=at)


def scenarios(workdir: Path) -> dict[str, Any]:
    """Scenario name → a callable that runs its scan(s)."""
    from gpuwaste.bootstrap import local
    from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording

    out: dict[str, Any] = {"demo": lambda: _scan_recording(local.demo_recording()),
                           "demo-30m": lambda: _scan_recording(local.demo_recording(), 1800),
                           "demo-at-minus-20m": lambda: _scan_recording(local.demo_recording(), 3600, 1200)}
    for layout, nodes, seed in (("scorecard", 1, 7), ("scorecard", 3, 11), ("random", 60, 1), ("random", 60, 2),
                                ("random", 120, 3), ("random", 40, 4)):
        d = workdir / f"{layout}-{nodes}-{seed}"
        if not d.exists():
            write_recording(generate_fleet(FleetSpec(layout=layout, nodes=nodes, seed=seed, cluster=f"{layout}-{nodes}")), d, compress=True)
        out[d.name] = lambda d=d: _scan_recording(d)
        out[d.name + "-20m"] = lambda d=d: _scan_recording(d, 1200)
    for prom in sorted((REAL / "scrapes").glob("*.prom")):
        out["real-" + prom.stem] = lambda prom=prom: _scan_recording(prom)
    trace = REAL / "traces" / "alibaba-gentd26"
    if (trace / "pod_gpu_duty_cycle_anon.tar.gz").exists():
        def alibaba() -> None:
            from gpuwaste.commands.replay import scan_window, whole_trace_window_s
            from gpuwaste.sources.alibaba import AlibabaReplaySource, load_trace

            source = AlibabaReplaySource(load_trace(trace), gpu_model="NVIDIA A10G", instance_type="g5.xlarge")
            t = source.trace
            scan_window(source, at=t.end, window_s=whole_trace_window_s(t))
            for hours in (1, 3, 6):
                at = t.start + timedelta(hours=hours)
                while at <= t.end:
                    scan_window(source, at=at, window_s=hours * 3600)
                    at += timedelta(hours=hours * 2)
        out["alibaba"] = alibaba
    return out


def capture(workdir: Path) -> None:
    """Scan every scenario and pickle its detection inputs into `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="detect-verdicts-") as tmp:
        for name, run in scenarios(Path(tmp)).items():
            inputs = _captured(run)
            with (workdir / f"{name}.pkl").open("wb") as fh:
                pickle.dump(inputs, fh, protocol=pickle.HIGHEST_PROTOCOL)
            print(f"{name}: {len(inputs)} scan(s), {sum(len(i[1].gpus) for i in inputs)} devices", flush=True)


def dump(workdir: Path, out: Path) -> None:
    """Detection over every captured scenario, as canonical JSON."""
    from gpuwaste.detectors import run_detectors
    from gpuwaste.join import join
    from gpuwaste.services.scan import merge_replicas

    result: dict[str, Any] = {}
    total = 0
    for pkl in sorted(workdir.glob("*.pkl")):
        with pkl.open("rb") as fh:
            inputs = pickle.load(fh)  # noqa: S301 - our own capture
        scans = []
        for cluster, telemetry, common, limits, by_name, enabled in inputs:
            ctx = join(cluster, telemetry, common, power_limits_w=limits)
            r = run_detectors(ctx, by_name, enabled)
            findings = merge_replicas(list(r.findings))
            scans.append({
                "at": telemetry.eval_time.isoformat(), "window_s": telemetry.window_s,
                "findings": sorted((f.model_dump(mode="json") for f in findings), key=lambda f: json.dumps(f, sort_keys=True)),
                "no_verdict": sorted([n.detector, n.subject, n.reason] for n in r.no_verdict),
            })
            total += len(findings)
        result[pkl.stem] = scans
        print(f"{pkl.stem}: {sum(len(s['findings']) for s in scans)} findings, {sum(len(s['no_verdict']) for s in scans)} no-verdicts")
    out.write_text(json.dumps(result, sort_keys=True, indent=1) + "\n")
    print(f"total {total} findings in {sum(len(v) for v in result.values())} scans → {out}")


def main(argv: list[str]) -> int:
    """`capture DIR` or `dump DIR OUT.json`."""
    if len(argv) == 2 and argv[0] == "capture":
        capture(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "dump":
        dump(Path(argv[1]), Path(argv[2]))
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
