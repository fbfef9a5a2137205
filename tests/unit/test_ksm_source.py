"""kube-state-metrics as the cluster-state source: KSM series (as KSM v1/v2 export them) → the same `ClusterState`
the Kubernetes API gives, the quirks of KSM handled as a kind, and the API + KSM merge.

Inputs are kubectl-shaped objects turned into the series kube-state-metrics would export for them
(`fleet.ksm_series`), written as a text exposition next to a DCGM series and read back through the recording
path, as `gpuwaste scan --recording` does without cluster.json.
"""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.errors import SourceAuthError, SourceUnavailableError
from gpuwaste.fleet.ksm_series import KsmExport, ksm_series
from gpuwaste.models.cluster import ClusterState, PodPhase
from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.exposition import write_text_exposition
from gpuwaste.sources.k8s_objects import cluster_state_from_objects
from gpuwaste.sources.ksm import (
    ApiWithKsmHistory,
    KsmRecordingSource,
    PrometheusKsmSource,
    helm_values,
    ksm_history_query,
    ksm_queries,
    merge_states,
    resource_name,
    sanitize,
)
from tests.fixtures.field_guide.builders import EVAL, WINDOW, node, pod

T0 = EVAL - WINDOW
ISO = "%Y-%m-%dT%H:%M:%SZ"


def _times(step_s: int = 30, start: datetime = T0, end: datetime = EVAL) -> list[int]:
    n = int((end - start).total_seconds() // step_s)
    return [int((start + timedelta(seconds=i * step_s)).timestamp() * 1000) for i in range(n + 1)]


def _read(tmp: Path, objects: list[dict[str, Any]], *, export: KsmExport | None = None, gone: dict[tuple[str, str], int] | None = None,
          read: ClusterReadSettings | None = None) -> ClusterState:
    buf = io.StringIO()
    buf.write(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="n1"}} 0 {_times()[-1]}\n')
    write_text_exposition(ksm_series(objects, _times(), export=export, gone_ms=gone), buf)
    (tmp / "telemetry.prom").write_text(buf.getvalue())
    return KsmRecordingSource(tmp, settings=read, window=WINDOW).cluster_state(at=EVAL)


def _api(objects: list[dict[str, Any]]) -> ClusterState:
    return cluster_state_from_objects(objects, cluster="c", observed_at=EVAL)


def _controllers() -> list[dict[str, Any]]:
    return [
        {"kind": "ReplicaSet", "apiVersion": "apps/v1", "metadata": {"name": "llm-7d9c5", "namespace": "ml", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "controller": True}]}},
        {"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "llm", "namespace": "ml"}},
    ]


def _owned_pod(**kw: Any) -> dict[str, Any]:
    p = pod("ml", "llm-7d9c5-x2k4p", "n1", gpus=2, owner=("ReplicaSet", "llm-7d9c5"), ip="10.244.1.5", **kw)
    p["metadata"]["labels"] = {"app": "llm", "pod-template-hash": "7d9c5", "secret-ish": "not-allow-listed"}
    p["metadata"]["annotations"] = {"gpuwaste.io/team": "ml-platform"}
    return p


# -- the same state as the API ---------------------------------------------------------------------------------
def test_ksm_state_equals_the_api_state_for_pods_nodes_owners_and_labels(tmp_path):
    # GIVEN a GPU node, a Deployment-owned pod with allow-listed labels and annotations, and an exporter pod
    objs = [node("n1", itype="g5.12xlarge", gpus=4, provider_id="aws:///us-east-1a/i-0abc", ip="10.0.0.7"), _owned_pod(),
            pod("gpu-operator", "nvidia-dcgm-exporter-abcde", "n1", gpus=0, owner=("DaemonSet", "nvidia-dcgm-exporter"), ip="10.244.0.7"),
            *_controllers()]
    # WHEN read from the KSM series and from the objects themselves
    ksm, api = _read(tmp_path, objs), _api(objs)
    # THEN the pod, its top controller (from kube_replicaset_owner, not inferred), node and exporter maps agree
    (k,), (a,) = ksm.pods, api.pods
    assert (k.phase, k.node_name, k.gpu_requests, k.pod_ip, k.started_at) == (a.phase, a.node_name, a.gpu_requests, a.pod_ip, a.started_at)
    assert (k.workload.kind, k.workload.name, k.workload.resolution, k.workload.exists) == ("Deployment", "llm", "api", True)
    assert k.workload == a.workload
    assert k.labels == {"app": "llm", "pod-template-hash": "7d9c5"}  # the key outside the allow-list is not exported
    assert k.annotations == {"gpuwaste.io/team": "ml-platform"}
    (kn,), (an,) = ksm.nodes, api.nodes
    assert kn == an  # instance type, GFD count, capacity, allocatable, providerID, InternalIP, creation time
    assert ksm.exporter_pods == api.exporter_pods == {"nvidia-dcgm-exporter-abcde": "n1"}
    assert ksm.exporter_pod_ips == {"10.244.0.7": "n1"}
    assert ksm.source.startswith("kube-state-metrics series in recording")


