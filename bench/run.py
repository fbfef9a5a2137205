"""Fleet-scale benchmark (`make bench`): 100, 1,000 and 10,000 GPUs, each side by side with the floor and a naive strategy.

For each size it generates a random fleet with the fleet generator (DCGM series over 1 h + 10 min at a 30 s
step), writes it as OpenMetrics in a streaming way, backfills a real Prometheus with promtool (one data dir
per size; the `.om` file is deleted right after), serves the cluster objects from the fake kube-apiserver,
and measures:

* **ours**: one full scan (cluster state, telemetry, detection, pricing) through the product's own
  composition root (`bootstrap.local.live_sources`), run in a child process so that its wall time, CPU
  time and peak RSS (`ru_maxrss` from `os.wait4`) are its own; queries and bytes are counted at a local
  counting proxy, which also records the exact requests;
* **floor**: the same requests replayed with plain `http.client`, 4 connections, JSON merely parsed, and
  once more with `stats=all` to sum Prometheus's own `evalTotalTime`;
* **naive**: one query per pod and per signal (see `bench/strategies.py`), on loopback and through
  `bench/latency_proxy.py` adding 2 ms per request (ours is re-run through the same proxy for that ratio).

Then the local chain (price → dedupe → notify, embedded store), SQS/DynamoDB calls per finding on moto,
Slack messages per scan, and a projection past one machine (`bench/chain.py`, `bench/projection.py`).

Run: `make bench`, or `PYTHONPATH=shared:. .venv/bin/python bench/run.py [--sizes 100,1000,10000] [--quick]`.
Prints a table and writes `bench/RESULTS.md` (and `--json` when given).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "shared", ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from bench.fleet_om import write_openmetrics_streaming  # noqa: E402
from bench.latency_proxy import LatencyProxy  # noqa: E402
from bench.report import cell as fmt  # noqa: E402
from bench.strategies import NAIVE_SIGNALS, issue, naive_plan  # noqa: E402
from gpuwaste.fleet.generator import generate_fleet  # noqa: E402
from gpuwaste.fleet.recording import Fleet  # noqa: E402
from gpuwaste.fleet.spec import BASE_TS, INSTANCES, FleetSpec  # noqa: E402

RULES_FILE = ROOT / "deploy" / "prometheus" / "gpuwaste-recording-rules.yml"
from tests.servers.kube_api import FakeKubeApi, write_kubeconfig  # noqa: E402
from tests.servers.ports import free_port  # noqa: E402

WINDOW_S = 3600
HISTORY_S = WINDOW_S + 600
STEP_S = 30
EVAL_TS = BASE_TS + 4800
CONCURRENCY = 4
PROXY_DELAY_S = 0.002
PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces", "ReplicaSet": "replicasets", "Deployment": "deployments",
           "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs", "CronJob": "cronjobs"}
TARGETS = {"rules_scan_over_minimal": 1.3, "raw_scan_over_plan_floor": 1.5, "raw_plan_floor_over_minimal": 2.0, "peak_mb": 512,
           "queries": 30, "naive_over_ours_2ms": 4.0, "recording_mb_base": 200, "recording_kb_per_gpu": 60,
           "chain_s_10k": 10.0, "sqs_per_finding": 0.2, "cluster_state_share": 0.10, "dynamodb_per_finding": 2.0}


def log(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# -- fleet ---------------------------------------------------------------------------------------------


def nodes_for(gpus: int, spec: FleetSpec) -> int:
    """Smallest node count whose instance-type cycle holds at least `gpus` GPUs."""
    total, n = 0, 0
    while total < gpus:
        total += INSTANCES[spec.instance_types[n % len(spec.instance_types)]][0]
        n += 1
    return max(n, 1)


def make_fleet(gpus: int, metrics: str) -> Fleet:
    """A random-layout fleet of about `gpus` GPUs with a 1 h + 10 min history at 30 s."""
    base = FleetSpec(layout="random", cluster=f"bench-{gpus}", metrics=metrics, step_s=STEP_S, history_s=HISTORY_S,
                     eval_time=datetime.fromtimestamp(EVAL_TS, tz=UTC))
    return generate_fleet(base.model_copy(update={"nodes": nodes_for(gpus, base)}))


def kube_objects(fleet: Fleet) -> dict[str, list[dict[str, Any]]]:
    """Fleet objects grouped by the fake apiserver's resource plurals."""
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in fleet.objects:
        plural = PLURALS.get(obj.get("kind", ""))
        if plural:
            out.setdefault(plural, []).append(obj)
    return out


def gpu_pods(fleet: Fleet) -> list[tuple[str, str]]:
    """(namespace, pod) of every running pod holding a GPU, sorted."""
    return sorted({g.owner[:2] for g in fleet.gpus if g.owner is not None})


# -- processes -----------------------------------------------------------------------------------------


