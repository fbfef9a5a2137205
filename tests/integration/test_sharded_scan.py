"""Integration: one cluster scanned whole and as 4 shards (issue 23 item 1) gives the same findings, fingerprints,
GPU-hours and dollars — against a real Prometheus backfilled with promtool, each shard reading only its nodes' series
(`Hostname=~"…"`, counted in Prometheus's own answers), and through the recording.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

import re
import shutil

import pytest

from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.cluster import ClusterState, Pod, Workload
from gpuwaste.models.findings import Finding
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.services.shards import plan_shards, shard_state
from gpuwaste.sources.ksm import PrometheusKsmSource
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource

if TYPE_CHECKING:
    from pathlib import Path

    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

SPECS = {
    "demo": FleetSpec(),
    "random": FleetSpec(layout="random", nodes=12, seed=23, label_style="exported", cluster="rs"),
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sharded")
    out = {}
    for name, spec in SPECS.items():
        write_recording(generate_fleet(spec), root / name, compress=False)
        out[name] = root / name
    shutil.copytree(root / "random", root / "thin")
    _add_thin_gpus(root / "thin" / "telemetry.om")
    out["thin"] = root / "thin"
    shutil.copytree(root / "demo", root / "pending")
    _add_pending_pod(root / "pending" / "telemetry.om")
    out["pending"] = root / "pending"
    return out


PENDING_POD = "llm-finetune-7d9c5-pending"


def _add_pending_pod(path: Path) -> None:
    """Add a replica of the demo's 4-GPU fine-tuning Deployment that no node took (Pending, `node=""`): a copy of
    every kube-state-metrics series of its running replica, each written right after the one it copies."""
    source = 'pod="llm-finetune-7d9c5-x2k4p"'
    out: list[str] = []
    copied = 0
    for line in path.read_text().splitlines():
        out.append(line)
        if line.startswith("kube_") and source in line:
            clone = line.replace(source, f'pod="{PENDING_POD}"').replace('uid="d7e2be50', 'uid="0000pend')
            clone = re.sub(r'node="[^"]*"', 'node=""', clone)
            clone = re.sub(r'pod_ip="[^"]*"', 'pod_ip=""', clone)
            if line.startswith("kube_pod_status_phase"):
                value = "1" if 'phase="Pending"' in line else "0"
                name, rest = clone.split("} ", 1)
                clone = f"{name}}} {value} {rest.split()[-1]}"
            out.append(clone)
            copied += 1
    assert copied, "the demo fleet's fine-tuning pod must be in the recording"
    path.write_text("\n".join(out) + "\n")


THIN_FIELD = "DCGM_FI_DEV_SM_CLOCK"  # a clock: no field the scan reads (issue 21 §9: counted, never judged)


def _add_thin_gpus(path: Path) -> None:
    """Add two GPUs per node that report only `THIN_FIELD` (labels as that node's exporter writes them, a UUID of
    their own), sampled like the rest of the recording."""
    lines = path.read_text().splitlines()
    assert lines[-1] == "# EOF" and not any(line.startswith(THIN_FIELD) for line in lines)
    first: dict[str, str] = {}  # node → the label set of its first GPU_UTIL series
    stamps: set[int] = set()
    for line in lines:
        if line.startswith("DCGM_FI_DEV_GPU_UTIL{"):
            labels, _, rest = line[len("DCGM_FI_DEV_GPU_UTIL{"):].partition("} ")
            host = re.search(r'[Hh]ostname="([^"]+)"', labels)
            assert host is not None
            first.setdefault(host.group(1), labels)
            stamps.add(int(rest.split()[1]))
    extra = [f"# TYPE {THIN_FIELD} unknown"]
    for node, labels in sorted(first.items()):
        for i in (0, 1):
            thin = re.sub(r'UUID="[^"]+"', f'UUID="GPU-thin-{node}-{i}"', labels)
            thin = re.sub(r'gpu="\d+"', f'gpu="{90 + i}"', thin)
            thin = re.sub(r',exported_(?:namespace|pod|container)="[^"]*"', "", thin)  # held by no pod
            extra += [f"{THIN_FIELD}{{{thin}}} 1410 {t}" for t in sorted(stamps)]
    path.write_text("\n".join(lines[:-1] + extra + ["# EOF"]) + "\n")


class Replicated:
    """The recording's cluster state with its GPU pods re-owned in pairs by one Deployment per pair (pods sorted by
    name within a namespace, so the pairs mostly sit on different nodes): replicas a node-hash split would tear."""

    def __init__(self, path: Path) -> None:
        self.inner = RecordingClusterSource(path)

    def cluster_state(self, *, at: datetime) -> ClusterState:
        state = self.inner.cluster_state(at=at)
        pods = sorted((p for p in state.pods if p.name not in state.exporter_pods and p.node_name), key=lambda p: (p.namespace, p.name))
        owner: dict[tuple[str, str], Workload] = {}
        by_ns: dict[str, list[Pod]] = {}
        for p in pods:
            by_ns.setdefault(p.namespace, []).append(p)
        for ns, group in by_ns.items():
            for i, p in enumerate(group):
                owner[p.key] = Workload(kind="Deployment", name=f"pair-{i // 2}", namespace=ns)
        return state.model_copy(update={"pods": tuple(p.model_copy(update={"workload": owner[p.key]}) if p.key in owner else p
                                                      for p in state.pods)})


def _spread(state: ClusterState) -> int:
    """Workloads whose pods sit on more than one node."""
    nodes: dict[tuple[str, str, str], set[str]] = {}
    for p in state.pods:
        if p.node_name and p.name not in state.exporter_pods:
            nodes.setdefault((p.workload.namespace, p.workload.kind, p.workload.name), set()).add(p.node_name)
    return sum(1 for v in nodes.values() if len(v) > 1)


def _scan(path: Path, telemetry: Any, shard: int, shard_count: int) -> ScanReport:
    rec = RecordingTelemetrySource(path)
    service = ScanService(cluster_source=Replicated(path), telemetry_source=telemetry,
                          window=timedelta(seconds=rec.meta.window_s or 3600), price_book=PriceBook.bundled())
    return service.scan(at=rec.end_time(), scan_id="s", shard=shard, shard_count=shard_count)


def _key(f: Finding) -> tuple[Any, ...]:
    return (f.fingerprint, f.kind.value, f.subject.namespace, f.subject.pod, f.subject.node, f.wasted_gpu_share,
            f.wasted_gpu_hours, f.usd_per_day, f.money_owner, f.title)


def _compare(whole: ScanReport, shards: list[ScanReport]) -> None:
    parts = [f for r in shards for f in r.findings]
    fingerprints = Counter(f.fingerprint for f in parts)
    assert [fp for fp, n in fingerprints.items() if n > 1] == [], "a fingerprint came from two shards"
    assert sorted(map(_key, parts)) == sorted(map(_key, whole.findings))
    assert sum((f.usd_per_day or Decimal(0) for f in parts), Decimal(0)) == sum((f.usd_per_day or Decimal(0) for f in whole.findings), Decimal(0))
    # a pod's no-verdicts come from its shard alone; a cluster-wide one (the window's look-back) from every shard
    pods = [(nv.subject, nv.reason) for r in shards for nv in r.no_verdict if nv.subject != whole.cluster]
    assert sorted(pods) == sorted((nv.subject, nv.reason) for nv in whole.no_verdict if nv.subject != whole.cluster)
    assert {(nv.subject, nv.reason) for r in shards for nv in r.no_verdict} == {(nv.subject, nv.reason) for nv in whole.no_verdict}
    assert sum(r.inventory.physical_gpus for r in shards) == whole.inventory.physical_gpus
    assert sum(r.inventory.nodes for r in shards) == whole.inventory.nodes


@pytest.mark.parametrize("name", list(SPECS))
def test_recording_scanned_as_four_shards_gives_the_whole_scans_findings(name: str, recordings: dict[str, Path]) -> None:
    # GIVEN a generated fleet with replicated workloads across nodes
    path = recordings[name]
    # WHEN scanned whole and as 4 shards
    whole = _scan(path, RecordingTelemetrySource(path), 0, 1)
    shards = [_scan(path, RecordingTelemetrySource(path), k, 4) for k in range(4)]
    # THEN the shards' findings together are exactly the whole scan's, each fingerprint from one shard
    assert whole.findings, "the fleet must produce findings to compare"
    assert sum(1 for r in shards if r.findings) >= 2, "the fleet must spread over several shards"
    _compare(whole, shards)


def test_prometheus_scanned_as_four_shards_reads_each_shards_nodes_and_gives_the_whole_scans_findings(
    recordings: dict[str, Path], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN the random fleet backfilled into a real Prometheus
    path = recordings["random"]
    server = prometheus_factory(path / "telemetry.om")
    rec = RecordingTelemetrySource(path)

    def source() -> PrometheusGpuMetricsSource:
        return PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster=rec.cluster,
                                                        scrape_interval_s=rec.scrape_interval_s)

    # WHEN scanned whole and as 4 shards, each shard asking Prometheus for its nodes only
    whole = _scan(path, source(), 0, 1)
    shards = [_scan(path, source(), k, 4) for k in range(4)]
    # THEN the same findings and money, and each shard's GPUs came from Prometheus narrowed to its nodes
    assert whole.findings
    _compare(whole, shards)
    plan = plan_shards(Replicated(path).cluster_state(at=rec.end_time()), 4)
    for k, report in enumerate(shards):
        if not plan.nodes(k):
            assert report.inventory.physical_gpus == 0
            continue
        narrowed = source().for_hostnames(sorted(plan.nodes(k))).telemetry(at=rec.end_time(), window=timedelta(seconds=3600))
        assert {g.hostname for g in narrowed.gpus} <= plan.nodes(k)
        assert narrowed.gpus and len({g.device.uuid for g in narrowed.gpus}) == report.inventory.physical_gpus


def test_plan_keeps_a_workloads_replicas_in_one_shard(recordings: dict[str, Path]) -> None:
    # GIVEN a fleet whose Deployments have replicas on several nodes
    path = recordings["random"]
    state = Replicated(path).cluster_state(at=RecordingTelemetrySource(path).end_time())
    assert _spread(state) >= 3, "the fleet must have workloads on several nodes"
    # WHEN planned into 4 shards
    plan = plan_shards(state, 4)
    # THEN every node is in one shard, every workload's pods in one shard, and the shards are used
    assert set(plan.node_shard) >= {n.name for n in state.nodes}
    by_workload: dict[tuple[str, str, str], set[int]] = {}
    for p in state.pods:
        if p.node_name and p.name not in state.exporter_pods:
            by_workload.setdefault((p.workload.namespace, p.workload.kind, p.workload.name), set()).add(plan.node_shard[p.node_name])
    assert all(len(s) == 1 for s in by_workload.values())
    assert sum(1 for g in plan.gpus if g) >= 2 and sum(plan.gpus) == sum(plan_shards(state, 1).gpus)


class _TooManyHosts(RecordingTelemetrySource):
    """A node-scoped source whose matcher cannot hold the shard's hosts (as `promql.OneOf` past its bound)."""

    asked = 0

    def for_hostnames(self, values: Any) -> RecordingTelemetrySource:
        type(self).asked += 1
        raise ValueError(f"{len(values)} values over the bound")