def test_ksm_effective_request_is_max_of_largest_init_container_and_sum_of_app_containers(tmp_path):
    # GIVEN two pods: 2×1 GPU app containers with a 4-GPU init container, and 2×2 with a 1-GPU init container
    objs = [node("n1", gpus=8), pod("ads", "a", "n1", gpus=1, containers=2, init_gpus=4), pod("ads", "b", "n1", gpus=2, containers=2, init_gpus=1)]
    # WHEN read from kube_pod_container_resource_* and kube_pod_init_container_resource_* series
    state = _read(tmp_path, objs)
    # THEN a holds max(4, 2) = 4 and b holds max(1, 4) = 4
    assert {p.name: p.gpu_requests for p in state.pods} == {"a": {"nvidia.com/gpu": 4}, "b": {"nvidia.com/gpu": 4}}


# -- B11 / B10: requests that are not holdings, phase over the window ------------------------------------------
def test_ksm_requests_of_finished_and_unscheduled_pods_are_not_holdings(tmp_path):
    # GIVEN the B11 input: a Succeeded 8-GPU pod (its request series still exported) and a Pending pod with node=""
    objs = [node("ip-10-1-90-3", itype="p4d.24xlarge", gpus=8),
            pod("ads", "offline-eval-28712000-abcde", "ip-10-1-90-3", gpus=8, phase="Succeeded"),
            pod("ads", "big-sweep-trial-17", None, gpus=4, phase="Pending")]
    # WHEN read from KSM
    pods = {p.name: p for p in _read(tmp_path, objs).pods}
    # THEN both are known with their requests, and neither holds GPUs
    assert pods["offline-eval-28712000-abcde"].phase is PodPhase.SUCCEEDED and pods["big-sweep-trial-17"].node_name is None
    assert pods["offline-eval-28712000-abcde"].gpu_requests == {"nvidia.com/gpu": 8}
    assert not any(p.holds_gpus for p in pods.values())


def test_ksm_job_that_finished_mid_window_has_its_lifetime(tmp_path):
    # GIVEN a Job pod started before the window that completed 40 minutes before its end
    done = EVAL - timedelta(minutes=40)
    p = pod("search", "nightly-embed-28711440-x7k2p", "n1", phase="Succeeded", owner=("Job", "nightly-embed-28711440"))
    p["status"]["containerStatuses"] = [{"name": "c0", "state": {"terminated": {"finishedAt": done.strftime(ISO)}}}]
    # WHEN read from KSM (phase Running until then, Succeeded and kube_pod_completion_time after)
    (got,) = _read(tmp_path, [node("n1"), p]).pods
    # THEN it held its GPU from its start to its completion, not after
    assert got.phase is PodPhase.SUCCEEDED and not got.holds_gpus
    assert got.started_at == datetime(2024, 1, 1, tzinfo=UTC) and got.finished_at == done
    assert got.workload.kind == "CronJob" and got.workload.resolution == "inferred"  # no kube_job_owner: named by convention