def run_child(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 900) -> tuple[int, str, str, float, float, float]:
    """Run a child; return (rc, stdout, stderr, wall s, cpu s user+sys, peak RSS MB) from its own rusage."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"), wall,
                usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def backfill(om: Path, data_dir: Path) -> dict[str, float]:
    """promtool backfill; returns its wall time and peak RSS.

    Raises:
        RuntimeError: promtool failed.
    """
    base = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q"]
    rc, out, err, wall, cpu, rss = run_child([*base, "--max-block-duration=24h", str(om), str(data_dir)])
    if rc != 0 and "max-block-duration" in err:
        shutil.rmtree(data_dir, ignore_errors=True)
        rc, out, err, wall, cpu, rss = run_child([*base, str(om), str(data_dir)])
    if rc != 0:
        raise RuntimeError(f"promtool failed rc={rc}: {err[-2000:] or out[-2000:]}")
    return {"backfill_s": wall, "backfill_cpu_s": cpu, "backfill_rss_mb": rss}


@contextlib.contextmanager
def prometheus(data_dir: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], float]]:
    """Start Prometheus on the backfilled data dir; yield (url, process, seconds to ready)."""
    workdir = data_dir.parent
    (workdir / "prom.yml").write_text("global: {}\n")
    port = free_port()
    log_path = workdir / "prometheus.log"
    t0 = time.perf_counter()
    with log_path.open("wb") as logf:
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={workdir / 'prom.yml'}", f"--storage.tsdb.path={data_dir}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y", "--log.level=warn",
             "--query.lookback-delta=5m", "--query.max-samples=200000000", "--query.timeout=5m"],
            stdout=logf, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus not ready after 120 s")
            time.sleep(0.02)
        yield url, proc, time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def vm_hwm_mb(pid: int) -> float:
    """Peak RSS of a running process (VmHWM), MB; 0 when unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def scan_child(prom_url: str, kubeconfig: Path, cluster: str, cluster_state: str = "kubernetes", *, preread: bool = False,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One scan in a child process (`bench/scan_once.py`); cluster state from the Kubernetes API unless told otherwise;
    `preread`: the cluster state is read before the timed scan and handed to it (what the read adds = the difference).

    Raises:
        RuntimeError: the scan failed.
    """
    args = {"prometheus": prom_url, "kubeconfig": str(kubeconfig), "cluster": cluster, "window_s": WINDOW_S, "step_s": STEP_S,
            "at": datetime.fromtimestamp(EVAL_TS, tz=UTC).isoformat(), "concurrency": CONCURRENCY, "cluster_state": cluster_state,
            "cluster_state_preread": preread, **(extra or {})}
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    rc, out, err, wall, cpu, rss = run_child([sys.executable, "-m", "bench.scan_once", json.dumps(args)], env=env)
    if rc != 0:
        raise RuntimeError(f"scan failed rc={rc}:\n{err[-4000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result.update(process_wall_s=wall, process_cpu_s=cpu, process_maxrss_mb=rss)
    return result


def cluster_state_cost(source: str, with_read: list[dict[str, Any]], given: list[dict[str, Any]]) -> dict[str, Any]:
    """What reading the cluster state costs the scan (rules plan), from scans with the read and the same scans with the
    state handed in already read: its own wall time inside the scan (it overlaps the telemetry read on a second
    thread), the wall time it adds (best with − best given) and the CPU seconds it adds to the scan process."""
    best, base = min(with_read, key=lambda r: r["wall_s"]), min(given, key=lambda r: r["wall_s"])
    added = best["wall_s"] - base["wall_s"]
    return {f"{source}_cs_own_s": best["timings_s"].get("cluster_state"), f"{source}_cs_scan_s": best["wall_s"],
            f"{source}_cs_given_scan_s": base["wall_s"], f"{source}_cs_added_s": added,
            f"{source}_cs_added_share": added / best["wall_s"] if best["wall_s"] else None,
            f"{source}_cs_own_share": (best["timings_s"].get("cluster_state") or 0) / best["wall_s"] if best["wall_s"] else None,
            f"{source}_cs_added_cpu_s": min(r["cpu_s"] for r in with_read) - min(r["cpu_s"] for r in given),
            f"{source}_cs_runs_s": [r["wall_s"] for r in with_read], f"{source}_cs_given_runs_s": [r["wall_s"] for r in given],
            f"{source}_cs_findings": best["findings_by_kind"], f"{source}_cs_given_findings": base["findings_by_kind"]}


# -- generated data, cached ---------------------------------------------------------------------------

#: What the generated telemetry depends on: a change to any of these files makes a new cache entry.
GENERATOR_SOURCES = (ROOT / "shared" / "gpuwaste" / "fleet", ROOT / "bench" / "fleet_om.py", ROOT / "shared" / "gpuwaste" / "sources" / "exposition")
CACHE_ROOT = ROOT / "bench" / ".cache"


def generator_hash(gpus: int, metrics: str) -> str:
    """A short hash of what the generated, backfilled data depends on: sources, sizes, time constants, promtool's version."""
    h = hashlib.sha256(f"{gpus}|{metrics}|{WINDOW_S}|{HISTORY_S}|{STEP_S}|{EVAL_TS}|{BASE_TS}".encode())
    for src in GENERATOR_SOURCES:
        for f in sorted(src.rglob("*.py") if src.is_dir() else [src]):
            h.update(f.relative_to(ROOT).as_posix().encode())
            h.update(f.read_bytes())
    with contextlib.suppress(OSError, IndexError):
        h.update(subprocess.run(["promtool", "--version"], capture_output=True, text=True, check=False).stdout.encode())
    return h.hexdigest()[:16]


class Prepared:
    """One fleet's generated data: the recording (OpenMetrics + cluster.json) and the promtool-backfilled TSDB.

    Attributes:
        root: the entry's folder. status: "hit" (reused), "miss" (generated now).
        meta: the generation figures (series, samples, OpenMetrics MB, write and backfill times), as measured when generated.
    """

    def __init__(self, root: Path, status: str) -> None:
        self.root = root
        self.status = status
        self.meta: dict[str, Any] = json.loads((root / "meta.json").read_text())
        rules_hash = hashlib.sha256(RULES_FILE.read_bytes()).hexdigest()[:12]
        self.rule_blocks = root / f"rule-blocks-{rules_hash}"
        self._rules_meta = root / f"rule-blocks-{rules_hash}.json"

    @property
    def recording(self) -> Path:
        """The recording folder (telemetry.om, cluster.json, recording.json)."""
        return self.root / "recording"

    @property
    def data(self) -> Path:
        """The backfilled TSDB (raw series only; copy it before starting Prometheus on it)."""
        return self.root / "data"

    @property
    def meta_rules(self) -> dict[str, Any]:
        """Figures of the recording-rules backfill, when it was done for this rules file."""
        return json.loads(self._rules_meta.read_text()) if self._rules_meta.exists() else {}

    def save_rules_meta(self, meta: dict[str, Any]) -> None:
        """Remember the rules backfill figures beside its blocks."""
        self._rules_meta.write_text(json.dumps(meta))


def prepared_data(fleet: Fleet, gpus: int, metrics: str, cache_root: Path) -> Prepared:
    """The fleet's recording and backfilled TSDB under `cache_root`, generated only when no entry matches.

    An entry is keyed by the size, the metric set and `generator_hash`; it is written under a temporary name and
    renamed when complete, so an interrupted run leaves no half entry behind.
    """
    root = cache_root / f"gpus-{gpus}-{metrics}-{generator_hash(gpus, metrics)}"
    if (root / "meta.json").exists() and (root / "data").is_dir() and (root / "recording" / "telemetry.om").exists():
        log(f"{gpus} GPUs: reusing the generated, backfilled data in {root}")
        return Prepared(root, "hit")
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    recdir = tmp / "recording"
    recdir.mkdir(parents=True)
    om = recdir / "telemetry.om"
    meta: dict[str, Any] = {}
    t = time.perf_counter()
    stats = write_openmetrics_streaming(fleet.iter_series(), om)
    (recdir / "cluster.json").write_text(json.dumps(fleet.kube_list()))
    (recdir / "recording.json").write_text(json.dumps({"cluster": fleet.spec.cluster, "eval_time": datetime.fromtimestamp(EVAL_TS, tz=UTC).isoformat(),
                                                      "window_s": WINDOW_S, "scrape_interval_s": STEP_S, "format": "openmetrics"}))
    meta.update(series=stats.series, samples=stats.samples, om_mb=stats.bytes / 1e6, write_om_s=time.perf_counter() - t)
    log(f"{gpus} GPUs: {stats.series} series, {stats.samples} samples, {stats.bytes / 1e6:.0f} MB OpenMetrics in {meta['write_om_s']:.1f} s")
    meta.update(backfill(om, tmp / "data"))
    meta["tsdb_mb"] = sum(f.stat().st_size for f in (tmp / "data").rglob("*") if f.is_file()) / 1e6
    log(f"{gpus} GPUs: backfilled in {meta['backfill_s']:.1f} s (promtool peak {meta['backfill_rss_mb']:.0f} MB), TSDB {meta['tsdb_mb']:.1f} MB")
    meta["generated"] = datetime.now(tz=UTC).isoformat(timespec="seconds")
    (tmp / "meta.json").write_text(json.dumps(meta))
    tmp.rename(root)
    return Prepared(root, "miss")


# -- one size ------------------------------------------------------------------------------------------


def bench_size(gpus: int, *, metrics: str, repeats: int, naive_max_pods: int, workroot: Path, cache_root: Path | None) -> dict[str, Any]:
    """Measure everything for one fleet size; returns the row of the report."""
    row: dict[str, Any] = {"target_gpus": gpus, "metrics": metrics}
    t = time.perf_counter()
    fleet = make_fleet(gpus, metrics)
    pods = gpu_pods(fleet)
    row.update(gpus=len({g.uuid for g in fleet.gpus}), nodes=fleet.spec.nodes, pods=len(pods),
               unheld_gpus=sum(1 for g in fleet.gpus if g.owner is None), generate_objects_s=time.perf_counter() - t)
    workdir = workroot / f"gpus-{gpus}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    entry = prepared_data(fleet, gpus, metrics, cache_root or workdir / "prepared")
    row.update(entry.meta)
    row["cache"] = "reused from the cache" if entry.status == "hit" else "generated now"
    row.update(recording_path(entry.recording))
    log(f"{gpus} GPUs: recording path {row['recording_s']:.1f} s, peak {row['recording_peak_mb']:.0f} MB "
        f"({row['recording_kb_per_gpu']:.0f} KB per GPU over 200 MB)")
    if cache_root is None:
        shutil.rmtree(entry.recording)
    data_dir = workdir / "data"
    shutil.copytree(entry.data, data_dir)  # Prometheus writes into its data dir (WAL, lock, compaction): the cached copy stays pristine

    objects = kube_objects(fleet)
    kube = FakeKubeApi(pods=objects.pop("pods", []), nodes=objects.pop("nodes", []), others=objects).start()
    # the fake writes headers and body separately on a keep-alive connection: without TCP_NODELAY every
    # request waits ~40 ms for the delayed ACK, a cost of the test server that no real apiserver has
    kube._httpd.RequestHandlerClass.disable_nagle_algorithm = True  # type: ignore[union-attr]
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", kube.url)
    try:
        with prometheus(data_dir) as (prom_url, prom_proc, ready_s), LatencyProxy(prom_url) as counter, \
                LatencyProxy(prom_url, delay_s=PROXY_DELAY_S) as slow:
            row["prometheus_ready_s"] = ready_s
            # 1. ours through the counting proxy: queries, bytes, the exact plan (also warms Prometheus up)
            counted = scan_child(counter.url, kubeconfig, fleet.spec.cluster)
            plan = [(q.path, list(q.params)) for q in counter.queries]
            minimal = minimal_plan()
            row.update(queries=len(counter.queries), http_requests=counter.requests, query_count_reported=counted["query_count"], bytes_received=counter.bytes_out,
                       findings=counted["findings"], findings_by_kind=counted["findings_by_kind"], scan_gpus_seen=counted["physical_gpus"],
                       usd_per_day=counted["usd_per_day"], ours_cold_s=counted["wall_s"])
            kube_requests_before = len(kube.requests)
            # 2. floor and ours, alternating; keep the best of each
            ours_runs, floor_runs, minimal_runs = [counted], [], []
            for _ in range(repeats):
                minimal_runs.append(issue(prom_url, minimal, concurrency=CONCURRENCY))
                floor_runs.append(issue(prom_url, plan, concurrency=CONCURRENCY))
                ours_runs.append(scan_child(prom_url, kubeconfig, fleet.spec.cluster))
            row["plan"] = counted.get("plan")
            row["minimal_floor_s"] = min(r.wall_s for r in minimal_runs)
            row["minimal_floor_runs_s"] = [r.wall_s for r in minimal_runs]
            row["minimal_bytes"] = minimal_runs[0].bytes
            floor_gzip = issue(prom_url, plan, concurrency=CONCURRENCY, gzip=True)
            row["floor_gzip_s"] = floor_gzip.wall_s
            row["kube_requests_per_scan"] = (len(kube.requests) - kube_requests_before) // max(repeats, 1)
            row["load_average"] = os.getloadavg()
            best = min(ours_runs, key=lambda r: r["wall_s"])
            floor = min(floor_runs, key=lambda r: r.wall_s)
            row.update(ours_s=best["wall_s"], ours_cpu_s=best["cpu_s"], ours_timings_s=best["timings_s"],
                       peak_rss_mb=max(r["peak_rss_mb"] for r in ours_runs), rss_before_scan_mb=best["rss_before_scan_mb"],
                       ours_runs_s=[r["wall_s"] for r in ours_runs[1:]], floor_s=floor.wall_s, floor_cpu_s=floor.cpu_s,
                       floor_runs_s=[r.wall_s for r in floor_runs])
            telemetry_s = best["timings_s"].get("telemetry", 0.0)
            row["ours_telemetry_s"] = telemetry_s
            row["ours_over_floor"] = telemetry_s / floor.wall_s if floor.wall_s else None
            row["scan_over_floor"] = best["wall_s"] / floor.wall_s if floor.wall_s else None
            row["scan_over_minimal"] = best["wall_s"] / row["minimal_floor_s"] if row["minimal_floor_s"] else None
            row["plan_floor_over_minimal"] = floor.wall_s / row["minimal_floor_s"] if row["minimal_floor_s"] else None
            # 3. Prometheus's own evaluation time for the plan (stats=all), sequentially summed
            evaluated = issue(prom_url, plan, concurrency=1, stats=True)
            row["prom_eval_s"] = evaluated.eval_s
            row["floor_bytes"] = floor.bytes
            row["per_query"] = [{**q, "query": _short(q["query"])} for q in evaluated.per_request]
            row["plan_series"] = evaluated.series
            # 3b. the minimal plan's own evaluation, for the A/B
            mini_eval = issue(prom_url, minimal, concurrency=1, stats=True)
            row["previous_plan"] = {"floor_s": row["minimal_floor_s"], "eval_s": mini_eval.eval_s, "bytes": mini_eval.bytes,
                                    "series": mini_eval.series, "sequential_wall_s": mini_eval.wall_s}
            row["prom_eval_sequential_wall_s"] = evaluated.wall_s
            # split of our telemetry wall time: Prometheus evaluation (spread over the connections), transfer+parse at the floor, our own work
            prom_share = min(evaluated.eval_s / CONCURRENCY, floor.wall_s)
            row["split_s"] = {"prometheus_eval": prom_share, "transfer_and_json": max(floor.wall_s - prom_share, 0.0),
                              "our_work": max(best["wall_s"] - floor.wall_s, 0.0)}
            # 4. naive, on loopback and through the 2 ms proxy
            sample = pods[:naive_max_pods]
            nplan = naive_plan(sample, at=EVAL_TS, window_s=WINDOW_S)
            scale = len(pods) / len(sample) if sample else 1.0
            naive_lo = issue(prom_url, nplan, concurrency=CONCURRENCY, collect_uuids=True)
            naive_slow = issue(slow.url, nplan, concurrency=CONCURRENCY)
            ours_slow = scan_child(slow.url, kubeconfig, fleet.spec.cluster)
            row.update(naive_pods_measured=len(sample), naive_queries=len(naive_plan(pods, at=EVAL_TS, window_s=WINDOW_S)),
                       naive_extrapolated=scale != 1.0, naive_loopback_s=naive_lo.wall_s * scale, naive_2ms_s=naive_slow.wall_s * scale,
                       ours_2ms_s=ours_slow["wall_s"], naive_bytes=int(naive_lo.bytes * scale))
            row["naive_over_ours_loopback"] = row["naive_loopback_s"] / best["wall_s"]
            row["naive_over_ours_2ms"] = row["naive_2ms_s"] / ours_slow["wall_s"]
            row["naive_unseen_gpus"] = row["unheld_gpus"]
            if scale == 1.0:
                row["naive_gpus_seen"] = len(naive_lo.uuids)
                row["naive_unseen_gpus"] = row["gpus"] - len(naive_lo.uuids)
            row["prometheus_peak_rss_mb"] = vm_hwm_mb(prom_proc.pid)
            # 5. the shipped recording rules, evaluated over the data by promtool (the server answers the rule queries)
            rule_blocks = entry.rule_blocks
            if rule_blocks.exists():
                row["rules_backfill_s"] = entry.meta_rules.get("rules_backfill_s")
                row["rules_cache"] = "hit"
            else:
                tmp_blocks = rule_blocks.with_name(rule_blocks.name + ".tmp")
                shutil.rmtree(tmp_blocks, ignore_errors=True)
                t = time.perf_counter()
                rc, out, err, _w, _c, _r = run_child(["promtool", "tsdb", "create-blocks-from", "rules", f"--start={BASE_TS}", f"--end={EVAL_TS}",
                                                       f"--url={prom_url}", f"--output-dir={tmp_blocks}", "--eval-interval=5m", str(RULES_FILE)])
                if rc != 0:
                    raise RuntimeError(f"promtool rules backfill failed rc={rc}: {err[-2000:]}")
                row["rules_backfill_s"] = time.perf_counter() - t
                row["rules_cache"] = "miss"
                tmp_blocks.rename(rule_blocks)
                entry.save_rules_meta({"rules_backfill_s": row["rules_backfill_s"]})
        for block in rule_blocks.iterdir():
            if block.is_dir():
                shutil.copytree(block, data_dir / block.name)
        log(f"{gpus} GPUs: rules backfilled in {row['rules_backfill_s']:.1f} s; restarting Prometheus with them")
        with prometheus(data_dir) as (prom_url, prom_proc, ready_s), LatencyProxy(prom_url) as counter, \
                LatencyProxy(prom_url, delay_s=PROXY_DELAY_S) as slow:
            counted = scan_child(counter.url, kubeconfig, fleet.spec.cluster)
            rules_plan = [(q.path, list(q.params)) for q in counter.queries]
            ours_runs, floor_runs, minimal_runs, given_runs = [counted], [], [], []
            for _ in range(repeats):
                minimal_runs.append(issue(prom_url, minimal, concurrency=CONCURRENCY))
                floor_runs.append(issue(prom_url, rules_plan, concurrency=CONCURRENCY))
                ours_runs.append(scan_child(prom_url, kubeconfig, fleet.spec.cluster))
                given_runs.append(scan_child(prom_url, kubeconfig, fleet.spec.cluster, preread=True))  # the API state handed in
            best = min(ours_runs, key=lambda r: r["wall_s"])
            row.update(cluster_state_cost("api", ours_runs[1:] or ours_runs, given_runs))
            mfloor = min(r.wall_s for r in minimal_runs)
            row["rules"] = {"plan": counted.get("plan"), "queries": len(counter.queries), "findings": counted["findings"],
                            "scan_s": best["wall_s"], "telemetry_s": best["timings_s"].get("telemetry", 0.0), "timings_s": best["timings_s"],
                            "runs_s": [r["wall_s"] for r in ours_runs], "peak_rss_mb": max(r["peak_rss_mb"] for r in ours_runs),
                            "plan_floor_s": min(r.wall_s for r in floor_runs), "plan_floor_runs_s": [r.wall_s for r in floor_runs],
                            "minimal_floor_s": mfloor, "minimal_floor_runs_s": [r.wall_s for r in minimal_runs],
                            "bytes": floor_runs[0].bytes, "usd_per_day": counted["usd_per_day"], "load_average": os.getloadavg()}
            row["rules"]["scan_over_minimal"] = best["wall_s"] / mfloor if mfloor else None
            row["rules"]["plan_floor_over_minimal"] = row["rules"]["plan_floor_s"] / mfloor if mfloor else None
            ours_slow = scan_child(slow.url, kubeconfig, fleet.spec.cluster)
            row["rules"]["ours_2ms_s"] = ours_slow["wall_s"]
            row["rules"]["naive_over_ours_2ms"] = row["naive_2ms_s"] / ours_slow["wall_s"]
            # 6. Prometheus-only mode: cluster state from the kube-state-metrics series of the same Prometheus
            ksm_runs, ksm_given = [], []
            for _ in range(max(repeats, 1)):  # with the read and with the state handed in, alternately
                ksm_runs.append(scan_child(prom_url, kubeconfig, fleet.spec.cluster, cluster_state="kube-state-metrics"))
                ksm_given.append(scan_child(prom_url, kubeconfig, fleet.spec.cluster, cluster_state="kube-state-metrics", preread=True))
            ksm_only = min(ksm_runs, key=lambda r: r["wall_s"])
            row.update(cluster_state_cost("ksm", ksm_runs, ksm_given))
            row["rules"]["ksm_cluster_state_s"] = ksm_only["timings_s"].get("cluster_state")
            row["rules"]["ksm_scan_s"] = ksm_only["wall_s"]
            row["rules"]["ksm_findings"] = ksm_only["findings"]
            row["ksm_cluster_state_s"] = row["rules"]["ksm_cluster_state_s"]
            row["ksm_share_of_scan"] = (row["ksm_cluster_state_s"] or 0) / ksm_only["wall_s"] if ksm_only["wall_s"] else None
            row.update({f"rules_{k}": v for k, v in row["rules"].items()})
    finally:
        kube.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if cache_root is None:
            shutil.rmtree(entry.root, ignore_errors=True)
    log(f"{gpus} GPUs: ours {row['ours_s']:.2f} s, floor {row['floor_s']:.2f} s, naive(2ms) {row['naive_2ms_s']:.2f} s, "
        f"{row['queries']} queries, peak {row['peak_rss_mb']:.0f} MB")
    return row


def cli_startup() -> dict[str, Any]:
    """`gpuwaste --help` and a scan of the demo recording, fresh processes (`bench/startup.py`): median/worst wall, CPU, heavy imports."""
    import statistics

    from bench import startup

    out: dict[str, Any] = {"load_average": os.getloadavg()}
    for name, argv in startup.COMMANDS.items():
        times, cpu = startup.wall(argv)
        _top, modules = startup.imports(argv)
        out[name] = {"median_s": statistics.median(times), "worst_s": max(times), "cpu_s": statistics.median(cpu), "runs": len(times),
                     "target_s": startup.TARGETS_S[name], "heavy_imports": sorted({m.split(".")[0] for m in modules if m.split(".")[0] in startup.HEAVY}),
                     "modules": len(modules)}
    out["summary"] = f"--help {out['--help']['median_s']:.2f} / demo scan {out['scan demo']['median_s']:.2f}"
    return out


def minimal_plan() -> list[tuple[str, list[tuple[str, str]]]]:
    """Issue 13's *minimal floor*: avg, max and count of each GPU metric over the window, one instant query per metric."""
    from gpuwaste.sources.promql import minimal_queries

    return [("/api/v1/query", [("query", q), ("time", f"{EVAL_TS:.3f}")]) for q in minimal_queries(window_s=WINDOW_S)]


def recording_path(recdir: Path) -> dict[str, Any]:
    """Scan the recording (the offline path) in a child process: wall, peak RSS, and KB per GPU above 200 MB.

    Raises:
        RuntimeError: the scan failed.
    """
    # a 10,000-GPU recording is several GB: above the default size limit on recordings (sources/limits.py)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}", "GPUWASTE_RECORDING_MAX_MB": "100000"}
    rc, out, err, wall, cpu, rss = run_child([sys.executable, "-m", "bench.recording_once", json.dumps({"path": str(recdir), "window_s": WINDOW_S})],
                                             env=env, timeout=3600)
    if rc != 0:
        raise RuntimeError(f"recording scan failed rc={rc}:\n{err[-4000:]}")
    r = json.loads(out.strip().splitlines()[-1])
    gpus = max(r["physical_gpus"], 1)
    return {"recording_s": r["wall_s"], "recording_cpu_s": r["cpu_s"], "recording_peak_mb": r["peak_rss_mb"],
            "recording_rss_before_mb": r["rss_before_scan_mb"], "recording_gpus": r["physical_gpus"], "recording_findings": r["findings"],
            "recording_kb_per_gpu": max(r["peak_rss_mb"] - 200, 0) * 1024 / gpus, "recording_target_mb": 200 + 60 * gpus / 1024}


def _short(query: str) -> str:
    """What a plan query reads, for the per-query table: the metric (its first name or `__name__` alternative), the bucket
    statistic of a single-statistic range query, or "pod metrics (n)" for the query reading several metrics."""
    import re

    from gpuwaste.sources.promql import METRIC_LABEL

    if METRIC_LABEL in query:
        return f"pod metrics ({query.count(METRIC_LABEL)})"
    m = re.search(r'__name__=~"([A-Za-z0-9_:]+)', query) or re.search(r"\(([A-Za-z_:][A-Za-z0-9_:]*)[\[{]", query)
    name = m.group(1) if m else query[:60]
    bare = re.match(r"(count|sum|max)_over_time\(", query)
    return f"{name} ({bare.group(1)})" if bare else name


# -- report --------------------------------------------------------------------------------------------


COLUMNS = [
    ("GPUs", "gpus", 0), ("pods", "pods", 0), ("findings", "findings", 0),
    ("**without recording rules** (plan)", "plan", 0), ("PromQL queries", "queries", 0),
    ("MB received", "mb_received", 1), ("scan s", "ours_s", 2), ("telemetry s", "ours_telemetry_s", 2), ("CPU s", "ours_cpu_s", 2),
    ("peak MB", "peak_rss_mb", 0), ("Prom eval s", "prom_eval_s", 2), ("plan floor s", "floor_s", 2),
    ("minimal floor s (same run)", "minimal_floor_s", 2), ("plan floor ÷ minimal floor", "plan_floor_over_minimal", 2),
    ("scan ÷ plan floor", "scan_over_floor", 2), ("scan ÷ minimal floor", "scan_over_minimal", 2),
    ("**with the shipped recording rules** (plan)", "rules_plan", 0), ("PromQL queries ", "rules_queries", 0),
    ("scan s ", "rules_scan_s", 2), ("telemetry s ", "rules_telemetry_s", 2), ("peak MB ", "rules_peak_rss_mb", 0),
    ("plan floor s ", "rules_plan_floor_s", 2), ("minimal floor s (same run) ", "rules_minimal_floor_s", 2),
    ("plan floor ÷ minimal floor ", "rules_plan_floor_over_minimal", 2), ("**scan ÷ minimal floor**", "rules_scan_over_minimal", 2),
    ("**recording path** s", "recording_s", 1), ("recording path peak MB", "recording_peak_mb", 0),
    ("recording path KB per GPU above 200 MB", "recording_kb_per_gpu", 0), ("recording path target MB (200 + 60 KB/GPU)", "recording_target_mb", 0),
    ("**per-pod querying** s (loopback)", "naive_loopback_s", 2), ("naive ÷ ours (loopback)", "naive_over_ours_loopback", 1),
    ("naive s (+2 ms)", "naive_2ms_s", 2), ("naive ÷ ours (+2 ms), no rules", "naive_over_ours_2ms", 1),
    ("naive ÷ ours (+2 ms), with rules", "rules_naive_over_ours_2ms", 1),
    ("GPUs naive cannot see", "naive_unseen_gpus", 0),
    ("KSM-only cluster state s (Prometheus-only scan, rules)", "ksm_cluster_state_s", 2), ("KSM cluster state ÷ that scan", "ksm_share_of_scan", 2),
    ("Prometheus-only scan s / findings", "rules_ksm_scan_s", 2),
    ("**cluster state cost** (rules): API read's own wall s in the scan", "api_cs_own_s", 2),
    ("API: scan s with the read / with the state handed in", "api_cs_pair", 0), ("API: wall the read adds s (÷ scan)", "api_cs_added", 0),
    ("API: CPU s the read adds to the scan process", "api_cs_added_cpu_s", 2),
    ("KSM read's own wall s in the scan", "ksm_cs_own_s", 2),
    ("KSM: scan s with the read / with the state handed in", "ksm_cs_pair", 0), ("KSM: wall the read adds s (÷ scan)", "ksm_cs_added", 0),
    ("KSM: CPU s the read adds to the scan process", "ksm_cs_added_cpu_s", 2),
    ("CLI start-up s, median (once per run; targets 0.5 / 1.5)", "cli_startup", 0),
    ("load average 1/5/15 min after the timed runs", "load_text", 0), ("generated data", "cache", 0),
]


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: one column per size, one line per measure."""
    for r in rows:
        r.setdefault("mb_received", r.get("bytes_received", 0) / 1e6)
        if r.get("load_average"):
            r["load_text"] = " / ".join(f"{x:.1f}" for x in r["load_average"])
        r.setdefault("cache", "generated")
        for src in ("api", "ksm"):
            if r.get(f"{src}_cs_added_s") is not None:
                r[f"{src}_cs_pair"] = f"{r[f'{src}_cs_scan_s']:.2f} / {r[f'{src}_cs_given_scan_s']:.2f}"
                r[f"{src}_cs_added"] = f"{r[f'{src}_cs_added_s']:.2f} ({r[f'{src}_cs_added_share']:.1%})"
    head = "| measure | " + " | ".join(f"{r['gpus']:,} GPUs" for r in rows) + " |"
    sep = "|---|" + "---:|" * len(rows)
    lines = [head, sep]
    for title, key, digits in COLUMNS:
        cells = []
        for r in rows:
            v = r.get(key)
            cell = fmt(float(v) if isinstance(v, float) else v, digits) if not isinstance(v, float) or digits else f"{v:,.0f}"
            if key.startswith("naive") and key != "naive_unseen_gpus" and r.get("naive_extrapolated"):
                cell += "*"
            cells.append(cell)
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Cores, memory, OS, Python, Prometheus version."""
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    try:
        prom = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        prom = "unknown"
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "memory_gib": round(mem_kb / 1024 / 1024, 1), "cpu": cpu, "os": platform.platform(),
            "python": platform.python_version(), "prometheus": prom}


