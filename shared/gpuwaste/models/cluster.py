"""Models: Kubernetes cluster state as the scan needs it (pods holding GPUs, nodes, owners).

Built from the Kubernetes API or from a recorded `kubectl get pods,nodes -A -o json` List; never holds
SDK types.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from pydantic import Field

from gpuwaste.models.base import Frozen
from gpuwaste.models.dra import DeviceClass, PodClaimRef, ResourceClaim, ResourceSlice
from gpuwaste.models.gpu_models import DEFAULT_MIG_TOTAL_SLICES, mig_total_slices_of


class PodPhase(StrEnum):
    """Pod `status.phase` values."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class OwnerRef(Frozen):
    """One `metadata.ownerReferences[]` entry."""

    api_version: str = ""
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


class Workload(Frozen):
    """The top controller that owns a pod (Deployment, CronJob, StatefulSet, custom resource...).

    Attributes:
        kind: controller kind; "Pod" for a bare pod.
        resolution: "api" when every hop was read from the cluster, "inferred" when a hop was
            derived from naming conventions (ReplicaSet `<deployment>-<pod-template-hash>`, Job
            `<cronjob>-<scheduled minute>`), "first-hop" when only the pod's own owner is known.
        exists: False when an owner in the chain is known to be gone (orphan), None when unknown.
    """

    kind: str
    name: str
    namespace: str
    api_version: str = ""
    resolution: str = "api"
    exists: bool | None = None
    chain: tuple[str, ...] = ()


#: A pod object's identity: (namespace, name, uid) — `Pod.identity`.
PodIdentity = tuple[str, str, str]


class Pod(Frozen):
    """A pod that may hold a GPU: it requests a GPU resource, holds a DRA ResourceClaim, or asks for a share
    (HAMi `nvidia.com/gpucores`/`gpumem`, KAI/Run:ai `gpu-fraction`/`gpu-memory` annotations).

    Attributes:
        gpu_requests: effective request per GPU resource name (limits first, else requests;
            max(largest init container, sum of app containers)), as integers.
        share_requests: effective request of resources that size a GPU share without being GPUs (HAMi
            `nvidia.com/gpucores` percent, `nvidia.com/gpumem` MiB, `nvidia.com/gpumem-percentage` percent).
        resource_claims: the pod's `spec.resourceClaims` (DRA), with the claim each resolved to.
        scheduler_name: `spec.schedulerName` ("kai-scheduler", "hami-scheduler", ...); None for the default.
        cpu_limit_cores: sum of the app containers' CPU limits (cores); None when any has no limit.
        started_at / finished_at: the pod's start and completion (or disappearance) time; a pod holds its GPUs
            between them at most (a Job that finished mid-window held them for its lifetime only).
        gone_at: when the pod was last seen, for a pod that no longer existed at the observation time (deleted
            in the window; from kube-state-metrics history). None while it exists.
    """

    namespace: str
    name: str
    uid: str = ""
    phase: PodPhase = PodPhase.UNKNOWN
    node_name: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_refs: tuple[OwnerRef, ...] = ()
    workload: Workload
    gpu_requests: dict[str, int] = Field(default_factory=dict)
    containers: tuple[str, ...] = ()
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    deletion_requested: bool = False
    pod_ip: str | None = None
    host_ip: str | None = None
    container_images: tuple[str, ...] = ()
    container_args: tuple[str, ...] = ()
    cpu_limit_cores: float | None = None
    share_requests: dict[str, int] = Field(default_factory=dict)
    resource_claims: tuple[PodClaimRef, ...] = ()
    scheduler_name: str | None = None
    gone_at: datetime | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name): how DCGM's pod labels name the pod."""
        return (self.namespace, self.name)

    @property
    def identity(self) -> PodIdentity:
        """(namespace, name, uid): one pod object. A pod recreated under the same name (a StatefulSet pod rescheduled on
        another node) is another pod, with a holding of its own (issue 21 §4)."""
        return (self.namespace, self.name, self.uid)

    @property
    def live(self) -> bool:
        """True when the pod is scheduled, not terminal and still exists, so whatever it was allocated is held now
        (B11; a pod deleted in the window has `gone_at`)."""
        return bool(self.node_name) and self.gone_at is None and self.phase in (PodPhase.RUNNING, PodPhase.PENDING, PodPhase.UNKNOWN)

    @property
    def holds_gpus(self) -> bool:
        """True when the pod holds its GPUs now: scheduled and not terminal (field guide B11), with a GPU request,
        a GPU-share request (HAMi), a DRA claim, or a KAI/Run:ai fraction annotation."""
        asks = self.gpu_requests or self.share_requests or self.resource_claims or (
            "gpu-fraction" in self.annotations or "gpu-memory" in self.annotations)
        return bool(asks) and self.live