def test_ksm_pod_deleted_mid_window_is_kept_with_the_time_it_was_gone(tmp_path):
    # GIVEN a Running pod whose object was deleted 20 minutes before the window's end (its series stop then)
    gone = EVAL - timedelta(minutes=20)
    objs = [node("n1"), pod("ml", "trainer-0", "n1"), pod("ml", "trainer-1", "n1")]
    # WHEN read from KSM
    pods = {p.name: p for p in _read(tmp_path, objs, gone={("ml", "trainer-0"): int(gone.timestamp() * 1000)}).pods}
    # THEN the deleted pod is known (its GPUs were held until then) but holds nothing now; the other still holds
    assert pods["trainer-0"].gone_at == gone and pods["trainer-0"].finished_at == gone and not pods["trainer-0"].holds_gpus
    assert pods["trainer-1"].gone_at is None and pods["trainer-1"].holds_gpus


# -- naming: KSM v1/v2, sanitised resource and label names -----------------------------------------------------
@pytest.mark.parametrize(("sanitized", "name"), [
    ("nvidia_com_gpu", "nvidia.com/gpu"),
    ("nvidia_com_gpu_shared", "nvidia.com/gpu.shared"),
    ("nvidia_com_mig_1g_10gb", "nvidia.com/mig-1g.10gb"),
    ("nvidia_com_mig_3g_40gb", "nvidia.com/mig-3g.40gb"),
    ("nvidia_com_mig_1g_24gb_me", "nvidia.com/mig-1g.24gb+me"),
    ("k8s_amazonaws_com_vgpu", "k8s.amazonaws.com/vgpu"),
    ("cpu", "cpu"),
])
def test_ksm_sanitised_resource_names_map_back_to_kubernetes_names(sanitized, name):
    # GIVEN a resource label as KSM sanitises it WHEN mapped back THEN the Kubernetes resource name
    assert resource_name(sanitized) == name
    assert sanitize(name) == sanitized


def test_ksm_v1_per_resource_gpu_metrics_and_v2_names_give_the_same_state(tmp_path):
    # GIVEN one cluster exported by KSM v1 (…_nvidia_gpu_devices / …_nvidia_gpu_cards, every label) and by v2
    objs = [node("n1", itype="p4d.24xlarge", gpus=8), pod("ml", "trainer-0", "n1", gpus=8)]
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    v1 = _read(tmp_path / "v1", objs, export=KsmExport(version=1))
    v2 = _read(tmp_path / "v2", objs)
    # THEN both read 8 requested GPUs on a node with 8 allocatable, priced as a p4d.24xlarge
    for state in (v1, v2):
        (p,), (n,) = state.pods, state.nodes
        assert p.gpu_requests == {"nvidia.com/gpu": 8} and p.holds_gpus
        assert n.allocatable_gpu == {"nvidia.com/gpu": 8} and n.instance_type == "p4d.24xlarge"


def test_ksm_mig_mixed_resources_keep_their_profile_names(tmp_path):
    # GIVEN a pod requesting nvidia.com/mig-3g.40gb (KSM: resource="nvidia_com_mig_3g_40gb")
    objs = [node("n1", gpus=None, resource=""), pod("speech", "asr-0", "n1", resource="nvidia.com/mig-3g.40gb")]
    # WHEN read THEN the request keeps the MIG profile (3 of 7 slices are priced from it)
    (p,) = _read(tmp_path, objs).pods
    assert p.gpu_requests == {"nvidia.com/mig-3g.40gb": 1}


# -- allow-lists missing: what is missing and what it costs ----------------------------------------------------
def test_ksm_missing_label_allowlists_are_named_with_their_cost(tmp_path):
    # GIVEN KSM v2 without metricLabelsAllowlist / metricAnnotationsAllowlist and without the replicasets collector
    objs = [node("n1", itype="g5.xlarge"), _owned_pod(), *_controllers()]
    export = KsmExport(labels={}, annotations={}, exclude=frozenset({"kube_replicaset_owner", "kube_replicaset_created"}))
    # WHEN read
    state = _read(tmp_path, objs, export=export)
    # THEN the node has no instance type, the owner is inferred, and each gap is a note saying what it costs
    (p,), (n,) = state.pods, state.nodes
    assert n.instance_type is None
    assert (p.workload.kind, p.workload.name, p.workload.resolution) == ("Deployment", "llm", "inferred")
    text = " | ".join(state.notes)
    assert "kube_node_labels" in text and "cannot be priced" in text
    assert "kube_replicaset_owner" in text and "inferred" in text
    assert "metricAnnotationsAllowlist" in text and "routing" in text
    assert "kube_pod_labels" in text


