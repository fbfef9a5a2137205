"""Integration: the Prometheus adapter against a real Prometheus backfilled with the same recordings the offline path reads.

Parity: for each generated fleet, scanning the backfilled Prometheus (PrometheusGpuMetricsSource) and
scanning the recording (RecordingTelemetrySource) at the same evaluation time and window give the same
telemetry window and the same findings. Also: explicit evaluation time, constant query count, error
translation and auth headers (against a tiny local HTTP server).
"""

from __future__ import annotations

import base64
import json
import math
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.errors import PermanentError, SourceAuthError, SourceUnavailableError
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.settings import PrometheusAuth, PrometheusSettings
from gpuwaste.models.telemetry import GpuTelemetry, TelemetryWindow, WindowStats
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics
from gpuwaste.sources.metrics_plan import PLAN
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.promql import recording_rules, scan_queries
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.servers.ports import free_port

#: Queries of one raw scan (the plan, fixed in fleet size) and of one through the recording rules; each + the rules probe.
RAW_QUERIES = len(scan_queries(window_s=3600)) + 1
RULED_QUERIES = len(scan_queries(window_s=3600, rules=True)) + 1

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

REL = 1e-9
HOSTILE = 'a"b\\c\n{}=~'


# -- scenario construction ---------------------------------------------------------------------------------
def _exporter_restart(series: list[RecordedSeries], uuid: str, split_ms: int) -> list[RecordedSeries]:
    """B12: the exporter of one GPU restarts mid-window and comes back with a new `instance` label."""
    out: list[RecordedSeries] = []
    for s in series:
        if s.labels.get("UUID") != uuid:
            out.append(s)
            continue
        before = [(t, v) for t, v in zip(s.timestamps_ms, s.values, strict=True) if t < split_ms]
        after = [(t, v) for t, v in zip(s.timestamps_ms, s.values, strict=True) if t >= split_ms]
        for part, inst in ((before, "10.244.1.7:9400"), (after, "10.244.1.9:9400")):
            if part:
                out.append(RecordedSeries(s.name, {**s.labels, "instance": inst}, [t for t, _ in part], [v for _, v in part]))
    return out


def _rename(series: list[RecordedSeries], uuid: str, old: str, new: str) -> list[RecordedSeries]:
    """An exporter emitting an alias name (1.x compatibility, Azure lower-casing) for one GPU."""
    return [RecordedSeries(new, s.labels, s.timestamps_ms, s.values) if s.name == old and s.labels.get("UUID") == uuid else s for s in series]


def _pod_series(ns: str, pod: str, t_end_ms: int, history_s: int) -> list[RecordedSeries]:
    """cAdvisor CPU counters (with a reset and the pod/pause cgroups), TGI gauges, Triton counters."""
    ts = list(range(t_end_ms - history_s * 1000 + 30_000, t_end_ms + 1, 30_000))
    base = {"namespace": ns, "pod": pod}
    out = []
    for container, per_step in (("server", 24.5), ("sidecar", 0.75), ("", 26.0), ("POD", 0.01)):
        vals = [per_step * (i + 1) for i in range(len(ts))]
        out.append(RecordedSeries("container_cpu_usage_seconds_total", {**base, "container": container, "cpu": "total"}, list(ts), vals))
    throttled, acc = [], 0.0
    for i in range(len(ts)):
        acc = 0.0 if i == len(ts) // 2 else acc + (i % 7)  # a counter reset (container restart) mid-window
        throttled.append(acc)
    out.append(RecordedSeries("container_cpu_cfs_throttled_periods_total", {**base, "container": "server"}, list(ts), throttled))
    out.append(RecordedSeries("container_cpu_cfs_periods_total", {**base, "container": "server"}, list(ts), [300.0 * (i + 1) for i in range(len(ts))]))
    out.append(RecordedSeries("tgi_queue_size", dict(base), list(ts), [float(i % 5) for i in range(len(ts))]))
    out.append(RecordedSeries("tgi_batch_current_size", dict(base), list(ts), [float((i * 3) % 8) for i in range(len(ts))]))
    out.append(RecordedSeries("nv_inference_request_success", {**base, "model": "resnet", "version": "1"}, list(ts), [10.0 * i for i in range(len(ts))]))
    out.append(RecordedSeries("nv_inference_queue_duration_us", {**base, "model": "resnet", "version": "1"}, list(ts), [1234.5 * i for i in range(len(ts))]))
    out.append(RecordedSeries("vllm:prompt_tokens_total", dict(base), [ts[-1]], [42.0]))  # one sample: present, no rate
    return out


@dataclass
class Scenario:
    """A recording directory (uncompressed OpenMetrics) and how to scan it."""

    name: str
    path: Path
    spec: FleetSpec

    @property
    def telemetry_file(self) -> Path:
        return self.path / "telemetry.om"


def _write(name: str, root: Path, spec: FleetSpec, transform: Callable[[Any, list[RecordedSeries]], list[RecordedSeries]] | None = None) -> Scenario:
    fleet = generate_fleet(spec)
    path = root / name
    write_recording(fleet, path, compress=False)
    if transform is not None:
        series = transform(fleet, list(fleet.iter_series()))
        types = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter"}
        with (path / "telemetry.om").open("w") as f:
            write_openmetrics(series, f, types=types)
    return Scenario(name, path, spec)


