"""The fleet builder: the cluster objects (namespaces, nodes, pods and their owners) and the ground truth of each layout.

`generate_fleet` (`fleet.generator`) drives it; `fleet.allocation_kinds` builds the "allocation" layout with it.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from gpuwaste.fleet.parts import TruthItem, _Gpu, _iso, _uid
from gpuwaste.fleet.spec import INSTANCES, SCENARIOS, FleetSpec
from gpuwaste.sources.exposition import RecordedSeries


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