def test_a_shard_whose_host_list_is_too_long_reads_whole_and_keeps_its_own(recordings: dict[str, Path]) -> None:
    # GIVEN a source that refuses every shard's host list
    path = recordings["random"]
    whole = _scan(path, RecordingTelemetrySource(path), 0, 1)
    # WHEN scanned as 4 shards
    shards = [_scan(path, _TooManyHosts(path), k, 4) for k in range(4)]
    # THEN each shard asked, read every series instead, and the findings are still the whole scan's
    assert _TooManyHosts.asked == sum(1 for k in range(4) if plan_shards(Replicated(path).cluster_state(
        at=RecordingTelemetrySource(path).end_time()), 4).nodes(k))
    _compare(whole, shards)


def _other_gpus(path: Path, telemetry: Any, shard: int, shard_count: int) -> tuple[str, ...]:
    """The GPUs with thin telemetry shard `shard` counts (the telemetry its detectors see)."""
    rec = RecordingTelemetrySource(path)
    service = ScanService(cluster_source=Replicated(path), telemetry_source=telemetry,
                          window=timedelta(seconds=rec.meta.window_s or 3600), price_book=PriceBook.bundled())
    at = rec.end_time()
    if shard_count == 1:
        return service.telemetry_source.telemetry(at=at, window=service.window).other_gpus
    _, window = service._read_shard(at, {}, shard, shard_count)
    return window.other_gpus


