"""Integration: the kube-state-metrics cluster source against a real Prometheus backfilled with KSM series.

A generated fleet (its cluster written as KSM v2 series next to the DCGM series), plus a Job that finished in
the window and a pod deleted in it, is backfilled into Prometheus with promtool. The live source (six PromQL
queries) must give the state the recording path gives from the same file, and the state the API-shaped
cluster.json gives; a Prometheus-only scan (no cluster JSON, no Kubernetes) finds the fleet's ground truth.
Query counts are read from Prometheus' own request counter, not from the code under test.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.fleet.ksm_series import ksm_series
from gpuwaste.fleet.truth import compare
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.messages import FindingMessage, read_stage_body
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanService
from gpuwaste.sources.exposition import write_openmetrics
from gpuwaste.sources.ksm import KsmRecordingSource, PrometheusKsmSource
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.integration.test_pipeline_moto import chain  # noqa: F401 - the moto pipeline fixture

if TYPE_CHECKING:
    from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

WINDOW = timedelta(hours=1)


@dataclass
class Fleet:
    path: Path
    at: datetime
    ended_job: str
    deleted: str
    deleted_at: datetime


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """A random fleet as KSM + DCGM series, with a Job completed and a pod deleted inside the window."""
    spec = FleetSpec(layout="random", nodes=4, seed=11, cluster="ksm-it")
    f = generate_fleet(spec)
    path = write_recording(f, tmp_path_factory.mktemp("ksm") / "rec", compress=False)
    at = spec.eval_time
    done = at - timedelta(minutes=35)
    deleted_at = at - timedelta(minutes=22)
    node = next(o for o in f.objects if o["kind"] == "Node")["metadata"]["name"]
    iso = "%Y-%m-%dT%H:%M:%SZ"
    start = (at - timedelta(hours=5)).strftime(iso)
    job = {"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": "nightly-eval-28711440-q2x7z", "namespace": "ads", "uid": "uid-job", "creationTimestamp": start,
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "nightly-eval-28711440", "controller": True}]},
           "spec": {"nodeName": node, "containers": [{"name": "eval", "image": "eval:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
           "status": {"phase": "Succeeded", "startTime": start, "podIP": "10.244.200.1",
                      "containerStatuses": [{"name": "eval", "state": {"terminated": {"finishedAt": done.strftime(iso)}}}]}}
    gone = {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "scratch-debug", "namespace": "ads", "uid": "uid-gone", "creationTimestamp": start},
            "spec": {"nodeName": node, "containers": [{"name": "sh", "image": "debug:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "startTime": start, "podIP": "10.244.200.2"}}
    t_end = int(at.timestamp())
    times = [t * 1000 for t in range(t_end - (spec.history_s // 60 - 1) * 60, t_end + 1, 60)]
    extra = ksm_series([job, gone], times, gone_ms={("ads", "scratch-debug"): int(deleted_at.timestamp() * 1000)})
    om = path / "telemetry.om"
    with om.open("w") as out:
        write_openmetrics([*f.iter_series(), *extra], out, types={"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter"})
    # the same fleet with KSM scraped by a collector that renamed its labels (honorLabels: false): a copy without cluster.json
    exported = path.parent / "exported"
    exported.mkdir()
    for name in ("meta.json", "truth.json"):
        if (path / name).exists():
            (exported / name).write_text((path / name).read_text())
    with (exported / "telemetry.om").open("w") as out:
        write_openmetrics(_scraped_without_honor_labels([*f.iter_series(), *extra]), out,
                          types={"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter"})
    return Fleet(path, at, "nightly-eval-28711440-q2x7z", "scratch-debug", deleted_at)


#: The scrape target's labels of the KSM pod itself, which a scrape with honor_labels: false puts on every KSM series.
KSM_TARGET = {"namespace": "monitoring", "pod": "kube-state-metrics-6d4f8b9c7-x2k4q", "container": "kube-state-metrics",
              "job": "kube-state-metrics", "instance": "10.244.0.9:8080"}


def _scraped_without_honor_labels(series: list) -> list:  # type: ignore[type-arg]
    """KSM series as Prometheus stores them scraped with honor_labels: false: each own label that clashes with a target label
    renamed `exported_<name>`, the target's labels (the KSM pod's namespace, pod, container) added; DCGM series unchanged."""
    from gpuwaste.sources.exposition import RecordedSeries
    from gpuwaste.sources.ksm import is_ksm_metric

    out = []
    for s in series:
        if not is_ksm_metric(s.name):
            out.append(s)
            continue
        labels = {(f"exported_{k}" if k in KSM_TARGET else k): v for k, v in s.labels.items()}
        out.append(RecordedSeries(s.name, {**labels, **KSM_TARGET}, s.timestamps_ms, s.values))
    return out


def _query_requests(url: str) -> float:
    """Instant queries Prometheus has answered, from its own /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:  # noqa: S310 - loopback test server
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _live(url: str, cluster: str, window: timedelta = WINDOW) -> tuple[PrometheusKsmSource, PrometheusGpuMetricsSource]:
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster=cluster, scrape_interval_s=30)
    return PrometheusKsmSource(prom, cluster=cluster, window=window, scrape_interval_s=60), prom