def _b12_aliases_pods(fleet: Any, series: list[RecordedSeries]) -> list[RecordedSeries]:
    t_end_ms = int(fleet.spec.eval_time.timestamp() * 1000)
    plain = [g for g in fleet.gpus if g.mig is None]
    series = _exporter_restart(series, plain[0].uuid, t_end_ms - 1_800_000)
    series = _rename(series, plain[1].uuid, "DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization")
    series = _rename(series, plain[2].uuid, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm_fi_prof_gr_engine_active")
    owner = next(g.owner for g in plain if g.owner)
    return series + _pod_series(owner[0], owner[1], t_end_ms, fleet.spec.history_s)


def _unreadable(fleet: Any, series: list[RecordedSeries]) -> list[RecordedSeries]:
    """One GR-engine sample of 250 (a percent in a ratio field) on one GPU, a NaN power sample on another."""
    gr = [s for s in series if s.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    power = [s for s in series if s.name == "DCGM_FI_DEV_POWER_USAGE" and s.labels.get("UUID") != gr[0].labels.get("UUID")]
    gr[0].values[-40] = 250.0
    power[0].values[-70] = math.nan
    return series


def _dropped_label_copies(fleet: Any, series: list[RecordedSeries]) -> list[RecordedSeries]:
    """A second exporter job scraping one GPU (labels differing only in `job` and `pci_bus_id`, which nobody reads), with
    other values, for a time-resolved field, the framebuffer and power: both summaries must merge them the same way."""
    uuid = next(g.uuid for g in fleet.gpus if g.mig is None)
    copies = [RecordedSeries(s.name, {**s.labels, "job": "dcgm-exporter-2", "pci_bus_id": "00000000:99:00.0"}, list(s.timestamps_ms),
                             [v * 0.5 for v in s.values])
              for s in series if s.labels.get("UUID") == uuid and s.name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED",
                                                                              "DCGM_FI_DEV_POWER_USAGE")]
    assert len(copies) == 3
    return series + copies


def _uneven_counts(fleet: Any, series: list[RecordedSeries]) -> list[RecordedSeries]:
    """Fields of one GPU whose sample counts differ from its GPU_UTIL's (the rules' count reference): on one GPU the tensor
    field misses every third scrape of the last 40 minutes, on another the GR-engine field starts 20 minutes late and
    off the 5-minute grid, and a third GPU exports no GPU_UTIL at all."""
    t_end_ms = int(fleet.spec.eval_time.timestamp() * 1000)
    plain = [g.uuid for g in fleet.gpus if g.mig is None]
    out = []
    for s in series:
        uuid = s.labels.get("UUID")
        if uuid == plain[2] and s.name == "DCGM_FI_DEV_GPU_UTIL":
            continue
        if uuid == plain[0] and s.name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
            keep = [i for i, t in enumerate(s.timestamps_ms) if t < t_end_ms - 2_400_000 or i % 3]
            s = RecordedSeries(s.name, s.labels, [s.timestamps_ms[i] for i in keep], [s.values[i] for i in keep])
        if uuid == plain[1] and s.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
            keep = [i for i, t in enumerate(s.timestamps_ms) if t >= t_end_ms - 2_370_000]
            s = RecordedSeries(s.name, s.labels, [s.timestamps_ms[i] for i in keep], [s.values[i] for i in keep])
        out.append(s)
    return out


#: DCGM 4.x names of the fields the generator writes under their 3.x names (DCGM 4.6.0 dcgm_fields.h, deprecated aliases).
DCGM4 = {
    "DCGM_FI_PROF_SM_ACTIVE": "DCGM_FI_PROF_SM_UTIL_RATIO",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
    "DCGM_FI_PROF_DRAM_ACTIVE": "DCGM_FI_PROF_DRAM_UTIL_RATIO",
    "DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL_RATIO",
    "DCGM_FI_DEV_POWER_USAGE": "DCGM_FI_DEV_BOARD_POWER_WATTS",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS",
}


def _dcgm4_names(fleet: Any, series: list[RecordedSeries]) -> list[RecordedSeries]:
    """DCGM 4.x names in one window: the exporter of the first node is upgraded 27 min before the end (off the 5-minute
    grid: every field of its GPUs switches to its 4.x name mid-bucket); on the other nodes a second counters CSV exports
    every renamed field under both names for the whole window."""
    t_end_ms = int(fleet.spec.eval_time.timestamp() * 1000)
    split = t_end_ms - 1_620_000 - 10_000
    first_node = fleet.gpus[0].node
    upgraded = {g.uuid for g in fleet.gpus if g.node == first_node}
    out: list[RecordedSeries] = []
    for s in series:
        new = DCGM4.get(s.name)
        if new is None:
            out.append(s)
        elif s.labels.get("UUID") in upgraded:
            before = [(t, v) for t, v in zip(s.timestamps_ms, s.values, strict=True) if t < split]
            after = [(t, v) for t, v in zip(s.timestamps_ms, s.values, strict=True) if t >= split]
            for name, part in ((s.name, before), (new, after)):
                if part:
                    out.append(RecordedSeries(name, s.labels, [t for t, _ in part], [v for _, v in part]))
        else:
            out.extend((s, RecordedSeries(new, dict(s.labels), list(s.timestamps_ms), list(s.values))))
    renamed = {DCGM4[s.name] for s in series if s.name in DCGM4}
    assert len(renamed) >= 6 and {s.name for s in out} >= renamed and len(upgraded) < len({s.labels.get("UUID") for s in out})
    return out


def _gpu_util_ratio_double(fleet: Any, series: list[RecordedSeries]) -> list[RecordedSeries]:
    """GPU_UTIL exported as DCGM_FI_DEV_GPU_UTIL_RATIO holding a 0–1 ratio (the DOUBLE field a DCGM after 4.6 is said to
    give that name), for every GPU: the same measurement as the percent field ÷ 100."""
    return [RecordedSeries("DCGM_FI_DEV_GPU_UTIL_RATIO", s.labels, s.timestamps_ms, [v / 100.0 for v in s.values])
            if s.name == "DCGM_FI_DEV_GPU_UTIL" else s for s in series]


WEIGHTS = {"busy": 0.3, "idle": 0.2, "underused": 0.15, "bursty": 0.1, "gap": 0.1, "frozen": 0.05, "free": 0.1}


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Scenario]:
    """The parity scenarios, written once per module."""
    root = tmp_path_factory.mktemp("parity")
    return {
        s.name: s
        for s in (
            _write("demo", root, FleetSpec()),
            _write("random-exported", root, FleetSpec(layout="random", nodes=6, seed=11, label_style="exported", cluster="rx", weights=WEIGHTS)),
            _write("random-pod", root, FleetSpec(layout="random", nodes=3, seed=5, label_style="pod", cluster="rp", weights=WEIGHTS,
                                                 instance_types=("g5.12xlarge", "g6.xlarge"))),
            _write("b12-aliases-pods", root, FleetSpec(layout="random", nodes=2, seed=3, label_style="pod", cluster="b12",
                                                       instance_types=("g5.12xlarge",)), _b12_aliases_pods),
            _write("unreadable", root, FleetSpec(layout="random", nodes=2, seed=21, label_style="pod", cluster="bad",
                                                 instance_types=("g5.12xlarge",)), _unreadable),
            _write("dropped-labels", root, FleetSpec(layout="random", nodes=2, seed=4, cluster="dl", instance_types=("g5.12xlarge",)),
                   _dropped_label_copies),
            _write("uneven-counts", root, FleetSpec(layout="random", nodes=6, seed=11, label_style="exported", cluster="rx", weights=WEIGHTS),
                   _uneven_counts),
            _write("dcgm4-names", root, FleetSpec(layout="random", nodes=3, seed=8, label_style="exported", cluster="d4", weights=WEIGHTS,
                                                  instance_types=("g5.12xlarge",)), _dcgm4_names),
            _write("gpu-util-ratio", root, FleetSpec(layout="random", nodes=3, seed=8, label_style="exported", cluster="d4", weights=WEIGHTS,
                                                    instance_types=("g5.12xlarge",)), _gpu_util_ratio_double),
            _write("five-minute-export", root, FleetSpec(layout="random", nodes=2, seed=9, cluster="slow", step_s=300,
                                                         instance_types=("g5.12xlarge",))),
        )
    }


def _sources(sc: Scenario, prom_url: str) -> tuple[RecordingTelemetrySource, PrometheusGpuMetricsSource]:
    rec = RecordingTelemetrySource(sc.path)
    prom = PrometheusGpuMetricsSource.from_settings(
        PrometheusSettings(url=prom_url), cluster=rec.cluster, scrape_interval_s=rec.scrape_interval_s
    )
    return rec, prom


