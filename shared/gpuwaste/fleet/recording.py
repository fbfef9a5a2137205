"""A generated fleet (`Fleet`), its telemetry series and the recording directory `write_recording` writes.

The series carry dcgm-exporter's label sets and the scenario's activity over the history; vLLM and cAdvisor series
come with the catalogue pods; the cluster objects are written as cluster.json and as kube-state-metrics series.
"""

from __future__ import annotations

import gzip
import io
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwaste.fleet.allocation_kinds import AllocationTruth
from gpuwaste.fleet.ksm_series import ksm_series
from gpuwaste.fleet.parts import TruthItem, _Gpu
from gpuwaste.fleet.spec import DRIVER, FleetSpec
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics


@dataclass
class Fleet:
    """A generated fleet: telemetry, cluster objects and ground truth."""

    spec: FleetSpec
    gpus: list[_Gpu]
    objects: list[dict[str, Any]]
    truth: list[TruthItem]
    extra_series: list[RecordedSeries] = field(default_factory=list)
    allocation: AllocationTruth | None = None  # the "allocation" layout's holders, infrastructure pods, GPU counts

    def iter_series(self) -> Iterator[RecordedSeries]:
        """Every telemetry series, generated lazily."""
        yield from _telemetry(self)
        yield from self.extra_series
        yield from self.ksm_series()

    def ksm_series(self) -> list[RecordedSeries]:
        """The cluster objects as kube-state-metrics v2 series over the history (none when `ksm_step_s` is 0)."""
        spec = self.spec
        if not spec.ksm_step_s:
            return []
        t_end = int(spec.eval_time.timestamp())
        times = list(range(t_end - (spec.history_s // spec.ksm_step_s - 1) * spec.ksm_step_s, t_end + 1, spec.ksm_step_s))
        return ksm_series(self.objects, [t * 1000 for t in times])

    def kube_list(self) -> dict[str, Any]:
        """The cluster objects as a `kubectl get … -o json` List."""
        return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": self.objects}

    def expected(self) -> list[TruthItem]:
        """Truth items that expect a finding."""
        return [t for t in self.truth if t.kind]


# -- telemetry --------------------------------------------------------------------------------------


def _activity(g: _Gpu, rng: random.Random, t: float, t0: float) -> float:
    s = g.scenario
    if s in ("idle", "free", "free_idle", "frozen"):
        return max(0.0, rng.gauss(0.002, 0.002)) if s != "frozen" else 0.0
    if s == "underused":
        return min(0.18, max(0.06, rng.gauss(0.11, 0.02)))
    if s == "bursty":
        phase = (t - t0) % 900
        return min(0.99, max(0.0, rng.gauss(0.85, 0.05))) if phase < 300 else max(0.0, rng.gauss(0.04, 0.01))
    if s == "checkpoint_pause":
        return 0.01 if 1200 <= (t - t0) < 1560 else min(0.99, max(0.2, rng.gauss(0.7, 0.08)))
    if s in _CATALOGUE_ACTIVITY:
        return _CATALOGUE_ACTIVITY[s](rng, t - t0)
    return min(0.99, max(0.25, rng.gauss(0.72, 0.1)))  # busy / gap


def _clip(lo: float, hi: float, v: float) -> float:
    return min(hi, max(lo, v))


_CATALOGUE_ACTIVITY = {
    "power_hog": lambda rng, dt: _clip(0.06, 0.14, rng.gauss(0.10, 0.015)),
    "low_bandwidth": lambda rng, dt: _clip(0.28, 0.42, rng.gauss(0.35, 0.03)),
    "stalled": lambda rng, dt: _clip(0.95, 0.99, rng.gauss(0.97, 0.005)),
    "oversized": lambda rng, dt: _clip(0.04, 0.16, rng.gauss(0.10, 0.02)),
    "cpu_starved": lambda rng, dt: _clip(0.5, 0.8, rng.gauss(0.65, 0.05)) if dt % 120 < 60 else _clip(0.0, 0.06, rng.gauss(0.02, 0.01)),
    "kv_pressure": lambda rng, dt: _clip(0.6, 0.95, rng.gauss(0.8, 0.05)),
    "serving_idle": lambda rng, dt: _clip(0.06, 0.10, rng.gauss(0.08, 0.008)),
    "data_stall": lambda rng, dt: 0.02 if 1800 <= dt < 2040 else _clip(0.25, 0.99, rng.gauss(0.72, 0.1)),
    "serving_ok": lambda rng, dt: _clip(0.3, 0.9, rng.gauss(0.6, 0.08)),
    "power_moderate": lambda rng, dt: _clip(0.06, 0.14, rng.gauss(0.10, 0.015)),
    "throttle_mild": lambda rng, dt: _clip(0.5, 0.8, rng.gauss(0.65, 0.05)) if dt % 120 < 60 else _clip(0.0, 0.06, rng.gauss(0.02, 0.01)),
}


def _labels(g: _Gpu, pod: tuple[str, str, str] | None) -> dict[str, str]:
    labels = {"gpu": str(g.index), "UUID": g.uuid, "pci_bus_id": f"00000000:{16 + g.index:02X}:00.0", "device": f"nvidia{g.index}", "modelName": g.model}
    if g.mig:
        labels["GPU_I_PROFILE"], labels["GPU_I_ID"] = g.mig[1], g.mig[0]
    labels[g.hostname_key] = g.hostname_value
    labels["DCGM_FI_DRIVER_VERSION"] = DRIVER
    labels.update(g.extra_labels)
    if g.label_style == "exported":
        labels.update({"container": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "pod": g.exporter_pod, "job": "nvidia-dcgm-exporter",
                       "instance": "10.244.0.7:9400"})
        if pod:
            labels.update({"exported_namespace": pod[0], "exported_pod": pod[1], "exported_container": pod[2]})
    elif g.label_style == "pod":
        ns, p, c = pod if pod else ("", "", "")
        labels.update({"container": c, "namespace": ns, "pod": p})
    return labels


#: Per-scenario signal shapes of the catalogue scenarios (activity x → value); absent keys keep the defaults
#: (tensor 0.6·x, DRAM 0.5·x, SM 0.93·x, power 9 % + 80 %·x of the limit, framebuffer 82 %).
_SHAPES: dict[str, dict[str, Any]] = {
    "power_hog": {"tensor": lambda x: 0.02, "dram": lambda x: 0.75 + (x - 0.1) * 0.2, "power": lambda x: 0.88 + (x - 0.1) * 0.1},
    "low_bandwidth": {"tensor": lambda x: x * 0.5, "dram": lambda x: 0.12 + (x - 0.35) * 0.1},
    "stalled": {"sm": lambda x: 0.14, "tensor": lambda x: 0.0, "dram": lambda x: 0.0, "power": lambda x: 0.17},
    "oversized": {"fb": 0.20},
    "power_moderate": {"dram": lambda x: 0.6, "power": lambda x: 0.70},
}


def _telemetry(fleet: Fleet) -> Iterator[RecordedSeries]:
    spec = fleet.spec
    t_end = spec.eval_time.timestamp()
    t0 = t_end - spec.history_s
    steps = int(spec.history_s // spec.step_s)
    times = [t0 + (k + 1) * spec.step_s for k in range(steps)]  # (t0, t_end]
    for g in fleet.gpus:
        rng = random.Random(f"{spec.seed}/{g.uuid}/{g.mig}")
        act = [_activity(g, rng, t, t0) for t in times]
        keep = list(range(len(times)))
        if g.scenario == "gap":
            keep = [k for k, t in enumerate(times) if not (t_end - 2400 <= t < t_end - 600)]
        owner_at: list[tuple[str, str, str] | None] = []
        for t in times:
            if g.stale_owner is not None:
                owner_at.append(g.stale_owner if t < t_end - 2400 + 600 else None)  # exporter cache keeps the label ~10 min (B10)
            else:
                owner_at.append(g.owner)
        ts_ms = [int(times[k] * 1000) for k in keep]

        def series(name: str, values: list[float], *, ts: list[int] = ts_ms, keep_idx: list[int] = keep,
                   g: _Gpu = g, owner_at: list[tuple[str, str, str] | None] = owner_at) -> Iterator[RecordedSeries]:
            # split into runs of identical owner labels (label changes create new series, B10)
            run_labels: dict[str, str] | None = None
            cur: RecordedSeries | None = None
            for j, k in enumerate(keep_idx):
                labels = _labels(g, owner_at[k])
                if labels != run_labels:
                    if cur is not None:
                        yield cur
                    cur = RecordedSeries(name=name, labels=labels)
                    run_labels = labels
                assert cur is not None
                cur.timestamps_ms.append(ts[j])
                cur.values.append(values[j])
            if cur is not None:
                yield cur

        a = [act[k] for k in keep]
        if g.scenario == "frozen":
            a = [0.0 for _ in keep]
        shape = _SHAPES.get(g.scenario, {})
        if g.signal_set in ("prof", "sm"):
            yield from series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", [round(x, 6) for x in a])
        if g.signal_set == "sm":
            sm_f = shape.get("sm")
            yield from series("DCGM_FI_PROF_SM_ACTIVE", [round(sm_f(x) if sm_f else x * 0.93, 6) for x in a])
        if g.mig is None:
            util = [float(min(100, round(x * 130))) if x > 0.01 else 0.0 for x in a]
            yield from series("DCGM_FI_DEV_GPU_UTIL", util)
        held = g.owner is not None or g.stale_owner is not None
        fb_used = g.fb_total * (shape.get("fb", 0.82) if held else 0.0) + (0 if g.scenario != "busy" else 512)
        if spec.metrics == "full" and g.signal_set != "util":
            tensor_f, dram_f = shape.get("tensor"), shape.get("dram")
            yield from series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", [round(tensor_f(x) if tensor_f else x * 0.6, 6) for x in a])
            yield from series("DCGM_FI_PROF_DRAM_ACTIVE", [round(dram_f(x) if dram_f else x * 0.5, 6) for x in a])
        yield from series("DCGM_FI_DEV_FB_USED", [float(int(fb_used)) for _ in a])
        if g.mig is None or g.mig[0] == "7":
            idle_w = g.power_limit * 0.09
            power_f = shape.get("power")
            if power_f is not None:
                power = [round(power_f(x) * g.power_limit, 3) for x in a]
            else:
                power = [round(idle_w + x * g.power_limit * 0.8, 3) if g.scenario != "frozen" else round(idle_w, 3) for x in a]
            pl = _labels(g, None) if g.mig else None
            if g.mig:
                assert pl is not None
                pl.pop("GPU_I_PROFILE"), pl.pop("GPU_I_ID")  # whole-GPU power, one series per physical GPU
                yield RecordedSeries("DCGM_FI_DEV_POWER_USAGE", pl, list(ts_ms), power)
            else:
                yield from series("DCGM_FI_DEV_POWER_USAGE", power)
            if spec.metrics == "full":
                energy, acc = [], 5_000_000_000.0
                for k, p in zip(keep, power, strict=True):
                    if g.scenario != "frozen":
                        acc += p * spec.step_s * 1000 * (1 if k else 0)
                    energy.append(float(int(acc)))
                if g.mig:
                    yield RecordedSeries("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dict(pl or {}), list(ts_ms), energy)
                else:
                    yield from series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy)


def _vllm_series(fleet: Fleet) -> list[RecordedSeries]:
    out: list[RecordedSeries] = []
    spec = fleet.spec
    t_end = spec.eval_time.timestamp()
    t0 = t_end - spec.history_s
    steps = int(spec.history_s // spec.step_s)
    times = [t0 + (k + 1) * spec.step_s for k in range(steps)]
    pods: dict[tuple[str, str], str] = {}
    for g in fleet.gpus:
        if g.owner and "vllm" in g.owner[1]:
            pods[(g.owner[0], g.owner[1])] = g.scenario
    for (ns, pod), scen in sorted(pods.items()):
        labels = {"namespace": ns, "pod": pod, "model_name": "meta-llama/Llama-3.1-70B-Instruct", "engine": "0"}
        running, tokens, acc = [], [], 1.8234561e07
        for t in times:
            r = 0.0 if scen == "idle" else (6.0 if (t - t0) % 900 < 300 else 0.0)
            running.append(r)
            acc += r * 40 * spec.step_s
            tokens.append(acc)
        ts = [int(t * 1000) for t in times]
        out.append(RecordedSeries("vllm:num_requests_running", dict(labels), ts, running))
        out.append(RecordedSeries("vllm:num_requests_waiting", dict(labels), list(ts), [0.0] * len(ts)))
        out.append(RecordedSeries("vllm:kv_cache_usage_perc", dict(labels), list(ts), [0.02 if scen == "idle" else 0.3] * len(ts)))
        out.append(RecordedSeries("vllm:generation_tokens_total", dict(labels), list(ts), tokens))
    return out


def _pod_series(fleet: Fleet, specs: list[tuple[str, str, str, str]]) -> list[RecordedSeries]:
    """cAdvisor CPU counters and vLLM serving series for the scorecard pods (deterministic shapes)."""
    spec = fleet.spec
    t_end = spec.eval_time.timestamp()
    t0 = t_end - spec.history_s
    steps = int(spec.history_s // spec.step_s)
    times = [t0 + (k + 1) * spec.step_s for k in range(steps)]
    ts = [int(t * 1000) for t in times]
    out: list[RecordedSeries] = []

    def counter(name: str, labels: dict[str, str], per_s: list[float], start: float) -> None:
        acc, vals = start, []
        for r in per_s:
            acc += r * spec.step_s
            vals.append(round(acc, 3))
        out.append(RecordedSeries(name, dict(labels), list(ts), vals))

    for i, (ns, pod, container, profile) in enumerate(specs):
        kind, _, variant = profile.partition(":")
        if kind == "cpu":
            labels = {"namespace": ns, "pod": pod, "container": container, "id": f"/kubepods/pod{i}/{container}",
                      "image": "ghcr.io/example/trainer:1.4", "name": f"k8s_{container}_{pod}"}
            dt = [t - t0 for t in times]
            if variant == "starved":
                throttled = [6.0 for _ in dt]
                usage = [7.95 for _ in dt]
            elif variant == "mild":
                throttled = [1.5 for _ in dt]
                usage = [5.5 for _ in dt]
            elif variant == "stall":
                throttled = [6.0 if 1800 <= d < 2040 else 0.2 for d in dt]
                usage = [7.9 if 1800 <= d < 2040 else 3.1 for d in dt]
            else:
                throttled = [0.2 for _ in dt]
                usage = [2.4 for _ in dt]
            counter("container_cpu_usage_seconds_total", labels, usage, 1.0e5 + i)
            counter("container_cpu_cfs_periods_total", labels, [10.0 for _ in dt], 5.0e6 + i)
            counter("container_cpu_cfs_throttled_periods_total", labels, throttled, 1.0e4 + i)
            continue
        r = int(pod.split("-")[2]) if pod.split("-")[2].isdigit() else 0
        kv_name = "vllm:gpu_cache_usage_perc" if r % 2 else "vllm:kv_cache_usage_perc"  # old and new names (B16)
        labels = {"namespace": ns, "pod": pod, "model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
        dt = [t - t0 for t in times]
        if variant == "pressure":
            running = [24.0 for _ in dt]
            waiting = [float(3 + (k % 5)) for k in range(len(dt))]
            kv = [0.96 for _ in dt]
            gen, preempt = [900.0 for _ in dt], [0.05 for _ in dt]
        elif variant == "idle":
            running, waiting, kv = [0.0] * len(dt), [0.0] * len(dt), [0.0] * len(dt)
            gen, preempt = [0.0] * len(dt), [0.0] * len(dt)
        elif variant == "bursty":
            running = [6.0 if d % 900 < 300 else 0.0 for d in dt]
            waiting, kv = [0.0] * len(dt), [0.3 if d % 900 < 300 else 0.05 for d in dt]
            gen, preempt = [240.0 if d % 900 < 300 else 0.0 for d in dt], [0.0] * len(dt)
        else:
            running, waiting, kv = [8.0] * len(dt), [0.0] * len(dt), [0.5] * len(dt)
            gen, preempt = [320.0] * len(dt), [0.0] * len(dt)
        out.append(RecordedSeries("vllm:num_requests_running", dict(labels), list(ts), running))
        out.append(RecordedSeries("vllm:num_requests_waiting", dict(labels), list(ts), waiting))
        out.append(RecordedSeries(kv_name, dict(labels), list(ts), kv))
        counter("vllm:generation_tokens_total", labels, gen, 1.8234561e07)
        counter("vllm:prompt_tokens_total", labels, [g * 3 for g in gen], 5.0e07)
        counter("vllm:num_preemptions_total", labels, preempt, 12.0)
    return out


def write_recording(fleet: Fleet, out_dir: Path, *, compress: bool = True) -> Path:
    """Write the fleet as a recording directory (telemetry.om[.gz], cluster.json, recording.json, truth.json)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    types = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter", "vllm:generation_tokens_total": "counter"}
    write_openmetrics(fleet.iter_series(), buf, types=types)
    data = buf.getvalue().encode()
    for old in ("telemetry.om", "telemetry.om.gz"):
        (out_dir / old).unlink(missing_ok=True)
    if compress:
        (out_dir / "telemetry.om.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    else:
        (out_dir / "telemetry.om").write_bytes(data)
    (out_dir / "cluster.json").write_text(json.dumps(fleet.kube_list(), indent=1, sort_keys=True) + "\n")
    meta = {
        "cluster": fleet.spec.cluster,
        "eval_time": fleet.spec.eval_time.isoformat(),
        "window_s": fleet.spec.history_s - 600,
        "scrape_interval_s": fleet.spec.step_s,
        "format": "openmetrics",
        "generator": json.loads(fleet.spec.model_dump_json()),
    }
    (out_dir / "recording.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    (out_dir / "truth.json").write_text(json.dumps([t.model_dump() for t in fleet.truth], indent=1) + "\n")
    return out_dir
