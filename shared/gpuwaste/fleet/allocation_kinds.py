"""Fleet generator: one cluster that hands out GPUs every way at once, with its allocation ground truth.

The "allocation" layout puts side by side: device-plugin GPUs (`nvidia.com/gpu`), DRA claims (ResourceClaims,
a ResourceSlice, DeviceClasses; no `nvidia.com/gpu` capacity; the exporter's `dra_*` labels; a claim shared by
two pods), HAMi shares (capacity 40 on 4 GPUs, `gpucores`, `hami.io/vgpu-devices-allocated`, no pod labels on
the series), KAI/Run:ai fractions (reservation pods in `runai-reservation` that the exporter labels, fractional
notebooks with `gpu-fraction` and `runai-gpu-group`) and Blackwell MIG (RTX PRO 6000, 4 slices, a `+gfx`
profile). Objects are shaped as the API server serves them (field guide B25, B27, B28, B31).

`AllocationTruth` records what a correct scan must conclude: each holder's mechanism, GPU share, team and
devices; the infrastructure pods that must never be owners; the physical GPUs per node; and the findings
(as `TruthItem`s, in the builder's truth list) — idle holders, free capacity, busy look-alikes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuwaste.fleet.parts import TruthItem, _Gpu, _iso, _uid

if TYPE_CHECKING:
    from gpuwaste.fleet.builder import _Builder

DRA_DRIVER = "gpu.nvidia.com"
RTX = ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, 600.0)


@dataclass(frozen=True)
class HolderTruth:
    """What one pod holds: mechanism, physical-GPU share, team (namespace), physical GPU UUIDs."""

    namespace: str
    pod: str
    node: str
    mechanism: str
    share: float
    devices: tuple[str, ...]
    scenario: str


@dataclass
class AllocationTruth:
    """The allocation ground truth of the "allocation" layout."""

    holders: list[HolderTruth] = field(default_factory=list)
    infrastructure: list[tuple[str, str]] = field(default_factory=list)
    physical_gpus: dict[str, int] = field(default_factory=dict)
    free_gpus: dict[str, float] = field(default_factory=dict)

    def holder(self, namespace: str, pod: str) -> HolderTruth:
        """The truth of one pod (KeyError when it holds nothing)."""
        for h in self.holders:
            if (h.namespace, h.pod) == (namespace, pod):
                return h
        raise KeyError(f"{namespace}/{pod}")


def build(b: _Builder) -> AllocationTruth:
    """Add the mixed-allocation cluster to builder `b` (objects, GPUs, truth items); return its allocation truth."""
    truth = AllocationTruth()
    for ns, team in (("research", "research"), ("search", "search-infra"), ("inference", "ml-serving"), ("embed", "embeddings"),
                     ("genai", "genai"), ("ml", "ml"), ("viz", "viz"), ("runai-reservation", "platform")):
        b.namespace(ns, team)
    _device_plugin(b, truth)
    _dra(b, truth)
    _hami(b, truth)
    _kai(b, truth)
    _blackwell_mig(b, truth)
    for node, free in truth.free_gpus.items():
        if free > 0:
            b.free_truth(node, round(free, 4), truth.physical_gpus[node])
    return truth


# -- the five node kinds ------------------------------------------------------------------------------------


def _device_plugin(b: _Builder, truth: AllocationTruth) -> None:
    g = b.node("ip-10-1-0-10.ec2.internal", "g5.12xlarge")
    node = g[0].node
    b.pod("research", "dp-train-5c4d7-a1b2c", node, g[0:2], workload="dp-train", scenario="busy", team="research")
    b.pod("search", "dp-embed-6f8b9-q8m2z", node, g[2:3], workload="dp-embed", scenario="idle", team="search-infra")
    truth.holders += [HolderTruth("research", "dp-train-5c4d7-a1b2c", node, "device-plugin", 2.0, _uuids(g[0:2]), "busy"),
                      HolderTruth("search", "dp-embed-6f8b9-q8m2z", node, "device-plugin", 1.0, _uuids(g[2:3]), "idle")]
    truth.physical_gpus[node], truth.free_gpus[node] = 4, 1.0


def _dra(b: _Builder, truth: AllocationTruth) -> None:
    g = b.node("ip-10-1-0-20.ec2.internal", "p5.48xlarge")
    node = g[0].node
    node_obj = _node_obj(b, node)
    for section in ("capacity", "allocatable"):
        node_obj["status"][section].pop("nvidia.com/gpu", None)  # DRA: the node advertises no nvidia.com/gpu (B25)
    b.objects.append(_slice(node, g))
    b.objects.extend(_device_classes())
    # trainer-0: 4 GPUs through its own claim, idle; the exporter labels them with the pod and the claim
    _claim_pod(b, "research", "trainer-0", node, "trainer-0-gpus-x7k2p", team="research")
    b.objects.append(_claim("research", "trainer-0-gpus-x7k2p", node, [f"gpu-{i}" for i in range(4)], [("research", "trainer-0")]))
    for i in range(4):
        _own(g[i], ("research", "trainer-0", "main"), "idle")
        g[i].extra_labels = _dra_labels("research", "trainer-0-gpus-x7k2p", node, i)
    b.truth.append(_item("idle_allocation", "research", "trainer-0", node, 4.0, "idle"))
    truth.holders.append(HolderTruth("research", "trainer-0", node, "DRA", 4.0, _uuids(g[0:4]), "idle"))
    # one GPU claimed by two serving pods (shared claim): busy; the series carries the claim, not a pod
    for pod in ("serve-a", "serve-b"):
        _claim_pod(b, "inference", pod, node, "serve-shared-gpu", team="ml-serving")
        b.truth.append(_item(None, "inference", pod, node, 0.5, "busy"))
        truth.holders.append(HolderTruth("inference", pod, node, "DRA", 0.5, _uuids(g[4:5]), "busy"))
    b.objects.append(_claim("inference", "serve-shared-gpu", node, ["gpu-4"], [("inference", "serve-a"), ("inference", "serve-b")]))
    g[4].scenario, g[4].label_style = "busy", "none"
    g[4].extra_labels = _dra_labels("inference", "serve-shared-gpu", node, 4)
    truth.physical_gpus[node], truth.free_gpus[node] = 8, 3.0  # gpu-5..7 unclaimed, still reported


def _hami(b: _Builder, truth: AllocationTruth) -> None:
    g = b.node("ip-10-1-0-30.ec2.internal", "g5.12xlarge")
    node = g[0].node
    node_obj = _node_obj(b, node)
    for section in ("capacity", "allocatable"):
        node_obj["status"][section]["nvidia.com/gpu"] = "40"  # deviceSplitCount 10 (B27)
    node_obj["metadata"]["labels"]["gpu"] = "on"
    for x in g:
        x.label_style = "none"  # HAMi pods are not mapped by the exporter (HAMi#931)
    for i in range(4):
        _hami_pod(b, "embed", f"embed-k-{i}", node, g[0], cores=25, team="embeddings")
        b.truth.append(_item("idle_allocation", "embed", f"embed-k-{i}", node, 0.25, "idle"))
        truth.holders.append(HolderTruth("embed", f"embed-k-{i}", node, "HAMi", 0.25, _uuids(g[0:1]), "idle"))
    g[0].scenario = "idle"
    for i in range(2):
        _hami_pod(b, "genai", f"gen-{i}", node, g[1], cores=50, team="genai")
        b.truth.append(_item(None, "genai", f"gen-{i}", node, 0.5, "busy"))
        truth.holders.append(HolderTruth("genai", f"gen-{i}", node, "HAMi", 0.5, _uuids(g[1:2]), "busy"))
    g[1].scenario = "busy"
    truth.physical_gpus[node], truth.free_gpus[node] = 4, 2.0


def _kai(b: _Builder, truth: AllocationTruth) -> None:
    g = b.node("ip-10-1-0-40.ec2.internal", "g6e.12xlarge")
    node = g[0].node
    res_a = _reservation(b, node, g[0], "grp-a")
    res_b = _reservation(b, node, g[1], "grp-b")
    truth.infrastructure += [("runai-reservation", res_a), ("runai-reservation", res_b)]
    b.truth += [_item(None, "runai-reservation", res_a, node, 0.0, "infrastructure"), _item(None, "runai-reservation", res_b, node, 0.0, "infrastructure")]
    for nb in ("notebook-0", "notebook-1"):
        _fraction_pod(b, "ml", nb, node, "grp-a", "0.5")
        b.truth.append(_item("idle_allocation", "ml", nb, node, 0.5, "idle"))
        truth.holders.append(HolderTruth("ml", nb, node, "KAI", 0.5, _uuids(g[0:1]), "idle"))
    _own(g[0], ("runai-reservation", res_a, "runai-reservation"), "idle")
    _fraction_pod(b, "ml", "tune-0", node, "grp-b", "0.25")
    b.truth.append(_item(None, "ml", "tune-0", node, 0.25, "busy"))
    truth.holders.append(HolderTruth("ml", "tune-0", node, "KAI", 0.25, _uuids(g[1:2]), "busy"))
    _own(g[1], ("runai-reservation", res_b, "runai-reservation"), "busy")
    truth.physical_gpus[node], truth.free_gpus[node] = 4, 2.75  # 0.75 of GPU 1 reserved for nobody, GPUs 2-3


def _blackwell_mig(b: _Builder, truth: AllocationTruth) -> None:
    whole = b.node("ip-10-1-0-50.ec2.internal", "g5.12xlarge", gpus_override=2)
    node = whole[0].node
    for x in whole:
        b.gpus.remove(x)
    model, product, fb, plimit = RTX
    node_obj = _node_obj(b, node)
    labels = node_obj["metadata"]["labels"]
    labels.update({"node.kubernetes.io/instance-type": "g7e.12xlarge", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "2",
                   "nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.memory": str(fb)})
    mig_res = {"nvidia.com/mig-1g.24gb": "2", "nvidia.com/mig-2g.48gb": "1", "nvidia.com/mig-4g.96gb": "1"}
    for section in ("capacity", "allocatable"):
        node_obj["status"][section].pop("nvidia.com/gpu", None)
        node_obj["status"][section].update(mig_res)
    base = whole[0]
    layout = [(0, "7", "1g.24gb+gfx"), (0, "8", "1g.24gb"), (0, "9", "2g.48gb"), (1, "7", "4g.96gb")]
    inst: list[_Gpu] = []
    for gpu, gi, profile in layout:
        x = _Gpu(whole[gpu].uuid, gpu, node, model, fb * int(profile[0]) // 4, plimit, (gi, profile), signal_set="prof",
                 label_style="pod", hostname_key=base.hostname_key, hostname_value=base.hostname_value, exporter_pod=base.exporter_pod)
        inst.append(x)
    b.gpus.extend(inst)
    plan = [("render-1", inst[0], "nvidia.com/mig-1g.24gb", 0.25, "idle"), ("render-2", inst[1], "nvidia.com/mig-1g.24gb", 0.25, "busy"),
            ("sim-0", inst[3], "nvidia.com/mig-4g.96gb", 1.0, "idle")]
    for pod, dev, resource, share, scen in plan:
        b.pod("viz", pod, node, [dev], workload=pod, resource=resource, scenario=scen, team="viz", owner="Pod", expect=None)
        b.truth[-1] = _item("idle_allocation" if scen == "idle" else None, "viz", pod, node, share, scen)
        truth.holders.append(HolderTruth("viz", pod, node, "mig", share, (dev.uuid,), scen))
    truth.physical_gpus[node], truth.free_gpus[node] = 2, 0.5  # the 2g.48gb instance is free


# -- objects --------------------------------------------------------------------------------------------------


def _uuids(gpus: list[_Gpu]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(g.uuid for g in gpus))


def _own(g: _Gpu, owner: tuple[str, str, str], scenario: str) -> None:
    g.owner, g.scenario = owner, scenario


def _item(kind: str | None, ns: str, pod: str, node: str, gpus: float, scenario: str) -> Any:
    return TruthItem(kind=kind, namespace=ns, pod=pod, node=node, workload=pod, gpus=gpus, scenario=scenario)


def _node_obj(b: _Builder, name: str) -> dict[str, Any]:
    return next(o for o in b.objects if o.get("kind") == "Node" and o["metadata"]["name"] == name)


def _meta(b: _Builder, ns: str, name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": _uid(ns, name), "labels": {"app": name, **(labels or {})},
                            "creationTimestamp": _iso(b.t_eval - 86430)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _status(b: _Builder) -> dict[str, Any]:
    return {"phase": "Running", "startTime": _iso(b.t_eval - 86400), "podIP": f"10.244.7.{len(b.objects) % 250}"}


def _claim_pod(b: _Builder, ns: str, name: str, node: str, claim: str, *, team: str) -> None:
    b.namespace(ns, team)
    b.objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": _meta(b, ns, name),
                      "spec": {"nodeName": node, "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
                               "containers": [{"name": "main", "image": "ghcr.io/example/trainer:1.4", "resources": {"claims": [{"name": "gpus"}]}}]},
                      "status": _status(b)})


def _claim(ns: str, name: str, node: str, devices: list[str], consumers: list[tuple[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns, "uid": _uid("claim", ns, name)},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                                                                           "count": len(devices)}}]}},
            "status": {"allocation": {"devices": {"results": [{"request": "gpus", "driver": DRA_DRIVER, "pool": node, "device": d} for d in devices]}},
                       "reservedFor": [{"resource": "pods", "name": p, "uid": _uid(cns, p)} for cns, p in consumers]}}


def _slice(node: str, gpus: list[_Gpu]) -> dict[str, Any]:
    devices = [{"name": f"gpu-{g.index}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": g.uuid}, "productName": {"string": g.model},
                                                         "index": {"int": g.index}}} for g in gpus]
    digest = hashlib.sha256(node.encode()).hexdigest()[:5]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRA_DRIVER}-{digest}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def _device_classes() -> list[dict[str, Any]]:
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": n},
             "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == '{t}'"}}]}}
            for n, t in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"))]


def _dra_labels(ns: str, claim: str, node: str, index: int) -> dict[str, str]:
    return {"dra_claim_name": claim, "dra_claim_namespace": ns, "dra_driver_name": DRA_DRIVER, "dra_pool_name": node, "dra_device_name": f"gpu-{index}"}


def _hami_pod(b: _Builder, ns: str, name: str, node: str, gpu: _Gpu, *, cores: int, team: str) -> None:
    b.namespace(ns, team)
    mem = 24576 * cores // 100
    res = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": str(cores), "nvidia.com/gpumem": str(mem)}
    ann = {"hami.io/vgpu-devices-allocated": f"{gpu.uuid},NVIDIA,{mem},{cores}:;", "hami.io/bind-phase": "success"}
    b.objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": _meta(b, ns, name, annotations=ann),
                      "spec": {"nodeName": node, "schedulerName": "hami-scheduler",
                               "containers": [{"name": "main", "image": "ghcr.io/example/embed:2", "resources": {"limits": res, "requests": res}}]},
                      "status": _status(b)})


def _reservation(b: _Builder, node: str, gpu: _Gpu, group: str) -> str:
    name = f"runai-reservation-gpu-{node.split('.')[0]}-{hashlib.sha256(group.encode()).hexdigest()[:5]}"
    res = {"nvidia.com/gpu": "1"}
    b.objects.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": _meta(b, "runai-reservation", name, labels={"runai-gpu-group": group},
                                        annotations={"run.ai/reserve_for_gpu_index": gpu.uuid}),
                      "spec": {"nodeName": node, "containers": [{"name": "runai-reservation", "image": "runai/reservation:2.17",
                                                                 "resources": {"limits": res, "requests": res}}]},
                      "status": _status(b)})
    return name


def _fraction_pod(b: _Builder, ns: str, name: str, node: str, group: str, fraction: str) -> None:
    b.objects.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": _meta(b, ns, name, labels={"runai-gpu-group": group}, annotations={"gpu-fraction": fraction}),
                      "spec": {"nodeName": node, "schedulerName": "kai-scheduler", "containers": [{"name": "nb", "image": "jupyter/base:2026.1"}]},
                      "status": _status(b)})