def _scan(sc: Scenario, telemetry: Any, at: Any) -> ScanReport:
    rec = RecordingTelemetrySource(sc.path)
    service = ScanService(
        cluster_source=RecordingClusterSource(sc.path),
        telemetry_source=telemetry,
        window=timedelta(seconds=rec.meta.window_s or 3600),
        price_book=PriceBook.bundled(),
    )
    return service.scan(at=at, scan_id="parity")


# -- comparison helpers --------------------------------------------------------------------------------------
def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _same_stats(a: WindowStats, b: WindowStats) -> bool:
    exact = (a.count, a.recent_count, a.changes, a.series, a.unreadable, len(a.buckets)) == (
        b.count, b.recent_count, b.changes, b.series, b.unreadable, len(b.buckets))
    same_buckets = all(x.end == y.end and x.count == y.count and _close(x.total, y.total) and _close(x.max, y.max)
                       for x, y in zip(a.buckets, b.buckets, strict=True)) if exact else False
    return exact and same_buckets and all(_close(getattr(a, f), getattr(b, f)) for f in ("total", "max", "min", "p95", "max_avg_10m"))


def _same_signals(a: dict[str, WindowStats], b: dict[str, WindowStats]) -> list[str]:
    if a.keys() != b.keys():
        return [f"signals differ: {sorted(a.keys() ^ b.keys())}"]
    return [f"{k}: {a[k]} != {b[k]}" for k in a if not _same_stats(a[k], b[k])]


def _gpu_diffs(a: GpuTelemetry, b: GpuTelemetry) -> list[str]:
    out = []
    for f in ("device", "gpu_index", "model_name", "mig_profile", "hostname", "instances", "is_mig_parent"):
        if getattr(a, f) != getattr(b, f):
            out.append(f"{a.device} {f}: {getattr(a, f)} != {getattr(b, f)}")
    ga = {(g.label_family, g.namespace, g.pod, g.container): g.signals for g in a.groups}
    gb = {(g.label_family, g.namespace, g.pod, g.container): g.signals for g in b.groups}
    if ga.keys() != gb.keys():
        out.append(f"{a.device} groups: {sorted(map(str, ga))} != {sorted(map(str, gb))}")
    else:
        out.extend(f"{a.device} {k}: {d}" for k in ga for d in _same_signals(ga[k], gb[k]))
    out.extend(f"{a.device} parent: {d}" for d in _same_signals(a.parent_signals, b.parent_signals))
    return out


def window_diffs(a: TelemetryWindow, b: TelemetryWindow) -> list[str]:
    """Differences between two telemetry windows (floats within REL, counts exact)."""
    out = []
    if len(a.gpus) != len(b.gpus):
        return [f"gpus: {len(a.gpus)} != {len(b.gpus)}"]
    for ga, gb in zip(a.gpus, b.gpus, strict=True):
        out.extend(_gpu_diffs(ga, gb))
    pa = {(p.namespace, p.pod): p.signals for p in a.pods}
    pb = {(p.namespace, p.pod): p.signals for p in b.pods}
    if pa.keys() != pb.keys():
        out.append(f"pods: {sorted(pa)} != {sorted(pb)}")
    else:
        out.extend(f"pod {k}: {d}" for k in pa for d in _same_signals(pa[k], pb[k]))
    for f in ("metrics_present", "window_s", "recent_s", "single_instant", "eval_time", "bucket_s", "scrape_interval_s"):
        if getattr(a, f) != getattr(b, f):
            out.append(f"{f}: {getattr(a, f)} != {getattr(b, f)}")
    return out


def _deep_diffs(a: Any, b: Any, path: str = "") -> Iterator[str]:
    if isinstance(a, float) and isinstance(b, float):
        if not _close(a, b):
            yield f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            yield f"{path}: keys {sorted(a.keys() ^ b.keys())}"
        for k in a.keys() & b.keys():
            yield from _deep_diffs(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            yield f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _deep_diffs(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: {a!r} != {b!r}"


def finding_diffs(a: ScanReport, b: ScanReport) -> list[str]:
    """Differences between two scans' findings and no-verdicts (evidence floats within REL, the rest exact)."""
    fa = sorted((f.model_dump(mode="python") for f in a.findings), key=lambda d: str(sorted(d["subject"].items())) + d["kind"] + str(d.get("scope_key")))
    fb = sorted((f.model_dump(mode="python") for f in b.findings), key=lambda d: str(sorted(d["subject"].items())) + d["kind"] + str(d.get("scope_key")))
    out = list(_deep_diffs(fa, fb, "findings"))
    na = sorted((n.detector, n.subject, n.reason) for n in a.no_verdict)
    nb = sorted((n.detector, n.subject, n.reason) for n in b.no_verdict)
    if na != nb:
        out.append(f"no_verdict: {na} != {nb}")
    return out


# -- parity ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["demo", "random-exported", "random-pod", "b12-aliases-pods", "unreadable", "five-minute-export",
                                  "dropped-labels", "dcgm4-names", "gpu-util-ratio"])
