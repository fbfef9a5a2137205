"""Unit: the Kubernetes JSON → cluster-state parser shared by the live adapter and recordings."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import gpu_share_for_request
from gpuwaste.models.settings import DEFAULT_GPU_RESOURCES, ClusterReadSettings
from gpuwaste.sources.k8s_objects import cluster_state_from_objects, node_from_dict, pod_from_dict

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REAL_K8S = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real" / "k8s"


def pod(
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    node: str | None = "n1",
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ml"}, "spec": spec, "status": {"phase": phase}}


def container(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "c", "resources": resources}


def node(labels: dict[str, str], capacity: dict[str, str] | None = None, name: str = "n1") -> dict[str, Any]:
    status = {"capacity": capacity or {}, "allocatable": capacity or {}}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "status": status}


# -- requests ---------------------------------------------------------------------------------------------
def test_pod_from_dict_takes_limits_before_requests() -> None:
    # GIVEN a container whose GPU limit and request differ (the apiserver forbids it, recordings may not)
    obj = pod([container(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})])
    # WHEN
    parsed = pod_from_dict(obj)
    # THEN the limit wins
    assert parsed.gpu_requests == {"nvidia.com/gpu": 2}


def test_pod_from_dict_uses_requests_when_no_limit() -> None:
    # GIVEN only a request
    obj = pod([container(requests={"nvidia.com/gpu": "3"})])
    # WHEN / THEN
    assert pod_from_dict(obj).gpu_requests == {"nvidia.com/gpu": 3}


def test_pod_from_dict_effective_request_is_max_of_init_and_app_sum_b11() -> None:
    # GIVEN two app containers with 1 GPU each and an init container with 4, another pod's init with 1
    big_init = pod([container({"nvidia.com/gpu": "1"}), container({"nvidia.com/gpu": "1"})], init=[container({"nvidia.com/gpu": "4"})])
    small_init = pod([container({"nvidia.com/gpu": "1"}), container({"nvidia.com/gpu": "1"})], init=[container({"nvidia.com/gpu": "1"})])
    # WHEN / THEN max(largest init, sum of app containers)
    assert pod_from_dict(big_init).gpu_requests == {"nvidia.com/gpu": 4}
    assert pod_from_dict(small_init).gpu_requests == {"nvidia.com/gpu": 2}


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.40gb"])
def test_pod_from_dict_recognises_default_gpu_resources_b20(resource: str) -> None:
    # GIVEN a pod asking for one unit of the resource
    obj = pod([container({resource: "1", "cpu": "4"})])
    # WHEN / THEN it is a GPU request, and cpu is not
    assert pod_from_dict(obj).gpu_requests == {resource: 1}


def test_custom_gpu_resource_name_from_settings_b20() -> None:
    # GIVEN AWS's virtual-GPU resource, unknown by default, registered in the settings
    read = ClusterReadSettings(gpu_resource_names=(*DEFAULT_GPU_RESOURCES, "k8s.amazonaws.com/vgpu"))
    items = [pod([container({"k8s.amazonaws.com/vgpu": "10"})]), node({}, {"k8s.amazonaws.com/vgpu": "40"})]
    # WHEN
    default_state = cluster_state_from_objects(items, cluster="c", observed_at=AT)
    custom_state = cluster_state_from_objects(items, cluster="c", observed_at=AT, settings=read)
    # THEN only the configured parser sees the pod as a GPU pod; the node's capacity is read either way
    assert default_state.pods == ()
    assert custom_state.pods[0].gpu_requests == {"k8s.amazonaws.com/vgpu": 10}
    assert custom_state.nodes[0].capacity_gpu == {"k8s.amazonaws.com/vgpu": 40}


# -- who holds GPUs ------------------------------------------------------------------------------------------
def test_unscheduled_pod_does_not_hold_gpus_b11() -> None:
    # GIVEN a Pending pod without nodeName
    obj = pod([container({"nvidia.com/gpu": "4"})], phase="Pending", node=None)
    # WHEN
    parsed = pod_from_dict(obj)
    # THEN it requests GPUs but holds none
    assert parsed.gpu_requests == {"nvidia.com/gpu": 4}
    assert parsed.holds_gpus is False


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_does_not_hold_gpus_b11(phase: str) -> None:
    # GIVEN a finished pod still bound to its node
    obj = pod([container({"nvidia.com/gpu": "8"})], phase=phase)
    # WHEN / THEN
    assert pod_from_dict(obj).holds_gpus is False


def test_running_scheduled_pod_holds_gpus() -> None:
    # GIVEN / WHEN / THEN
    assert pod_from_dict(pod([container({"nvidia.com/gpu": "1"})])).holds_gpus is True


# -- malformed input ----------------------------------------------------------------------------------------
def test_pod_without_name_is_input_format_error() -> None:
    # GIVEN a pod without metadata.name
    obj = pod([container({"nvidia.com/gpu": "1"})])
    del obj["metadata"]["name"]
    # WHEN / THEN
    with pytest.raises(InputFormatError, match=r"Pod object without metadata\.name"):
        pod_from_dict(obj)


def test_non_integer_gpu_quantity_names_pod_and_field() -> None:
    # GIVEN a GPU quantity "abc"
    obj = pod([container({"nvidia.com/gpu": "abc"})], name="bad-qty")
    # WHEN / THEN the error names the object, the container path and the resource
    with pytest.raises(InputFormatError) as err:
        pod_from_dict(obj)
    message = str(err.value)
    assert "Pod ml/bad-qty" in message
    assert "spec.containers[0].resources['nvidia.com/gpu']" in message
    assert "'abc'" in message


def test_bad_timestamp_names_pod_and_field() -> None:
    # GIVEN a startTime that is not RFC 3339
    obj = pod([container({"nvidia.com/gpu": "1"})], name="bad-ts")
    obj["status"]["startTime"] = "yesterday"
    # WHEN / THEN
    with pytest.raises(InputFormatError, match=r"Pod ml/bad-ts\.status\.startTime: not an RFC 3339 time"):
        pod_from_dict(obj)


def test_unknown_phase_names_pod_and_field() -> None:
    # GIVEN a phase the API does not have
    obj = pod([container({"nvidia.com/gpu": "1"})], phase="Sleeping", name="odd")
    # WHEN / THEN
    with pytest.raises(InputFormatError, match=r"Pod ml/odd: unknown status\.phase 'Sleeping'"):
        pod_from_dict(obj)


def test_node_with_bad_gpu_capacity_names_node_and_field() -> None:
    # GIVEN a node whose GPU capacity is not a number
    obj = node({}, {"nvidia.com/gpu": "eight"}, name="n9")
    # WHEN / THEN
    with pytest.raises(InputFormatError, match=r"Node n9\.status\.capacity\['nvidia\.com/gpu'\]"):
        node_from_dict(obj)


def test_object_without_kind_is_input_format_error() -> None:
    # GIVEN a List item without kind (not the output of kubectl get -o json)
    # WHEN / THEN
    with pytest.raises(InputFormatError, match=r"items\[1\] has no kind"):
        cluster_state_from_objects([node({}), {"metadata": {"name": "x"}}], cluster="c", observed_at=AT)


# -- nodes --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("label", "value", "expected"),
    [
        ("karpenter.sh/capacity-type", "spot", "spot"),
        ("karpenter.sh/capacity-type", "on-demand", "on-demand"),
        ("eks.amazonaws.com/capacityType", "SPOT", "spot"),
        ("eks.amazonaws.com/capacityType", "ON_DEMAND", "on-demand"),
        ("cloud.google.com/gke-spot", "true", "spot"),
        ("cloud.google.com/gke-preemptible", "true", "spot"),
        ("kubernetes.azure.com/scalesetpriority", "spot", "spot"),
        ("kubernetes.azure.com/scalesetpriority", "regular", "on-demand"),
    ],
)
def test_node_capacity_type_from_provider_labels(label: str, value: str, expected: str) -> None:
    # GIVEN a node labelled by Karpenter, EKS managed node groups, GKE or AKS
    # WHEN / THEN
    assert node_from_dict(node({label: value})).capacity_type == expected


def test_node_capacity_type_false_label_does_not_hide_a_later_one() -> None:
    # GIVEN GKE's spot label set to "false" on a preemptible node
    labels = {"cloud.google.com/gke-spot": "false", "cloud.google.com/gke-preemptible": "true"}
    # WHEN / THEN the later, positive label decides; "false" alone means on-demand
    assert node_from_dict(node(labels)).capacity_type == "spot"
    assert node_from_dict(node({"cloud.google.com/gke-spot": "false"})).capacity_type == "on-demand"


def test_node_without_capacity_label_has_unknown_capacity_type() -> None:
    # GIVEN / WHEN / THEN
    assert node_from_dict(node({"kubernetes.io/hostname": "n1"})).capacity_type is None


def test_mig_single_node_unit_is_one_seventh_of_a_gpu_b08() -> None:
    # GIVEN the field guide's MIG single node: 14 "GPUs" that are 1g.12gb slices of 2 H100 NVL
    obj = {
        "kind": "Node",
        "metadata": {
            "name": "aks-h100",
            "labels": {
                "nvidia.com/mig.strategy": "single",
                "nvidia.com/gpu.count": "14",
                "nvidia.com/gpu.product": "NVIDIA-H100-NVL-MIG-1g.12gb",
                "node.kubernetes.io/instance-type": "Standard_NC80adis_H100_v5",
            },
        },
        "status": {"capacity": {"nvidia.com/gpu": "14"}},
    }
    # WHEN
    parsed = node_from_dict(obj)
    # THEN the labels are read as they are, and one nvidia.com/gpu unit is 1/7 of a physical GPU
    assert (parsed.gpu_count_label, parsed.gpu_product, parsed.mig_strategy) == (14, "NVIDIA-H100-NVL-MIG-1g.12gb", "single")
    assert parsed.capacity_gpu == {"nvidia.com/gpu": 14}
    assert parsed.instance_type == "Standard_NC80adis_H100_v5"
    assert gpu_share_for_request("nvidia.com/gpu", 1, parsed) == Decimal(1) / 7


def test_mig_mixed_resource_share_is_slices_over_seven() -> None:
    # GIVEN / WHEN / THEN a 3g.40gb unit is 3/7 of a GPU whatever the node
    assert gpu_share_for_request("nvidia.com/mig-3g.40gb", 2, None) == Decimal(3) / 7 * 2


def _real_labels(name: str) -> dict[str, str]:
    path = REAL_K8S / name
    if not path.exists():
        pytest.skip(f"real data absent: {path} (the ../shared/data/real folder is not in this checkout)")
    labels: dict[str, str] = json.loads(path.read_text())
    return labels


def test_real_gfd_labels_mig_single_node() -> None:
    # GIVEN NVIDIA's documented label dump of an H100 node in MIG "single" strategy, wrapped in a Node
    labels = _real_labels("k1-nvidia-docs-h100-mig-single-node-labels.json")
    # WHEN
    parsed = node_from_dict({"kind": "Node", "metadata": {"name": labels["kubernetes.io/hostname"], "labels": labels}})
    # THEN
    assert parsed.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert parsed.gpu_count_label == 1
    assert parsed.gpu_memory_mib == 81559
    assert parsed.mig_strategy == "single"
    assert parsed.gpu_replicas == 1
    # "all-disabled" MIG config: the product has no -MIG- suffix, so a unit is a whole GPU
    assert gpu_share_for_request("nvidia.com/gpu", 1, parsed) == Decimal(1)


def test_real_gfd_labels_mig_mixed_node() -> None:
    # GIVEN the "mixed" strategy dump (gpu.replicas "0", per-profile mig-* labels)
    labels = _real_labels("k2-nvidia-docs-h100-mig-mixed-node-labels.json")
    # WHEN
    parsed = node_from_dict({"kind": "Node", "metadata": {"name": labels["kubernetes.io/hostname"], "labels": labels}})
    # THEN replicas "0" is read as no time-slicing, and mig-* units are priced by their slices
    assert parsed.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert parsed.gpu_count_label == 1
    assert parsed.mig_strategy == "mixed"
    assert parsed.gpu_replicas == 1
    assert gpu_share_for_request("nvidia.com/mig-2g.20gb", 1, parsed) == Decimal(2) / 7


# -- cluster state ------------------------------------------------------------------------------------------
def test_exporter_pod_is_recorded_and_not_a_workload() -> None:
    # GIVEN a dcgm-exporter pod (no GPU request) and a GPU pod
    exporter = pod([container({})], name="nvidia-dcgm-exporter-x7k2p")
    exporter["metadata"]["namespace"] = "gpu-operator"
    exporter["status"]["podIP"] = "10.244.1.7"
    items = [exporter, pod([container({"nvidia.com/gpu": "1"})], name="train"), node({"nvidia.com/gpu.product": "NVIDIA-L4"})]
    # WHEN
    state = cluster_state_from_objects(items, cluster="c", observed_at=AT)
    # THEN the exporter maps to its node (name and IP) and only the GPU pod is a pod
    assert state.exporter_pods == {"nvidia-dcgm-exporter-x7k2p": "n1"}
    assert state.exporter_pod_ips == {"10.244.1.7": "n1"}
    assert [p.name for p in state.pods] == ["train"]


def test_owner_inferred_from_pod_template_hash_when_replicasets_not_listed() -> None:
    # GIVEN a pod owned by a ReplicaSet and no controller objects at all
    obj = pod([container({"nvidia.com/gpu": "1"})], name="web-5d4f8c9b7-abcde")
    obj["metadata"]["labels"] = {"pod-template-hash": "5d4f8c9b7"}
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f8c9b7", "controller": True}]
    # WHEN
    state = cluster_state_from_objects([obj], cluster="c", observed_at=AT, listed_kinds=())
    # THEN the Deployment is inferred, and its existence is not judged
    workload = state.pods[0].workload
    assert (workload.kind, workload.name, workload.resolution, workload.exists) == ("Deployment", "web", "inferred", None)
