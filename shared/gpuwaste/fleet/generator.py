"""Fleet generator: a deterministic synthetic GPU fleet — telemetry series, cluster objects and the true answer.

The series carry dcgm-exporter's real label sets (`UUID`, `pci_bus_id`, `modelName`, `Hostname` or
`hostname`, `DCGM_FI_DRIVER_VERSION`, workload labels as `pod`/`namespace`/`container` or, with the
Helm default `honorLabels: false`, as `exported_*` next to the exporter's own `pod`), MIG instances
with `GPU_I_PROFILE`/`GPU_I_ID`, vLLM series, the cluster objects a
`kubectl get pods,nodes,replicasets,jobs,namespaces -A -o json` would return, and the same cluster as
kube-state-metrics v2 series (`fleet.ksm_series`), so the recording is complete without cluster.json. Every GPU's scenario is
recorded as ground truth, so tests and the demo check the scan against what was generated.

Randomness comes from `random.Random(seed)` only: the same spec always gives the same fleet.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from gpuwaste.fleet import allocation_kinds
from gpuwaste.fleet.allocation_kinds import AllocationTruth
from gpuwaste.fleet.ksm_series import ksm_series
from gpuwaste.fleet.parts import TruthItem, _Gpu, _iso, _uid
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics

BASE_TS = 1704067200  # 2024-01-01T00:00:00Z, a multiple of 2 h (promtool block boundary)
DRIVER = "550.144.03"

# instance type → (GPUs, dcgm modelName, GFD product, FB MiB, power limit W, provider)
INSTANCES: dict[str, tuple[int, str, str, int, float]] = {
    "p4d.24xlarge": (8, "NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", 40960, 400.0),
    "p5.48xlarge": (8, "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 81559, 700.0),
    "g5.12xlarge": (4, "NVIDIA A10G", "NVIDIA-A10G", 23028, 300.0),
    "g6.xlarge": (1, "NVIDIA L4", "NVIDIA-L4", 23034, 72.0),
    "g6e.12xlarge": (4, "NVIDIA L40S", "NVIDIA-L40S", 46068, 350.0),
    "g4dn.12xlarge": (4, "Tesla T4", "Tesla-T4", 15360, 70.0),
    "x9.gpu-mystery": (2, "NVIDIA L4", "NVIDIA-L4", 23034, 72.0),
}

# scenario → (kind expected, description)
SCENARIOS = {
    "busy": None,
    "idle": "idle_allocation",
    "underused": "underused_allocation",
    "bursty": None,  # bursty inference: low average, 10-minute peaks above 20 % — must not be flagged
    "checkpoint_pause": None,  # busy with a 6-minute pause — must not be flagged
    "gap": "data_quality:partial_coverage",
    "frozen": "data_quality:frozen_exporter",
}

#: Catalogue scenarios of the "scorecard" layout → the kind expected (None: a look-alike that must not be flagged).
CATALOGUE_SCENARIOS: dict[str, str | None] = {
    "power_hog": "power_anomaly",  # SM ~10 %, DRAM 75 %, power 88 % of the limit: memory-bound, not idle
    "low_bandwidth": "low_memory_bandwidth",  # SM ~35 %, DRAM ~12 %: neither compute- nor memory-bound
    "stalled": "stalled",  # GPU_UTIL 100 %, GR_ENGINE 0.97, tensor/DRAM 0, power 17 % of the limit (B14)
    "oversized": "wrong_hardware",  # 20 % of the framebuffer, ~10 % activity for the whole look-back
    "cpu_starved": "cpu_bound",  # spiky GPU activity, CFS throttles 60 % of periods
    "kv_pressure": "kv_cache_pressure",  # busy vLLM, KV cache 96 %, requests waiting, preemptions
    "serving_idle": "inference_idle",  # vLLM, no requests, flat token counters, GPU ~8 % (warm-up probes)
    "data_stall": None,  # busy with a 4-minute data-loading stall (CPU briefly busy): must not be flagged
    "serving_ok": None,  # vLLM with steady traffic and KV cache at 50 %: must not be flagged
    "power_moderate": "underused_allocation",  # SM ~10 % at 70 % of the power limit: under-used, not a power anomaly
    "throttle_mild": None,  # spiky GPU with CFS throttling at 15 %: under the CPU-bound threshold
}


class FleetSpec(BaseModel):
    """What to generate.

    Attributes:
        layout: "demo" (a hand-designed fleet that shows every finding kind of the main job),
            "random" (`nodes` nodes drawn from `instance_types` with the scenario mix `weights`), "allocation"
            (one cluster mixing device-plugin GPUs, DRA claims, HAMi shares, KAI fractions and Blackwell MIG, with
            its allocation ground truth: `fleet.allocation_kinds`), or
            "scorecard" (every waste kind of the catalogue several times, plus look-alikes that must not
            be flagged; `nodes` is the number of repetitions).
        history_s: seconds of history before `eval_time` (window + 10 min so the first 10-minute
            average is complete). step_s: seconds between samples (dcgm-exporter collects every 30 s).
        label_style: "pod" (honorLabels: true), "exported" (Helm default), or "mixed".
        metrics: "full" (activity, tensor, DRAM, FB, power, energy) or "lean" (activity, FB, power).
        ksm_step_s: the cluster is also written as kube-state-metrics v2 series (scraped every `ksm_step_s`), so a
            recording scanned without cluster.json finds the same; 0 leaves them out.
    """

    layout: str = Field("demo", pattern="^(demo|random|scorecard|allocation)$")
    cluster: str = "demo"
    seed: int = 7
    nodes: int = Field(6, ge=1)
    instance_types: tuple[str, ...] = ("p4d.24xlarge", "g5.12xlarge", "g6.xlarge", "p5.48xlarge")
    weights: dict[str, float] = Field(default_factory=lambda: {"busy": 0.45, "idle": 0.2, "underused": 0.15, "bursty": 0.1, "free": 0.1})
    eval_time: datetime = datetime.fromtimestamp(BASE_TS + 4800, tz=UTC)
    history_s: int = Field(4800, gt=600)
    step_s: int = Field(30, gt=0)
    label_style: str = Field("mixed", pattern="^(pod|exported|mixed)$")
    metrics: str = Field("full", pattern="^(full|lean)$")
    inference_metrics: bool = True
    ksm_step_s: int = Field(60, ge=0, description="seconds between kube-state-metrics samples; 0: no KSM series")


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


class _Builder:
    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.gpus: list[_Gpu] = []
        self.objects: list[dict[str, Any]] = []
        self.truth: list[TruthItem] = []
        self.namespaces: dict[str, dict[str, str]] = {}
        self.t_eval = spec.eval_time.timestamp()
        self.extra: list[RecordedSeries] = []
        self.pod_metrics: list[tuple[str, str, str, str]] = []  # (namespace, pod, container, profile)

    # -- cluster objects ------------------------------------------------------------------------
    def namespace(self, ns: str, team: str, channel: str | None = None) -> None:
        if ns in self.namespaces:
            return
        ann = {"gpuwaste.io/team": team}
        if channel:
            ann["gpuwaste.io/slack-channel"] = channel
        self.namespaces[ns] = ann
        self.objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"team": team}, "annotations": ann}})

    def node(self, name: str, itype: str, *, capacity_type: str = "on-demand", mig: str | None = None, label_style: str = "pod",
             hostname_key: str = "Hostname", hostname_mode: str = "node", signal_set: str = "prof", zone: str = "us-east-1a",
             gpus_override: int | None = None) -> list[_Gpu]:
        count, model, product, fb, plimit = INSTANCES[itype]
        count = gpus_override or count
        instance_id = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
        labels = {
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": itype,
            "topology.kubernetes.io/region": "us-east-1",
            "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": capacity_type,
            "nvidia.com/gpu.product": product if not mig else f"{product}-MIG-{mig}",
            "nvidia.com/gpu.count": str(count if not mig else count * 7),
            "nvidia.com/gpu.memory": str(fb if not mig else 4864),
            "nvidia.com/gpu.replicas": "1",
        }
        resources: dict[str, str] = {"cpu": "96", "memory": "1152Gi", "pods": "110"}
        if mig:
            labels["nvidia.com/mig.strategy"] = "single"
            resources["nvidia.com/gpu"] = str(count * 7)
        else:
            resources["nvidia.com/gpu"] = str(count)
        exporter = f"nvidia-dcgm-exporter-{hashlib.sha256(name.encode()).hexdigest()[:5]}"
        ip = f"10.0.{len(self.objects) % 250}.{(len(self.gpus) % 200) + 10}"
        self.objects.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "creationTimestamp": _iso(self.t_eval - 86400 * 3)},
            "spec": {"providerID": f"aws:///{zone}/{instance_id}"},
            "status": {"capacity": resources, "allocatable": resources, "addresses": [{"type": "InternalIP", "address": ip}]},
        })
        self.objects.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": exporter, "namespace": "gpu-operator", "creationTimestamp": _iso(self.t_eval - 86400 * 3),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-dcgm-exporter", "uid": _uid("ds"), "controller": True}]},
            "spec": {"nodeName": name, "containers": [{"name": "nvidia-dcgm-exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.5.2-ubuntu22.04"}]},
            "status": {"phase": "Running", "podIP": f"10.244.{len(self.objects) % 250}.7", "startTime": _iso(self.t_eval - 86400 * 3)},
        })
        host_value = {"node": name, "exporter": exporter, "instance-id": instance_id}[hostname_mode]
        made = []
        for i in range(count):
            uuid = "GPU-" + _uid(self.spec.seed, name, i)
            if mig:
                for gi in range(7):
                    made.append(_Gpu(uuid, i, name, model, 4864, plimit, (str(gi + 7), mig), signal_set="prof", label_style=label_style,
                                     hostname_key=hostname_key, hostname_value=host_value, exporter_pod=exporter))
            else:
                made.append(_Gpu(uuid, i, name, model, fb, plimit, None, signal_set=signal_set, label_style=label_style,
                                 hostname_key=hostname_key, hostname_value=host_value, exporter_pod=exporter))
        self.gpus.extend(made)
        return made

    def pod(self, ns: str, name: str, node: str, gpus: list[_Gpu], *, owner: str = "Deployment", workload: str | None = None,
            resource: str = "nvidia.com/gpu", scenario: str = "busy", started_ago_s: float = 86400, phase: str = "Running",
            image: str = "ghcr.io/example/trainer:1.4", team: str = "ml-platform", expect: str | None = "auto",
            owner_gone: bool = False, annotations: dict[str, str] | None = None, finished_ago_s: float | None = None,
            args: list[str] | None = None) -> None:
        self.namespace(ns, team)
        workload = workload or name.rsplit("-", 2)[0]
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": _uid(ns, name), "labels": {"app": workload},
                                "creationTimestamp": _iso(self.t_eval - started_ago_s - 30)}
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner == "Deployment":
            h = hashlib.sha256(workload.encode()).hexdigest()[:10]
            rs = f"{workload}-{h}"
            meta["labels"]["pod-template-hash"] = h
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": _uid(rs), "controller": True}]
            self._controller("ReplicaSet", ns, rs, ("Deployment", workload))
            if not owner_gone:
                self._controller("Deployment", ns, workload, None)
        elif owner == "CronJob":
            job = f"{workload}-{28711440 + len(self.objects)}"
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": _uid(job), "controller": True}]
            self._controller("Job", ns, job, ("CronJob", workload))
            self._controller("CronJob", ns, workload, None)
        elif owner == "StatefulSet":
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": workload, "uid": _uid(workload), "controller": True}]
            self._controller("StatefulSet", ns, workload, None)
        elif owner != "Pod":
            meta["ownerReferences"] = [{"apiVersion": "example.io/v1", "kind": owner, "name": workload, "uid": _uid(workload), "controller": True}]
        units = len(gpus)
        container = workload.split("-")[0][:20] or "main"
        pod: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": container, "image": image,
                                                       "resources": {"limits": {resource: str(units), "cpu": "8"}, "requests": {resource: str(units), "cpu": "8"}}}]},
            "status": {"phase": phase, "startTime": _iso(self.t_eval - started_ago_s), "podIP": f"10.244.9.{len(self.objects) % 250}"},
        }
        if phase in ("Succeeded", "Failed"):
            pod["status"]["containerStatuses"] = [{"name": container, "state": {"terminated": {"exitCode": 0, "finishedAt": _iso(self.t_eval - 2400)}}}]
        if args:
            pod["spec"]["containers"][0]["args"] = list(args)
        if finished_ago_s is not None:  # main container done, a sidecar keeps the pod Running
            pod["spec"]["containers"].append({"name": "log-shipper", "image": "fluent/fluent-bit:3.0"})
            pod["status"]["containerStatuses"] = [
                {"name": container, "state": {"terminated": {"exitCode": 0, "finishedAt": _iso(self.t_eval - finished_ago_s)}}},
                {"name": "log-shipper", "state": {"running": {"startedAt": _iso(self.t_eval - started_ago_s)}}},
            ]
        self.objects.append(pod)
        for g in gpus:
            if phase == "Pending":
                g.scenario = "free"  # bound to the node, no container runs: no workload labels on the GPU
            elif phase in ("Succeeded", "Failed"):
                g.stale_owner = (ns, name, container)
                g.scenario = "free_idle"
            else:
                g.owner = (ns, name, container)
                g.scenario = scenario
        share = float(units) if not (gpus and gpus[0].mig) else round(units * int(gpus[0].mig[1].split("g.")[0]) / 7, 4)
        if expect == "auto":
            kind = SCENARIOS.get(scenario) if phase == "Running" and started_ago_s >= 900 else None
        else:
            kind = expect
        check = None
        if kind and kind.startswith("data_quality:"):
            kind, check = "data_quality", kind.split(":", 1)[1]
        if phase == "Running":
            self.truth.append(TruthItem(kind=kind, namespace=ns, pod=name, node=node, workload=workload, gpus=share if kind != "data_quality" else 0.0,
                                        scenario=scenario if started_ago_s >= 900 else "young", check=check))

    def _controller(self, kind: str, ns: str, name: str, parent: tuple[str, str] | None) -> None:
        key = (kind, ns, name)
        if any(o.get("kind") == kind and o["metadata"]["name"] == name and o["metadata"].get("namespace") == ns for o in self.objects):
            return
        api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": _uid(*key)}
        if parent:
            pk, pn = parent
            meta["ownerReferences"] = [{"apiVersion": api, "kind": pk, "name": pn, "uid": _uid(pk, ns, pn), "controller": True}]
        self.objects.append({"apiVersion": api, "kind": kind, "metadata": meta})

    def _team(self, ns: str) -> str:
        """The team of a namespace already declared (demo), else the namespace itself (scorecard)."""
        return self.namespaces.get(ns, {}).get("gpuwaste.io/team", ns)

    def free_truth(self, node: str, free: float, capacity: int) -> None:
        self.truth.append(TruthItem(kind="unallocated_capacity", node=node, gpus=free, scenario="free"))

    # -- layouts --------------------------------------------------------------------------------
    def demo(self) -> None:
        self.namespace("research", "research", "#research-gpu")
        self.namespace("search", "search-infra", "#search-alerts")
        self.namespace("inference", "ml-serving")
        self.namespace("vision", "vision")
        # p4d: exported_* labels (Helm default), mixed work, 1 GPU free
        g = self.node("ip-10-0-1-17.ec2.internal", "p4d.24xlarge", label_style="exported")
        self.pod("research", "llm-finetune-7d9c5-x2k4p", g[0].node, g[0:4], workload="llm-finetune", scenario="busy", team="research")
        self.pod("research", "eval-sweep-6f8b-q8m2z", g[0].node, g[4:6], workload="eval-sweep", scenario="idle", team="research")
        self.pod("search", "embedder-5c4d7-hm2xq", g[0].node, g[6:7], workload="embedder", scenario="underused", team="search-infra")
        self.free_truth(g[0].node, 1, 8)
        # p5: plain pod labels, Hostname = exporter pod name (B03), an idle inference server, a frozen exporter
        g = self.node("ip-10-0-2-31.ec2.internal", "p5.48xlarge", hostname_mode="exporter", signal_set="sm")
        self.pod("inference", "llama-70b-vllm-6d5-wq2", g[0].node, g[0:4], workload="llama-70b-vllm", scenario="idle",
                 image="vllm/vllm-openai:v0.6.3", team="ml-serving")
        self.pod("inference", "mistral-vllm-58f-abcde", g[0].node, g[4:6], workload="mistral-vllm", scenario="bursty",
                 image="vllm/vllm-openai:v0.6.3", team="ml-serving")
        self.pod("research", "rl-rollout-0", g[0].node, g[6:7], owner="StatefulSet", workload="rl-rollout", scenario="frozen", team="research")
        self.pod("research", "pretrain-worker-3", g[0].node, g[7:8], owner="PyTorchJob", workload="pretrain", scenario="checkpoint_pause", team="research")
        # g5: lower-case hostname (exporter ≥ 2026-05), nightly CronJob pod idle, a gap in telemetry, finished job's stale labels
        g = self.node("ip-10-0-3-44.ec2.internal", "g5.12xlarge", hostname_key="hostname", capacity_type="spot")
        self.pod("search", "nightly-embed-28711440-x7k2p", g[0].node, g[0:1], owner="CronJob", workload="nightly-embed", scenario="idle", team="search-infra")
        self.pod("vision", "detector-train-7bd-8kq2n", g[0].node, g[1:2], workload="detector-train", scenario="gap", team="vision")
        self.pod("vision", "offline-eval-28712000-abcde", g[0].node, g[2:3], owner="CronJob", workload="offline-eval", phase="Succeeded", team="vision")
        self.pod("vision", "labeler-84c-m3n", g[0].node, g[3:4], workload="labeler", scenario="busy", team="vision")
        self.free_truth(g[0].node, 1, 4)
        # g6 (L4, single GPU): no pod labels at all (B01) → attribution by elimination; idle notebook
        g = self.node("ip-10-0-4-12.ec2.internal", "g6.xlarge", label_style="none", hostname_mode="instance-id")
        self.pod("research", "notebook-alice-0", g[0].node, g[0:1], owner="Notebook", workload="notebook-alice", scenario="idle", team="research")
        # MIG A100 (single strategy, 1g.5gb slices): two slices idle, three busy, two free (2/7 of a GPU)
        g = self.node("ip-10-0-5-9.ec2.internal", "p4d.24xlarge", mig="1g.5gb", gpus_override=1)
        for i in range(5):
            scen = "idle" if i < 2 else "busy"
            self.pod("inference", f"whisper-{i}-5f7c9-k{i}q", g[0].node, [g[i]], workload=f"whisper-{i}", scenario=scen, team="ml-serving")
        self.free_truth(g[0].node, round(2 / 7, 4), 1)
        # unknown instance type (on-prem): idle pod → unpriced, never $0
        g = self.node("gpu-onprem-01", "x9.gpu-mystery", hostname_mode="node")
        self.pod("research", "scratch-dev", g[0].node, g[0:2], owner="Pod", workload="scratch-dev", scenario="idle", team="research")
        # a young pod (no verdict yet) on a T4 node with GPU_UTIL only (no profiling fields: B04)
        g = self.node("ip-10-0-6-2.ec2.internal", "g4dn.12xlarge", signal_set="util")
        self.pod("vision", "ocr-worker-1", g[0].node, g[0:2], workload="ocr-worker", scenario="underused", team="vision")
        self.pod("vision", "ocr-warmup-2", g[0].node, g[2:3], workload="ocr-warmup", scenario="idle", started_ago_s=300, team="vision")
        self.free_truth(g[0].node, 1, 4)
        # A100 node with the rest of the catalogue, one case each: power, bandwidth, stalled, wrong hardware,
        # CPU-bound, KV-cache pressure, serving idle, orphaned (shapes shared with the scorecard layout)
        g = self.node("ip-10-0-7-21.ec2.internal", "p4d.24xlarge", signal_set="sm")
        node = g[0].node
        self._sc("research", "kernel-bench-5d8-x0", node, g[0:1], "power_hog", "power_anomaly")
        self._sc("search", "feature-etl-5d8-x1", node, g[1:2], "low_bandwidth", "low_memory_bandwidth")
        self._sc("research", "pretrain-13b-worker-0", node, g[2:3], "stalled", "stalled", owner="PyTorchJob", workload="pretrain-13b")
        self._sc("vision", "tiny-classifier-5d8-x3", node, g[3:4], "oversized", "wrong_hardware")
        self._sc("vision", "video-decode-5d8-x4", node, g[4:5], "cpu_starved", "cpu_bound", cpu="starved")
        vllm = "vllm/vllm-openai:v0.8.5"
        self._sc("inference", "chat-api-0-b2c-y5", node, g[5:6], "kv_pressure", "kv_cache_pressure", image=vllm, serving="pressure")
        self._sc("inference", "rerank-api-0-b2c-y6", node, g[6:7], "serving_idle", "inference_idle", image=vllm, serving="idle")
        self._sc("search", "legacy-api-5d8-x7", node, g[7:8], "busy", "orphaned", owner_gone=True)

    def scorecard(self) -> None:
        """Every catalogue kind, `spec.nodes` times over, on varied label styles and signal sets, plus look-alikes."""
        for r in range(self.spec.nodes):
            style = "exported" if r % 2 else "pod"
            sigs = "sm" if r % 2 == 0 else "prof"
            team = ("research", "vision", "search")[r % 3]
            # A100 node: efficiency kinds and their look-alikes
            g = self.node(f"sc-a100-{r:02d}", "p4d.24xlarge", label_style=style, signal_set=sigs)
            node = g[0].node
            self._sc(team, f"kernel-bench-{r}-a1b-x0", node, g[0:1], "power_hog", "power_anomaly")
            self._sc(team, f"feature-etl-{r}-a1b-x1", node, g[1:2], "low_bandwidth", "low_memory_bandwidth")
            self._sc(team, f"pretrain-{r}-worker-0", node, g[2:4], "stalled", "stalled", owner="PyTorchJob", workload=f"pretrain-{r}")
            self._sc(team, f"tiny-classifier-{r}-a1b-x4", node, g[4:5], "oversized", "wrong_hardware")
            self._sc(team, f"video-decode-{r}-a1b-x5", node, g[5:6], "cpu_starved", "cpu_bound", cpu="starved")
            self._sc(team, f"resnet-train-{r}-a1b-x6", node, g[6:7], "data_stall", None, cpu="stall")
            self._sc(team, f"bert-train-{r}-a1b-x7", node, g[7:8], "checkpoint_pause" if r % 2 else "busy", None)
            # H100 node: serving and orphans
            g = self.node(f"sc-h100-{r:02d}", "p5.48xlarge", label_style=style, signal_set="sm")
            node = g[0].node
            vllm = "vllm/vllm-openai:v0.8.5"
            self._sc("inference", f"chat-serve-{r}-b2c-y0", node, g[0:1], "kv_pressure", "kv_cache_pressure", image=vllm, serving="pressure")
            self._sc("inference", f"rerank-serve-{r}-b2c-y1", node, g[1:2], "serving_idle", "inference_idle", image=vllm, serving="idle")
            self._sc("inference", f"embed-serve-{r}-b2c-y2", node, g[2:3], "serving_ok", None, image=vllm, serving="ok")
            self._sc("inference", f"summarize-serve-{r}-b2c-y3", node, g[3:4], "bursty", None, image=vllm, serving="bursty")
            self._sc(team, f"legacy-api-{r}-b2c-y4", node, g[4:5], "busy", "orphaned", owner_gone=True)
            self._sc(team, f"nightly-train-{r}-2871{r:04d}-y5", node, g[5:6], "idle", "orphaned", owner="CronJob",
                     workload=f"nightly-train-{r}", finished_ago_s=2400)
            self._sc("research", f"notebook-{r}-0", node, g[6:7], "idle", "orphaned", owner="StatefulSet", workload=f"notebook-{r}",
                     annotations={"notebooks.kubeflow.org/last-activity": _iso(self.t_eval - 3 * 86400)})
            self.pod(team, f"stuck-init-{r}-b2c-y7", node, g[7:8], workload=f"stuck-init-{r}", phase="Pending", started_ago_s=3600, team=team)
            self.truth.append(TruthItem(kind="orphaned", namespace=team, pod=f"stuck-init-{r}-b2c-y7", node=node,
                                        workload=f"stuck-init-{r}", gpus=1.0, scenario="pending"))
            # A10G node: the main job's kinds, an old bare pod, one free GPU
            g = self.node(f"sc-a10g-{r:02d}", "g5.12xlarge", label_style=style, signal_set=sigs, hostname_key="hostname")
            node = g[0].node
            self._sc(team, f"eval-{r}-c3d-z0", node, g[0:1], "idle", "idle_allocation")
            self._sc(team, f"embedder-{r}-c3d-z1", node, g[1:2], "underused", "underused_allocation")
            self._sc(team, f"scratch-{r}", node, g[2:3], "busy", "orphaned", owner="Pod", workload=f"scratch-{r}", started_ago_s=5 * 86400)
            self.free_truth(node, 1, 4)
            # L40S node: near-threshold look-alikes and a second wrong-hardware case
            g = self.node(f"sc-l40s-{r:02d}", "g6e.12xlarge", label_style=style, signal_set=sigs)
            node = g[0].node
            self._sc(team, f"sparse-attn-{r}-d4e-w0", node, g[0:1], "power_moderate", "underused_allocation")
            self._sc(team, f"audio-prep-{r}-d4e-w1", node, g[1:2], "throttle_mild", None, cpu="mild")
            self._sc(team, f"small-llm-{r}-d4e-w2", node, g[2:3], "oversized", "wrong_hardware")
            self._sc(team, f"vit-train-{r}-d4e-w3", node, g[3:4], "busy", None)

    def _sc(self, ns: str, name: str, node: str, gpus: list[_Gpu], scenario: str, expect: str | None, *,
            cpu: str = "ok", serving: str | None = None, **kw: Any) -> None:
        self.pod(ns, name, node, gpus, scenario=scenario, expect=expect, team=kw.pop("team", None) or self._team(ns), **kw)
        container = (kw.get("workload") or name.rsplit("-", 2)[0]).split("-")[0][:20] or "main"
        self.pod_metrics.append((ns, name, container, f"cpu:{cpu}"))
        if serving:
            self.pod_metrics.append((ns, name, container, f"serving:{serving}"))

    def random(self) -> None:
        spec = self.spec
        names = list(spec.weights)
        weights = [spec.weights[n] for n in names]
        teams = ["research", "search", "vision", "inference", "ads", "speech"]
        for n in range(spec.nodes):
            itype = spec.instance_types[n % len(spec.instance_types)]
            style = spec.label_style if spec.label_style != "mixed" else ("exported" if n % 3 == 0 else "pod")
            gpus = self.node(f"node-{n:05d}", itype, label_style=style, hostname_key="Hostname" if n % 2 else "hostname",
                             signal_set="sm" if n % 4 == 0 else "prof")
            i = 0
            free = 0
            while i < len(gpus):
                scen = self.rng.choices(names, weights)[0]
                take = 1 if len(gpus) == 1 else self.rng.choice([1, 1, 2, 4])
                take = min(take, len(gpus) - i)
                if scen == "free":
                    free += take
                else:
                    ns = teams[(n + i) % len(teams)]
                    self.pod(ns, f"w{n:05d}-{i}-{scen[:4]}-x{n % 97:02d}", gpus[0].node, gpus[i:i + take], workload=f"w{n:05d}-{i}",
                             scenario=scen, team=ns)
                i += take
            if free:
                self.free_truth(gpus[0].node, free, len(gpus))


def generate_fleet(spec: FleetSpec | None = None) -> Fleet:
    """Build a fleet (objects and truth now; telemetry lazily via `Fleet.iter_series`)."""
    spec = spec or FleetSpec()
    b = _Builder(spec)
    allocation = None
    if spec.layout == "demo":
        b.demo()
    elif spec.layout == "scorecard":
        b.scorecard()
    elif spec.layout == "allocation":
        allocation = allocation_kinds.build(b)
    else:
        b.random()
    fleet = Fleet(spec, b.gpus, b.objects, b.truth, allocation=allocation)
    if spec.inference_metrics:
        fleet.extra_series.extend(_vllm_series(fleet))
    if b.pod_metrics:  # scorecard and demo: cAdvisor and serving series of the catalogue pods
        fleet.extra_series.extend(_pod_series(fleet, b.pod_metrics))
    return fleet


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


__all__ = ["BASE_TS", "Fleet", "FleetSpec", "TruthItem", "generate_fleet", "write_recording"]