@pytest.mark.parametrize("path_kind", ["recording", "prometheus"])
def test_thin_gpus_are_counted_by_the_shard_of_their_node(path_kind: str, recordings: dict[str, Path],
                                                         prometheus_factory: PrometheusFactory) -> None:
    # GIVEN the random fleet with two GPUs per node that report only a clock (thin telemetry), as a recording and
    # backfilled into a real Prometheus
    path = recordings["thin"]
    rec = RecordingTelemetrySource(path)
    if path_kind == "prometheus":
        server = prometheus_factory(path / "telemetry.om")

        def source() -> Any:
            return PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster=rec.cluster,
                                                            scrape_interval_s=rec.scrape_interval_s)
    else:
        def source() -> Any:
            return RecordingTelemetrySource(path)
    plan = plan_shards(Replicated(path).cluster_state(at=rec.end_time()), 4)
    # WHEN scanned whole and as 4 shards
    whole = _scan(path, source(), 0, 1)
    shards = [_scan(path, source(), k, 4) for k in range(4)]
    # THEN the whole scan counts every thin GPU, and each shard exactly those on its own nodes
    thin_whole = _other_gpus(path, source(), 0, 1)
    assert len(thin_whole) == 2 * len({n.name for n in Replicated(path).cluster_state(at=rec.end_time()).nodes})
    for k in range(4):
        mine = _other_gpus(path, source(), k, 4)
        assert sorted(mine) == sorted(f"GPU-thin-{n}-{i}" for n in plan.nodes(k) for i in (0, 1)), f"shard {k}"
    # AND the inventories and findings of the shards add up to the whole scan's
    _compare(whole, shards)