class Node(Frozen):
    """A node that carries GPUs (by resource, GFD label, or DCGM series).

    Attributes:
        capacity_type: "on-demand", "spot" or None when unknown.
        gpu_memory_mib: GFD `nvidia.com/gpu.memory` (MiB); under MIG single it is the slice's memory.
        gpu_replicas: GFD `nvidia.com/gpu.replicas` (time-slicing replicas per GPU), 1 when absent.
        allocatable_gpu: allocatable count per GPU resource name.
        gone_at: when the node was last seen, when it left the cluster inside the window (its series ended before the
            evaluation time: kube-state-metrics history); None while it exists.
    """

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    instance_type: str | None = None
    capacity_type: str | None = None
    region: str | None = None
    zone: str | None = None
    provider_id: str | None = None
    internal_ips: tuple[str, ...] = ()
    gpu_product: str | None = None
    gpu_count_label: int | None = None
    gpu_memory_mib: int | None = None
    gpu_replicas: int = 1
    mig_strategy: str | None = None
    capacity_gpu: dict[str, int] = Field(default_factory=dict)
    allocatable_gpu: dict[str, int] = Field(default_factory=dict)
    created_at: datetime | None = None
    unschedulable: bool = False
    gone_at: datetime | None = None

    @property
    def hostname_label(self) -> str | None:
        """`kubernetes.io/hostname`, which may differ from the node name."""
        return self.labels.get("kubernetes.io/hostname")


class ClusterState(Frozen):
    """A read of the cluster at one time.

    Attributes:
        pods: pods that request GPU resources (any phase), plus GPU exporter pods (see `exporter_pods`).
        exporter_pods: dcgm-exporter pods (name → node), used to resolve `Hostname` = pod name (B03).
        workloads_known: "Kind/namespace/name" of controllers the source listed, to tell orphans.
        owner_kinds_listed: controller kinds the source listed completely (existence is only
            judged for these).
        resource_claims, resource_slices, device_classes: DRA objects (`resource.k8s.io`), empty when the
            cluster has none or the source could not list them (`dra_listed` False).
        source: where the state came from (Kubernetes API URL, recording file, kube-state-metrics).
        notes: data-quality notes about the state itself: what the source could not see and what it costs
            (KSM label allow-lists missing, API and KSM disagreeing).
        query_count: PromQL queries the read made (kube-state-metrics; 0 for the Kubernetes API and recordings).
    """

    cluster: str
    observed_at: datetime
    pods: tuple[Pod, ...] = ()
    nodes: tuple[Node, ...] = ()
    exporter_pods: dict[str, str] = Field(default_factory=dict)
    exporter_pod_ips: dict[str, str] = Field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = Field(default_factory=dict)
    namespace_annotations: dict[str, dict[str, str]] = Field(default_factory=dict)
    workloads_known: frozenset[str] = frozenset()
    owner_kinds_listed: frozenset[str] = frozenset()
    source: str = ""
    resource_claims: tuple[ResourceClaim, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()
    dra_listed: bool = False
    notes: tuple[str, ...] = ()
    query_count: int = 0


def gpu_share_for_request(resource: str, count: int, node: Node | None, *, model_name: str | None = None) -> Decimal:
    """Physical-GPU equivalents held by `count` units of GPU `resource` on `node`.

    MIG mixed (`nvidia.com/mig-3g.40gb`, `nvidia.com/mig-1g.24gb+gfx`) and MIG single (`nvidia.com/gpu` on a
    node whose GFD product ends in `-MIG-<N>g.<M>gb[+xxx|-xxx]`) units are N/S of a GPU, S being the GPU
    model's compute slices from the GPU catalogue (`models.gpu_models`: 7 on A100/H100/H200/B200/GB200, 4 on A30
    and RTX PRO 6000 Blackwell; field guide B07/B08/B31). Time-sliced units are 1/replicas of a GPU. Anything
    else counts as one GPU per unit.

    Args:
        model_name: the GPU model as DCGM spells it, when known (preferred over the node's GFD product).
    """
    fraction = Decimal(1)
    slices = _mig_slices(resource)
    if slices is None and node is not None and node.gpu_product and "-MIG-" in node.gpu_product.upper():
        slices = _mig_slices(node.gpu_product.upper().split("-MIG-", 1)[1].lower())
    if slices is not None:
        fraction = Decimal(slices) / Decimal(mig_total_slices(node, model_name=model_name))
    elif node is not None and node.gpu_replicas > 1:
        fraction = Decimal(1) / Decimal(node.gpu_replicas)
    return fraction * count


def mig_total_slices(node: Node | None, *, model_name: str | None = None) -> int:
    """Compute slices of the node's MIG GPU from the GPU catalogue (`models.gpu_models`).

    The model comes from `model_name` (DCGM `modelName`) when given, else the node's GFD product / GKE
    accelerator. A model the catalogue does not know (or no model at all) falls back to 7, the slice count of
    every MIG GPU except A30 and RTX PRO 6000 Blackwell.
    """
    for name in (model_name, node.gpu_product if node else None):
        slices = mig_total_slices_of(name)
        if slices is not None:
            return slices
    return DEFAULT_MIG_TOTAL_SLICES


def _mig_slices(text: str) -> int | None:
    name = text.rsplit("/", 1)[-1]
    name = name.removeprefix("mig-")
    head, sep, _ = name.partition("g.")
    if sep and head.isdigit():
        return int(head)
    return None