def test_ksm_default_allowlist_leaves_no_notes(tmp_path):
    # GIVEN the allow-lists `gpuwaste doctor` prints, and a node carrying every needed label
    labels = {"karpenter.sh/capacity-type": "spot", "nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/gpu.replicas": "1"}
    objs = [node("n1", itype="g5.xlarge", labels=labels), _owned_pod(), *_controllers()]
    # WHEN read THEN nothing is missing, and the capacity type came through
    state = _read(tmp_path, objs)
    assert state.notes == ()
    assert state.nodes[0].capacity_type == "spot"


def test_ksm_helm_values_name_every_allowlisted_key():
    # GIVEN the Helm values doctor prints WHEN read THEN both allow-lists, the node labels pricing needs and the collectors
    text = helm_values()
    assert "metricLabelsAllowlist:" in text and "metricAnnotationsAllowlist:" in text
    assert "nodes=[node.kubernetes.io/instance-type," in text and "nvidia.com/gpu.product" in text
    assert "replicasets" in text and "jobs" in text


def test_ksm_docs_quote_the_helm_values_doctor_prints():
    # GIVEN docs/kube-state-metrics.md's Helm values block WHEN compared with what `gpuwaste doctor` prints
    doc = (Path(__file__).resolve().parents[2] / "docs" / "kube-state-metrics.md").read_text(encoding="utf-8")
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0].strip()
    # THEN they are the same (the comment line aside), so the doc's annotation names are the ones the scan reads
    printed = "\n".join(line for line in helm_values().splitlines() if not line.startswith("#"))
    assert block == printed


# -- API + KSM -------------------------------------------------------------------------------------------------
def test_api_and_ksm_disagreement_becomes_a_note_and_the_api_wins(tmp_path):
    # GIVEN the API says trainer-0 runs on n1 with 2 GPUs; KSM (lagging) says 1 GPU, and saw a Job finish in the window
    done = EVAL - timedelta(minutes=30)
    job = pod("ml", "eval-28711440-abcde", "n1", phase="Succeeded", owner=("Job", "eval-28711440"))
    job["status"]["containerStatuses"] = [{"name": "c0", "state": {"terminated": {"finishedAt": done.strftime(ISO)}}}]
    api = _api([node("n1", gpus=4), pod("ml", "trainer-0", "n1", gpus=2)])
    ksm = _read(tmp_path, [node("n1", gpus=4), pod("ml", "trainer-0", "n1", gpus=1), job])
    # WHEN merged
    state = merge_states(api, ksm)
    # THEN the API's request is used, the disagreement is a note, and the finished Job comes from KSM's history
    pods = {p.name: p for p in state.pods}
    assert pods["trainer-0"].gpu_requests == {"nvidia.com/gpu": 2}
    assert pods["eval-28711440-abcde"].finished_at == done and not pods["eval-28711440-abcde"].holds_gpus
    (note,) = [n for n in state.notes if "disagree" in n]
    assert "ml/trainer-0" in note and "GPU requests" in note and "(API)" in note
    assert "(now)" in state.source and "(history over the window)" in state.source


def test_api_and_ksm_agreeing_leave_no_note(tmp_path):
    # GIVEN the same cluster from both WHEN merged THEN no disagreement note
    objs = [node("n1", gpus=4), pod("ml", "trainer-0", "n1", gpus=2)]
    state = merge_states(_api(objs), _read(tmp_path, objs))
    assert not [n for n in state.notes if "disagree" in n]
    assert [p.name for p in state.pods] == ["trainer-0"]


# -- the live plan ---------------------------------------------------------------------------------------------
def test_ksm_live_plan_is_six_queries_scoped_by_matchers_whatever_the_pod_count():
    # GIVEN a shared Prometheus (cluster matcher, a value to escape) and a 2-hour window WHEN the plan is built
    plan = ksm_queries(window_s=7200, settings=ClusterReadSettings(), matchers={"cluster": 'prod"a'})
    # THEN six queries (the pod series in two halves); requests and the pods gone are read over the window; every
    # selector is scoped to the cluster
    assert sorted(plan) == ["namespaces and owners", "nodes", "pod labels and containers", "pods", "pods gone", "resources"]
    assert "[7200s]" in plan["resources"] and "[7200s]" in plan["pods gone"]
    for q in plan.values():
        selectors = re.findall(r"kube_\w+\{[^}]*\}|\{__name__=~[^}]*\}", q)
        assert selectors and all('cluster="prod\\"a"' in sel for sel in selectors)
    assert 'resource=~"' in plan["resources"] and "nvidia_com_mig_.*" in plan["resources"]


