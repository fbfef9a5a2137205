"""Cluster-state benchmark (issue 13 §4): the Kubernetes API (raw JSON) and kube-state-metrics (six PromQL queries).

For each size (default 1,000 and 10,000 GPUs) it generates the bench's random fleet (`bench.run.make_fleet`),
serves its objects from the fake kube-apiserver, writes the same cluster as kube-state-metrics v2 series
(`Fleet.ksm_series`, one sample a minute over 1 h 10 min) and backfills a real Prometheus with them (promtool). Then
a child process (its own interpreter, so the fake apiserver does not share its GIL) reads the cluster state
`--repeats` times from each source: `KubernetesClusterSource.cluster_state` (pages of 500, `_preload_content=False`,
`json.loads`, no client model objects) and `PrometheusKsmSource.cluster_state` (window 1 h; six instant queries,
4 in flight), with the cyclic garbage collector paused as a scan pauses it (`--gc-on` leaves it on). The median
wall time of each is compared with the scan's wall time at 10,000 GPUs: `--scan-s`, else the 10,004-GPU scan with
the recording rules recorded in bench/RESULTS.md (`make bench`). Per KSM query wall times are printed under the table.

Run: `PYTHONPATH=shared:. .venv/bin/python bench/cluster_state.py [--sizes 1000,10000] [--repeats 3] [--scan-s S]
[--workdir DIR] [--profile N] [--gc-on]`, or against servers already running (the dev harness):
`... bench/cluster_state.py --urls /work/dev/10000/urls.json [--pids KUBE_PID,PROMETHEUS_PID] [--repeats 3]`. `--workdir` keeps the backfilled Prometheus data and the fleet's objects
for the next run (the fleet is deterministic); `--profile N` reads each source once more under cProfile and prints
its N costliest functions. Prints a table (markdown) on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "shared", ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

TARGET_SHARE = 0.10


class _TimedQueries:
    """The Prometheus client with the wall time of each KSM query recorded (what → seconds, the latest read)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.url = inner.url
        self.matchers = inner.matchers
        self.seconds: dict[str, float] = {}

    def instant_query(self, promql: str, *, at: datetime | None, what: str = "query") -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.instant_query(promql, at=at, what=what)
        finally:
            self.seconds[what] = time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc; 0 when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _profile(source: Any, at: datetime, top: int) -> str:
    """One more read under cProfile: the `top` functions by own time and by cumulative time."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    source.cluster_state(at=at)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def child(args: dict[str, Any]) -> dict[str, Any]:
    """Read the cluster state `repeats` times from each source; wall seconds per read, and what was read."""
    from datetime import timedelta

    from gpuwaste.models.settings import KubernetesSettings, PrometheusSettings
    from gpuwaste.sources.ksm import PrometheusKsmSource
    from gpuwaste.sources.kubernetes import KubernetesClusterSource
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    at = datetime.fromisoformat(args["at"])
    out: dict[str, Any] = {}
    api = KubernetesClusterSource.from_settings(KubernetesSettings(mode="kubeconfig", kubeconfig=args["kubeconfig"], timeout_s=120),
                                            cluster="bench")
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=args["prometheus"], timeout_s=120), cluster="bench")
    timed = _TimedQueries(prom)
    ksm = PrometheusKsmSource(timed, cluster="bench", window=timedelta(seconds=args["window_s"]), scrape_interval_s=60)
    # the server's CPU: the fake apiserver runs in the parent process (idle otherwise) unless named, Prometheus in its own
    servers = {"api": int(args.get("kube_pid") or os.getppid()), "ksm": int(args["prometheus_pid"])}
    for name, source in (("api", api), ("ksm", ksm)):
        walls, cpus, server_cpus = [], [], []
        state = None
        for _ in range(args["repeats"]):
            if args.get("gc_paused", True):  # as a scan reads it: services/scan.py pauses the cyclic collector
                gc.disable()
            s0 = _cpu_s(servers[name])
            c0, t0 = time.process_time(), time.perf_counter()
            state = source.cluster_state(at=at)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            server_cpus.append(_cpu_s(servers[name]) - s0)
            gc.enable()
            gc.collect()
        assert state is not None
        out[name] = {"wall_s": walls, "cpu_s": cpus, "server_cpu_s": server_cpus, "pods": len(state.pods), "holding": sum(p.holds_gpus for p in state.pods),
                     "nodes": len(state.nodes), "exporters": len(state.exporter_pods)}
        if args.get("profile"):
            sys.stderr.write(f"\n===== cProfile: {name} =====\n{_profile(source, at, int(args['profile']))}")
    out["ksm"]["queries"] = ksm.query_count
    out["ksm"]["query_s"] = timed.seconds
    return out


def bench_size(gpus: int, repeats: int, workroot: Path, profile: int = 0, gc_paused: bool = True) -> dict[str, Any]:
    """Build, serve and backfill one fleet (or reuse what an earlier run kept in `workroot`); measure both sources in
    a child process."""
    from bench.run import EVAL_TS, WINDOW_S, backfill, kube_objects, log, make_fleet, prometheus
    from gpuwaste.sources.exposition import write_openmetrics
    from gpuwaste.sources.ksm import KSM_METRICS
    from tests.servers.kube_api import FakeKubeApi, write_kubeconfig

    work = workroot / f"g{gpus}"
    data_dir = work / "data"
    kept = work / "fleet.json"
    if kept.exists():  # an earlier run with the same --workdir: the fleet is deterministic, its backfill reused
        log(f"{gpus} GPUs: reusing {work}")
        saved = json.loads(kept.read_text())
        objects, gpu_count, series_count = saved["objects"], saved["gpus"], saved["ksm_series"]
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        fleet = make_fleet(gpus, "lean")
        series = fleet.ksm_series()
        om = work / "ksm.om"
        with om.open("w") as fh:
            write_openmetrics(series, fh, types=dict.fromkeys(KSM_METRICS, "gauge"))
        samples = sum(len(s.values) for s in series)
        series_count = len(series)
        log(f"{gpus} GPUs: {series_count} KSM series, {samples} samples; backfilling")
        del series
        backfill(om, data_dir)
        om.unlink()
        objects = kube_objects(fleet)
        gpu_count = len({g.uuid for g in fleet.gpus})
        kept.write_text(json.dumps({"objects": objects, "gpus": gpu_count, "ksm_series": series_count}))
    kube = FakeKubeApi(pods=objects.pop("pods", []), nodes=objects.pop("nodes", []), others=objects).start()
    try:
        kubeconfig = write_kubeconfig(work / "kubeconfig", kube.url)
        with prometheus(data_dir) as (url, prom_proc, _ready):
            args = {"kubeconfig": str(kubeconfig), "prometheus": url, "repeats": repeats, "window_s": WINDOW_S,
                    "at": datetime.fromtimestamp(EVAL_TS, tz=UTC).isoformat(), "profile": profile, "gc_paused": gc_paused,
                    "prometheus_pid": prom_proc.pid}
            proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], capture_output=True, text=True,
                                  timeout=1800, cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}"}, check=False)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-3000:])
            if profile:
                sys.stderr.write(proc.stderr)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        kube.stop()
    result["gpus"] = gpu_count
    result["ksm_series"] = series_count
    return result


def against_running(urls: dict[str, Any], repeats: int, pids: str, *, profile: int = 0, gc_paused: bool = True) -> int:
    """Measure both sources against servers already running (e.g. `/work/dev/serve10k.py`); print one line each."""
    kube_pid, prom_pid = (int(x) for x in pids.split(","))
    args = {"kubeconfig": urls["kubeconfig"], "prometheus": urls["prometheus"], "repeats": repeats, "window_s": urls["window_s"],
            "at": urls["at"], "profile": profile, "gc_paused": gc_paused, "prometheus_pid": prom_pid, "kube_pid": kube_pid}
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], capture_output=True, text=True, timeout=1800, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}", "NO_PROXY": "127.0.0.1"}, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    if profile:
        sys.stderr.write(proc.stderr)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    load = os.getloadavg()
    print(f"Cluster state against {urls['prometheus']} and {urls['kubeconfig']} (load {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}); "
          f"{repeats} reads each, median (all); server CPU from /proc ({'given' if kube_pid or prom_pid else 'pids not given: 0'})")
    for name in ("api", "ksm"):
        r = result[name]

        def med(key: str, r: dict[str, Any] = r) -> str:
            return f"{statistics.median(r[key]):.2f} ({' '.join(f'{x:.2f}' for x in r[key])})"

        print(f"  {name}: wall s {med('wall_s')}; our CPU s {med('cpu_s')}; server CPU s {med('server_cpu_s')}; "
              f"pods {r['pods']} (holding {r['holding']}), nodes {r['nodes']}, exporters {r['exporters']}")
    return 0


def recorded_scan_s() -> float | None:
    """The 10,004-GPU scan wall time recorded in bench/RESULTS.md by `make bench` (None when not found)."""
    try:
        text = (ROOT / "bench" / "RESULTS.md").read_text()
    except OSError:
        return None
    # the scan with the shipped recording rules (the scan's configuration wherever the rules are installed): the
    # second `| scan s |` row of the side-by-side table (the first is the plan without the rules), its last column
    rows = re.findall(r"^\| scan s\s*\|(.*)\|\s*$", text, flags=re.MULTILINE)
    if len(rows) >= 2:
        cells = [c.strip() for c in rows[1].split("|")]
        try:
            return float(cells[-1])
        except ValueError:
            return None
    return None


def main() -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scan-s", type=float, default=None, help="the scan's wall time at 10,000 GPUs (default: bench/RESULTS.md)")
    parser.add_argument("--gc-on", action="store_true",
                        help="leave the cyclic garbage collector on during the reads (a scan pauses it: services/scan.py)")
    parser.add_argument("--workdir", default=None, help="keep the backfilled data here and reuse it on the next run")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="one more read of each source under cProfile; print its N costliest functions (stderr)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--urls", default=None, metavar="URLS_JSON",
                        help="read from servers already running (the dev harness' urls.json: prometheus, kubeconfig, at, window_s) "
                             "instead of building a fleet; --pids KUBE_PID,PROMETHEUS_PID names the server processes for their CPU")
    parser.add_argument("--pids", default="0,0", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        sys.stdout.write(json.dumps(child(json.loads(opts.child))) + "\n")
        return 0
    if opts.urls:
        return against_running(json.loads(Path(opts.urls).read_text()), opts.repeats, opts.pids, profile=opts.profile, gc_paused=not opts.gc_on)
    scan_s = opts.scan_s or recorded_scan_s()
    rows = []
    with contextlib.ExitStack() as stack:
        root = Path(opts.workdir) if opts.workdir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuwaste-bench-cs-")))
        for gpus in (int(x) for x in opts.sizes.split(",")):
            rows.append(bench_size(gpus, opts.repeats, root, opts.profile, gc_paused=not opts.gc_on))
    load = os.getloadavg()
    print(f"Cluster state ({platform.node()}, {os.cpu_count()} CPUs, load {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}, "
          f"Python {platform.python_version()}); median of {opts.repeats} reads, wall seconds (CPU seconds of the reading process); "
          f"cyclic garbage collector {'on' if opts.gc_on else 'paused, as in a scan'}")
    print(f"Scan wall time at 10,000 GPUs used for the share: {scan_s if scan_s is not None else 'unknown'} s "
          f"({'--scan-s' if opts.scan_s else 'bench/RESULTS.md'}); target ≤ {TARGET_SHARE:.0%} each")
    print()
    print("| GPUs | GPU + exporter pods | nodes | Kubernetes API (raw JSON) | share of scan | kube-state-metrics (queries) | share of scan | KSM series |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        api_s, ksm_s = statistics.median(r["api"]["wall_s"]), statistics.median(r["ksm"]["wall_s"])
        api_cpu, ksm_cpu = statistics.median(r["api"]["cpu_s"]), statistics.median(r["ksm"]["cpu_s"])
        big = bool(scan_s) and r["gpus"] >= 10_000

        def share(seconds: float, big: bool = big) -> str:
            return f"{seconds / scan_s:.1%}" if big and scan_s else "–"

        print(f"| {r['gpus']:,} | {r['api']['pods'] + r['api']['exporters']:,} | {r['api']['nodes']:,} | {api_s:.2f} s ({api_cpu:.2f}) | "
              f"{share(api_s)} | {ksm_s:.2f} s ({ksm_cpu:.2f}) ({r['ksm']['queries']}) | {share(ksm_s)} | {r['ksm_series']:,} |")
        per_query = ", ".join(f"{w.removeprefix('kube-state-metrics ')} {t:.2f} s" for w, t in r["ksm"].get("query_s", {}).items())
        print(f"  KSM queries at {r['gpus']:,} GPUs (last read, 4 in flight): {per_query}")
        print(f"  server CPU per read (median): fake kube-apiserver {statistics.median(r['api']['server_cpu_s']):.2f} s, "
              f"Prometheus {statistics.median(r['ksm']['server_cpu_s']):.2f} s; all reads (wall s): API "
              + " ".join(f"{x:.2f}" for x in r["api"]["wall_s"]) + ", KSM " + " ".join(f"{x:.2f}" for x in r["ksm"]["wall_s"]))
        if r["api"]["pods"] != r["ksm"]["pods"] or r["api"]["holding"] != r["ksm"]["holding"]:
            print(f"  MISMATCH at {r['gpus']} GPUs: API {r['api']}, KSM {r['ksm']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