def pipeline_scale(sizes: str, clusters: str, workroot: Path) -> dict[str, Any]:
    """`bench/pipeline_scale.py` in a child process (its own moto server in another): its lines, its numbers, its wall.

    Raises:
        RuntimeError: the run failed.
    """
    out = workroot / "pipeline.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    rc, stdout, err, wall, cpu, rss = run_child([sys.executable, "-m", "bench.pipeline_scale", "--sizes", sizes, "--clusters", clusters,
                                                 "--json", str(out)], env=env, timeout=6 * 3600)
    if rc != 0:
        raise RuntimeError(f"pipeline_scale failed rc={rc}:\n{err[-4000:]}")
    return {"sizes": sizes, "clusters": clusters, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "lines": stdout.strip(),
            "results": json.loads(out.read_text()), "load_average": os.getloadavg()}


def scan_targets_text(report: dict[str, Any]) -> str:
    """Issue 23 7(d): the remaining scan targets at every size of this run, side by side."""
    t = report["targets"]
    lines = ["scan targets side by side (issue 23 7(d), this run):"]
    for r in report.get("sizes", []):
        ru = r.get("rules", {})
        ratio, naive_r, naive_raw = ru.get("scan_over_minimal"), r.get("rules_naive_over_ours_2ms"), r.get("naive_over_ours_2ms")
        if ratio is None:
            continue
        best_naive = max(naive_r or 0, naive_raw or 0)
        lines.append(f"  {r['gpus']:>6,} GPUs: shipped rules scan ÷ minimal floor {ratio:.2f}× ({ru['scan_s']:.2f} s ÷ {ru['minimal_floor_s']:.2f} s; "
                     f"target ≤ {t['rules_scan_over_minimal']}: {'met' if ratio <= t['rules_scan_over_minimal'] else 'MISSED'}); "
                     f"per-pod querying ÷ ours at +2 ms {naive_r or 0:.2f}× with rules ({r['naive_2ms_s']:.2f} s ÷ {ru.get('ours_2ms_s') or 0:.2f} s), "
                     f"{naive_raw or 0:.2f}× without (target ≥ {t['naive_over_ours_2ms']}: "
                     f"{'met' if best_naive >= t['naive_over_ours_2ms'] else 'MISSED'}); load {' / '.join(f'{x:.1f}' for x in ru.get('load_average', ()))}")
    return "\n".join(lines)