def test_ksm_history_query_reads_the_last_state_of_the_gone_pods_only():
    # GIVEN two pods gone in the window WHEN their history query is built
    q = ksm_history_query(["trainer-0", "a.b"], window_s=3600, matchers={})
    # THEN each pod metric is read over the window, only for those pods (names regex-escaped), phase filtered to 1
    assert 'pod=~"a\\\\.b|trainer-0"' in q and "[3600s]" in q
    assert 'last_over_time(kube_pod_status_phase{pod=~"a\\\\.b|trainer-0"}[3600s]) == 1' in q
    assert q.count("label_replace(") == 12  # the 10 pod metrics (incl. kube_pod_resourceclaim_info) + phase + cpu limits


def test_ksm_live_pod_absent_at_evaluation_time_gets_an_estimated_end():
    # GIVEN trainer-0 gone at the evaluation time with 21 samples at 60 s in a 1 h window, started before the window
    src = PrometheusKsmSource(_NoPrometheus(), cluster="c", window=timedelta(hours=1), scrape_interval_s=60)
    base = {"namespace": "ml", "pod": "trainer-0", "uid": "u"}
    answers = [[{"metric": {**base, "ksm_metric": "kube_pod_info", "node": "n1"}, "value": [0, "1"]},
                {"metric": {**base, "ksm_metric": "kube_pod_start_time"}, "value": [0, str((T0 - timedelta(hours=3)).timestamp())]},
                {"metric": {**base, "__name__": "kube_pod_info", "pod": "other"}, "value": [0, "1"]}]]
    # WHEN decoded
    info, start, other = src.samples(answers, gone={("ml", "trainer-0"): 21}, at=EVAL)
    # THEN it was last seen 20 minutes after the window start; the other pod exists now
    assert info.last_ms == int((T0 + timedelta(minutes=20)).timestamp() * 1000) and start.last_ms == info.last_ms
    assert (other.name, other.last_ms) == ("kube_pod_info", None)


class _NoPrometheus:
    url = "http://127.0.0.1:1"
    matchers: dict[str, str] = {}  # noqa: RUF012 - a protocol attribute on a test double

    def instant_query(self, promql: str, *, at: datetime | None, what: str = "query") -> list[dict[str, Any]]:
        raise AssertionError("not called")


class _Fixed:
    """A cluster-state port returning a fixed state, or raising."""

    def __init__(self, state: ClusterState | None = None, error: Exception | None = None) -> None:
        self.state, self.error, self.calls = state, error, 0

    def cluster_state(self, *, at: datetime) -> ClusterState:
        self.calls += 1
        if self.error is not None:
            raise self.error
        assert self.state is not None
        return self.state


def test_api_unreachable_in_auto_mode_falls_back_to_ksm_with_a_note(tmp_path):
    # GIVEN an API that cannot be reached and a KSM read of the cluster, in "auto" mode (the API is optional)
    ksm = _read(tmp_path, [node("n1"), pod("ml", "trainer-0", "n1")])
    source = ApiWithKsmHistory(_Fixed(error=SourceUnavailableError("Kubernetes API at https://k8s unreachable")), _Fixed(ksm),
                               api_optional=True)
    # WHEN read THEN KSM's state, with a note naming the API error first
    state = source.cluster_state(at=EVAL)
    assert [p.name for p in state.pods] == ["trainer-0"]
    assert state.notes[0].startswith("Kubernetes API not used (Kubernetes API at https://k8s unreachable)")


def test_api_error_when_the_api_is_required_fails_the_read(tmp_path):
    # GIVEN "both" configured explicitly and an API refusing the credentials WHEN read THEN the error is raised
    ksm = _read(tmp_path, [node("n1")])
    source = ApiWithKsmHistory(_Fixed(error=SourceAuthError("401")), _Fixed(ksm))
    with pytest.raises(SourceAuthError):
        source.cluster_state(at=EVAL)