def _pods(state: ClusterState) -> dict[tuple[str, str], tuple]:
    return {p.key: (p.phase, p.node_name, p.gpu_requests, p.pod_ip, p.started_at, p.workload.kind, p.workload.name,
                    p.workload.resolution, p.workload.exists, tuple(sorted(p.labels.items())), tuple(sorted(p.annotations.items())))
            for p in state.pods}


def test_ksm_live_state_equals_the_recording_and_the_api_shaped_state(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN the fleet backfilled into a real Prometheus
    server = prometheus_factory(fleet.path / "telemetry.om")
    source, _ = _live(server.url, "ksm-it")
    # WHEN the cluster is read live from KSM (counting the queries at Prometheus), from the recording's KSM series,
    # and from the fleet's cluster.json
    before = _query_requests(server.url)
    live = source.cluster_state(at=fleet.at)
    asked = _query_requests(server.url) - before
    recorded = KsmRecordingSource(fleet.path, window=WINDOW).cluster_state(at=fleet.at)
    api = RecordingClusterSource(fleet.path / "cluster.json").cluster_state(at=fleet.at)
    # THEN six queries plus one for the history of the pod deleted in the window; live == recording for every pod (phase, node, requests, IP, start, owner, labels) and node
    assert asked == 7 and source.query_count == 7
    assert _pods(live) == _pods(recorded)
    assert {n.name: n for n in live.nodes} == {n.name: n for n in recorded.nodes}
    assert live.exporter_pods == recorded.exporter_pods == api.exporter_pods
    assert live.namespace_annotations == recorded.namespace_annotations == api.namespace_annotations
    # ... and the fleet's own pods read as the API-shaped List reads them (history pods are KSM's extra)
    extra = {("ads", fleet.ended_job), ("ads", fleet.deleted)}
    assert {k: v for k, v in _pods(live).items() if k not in extra} == _pods(api)
    assert {n.name: n for n in live.nodes} == {n.name: n for n in api.nodes}


def test_ksm_scraped_with_renamed_labels_reads_the_objects_not_the_ksm_pod(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN the same fleet twice in real Prometheus: KSM scraped with honorLabels: true, and scraped with honorLabels: false
    # (object identity in exported_namespace/exported_pod/exported_container, namespace/pod naming the KSM pod)
    plain_url = prometheus_factory(fleet.path / "telemetry.om").url
    exported_dir = fleet.path.parent / "exported"
    server = prometheus_factory(exported_dir / "telemetry.om")
    source, _ = _live(server.url, "ksm-it")
    # WHEN both are read live (queries counted at Prometheus), twice for the renamed one, and from their recordings
    before = _query_requests(server.url)
    live = source.cluster_state(at=fleet.at)
    first, first_count = _query_requests(server.url) - before, source.query_count
    again = source.cluster_state(at=fleet.at)
    second = _query_requests(server.url) - before - first
    plain = _live(plain_url, "ksm-it")[0].cluster_state(at=fleet.at)
    recorded = KsmRecordingSource(exported_dir, window=WINDOW).cluster_state(at=fleet.at)
    recorded_plain = KsmRecordingSource(fleet.path, window=WINDOW).cluster_state(at=fleet.at)
    # THEN every pod, node and exporter pod is what the plain scrape gives (GPU requests, owners, phases, IPs, history),
    # by both paths; no request is the KSM pod's; the source says which labels named the objects
    assert _pods(live) == _pods(plain) == _pods(recorded) == _pods(recorded_plain) and _pods(again) == _pods(plain)
    assert {n.name: n for n in live.nodes} == {n.name: n for n in plain.nodes} == {n.name: n for n in recorded.nodes}
    assert live.exporter_pods == plain.exporter_pods == recorded.exporter_pods
    assert live.namespace_labels == plain.namespace_labels and live.namespace_annotations == plain.namespace_annotations
    assert not [p for p in live.pods if p.namespace == "monitoring" or p.name.startswith("kube-state-metrics")]
    assert sum(sum(p.gpu_requests.values()) for p in live.pods) == sum(sum(p.gpu_requests.values()) for p in plain.pods) > 0
    assert "exported_namespace/exported_pod" in live.source and "honorLabels: false" in live.source
    assert "exported_namespace/exported_pod" in recorded.source and "exported" not in plain.source
    # ... the first read learns the labels from the data (the plain plan, then the exported one), later reads use them
    assert (first, first_count, second, again.query_count) == (13, 13, 7, 7)


def test_prometheus_only_scan_with_renamed_ksm_labels_matches_the_ground_truth(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN only a Prometheus endpoint whose KSM was scraped with honorLabels: false
    server = prometheus_factory(fleet.path.parent / "exported" / "telemetry.om")
    ksm, prom = _live(server.url, "ksm-it")
    plain_ksm, plain_prom = _live(prometheus_factory(fleet.path / "telemetry.om").url, "ksm-it")
    # WHEN scanned, and the plain-scraped copy scanned
    report = ScanService(cluster_source=ksm, telemetry_source=prom, window=WINDOW, price_book=PriceBook.bundled()).scan(at=fleet.at)
    plain = ScanService(cluster_source=plain_ksm, telemetry_source=plain_prom, window=WINDOW, price_book=PriceBook.bundled()).scan(at=fleet.at)
    # THEN the ground truth is found, with the same subjects, GPU shares and dollars as the plain scrape
    truth = json.loads((fleet.path / "truth.json").read_text())
    result = compare(report.findings, truth)
    assert result.ok and result.matched == result.expected > 0, result.missed + result.unexpected
    key = lambda f: (f.kind.value, f.subject.namespace, f.subject.pod, f.subject.node, f.wasted_gpu_share)  # noqa: E731
    assert sorted((key(f), f.usd_per_day) for f in report.findings) == sorted((key(f), f.usd_per_day) for f in plain.findings)
    assert "honorLabels: false" in report.cluster_source


def test_doctor_says_the_ksm_objects_are_named_by_exported_labels(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN the KSM series scraped with honorLabels: false, and scraped plainly
    renamed = prometheus_factory(fleet.path.parent / "exported" / "telemetry.om").url
    plain = prometheus_factory(fleet.path / "telemetry.om").url
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    # WHEN doctor runs against each
    rows = {}
    for name, url in (("renamed", renamed), ("plain", plain)):
        result = CliRunner().invoke(app, ["doctor", "-p", url, "--at", fleet.at.strftime("%Y-%m-%dT%H:%M:%SZ"), "-o", "json"])
        rows[name] = [c for c in json.loads(result.stdout)["checks"] if c["check"] == "kube-state-metrics labels"]
    # THEN it says which labels name the objects where they are the exported ones, and nothing where they are plain
    assert [r["status"] for r in rows["renamed"]] == ["ok"] and "exported_namespace/exported_pod" in rows["renamed"][0]["detail"]
    assert rows["plain"] == []


def test_ksm_live_history_keeps_the_finished_job_and_the_deleted_pod(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN the backfilled fleet WHEN read live
    server = prometheus_factory(fleet.path / "telemetry.om")
    live = {p.name: p for p in _live(server.url, "ksm-it")[0].cluster_state(at=fleet.at).pods}
    # THEN the Job held its GPUs until its completion (35 min before the end) and the deleted pod until it was gone
    job, gone = live[fleet.ended_job], live[fleet.deleted]
    assert job.finished_at == fleet.at - timedelta(minutes=35) and not job.holds_gpus
    assert job.workload.kind == "CronJob" and job.workload.resolution == "inferred"
    assert gone.gone_at is not None and abs((gone.gone_at - fleet.deleted_at).total_seconds()) <= 60  # one scrape
    assert not gone.holds_gpus
    # ... while a read whose window ends before the deletion sees it running
    earlier = fleet.deleted_at - timedelta(minutes=5)
    before = {p.name: p for p in _live(server.url, "ksm-it")[0].cluster_state(at=earlier).pods}
    assert before[fleet.deleted].holds_gpus and before[fleet.deleted].gone_at is None


def test_prometheus_only_scan_matches_the_ground_truth(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN only a Prometheus endpoint (no cluster JSON, no Kubernetes API)
    server = prometheus_factory(fleet.path / "telemetry.om")
    ksm, prom = _live(server.url, "ksm-it")
    service = ScanService(cluster_source=ksm, telemetry_source=prom, window=WINDOW, price_book=PriceBook.bundled())
    # WHEN scanned live, and the recording scanned from its KSM series
    report = service.scan(at=fleet.at)
    rec = ScanService(cluster_source=KsmRecordingSource(fleet.path, window=WINDOW), telemetry_source=RecordingTelemetrySource(fleet.path),
                      window=WINDOW, price_book=PriceBook.bundled()).scan(at=fleet.at)
    # THEN every expected finding is found with nothing unexpected, as from the recording, with the same dollars
    truth = json.loads((fleet.path / "truth.json").read_text())
    result = compare(report.findings, truth)
    assert result.ok, result.missed + result.unexpected
    assert result.matched == result.expected > 0
    key = lambda f: (f.kind.value, f.subject.namespace, f.subject.pod, f.subject.node)  # noqa: E731
    assert sorted((key(f), f.usd_per_day) for f in report.findings) == sorted((key(f), f.usd_per_day) for f in rec.findings)
    assert report.cluster_source == f"kube-state-metrics at {server.url}"


def test_ksm_live_window_bounds_the_history(fleet: Fleet, prometheus_factory: PrometheusFactory):
    # GIVEN a 10-minute window ending after the Job completed (35 min before the end)
    server = prometheus_factory(fleet.path / "telemetry.om")
    live = _live(server.url, "ksm-it", window=timedelta(minutes=10))[0].cluster_state(at=fleet.at)
    # WHEN read THEN the Job is still listed (its object exists, Succeeded) but the pod deleted 22 min ago is not
    names = {p.name for p in live.pods}
    assert fleet.ended_job in names and fleet.deleted not in names


# -- the command: Prometheus-only mode, API + KSM, API unreachable ------------------------------------------------
PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces", "ReplicaSet": "replicasets", "Deployment": "deployments",
           "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs", "CronJob": "cronjobs"}


def _cli(args: list[str], home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def test_cli_scan_with_only_a_prometheus_url_reads_ksm_and_says_so(fleet: Fleet, prometheus_factory: PrometheusFactory, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch):
    # GIVEN a Prometheus URL and no kubeconfig anywhere (empty HOME, no KUBECONFIG)
    server = prometheus_factory(fleet.path / "telemetry.om")
    # WHEN `gpuwaste scan --prometheus URL` runs
    code, output = _cli(["scan", "--prometheus", server.url, "--at", fleet.at.isoformat(), "--window", "1h", "-q",
                         "--truth", str(fleet.path / "truth.json")], tmp_path, monkeypatch)
    # THEN it scans from kube-state-metrics, says so, and finds the ground truth
    assert code == 0, output
    assert f"cluster state: kube-state-metrics at {server.url}" in output
    assert "ground truth:" in output and " 0 unexpected, 0 missed" in output


def test_cli_scan_with_api_and_ksm_uses_the_api_and_notes_disagreements(fleet: Fleet, prometheus_factory: PrometheusFactory, kube_api,
                                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # GIVEN the API serving the fleet's objects, except one pod whose GPU request differs from what KSM recorded
    from tests.servers.kube_api import write_kubeconfig

    server = prometheus_factory(fleet.path / "telemetry.om")
    objects = json.loads((fleet.path / "cluster.json").read_text())["items"]
    changed = next(o for o in objects if o["kind"] == "Pod" and o["spec"]["containers"][0].get("resources", {}).get("limits", {}).get("nvidia.com/gpu"))
    changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"
    by: dict[str, list] = {}
    for o in objects:
        by.setdefault(PLURALS[o["kind"]], []).append(o)
    api = kube_api(by.pop("pods", []), by.pop("nodes", []), by)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
    # WHEN scanned with both
    code, output = _cli(["scan", "--prometheus", server.url, "--kubeconfig", str(kubeconfig), "--at", fleet.at.isoformat(),
                         "--window", "1h", "-q"], tmp_path, monkeypatch)
    # THEN the state is the API's now plus KSM's history, and the disagreement is a data-quality note naming the pod
    assert code == 0, output
    assert f"cluster state: kubernetes {api.url} (now) + kube-state-metrics at {server.url} (history over the window)" in output
    flat = " ".join(output.split())
    assert "disagree on 1 pod(s)" in flat and changed["metadata"]["name"] in flat
    assert api.requests_to("/api/v1/pods"), "the API was read"


def test_cli_scan_falls_back_to_ksm_when_the_kubeconfig_api_is_unreachable(fleet: Fleet, prometheus_factory: PrometheusFactory,
                                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # GIVEN ~/.kube/config pointing at a port nothing listens on
    from tests.servers.kube_api import write_kubeconfig
    from tests.servers.ports import free_port

    server = prometheus_factory(fleet.path / "telemetry.om")
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(tmp_path / ".kube" / "config", f"http://127.0.0.1:{free_port()}")
    # WHEN scanned in the default (auto) mode
    code, output = _cli(["scan", "--prometheus", server.url, "--at", fleet.at.isoformat(), "--window", "1h", "-q",
                         "--truth", str(fleet.path / "truth.json")], tmp_path, monkeypatch)
    # THEN the scan still works from KSM, and says the API was not used and why
    assert code == 0, output
    flat = " ".join(output.split())
    assert "Kubernetes API not used" in flat and "cluster state from kube-state-metrics only" in flat
    assert " 0 unexpected, 0 missed" in flat


def test_doctor_reports_ksm_series_and_allowlists_with_the_helm_values(tmp_path: Path, prometheus_factory: PrometheusFactory):
    # GIVEN a Prometheus whose KSM has no annotation allow-list, a node allow-list without the GFD product, and the
    # replicasets collector off
    from typer.testing import CliRunner

    from gpuwaste.cli import app
    from gpuwaste.fleet.ksm_series import KsmExport
    from gpuwaste.sources.ksm import ALLOWLIST

    spec = FleetSpec(layout="random", nodes=2, seed=4, cluster="doc", ksm_step_s=0)
    f = generate_fleet(spec)
    nodes = tuple(k for k in ALLOWLIST["labels"]["nodes"] if k != "nvidia.com/gpu.product")
    export = KsmExport(labels={**ALLOWLIST["labels"], "nodes": nodes}, annotations={},
                       exclude=frozenset({"kube_replicaset_owner", "kube_replicaset_created"}))
    t_end = int(spec.eval_time.timestamp())
    times = [t * 1000 for t in range(t_end - 1200, t_end + 1, 60)]
    om = tmp_path / "doctor.om"
    with om.open("w") as out:
        write_openmetrics([*f.iter_series(), *ksm_series(f.objects, times, export=export)], out)
    server = prometheus_factory(om)
    # WHEN `gpuwaste doctor --json` runs
    result = CliRunner().invoke(app, ["doctor", "--prometheus", server.url, "--at", spec.eval_time.isoformat(), "--json"])
    # THEN it counts the KSM series, names what is missing with its cost, and prints the allow-list Helm values
    assert result.exit_code == 0, result.output
    ksm = json.loads(result.output)["kube_state_metrics"]
    assert ksm["usable"] is True
    assert ksm["series"]["kube_pod_info"] > 0 and ksm["series"]["kube_pod_container_resource_limits"] > 0
    assert "kube_replicaset_owner" in ksm["missing"] and "inferred" in ksm["missing"]["kube_replicaset_owner"]
    assert "kube_pod_annotations" not in ksm["missing"]  # the series exists, with no annotation keys
    assert "labels nodes nvidia.com/gpu.product" in ksm["missing_keys"]
    assert "annotations pods gpuwaste.io/team" in ksm["missing_keys"]
    assert "labels nodes node.kubernetes.io/instance-type" not in ksm["missing_keys"]
    assert "metricLabelsAllowlist:" in ksm["helm_values"] and "metricAnnotationsAllowlist:" in ksm["helm_values"]
    assert "nodes=[node.kubernetes.io/instance-type," in ksm["helm_values"] and "nvidia.com/gpu.product" in ksm["helm_values"]


@pytest.mark.parametrize("scrape", ["honorLabels: true", "honorLabels: false"])
def test_record_without_kubernetes_writes_the_ksm_series_and_its_scan_matches_the_truth(
        scrape: str, fleet: Fleet, prometheus_factory: PrometheusFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # GIVEN only a Prometheus (no kubeconfig, no --cluster-json), KSM scraped with its own labels or with them renamed
    server = prometheus_factory((fleet.path if scrape.endswith("true") else fleet.path.parent / "exported") / "telemetry.om")
    out = tmp_path / "rec"
    # WHEN `gpuwaste record` runs, then `gpuwaste scan --recording` on what it wrote
    code, output = _cli(["record", str(out), "--prometheus", server.url, "--at", fleet.at.isoformat(), "--window", "1h", "-q"],
                        tmp_path, monkeypatch)
    assert code == 0, output
    code2, scanned = _cli(["scan", "-r", str(out), "-q", "--truth", str(fleet.path / "truth.json")], tmp_path, monkeypatch)
    # THEN the recording holds no cluster.json but the KSM series, and its scan finds the ground truth from them
    assert not (out / "cluster.json").exists()
    assert "kube-state-metrics series" in " ".join(output.split())
    assert code2 == 0, scanned
    assert "cluster state: kube-state-metrics series in recording" in scanned
    assert " 0 unexpected, 0 missed" in " ".join(scanned.split())
    # ... and the recorded KSM state equals the live one
    recorded = KsmRecordingSource(out, window=WINDOW).cluster_state(at=fleet.at)
    live = _live(server.url, "ksm-it")[0].cluster_state(at=fleet.at)
    assert _pods(recorded) == _pods(live) and len(recorded.pods) > 2


def test_sam_scan_of_a_cluster_with_only_an_amp_style_prometheus_endpoint(fleet: Fleet, prometheus_factory: PrometheusFactory,
                                                                          chain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: F811
    # GIVEN the pipeline (moto) configured with one cluster that has only a Prometheus endpoint signed with SigV4
    # (as Amazon Managed Service for Prometheus) and no Kubernetes settings, in a Lambda-like environment
    server = prometheus_factory(fleet.path / "telemetry.om")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    chain.ssm.put_parameter(Name="/gpuwaste/config", Type="String", Overwrite=True, Value=(
        f"clusters:\n  - name: ksm-it\n    prometheus:\n      url: {server.url}\n      auth: {{kind: sigv4, sigv4_region: us-east-1}}\n"))
    from tests.integration.test_pipeline_moto import reset_roots

    reset_roots()
    # WHEN the schedule fires at the fleet's evaluation time and the scan and price stages run
    chain.tick(fleet.at)
    chain.pump("ScanRequestsQueue")
    messages = chain.drain("FindingsQueue")
    # THEN the scan read its cluster state from kube-state-metrics and put the fleet's expected waste on the queue
    from gpuwaste.bootstrap import scan as scan_root

    assert isinstance(scan_root.scan_service("ksm-it").cluster_source, PrometheusKsmSource)
    sent = [m for body in messages for m in read_stage_body(body["Body"])]  # packed several findings to a message
    found = {(m.finding.kind.value, m.finding.subject.pod) for m in sent if isinstance(m, FindingMessage)}
    truth = json.loads((fleet.path / "truth.json").read_text())
    expected = {(t["kind"], t["pod"]) for t in truth if t["kind"] and t["kind"] != "unallocated_capacity"}
    assert expected and expected <= found


def test_dra_pod_read_live_from_kube_pod_resourceclaim_info_is_judged_as_from_the_api(tmp_path: Path, prometheus_factory: PrometheusFactory):
    # GIVEN the field guide's B25 input (trainer-0 holds 4 of 8 idle H100s through a ResourceClaim; the GPUs carry the
    # exporter's dra_* labels) in a real Prometheus, the cluster only as kube-state-metrics series
    from gpuwaste.sources.exposition import parse_exposition
    from tests.fixtures.allocation.objects import claim_pod, dra_node, uuid
    from tests.fixtures.field_guide.builders import EVAL, S, exposition, ksm_text

    host = "ip-10-0-9-1.ec2.internal"
    series = []
    for i in range(8):
        labels = {"gpu": str(i), "UUID": uuid(0x64 + i), "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host}
        labels |= ({"container": "main", "namespace": "research", "pod": "trainer-0", "dra_claim_name": "trainer-0-gpus-x7k2p",
                    "dra_claim_namespace": "research", "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": host,
                    "dra_device_name": f"gpu-{i}"} if i < 4 else {})
        series.append(S("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.001))
    objs = [dra_node(host), claim_pod("research", "trainer-0", host, "trainer-0-gpus-x7k2p")]
    parsed = parse_exposition(exposition(series) + ksm_text(objs), fmt="text")
    om = tmp_path / "b25.om"
    with om.open("w") as out:
        write_openmetrics(parsed.series.values(), out)
    ksm, prom = _live(prometheus_factory(om).url, "fg")
    # WHEN scanned live
    report = ScanService(cluster_source=ksm, telemetry_source=prom, window=WINDOW, price_book=PriceBook.bundled()).scan(at=EVAL)
    # THEN the pod was read with its claim (no GPU request: the live plan keeps pods that reference a ResourceClaim), and
    # it is idle with its 4 GPUs at $660.48/day, as the API path finds it (tests/unit/test_allocation_scan.py)
    (trainer,) = [p for p in ksm.cluster_state(at=EVAL).pods if p.name == "trainer-0"]
    assert [(r.name, r.claim_name) for r in trainer.resource_claims] == [("gpus", "trainer-0-gpus-x7k2p")] and not trainer.gpu_requests
    (idle,) = [f for f in report.findings if f.kind.value == "idle_allocation"]
    assert (idle.subject.pod, idle.subject.gpu_share, idle.usd_per_day) == ("trainer-0", 4, Decimal("660.48"))