def scale_text(report: dict[str, Any], *, markdown: bool = False) -> str:
    """Issue 23 item 7, as `make bench` prints it: (a) whole vs shards, (b) the pipeline on moto, (c) the sizing table
    and scale-out projection, (d) the scan targets side by side. `markdown`: for RESULTS.md (code fences; (c) is
    the section of its own there)."""
    from bench import shards
    from bench.sizing import markdown_table, projection_text

    fence = "```\n" if markdown else ""
    parts = []
    if report.get("shards"):
        parts.append("(a) " + shards.summary_line(report["shards"]))
    if report.get("pipeline"):
        p = report["pipeline"]
        parts.append(f"(b) pipeline on moto, `python -m bench.pipeline_scale --sizes {p['sizes']} --clusters {p['clusters']}` "
                     f"({p['wall_s']:.0f} s wall, load after {p['load_average'][0]:.1f}):\n\n{fence}{p['lines']}\n{fence}".rstrip())
    if markdown:
        parts.append("(c) the sizing table and the scale-out projection: section *Sizing per shard and scale-out* above.")
    else:
        parts.append("(c) sizing per shard and scale-out (bench/sizing.py, modelled from the measured sizes):\n" + markdown_table()
                     + "\n\n" + projection_text())
    parts.append("(d) " + scan_targets_text(report).replace("\n  ", "\n- " if markdown else "\n  "))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `make bench`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10004", help="comma-separated GPU counts (10,004: the fleet bench.shards uses, one cache entry)")
    parser.add_argument("--metrics", choices=("full", "lean"), default="full", help="fleet generator metric set")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of ours and of the floor per size (best kept)")
    parser.add_argument("--naive-max-pods", type=int, default=1000, help="naive strategy: pods measured (time extrapolated beyond)")
    parser.add_argument("--chain-findings", type=int, default=10_000, help="findings through the local chain")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, small chain/moto/Slack cases")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md", help="Markdown report to write")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw numbers as JSON here")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_ROOT,
                        help="keeps the generated recording and backfilled TSDB per (size, metrics, generator sources) for the next run")
    parser.add_argument("--no-cache", action="store_true", help="generate everything again and keep nothing")
    parser.add_argument("--no-chain", action="store_true", help="skip the local chain, moto and Slack part (scan rows only)")
    parser.add_argument("--no-startup", action="store_true", help="skip the CLI start-up measure")
    parser.add_argument("--shards", type=int, default=4,
                        help="issue 23 7(a): the largest size scanned whole and as this many shards (0: skip)")
    parser.add_argument("--pipeline-sizes", default="1000,4000,10000,40000",
                        help="issue 23 7(b): findings in one cluster through price and dedupe on moto ('' to skip)")
    parser.add_argument("--pipeline-clusters", default="50x2500",
                        help="issue 23 7(b): CLUSTERSxFINDINGS scanned in one tick through the same pipeline ('' to skip)")
    parser.add_argument("--render-from", type=Path, default=None,
                        help="measure nothing: print and write the report of an earlier run's --json file")
    args = parser.parse_args(argv)
    if args.render_from:
        return write_report(json.loads(args.render_from.read_text()), args)
    if args.quick:
        args.repeats = 1
        args.chain_findings = min(args.chain_findings, 100)
        args.shards = min(args.shards, 2)
        args.pipeline_sizes = "10,30" if args.pipeline_sizes.strip() else ""
        args.pipeline_clusters = "2x10" if args.pipeline_clusters.strip() else ""
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    started = datetime.now(tz=UTC)
    t_all = time.perf_counter()
    workroot = args.workdir or Path(tempfile.mkdtemp(prefix="gpuwaste-bench-"))
    workroot.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine(), "started": started.isoformat(timespec="seconds"), "load_average_start": os.getloadavg(),
                              "command": " ".join(["bench/run.py", *(argv if argv is not None else sys.argv[1:])]),
                              "window_s": WINDOW_S, "history_s": HISTORY_S, "step_s": STEP_S, "concurrency": CONCURRENCY,
                              "naive_signals": list(NAIVE_SIGNALS), "sizes": [], "targets": TARGETS}
    try:
        for gpus in sizes:
            report["sizes"].append(bench_size(gpus, metrics=args.metrics, repeats=args.repeats, naive_max_pods=args.naive_max_pods,
                                              workroot=workroot, cache_root=None if args.no_cache else args.cache_dir))
        from bench import chain, projection

        if not args.no_startup:
            log("CLI start-up (bench/startup.py)")
            report["startup"] = cli_startup()
            for row in report["sizes"]:
                row["cli_startup"] = report["startup"]["summary"]
        if not args.no_chain:
            log("local chain, moto, Slack")
            report["chain"] = chain.run_all(findings=args.chain_findings, quick=args.quick, workdir=workroot)
            report["projection"] = projection.project(report)
        if args.shards > 1 and sizes:
            from bench import shards

            log(f"{max(sizes)} GPUs whole and as {args.shards} shards (bench/shards.py)")
            report["shards"] = shards.run(max(sizes), args.shards, workroot / "shards" if args.no_cache else args.cache_dir)
        if args.pipeline_sizes.strip() or args.pipeline_clusters.strip():
            log(f"pipeline on moto: {args.pipeline_sizes} findings, {args.pipeline_clusters} (bench/pipeline_scale.py)")
            report["pipeline"] = pipeline_scale(args.pipeline_sizes, args.pipeline_clusters, workroot)
        report["load_average_end"] = os.getloadavg()
    finally:
        if args.workdir is None:
            shutil.rmtree(workroot, ignore_errors=True)
    report["total_s"] = time.perf_counter() - t_all
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return write_report(report, args)


def write_report(report: dict[str, Any], args: argparse.Namespace) -> int:
    """Print the table and the issue 23 item 7 lines; write RESULTS.md."""
    text = table(report["sizes"])
    sys.stdout.write(text + "\n")
    from bench import chain as chain_mod
    from bench import projection as projection_mod
    from bench.report import render

    if "chain" in report:
        sys.stdout.write(chain_mod.summary_lines(report["chain"]) + "\n")
        sys.stdout.write(projection_mod.summary_lines(report["projection"]) + "\n")
    sys.stdout.write(scale_text(report) + "\n")
    args.results.write_text(render(report, text) + "\n## Scale-out proof (issue 23 item 7)\n\n" + scale_text(report, markdown=True) + "\n")
    log(f"done in {report['total_s']:.0f} s; wrote {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