def test_ksm_failure_keeps_the_api_state_and_says_the_history_is_missing():
    # GIVEN the API works and Prometheus fails for the KSM read WHEN read THEN the API state with a note
    api = _api([node("n1"), pod("ml", "trainer-0", "n1")])
    state = ApiWithKsmHistory(_Fixed(api), _Fixed(error=SourceUnavailableError("Prometheus down"))).cluster_state(at=EVAL)
    assert [p.name for p in state.pods] == ["trainer-0"]
    assert state.notes == ("kube-state-metrics history unavailable (Prometheus down); pods that ended in the window are not seen",)


def test_a_pod_deleted_mid_window_holds_its_gpu_until_it_was_gone_in_the_join(tmp_path):
    # GIVEN trainer-0 read from KSM, deleted 20 minutes before the window's end, and its GPU's telemetry
    from gpuwaste.join import join
    from gpuwaste.models.telemetry import Signal
    from tests.unit.timeline_builders import const, gpu, window

    gone = EVAL - timedelta(minutes=20)
    state = _read(tmp_path, [node("n1"), pod("ml", "trainer-0", "n1")], gone={("ml", "trainer-0"): int(gone.timestamp() * 1000)})
    tel = window(gpu("GPU-1", "n1", {Signal.SM_ACTIVE: const(0.0)}, eval_time=EVAL, pod="trainer-0", namespace="ml"), eval_time=EVAL)
    # WHEN joined
    ctx = join(state, tel)
    # THEN the pod held the GPU from the window start until it was gone, and holds nothing now
    (a,) = ctx.allocations
    assert (a.pod.name, a.held_until, a.holds_now) == ("trainer-0", gone, False)
    assert ctx.held_span(a) == (EVAL - WINDOW, gone)


def test_api_with_ksm_history_reads_three_queries_and_counts_them_in_the_state(tmp_path):
    # GIVEN a history-only KSM source next to the API, over a Prometheus double that answers nothing
    class _Empty(_NoPrometheus):
        asked: list[str] = []  # noqa: RUF012

        def instant_query(self, promql: str, *, at: datetime | None, what: str = "query") -> list[dict[str, Any]]:
            self.asked.append(what)
            return []

    prom = _Empty()
    ksm = PrometheusKsmSource(prom, cluster="c", history_only=True)
    api = _api([node("n1"), pod("ml", "trainer-0", "n1")])
    # WHEN read through the merge
    state = ApiWithKsmHistory(_Fixed(api), ksm).cluster_state(at=EVAL)
    # THEN three KSM queries (requests over the window, phases, pods gone), counted in the state; the API's pods
    assert sorted(prom.asked) == ["kube-state-metrics phases", "kube-state-metrics pods gone", "kube-state-metrics resources"]
    assert state.query_count == 3 and [p.name for p in state.pods] == ["trainer-0"]


def test_ksm_pod_recreated_under_the_same_name_is_the_one_that_exists_now_and_the_earlier_uid_a_pod_of_its_own(tmp_path):
    # GIVEN notebook-0 deleted 30 minutes before the end and recreated (new uid, new IP) 25 minutes before the end
    old = pod("ml", "notebook-0", "n1", ip="10.244.1.1")
    new = pod("ml", "notebook-0", "n1", ip="10.244.1.2", started=(EVAL - timedelta(minutes=25)).strftime(ISO))
    old["metadata"]["uid"], new["metadata"]["uid"] = "uid-old", "uid-new"
    buf = io.StringIO()
    buf.write(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="n1"}} 0 {_times()[-1]}\n')
    gone = int((EVAL - timedelta(minutes=30)).timestamp() * 1000)
    series = ksm_series([node("n1"), new], _times()) + ksm_series([old], _times(), gone_ms={("ml", "notebook-0"): gone})
    write_text_exposition(series, buf)
    (tmp_path / "telemetry.prom").write_text(buf.getvalue())
    # WHEN read
    pods = {p.uid: p for p in KsmRecordingSource(tmp_path, window=WINDOW).cluster_state(at=EVAL).pods}
    # THEN the pod that exists now: its IP, its start, not gone, holding
    p = pods["uid-new"]
    assert (p.pod_ip, p.gone_at, p.holds_gpus) == ("10.244.1.2", None, True)
    assert p.started_at == EVAL - timedelta(minutes=25)
    # AND the earlier uid is a pod of its own (issue 21 §4), gone 30 minutes before the end, its facts not mixed in
    q = pods["uid-old"]
    assert (q.name, q.pod_ip, q.gone_at) == ("notebook-0", "10.244.1.1", EVAL - timedelta(minutes=30))
    assert set(pods) == {"uid-new", "uid-old"}