def test_prometheus_source_window_and_findings_match_the_recording(
    name: str, scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN a generated fleet written as a recording and backfilled into a real Prometheus
    sc = scenarios[name]
    server = prometheus_factory(sc.telemetry_file)
    rec, prom = _sources(sc, server.url)
    at = rec.end_time()
    window = timedelta(seconds=rec.meta.window_s or 3600)
    # WHEN both adapters summarise the same window and the scan runs over each
    tw_rec = rec.telemetry(at=at, window=window)
    tw_prom = prom.telemetry(at=at, window=window)
    rep_rec = _scan(sc, rec, at)
    rep_prom = _scan(sc, prom, at)
    # THEN the windows and the findings are the same (evidence floats within 1e-9 relative, counts exact)
    assert tw_rec.gpus and tw_prom.query_count == RAW_QUERIES
    assert tw_prom.plan == "raw" and tw_rec.bucket_s == tw_prom.bucket_s == 300
    assert tw_rec.scrape_interval_inferred and tw_rec.scrape_interval_s == tw_prom.scrape_interval_s == sc.spec.step_s
    assert [(p.metric, p.count) for p in tw_rec.problems] == [(p.metric, p.count) for p in tw_prom.problems]
    assert window_diffs(tw_rec, tw_prom) == []
    assert rep_rec.findings, "the scenario must produce findings to compare"
    assert finding_diffs(rep_rec, rep_prom) == []
    assert [(f.kind, f.subject.namespace, f.subject.pod, f.subject.node, f.wasted_gpu_share) for f in rep_rec.findings] == [
        (f.kind, f.subject.namespace, f.subject.pod, f.subject.node, f.wasted_gpu_share) for f in rep_prom.findings
    ]


def test_prometheus_source_merges_series_differing_only_in_labels_nobody_reads(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN one GPU scraped by two exporter jobs (series differing only in `job` and `pci_bus_id`) in Prometheus
    sc = scenarios["dropped-labels"]
    rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
    # WHEN the window is read raw (the time-resolved fields come back unaggregated, the scan merges them)
    tw = prom.telemetry(at=rec.end_time(), window=timedelta(hours=1))
    # THEN that GPU is one device whose samples are those of both jobs, bucket by bucket, as the recording path merges them
    doubled = [g for g in tw.gpus if (g.merged("DCGM_FI_PROF_GR_ENGINE_ACTIVE") or WindowStats()).count > 130]
    assert len(doubled) == 1 and len({g.device.uuid for g in tw.gpus}) == len(tw.gpus)
    gr = doubled[0].merged("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert gr is not None and gr.series == 1 and all(b.count == 20 for b in gr.buckets)
    assert (doubled[0].merged("DCGM_FI_DEV_FB_USED") or WindowStats()).count == gr.count


def test_prometheus_source_b12_scenario_merges_restart_aliases_and_pod_rates(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN the exporter-restart / alias / pod-metrics scenario in Prometheus
    sc = scenarios["b12-aliases-pods"]
    rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
    # WHEN the window is read from Prometheus
    tw = prom.telemetry(at=rec.end_time(), window=timedelta(seconds=rec.meta.window_s or 3600))
    # THEN the restarted GPU has both instances merged into one device, aliases land on canonical names,
    # and the pod holds CPU rates from its two containers only, throttling with its reset, gauges and Triton
    restarted = [g for g in tw.gpus if len(g.instances) == 2]
    assert len(restarted) == 1
    assert restarted[0].merged("DCGM_FI_DEV_GPU_UTIL").series == 2  # type: ignore[union-attr]
    assert "dcgm_gpu_utilization" not in tw.metrics_present and "DCGM_FI_DEV_GPU_UTIL" in tw.metrics_present
    (pod,) = tw.pods
    cpu = pod.signals["container_cpu_usage_seconds_total:rate"]
    assert cpu.series == 2 and cpu.max == pytest.approx((24.5 + 0.75) / 30, rel=1e-9)
    assert pod.signals["container_cpu_cfs_throttled_periods_total:rate"].changes == 1
    assert {"tgi_queue_size", "tgi_batch_current_size", "nv_inference_request_success:rate", "nv_inference_queue_duration_us:rate"} <= pod.signals.keys()
    assert "vllm:prompt_tokens_total:rate" not in pod.signals and "vllm:prompt_tokens_total" in tw.metrics_present


def test_prometheus_source_query_count_is_constant_in_fleet_size(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN two fleets of different sizes in Prometheus
    counts = {}
    gpus = {}
    for name in ("random-exported", "random-pod"):
        sc = scenarios[name]
        rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
        # WHEN each is read
        tw = prom.telemetry(at=rec.end_time(), window=timedelta(hours=1))
        counts[name], gpus[name] = tw.query_count, len(tw.gpus)
    # THEN the fleets differ in size but the query count is the same fixed number
    assert gpus["random-exported"] > gpus["random-pod"]
    assert counts["random-exported"] == counts["random-pod"] == RAW_QUERIES == 27 and len(PLAN) == 26


def test_prometheus_source_uses_the_explicit_evaluation_time(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN a Prometheus whose data is from 2024
    sc = scenarios["demo"]
    rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
    at_2024 = rec.end_time()
    assert at_2024.year == 2024
    # WHEN it is scanned at the 2024 time and 30 days later, when it holds no data
    in_data = _scan(sc, prom, at_2024)
    empty_window = prom.telemetry(at=at_2024 + timedelta(days=30), window=timedelta(hours=1))
    later = _scan(sc, prom, at_2024 + timedelta(days=30))
    # THEN the 2024 scan finds idle GPUs; the later window is empty and nothing is called idle or under-used
    assert any(f.kind is WasteKind.IDLE for f in in_data.findings)
    assert empty_window.gpus == () and empty_window.pods == () and empty_window.metrics_present == frozenset()
    assert empty_window.query_count == RAW_QUERIES
    assert not [f for f in later.findings if f.kind in (WasteKind.IDLE, WasteKind.UNDERUSED)]


def test_prometheus_source_hostile_matcher_values_parse_in_real_prometheus(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN a matcher value with a quote, a backslash, a newline and PromQL syntax
    sc = scenarios["demo"]
    url = prometheus_factory(sc.telemetry_file).url
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster="x", matchers={"cluster": HOSTILE})
    # WHEN every query of the plan is sent to a real Prometheus
    tw = prom.telemetry(at=RecordingTelemetrySource(sc.path).end_time(), window=timedelta(hours=1))
    # THEN Prometheus accepts them all (no PermanentError) and matches nothing
    assert tw.query_count == RAW_QUERIES and tw.gpus == ()


def test_prometheus_source_probe_counts_series_per_metric(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN the demo fleet in Prometheus
    sc = scenarios["demo"]
    rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
    # WHEN doctor-style probes ask for series counts at the recording's end
    counts = prom.probe(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "no_such_metric"], at=rec.end_time())
    # THEN present metrics have series and an absent one has 0
    assert counts["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] > 0 and counts["DCGM_FI_DEV_GPU_UTIL"] > 0
    assert counts["no_such_metric"] == 0


# -- errors and auth against a tiny local HTTP server ----------------------------------------------------
EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


class _Handler(BaseHTTPRequestHandler):
    server: _FakePrometheus

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        srv = self.server
        srv.requests.append({"path": self.path, "headers": dict(self.headers.items()), "query": parse_qs(urlsplit(self.path).query)})
        if srv.hold is not None:
            srv.hold.wait(10)
            return
        self.send_response(srv.status)
        self.send_header("Content-Type", "application/json")
        body = srv.body
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        return


class _FakePrometheus(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = 200
        self.body = EMPTY
        self.hold: threading.Event | None = None
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def fake_prom() -> Iterator[_FakePrometheus]:
    """A local HTTP server answering like (or unlike) Prometheus, recording every request."""
    server = _FakePrometheus()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    if server.hold is not None:
        server.hold.set()
    server.shutdown()
    server.server_close()


def _source(url: str, **settings: Any) -> PrometheusGpuMetricsSource:
    return PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url, **settings), cluster="c", backoff_s=0.0)


AT = FleetSpec().eval_time


def test_prometheus_source_5xx_is_retried_then_source_unavailable(fake_prom: _FakePrometheus) -> None:
    # GIVEN a Prometheus answering 503
    fake_prom.status, fake_prom.body = 503, b"overloaded"
    source = _source(fake_prom.url, max_retries=2, concurrency=1)
    # WHEN a probe query runs
    with pytest.raises(SourceUnavailableError, match="HTTP 503") as info:
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    # THEN it was tried 1 + max_retries times and the message names the URL
    assert len(fake_prom.requests) == 3
    assert fake_prom.url in str(info.value)


def test_prometheus_source_timeout_is_source_unavailable(fake_prom: _FakePrometheus) -> None:
    # GIVEN a Prometheus that never answers
    fake_prom.hold = threading.Event()
    source = _source(fake_prom.url, timeout_s=0.2, max_retries=0)
    # WHEN a query runs / THEN the timeout becomes SourceUnavailableError naming the timeout
    with pytest.raises(SourceUnavailableError, match="did not answer"):
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)


def test_prometheus_source_connection_refused_hides_credentials() -> None:
    # GIVEN a URL with user-info on a port where nothing listens
    url = f"http://admin:s3cret@127.0.0.1:{free_port()}"
    source = _source(url, max_retries=1)
    # WHEN a query runs
    with pytest.raises(SourceUnavailableError, match="cannot connect") as info:
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    # THEN the message names the URL without the credentials
    assert "s3cret" not in str(info.value) and "admin" not in str(info.value)
    assert "127.0.0.1" in str(info.value)


@pytest.mark.parametrize("status", [401, 403])
def test_prometheus_source_rejected_credentials_are_source_auth_error(fake_prom: _FakePrometheus, status: int) -> None:
    # GIVEN a Prometheus rejecting the credentials
    fake_prom.status, fake_prom.body = status, b"unauthorized"
    source = _source(fake_prom.url, max_retries=2)
    # WHEN a query runs / THEN SourceAuthError, without retrying
    with pytest.raises(SourceAuthError, match=f"HTTP {status}"):
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    assert len(fake_prom.requests) == 1


def test_prometheus_source_bad_query_is_permanent_error_with_the_reason(fake_prom: _FakePrometheus) -> None:
    # GIVEN a Prometheus refusing a query with its JSON error
    fake_prom.status = 400
    fake_prom.body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 7"}).encode()
    source = _source(fake_prom.url)
    # WHEN a query runs / THEN PermanentError (not retried) carrying Prometheus' reason
    with pytest.raises(PermanentError, match="parse error at char 7"):
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    assert len(fake_prom.requests) == 1


def test_prometheus_source_non_prometheus_answer_is_permanent_error(fake_prom: _FakePrometheus) -> None:
    # GIVEN a URL answering 200 with an HTML page (e.g. a UI instead of the API)
    fake_prom.body = b"<html>Grafana</html>"
    source = _source(fake_prom.url)
    # WHEN a query runs / THEN PermanentError saying the URL is not a Prometheus API, not retried
    with pytest.raises(PermanentError, match="did not answer like a Prometheus HTTP API"):
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    assert len(fake_prom.requests) == 1


def test_prometheus_source_404_says_the_url_is_not_a_prometheus_api(fake_prom: _FakePrometheus) -> None:
    # GIVEN a server that answers 404 to /api/v1/query (a wrong path prefix, a web server)
    fake_prom.status = 404
    fake_prom.body = b"404 page not found"
    source = _source(fake_prom.url)
    # WHEN a query runs / THEN PermanentError telling the user to check the URL's path, not retried
    with pytest.raises(PermanentError, match="no Prometheus API here"):
        source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    assert len(fake_prom.requests) == 1


def test_prometheus_source_refuses_a_result_larger_than_max_series(fake_prom: _FakePrometheus) -> None:
    # GIVEN a Prometheus returning 3 series for a metric
    result = [{"metric": {"UUID": f"GPU-{i}", "gpuwaste_stat": "count"}, "value": [0, "1"]} for i in range(3)]
    fake_prom.body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    source = _source(fake_prom.url, max_series=2)
    # WHEN the window is read / THEN PermanentError naming the guard
    with pytest.raises(PermanentError, match="max_series=2"):
        source.telemetry(at=AT, window=timedelta(hours=1))


def test_prometheus_source_sends_the_explicit_time_and_bearer_token(fake_prom: _FakePrometheus) -> None:
    # GIVEN bearer auth
    source = _source(fake_prom.url, auth=PrometheusAuth(kind="bearer", bearer_token="tok-123"))
    # WHEN the whole window is read at a fixed time
    tw = source.telemetry(at=AT, window=timedelta(hours=1))
    # THEN every request carries the token; every query the evaluation time (never the wall clock): instant queries
    # at T, the time-resolved ones as a range from T − 55 min to T (5-minute buckets); one retention check besides
    queries = [r for r in fake_prom.requests if urlsplit(r["path"]).path != "/api/v1/status/flags"]
    assert len(queries) == tw.query_count == RAW_QUERIES
    assert {r["headers"]["Authorization"] for r in fake_prom.requests} == {"Bearer tok-123"}
    instant = [r for r in queries if urlsplit(r["path"]).path.endswith("/query")]
    ranged = [r for r in queries if urlsplit(r["path"]).path.endswith("/query_range")]
    assert {r["query"]["time"][0] for r in instant} == {f"{AT.timestamp():.3f}"}
    assert {(r["query"]["start"][0], r["query"]["end"][0], r["query"]["step"][0]) for r in ranged} == {
        (f"{AT.timestamp() - 3300:.3f}", f"{AT.timestamp():.3f}", "300")}


def test_prometheus_source_sends_basic_auth(fake_prom: _FakePrometheus) -> None:
    # GIVEN basic auth
    source = _source(fake_prom.url, auth=PrometheusAuth(kind="basic", username="reader", password="pw:1"))
    # WHEN a query runs
    source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    # THEN the Authorization header is Basic base64(user:password)
    assert fake_prom.requests[0]["headers"]["Authorization"] == "Basic " + base64.b64encode(b"reader:pw:1").decode()


def test_prometheus_source_signs_requests_with_sigv4_for_amp(fake_prom: _FakePrometheus, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # GIVEN dummy AWS credentials in the environment and SigV4 auth for region eu-west-1
    for name in ("AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-example")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    source = _source(fake_prom.url, auth=PrometheusAuth(kind="sigv4", sigv4_region="eu-west-1"))
    # WHEN a query runs
    source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=AT)
    # THEN the request carries a SigV4 signature for the aps service in that region
    headers = fake_prom.requests[0]["headers"]
    auth = headers["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/aps/aws4_request" in auth and "SignedHeaders=" in auth and "Signature=" in auth
    assert len(headers["X-Amz-Date"]) == 16 and headers["X-Amz-Date"].endswith("Z")
    assert headers["X-Amz-Security-Token"] == "session-example"
    assert "secret-example" not in json.dumps(headers)


def test_prometheus_source_unresolved_secret_is_config_error() -> None:
    # GIVEN bearer auth referenced only by a Secrets Manager ARN (not resolved by a bootstrap)
    settings = PrometheusSettings(url="http://127.0.0.1:1", auth=PrometheusAuth(kind="bearer", bearer_token_secret_arn="arn:aws:secretsmanager:x"))
    # WHEN the source is built / THEN a ConfigError says what is missing (no I/O happened)
    from gpuwaste.errors import ConfigError

    with pytest.raises(ConfigError, match="bearer_token"):
        PrometheusGpuMetricsSource.from_settings(settings, cluster="c")


@pytest.mark.parametrize("shift_s", [433.5, 1800.0])
def test_prometheus_source_matches_the_recording_at_an_off_grid_time_and_shorter_window(
    shift_s: float, scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN the demo fleet, evaluated earlier than its end at a time not on the sample or 10-minute grid
    sc = scenarios["demo"]
    rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
    at = rec.end_time() - timedelta(seconds=shift_s)
    window = timedelta(minutes=45)
    # WHEN both adapters summarise that window
    tw_rec, tw_prom = rec.telemetry(at=at, window=window), prom.telemetry(at=at, window=window)
    # THEN range boundaries, subquery steps and the recent tail agree
    assert tw_rec.gpus and window_diffs(tw_rec, tw_prom) == []


# -- recording rules -------------------------------------------------------------------------------------------
RULES_FILE = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "gpuwaste-recording-rules.yml"


@pytest.fixture(scope="module")
def ruled_prometheus(scenarios: dict[str, Scenario], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Scenario, str]]:
    """The random-exported fleet with uneven field counts in a real Prometheus, the shipped recording rules backfilled by promtool."""
    from tests.servers.prometheus import INSTALL_HINT, PrometheusServer, prometheus_available

    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    sc = scenarios["uneven-counts"]
    server = PrometheusServer(sc.telemetry_file, workdir=tmp_path_factory.mktemp("ruled")).start()
    try:
        end = int(RecordingTelemetrySource(sc.path).end_time().timestamp())
        server.backfill_rules(RULES_FILE, start=end - sc.spec.history_s, end=end)
        yield sc, server.url
    finally:
        server.stop()


def test_recording_rules_plan_matches_the_recording_and_the_raw_plan(ruled_prometheus: tuple[Scenario, str]) -> None:
    # GIVEN a fleet in Prometheus with the shipped recording rules backfilled by promtool (every 5 min, at the rule
    # group's own offset), scanned at the rules' last evaluation so that their buckets fall on the scan's grid
    sc, url = ruled_prometheus
    rec = RecordingTelemetrySource(sc.path)
    ruled = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=rec.cluster)
    marker = ruled.instant_query("gpuwaste:recording_rules:info[10m]", at=rec.end_time())
    at = datetime.fromtimestamp(float(marker[0]["values"][-1][0]), tz=UTC)
    window = timedelta(hours=1)
    raw = PrometheusGpuMetricsSource(ruled.client, url=url, cluster=rec.cluster, use_rules="never")
    # WHEN the window is read through the rules, through the raw series, and from the recording
    tw_ruled, tw_raw, tw_rec = ruled.telemetry(at=at, window=window), raw.telemetry(at=at, window=window), rec.telemetry(at=at, window=window)
    # THEN the scan says which plan it used, and the three windows are the same, bucket by bucket
    assert (tw_ruled.plan, tw_raw.plan) == ("recording rules", "raw")
    assert (tw_ruled.query_count, tw_raw.query_count) == (RULED_QUERIES, RAW_QUERIES - 1) == (15, 26)
    assert tw_rec.gpus and window_diffs(tw_rec, tw_ruled) == [] and window_diffs(tw_rec, tw_raw) == []
    assert ruled.rules_status(at=at)["installed"] is True
    # AND the findings are the same
    assert finding_diffs(_scan(sc, rec, at), _scan(sc, ruled, at)) == []


def test_a_field_under_its_dcgm3_and_dcgm4_names_reads_the_same_through_rules_raw_series_and_recording(
    scenarios: dict[str, Scenario], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN the DCGM 4.x scenario (one node's exporter upgraded mid-bucket, the others exporting every renamed field under
    # both names) in a real Prometheus with the shipped recording rules backfilled by promtool
    from tests.servers.prometheus import INSTALL_HINT, PrometheusServer, prometheus_available

    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    sc = scenarios["dcgm4-names"]
    rec = RecordingTelemetrySource(sc.path)
    end = int(rec.end_time().timestamp())
    with PrometheusServer(sc.telemetry_file, workdir=tmp_path_factory.mktemp("ruled-dcgm4")) as server:
        server.backfill_rules(RULES_FILE, start=end - sc.spec.history_s, end=end)  # no rule fails: promtool would say so
        ruled = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster=rec.cluster)
        marker = ruled.instant_query("gpuwaste:recording_rules:info[10m]", at=rec.end_time())
        at = datetime.fromtimestamp(float(marker[0]["values"][-1][0]), tz=UTC)
        raw = PrometheusGpuMetricsSource(ruled.client, url=server.url, cluster=rec.cluster, use_rules="never")
        # WHEN the window is read through the rules, through the raw series, and from the recording, and scanned
        window = timedelta(hours=1)
        tw_ruled, tw_raw, tw_rec = ruled.telemetry(at=at, window=window), raw.telemetry(at=at, window=window), rec.telemetry(at=at, window=window)
        rep_rec, rep_ruled, rep_raw = _scan(sc, rec, at), _scan(sc, ruled, at), _scan(sc, raw, at)
    # THEN the three windows are the same, bucket by bucket, and so are the findings
    assert (tw_ruled.plan, tw_raw.plan) == ("recording rules", "raw")
    assert window_diffs(tw_rec, tw_ruled) == [] and window_diffs(tw_rec, tw_raw) == []
    assert rep_rec.findings and finding_diffs(rep_rec, rep_ruled) == [] and finding_diffs(rep_rec, rep_raw) == []
    # AND a sample exported under two names is not taken for a doubled scrape rate: the spacing is the exporter's 30 s,
    # the doubly named GPUs read as two copies side by side, the upgraded node's as one name after the other
    assert tw_rec.scrape_interval_s == tw_ruled.scrape_interval_s == sc.spec.step_s == 30
    upgraded = {g.uuid for g in generate_fleet(sc.spec).gpus if g.node == generate_fleet(sc.spec).gpus[0].node}
    for g in tw_rec.gpus:
        gr = g.merged("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        assert gr is not None and gr.series == 2
        assert gr.live_series == (1 if g.device.uuid in upgraded else 2)
    assert "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO" not in tw_rec.metrics_present and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in tw_rec.metrics_present
    # AND every GPU is judged as in the same fleet written with the 3.x names only: same kinds, subjects and money
    plain = _write("dcgm3-only", tmp_path_factory.mktemp("dcgm3"), sc.spec)
    rep_plain = _scan(plain, RecordingTelemetrySource(plain.path), at)
    assert [(f.kind, f.subject.namespace, f.subject.pod, f.subject.node, f.wasted_gpu_share, f.usd_per_day) for f in rep_rec.findings] == [
        (f.kind, f.subject.namespace, f.subject.pod, f.subject.node, f.wasted_gpu_share, f.usd_per_day) for f in rep_plain.findings]


def test_gpu_util_ratio_holding_a_ratio_reads_as_the_percent_field(scenarios: dict[str, Scenario], tmp_path_factory: pytest.TempPathFactory,
                                                                      prometheus_factory: PrometheusFactory) -> None:
    # GIVEN a fleet whose GPU_UTIL is exported as DCGM_FI_DEV_GPU_UTIL_RATIO in 0–1, and the same fleet with the percent field
    sc = scenarios["gpu-util-ratio"]
    rec = RecordingTelemetrySource(sc.path)
    at = rec.end_time()
    plain = _write("gpu-util-percent", tmp_path_factory.mktemp("pct"), sc.spec)
    # WHEN both are read (the ratio one also from a real Prometheus)
    tw, tw_plain = rec.telemetry(at=at, window=WINDOW_1H), RecordingTelemetrySource(plain.path).telemetry(at=at, window=WINDOW_1H)
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=prometheus_factory(sc.telemetry_file).url), cluster=rec.cluster)
    # THEN every GPU's GPU_UTIL reads in percent as the percent field's (a busy GPU is not read as 1 % busy), on both paths,
    # and the findings are the same GPUs, shares and dollars
    for a, b in zip(tw.gpus, tw_plain.gpus, strict=True):
        ua, ub = a.merged("DCGM_FI_DEV_GPU_UTIL"), b.merged("DCGM_FI_DEV_GPU_UTIL")
        assert ua is not None and ub is not None and math.isclose(ua.avg, ub.avg, rel_tol=1e-9) and math.isclose(ua.max, ub.max, rel_tol=1e-9)
    assert max(g.merged("DCGM_FI_DEV_GPU_UTIL").max for g in tw.gpus) > 50  # type: ignore[union-attr]
    assert window_diffs(tw, prom.telemetry(at=at, window=WINDOW_1H)) == []
    key = lambda r: sorted((f.kind.value, f.subject.pod, f.subject.node, f.wasted_gpu_share, f.usd_per_day) for f in r.findings)  # noqa: E731
    assert key(_scan(sc, rec, at)) == key(_scan(plain, RecordingTelemetrySource(plain.path), at))


WINDOW_1H = timedelta(hours=1)


def test_rules_record_a_fields_count_only_where_it_differs_and_the_scan_resolves_the_rest(ruled_prometheus: tuple[Scenario, str]) -> None:
    # GIVEN the fleet with the shipped (version 2) rules backfilled, at the rules' last evaluation
    sc, url = ruled_prometheus
    rec = RecordingTelemetrySource(sc.path)
    ruled = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=rec.cluster)
    marker = ruled.instant_query("gpuwaste:recording_rules:info[10m]", at=rec.end_time())
    at = datetime.fromtimestamp(float(marker[0]["values"][-1][0]), tz=UTC)
    # WHEN the recorded series are counted
    def series(name: str) -> int:
        return int(float(ruled.instant_query(f"count(count_over_time({name}[1h]))", at=at)[0]["value"][1]))

    # THEN the reference field's count is recorded for every series, another field's only where its count differs (a late
    # start, missed scrapes, a GPU without the reference, MIG instances)
    assert series("gpuwaste:dcgm_fi_dev_gpu_util:count5m") == series("gpuwaste:dcgm_fi_dev_gpu_util:sum5m")
    for field in ("dcgm_fi_prof_gr_engine_active", "dcgm_fi_prof_pipe_tensor_active"):
        assert 0 < series(f"gpuwaste:{field}:count5m") < series(f"gpuwaste:{field}:sum5m") / 2
    # AND the window read through them is the recording's, bucket by bucket (the test above), counts exact
    tw_ruled, tw_rec = ruled.telemetry(at=at, window=timedelta(hours=1)), rec.telemetry(at=at, window=timedelta(hours=1))
    assert sum(g.merged("DCGM_FI_PROF_GR_ENGINE_ACTIVE").count for g in tw_ruled.gpus if g.merged("DCGM_FI_PROF_GR_ENGINE_ACTIVE")) > 0
    assert window_diffs(tw_rec, tw_ruled) == []


def test_version_1_rules_are_still_read_and_the_doctor_calls_them_outdated(
    scenarios: dict[str, Scenario], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN the fleet with the version 1 rules backfilled (every field's count recorded in full)
    from tests.servers.prometheus import INSTALL_HINT, PrometheusServer, prometheus_available

    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    sc = scenarios["random-exported"]
    workdir = tmp_path_factory.mktemp("ruled-v1")
    old_rules = workdir / "rules-v1.yml"
    old_rules.write_text(yaml.safe_dump(recording_rules(count_reference=None, version="1")))
    server = PrometheusServer(sc.telemetry_file, workdir=workdir).start()
    try:
        end = int(RecordingTelemetrySource(sc.path).end_time().timestamp())
        server.backfill_rules(old_rules, start=end - sc.spec.history_s, end=end)
        rec = RecordingTelemetrySource(sc.path)
        ruled = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster=rec.cluster)
        marker = ruled.instant_query("gpuwaste:recording_rules:info[10m]", at=rec.end_time())
        at = datetime.fromtimestamp(float(marker[0]["values"][-1][0]), tz=UTC)
        # WHEN a scan reads the window and the doctor asks about the rules
        tw = ruled.telemetry(at=at, window=timedelta(hours=1))
        status = ruled.rules_status(at=at)
        doctor = CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", at.isoformat()], terminal_width=200)
    finally:
        server.stop()
    # THEN the scan read the old rules' buckets, equal to the recording, and the doctor says they are outdated
    assert tw.plan == "recording rules" and window_diffs(rec.telemetry(at=at, window=timedelta(hours=1)), tw) == []
    assert status["installed"] is True and status["outdated"] is True and (status["version"], status["current_version"]) == ("1", "2")
    assert "version 1 installed, version 2 is current" in " ".join(doctor.output.split()), doctor.output


def test_rules_are_not_used_when_they_do_not_cover_the_window(ruled_prometheus: tuple[Scenario, str]) -> None:
    # GIVEN the same Prometheus, scanned at a time whose window starts before the rules were first evaluated
    sc, url = ruled_prometheus
    rec = RecordingTelemetrySource(sc.path)
    at = rec.end_time() - timedelta(minutes=25)
    source = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=rec.cluster)
    # WHEN a 1-hour window is read
    tw = source.telemetry(at=at, window=timedelta(hours=1))
    # THEN the raw plan serves it (the rules' buckets would be missing at the start), still equal to the recording
    assert tw.plan == "raw" and window_diffs(rec.telemetry(at=at, window=timedelta(hours=1)), tw) == []


def test_unreadable_samples_are_reported_alike_by_both_paths(scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory) -> None:
    # GIVEN a ratio sample of 250 and a NaN power sample, recorded and backfilled into Prometheus
    sc = scenarios["unreadable"]
    rec, prom = _sources(sc, prometheus_factory(sc.telemetry_file).url)
    at, window = rec.end_time(), timedelta(hours=1)
    # WHEN both paths read the window
    tw_rec, tw_prom = rec.telemetry(at=at, window=window), prom.telemetry(at=at, window=window)
    # THEN each bad sample's 5-minute bucket is left out, counted, and located: file:line offline, the series live
    problems = {p.metric: p for p in tw_rec.problems}
    assert set(problems) == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_POWER_USAGE"}
    assert all(p.count == 10 for p in tw_rec.problems)
    assert problems["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].where.startswith(f"{sc.telemetry_file}:")
    assert "out of range for a ratio field" in problems["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].reason
    live = {p.metric: p for p in tw_prom.problems}
    assert live["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].where.startswith("{") and 'UUID="GPU-' in live["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].where
    assert "NaN" in live["DCGM_FI_DEV_POWER_USAGE"].reason


def test_a_window_beyond_prometheus_retention_is_refused_clearly(fake_prom: _FakePrometheus) -> None:
    # GIVEN a Prometheus keeping 15 days (its flags say so) and a scan of a 2024 window
    fake_prom.body = json.dumps({"status": "success", "data": {"storage.tsdb.retention.time": "15d"}}).encode()
    source = _source(fake_prom.url)
    # WHEN the window is read / THEN a PermanentError names the retention, before any query is sent
    with pytest.raises(PermanentError, match="beyond what Prometheus .* keeps .*15 days"):
        source.telemetry(at=AT, window=timedelta(hours=1))
    assert [urlsplit(r["path"]).path for r in fake_prom.requests] == ["/api/v1/status/flags"]


@pytest.mark.parametrize("window", [timedelta(minutes=5), timedelta(days=8)])
def test_windows_outside_ten_minutes_to_seven_days_are_refused(window: timedelta, fake_prom: _FakePrometheus, scenarios: dict[str, Scenario]) -> None:
    # GIVEN a window shorter than 10 minutes or longer than 7 days
    # WHEN either source reads it / THEN a clear error, and no query
    with pytest.raises(PermanentError, match="between 10 minutes and 7 days"):
        _source(fake_prom.url).telemetry(at=AT, window=window)
    from gpuwaste.errors import InputFormatError

    with pytest.raises(InputFormatError, match="between 10 minutes and 7 days"):
        RecordingTelemetrySource(scenarios["demo"].path).telemetry(at=AT, window=window)
    assert fake_prom.requests == []


def test_prometheus_only_scan_through_the_rules_finds_what_the_recording_finds(ruled_prometheus: tuple[Scenario, str]) -> None:
    # GIVEN the fleet in a real Prometheus with the recording rules backfilled, and no cluster JSON, no Kubernetes:
    # the cluster state comes from the kube-state-metrics series in the same Prometheus
    from gpuwaste.sources.ksm import KsmRecordingSource, PrometheusKsmSource

    sc, url = ruled_prometheus
    rec = RecordingTelemetrySource(sc.path)
    ruled = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=rec.cluster)
    marker = ruled.instant_query("gpuwaste:recording_rules:info[10m]", at=rec.end_time())
    at = datetime.fromtimestamp(float(marker[0]["values"][-1][0]), tz=UTC)
    window = timedelta(hours=1)
    live = ScanService(cluster_source=PrometheusKsmSource(ruled, cluster=rec.cluster, window=window, scrape_interval_s=60),
                       telemetry_source=ruled, window=window, price_book=PriceBook.bundled()).scan(at=at, scan_id="ksm-rules")
    # WHEN the same window is scanned from the recording's own DCGM and KSM series
    offline = ScanService(cluster_source=KsmRecordingSource(sc.path, window=window), telemetry_source=rec, window=window,
                          price_book=PriceBook.bundled()).scan(at=at, scan_id="ksm-recording")
    # THEN the live scan read the recorded buckets and KSM, and found the same waste with the same GPU-hours and dollars
    assert live.cluster_source.startswith("kube-state-metrics") and live.telemetry_quality["plan"] == "recording rules"
    assert finding_diffs(offline, live) == []
    waste = [f for f in live.findings if f.kind is WasteKind.IDLE]
    assert waste and all(f.wasted_gpu_hours > 0 and f.cost is not None and f.cost.usd_in_window for f in waste)
    key = lambda f: (f.fingerprint, f.wasted_gpu_hours, f.cost.usd_in_window if f.cost else None)  # noqa: E731
    assert sorted(map(key, live.findings)) == sorted(map(key, offline.findings))


def test_prometheus_source_gzip_answers_read_by_the_bounded_adapter_match_identity(
    scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN a real Prometheus, read once with gzip-encoded answers (decoded by BoundedAdapter) and once without
    sc = scenarios["random-exported"]
    url = prometheus_factory(sc.telemetry_file).url
    rec = RecordingTelemetrySource(sc.path)
    gz = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url, headers={"Accept-Encoding": "gzip"}), cluster=rec.cluster,
                                                  scrape_interval_s=rec.scrape_interval_s)
    plain = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=rec.cluster, scrape_interval_s=rec.scrape_interval_s)
    encodings: list[str] = []
    gz.client._session.hooks["response"].append(lambda r, *a, **k: encodings.append(r.headers.get("Content-Encoding", "")))
    at, window = rec.end_time(), timedelta(seconds=rec.meta.window_s or 3600)
    # WHEN both read the same window
    tw_gz = gz.telemetry(at=at, window=window)
    tw_plain = plain.telemetry(at=at, window=window)
    # THEN Prometheus really sent gzip, and the windows are the same
    assert encodings and set(encodings) == {"gzip"}
    assert tw_gz.gpus and window_diffs(tw_plain, tw_gz) == []


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_prometheus_source_answer_over_max_answer_mb_is_a_source_answer_error(
    encoding: str, scenarios: dict[str, Scenario], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN a real Prometheus whose raw-series answers for this fleet exceed 0.1 MB, and a 0.1 MB cap
    from gpuwaste.errors import SourceAnswerError

    sc = scenarios["random-exported"]
    url = prometheus_factory(sc.telemetry_file).url
    rec = RecordingTelemetrySource(sc.path)
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url, max_answer_mb=0.1, headers={"Accept-Encoding": encoding}),
                                                    cluster=rec.cluster)
    at = rec.end_time()
    sizes: list[int] = []
    probe = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=rec.cluster)
    probe.client._session.hooks["response"].append(lambda r, *a, **k: sizes.append(len(r.content)))
    probe.raw_series(at=at, range_s=rec.meta.window_s or 3600, chunk_s=rec.meta.window_s or 3600)
    assert max(sizes) > 100_000, max(sizes)  # the premise: at least one answer is over the cap
    # WHEN a raw series read asks for more than the cap / THEN the clear error naming the setting, not a partial window
    with pytest.raises(SourceAnswerError, match=r"answer over 0.1 MB .*raise prometheus.max_answer_mb or use recording rules / shards"):
        prom.raw_series(at=at, range_s=rec.meta.window_s or 3600, chunk_s=rec.meta.window_s or 3600)