class _Answers:
    """The Prometheus client of a KSM source, keeping every answer it hands over (what → items)."""

    def __init__(self, inner: PrometheusGpuMetricsSource) -> None:
        self.inner = inner
        self.url = inner.url
        self.matchers = inner.matchers
        self.answers: list[tuple[str, list[dict[str, Any]]]] = []

    def instant_query(self, promql: str, *, at: datetime | None, what: str = "query") -> list[dict[str, Any]]:
        result = self.inner.instant_query(promql, at=at, what=what)
        self.answers.append((what, [{"metric": dict(i.get("metric") or {}), "value": i.get("value")} for i in result]))
        return result


def _ksm_scan(cluster: Any, telemetry: Any, window_s: int, at: datetime, shard: int, shard_count: int) -> ScanReport:
    service = ScanService(cluster_source=cluster, telemetry_source=telemetry, window=timedelta(seconds=window_s),
                          price_book=PriceBook.bundled())
    return service.scan(at=at, scan_id="s", shard=shard, shard_count=shard_count)


@pytest.mark.parametrize("name", [*SPECS, "pending"])
def test_kube_state_metrics_read_per_shard_holds_only_its_nodes_pods_and_gives_the_whole_scans_findings(
    name: str, recordings: dict[str, Path], prometheus_factory: PrometheusFactory
) -> None:
    # GIVEN a fleet's DCGM and kube-state-metrics series backfilled into a real Prometheus (the random fleet's scraped
    # with honor_labels: false, its pods named by exported_pod), the cluster state read from kube-state-metrics
    path = recordings[name]
    server = prometheus_factory(path / "telemetry.om")
    rec = RecordingTelemetrySource(path)
    at, window_s = rec.end_time(), rec.meta.window_s or 3600

    def sources() -> tuple[PrometheusKsmSource, PrometheusGpuMetricsSource, _Answers]:
        tel = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster=rec.cluster,
                                                       scrape_interval_s=rec.scrape_interval_s)
        answers = _Answers(tel)
        return (PrometheusKsmSource(answers, cluster=rec.cluster, window=timedelta(seconds=window_s),
                                    scrape_interval_s=rec.scrape_interval_s), tel, answers)

    ksm, tel, _ = sources()
    full = ksm.cluster_state(at=at)
    assert len({p.node_name for p in full.pods if p.node_name}) >= 4, "the fleet must spread over nodes"
    unscheduled = {p.key for p in full.pods if not p.node_name}
    assert unscheduled == ({("research", PENDING_POD)} if name == "pending" else set())
    plan = plan_shards(ksm.planning_state(at=at), 4)
    assert plan == plan_shards(full, 4), "the plan from the planning read is the plan from the full read"
    # WHEN each shard reads kube-state-metrics narrowed to its nodes (after the planning read, whose nodes and owners
    # it uses as they are: `reuse`; or alone)
    for k, reuse in [(k, reuse) for k in range(4) for reuse in (True, False)]:
        ksm, _, answers = sources()
        if reuse:
            ksm.planning_state(at=at)
            answers.answers.clear()
        mine = ksm.for_nodes(sorted(plan.nodes(k)), first=k == 0).cluster_state(at=at)
        assert {w for w, _ in answers.answers} >= {"kube-state-metrics pods", "kube-state-metrics resources"}
        assert ("kube-state-metrics nodes" in {w for w, _ in answers.answers}) is not reuse
        # THEN every pod and node series Prometheus answered belongs to the shard's nodes or to no node
        pods_here = {p.key for p in full.pods if p.node_name in plan.nodes(k) or not p.node_name}
        pods_here |= {(p.namespace, p.name) for p in full.pods if p.name in full.exporter_pods}
        answered = [(what, i["metric"]) for what, items in answers.answers for i in items]
        assert answered, "the shard read something"
        for what, labels in answered:
            if "node" in labels and "namespaces and owners" not in what:
                assert labels["node"] in plan.nodes(k) | {""}, (k, what, labels)
            pod = labels.get("exported_pod") or labels.get("pod")
            if pod and not pod.startswith("kube-state-metrics") and "namespaces and owners" not in what:
                ns = labels.get("exported_namespace") or labels.get("namespace", "")
                assert (ns, pod) in pods_here or full.exporter_pods.get(pod, "") in plan.nodes(k) | {""} or \
                    pod not in {p.name for p in full.pods}, (k, what, labels)
        # AND the shard's state is the whole state narrowed to the shard
        expected = shard_state(full, plan, k)
        assert sorted(p.key for p in mine.pods) == sorted(p.key for p in expected.pods)
        assert sorted(n.name for n in shard_state(mine, plan, k).nodes) == sorted(n.name for n in expected.nodes)
        assert mine.exporter_pods == expected.exporter_pods
        assert unscheduled <= {p.key for p in mine.pods}, "every shard knows the pods waiting for a node"
    # AND scanned whole and as 4 shards (each reading its own nodes) the findings, GPU-hours and dollars are the same
    whole = _ksm_scan(sources()[0], tel, window_s, at, 0, 1)
    shards = [_ksm_scan(sources()[0], tel, window_s, at, k, 4) for k in range(4)]
    assert whole.findings and sum(1 for r in shards if r.findings) >= 2
    _compare(whole, shards)