def test_the_scan_window_reaches_a_wrapped_ksm_source():
    # GIVEN a KSM source behind the API merge, behind a wrapper that delegates attributes (as `serve` tracks sources)
    from gpuwaste.bootstrap.local import Sources, scan_service
    from gpuwaste.config import GpuWasteConfig

    class _Wrapper:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    ksm = PrometheusKsmSource(_NoPrometheus(), cluster="c", window=timedelta(hours=1))
    sources = Sources(cluster=_Wrapper(ApiWithKsmHistory(None, ksm)), telemetry=_Fixed())  # type: ignore[arg-type]
    # WHEN a scan service is built for a 3-hour window THEN the KSM source looks back 3 hours
    scan_service(sources, GpuWasteConfig(), window_s=3 * 3600, priced=False)
    assert ksm.window == timedelta(hours=3)


# -- the whole model: KSM facts built straight into Pod/Node equal the API parser's models --------------------
@pytest.mark.parametrize("spec", [{"layout": "random", "nodes": 24}, {}], ids=["bench-random", "demo"])
def test_ksm_models_equal_the_api_parsers_models_field_by_field(spec: dict[str, Any]):
    # GIVEN the bench's random fleet layout, and the demo fleet (every waste kind: Deployments, StatefulSets, Jobs,
    # CronJobs, bare pods, orphans, exporters, several GPU models)
    from gpuwaste.fleet.generator import generate_fleet  # noqa: PLC0415
    from gpuwaste.fleet.spec import FleetSpec  # noqa: PLC0415
    from gpuwaste.sources.ksm import cluster_state_from_ksm, samples_from_series  # noqa: PLC0415

    fleet = generate_fleet(FleetSpec(**spec))
    at = fleet.spec.eval_time
    window = timedelta(seconds=fleet.spec.history_s - 600)
    # WHEN the cluster is built from its KSM series (no Kubernetes objects in between) and parsed from its objects
    ksm = cluster_state_from_ksm(samples_from_series(fleet.ksm_series(), at=at, window=window), cluster="c", observed_at=at)
    api = cluster_state_from_objects(fleet.objects, cluster="c", observed_at=at)
    # THEN every pod and node is the same model, field by field, except what KSM does not export (container commands
    # and args, owner uids, the scheduler, the API group of custom-resource owners; labels outside the allow-list)
    assert len(api.pods) > 15 and api.nodes
    built_in = {"ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"}

    def comparable(p: Any) -> dict[str, Any]:
        data = p.model_dump(exclude={"container_args", "scheduler_name", "resource_claims"})
        data["owner_refs"] = [{**o, "uid": "", "api_version": o["api_version"] if o["kind"] in built_in else ""} for o in data["owner_refs"]]
        if data["workload"]["kind"] not in built_in:
            data["workload"]["api_version"] = ""
        data["labels"] = {k: v for k, v in data["labels"].items() if k in ALLOWED_POD_LABELS}
        return data

    by_key = {p.key: comparable(p) for p in api.pods}
    assert {p.key: comparable(p) for p in ksm.pods} == by_key
    assert {n.name: n for n in ksm.nodes} == {n.name: n for n in api.nodes}
    assert ksm.exporter_pods == api.exporter_pods and ksm.exporter_pod_ips == api.exporter_pod_ips
    assert ksm.workloads_known == api.workloads_known


ALLOWED_POD_LABELS = frozenset(("pod-template-hash", "app", "app.kubernetes.io/name", "team", "gpuwaste.io/team", "runai-gpu-group"))
